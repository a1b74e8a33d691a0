"""The Librarian (seed 004): POST /agent/librarian/think (one stateless step) and POST /v1/think (the
whole loop as a job on the `think` queue, against our own hybrid search).

A body that does not parse or breaks the schema is the contract's 400; a well-formed request the
service cannot think about (blank question, forged or foreign state) is a 200 with action ERROR
INVALID_INPUT, as the seed's output contract says. Logic: pipelines.think.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from api.contract import ContractRoute
from api.contract.policy import contract
from api.jobs_common import JobAccepted, accept_job
from api.routes.jobs import Job, get_or_404, prefer_wait_seconds
from api.schemas import ERRORS, Envelope
from pipelines.runtime import jobs as jobstore
from pipelines.think.graph import ThinkDeps, error_step, run_step_bounded
from pipelines.think.llm import build_think_llm
from pipelines.think.models import Aspect, Evidence, PlannedSearch, ThinkRequest
from yana import context as correlation
from yana.settings import get_settings

log = logging.getLogger("yana.api.think")
router = APIRouter(tags=["think"], route_class=ContractRoute)


class ThinkStep(Envelope):
    """One step's answer: `action` says which of the three it is; only that action's fields are
    present (SEARCH: queries_text, queries_vector, filters_hint, rationale, searches; COMPLETE:
    evidence, coverage_notes, covered, missing; ERROR: error_type, message), then the step's own
    fields and the `state` to send back."""

    action: Literal["SEARCH", "COMPLETE", "ERROR"]
    queries_text: list[str] | None = None
    queries_vector: list[str] | None = None
    filters_hint: dict[str, Any] | None = None
    rationale: str | None = None
    searches: list[PlannedSearch] | None = None
    evidence: list[Evidence] | None = None
    coverage_notes: str | None = None
    covered: list[str] | None = None
    missing: list[str] | None = None
    error_type: Literal["LOOP_LIMIT", "TIMEOUT", "INVALID_INPUT", "MODEL_FAILURE", "OTHER"] | None = None
    message: str | None = None
    request_id: str
    round: int = Field(description="search rounds done before this step")
    max_loops: int
    aspects: list[Aspect]
    planner: Literal["deterministic", "llm"]
    evaluator: Literal["deterministic", "llm"]
    warnings: list[str]
    elapsed_ms: int
    state: str = Field(description="send back as `state` on the next step, as is (signed; an edited one is refused)")
    run_id: str | None = None
    trace_id: str | None = None


class ThinkJobRequest(ThinkRequest):
    callback_url: str | None = Field(None, max_length=2048, description="POSTed the job record when it ends")


def _deps() -> ThinkDeps:
    s = get_settings()
    return ThinkDeps(settings=s, llm=build_think_llm(s))


@router.post(
    "/agent/librarian/think",
    operation_id="librarian_think",
    response_model=ThinkStep,
    response_model_exclude_none=True,
    responses=ERRORS(408),
    summary="One stateless step of the Librarian: SEARCH (what to search next), COMPLETE (evidence) or ERROR",
    # the step bounds itself (latency_budget_ms, at most 30 s); the contract's 408 is the backstop
    openapi_extra=contract(timeout_s=31),
)
async def librarian_think(body: ThinkRequest) -> dict:
    started = time.monotonic()
    ids = correlation.body_ids()
    log.info("think step requested", extra={"request_id": body.request_id})
    deps = _deps()
    if not body.user_query.strip():
        out = error_step(body, "INVALID_INPUT", "user_query is blank", deps.settings, started)
    else:
        out = await asyncio.to_thread(run_step_bounded, body, deps, started=started)
    return {**out, **ids, **Envelope().model_dump()}


@router.post(
    "/v1/think",
    operation_id="think",
    status_code=202,
    response_model=JobAccepted,
    responses={200: {"model": Job, "description": "finished within `Prefer: wait=N`"}, **ERRORS()},
    summary="Run the Librarian's loop (≤ max_loops search rounds over our hybrid search) as a job",
    openapi_extra=contract(timeout_s=0, idempotent=True),
)
async def think_job(request: Request, body: ThinkJobRequest, prefer: Annotated[str | None, Header()] = None):
    s = get_settings()
    params = body.model_dump(exclude={"callback_url"}, mode="json")
    accepted = await asyncio.to_thread(accept_job, "think", params, body.callback_url)
    wait = prefer_wait_seconds(prefer, s.prefer_wait_max_s)
    if wait <= 0:
        return accepted
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    job = await asyncio.to_thread(get_or_404, accepted["job_id"])
    while job["status"] not in jobstore.TERMINAL and loop.time() < deadline:
        await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))
        job = await asyncio.to_thread(get_or_404, accepted["job_id"])
    headers = {"Preference-Applied": f"wait={int(wait)}"}
    if job["status"] in jobstore.TERMINAL:
        return JSONResponse({**jobstore.public_view(job), **Envelope().model_dump()}, status_code=200, headers=headers)
    return JSONResponse({**accepted, **Envelope().model_dump()}, status_code=202, headers=headers)
