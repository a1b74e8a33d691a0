"""The real API app plus one probe route that waits before creating a job: a request to it (on a process
started with PROBE_DELAY_S) holds its Idempotency-Key claim long enough for a test to kill -9 the uvicorn process serving it.

Served by a real `python -m uvicorn tests.api.idem_probe_app:app` process (tests/api/
test_idempotency_dead_holder.py). The route is added after create_app() installed the contract,
as a feature module written later would be: the contract covers it (202 POST -> idempotent)."""

from __future__ import annotations

import asyncio
import os

from fastapi import APIRouter
from pydantic import BaseModel

from api.contract import ContractRoute, contract
from api.jobs_common import JobAccepted, accept_job
from api.main import create_app

app = create_app()
probe = APIRouter(prefix="/test", tags=["probe"], route_class=ContractRoute)


class SlowJob(BaseModel):
    tag: str = "x"


@probe.post(
    "/slow-job",
    operation_id="probe_slow_job",
    status_code=202,
    response_model=JobAccepted,
    openapi_extra=contract(timeout_s=0),
)
async def slow_job(body: SlowJob) -> dict:
    # The delay is the process's (PROBE_DELAY_S), not the request's: a retry of the same request
    # (same body, same key) to another process must not wait too.
    await asyncio.sleep(float(os.environ.get("PROBE_DELAY_S", "0")))
    return await asyncio.to_thread(accept_job, "demo.sleep", {"steps": 0, "step_s": 0.0, "fail": False}, None)


app.include_router(probe)
