"""The `yana` command: `yana up` runs everything with nothing configured; `yana api|worker|flower`
start one piece each against REDIS_URL / CHROMA_URL for real deployments."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from yana import processes

app = typer.Typer(help="yana: label knowledge, hybrid search, chat and jobs.", no_args_is_help=True, add_completion=False)
console = Console(stderr=True)


def _port_or_free(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
            return preferred
        except OSError:
            return processes.free_port()


def _flower_args() -> list[str]:
    """Flower's API answers only when authenticated or explicitly opened: with auth on, the
    API's bearer tokens; with auth off, FLOWER_UNAUTHENTICATED_API (Flower's own setting)."""
    from yana.settings import get_settings

    s = get_settings()
    if s.auth_enabled:
        from api.contract.auth import flower_auth_args

        return flower_auth_args(s)
    if s.flower_unauthenticated_api:
        os.environ.setdefault("FLOWER_UNAUTHENTICATED_API", "true")
    return []


UP_ENV = "up.env"  # where `yana up` tells other yana commands (ingest, dedup-report...) its URLs


def _write_up_env(data_dir: Path, stack: processes.Stack) -> None:
    lines = [f"REDIS_URL={stack.env['REDIS_URL']}", f"CHROMA_URL={stack.env['CHROMA_URL']}",
             f"YANA_API_URL={stack.get('api').url}", f"DATA_DIR={data_dir}"]
    (data_dir / UP_ENV).write_text("\n".join(lines) + "\n")


def _load_up_env() -> None:
    """A command run beside `yana up` finds its services without configuration; explicit
    environment variables always win."""
    path = Path(os.environ.get("DATA_DIR", "./data")) / UP_ENV
    if not path.is_file():
        return
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            os.environ.setdefault(key.strip(), value.strip())


@app.command()
def up(
    data_dir: Annotated[Path, typer.Option(help="where Redis, Chroma, images and logs live")] = Path("./data"),
    api_port: Annotated[int, typer.Option(help="API port (a free one if taken)")] = 8000,
    flower_port: Annotated[int, typer.Option(help="Flower port (a free one if taken)")] = 5555,
    workers: Annotated[int, typer.Option(min=1, max=8, help="worker processes per child pool")] = 1,
) -> None:
    """Run the whole system locally: Redis and Chroma (unless REDIS_URL / CHROMA_URL are set),
    one worker on every queue, Flower and the API. Ctrl-C stops everything."""
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    stack = processes.Stack(data_dir=data_dir, env=processes.child_env(DATA_DIR=str(data_dir)))
    stopping = {"flag": False}

    def _on_signal(signum, _frame):
        stopping["flag"] = True

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    code = 0
    try:
        if not os.environ.get("REDIS_URL"):
            svc = stack.add(processes.start_redis(data_dir, processes.free_port(), stack.log_dir, stack.env))
            stack.env["REDIS_URL"] = svc.url
        if not os.environ.get("CHROMA_URL"):
            svc = stack.add(processes.start_chroma(data_dir / "chroma", processes.free_port(), stack.log_dir, stack.env))
            stack.env["CHROMA_URL"] = svc.url
        os.environ.update({k: stack.env[k] for k in ("REDIS_URL", "CHROMA_URL")})
        stack.add(processes.start_worker(stack.env, stack.log_dir, concurrency=workers), timeout_s=120)
        flower_args = _flower_args()
        if "FLOWER_UNAUTHENTICATED_API" in os.environ:
            stack.env["FLOWER_UNAUTHENTICATED_API"] = os.environ["FLOWER_UNAUTHENTICATED_API"]
        stack.add(processes.start_flower(stack.env, _port_or_free(flower_port), stack.log_dir, flower_args))
        stack.add(processes.start_api(stack.env, _port_or_free(api_port), stack.log_dir))
        _write_up_env(data_dir, stack)
        console.print("[bold green]yana is up[/]")
        for svc in stack.services:
            console.print(f"  {svc.name:<7} {svc.url}")
        console.print(f"  API docs {stack.get('api').url}/docs   logs {stack.log_dir}   data {data_dir}")
        console.print("Ctrl-C to stop.")
        while not stopping["flag"]:
            dead = [s for s in stack.services if not s.alive()]
            if dead:
                for s in dead:
                    console.print(
                        f"[bold red]{s.name} died (exit code {s.proc.returncode}); stopping everything.[/]\n"
                        f"last lines of {s.log_path}:\n{s.tail()}"
                    )
                code = 1
                break
            time.sleep(0.3)
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


RedisOpt = Annotated[Optional[str], typer.Option("--redis-url", envvar="REDIS_URL", help="shared Redis (broker, results, indexes)")]
ChromaOpt = Annotated[Optional[str], typer.Option("--chroma-url", envvar="CHROMA_URL", help="shared Chroma server")]


def _exec(argv: list[str], redis_url: str | None, chroma_url: str | None = None) -> None:
    env = {k: v for k, v in (("REDIS_URL", redis_url), ("CHROMA_URL", chroma_url)) if v}
    os.execvpe(argv[0], argv, processes.child_env(**env))


@app.command()
def api(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
    redis_url: RedisOpt = None,
    chroma_url: ChromaOpt = None,
) -> None:
    """Serve the HTTP API (against REDIS_URL and CHROMA_URL)."""
    argv = [sys.executable, "-m", "uvicorn", "api.main:app", "--host", host, "--port", str(port), "--workers", str(workers), "--no-access-log"]
    _exec(argv, redis_url, chroma_url)


@app.command()
def worker(
    queues: Annotated[Optional[str], typer.Option("-Q", "--queues", help="comma-separated; default: every queue")] = None,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency")] = 1,
    name: Annotated[str, typer.Option("-n", "--name")] = "worker",
    redis_url: RedisOpt = None,
    chroma_url: ChromaOpt = None,
) -> None:
    """Run one Celery worker (prefork; one compute thread per child)."""
    from workers.queues import QUEUES

    argv = [
        sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker", "-Q", queues or ",".join(QUEUES),
        "-c", str(concurrency), "-n", f"{name}@%h", "-l", "INFO", "-E",
    ]
    _exec(argv, redis_url, chroma_url)


@app.command()
def flower(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 5555,
    redis_url: RedisOpt = None,
) -> None:
    """Run Flower (monitoring) against REDIS_URL."""
    argv = [sys.executable, "-m", "celery", "-A", "workers.celery_app", "flower", f"--address={host}", f"--port={port}", *_flower_args()]
    _exec(argv, redis_url)


def _register_optional(module: str) -> None:
    """Feature commands (ingest, reembed, collections, dedup-report, ...) register themselves."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return
    mod.register(app)


_register_optional("yana.cli_ingest")


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] != "up":
        _load_up_env()
    app()


if __name__ == "__main__":
    main()
