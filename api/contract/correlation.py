"""Correlation ids in, echoed out; one JSON-lines access log record per request."""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from yana import context, ids

log = logging.getLogger("yana.access")


def correlation_from_headers(headers: dict[str, str]) -> context.Correlation:
    run_id = headers.get("x-run-id")
    trace_id = headers.get("x-trace-id")
    parsed = ids.parse_traceparent(headers.get("traceparent"))
    w3c_trace = parsed[0] if parsed else ids.new_trace_id()
    return context.Correlation(
        run_id=run_id if ids.valid_correlation_id(run_id) else ids.new_run_id(),
        trace_id=trace_id if ids.valid_correlation_id(trace_id) else w3c_trace,
        traceparent=ids.make_traceparent(w3c_trace, flags=parsed[2] if parsed else "01"),
    )


class CorrelationMiddleware:
    """Pure ASGI (not BaseHTTPMiddleware) so the context var is visible to handlers and errors."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        corr = correlation_from_headers(headers)
        token = context.set_current(corr)
        started = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                elapsed = (time.perf_counter() - started) * 1000
                extra = [
                    (b"x-run-id", corr.run_id.encode()),
                    (b"x-trace-id", corr.trace_id.encode()),
                    (b"traceparent", corr.traceparent.encode()),
                    (b"x-request-duration-ms", f"{elapsed:.1f}".encode()),
                ]
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "route": getattr(route, "path", scope.get("path")),
                    "status": status["code"],
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
            context.reset(token)
