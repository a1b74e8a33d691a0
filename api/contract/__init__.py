"""The HTTP contract every route follows (seed 000), installed once by api.main.create_app.

A route gets all of this without doing anything:

- errors: raise `yana.errors.YanaError(code, message, status, retryable)`; every failure
  (validation, unknown route, body too large, unhandled exception) answers
  {"error": {code, message, retryable}, "run_id", "trace_id"}.
- correlation: X-Run-Id / X-Trace-Id / traceparent / tracestate validated, kept in
  `yana.context.current()` for the request (the job store, task headers and logs read it),
  echoed with X-Request-Duration-Ms on every response; one JSON-lines access record.
- auth: `Authorization: Bearer` with AUTH_TOKENS when AUTH_ENABLED (health/version stay open).
- rate limit: token bucket per token (per client address with auth off), RATE_LIMIT/RATE_BURST.
- body cap (413, MAX_BODY_BYTES), media type (415, from the route's body: JSON or form),
  time limit (408, REQUEST_TIMEOUT_S).
- Idempotency-Key on job-creating POSTs (any POST route with status_code=202).
- versions: server_version / policy_version added to a success JSON body lacking them.
- OpenAPI: error responses, headers, security and the policy are documented per operation;
  every route is also an MCP tool at /mcp named by its operation_id.

What a route must still write: an explicit `operation_id` (= MCP tool name), `tags`, a
`response_model` deriving from `api.schemas.Envelope`, and `responses=ERRORS(...)` for its own
statuses (404, 409, ...).

Per-route differences are declared, not coded, with `contract(...)` in `openapi_extra`::

    from api.contract import contract

    @router.post("/v1/ingest", operation_id="ingest", status_code=202, ...,
                 openapi_extra=contract(max_body_bytes=50 * 1024 * 1024, replay_dedup=True))
    @router.post("/v1/search", operation_id="search", ..., openapi_extra=contract(timeout_s=2))
    @router.post("/v1/chat", operation_id="chat", ...,
                 openapi_extra=contract(timeout_ms_setting="chat_timeout_ms", timeout_grace_s=1,
                                        media_types=("application/json",
                                                     "application/x-www-form-urlencoded")))
    @router.post("/v1/retrieve", operation_id="retrieve", ..., openapi_extra=contract(schema_error_status=422))

Fields (api.contract.policy.RoutePolicy): public, rate, burst, max_body_bytes, media_types,
timeout_s (0 = no limit), timeout_ms_setting, timeout_grace_s, idempotent, replay_dedup,
schema_error_status. FastAPI's own `max_body_size=` on a route is honoured as its cap too.
The seeds' numbers for search/chat/ingest/reembed/retrieve are already defaults
(policy.SEED_DEFAULTS); operators override any route with ROUTE_POLICIES (JSON keyed by
operation_id).
"""

from __future__ import annotations

import logging
import os
import secrets

from fastapi import FastAPI

from api.contract.errors import install_error_handlers
from api.contract.middleware import INTERNAL_HEADER, ContractMiddleware
from api.contract.openapi import install_openapi
from api.contract.policy import RoutePolicy, contract
from api.contract.routing import RouteIndex
from yana import logging as ylog
from yana.settings import get_settings

__all__ = ["install_contract", "contract", "RoutePolicy"]


def install_contract(app: FastAPI) -> None:
    """Install on an app whose routers are already included (routes added later are still
    covered by the middleware; they become MCP tools only if added before this call)."""
    from api.contract.mcp import mount_mcp

    settings = get_settings()
    if not logging.getLogger().handlers:  # a bare server process: JSON lines on stderr
        ylog.configure(os.environ.get("LOG_LEVEL", "INFO"))
    internal_secret = secrets.token_urlsafe(24)
    install_error_handlers(app)
    app.state.mcp = mount_mcp(app, settings, INTERNAL_HEADER, internal_secret)
    app.add_middleware(ContractMiddleware, fastapi_app=app, settings=settings, internal_secret=internal_secret)
    install_openapi(app, RouteIndex(app, settings), settings)
