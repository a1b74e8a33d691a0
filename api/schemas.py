"""Response models shared by every route: the success envelope and the error body."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from yana import POLICY_VERSION, __version__


class ErrorDetail(BaseModel):
    code: str = Field(
        description="BAD_REQUEST, UNAUTHORIZED, NOT_FOUND, REQUEST_TIMEOUT, CONFLICT, "
        "PAYLOAD_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE, UNPROCESSABLE, RATE_LIMITED, "
        "INTERNAL, UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE, ..."
    )
    message: str
    retryable: bool = Field(description="true when the same request may succeed later (retry with backoff)")


class ErrorResponse(BaseModel):
    """The body of every error response of every route."""

    error: ErrorDetail
    run_id: str | None = None
    trace_id: str | None = None


class Envelope(BaseModel):
    """Every successful JSON body carries the server and policy versions."""

    model_config = ConfigDict(extra="allow")
    server_version: str = __version__
    policy_version: str = POLICY_VERSION


DESCRIPTIONS = {
    400: "Bad request (malformed JSON, missing or wrong fields, empty Idempotency-Key)",
    401: "Missing or invalid bearer token",
    404: "Not found",
    408: "Request timed out (retryable)",
    409: "Conflict (e.g. a request with this Idempotency-Key is still in flight)",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Schema violation, or Idempotency-Key reused with another request",
    429: "Rate limited (see Retry-After)",
    500: "Internal error",
    502: "Upstream unavailable",
    503: "Upstream unavailable, or the service cannot serve",
    504: "Upstream timed out",
}


def ERRORS(*statuses: int) -> dict:  # noqa: N802 - reads like a constant in route decorators
    """OpenAPI `responses` for a route's own error statuses (404, 409, ...), with the error body.
    Those every route can answer (400, 5xx; 401 and 429 when protected) come with
    api.contract.include_router; those its policy implies (408, 413, 415, Idempotency-Key's 409
    and 422) are added by api.contract.openapi."""
    return {s: {"model": ErrorResponse, "description": DESCRIPTIONS[s]} for s in sorted(set(statuses))}


def inline_schema(model: type[BaseModel]) -> dict:
    """The model's JSON schema with its $defs inlined (the OpenAPI document has no $defs root)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.split("/")[-1]])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)
