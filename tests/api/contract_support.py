"""Helpers of the HTTP-contract tests: the real app served by uvicorn on a loopback port (so every
test goes through a real HTTP client and server), with probe routes that fail in each way the
contract must cover. The probe routes are added AFTER create_app() installed the contract, as a
feature module written later would be: declared with the contract's route class as every router
is, they get the contract without doing anything else."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import redis.exceptions
import uvicorn
from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel, Field

from api.contract import ContractRoute, contract
from api.schemas import ERRORS, Envelope
from cli.processes import free_port
from yana.errors import YanaError

probe = APIRouter(prefix="/test", tags=["probe"], route_class=ContractRoute)

SECRET = "sk-live-should-never-leak /srv/yana/secret.key"


class Echo(Envelope):
    value: dict | None = None


class Created(Envelope):
    job_id: int
    seen: dict


class RetrieveLike(BaseModel):
    query: str = Field(min_length=1)
    top_k: int = Field(5, ge=1, le=50)


class Payload(BaseModel):
    name: str
    delay_s: float = Field(0.0, ge=0, le=5)
    items: list[int] = Field(default_factory=list)


@probe.get(
    "/slow", operation_id="probe_slow", response_model=Echo, responses=ERRORS(), openapi_extra=contract(timeout_s=0.3)
)
async def slow(s: float = 1.0) -> dict:
    await asyncio.sleep(s)
    return {"value": {"slept": s}}


@probe.get("/sleepy", operation_id="probe_sleepy", response_model=Echo, responses=ERRORS())
async def sleepy(s: float = 1.0) -> dict:
    """No time limit of its own: REQUEST_TIMEOUT_S applies."""
    await asyncio.sleep(s)
    return {"value": {"slept": s}}


@probe.get("/crash", operation_id="probe_crash", response_model=Echo, responses=ERRORS())
async def crash() -> dict:
    raise RuntimeError(f"database password is {SECRET}")


@probe.get("/redis-down", operation_id="probe_redis_down", response_model=Echo, responses=ERRORS())
async def redis_down() -> dict:
    raise redis.exceptions.ConnectionError(f"Error 111 connecting to {SECRET}")


@probe.get("/redis-slow", operation_id="probe_redis_slow", response_model=Echo, responses=ERRORS())
async def redis_slow() -> dict:
    raise redis.exceptions.TimeoutError("Timeout reading from socket")


@probe.get("/conflict", operation_id="probe_conflict", response_model=Echo, responses=ERRORS(409))
async def conflict() -> dict:
    raise YanaError("CONFLICT", "already done", 409)


@probe.post(
    "/retrieve",
    operation_id="probe_retrieve",
    response_model=Echo,
    responses=ERRORS(422),
    openapi_extra=contract(schema_error_status=422),
)
async def retrieve_like(body: RetrieveLike) -> dict:
    return {"value": body.model_dump()}


@probe.post("/jobs", operation_id="probe_jobs", status_code=202, response_model=Created, responses=ERRORS())
async def create_job(body: Payload, request: Request) -> dict:
    """Job-creating (202) like the real ones: a counter in Redis stands for the job store."""
    await asyncio.sleep(body.delay_s)
    job_id = await request.app.state.redis.incr("test:probe:jobs")
    return {"job_id": job_id, "seen": body.model_dump()}


@probe.post(
    "/labels",
    operation_id="probe_labels",
    status_code=202,
    response_model=Created,
    responses=ERRORS(),
    openapi_extra=contract(replay_dedup=True),
)
async def create_label(body: Payload, request: Request) -> dict:
    job_id = await request.app.state.redis.incr("test:probe:jobs")
    return {"job_id": job_id, "seen": body.model_dump(), "dedup": False}


@probe.post(
    "/upload",
    operation_id="probe_upload",
    response_model=Echo,
    responses=ERRORS(),
    openapi_extra=contract(max_body_bytes=1000),
)
async def upload(body: Payload) -> dict:
    return {"value": {"items": len(body.items)}}


@probe.post("/native-cap", operation_id="probe_native_cap", response_model=Echo, responses=ERRORS(), max_body_size=2000)
async def native_cap(body: Payload) -> dict:
    return {"value": {"items": len(body.items)}}


@probe.get("/bare", operation_id="probe_bare", responses=ERRORS())
async def bare() -> dict:
    """A body without the versions: the contract adds them."""
    return {"value": 1}


def build_app(with_probes: bool = True) -> FastAPI:
    from api.main import create_app

    app = create_app()
    if with_probes:
        app.include_router(probe)
    return app


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Serve the app with uvicorn in a thread (lifespan on) and yield its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False)
    )
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test API server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


@contextmanager
def contract_server(with_probes: bool = True, **env: str) -> Iterator[httpx.Client]:
    """The app with the given settings (env names), served; an httpx client on it. The
    environment and the settings cache are restored afterwards."""
    from yana import clients
    from yana.settings import get_settings

    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, str(value))
        get_settings.cache_clear()
        clients._redis.cache_clear()
        restore_celery = point_celery_at_settings()
        try:
            app = build_app(with_probes)
            with serve(app) as url, httpx.Client(base_url=url, timeout=30) as client:
                client.app = app  # type: ignore[attr-defined]
                yield client
        finally:
            mp.undo()
            get_settings.cache_clear()
            clients._redis.cache_clear()
            restore_celery()


def point_celery_at_settings():
    """registry.send() uses the module-level Celery app of workers.celery_app, which took its
    broker URL from the settings when it was first imported (in a test session that can be
    before the harness pointed REDIS_URL at the private Redis). Jobs sent by an in-process API
    must reach the test stack's Redis, never a default one."""
    import workers.celery_app as celery_module
    from yana.settings import get_settings

    url = get_settings().redis_url
    previous = celery_module.app
    if previous.conf.broker_url != url:
        celery_module.app = celery_module.create_app()
    assert celery_module.app.conf.broker_url == url

    def restore() -> None:
        celery_module.app = previous

    return restore


def assert_error(resp: httpx.Response, status: int, code: str, retryable: bool | None = None) -> dict:
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error", "run_id", "trace_id"}, body
    assert set(body["error"]) == {"code", "message", "retryable"}, body
    assert body["error"]["code"] == code, body
    if retryable is not None:
        assert body["error"]["retryable"] is retryable, body
    # The ids in the body are the ones echoed in the headers.
    assert body["run_id"] == resp.headers["x-run-id"]
    assert body["trace_id"] == resp.headers["x-trace-id"]
    return body
