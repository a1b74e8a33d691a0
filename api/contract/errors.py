"""Unified error bodies: {"error":{code,message,retryable},"run_id","trace_id"} for every failure.

YanaError (yana.errors) is the one exception type. FastAPI's own errors (validation, unknown
route, wrong method, body limits) and anything unhandled are mapped onto it here, so no response
ever carries a stack trace, a file path or a setting.
"""

from __future__ import annotations

import logging
import threading
import time

import httpx
import redis.exceptions
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.contract.gate import POLICY_KEY
from yana import context
from yana.errors import CODE_OF_STATUS, ERRORS, ErrorCode, YanaError, internal

log = logging.getLogger("yana.api")

# Statuses a framework error is worth retrying on (the table's generic code for it is retryable).
RETRYABLE_STATUSES = {status for status, code in CODE_OF_STATUS.items() if ERRORS[code].retryable}

# FastAPI/pydantic error types that mean "malformed or missing" (400) rather than "violates the
# schema" (answered 422 where a route's policy says so, as /v1/retrieve does).
MALFORMED_TYPES = {"json_invalid", "json_type", "missing", "model_attributes_type", "dict_type", "model_type"}


def http_error(status: int, message: str | None = None, retryable: bool | None = None) -> YanaError:
    code = CODE_OF_STATUS.get(status, ErrorCode.INTERNAL if status >= 500 else ErrorCode.BAD_REQUEST)
    return YanaError(
        code,
        message or code.replace("_", " ").lower(),
        status,
        status in RETRYABLE_STATUSES if retryable is None else retryable,
    )


class LastError:
    """The last 5xx this process answered, for /v1/healthz `last_error`."""

    def __init__(self):
        self._lock = threading.Lock()
        self.value: str | None = None

    def record(self, err: YanaError) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with self._lock:
            self.value = f"{stamp} {err.code}: {err.message}"


last_error = LastError()


def error_body(err: YanaError) -> dict:
    return {"error": err.body(), **context.body_ids()}


def error_response(err: YanaError, headers: dict | None = None) -> JSONResponse:
    if err.status >= 500:
        last_error.record(err)
    merged = dict(getattr(err, "headers", None) or {})
    merged.update(headers or {})
    return JSONResponse(error_body(err), status_code=err.status, headers=merged or None)


def from_exception(exc: BaseException) -> YanaError:
    """What an exception nobody handled means for the caller. Messages are fixed strings: the
    exception's own text may hold hosts, paths or secrets."""
    if isinstance(exc, YanaError):
        return exc
    if isinstance(exc, StarletteHTTPException):
        return http_error(exc.status_code, exc.detail if isinstance(exc.detail, str) else None)
    if isinstance(exc, (redis.exceptions.TimeoutError, httpx.TimeoutException)):
        return YanaError.of(ErrorCode.UPSTREAM_TIMEOUT, "a backing service timed out")
    if isinstance(exc, (redis.exceptions.ConnectionError, httpx.TransportError, ConnectionError)):
        return YanaError.of(ErrorCode.UPSTREAM_UNAVAILABLE, "a backing service is unavailable")
    return internal()


def validation_error(exc: RequestValidationError, schema_error_status: int = 400) -> YanaError:
    errors = exc.errors()
    parts = []
    for e in errors[:5]:
        if e.get("type") == "json_invalid":
            parts.append(f"malformed JSON body: {(e.get('ctx') or {}).get('error', 'decode error')}")
            continue
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
    message = "; ".join(parts) or "invalid request"
    malformed = any(e.get("type") in MALFORMED_TYPES for e in errors)
    status = 400 if malformed or schema_error_status == 400 else schema_error_status
    return http_error(status, message, retryable=False)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(YanaError)
    async def _yana(_: Request, exc: YanaError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        resolved = request.scope.get(POLICY_KEY)
        status = resolved.policy.schema_error_status if resolved is not None else 400
        return error_response(validation_error(exc, status))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        return error_response(from_exception(exc), exc.headers)

    @app.exception_handler(Exception)
    async def _unhandled(_: Request, exc: Exception):
        # Normally the contract middleware answers first; this is the net under it.
        log.error("unhandled error", exc_info=exc)
        return error_response(from_exception(exc))
