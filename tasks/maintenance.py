"""Maintenance, a component of every worker's main process (`Maintenance`, a Celery bootstep that
tasks/worker.py adds to the worker): reconcile stalled jobs, hand due webhook deliveries to the
webhooks queue, remove abandoned upload staging folders, send the deferred label reads that are
due to the ocr queue, and note which worker took a job's
message. Every step is atomic (a Redis operation, or a folder removal that tolerates a concurrent
one), so any number of workers can run it at once without double work: there is no single
scheduler to lose.

It lives with the tasks (it enqueues them); the worker package imports nothing from tasks/."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from datetime import datetime

from celery import bootsteps, signals

from pipelines.ingest.accept import sweep_staging
from pipelines.runtime.jobs import LOST_SCAN_LOCK
from tasks import registry
from tasks.webhooks import deliver, dispatcher
from workers.queues import broker_message_keys, worker_key
from yana.clients import get_blobs, get_redis
from yana.errors import ErrorCode, YanaError
from yana.settings import get_settings

log = logging.getLogger("yana.maintenance")


def reconcile_once() -> dict:
    """Re-enqueue running jobs whose heartbeat stopped (fail those out of attempts), and queued
    jobs whose message a worker main had reserved when it died."""
    s = get_settings()
    store = registry.job_store()
    counts = {"requeued": 0, "failed": 0, "resent": 0}
    states = store.reserved_states(list(store.active_ids()))
    grace_ms = int(_liveness_ttl_s() * 1000)
    for job_id, (status, reserved_by, _at) in states.items():
        if status == "queued" and reserved_by and store.release_orphaned(job_id, reserved_by, grace_ms):
            job = store.get(job_id)
            if job is not None:
                registry.send(job)
                counts["resent"] += 1
                log.warning(
                    "job re-sent: the worker that had taken its message is gone",
                    extra={"job_id": job_id, "worker": reserved_by},
                )
    for job_id, (status, _by, _at) in states.items():
        if status != "running":
            continue
        attempts = store.release_stale(job_id)
        if attempts is None:
            continue
        job = store.get(job_id)
        if job is None:
            continue
        max_attempts = job["max_attempts"] or s.job_max_attempts
        if attempts >= max_attempts:
            store.fail(
                job_id,
                YanaError.of(
                    ErrorCode.WORKER_LOST,
                    f"the worker running this job stopped heartbeating {attempts} time(s); giving up",
                ).body(),
            )
            counts["failed"] += 1
            log.warning("job failed after lost workers", extra={"job_id": job_id, "attempts": attempts})
        else:
            registry.send(job)
            counts["requeued"] += 1
            log.warning("job re-enqueued after its heartbeat stopped", extra={"job_id": job_id, "attempts": attempts})
    return counts


JOB_ID_IN_MESSAGE = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")


def broker_mentions(r, job_ids: set[str], max_messages: int, stale_before: float) -> set[str] | None:
    """Of these job ids, those that a live broker message names: waiting in a queue, or taken by
    a worker (kombu's unacked hash) at or after `stale_before` (a time), or taken earlier with an
    ETA after it (a retry waiting out its countdown). A message taken earlier and still not
    acknowledged while its job is queued is not live: its job would be running by now, unless the
    connection of the worker that took it died with the Redis master, and kombu hands such a
    message back only after the visibility timeout (hours). None when the broker holds more than
    max_messages (a backlog: not read now; its jobs are waiting anyway)."""
    lists, unacked, unacked_index = broker_message_keys()
    with r.pipeline(transaction=False) as p:
        for key in lists:
            p.llen(key)
        p.hlen(unacked)
        if sum(p.execute()) > max_messages:
            return None
    # One transaction: a message moving from a queue to the unacked hash is seen in one of them.
    with r.pipeline(transaction=True) as p:
        for key in lists:
            p.lrange(key, 0, -1)
        p.hgetall(unacked)
        p.zrange(unacked_index, 0, -1, withscores=True)
        *waiting, taken, taken_at = p.execute()
    live = [raw for messages in waiting for raw in messages]
    when = dict(taken_at)
    for tag, raw in taken.items():
        if when.get(tag, 0.0) >= stale_before or _eta(raw) >= stale_before:
            live.append(raw)
    named: set[str] = set()
    for raw in live:  # the job id is in the headers' kwargsrepr as plain text
        named.update(JOB_ID_IN_MESSAGE.findall(raw))
    return named & job_ids


def _eta(unacked_entry: str) -> float:
    """The ETA of an unacked entry ([message, exchange, routing key]) as a time; 0 if none."""
    try:
        eta = json.loads(unacked_entry)[0]["headers"].get("eta")
        return datetime.fromisoformat(eta).timestamp() if eta else 0.0
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return 0.0


def resend_lost_once() -> int:
    """Send again the message of a queued job that no live broker message names after
    LOST_MESSAGE_AFTER_S: lost with a Redis master that died before replicating it, or taken by
    a worker whose broker connection died with the master before it started the job (a Sentinel
    failover). A second message for a job is harmless (the task base drops one whose job is
    running or done). One reconciler of the fleet scans per half period."""
    s = get_settings()
    period_ms = max(1000, int(s.lost_message_after_s * 500))
    r = get_redis()
    store = registry.job_store()
    idle = store.idle_queued(store.active_ids(), s.lost_message_after_s)
    if not idle or not r.set(LOST_SCAN_LOCK, socket.gethostname(), nx=True, px=period_ms):
        return 0
    named = broker_mentions(r, set(idle), s.lost_message_scan_max, time.time() - s.lost_message_after_s)
    if named is None:
        return 0
    sent = 0
    for job_id, seen in idle.items():
        if job_id in named:
            continue
        job = store.get(job_id)
        # A record of a kind no task runs (written by hand) has no message to send.
        if job is None or job["kind"] not in registry.KINDS or not store.take_unsent(job_id, seen):
            continue
        registry.send(job)
        sent += 1
        log.warning("job re-sent: no broker message named it", extra={"job_id": job_id})
    return sent


def dispatch_webhooks_once() -> int:
    due = dispatcher().claim_due()
    for job_id in due:
        deliver.apply_async(args=[job_id])
    return len(due)


def sweep_staging_once() -> int:
    """Remove staged uploads left without a job (see pipelines.ingest.accept)."""
    s = get_settings()
    return sweep_staging(get_redis(), get_blobs(s), s.staging_grace_s)


def send_deferred_reads_once() -> int:
    """Send the deferred label reads that are due (pipelines.ingest.deferred)."""
    from tasks.ocr import send_deferred_reads

    s = get_settings()
    return send_deferred_reads(get_redis(s), s)


def _liveness_ttl_s() -> int:
    return max(10, int(get_settings().reconcile_interval_s * 5))


def announce_worker() -> None:
    """Liveness for `yana up`, the test harness, /v1/healthz and the reconciler: this worker's key,
    with a TTL."""
    get_redis().set(worker_key(os.getpid()), socket.gethostname(), ex=_liveness_ttl_s())


def _reserved(request=None, **_) -> None:
    """In the worker main, when it takes a message off the queue: note on the job who holds it, so
    that if this process dies before a pool process runs it, the reconciler sends it again
    instead of leaving it to the broker's visibility timeout (hours)."""
    try:
        job_id = (getattr(request, "kwargs", None) or {}).get("job_id")
        if job_id:
            registry.job_store().mark_reserved(job_id, worker_key(os.getpid()))
    except Exception:  # noqa: BLE001 - a hint only: never stop the consumer over it
        log.warning("could not note the reserved job", exc_info=True)


class MaintenanceLoop(threading.Thread):
    def __init__(self, interval_s: float):
        super().__init__(name="yana-maintenance", daemon=True)
        self.interval_s = interval_s
        self.stop = threading.Event()

    def run(self) -> None:
        steps = (
            announce_worker,
            reconcile_once,
            resend_lost_once,
            dispatch_webhooks_once,
            sweep_staging_once,
            send_deferred_reads_once,
        )
        try:
            announce_worker()
        except Exception:  # noqa: BLE001
            log.warning("worker announce failed", exc_info=True)
        while not self.stop.wait(self.interval_s):
            for step in steps:
                try:
                    step()
                except Exception:  # noqa: BLE001 - Redis blip; the next tick retries
                    log.warning("maintenance step %s failed", step.__name__, exc_info=True)


_READY_UID = "yana-maintenance-ready"


class Maintenance(bootsteps.StartStopStep):
    """The worker main's maintenance: the loop above, and the note on each job whose message this
    process takes (`_reserved`)."""

    label = "yana maintenance"

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.loop: MaintenanceLoop | None = None

    def start(self, parent) -> None:
        signals.task_received.connect(_reserved)
        self.loop = MaintenanceLoop(get_settings().reconcile_interval_s)
        # The loop, and with it the worker's announcement, starts on worker_ready (the pool forked
        # after the worker main preloaded the model, the consumer connected): a worker that counts
        # as up for `yana up` and the tests can take a job at once.
        signals.worker_ready.connect(self._on_ready, weak=False, dispatch_uid=_READY_UID)

    def _on_ready(self, **_) -> None:
        if self.loop is not None and not self.loop.is_alive() and not self.loop.stop.is_set():
            self.loop.start()

    def stop(self, parent) -> None:
        signals.worker_ready.disconnect(self._on_ready, dispatch_uid=_READY_UID)
        signals.task_received.disconnect(_reserved)
        if self.loop is not None:
            self.loop.stop.set()
