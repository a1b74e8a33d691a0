"""A trivial job kind that exercises the runtime (not a feature)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import BaseModel, Field, StrictInt

from api.contract import ContractRoute
from api.jobs_common import JobAccepted, accept_job
from api.schemas import ERRORS

router = APIRouter(prefix="/v1/demo", tags=["demo"], route_class=ContractRoute)


class SleepRequest(BaseModel):
    steps: StrictInt = Field(3, ge=0, le=10_000)
    step_s: float = Field(0.1, ge=0, le=60)
    fail: bool = False
    callback_url: str | None = Field(None, max_length=2048, description="POSTed the job record when it ends")


@router.post(
    "/sleep",
    operation_id="demo_sleep",
    status_code=202,
    response_model=JobAccepted,
    responses=ERRORS(),
    summary="Enqueue a job that sleeps N steps (runtime check)",
)
async def demo_sleep(body: SleepRequest) -> dict:
    params = body.model_dump(exclude={"callback_url"})
    return await asyncio.to_thread(accept_job, "demo.sleep", params, body.callback_url)
