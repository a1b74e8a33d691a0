"""Jobs: poll (optionally waiting, RFC 7240 `Prefer: wait=N`), list, cancel."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.contract import ContractRoute, contract
from api.schemas import ERRORS, Envelope
from pipelines.ingest.pipeline import failed_items_to_retry, outcomes_so_far, retry_binding, retry_job_of
from pipelines.runtime import jobs as jobstore
from tasks import registry
from yana import context
from yana.clients import get_blobs, get_redis
from yana.errors import ErrorCode, YanaError
from yana.ids import new_job_id, valid_job_id

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=ContractRoute)
queues_router = APIRouter(prefix="/v1", tags=["jobs"], route_class=ContractRoute)

_WAIT_RE = re.compile(r"(?:^|[,;\s])wait\s*=\s*(\d+)", re.I)
CURSOR_MAX = 2**53 - 1  # cursors are created-at ms * 1000 + n: far below; exact in every JSON client

JobId = Annotated[str, Path(max_length=64, description="The job's id, as returned by the POST that created it")]
JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class Progress(BaseModel):
    model_config = ConfigDict(extra="allow")  # a job kind's own detail, e.g. a think round's queries
    stage: str
    done: int
    total: int


class ErrorBody(BaseModel):
    code: str
    message: str
    retryable: bool


class Job(Envelope):
    id: str
    kind: str
    status: JobStatus
    progress: Progress | None = None
    result: Any = None
    error: ErrorBody | None = None
    attempts: int
    max_attempts: int
    created_at: str
    updated_at: str
    started_at: str | None = None
    finished_at: str | None = None
    run_id: str | None = None
    trace_id: str | None = None
    parent_id: str | None = None
    callback_url: str | None = None
    webhook: dict | None = Field(default=None, description="delivery attempts of the job's webhook")


class JobItems(Envelope):
    job_id: str
    status: JobStatus
    items: list[dict[str, Any]] = Field(
        description="per-item outcomes recorded so far (ingest: id, dedup_of, error...)"
    )


class JobList(Envelope):
    jobs: list[Job]
    next_cursor: int | None


def _view(job: dict) -> dict:
    return jobstore.public_view(job)


def get_or_404(job_id: str) -> dict:
    job = registry.job_store().get(job_id) if valid_job_id(job_id) else None
    if job is None:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"job {job_id} not found")
    return job


def prefer_wait_seconds(prefer: str | None, cap: float) -> float:
    if not prefer:
        return 0.0
    m = _WAIT_RE.search(prefer)
    return min(float(m.group(1)), cap) if m else 0.0


@router.get(
    "/{job_id}",
    operation_id="get_job",
    response_model=Job,
    responses=ERRORS(404),
    summary="A job's state; with `Prefer: wait=N` block up to N s for a final state",
    # `Prefer: wait=N` long-polls up to PREFER_WAIT_MAX_S: the route bounds its own time.
    openapi_extra=contract(timeout_s=0),
)
async def get_job(
    job_id: JobId,
    request: Request,
    response: Response,
    prefer: Annotated[
        str | None,
        Header(max_length=256, description="RFC 7240 `wait=N`: block up to N seconds (capped) for a final state"),
    ] = None,
) -> dict:
    wait = prefer_wait_seconds(prefer, request.app.state.settings.prefer_wait_max_s)
    if wait > 0:
        response.headers["Preference-Applied"] = f"wait={int(wait)}"
    return _view(await _wait_final(job_id, wait))


async def _wait_final(job_id: str, seconds: float) -> dict:
    """The job once final, or as it is after `seconds`."""
    job = await asyncio.to_thread(get_or_404, job_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while job["status"] not in jobstore.TERMINAL and loop.time() < deadline:
        await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))
        job = await asyncio.to_thread(get_or_404, job_id)
    return job


@router.get(
    "/{job_id}/wait",
    operation_id="wait_job",
    response_model=Job,
    responses=ERRORS(404),
    summary="Wait up to timeout_s seconds for a job to end, then answer its state (for MCP agents)",
    # The route bounds its own time (timeout_s, at most PREFER_WAIT_MAX_S).
    openapi_extra=contract(timeout_s=0),
)
async def wait_job(
    job_id: JobId,
    request: Request,
    timeout_s: Annotated[
        float, Query(ge=0, le=600, description="seconds to wait at most (capped by PREFER_WAIT_MAX_S)")
    ] = 30,
) -> dict:
    return _view(await _wait_final(job_id, min(timeout_s, request.app.state.settings.prefer_wait_max_s)))


@router.get(
    "/{job_id}/items",
    operation_id="job_items",
    response_model=JobItems,
    responses=ERRORS(404),
    summary="The items a job has finished so far, with their outcomes (while it runs, too)",
)
async def job_items(job_id: JobId) -> dict:
    job = await asyncio.to_thread(get_or_404, job_id)
    items = await asyncio.to_thread(outcomes_so_far, registry.job_store().r, job_id)
    if not items and isinstance((job.get("result") or {}), dict):
        items = (job.get("result") or {}).get("items") or []
    return {"job_id": job_id, "status": job["status"], "items": items}


@router.get(
    "", operation_id="list_jobs", response_model=JobList, responses=ERRORS(), summary="Recent jobs, newest first"
)
async def list_jobs(
    kind: Annotated[str | None, Query(max_length=64, description="only jobs of this kind (e.g. ingest)")] = None,
    status: Annotated[JobStatus | None, Query(description="only jobs in this state")] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="jobs per page")] = 50,
    cursor: Annotated[
        int, Query(ge=0, le=CURSOR_MAX, description="next_cursor of the previous page; 0 starts at the newest")
    ] = 0,
) -> dict:
    jobs, nxt = await asyncio.to_thread(registry.job_store().list, kind=kind, status=status, limit=limit, cursor=cursor)
    return {"jobs": [_view(j) for j in jobs], "next_cursor": nxt}


@router.delete(
    "/{job_id}",
    operation_id="cancel_job",
    response_model=Job,
    responses=ERRORS(404, 409),
    summary="Cancel a queued or running job",
)
async def cancel_job(job_id: JobId) -> dict:
    job = await asyncio.to_thread(get_or_404, job_id)
    if job["status"] in jobstore.TERMINAL:
        raise YanaError.of(ErrorCode.CONFLICT, f"job {job_id} is already {job['status']}")
    await asyncio.to_thread(registry.cancel, job_id)
    return _view(await asyncio.to_thread(get_or_404, job_id))


class WorkerInfo(BaseModel):
    name: str
    queues: list[str]


class QueueStatus(Envelope):
    queues: dict[str, int] = Field(description="messages waiting per queue")
    workers: list[WorkerInfo] = Field(description="workers that answered within a second, with the queues they consume")


@queues_router.get(
    "/queues",
    operation_id="queue_status",
    response_model=QueueStatus,
    responses=ERRORS(503),
    summary="Queues with the messages waiting, and the workers (with their queues) that answer",
)
async def queue_status() -> dict:
    return await asyncio.to_thread(registry.queue_status, 1.0)


class RetryAccepted(Envelope):
    job_id: str | None = Field(description="the ingest job re-running the failed items (null: nothing to re-run)")
    status: JobStatus | None = None
    status_url: str | None = None
    retried: int = Field(description="failed items sent again")
    lost: list[dict[str, Any]] = Field(description="failed items that cannot be re-run (their uploaded bytes are gone)")
    existing: bool = Field(False, description="this job's failed items were already re-run: that job")


def _retry_failed(job_id: str) -> dict:
    job = get_or_404(job_id)
    if job["kind"] != "ingest":
        raise YanaError.of(ErrorCode.CONFLICT, f"job {job_id} is a {job['kind']} job; only ingest items can be re-run")
    if job["status"] not in jobstore.TERMINAL:
        raise YanaError.of(ErrorCode.CONFLICT, f"job {job_id} is still {job['status']}")
    r = get_redis()
    bound = retry_job_of(r, job_id)
    if bound:
        again = get_or_404(bound)
        return {
            "job_id": bound,
            "status": again["status"],
            "status_url": f"/v1/jobs/{bound}",
            "retried": len((again.get("params") or {}).get("items") or []),
            "lost": [],
            "existing": True,
        }
    new_id = new_job_id()
    items, lost = failed_items_to_retry(r, job, new_id, get_blobs())
    if not items:
        return {"job_id": None, "retried": 0, "lost": lost}
    strict = bool((job.get("params") or {}).get("strict"))
    corr = context.current()
    created = registry.enqueue(
        "ingest",
        {"items": items, "strict": strict},
        correlation=corr.as_dict() if corr else None,
        callback_url=job.get("callback_url"),
        job_id=new_id,
        parent_id=job_id,
        once=retry_binding(job_id),
    )
    return {
        "job_id": created["id"],
        "status": created["status"],
        "status_url": f"/v1/jobs/{created['id']}",
        "retried": len(items),
        "lost": lost,
        "existing": created["id"] != new_id,
    }


@router.post(
    "/{job_id}/retry-failed",
    operation_id="retry_failed_items",
    response_model=RetryAccepted,
    responses=ERRORS(404, 409),
    summary="Re-run a finished ingest job's failed items as a new job (idempotent: once per job)",
)
async def retry_failed(job_id: JobId) -> dict:
    return await asyncio.to_thread(_retry_failed, job_id)
