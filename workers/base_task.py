"""The Task base class: every job task gets correlation, the job record and a heartbeat from here.

A job task is called as `task.apply_async(kwargs={"job_id": ...}, headers=correlation)`. The base
class claims an attempt on the job record (at most `job_max_attempts`, so a message that keeps
killing its worker ends `failed`), runs the body with a JobContext, heartbeats while it runs,
and writes the terminal state. A message for a job that is already terminal, or that another
live worker holds, is acknowledged and dropped: redelivery never runs a body twice at once.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded

from pipelines.runtime import jobs as jobstore
from pipelines.runtime.jobs import JobStore
from yana import context
from yana.clients import get_redis
from yana.errors import ErrorCode, YanaError, describe
from yana.settings import get_settings

log = logging.getLogger("yana.task")


class JobCancelled(Exception):
    """Raised inside a task body when its job was cancelled."""


class JobContext:
    """What a task body sees of its job: progress, cancellation, a place for a resume cursor."""

    def __init__(self, store: JobStore, job: dict, token: str, cancelled: threading.Event):
        self.store = store
        self.job = job
        self.job_id = job["id"]
        self.token = token
        self._cancelled = cancelled
        self.meta: dict = job.get("meta") or {}

    @property
    def params(self) -> dict:
        return self.job.get("params") or {}

    @property
    def attempt(self) -> int:
        return int(self.job.get("attempts") or 0)

    def progress(self, stage: str, done: int, total: int, **detail: Any) -> None:
        self.check_cancelled()
        self.store.progress(self.job_id, stage, done, total, **detail)

    def save_meta(self, **values: Any) -> None:
        self.meta = self.store.update_meta(self.job_id, **values)

    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def check_cancelled(self) -> None:
        if self._cancelled.is_set():
            raise JobCancelled(self.job_id)


# A store that timed out or dropped the connection: the job is retried, not failed.
TRANSIENT_STORE_ERRORS = (redis.ConnectionError, redis.TimeoutError, httpx.TimeoutException, httpx.TransportError)


def reclaim_lost(store: JobStore, job_id: str, token: str, hb_ttl_s: float, max_attempts: int) -> bool:
    """Our claim on a job we are still running is gone and the job is queued again: the Redis
    master that took the claim died before replicating it (the promoted replica has the job
    queued, and its message is the one we hold), or the reconciler released it while our
    heartbeat lapsed. Claim it again with our token (True); False when it is no longer queued
    (cancelled, finished, or another worker has taken it)."""
    if store.status(job_id) != jobstore.QUEUED:
        return False
    if store.claim(job_id, token, hb_ttl_s=hb_ttl_s, max_attempts=max_attempts).outcome != "ok":
        return False
    log.warning("job claimed again: its claim was lost (a Redis failover?)", extra={"job_id": job_id})
    return True


class _Heartbeat(threading.Thread):
    def __init__(
        self, store: JobStore, job_id: str, token: str, interval: float, ttl: float, reclaim: Callable[[], bool]
    ):
        super().__init__(name=f"hb-{job_id[:8]}", daemon=True)
        self.store, self.job_id, self.token = store, job_id, token
        self.interval, self.ttl = interval, ttl
        self.reclaim = reclaim
        self.stop = threading.Event()
        self.lost = threading.Event()  # set when the job is no longer ours (cancelled or taken)

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                if not self.store.heartbeat(self.job_id, self.token, self.ttl) and not self.reclaim():
                    self.lost.set()
                    return
            except Exception:  # Redis blip: try again next tick; the TTL covers a few misses
                log.warning("heartbeat failed", exc_info=True, extra={"job_id": self.job_id})


def succeeded_summary(result: Any) -> str:
    """A job that succeeded with some failed items says so (Flower shows this as the result)."""
    if isinstance(result, dict) and result.get("failed"):
        total = sum(int(result.get(k) or 0) for k in ("indexed", "dedup", "failed")) or "?"
        return f"succeeded with failed items: {result['failed']} of {total}"
    return "succeeded"


def purge_half_imported() -> list[str]:
    """After a cancel or a time limit interrupted a body: the submodules left behind by an import
    it cut short. Python drops the package whose import raised but keeps the submodules it had
    loaded, and a later import of the package then finds them without binding them to it again
    ("module 'aiohttp' has no attribute 'client_exceptions'" in every later job of the process).
    Dropping them lets the next import load them whole. Returns their names."""
    names = set(sys.modules)
    gone = sorted(
        n
        for n in names
        if "." in n and any(".".join(n.split(".")[:i]) not in names for i in range(1, n.count(".") + 1))
    )
    for name in gone:
        sys.modules.pop(name, None)
    return gone


class JobTask(Task):
    """Base class for job tasks. Subclasses (via @app.task(base=JobTask)) define `run(ctx, **params)`."""

    abstract = True
    typing = False
    # Modules the body imports lazily (a heavy pipeline a worker that never runs it should not
    # load): imported before the job is claimed, so a cancel (SIGUSR1 once the job runs) cannot
    # land inside an import and leave a half-initialised module for the process's later jobs
    # (openai 3.57's import of aiohttp, interrupted: "module aiohttp has no attribute
    # client_exceptions" in every later think job of that process).
    body_modules: tuple[str, ...] = ()

    def __call__(self, *args: Any, job_id: str | None = None, **kwargs: Any) -> Any:
        if job_id is None:  # plain call, e.g. from a test: no job record involved
            return self.run(None, *args, **kwargs)
        s = get_settings()
        store = JobStore(get_redis(), s.job_retention_s)
        headers = getattr(self.request, "headers", None) or {}
        corr_src = {k: headers.get(k) or getattr(self.request, k, None) for k in ("run_id", "trace_id", "traceparent")}
        job = store.get(job_id)
        if job is None:
            log.warning("job record missing; dropping message", extra={"job_id": job_id})
            return None
        if not corr_src.get("run_id"):
            corr_src = {"run_id": job["run_id"], "trace_id": job["trace_id"], "traceparent": job.get("traceparent")}
        corr = context.Correlation.from_dict(corr_src)
        token_ctx = context.set_current(corr)
        try:
            return self._run_job(store, job, s)
        finally:
            context.reset(token_ctx)

    def _run_job(self, store: JobStore, job: dict, s) -> Any:
        job_id = job["id"]
        for name in self.body_modules:
            importlib.import_module(name)
        token = f"{uuid.uuid4().hex}:{self.request.hostname or 'local'}"
        max_attempts = job["max_attempts"] or s.job_max_attempts
        claim = store.claim(job_id, token, hb_ttl_s=s.heartbeat_ttl_s, max_attempts=max_attempts)
        extra = {"job_id": job_id, "kind": job["kind"], "attempt": claim.attempts}
        if claim.outcome != "ok":
            log.info("job not run: %s", claim.outcome, extra=extra)
            return None
        store.note_task_id(job_id, self.request.id or "")
        job = store.get(job_id) or job

        def reclaim() -> bool:
            return reclaim_lost(store, job_id, token, s.heartbeat_ttl_s, max_attempts)

        hb = _Heartbeat(store, job_id, token, s.heartbeat_interval_s, s.heartbeat_ttl_s, reclaim)
        hb.start()
        ctx = JobContext(store, job, token, hb.lost)
        log.info("job started", extra=extra)
        outcome = "not ours any more"  # the task's result, as monitoring (Flower) shows it
        try:
            result = self.run(ctx, **(job.get("params") or {}))
        except (JobCancelled, SoftTimeLimitExceeded) as exc:
            purged = purge_half_imported()
            if purged:
                log.warning("imports the interruption cut short, dropped: %s", ", ".join(purged[:20]), extra=extra)
            current = store.get(job_id) or {}
            if current.get("status") == jobstore.CANCELLED:
                log.info("job cancelled while running", extra=extra)
                outcome = "cancelled"
            else:
                err = YanaError.of(ErrorCode.TIMEOUT, f"job exceeded its time limit ({type(exc).__name__})")
                store.fail(job_id, err.body(), token)
                log.warning("job timed out", extra=extra)
                outcome = "failed: TIMEOUT"
        except YanaError as exc:
            store.fail(job_id, exc.body(), token)
            log.warning("job failed: %s", exc.code, extra=extra)
            outcome = f"failed: {exc.code}"
        except TRANSIENT_STORE_ERRORS as exc:  # a store timed out or went away: try again later
            outcome = self._retry_later(store, job, token, claim.attempts, exc, extra)
        except Exception as exc:  # noqa: BLE001 - a body's bug must still end its job
            body = {"code": "INTERNAL", "message": describe(exc, 300), "retryable": True}
            store.fail(job_id, body, token)
            log.exception("job crashed", extra=extra)
            outcome = "failed: INTERNAL"
        else:
            if store.succeed(job_id, token, result) or (reclaim() and store.succeed(job_id, token, result)):
                log.info("job succeeded", extra=extra)
                outcome = succeeded_summary(result)
            else:
                log.info("job finished but is no longer ours (cancelled or reclaimed)", extra=extra)
        finally:
            hb.stop.set()
        return outcome

    def _retry_later(self, store: JobStore, job: dict, token: str, attempts: int, exc: Exception, extra) -> str:
        """Requeue the job with exponential backoff (2, 4, 8... s, at most 60) while attempts are
        left; the body is idempotent, so a retry after a partial write adds nothing twice."""
        job_id = job["id"]
        max_attempts = int(job.get("max_attempts") or get_settings().job_max_attempts)
        error = YanaError.of(ErrorCode.STORE_UNAVAILABLE, describe(exc, 300)).body()
        if attempts >= max_attempts or not store.requeue(job_id, token, error):
            store.fail(job_id, error, token)
            log.warning("job failed: store unavailable", extra=extra)
            return "failed: STORE_UNAVAILABLE"
        delay = min(60.0, 2.0**attempts)
        headers = {k: job.get(k) or "" for k in ("run_id", "trace_id", "traceparent")}
        self.apply_async(kwargs={"job_id": job_id}, countdown=delay, queue=job.get("queue") or None, headers=headers)
        log.warning("job retries in %.0fs: %s", delay, error["message"], extra=extra)
        return f"retrying in {delay:.0f}s"
