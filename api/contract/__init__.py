"""The HTTP contract every route follows, installed once by api.main.create_app.

A route of a router declared with `route_class=ContractRoute` gets all of this without doing
anything else:

- errors: raise `yana.errors.YanaError(code, message, status, retryable)`; every failure
  (validation, unknown route, body too large, unhandled exception) answers
  {"error": {code, message, retryable}, "run_id", "trace_id"}.
- correlation: X-Run-Id / X-Trace-Id / traceparent / tracestate validated, kept in
  `yana.context.current()` for the request (the job store, task headers and logs read it),
  echoed with X-Request-Duration-Ms on every response; one JSON-lines access record.
- auth: `Authorization: Bearer` with AUTH_TOKENS when AUTH_ENABLED (routes declared public, the
  health and version routes, stay open), checked before the body is read (401 before 413/415/
  422), and documented by the `Security` dependency its router is included with (api.deps).
  Closed by default: what FastAPI itself serves (/openapi.json, /docs) and unknown paths are
  checked too, and the app refuses to start with a route that lacks the contract's route class.
- rate limit: token bucket per token (per client address with auth off), RATE_LIMIT/RATE_BURST.
- body cap (413, MAX_BODY_BYTES), media type (415, from the route's body: JSON or form),
  JSON nesting (400 past 64 levels), time limit (408, REQUEST_TIMEOUT_S).
- Idempotency-Key on job-creating POSTs (any POST route with status_code=202).
- versions: server_version / policy_version added to a success JSON body lacking them.
- OpenAPI: error responses, headers, security and the policy are documented per operation;
  every route is also an MCP tool at /mcp named by its operation_id.

Where it happens: the middleware (api.contract.middleware) wraps every response (correlation,
timing, error body, access log); everything that depends on the route (auth, rate limit, body
checks, idempotency, time limit, versions) runs in the route itself, `ContractRoute.handle`
(api.contract.route), after FastAPI routed the request and before it reads the body.

What a route must still write: its router's `route_class=ContractRoute`, an explicit
`operation_id` (= MCP tool name), `tags`, a `response_model` deriving from `api.schemas.Envelope`,
and `responses=ERRORS(...)` for its own statuses (404, 409, ...). Routers are added with
`include_router(app, router)`::

    router = APIRouter(prefix="/v1", tags=["search"], route_class=ContractRoute)

Per-route differences are declared once, not coded, with `contract(...)` in `openapi_extra`::

    from api.contract import contract

    @router.post("/v1/ingest", operation_id="ingest", status_code=202, ...,
                 openapi_extra=contract(max_body_bytes=50 * 1024 * 1024, replay_dedup=True))
    @router.post("/v1/search", operation_id="search", ..., openapi_extra=contract(timeout_s=2))
    @router.get("/v1/version", operation_id="version", ..., openapi_extra=contract(public=True))

Fields (api.contract.policy.RoutePolicy): public, rate, burst, max_body_bytes, media_types,
timeout_s (0 = no limit), timeout_ms_setting, timeout_grace_s, idempotent, replay_dedup,
schema_error_status. FastAPI's own `max_body_size=` on a route is honoured as its cap too.
Operators override any route but `public` with ROUTE_POLICIES (JSON keyed by operation_id).
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from api.contract.admission import INTERNAL_HEADER
from api.contract.auth import BearerAuth
from api.contract.errors import install_error_handlers
from api.contract.gate import RouteGate
from api.contract.middleware import ContractMiddleware
from api.contract.openapi import install_openapi
from api.contract.policy import RoutePolicy, contract, declared_public
from api.contract.route import ContractRoute, UnroutedRequests, guard_routes
from yana import logging as ylog
from yana.settings import get_settings

__all__ = ["install_contract", "include_router", "contract", "ContractRoute", "RoutePolicy"]


def include_router(app: FastAPI, router: APIRouter) -> None:
    """Include a router with what its routes share, declared through FastAPI so that it
    documents them itself: the error responses every route can answer, the correlation headers,
    and (unless its routes are declared public) the bearer security scheme with 401 and 429."""
    from api.deps import AUTHENTICATED, CORRELATED
    from api.schemas import ERRORS

    plain = [r.path for r in router.routes if isinstance(r, APIRoute) and not isinstance(r, ContractRoute)]
    if plain:
        raise TypeError(f"{plain}: declare the router with route_class=ContractRoute")
    public = {declared_public(r) for r in router.routes if isinstance(r, APIRoute)}
    if len(public) > 1:
        raise ValueError("a router's routes must be all public or all protected")
    if public == {True}:
        app.include_router(router, dependencies=CORRELATED, responses=ERRORS(400, 500, 503, 504))
    else:
        app.include_router(router, dependencies=AUTHENTICATED, responses=ERRORS(400, 401, 429, 500, 503, 504))


def install_contract(app: FastAPI) -> None:
    """Install on an app whose routers are already included (routers included later must use
    ContractRoute too, which startup checks; they become MCP tools only if added before this call)."""
    from api.contract.mcp import mount_mcp

    settings = get_settings()
    if not logging.getLogger().handlers:  # a bare server process: JSON lines on stderr
        ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))
    internal_secret = secrets.token_urlsafe(24)
    app.state.auth = BearerAuth(settings)
    install_error_handlers(app)
    gate = app.state.route_gate = RouteGate(app, settings, internal_secret)
    app.router.route_class = ContractRoute  # a route added on the app itself
    app.state.mcp = mount_mcp(app, settings, INTERNAL_HEADER, internal_secret)
    guard_routes(app, gate)
    app.router.default = UnroutedRequests(app, gate)
    _guard_routes_at_startup(app, gate)
    app.add_middleware(ContractMiddleware, auth=app.state.auth, guard=_guard_when_routes_change(app, gate))
    install_openapi(app, gate.policies, settings)


def _guard_when_routes_change(app: FastAPI, gate: RouteGate) -> Callable[[], None]:
    """guard_routes before a request whenever the app's route list has grown since the last check:
    an app served without a lifespan (a bare ASGI transport), or given a route after startup, is
    still closed by default (a route without the contract answers 500, never unchecked)."""
    checked = [len(app.router.routes)]

    def guard() -> None:
        if len(app.router.routes) != checked[0]:
            guard_routes(app, gate)
            checked[0] = len(app.router.routes)

    return guard


def _guard_routes_at_startup(app: FastAPI, gate: RouteGate) -> None:
    """guard_routes again once the app is complete (routers included after install_contract)."""
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(lifespan_app: Any) -> AsyncIterator[Any]:
        guard_routes(app, gate)
        async with inner(lifespan_app) as state:
            yield state

    app.router.lifespan_context = lifespan
