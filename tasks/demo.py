"""A trivial job kind that exercises the runtime: N steps with progress, then one counted effect."""

from __future__ import annotations

import time

from workers.base_task import JobContext, JobTask
from workers.celery_app import app
from yana.clients import get_redis
from yana.errors import ErrorCode, YanaError

EFFECTS = "yana:demo:effects"  # hash job_id -> times the effect was applied

# The effect and its guard in one atomic step: a redelivered job cannot apply it twice.
_APPLY_ONCE = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', 604800) then
  return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
end
return 0
"""


@app.task(base=JobTask, name="yana.demo.sleep", bind=True)
def sleep_job(self, ctx: JobContext | None, steps: int = 3, step_s: float = 0.1, fail: bool = False) -> dict:
    total = int(steps)
    for i in range(total):
        if ctx:
            ctx.progress("sleeping", i, total)
        time.sleep(float(step_s))
    if fail:
        raise YanaError.of(ErrorCode.DEMO_FAILURE, "failure requested by the demo job")
    if ctx:
        ctx.progress("sleeping", total, total)
        r = get_redis()
        r.eval(_APPLY_ONCE, 2, f"yana:demo:effect:{ctx.job_id}", EFFECTS, ctx.job_id)
    return {"steps": total, "slept_s": round(total * float(step_s), 3)}


@app.task(name="yana.demo.ping")
def ping(sent_at: float) -> dict:
    """Bare Celery task (no job record): the baseline the jobs benchmark compares against."""
    return {"sent_at": sent_at, "started_at": time.time()}
