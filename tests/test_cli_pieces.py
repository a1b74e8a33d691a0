"""Scale-out commands: `yana api` and `yana worker` started on their own against given URLs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cli import processes
from tests.stack import wait_for, wait_job

pytestmark = pytest.mark.stack  # starts its own processes


def test_api_and_worker_pieces_against_a_given_redis(tmp_path):
    env = processes.child_env()
    env.pop("REDIS_URL", None)
    env.pop("CHROMA_URL", None)
    redis_svc = processes.start_redis(tmp_path, processes.free_port(), tmp_path / "logs", env)
    procs: list[subprocess.Popen] = []
    yana = str(Path(sys.executable).parent / "yana")
    try:
        processes.wait_healthy(redis_svc)
        port = processes.free_port()
        for argv in (
            [yana, "worker", "--redis-url", redis_svc.url, "-n", "piece"],
            [yana, "api", "--port", str(port), "--redis-url", redis_svc.url],
        ):
            procs.append(
                subprocess.Popen(
                    argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
                )
            )
        api = f"http://127.0.0.1:{port}"

        def up():
            try:
                return httpx.get(api + "/v1/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout_s=60, interval_s=0.3, what="yana api")
        with httpx.Client(base_url=api, timeout=30) as client:
            job_id = client.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0}).json()["job_id"]
            assert wait_job(client, job_id, timeout_s=90)["status"] == "succeeded"
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(p.pid, signal.SIGKILL)
        processes.stop([redis_svc])
