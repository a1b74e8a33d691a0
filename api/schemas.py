"""Response models shared by every route: the success envelope and the error body."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from yana import POLICY_VERSION, __version__


class ErrorDetail(BaseModel):
    code: str
    message: str
    retryable: bool


class ErrorResponse(BaseModel):
    error: ErrorDetail
    run_id: str | None = None
    trace_id: str | None = None


class Envelope(BaseModel):
    """Every successful JSON body carries the server and policy versions (seed 000)."""

    model_config = ConfigDict(extra="allow")
    server_version: str = __version__
    policy_version: str = POLICY_VERSION


_DESCRIPTIONS = {
    400: "Bad request (malformed JSON, missing or wrong fields)",
    401: "Missing or invalid bearer token",
    404: "Not found",
    408: "Request timed out",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Schema violation or idempotency key reused with another body",
    429: "Rate limited (see Retry-After)",
    500: "Internal error",
    503: "Upstream unavailable",
}


def ERRORS(*statuses: int) -> dict:  # noqa: N802 - reads like a constant in route decorators
    """OpenAPI `responses` for a route: the given statuses plus those every route can answer."""
    common = {400, 401, 429, 500}
    return {s: {"model": ErrorResponse, "description": _DESCRIPTIONS[s]} for s in sorted(common | set(statuses))}
