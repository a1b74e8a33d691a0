"""The maintenance loop each worker runs in its main process: reconcile stalled jobs and hand
due webhook deliveries to the webhooks queue. Every step is an atomic Redis operation, so any
number of workers can run it at once without double work."""

from __future__ import annotations

import logging
import os
import socket
import threading

from tasks import registry
from tasks.webhooks import deliver
from yana.settings import get_settings

log = logging.getLogger("yana.maintenance")


def reconcile_once() -> dict:
    """Re-enqueue running jobs whose heartbeat stopped; fail those out of attempts."""
    s = get_settings()
    store = registry.job_store()
    counts = {"requeued": 0, "failed": 0}
    for job_id in store.active_ids():
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
                {
                    "code": "WORKER_LOST",
                    "message": f"the worker running this job stopped heartbeating {attempts} time(s); giving up",
                    "retryable": False,
                },
            )
            counts["failed"] += 1
            log.warning("job failed after lost workers", extra={"job_id": job_id, "attempts": attempts})
        else:
            registry.send(job)
            counts["requeued"] += 1
            log.warning("job re-enqueued after its heartbeat stopped", extra={"job_id": job_id, "attempts": attempts})
    return counts


def dispatch_webhooks_once() -> int:
    from tasks.webhooks import dispatcher

    due = dispatcher().claim_due()
    for job_id in due:
        deliver.apply_async(args=[job_id])
    return len(due)


def announce_worker() -> None:
    """Liveness for `yana up`, the test harness and /v1/healthz: this worker's key, with a TTL."""
    from yana.clients import get_redis
    from yana.processes import WORKER_KEY

    get_redis().set(WORKER_KEY.format(os.getpid()), socket.gethostname(), ex=max(10, int(get_settings().reconcile_interval_s * 5)))


class MaintenanceLoop(threading.Thread):
    def __init__(self, interval_s: float):
        super().__init__(name="yana-maintenance", daemon=True)
        self.interval_s = interval_s
        self.stop = threading.Event()

    def run(self) -> None:
        steps = (announce_worker, reconcile_once, dispatch_webhooks_once)
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
