"""`yana up` with an empty environment: everything starts healthy, Ctrl-C/SIGTERM stops it all
within 10 s leaving no process behind, and a second run on the same data folder keeps the data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

from tests.stack import wait_for, wait_job
from yana.processes import free_port

REPO = Path(__file__).resolve().parent.parent


def _start_up(data_dir: Path, api_port: int, flower_port: int) -> subprocess.Popen:
    env = {  # deliberately nearly empty: no REDIS_URL, no CHROMA_URL, no settings
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "HF_HUB_OFFLINE": "1",
    }
    yana = Path(sys.executable).parent / "yana"
    return subprocess.Popen(
        [str(yana), "up", "--data-dir", str(data_dir), "--api-port", str(api_port), "--flower-port", str(flower_port)],
        env=env, cwd=str(data_dir.parent), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _wait_up(proc: subprocess.Popen, api: str) -> None:
    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"yana up exited early ({proc.returncode}):\n{proc.stdout.read()}")
        try:
            return httpx.get(api + "/v1/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(ready, timeout_s=180, interval_s=0.5, what="yana up healthy")


def _stop(proc: subprocess.Popen, sig=signal.SIGINT) -> float:
    t0 = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=15)
    return time.monotonic() - t0


def test_yana_up_zero_config_start_stop_and_restart_keeps_data(tmp_path):
    data_dir = tmp_path / "data"
    api_port, flower_port = free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"

    proc = _start_up(data_dir, api_port, flower_port)
    try:
        _wait_up(proc, api)
        children = _descendants(proc.pid)
        names = " ".join(" ".join(c.cmdline()) for c in children)
        for piece in ("redis-server", "chroma", "celery", "flower", "uvicorn"):
            assert piece in names, f"{piece} not started: {names}"
        # the system works: a job runs through the worker
        with httpx.Client(base_url=api, timeout=30) as client:
            job_id = client.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0}).json()["job_id"]
            assert wait_job(client, job_id)["status"] == "succeeded"
        # Flower's API answers (opened explicitly by setting when auth is off)
        r = httpx.get(f"http://127.0.0.1:{flower_port}/api/workers", timeout=10)
        assert r.status_code == 200 and r.json(), r.text
    finally:
        took = _stop(proc, signal.SIGINT)
    assert took < 10, f"stop took {took:.1f}s"
    assert proc.returncode == 0
    time.sleep(0.5)
    left = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"left behind: {left}"
    assert (data_dir / "redis" / "appendonlydir").exists() or any((data_dir / "redis").glob("*.aof*"))

    # same data folder again: the job record survived (Redis AOF), SIGTERM also stops cleanly
    proc = _start_up(data_dir, api_port, flower_port)
    try:
        _wait_up(proc, api)
        children = _descendants(proc.pid)
        job = httpx.get(f"{api}/v1/jobs/{job_id}", timeout=10).json()
        assert job["status"] == "succeeded"
    finally:
        took = _stop(proc, signal.SIGTERM)
    assert took < 10
    time.sleep(0.5)
    assert [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []


def test_dead_child_is_reported_loudly(tmp_path):
    data_dir = tmp_path / "data"
    api_port = free_port()
    proc = _start_up(data_dir, api_port, free_port())
    try:
        _wait_up(proc, f"http://127.0.0.1:{api_port}")
        worker = next(c for c in _descendants(proc.pid) if "celery" in " ".join(c.cmdline()) and "worker" in c.cmdline())
        os.kill(worker.pid, signal.SIGKILL)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            _stop(proc)
    out = proc.stdout.read()
    assert proc.returncode != 0
    assert "worker died" in out, out
