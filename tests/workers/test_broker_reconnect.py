"""After a Redis kill the worker's consumer reconnects within ~2 s of Redis being back (issue 26,
defect 4: the worst recovery after a Redis kill was ~30 s, most of it kombu's growing reconnect
interval: 2, 4, 6, 8... s). Checked on what the worker says it does (its retry intervals in its
log), not on how fast this machine is; then a job runs on the same worker."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from cli import processes
from tests.stack import start_stack, wait_for, wait_job


@pytest.fixture(scope="module")
def rstack(tmp_path_factory):
    s = start_stack(tmp_path_factory.mktemp("reconnect"), chroma=False)
    yield s
    s.stop()


def test_the_worker_retries_the_broker_every_two_seconds_at_most(rstack):
    redis_svc = rstack.get("redis")
    worker = rstack.workers()[0]
    with httpx.Client(base_url=rstack.api_url, timeout=30) as api:
        assert wait_job(api, api.post("/v1/demo/sleep", json={"steps": 0}).json()["job_id"])["status"] == "succeeded"
        log_before = len(worker.log_path.read_text(errors="replace"))
        rstack.kill(redis_svc)
        # down long enough for the old schedule to reach its 8 s step (0, 2, 6, 12, 20 s)
        wait_for(
            lambda: len(re.findall(r"Trying again in", worker.log_path.read_text(errors="replace")[log_before:])) >= 4,
            timeout_s=60,
            interval_s=0.2,
            what="four reconnect attempts",
        )
        port = int(redis_svc.url.rsplit(":", 1)[1].split("/")[0])
        rstack.add(processes.start_redis(rstack.data_dir, port, rstack.log_dir, rstack.env))
        back = time.monotonic()
        job = wait_job(api, api.post("/v1/demo/sleep", json={"steps": 0}).json()["job_id"], timeout_s=60)
        assert job["status"] == "succeeded"
        print(f"a job ran {time.monotonic() - back:.1f} s after Redis was back")
    said = worker.log_path.read_text(errors="replace")[log_before:]
    intervals = [float(x) for x in re.findall(r"Trying again in (\d+(?:\.\d+)?) seconds?", said)]
    assert len(intervals) >= 4, said[-2000:]
    assert max(intervals) <= 2.0, intervals  # the old schedule: 2, 4, 6, 8 ...
