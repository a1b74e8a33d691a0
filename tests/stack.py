"""The test harness: a private, real system (redis-server, `chroma run`, Celery workers, the API)
on free loopback ports with a temp data folder, started with the same code as `yana up`."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx

from cli import processes
from cli.processes import Service, Stack

# Fast failure detection in tests: a killed worker's job is reclaimed within a few seconds.
TEST_ENV = {
    "HEARTBEAT_INTERVAL_S": "0.5",
    "HEARTBEAT_TTL_S": "3",
    "RECONCILE_INTERVAL_S": "0.5",
    "LOST_MESSAGE_AFTER_S": "3",
    "WEBHOOK_ALLOW": "127.0.0.0/8,::1",
    "WEBHOOK_BACKOFF_BASE_S": "0.5",
    "WEBHOOK_BACKOFF_MAX_S": "2",
    "LOG_LEVEL": "INFO",
    "AUTH_ENABLED": "false",
}


class TestStack(Stack):
    api_url: str = ""

    @property
    def redis_url(self) -> str:
        return self.env["REDIS_URL"]

    @property
    def chroma_url(self) -> str:
        return self.env.get("CHROMA_URL", "")

    def start_worker(self, name: str = "worker", concurrency: int = 1, **env: str) -> Service:
        worker_env = {**self.env, **{k: str(v) for k, v in env.items()}}
        svc = processes.start_worker(worker_env, self.log_dir, name=name, concurrency=concurrency)
        return self.add(svc, timeout_s=120)

    def start_api(self, name: str = "api", **env: str) -> Service:
        api_env = {**self.env, **{k: str(v) for k, v in env.items()}}
        return self.add(processes.start_api(api_env, processes.free_port(), self.log_dir, name=name))

    def kill(self, svc: Service) -> None:
        """kill -9 the process and its pool children, as a crashed host would."""
        try:
            os.killpg(svc.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        svc.proc.wait(timeout=10)
        self.services.remove(svc)

    def workers(self) -> list[Service]:
        return [s for s in self.services if s.name.startswith("worker") and s.alive()]


def use_stack_stores(stack: TestStack) -> None:
    """Point this process (pipelines called in-process by a test or a bench) at the stack's Redis
    and Chroma: the environment, and the settings and clients already cached from the old one."""
    from yana import clients
    from yana.settings import get_settings

    os.environ["REDIS_URL"] = stack.redis_url
    if stack.chroma_url:
        os.environ["CHROMA_URL"] = stack.chroma_url
    get_settings.cache_clear()
    clients._redis.cache_clear()
    clients._chroma.cache_clear()
    clients._blobs.cache_clear()


def start_stack(data_dir: Path, *, chroma: bool = True, worker: bool = True, api: bool = True, **env: str) -> TestStack:
    data_dir.mkdir(parents=True, exist_ok=True)
    stack = TestStack(data_dir=data_dir, env=processes.child_env(DATA_DIR=str(data_dir), **TEST_ENV, **env))
    for key in ("REDIS_URL", "CHROMA_URL"):
        stack.env.pop(key, None)
    try:
        redis_svc = stack.add(processes.start_redis(data_dir, processes.free_port(), stack.log_dir, stack.env))
        stack.env["REDIS_URL"] = redis_svc.url
        if chroma:
            chroma_svc = stack.add(
                processes.start_chroma(data_dir / "chroma", processes.free_port(), stack.log_dir, stack.env)
            )
            stack.env["CHROMA_URL"] = chroma_svc.url
        if worker:
            stack.start_worker()
        if api:
            stack.api_url = stack.start_api().url
    except Exception:
        stack.stop()
        raise
    return stack


def wait_for(predicate, timeout_s: float = 30.0, interval_s: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def wait_job(client: httpx.Client, job_id: str, timeout_s: float = 60.0) -> dict:
    """Poll a job to a terminal state using `Prefer: wait` (exercises it too)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"job {job_id} not terminal after {timeout_s}s: {client.get(f'/v1/jobs/{job_id}').json()}"
            )
        r = client.get(f"/v1/jobs/{job_id}", headers={"Prefer": f"wait={max(1, min(10, int(left)))}"})
        assert r.status_code == 200, r.text
        job = r.json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
