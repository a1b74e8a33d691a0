"""The `yana` command: `yana up` runs everything with nothing configured; `yana api|worker|flower`
start one piece each against REDIS_URL / CHROMA_URL for real deployments."""

from __future__ import annotations

import base64
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from cli import data, processes
from cli.api_link import UP_ENV, read_up_env
from yana.settings import get_settings

app = typer.Typer(
    help="yana: label knowledge, hybrid search, chat and jobs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",  # docstrings reflow as paragraphs instead of breaking at their newlines
)
console = Console(stderr=True)


def _flower_env() -> dict[str, str]:
    """Flower's API answers only when authenticated or explicitly opened: with auth on, the
    API's bearer tokens (through the environment, never the command line); with auth off,
    FLOWER_UNAUTHENTICATED_API (Flower's own setting)."""
    s = get_settings()
    if s.auth_enabled:
        # FastAPI's auth module: imported here, not for the supervisor's lifetime.
        from api.contract.auth import flower_auth_env

        return flower_auth_env(s)
    os.environ.pop("FLOWER_BASIC_AUTH", None)  # Flower's own setting; auth off: no stale credentials
    if s.flower_unauthenticated_api:
        os.environ.setdefault("FLOWER_UNAUTHENTICATED_API", "true")
    return {}


def _write_up_env(data_dir: Path, stack: processes.Stack) -> None:
    lines = [
        f"REDIS_URL={stack.env['REDIS_URL']}",
        f"CHROMA_URL={stack.env['CHROMA_URL']}",
        f"YANA_API_URL={stack.get('api').url}",
        f"FLOWER_URL={stack.get('flower').url}",
        f"DATA_DIR={data_dir}",
    ]
    # Rewritten when a restarted API moves: written whole, then renamed, so no reader sees half.
    tmp = data_dir / f".{UP_ENV}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, data_dir / UP_ENV)


WEBHOOK_SECRET_FILE = "webhook_secret"


def _webhook_secret(data_dir: Path) -> str:
    """WEBHOOK_SECRET when set; else the one generated into DATA_DIR on the first `yana up` and
    reused after (webhooks keep verifying across restarts). Never the public default."""
    if os.environ.get("WEBHOOK_SECRET"):
        return os.environ["WEBHOOK_SECRET"]
    path = data_dir / WEBHOOK_SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    console.print(f"generated a webhook signing secret into {path}")
    return secret


def _warn_insecure_secret(host: str | None) -> None:
    warning = get_settings().insecure_webhook_secret(host)
    if warning:
        console.print(f"[bold red]WARNING:[/] {warning}")


def _load_up_env() -> None:
    """A command run beside `yana up` finds its services without configuration; explicit
    environment variables always win."""
    for key, value in read_up_env(Path(os.environ.get("DATA_DIR", "./data"))).items():
        os.environ.setdefault(key, value)


@app.command()
def up(
    data_dir: Annotated[
        Path,
        typer.Option(
            help="Where Redis, Chroma, images and logs live; also where up.env tells other commands the URLs."
        ),
    ] = Path("./data"),
    api_port: Annotated[
        Optional[int],
        typer.Option(
            envvar="API_PORT",
            help="API port. Default 8000, or a free one if that is taken; a port asked for explicitly must be free.",
        ),
    ] = None,
    flower_port: Annotated[
        Optional[int],
        typer.Option(envvar="FLOWER_PORT", help="Flower port. Default 5555, or a free one if that is taken."),
    ] = None,
    workers: Annotated[
        Optional[int],
        typer.Option(
            min=1,
            max=8,
            help="Celery worker processes (jobs run at once) in the pool of the one worker `yana up` starts. "
            "Default: WORKER_CONCURRENCY, which by default is the cores divided by EMBED_THREADS.",
        ),
    ] = None,
) -> None:
    """Run the whole system locally: Redis and Chroma (unless REDIS_URL / CHROMA_URL are set), one
    worker on every queue, Flower and the API. A child that dies is restarted with backoff on the
    same port; Ctrl-C stops everything, the API and workers before the stores.

    Writes DATA_DIR/up.env with the URLs, so `yana ingest`, `yana dedup-report` and the other data
    commands run beside it find the API without options.
    """
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    try:  # an explicitly requested port that is taken fails now, before anything starts
        api = processes.ServerPort(api_port, 8000, "API")
        flower = processes.ServerPort(flower_port, 5555, "Flower")
    except RuntimeError as exc:
        console.print(f"[bold red]start failed:[/] {exc}")
        raise typer.Exit(1) from None
    stack = processes.Stack(
        data_dir=data_dir,
        env=processes.child_env(
            DATA_DIR=str(data_dir),
            WEBHOOK_SECRET=_webhook_secret(data_dir),
            # The API and Flower answer their health checks with it (processes.http_ok).
            YANA_INSTANCE=secrets.token_hex(8),
        ),
    )
    stopping = {"flag": False}

    def _on_signal(signum, _frame):
        stopping["flag"] = True

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    code = 0
    starters: dict[str, Callable[[], processes.Service]] = {}

    try:
        stores: dict = {}
        if not os.environ.get("REDIS_URL"):
            redis_port = processes.free_port()
            stores["redis"] = (lambda: processes.start_redis(data_dir, redis_port, stack.log_dir, stack.env), 60)
        if not os.environ.get("CHROMA_URL"):
            chroma_port = processes.free_port()
            chroma_dir = data_dir / "chroma"
            stores["chroma"] = (lambda: processes.start_chroma(chroma_dir, chroma_port, stack.log_dir, stack.env), 60)
        _start_together(stack, starters, stores)
        for name, var in (("redis", "REDIS_URL"), ("chroma", "CHROMA_URL")):
            if name in stores:
                stack.env[var] = stack.get(name).url
        os.environ.update({k: stack.env[k] for k in ("REDIS_URL", "CHROMA_URL")})
        _prepare(stack.env)
        flower_env = {**stack.env, **_flower_env()}
        if "FLOWER_UNAUTHENTICATED_API" in os.environ:
            flower_env["FLOWER_UNAUTHENTICATED_API"] = os.environ["FLOWER_UNAUTHENTICATED_API"]
        warm = get_settings().search_warm_on_start  # up = the API holds the model and the index
        concurrency = workers or get_settings().worker_concurrency
        # Started together, then waited for: the worker loads its model while the API imports.
        _start_together(
            stack,
            starters,
            {
                "worker": (lambda: processes.start_worker(stack.env, stack.log_dir, concurrency=concurrency), 300),
                "api": (lambda: processes.start_api(stack.env, api.take(), stack.log_dir, wait_warm=warm), 180),
            },
            {"api": api},
        )
        # Flower after the worker (it asks the workers present as it starts; ~2 s without the app).
        _start_together(
            stack,
            starters,
            {"flower": (lambda: processes.start_flower(flower_env, flower.take(), stack.log_dir), 60)},
            {"flower": flower},
        )
        _write_up_env(data_dir, stack)
        console.print("[bold green]yana is up[/]")
        for svc in stack.services:
            console.print(f"  {svc.name:<7} {svc.url}")
        console.print(f"  API docs {stack.get('api').url}/docs   logs {stack.log_dir}   data {data_dir}")
        console.print("Ctrl-C to stop.")
        # A restarted API may have moved to another port: up.env follows it.
        code = _supervise(stack, starters, stopping, restarted=lambda _svc: _write_up_env(data_dir, stack))
    except RuntimeError as exc:
        console.print(f"[bold red]start failed:[/] {exc}")
        code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        t0 = time.monotonic()
        (data_dir / UP_ENV).unlink(missing_ok=True)
        stack.stop()
        console.print(f"stopped {len(stack.services)} process(es) in {time.monotonic() - t0:.1f}s")
    raise typer.Exit(code)


def _start_together(
    stack: processes.Stack, starters: dict, todo: dict, ports: dict[str, processes.ServerPort] | None = None
) -> None:
    """Spawn every service of `todo` (name -> (starter, timeout s)), then wait until each is
    healthy: up means every one of them can take work. A service of `ports` that exits while
    starting because another process took its default port (another `yana up` started at the same
    moment, between our choice and the bind) is started once more, on a free port."""
    for name, (starter, _timeout) in todo.items():
        starters[name] = starter
        stack.services.append(starter())
    for name, (starter, timeout) in todo.items():
        try:
            processes.wait_healthy(stack.get(name), timeout)
        except RuntimeError:
            port = (ports or {}).get(name)
            if port is None or stack.get(name).alive() or not port.moves():
                raise
            stack.services.remove(stack.get(name))
            console.print(f"[yellow]{name}: port {port.port} was taken meanwhile; starting it on a free port[/]")
            stack.services.append(starter())
            processes.wait_healthy(stack.get(name), timeout)


def _prepare(env: dict) -> None:
    """Run the one-time builds that are not done yet (`yana prepare`) before the worker starts,
    in a child process whose output goes to this terminal: the supervisor never imports torch or
    numba, and a second start, with everything built, skips this in milliseconds."""
    from pipelines.prepare import steps as prepare

    if not prepare.pending():
        return
    done = subprocess.run([sys.executable, "-m", "cli.main", "prepare"], env=env, timeout=1800)
    if done.returncode != 0:  # not fatal: the worker builds them on first use instead
        console.print("[yellow]the one-time builds failed (see above); the worker will retry them as it starts[/]")


# How long a restarted child has to become healthy before it counts as another crash.
RESTART_HEALTH_S = 120.0


def _supervise(
    stack: processes.Stack, starters: dict, stopping: dict, restarted: Callable[[processes.Service], None] | None = None
) -> int:
    """Watch the children until stopped: restart a dead one with backoff; give up (exit code 1)
    when one keeps crashing. A restarted child is watched for health in this same loop, never
    waited on: a worker coming back needs Redis to report healthy, so waiting on it while Redis
    died too held Redis down until the worker's wait ran out (a job succeeded 123 s after the
    worker and then Redis were killed two seconds apart; the recovery goal is 30 s).
    `restarted(service)` is called when a restarted child is healthy again."""
    policies = {name: processes.RestartPolicy() for name in starters}
    due: dict[str, float] = {}  # name -> when to restart it
    starting: dict[str, float] = {}  # name -> when its restart must be healthy by
    while not stopping["flag"]:
        now = time.monotonic()
        for svc in [s for s in stack.services if not s.alive()]:
            stack.services.remove(svc)
            starting.pop(svc.name, None)
            delay = policies[svc.name].crashed(now)
            if delay is None:
                p = policies[svc.name]
                console.print(
                    f"[bold red]{svc.name} died (exit code {svc.proc.returncode}) {len(p.crashes)} times within "
                    f"{p.window_s:.0f}s; giving up and stopping everything.[/]\n"
                    f"last lines of {svc.log_path}:\n{svc.tail()}"
                )
                return 1
            console.print(
                f"[bold yellow]{svc.name} died (exit code {svc.proc.returncode}); restarting in {delay:.1f}s.[/]\n"
                f"last lines of {svc.log_path}:\n{svc.tail(8)}"
            )
            due[svc.name] = now + delay
        for name, by in list(starting.items()):
            svc = stack.get(name)
            if svc.healthy():
                del starting[name]
                console.print(f"[green]{name} restarted[/] {svc.url}")
                if restarted is not None:
                    restarted(svc)
            elif time.monotonic() > by:  # stopped: the next round counts a crash and backs off
                del starting[name]
                console.print(f"[bold red]{name} restart failed:[/] not healthy after {RESTART_HEALTH_S:.0f}s")
                processes.stop([svc], grace_s=1.0)
        for name, at in list(due.items()):
            if now < at or stopping["flag"]:
                continue
            del due[name]
            try:
                stack.services.append(starters[name]())
            except RuntimeError as exc:  # not even spawned: a crash like any other
                console.print(f"[bold red]{name} restart failed:[/] {exc}")
                delay = policies[name].crashed(now)
                if delay is None:
                    return 1
                due[name] = now + delay
                continue
            starting[name] = time.monotonic() + RESTART_HEALTH_S
        time.sleep(0.3)
    return 0


RedisOpt = Annotated[
    Optional[str], typer.Option("--redis-url", envvar="REDIS_URL", help="Shared Redis (broker, results, indexes).")
]
ChromaOpt = Annotated[Optional[str], typer.Option("--chroma-url", envvar="CHROMA_URL", help="Shared Chroma server.")]


def _exec(
    argv: list[str], redis_url: str | None, chroma_url: str | None = None, extra_env: dict[str, str] | None = None
) -> None:
    env = {k: v for k, v in (("REDIS_URL", redis_url), ("CHROMA_URL", chroma_url)) if v}
    env.update(extra_env or {})
    os.execvpe(argv[0], argv, processes.child_env(**env))


@app.command()
def prepare(
    force: Annotated[bool, typer.Option(help="Run every step again, even those already done.")] = False,
    step: Annotated[
        Optional[list[str]], typer.Option("--step", help="Only this step (repeatable); see the list below.")
    ] = None,
) -> None:
    """Do the one-time builds ahead (once per machine): the int8 embedding encoder and the compiled
    near-duplicate kernels. `yana up` runs the steps that are not done yet before it starts the
    worker; run this in an install step or a container image build so nobody waits for them.
    """
    from pipelines.prepare import steps

    s = get_settings()
    todo = steps.pending(s) if not force else list(steps.STEPS.values())
    if step:
        unknown = set(step) - set(steps.STEPS)
        if unknown:
            console.print(f"[red]unknown step(s) {sorted(unknown)}; known: {sorted(steps.STEPS)}[/]")
            raise typer.Exit(2)
    if not todo:
        console.print(
            f"nothing to prepare: {', '.join(steps.STEPS)} done (models in {s.embed_models_dir})", soft_wrap=True
        )
        return
    t0 = time.monotonic()
    try:
        with console.status("preparing", spinner="dots") as status:

            def say(line: str) -> None:
                console.print(line, highlight=False, soft_wrap=True)
                status.update(line)

            steps.run(s, say=say, force=force, only=step)
    except Exception as exc:  # noqa: BLE001 - said with the step's name, exit code 1
        console.print(f"[bold red]prepare failed:[/] {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    console.print(f"prepared in {time.monotonic() - t0:.0f}s (models in {s.embed_models_dir})")


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 for every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(help="Uvicorn worker processes serving the API.")] = 1,
    redis_url: RedisOpt = None,
    chroma_url: ChromaOpt = None,
) -> None:
    """Serve the HTTP API (against REDIS_URL and CHROMA_URL)."""
    _warn_insecure_secret(host)
    _exec(processes.api_argv(host, port, workers), redis_url, chroma_url)


@app.command()
def worker(
    queues: Annotated[
        Optional[str], typer.Option("-Q", "--queues", help="Queues to consume, comma-separated; default: every queue.")
    ] = None,
    concurrency: Annotated[
        Optional[int],
        typer.Option("-c", "--concurrency", help="Pool processes (jobs run at once). Default: WORKER_CONCURRENCY."),
    ] = None,
    name: Annotated[str, typer.Option("-n", "--name", help="Worker name (shown in Flower as NAME@host).")] = "worker",
    redis_url: RedisOpt = None,
    chroma_url: ChromaOpt = None,
) -> None:
    """Run one Celery worker (prefork; one compute thread per child)."""
    _warn_insecure_secret(None)
    argv = processes.worker_argv(f"{name}@%h", queues, concurrency or get_settings().worker_concurrency)
    _exec(argv, redis_url, chroma_url)


@app.command()
def flower(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 5555,
    redis_url: RedisOpt = None,
) -> None:
    """Run Flower (monitoring) against REDIS_URL."""
    flower_env = _flower_env()
    _exec(processes.flower_argv(host, port), redis_url, extra_env=flower_env)


@app.command()
def mcp(
    api: Annotated[
        str, typer.Option("--api", envvar="YANA_API_URL", help="API to bridge to (default: the one `yana up` runs)")
    ] = "http://127.0.0.1:8000",
    local: Annotated[
        bool, typer.Option("--local", help="run the API inside this process instead of calling one")
    ] = False,
    token: Annotated[
        Optional[str], typer.Option("--token", envvar="YANA_API_TOKEN", help="bearer token for the API")
    ] = None,
    logs: Annotated[bool, typer.Option("--logs", help="also offer the read-only resource logs/today")] = False,
    timeout_s: Annotated[float, typer.Option(help="seconds one call to the API may take")] = 120.0,
) -> None:
    """Serve yana's MCP tools over stdio (for desktop agents and the talk app's speaker subprocess)."""
    from cli import mcp_stdio

    if local:
        if logs:
            os.environ["LOGS_RESOURCE_ENABLED"] = "true"
        api = mcp_stdio.start_local_api()
    console.print(f"yana mcp: stdio bridge to {api}/mcp", highlight=False)
    mcp_stdio.serve(api, token, logs_resource=logs, timeout_s=timeout_s)


data.register(app)  # the commands that work on a running instance's data


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] != "up":
        _load_up_env()
    app()


if __name__ == "__main__":
    main()
