"""Unified error bodies: {"error":{code,message,retryable},"run_id","trace_id"} for every failure."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from yana import context
from yana.errors import YanaError

log = logging.getLogger("yana.api")

_STATUS_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMEOUT",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "UNPROCESSABLE",
    429: "RATE_LIMITED",
}


def error_response(err: YanaError, headers: dict | None = None) -> JSONResponse:
    corr = context.current()
    body = {
        "error": err.body(),
        "run_id": corr.run_id if corr else None,
        "trace_id": corr.trace_id if corr else None,
    }
    return JSONResponse(body, status_code=err.status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(YanaError)
    async def _yana(_: Request, exc: YanaError):
        return error_response(exc, getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
            parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
        return error_response(YanaError("BAD_REQUEST", "; ".join(parts) or "invalid request", 400))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        code = _STATUS_CODES.get(exc.status_code, "INTERNAL" if exc.status_code >= 500 else "BAD_REQUEST")
        msg = exc.detail if isinstance(exc.detail, str) else code.lower()
        return error_response(YanaError(code, msg, exc.status_code, exc.status_code >= 500), exc.headers)

    @app.exception_handler(Exception)
    async def _unhandled(_: Request, exc: Exception):
        log.exception("unhandled error")
        return error_response(YanaError("INTERNAL", "internal error", 500, retryable=True))
