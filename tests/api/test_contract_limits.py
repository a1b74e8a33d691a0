"""Per-route limits: time limits (408) and body caps (413), declared once by a route or by
operators (ROUTE_POLICIES)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from api.contract import contract, include_router
from api.contract.routing import RouteIndex
from api.schemas import Envelope
from tests.api.contract_support import assert_error, build_app, contract_server
from yana.settings import Settings

FAST = {"RATE_BURST": "100000", "RATE_LIMIT": "1000/second"}


def test_operators_override_a_route_limit_by_operation_id(redis_url):
    policies = '{"probe_slow": {"timeout_s": 2.0}, "probe_upload": {"max_body_bytes": 100000}}'
    with contract_server(REDIS_URL=redis_url, ROUTE_POLICIES=policies, **FAST) as c:
        assert c.get("/test/slow", params={"s": 0.8}).status_code == 200  # route says 0.3, operators 2.0
        assert_error(c.get("/test/slow", params={"s": 3}), 408, "REQUEST_TIMEOUT", retryable=True)
        big = {"name": "x", "items": list(range(2000))}
        assert c.post("/test/upload", json=big).status_code == 200


def test_default_time_limit_applies_to_every_route(redis_url):
    with contract_server(REDIS_URL=redis_url, REQUEST_TIMEOUT_S="0.5", **FAST) as c:
        # /test/bare is quick; a long-poll on a job is bounded by the route itself (no 408 cut).
        assert c.get("/test/bare").status_code == 200
        body = assert_error(c.get("/test/sleepy", params={"s": 2}), 408, "REQUEST_TIMEOUT", retryable=True)
        assert "0.5 s" in body["error"]["message"]
        assert c.get("/test/sleepy", params={"s": 0.05}).status_code == 200
        job = c.post("/v1/demo/sleep", json={"steps": 1, "step_s": 3}).json()
        try:
            r = c.get(f"/v1/jobs/{job['job_id']}", headers={"Prefer": "wait=2"})
            assert r.status_code == 200 and r.headers["preference-applied"] == "wait=2"
            assert float(r.headers["x-request-duration-ms"]) > 1500
        finally:
            c.delete(f"/v1/jobs/{job['job_id']}")


def _route_app() -> FastAPI:
    app = FastAPI()
    router = APIRouter()
    for op in ("job", "other"):
        status = 202 if op == "job" else 200

        async def handler() -> dict:
            return {}

        router.add_api_route(
            f"/v1/{op}", handler, methods=["POST"], operation_id=op, status_code=status, response_model=Envelope
        )
    router.add_api_route(
        "/v1/own",
        handler,
        methods=["POST"],
        operation_id="own",
        response_model=Envelope,
        openapi_extra=contract(timeout_s=1.5, rate="10/second", burst=3, max_body_bytes=10),
    )
    app.include_router(router)
    return app


def test_each_route_declares_its_numbers_once():
    settings = Settings(chat_timeout_ms=11000, request_timeout_s=30)
    index = RouteIndex(build_app(with_probes=False), settings)
    by_op = {index.policy_of(rc).operation_id: index.policy_of(rc) for rc in index.routes()}
    assert by_op["search"].timeout(settings) == by_op["search_get"].timeout(settings) == 2.0
    assert by_op["chat"].timeout(settings) == by_op["chat_legacy"].timeout(settings) == 12.0  # + 1 s grace
    assert by_op["ingest"].body_cap == 50 * 1024 * 1024 and by_op["ingest"].idempotent
    assert by_op["ingest"].policy.replay_dedup
    assert by_op["reembed"].idempotent and by_op["demo_sleep"].idempotent  # POST answering 202
    assert by_op["get_job"].timeout(settings) is None  # Prefer: wait bounds itself
    assert by_op["list_jobs"].timeout(settings) == 30 and not by_op["list_jobs"].idempotent
    # public: the probes, and the web console's static files (open like /docs: they hold no data)
    assert {op for op, rp in by_op.items() if rp.policy.public} == {
        "version",
        "healthz",
        "health",
        "healthcheck",
        "console",
        "console_root",
        "console_asset",
    }

    index = RouteIndex(_route_app(), settings)
    by_op = {index.policy_of(rc).operation_id: index.policy_of(rc) for rc in index.routes()}
    assert by_op["job"].idempotent and not by_op["other"].idempotent
    assert by_op["other"].timeout(settings) == 30
    own = by_op["own"]
    assert own.timeout(settings) == 1.5 and own.body_cap == 10 and own.bucket == "own"


def test_operators_cannot_make_a_route_public():
    settings = Settings(route_policies={"search": {"public": True, "timeout_s": 1}, "version": {"public": False}})
    index = RouteIndex(build_app(with_probes=False), settings)
    by_op = {index.policy_of(rc).operation_id: index.policy_of(rc) for rc in index.routes()}
    assert not by_op["search"].policy.public and by_op["search"].timeout(settings) == 1
    assert by_op["version"].policy.public


def test_a_route_without_the_contract_route_class_is_refused():
    """A plain APIRoute would be served with no auth, rate limit or body cap: include_router
    refuses its router, and an app that got it some other way refuses to start."""
    plain = APIRouter()

    @plain.get("/v1/plain", operation_id="plain", response_model=Envelope)
    async def handler() -> dict:
        return {}

    app = build_app(with_probes=False)
    with pytest.raises(TypeError, match="route_class=ContractRoute"):
        include_router(app, plain)
    app.include_router(plain)

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(RuntimeError, match="/v1/plain"):
        asyncio.run(start())


def test_a_route_without_the_contract_is_not_served_without_a_lifespan_either():
    """Served with no startup (a bare ASGI transport), a plain route added after install_contract
    is refused at the first request (500, the error body), never answered unchecked."""
    plain = APIRouter()

    @plain.get("/v1/plain", operation_id="plain", response_model=Envelope)
    async def handler() -> dict:
        return {"served": True}

    app = build_app(with_probes=False)
    app.include_router(plain)

    async def call() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.get("/v1/plain")

    r = asyncio.run(call())
    assert r.status_code == 500, r.text
    assert "served" not in r.text
    assert r.json()["error"]["code"]


def test_contract_rejects_unknown_fields():
    with pytest.raises(TypeError):
        contract(timeout=3)
