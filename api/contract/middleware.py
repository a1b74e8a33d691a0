"""The contract middleware: what wraps every response, whatever route (or none) answers it.

Per request: keep_encoded_slashes -> correlation ids (set for the whole request, echoed on every
response with X-Request-Duration-Ms) -> the app -> the unified error body for anything raised
(the route's own contract checks included) -> one JSON-lines access record. A websocket without
a valid token is refused here (no route takes websockets; one added later stays closed).

Everything that depends on the route (auth, rate limit, body checks, idempotency, time limit,
versions) is the route's: api.contract.route.

Pure ASGI rather than BaseHTTPMiddleware: the correlation context var stays visible to handlers,
exception handlers and the access log, and streaming bodies are not wrapped in extra tasks.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.contract import correlation
from api.contract.auth import BearerAuth, bearer_token
from api.contract.errors import error_response, from_exception
from api.contract.gate import POLICY_KEY
from yana import context

access_log = logging.getLogger("yana.access")
log = logging.getLogger("yana.api")

_ENCODED_SLASH = re.compile(rb"%2f", re.IGNORECASE)


def keep_encoded_slashes(scope: Scope) -> None:
    """`/v1%2fversion` is one path segment, not `/v1/version`: the server decodes %2F into the
    path the router matches, so it is put back as %2F within its segment (no route takes a slash
    inside a parameter; such a request now answers 404 or its route's own id check)."""
    raw = scope.get("raw_path")
    if not raw or not _ENCODED_SLASH.search(raw):
        return
    text = raw.decode("latin-1")
    scope["path"] = "/".join(
        unquote(seg, encoding="utf-8", errors="surrogateescape").replace("/", "%2F") for seg in text.split("/")
    )


class ContractMiddleware:
    def __init__(self, app: ASGIApp, *, auth: BearerAuth, guard: Callable[[], None]):
        self.app = app
        self.auth = auth
        self.guard = guard  # refuses to serve a route added without the contract (api.contract)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No route takes websockets today; one added later is closed to callers without a token.
        if (
            scope["type"] == "websocket"
            and self.auth.enabled
            and not self.auth.valid(bearer_token(Headers(scope=scope).get("authorization")))
        ):
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        keep_encoded_slashes(scope)
        corr, tracestate = correlation.from_headers(scope.get("headers", []))
        scope["headers"] = correlation.rewrite_request_headers(scope.get("headers", []), corr, tracestate)
        ctx_token = context.set_current(corr)
        echo = correlation.response_headers(corr, tracestate)
        outcome: dict[str, Any] = {"status": 500, "started": False}

        async def send_out(message: Message) -> None:
            if message["type"] == "http.response.start":
                outcome["status"] = message["status"]
                outcome["started"] = True
                elapsed = f"{(time.perf_counter() - started) * 1000:.1f}".encode()
                message = {
                    **message,
                    "headers": [*message.get("headers", []), *echo, (b"x-request-duration-ms", elapsed)],
                }
            await send(message)

        try:
            self.guard()
            await self.app(scope, receive, send_out)
        except Exception as exc:  # noqa: BLE001 - every failure leaves as the seed's error body
            err = from_exception(exc)
            if err.status >= 500:
                log.error("unhandled error", exc_info=exc)
            if outcome["started"]:
                raise
            await error_response(err)(scope, receive, send_out)
        finally:
            policy = scope.get(POLICY_KEY)  # set once a route (or the router's 404) admitted it
            access_log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "route": policy.route_path if policy else None,
                    "path": scope.get("path", "")[:200],
                    "operation_id": policy.operation_id if policy else None,
                    "status": outcome["status"],
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
            context.reset(ctx_token)
