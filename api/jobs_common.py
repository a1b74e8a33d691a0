"""What every job-creating route does: check the callback, create the record, enqueue, answer 202."""

from __future__ import annotations

from api.schemas import Envelope
from pipelines.runtime.safe_http import resolve_target
from tasks import registry
from yana import context
from yana.settings import get_settings


class JobAccepted(Envelope):
    job_id: str
    status: str
    status_url: str
    kind: str
    run_id: str | None = None
    trace_id: str | None = None


def accept_job(kind: str, params: dict, callback_url: str | None = None, **kw) -> dict:
    if callback_url:
        resolve_target(callback_url, get_settings().webhook_allow)  # 400 now, not a silent failure later
    corr = context.current()
    idem = context.idempotency_record()
    job = registry.enqueue(
        kind,
        params,
        correlation=corr.as_dict() if corr else None,
        callback_url=callback_url,
        once=(idem, kind) if idem else None,
        **kw,
    )
    return {
        "job_id": job["id"],
        "status": job["status"],
        "status_url": f"/v1/jobs/{job['id']}",
        "kind": kind,
        "run_id": job["run_id"],
        "trace_id": job["trace_id"],
    }
