"""`yana up` with an empty environment: everything starts healthy, Ctrl-C/SIGTERM stops it all
within 10 s leaving no process behind, and a second run on the same data folder keeps the data."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest

from tests.stack import wait_for, wait_job
from yana import INSTANCE_HEADER
from yana.settings import Settings

pytestmark = pytest.mark.stack  # starts its own processes

REPO = Path(__file__).resolve().parent.parent


def _start_up(data_dir: Path, api_port: int | None, flower_port: int | None) -> subprocess.Popen:
    """`yana up` on these ports; None: the default (8000 / 5555, or a free one if taken)."""
    env = {  # deliberately nearly empty: no REDIS_URL, no CHROMA_URL, no settings
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "HF_HUB_OFFLINE": "1",
        # the code under test, when it is not the installed checkout (no settings in it)
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    if os.environ.get("MODELS_DIR"):  # the one-time builds, shared by every test on this machine
        env["MODELS_DIR"] = os.environ["MODELS_DIR"]
    yana = Path(sys.executable).parent / "yana"
    return subprocess.Popen(
        [str(yana), "up", "--data-dir", str(data_dir)]
        + (["--api-port", str(api_port)] if api_port is not None else [])
        + (["--flower-port", str(flower_port)] if flower_port is not None else []),
        env=env,
        cwd=str(data_dir.parent),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _up_url(
    proc: subprocess.Popen,
    data_dir: Path,
    key: str = "YANA_API_URL",
    health: str = "/v1/health",
    instance: str | None = None,
) -> str:
    """A server's URL from up.env, once `yana up` wrote it and the server there answers (with
    `instance`, only with that instance token: after a restart, up.env names the old port until
    the supervisor rewrites it, and another suite's `yana up` may have taken that port). Tests
    start `yana up` on its default ports and read where it put them: a port found free and passed
    explicitly can be taken by another process before the server binds it (CI failed that way)."""
    from cli.api_link import read_up_env

    def ready() -> str | None:
        if proc.poll() is not None:
            raise AssertionError(f"yana up exited early ({proc.returncode}):\n{proc.stdout.read()}")
        url = read_up_env(data_dir).get(key)
        try:
            r = httpx.get(url + health, timeout=1) if url else None
        except httpx.HTTPError:
            return None
        if r is None or r.status_code != 200 or (instance and r.headers.get(INSTANCE_HEADER) != instance):
            return None
        return url

    return wait_for(ready, timeout_s=180, interval_s=0.5, what=f"yana up's {key} answering")


def _left(children: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for c in children:
        try:
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE:
                alive.append(c)
        except psutil.NoSuchProcess:
            pass
    return alive


def _stop(proc: subprocess.Popen, sig=signal.SIGINT) -> float:
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=15)
    return time.monotonic() - t0


def test_yana_up_zero_config_start_stop_and_restart_keeps_data(tmp_path):
    data_dir = tmp_path / "data"
    proc = _start_up(data_dir, None, None)
    try:
        api = _up_url(proc, data_dir)
        flower = _up_url(proc, data_dir, "FLOWER_URL", "/healthcheck")
        children = _descendants(proc.pid)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        for piece in ("redis-server", "chroma", "celery", "flower", "uvicorn"):
            assert piece in names, f"{piece} not started: {names}"
        _assert_light(children)
        # the system works: a job runs through the worker
        with httpx.Client(base_url=api, timeout=30) as client:
            job_id = client.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0}).json()["job_id"]
            assert wait_job(client, job_id)["status"] == "succeeded"

        # Flower's API answers (opened explicitly by setting when auth is off); it learns the
        # workers by asking them after it starts, so the list may be empty for its first seconds.
        def flower_knows_the_worker() -> bool:
            r = httpx.get(f"{flower}/api/workers", params={"refresh": "1"}, timeout=10)
            assert r.status_code == 200, r.text
            return bool(r.json())

        wait_for(flower_knows_the_worker, timeout_s=30, interval_s=1, what="Flower to list the worker")
    finally:
        took = _stop(proc, signal.SIGINT)
    assert took < 10, f"stop took {took:.1f}s"
    assert proc.returncode == 0
    wait_for(lambda: not _left(children), timeout_s=5, what="no process left behind")
    assert (data_dir / "redis" / "appendonlydir").exists() or any((data_dir / "redis").glob("*.aof*"))
    secret_file = data_dir / "webhook_secret"
    secret = secret_file.read_text().strip()
    assert secret.startswith("whsec_") and len(secret) > 40 and secret_file.stat().st_mode & 0o077 == 0
    assert secret != Settings.model_fields["webhook_secret"].default

    # same data folder again: the job record survived (Redis AOF), SIGTERM also stops cleanly
    proc = _start_up(data_dir, None, None)
    try:
        api = _up_url(proc, data_dir)
        children = _descendants(proc.pid)
        job = httpx.get(f"{api}/v1/jobs/{job_id}", timeout=10).json()
        assert job["status"] == "succeeded"
        assert secret_file.read_text().strip() == secret, "the generated secret is reused"
    finally:
        took = _stop(proc, signal.SIGTERM)
    assert took < 10
    wait_for(lambda: not _left(children), timeout_s=5, what="no process left behind")


def _maps(p: psutil.Process) -> str:
    try:
        return Path(f"/proc/{p.pid}/maps").read_text()
    except OSError:
        return ""


def _assert_light(children: list[psutil.Process]) -> None:
    """Up means ready: every worker pool process already holds the embedding model (loaded by the
    worker main before it forked the pool); torch is in no process; Flower has none of the app."""
    procs = {c.pid: (" ".join(c.cmdline()), _maps(c)) for c in children}
    assert not [cmd for cmd, maps in procs.values() if "libtorch" in maps], "torch was imported"
    flower = [maps for cmd, maps in procs.values() if " flower" in cmd]
    assert flower and not any("llvmlite" in m or "onnxruntime" in m for m in flower), "Flower imports the app"
    workers = [c for c in children if " worker " in " ".join(c.cmdline()) + " "]
    pool = [c for c in workers if c.ppid() in {w.pid for w in workers}]
    assert pool, procs
    assert all("onnxruntime" in _maps(c) and "llvmlite" in _maps(c) for c in pool), "pool not ready when up"


def _child(proc: subprocess.Popen, *words: str) -> psutil.Process:
    for c in _descendants(proc.pid):
        cmd = c.cmdline()
        if all(w in cmd or any(w in part for part in cmd) for w in words) and c.ppid() == proc.pid:
            return c
    raise AssertionError(f"no child with {words}")


def _other_worker(proc: subprocess.Popen, old_pid: int) -> bool:
    try:
        return _child(proc, "celery", "worker").pid != old_pid
    except (AssertionError, psutil.Error):
        return False


def _reported(data_dir: Path, pid: int) -> bool:
    """The worker `pid` has reported healthy (its key in Redis: what the supervisor checks)."""
    import redis

    from cli.api_link import read_up_env
    from workers.queues import worker_key

    try:
        return (
            redis.Redis.from_url(read_up_env(data_dir)["REDIS_URL"], socket_timeout=1).get(worker_key(pid)) is not None
        )
    except redis.RedisError:
        return False


def _submitted(client: httpx.Client) -> str | None:
    """A job id, once the API accepts one (it answers 5xx while Redis is down)."""
    try:
        r = client.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0})
    except httpx.HTTPError:
        return None
    return r.json()["job_id"] if r.status_code == 202 else None


def test_dead_children_are_restarted_and_jobs_go_on(tmp_path):
    data_dir = tmp_path / "data"
    proc = _start_up(data_dir, None, None)
    try:
        api = _up_url(proc, data_dir)
        ours = httpx.get(api + "/v1/health", timeout=5).headers[INSTANCE_HEADER]
        with httpx.Client(base_url=api, timeout=30) as client:
            # the API dies (kill -9) while a job runs: it comes back (on its port, or on another
            # one that up.env names if its port was taken meanwhile), and the job goes on
            running = client.post("/v1/demo/sleep", json={"steps": 4, "step_s": 1}).json()["job_id"]
            old_api = _child(proc, "uvicorn")
            old_api.kill()
            wait_for(lambda: not old_api.is_running() or old_api.status() == psutil.STATUS_ZOMBIE, what="api gone")
            client.base_url = httpx.URL(_up_url(proc, data_dir, instance=ours))
            assert _child(proc, "uvicorn").pid != old_api.pid
            assert wait_job(client, running, 60)["status"] == "succeeded"

            # the worker dies: it is restarted and a job queued meanwhile completes
            old_worker = _child(proc, "celery", "worker")
            old_worker.kill()
            queued = client.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0}).json()["job_id"]
            assert wait_job(client, queued, 180)["status"] == "succeeded"
            assert _child(proc, "celery", "worker").pid != old_worker.pid

            # Redis dies while the worker is coming back (the worker needs Redis to report
            # healthy): both come back at once. A supervisor that waited on the worker's restart
            # left Redis down until that wait ran out (120 s; a job succeeded after 123 s).
            old_worker = _child(proc, "celery", "worker")
            # reported healthy first (it takes jobs a moment before), so its restart was announced
            wait_for(lambda: _reported(data_dir, old_worker.pid), timeout_s=60, what="the worker reported healthy")
            old_worker.kill()
            wait_for(lambda: _other_worker(proc, old_worker.pid), timeout_s=60, what="the worker respawned")
            _child(proc, "redis-server").kill()
            t0 = time.monotonic()
            job = wait_for(lambda: _submitted(client), timeout_s=90, what="a job accepted after Redis died")
            assert wait_job(client, job, max(1.0, 90 - (time.monotonic() - t0)))["status"] == "succeeded"
            # then reported healthy, and the supervisor (polling every 0.3 s) says it restarted
            new_worker = _child(proc, "celery", "worker").pid
            wait_for(lambda: _reported(data_dir, new_worker), timeout_s=60, what="the new worker reported")
            time.sleep(2)
    finally:
        took = _stop(proc, signal.SIGINT) if proc.poll() is None else 0.0
    out = proc.stdout.read()
    assert proc.returncode == 0, out
    assert took < 10
    assert "api died" in out and "api restarted" in out, out
    assert "worker died" in out and "worker restarted" in out, out
    assert "redis died" in out and "redis restarted" in out, out


def test_an_explicitly_requested_port_that_is_taken_fails_loudly(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _start_up(tmp_path / "data", port, None)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert f"API port {port} is taken" in out, out


class _Squatter(BaseHTTPRequestHandler):
    """Another instance's server: 200 to every request, /v1/health included."""

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def _squat(port: int, timeout_s: float = 10.0) -> ThreadingHTTPServer:
    """Take `port` as soon as it is free (a killed server's port frees at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), _Squatter)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def test_the_api_moves_to_a_free_port_when_another_server_took_its_default_one(tmp_path):
    """Two `yana up` started at once can both choose the default API port. Here another server
    takes the port while our API restarts: the restart moves to a free port, up.env follows, and
    the other server's answers to /v1/health are never taken for our API's. (Before, the restart
    was declared healthy on the other server's answer, then crashed on the taken port until the
    supervisor gave up and stopped everything.)"""
    from cli.api_link import read_up_env

    data_dir = tmp_path / "data"
    proc = _start_up(data_dir, None, None)
    squatter = None
    try:
        first = _up_url(proc, data_dir)
        old_api = _child(proc, "uvicorn")
        old_api.kill()
        squatter = _squat(int(first.rsplit(":", 1)[1]))

        def moved() -> str | None:
            if proc.poll() is not None:
                raise AssertionError(f"yana up exited ({proc.returncode}):\n{proc.stdout.read()}")
            url = read_up_env(data_dir).get("YANA_API_URL")
            return url if url and url != first else None

        second = wait_for(moved, timeout_s=120, interval_s=0.3, what="up.env names the moved API")
        r = httpx.get(second + "/v1/health", timeout=5)
        assert r.status_code == 200 and r.json()["name"] == "yana", r.text
        assert _child(proc, "uvicorn").pid != old_api.pid
    finally:
        took = _stop(proc, signal.SIGINT) if proc.poll() is None else 0.0
        if squatter is not None:
            squatter.shutdown()
            squatter.server_close()
    out = proc.stdout.read()
    assert proc.returncode == 0, out
    assert took < 10
    assert f"api restarted {second}" in out, out
    assert "giving up" not in out, out


def test_two_started_at_once_on_the_default_ports_both_come_up(tmp_path):
    """Both choose the default ports while free; one binds them first. The other's API exits on
    the taken port and is started once more on a free one ("was taken meanwhile"), and neither
    takes the other's servers for its own. (Before: "start failed: api exited with code 3".)
    Where 8000 is already taken by something else, both start on free ports and there is no race."""
    from cli.api_link import read_up_env

    procs = [_start_up(tmp_path / name, None, None) for name in ("a", "b")]
    try:
        urls = []
        for proc, name in zip(procs, ("a", "b"), strict=True):
            up_env = tmp_path / name / "up.env"
            wait_for(lambda p=proc, e=up_env: p.poll() is not None or e.exists(), timeout_s=240, what="up.env")
            assert proc.poll() is None, proc.stdout.read()
            urls.append(read_up_env(tmp_path / name)["YANA_API_URL"])
        assert urls[0] != urls[1]
        tokens = set()
        for url in urls:
            r = httpx.get(url + "/v1/health", timeout=5)
            assert r.status_code == 200, r.text
            tokens.add(r.headers[INSTANCE_HEADER])
        assert len(tokens) == 2
    finally:
        for proc in procs:
            if proc.poll() is None:
                _stop(proc, signal.SIGINT)
    outs = [proc.stdout.read() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    assert not any("giving up" in out or "start failed" in out for out in outs), outs
