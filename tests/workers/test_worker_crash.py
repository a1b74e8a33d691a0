"""kill -9 of the worker in the middle of a job: the job still finishes, its effect happens once."""

from __future__ import annotations

import os
import signal
import time

import redis

from tasks.demo import EFFECTS
from tests.stack import wait_for, wait_job


def test_kill9_mid_job_finishes_exactly_once(stack, api):
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    before = {j["id"] for j in api.get("/v1/jobs", params={"limit": 200}).json()["jobs"]}
    victim = stack.start_worker(name="worker-victim")
    # Park the session worker so the victim takes the job.
    for svc in [s for s in stack.workers() if s is not victim]:
        stack.kill(svc)

    job_id = api.post("/v1/demo/sleep", json={"steps": 30, "step_s": 0.1}).json()["job_id"]
    wait_for(lambda: (api.get(f"/v1/jobs/{job_id}").json()["progress"] or {}).get("done", 0) >= 5, what="job mid-way")
    stack.kill(victim)

    stack.start_worker(name="worker-after")
    job = wait_job(api, job_id, timeout_s=90)
    assert job["status"] == "succeeded", job
    assert job["attempts"] == 2
    assert int(r.hget(EFFECTS, job_id)) == 1, "effect applied exactly once"
    active = r.smembers("yana:jobs:active")
    assert job_id not in active
    # no job of this test left behind (jobs other tests queued may still be waiting their turn)
    non_terminal = [
        j
        for j in api.get("/v1/jobs", params={"limit": 200}).json()["jobs"]
        if j["status"] in ("queued", "running") and j["id"] not in before
    ]
    assert non_terminal == []


def test_job_that_keeps_losing_its_worker_fails_clearly(stack, api):
    job_id = api.post("/v1/demo/sleep", json={"steps": 200, "step_s": 0.1}).json()["job_id"]
    for attempt in (1, 2, 3):
        wait_for(
            lambda attempt=attempt: (
                api.get(f"/v1/jobs/{job_id}").json()["attempts"] == attempt
                and api.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
            ),
            timeout_s=60,
            what=f"attempt {attempt}",
        )
        for svc in stack.workers():
            stack.kill(svc)
        stack.start_worker(name=f"worker-{attempt}")
    job = wait_job(api, job_id, timeout_s=60)
    assert job["status"] == "failed"
    assert job["error"]["code"] == "WORKER_LOST"
    assert "3" in job["error"]["message"]


def test_kill9_of_the_worker_main_alone_loses_no_job(stack, api):
    """Only the worker's main process dies (its pool processes are orphaned, as when the OOM
    killer picks the parent). The job a pool process was running, and the one whose message the
    main had already taken off the queue, both finish once a new worker runs: nothing waits for the
    broker's visibility timeout (hours) or for an orphan that can no longer report."""
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    victim = stack.start_worker(name="worker-main-victim", concurrency=2)
    for svc in [s for s in stack.workers() if s is not victim]:
        stack.kill(svc)
    running = api.post("/v1/demo/sleep", json={"steps": 60, "step_s": 0.1}).json()["job_id"]
    wait_for(
        lambda: (api.get(f"/v1/jobs/{running}").json()["progress"] or {}).get("done", 0) >= 3, what="job 1 mid-way"
    )
    # With a pool of 2 the main reserves the next message and hands it to its second process.
    second = api.post("/v1/demo/sleep", json={"steps": 60, "step_s": 0.1}).json()["job_id"]
    third = api.post("/v1/demo/sleep", json={"steps": 2, "step_s": 0.1}).json()["job_id"]
    wait_for(lambda: api.get(f"/v1/jobs/{second}").json()["status"] == "running", what="job 2 running")
    time.sleep(0.5)
    os.kill(victim.proc.pid, signal.SIGKILL)  # the main only: its pool processes live on
    victim.proc.wait(timeout=10)
    stack.services.remove(victim)
    t = time.monotonic()
    stack.start_worker(name="worker-after-main")
    for job_id in (running, second, third):
        job = wait_job(api, job_id, timeout_s=120)
        assert job["status"] == "succeeded", job
        assert int(r.hget(EFFECTS, job_id)) == 1, "effect applied exactly once"
    took = time.monotonic() - t
    assert took < 60, f"the jobs took {took:.0f} s to finish after the worker main died"
