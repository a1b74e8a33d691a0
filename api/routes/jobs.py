"""Jobs: poll (optionally waiting, RFC 7240 `Prefer: wait=N`), list, cancel."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request, Response
from pydantic import BaseModel, Field

from api.schemas import ERRORS, Envelope
from pipelines import jobs as jobstore
from tasks import registry
from yana.errors import YanaError

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_WAIT_RE = re.compile(r"(?:^|[,;\s])wait\s*=\s*(\d+)", re.I)


class Progress(BaseModel):
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
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"]
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


class JobList(Envelope):
    jobs: list[Job]
    next_cursor: int | None


def _view(job: dict) -> dict:
    return jobstore.public_view(job)


def get_or_404(job_id: str) -> dict:
    job = registry.job_store().get(job_id)
    if job is None:
        raise YanaError("NOT_FOUND", f"job {job_id} not found", 404)
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
)
async def get_job(
    job_id: str,
    request: Request,
    response: Response,
    prefer: Annotated[str | None, Header()] = None,
) -> dict:
    job = await asyncio.to_thread(get_or_404, job_id)
    wait = prefer_wait_seconds(prefer, request.app.state.settings.prefer_wait_max_s)
    if wait > 0:
        response.headers["Preference-Applied"] = f"wait={int(wait)}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while job["status"] not in jobstore.TERMINAL and loop.time() < deadline:
            await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))
            job = await asyncio.to_thread(get_or_404, job_id)
    return _view(job)


@router.get("", operation_id="list_jobs", response_model=JobList, responses=ERRORS(), summary="Recent jobs, newest first")
async def list_jobs(
    kind: str | None = None,
    status: Literal["queued", "running", "succeeded", "failed", "cancelled"] | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[int, Query(ge=0)] = 0,
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
async def cancel_job(job_id: str) -> dict:
    job = await asyncio.to_thread(get_or_404, job_id)
    if job["status"] in jobstore.TERMINAL:
        raise YanaError("CONFLICT", f"job {job_id} is already {job['status']}", 409)
    await asyncio.to_thread(registry.cancel, job_id)
    return _view(await asyncio.to_thread(get_or_404, job_id))
