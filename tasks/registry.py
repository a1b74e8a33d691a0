"""Job kinds and how to enqueue them. The API imports only this (no task bodies, no torch): it
sends messages by task name."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from pipelines.runtime.jobs import JobStore
from workers.celery_app import app
from yana.clients import get_redis
from yana.settings import get_settings


@dataclass(frozen=True)
class Kind:
    task: str  # Celery task name
    queue: str


KINDS: dict[str, Kind] = {
    "demo.sleep": Kind("yana.demo.sleep", "default"),
    "ingest": Kind("yana.ingest.run", "ingest"),
    "reembed": Kind("yana.reembed.run", "reembed"),
    "retrieve": Kind("yana.retrieve.run", "retrieve"),
    "retrieve.embed": Kind("yana.retrieve.embed", "retrieve"),
    "think": Kind("yana.think.run", "think"),
    "memo.index": Kind("yana.memo.index", "default"),
}


def job_store() -> JobStore:
    return JobStore(get_redis(), get_settings().job_retention_s)


def describe(job: dict) -> str:
    """What a job is, in a line (Flower's args column): kind, id, and its size."""
    params = job.get("params") or {}
    if isinstance(params, str):
        params = orjson.loads(params) if params else {}
    what = f"{job['kind']} job {job['id']}"
    if job["kind"] == "ingest":
        what += f": {len(params.get('items') or [])} images, {len(params.get('documents') or [])} documents"
    elif job["kind"] == "reembed":
        what += f": model {params.get('model')}"
    elif params:
        what += ": " + ", ".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "callback_url")[:200]
    if int(job.get("attempts") or 0) > 0:
        what += f" (attempt {int(job['attempts']) + 1})"
    return what


def send(job: dict) -> None:
    """(Re)send the Celery message for an existing job record, carrying its correlation."""
    kind = KINDS[job["kind"]]
    headers = {k: job.get(k) or "" for k in ("run_id", "trace_id", "traceparent")}
    app.send_task(
        kind.task,
        kwargs={"job_id": job["id"]},
        queue=kind.queue,
        headers=headers,
        task_id=None,
        argsrepr=repr((describe(job),)),  # monitoring (Flower) shows what the job is, not just its id
        kwargsrepr=repr({"job_id": job["id"]}),
    )


def enqueue(
    kind: str,
    params: dict,
    *,
    correlation: dict | None = None,
    callback_url: str | None = None,
    job_id: str | None = None,
    parent_id: str | None = None,
    meta: dict | None = None,
    once: tuple[str, str] | None = None,
) -> dict:
    """Create the job record, then send its message. Returns the record. With `once` a job
    already bound to that key is returned (`existing`: true); if it is still queued its message is
    sent again, since the process that created it may have died before sending (a second message
    for a job is dropped by the task base once the first has claimed it)."""
    if kind not in KINDS:
        raise KeyError(kind)
    s = get_settings()
    job = job_store().create(
        kind,
        params,
        correlation=correlation,
        callback_url=callback_url,
        queue=KINDS[kind].queue,
        job_id=job_id,
        parent_id=parent_id,
        max_attempts=s.job_max_attempts,
        meta=meta,
        once=once,
        once_ttl_s=s.idempotency_ttl_s,
    )
    if not job.get("existing") or job["status"] == "queued":
        send(job)
    if s.redis_wait_replicas > 0:
        job_store().wait_replicated(job["id"], s.redis_wait_replicas, s.redis_wait_timeout_ms)
    return job


def cancel(job_id: str) -> str | None:
    """Cancel a job. Returns the status it had (None if it was already terminal)."""
    store = job_store()
    prev = store.cancel(job_id)
    if prev == "running":
        # The body also stops cooperatively at its next progress() call; SIGUSR1 raises
        # SoftTimeLimitExceeded inside the prefork child so a body that never reports stops too.
        task_id = store.get_raw_field(job_id, "task_id")
        if task_id:
            app.control.revoke(task_id, terminate=True, signal="SIGUSR1")
    return prev


def queue_status(timeout_s: float = 1.0) -> dict:
    """Messages waiting per queue (every priority step), and the workers that answer a broadcast
    within timeout_s with the queues each consumes (the console's health page)."""
    from kombu.transport.redis import Channel

    from workers.queues import QUEUES, broker_message_keys

    r = get_redis()
    lists, _unacked, _index = broker_message_keys()
    with r.pipeline(transaction=False) as p:
        for key in lists:
            p.llen(key)
        lengths = dict(zip(lists, p.execute(), strict=True))
    depth = {q: sum(n for k, n in lengths.items() if k == q or k.startswith(q + Channel.sep)) for q in QUEUES}
    try:
        answers = app.control.inspect(timeout=timeout_s).active_queues() or {}
    except Exception:  # noqa: BLE001 - no broker or no answer: no workers to show, not an error
        answers = {}
    workers = [{"name": name, "queues": sorted(q["name"] for q in qs)} for name, qs in sorted(answers.items())]
    return {"queues": depth, "workers": workers}
