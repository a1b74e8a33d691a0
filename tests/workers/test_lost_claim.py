"""A Redis failover can lose a worker's claim on the job it is running: the master took the
claim (queued -> running) and died before replicating it, so the promoted replica has the job
queued again while the worker still runs it, holding its message. The worker claims it again and
finishes it; the job neither restarts nor waits for the broker's visibility timeout."""

from __future__ import annotations

import redis

from pipelines.runtime.jobs import hb_key, job_key
from tasks.demo import EFFECTS
from tests.stack import wait_for, wait_job


def test_a_running_job_whose_claim_was_lost_is_claimed_again_and_finishes_once(stack, api):
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    job_id = api.post("/v1/demo/sleep", json={"steps": 40, "step_s": 0.1}).json()["job_id"]
    wait_for(lambda: (api.get(f"/v1/jobs/{job_id}").json()["progress"] or {}).get("done", 0) >= 3, what="mid-way")
    task_id = r.hget(job_key(job_id), "task_id")
    # What the promoted replica holds when the claim never reached it: queued, no holder.
    with r.pipeline(transaction=True) as p:
        p.hset(job_key(job_id), mapping={"status": "queued", "token": "", "attempts": 0})
        p.delete(hb_key(job_id))
        p.execute()
    job = wait_job(api, job_id, timeout_s=60)
    assert job["status"] == "succeeded", job
    assert r.hget(job_key(job_id), "task_id") == task_id, "the run that had the claim finished it, not a new one"
    assert int(r.hget(EFFECTS, job_id)) == 1
