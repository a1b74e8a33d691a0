"""The OpenAPI document states the contract of every operation, not just its success body.

FastAPI documents most of it from the routes themselves: the bearer security scheme and the
correlation request headers (api.deps dependencies), and the error responses a route declares
or its router is included with (api.contract.include_router, api.schemas.ERRORS). What depends
on a route's merged policy is added here, per operation: 408 when it has a time limit, 413 and
415 when it takes a body, Idempotency-Key with its 409 and 422, the correlation headers on every
response (Retry-After on 429, WWW-Authenticate on 401), and the policy under x-yana-contract.

FastAPI documents request validation as 422 HTTPValidationError; validation errors answer 400
with the error body here (422 only where a route declares it), so that entry is dropped.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from api.contract.policy import EXTENSION, ResolvedPolicy
from api.contract.routing import RouteIndex
from api.deps import bearer_scheme
from api.schemas import DESCRIPTIONS, ErrorResponse
from yana.settings import Settings

_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
_FASTAPI_VALIDATION = ("HTTPValidationError", "ValidationError")
_HEADERS = {
    "X-Run-Id": {
        "description": "Run id: the caller's X-Run-Id when valid, else generated",
        "schema": {"type": "string"},
    },
    "X-Trace-Id": {
        "description": "Trace id: the caller's X-Trace-Id when valid, else the W3C trace-id",
        "schema": {"type": "string"},
    },
    "traceparent": {"description": "W3C trace context of this server's span", "schema": {"type": "string"}},
    "X-Request-Duration-Ms": {"description": "Server time spent on the request", "schema": {"type": "number"}},
}
_STATUS_HEADERS = {
    "429": {"Retry-After": {"description": "Seconds until a request is admitted again", "schema": {"type": "integer"}}},
    "401": {"WWW-Authenticate": {"description": "Bearer challenge", "schema": {"type": "string"}}},
}
_REPLAYED_HEADER = {
    "Idempotent-Replayed": {
        "description": "true when this is the stored response of an earlier request with the same Idempotency-Key",
        "schema": {"type": "string"},
    }
}
_IDEMPOTENCY_PARAM = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Makes the POST safe to retry: the same key and body replay the first response "
    "(Idempotent-Replayed: true); the same key while the first runs -> 409; "
    "with another body -> 422 (IETF draft-ietf-httpapi-idempotency-key-header). Scope: a key "
    "belongs to the caller's bearer token when auth is on (the same key from any address is the "
    "same request), to the client address when auth is off; kept IDEMPOTENCY_TTL_S after success",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


def _error_response(status: int) -> dict:
    return {"description": DESCRIPTIONS.get(status, "Error"), "content": {"application/json": {"schema": _ERROR_REF}}}


def policy_statuses(rp: ResolvedPolicy, has_body: bool, settings: Settings) -> set[int]:
    """The error statuses an operation can answer because of its policy."""
    statuses = {408} if rp.timeout(settings) else set()
    if has_body or rp.has_body:
        statuses |= {413, 415}
    if rp.idempotent:
        statuses |= {409, 422}
    if rp.policy.schema_error_status != 400:
        statuses.add(rp.policy.schema_error_status)
    if not rp.policy.public:  # a router included without api.contract.include_router
        statuses |= {401, 429}
    return statuses


def _response_headers(status: str, idempotent: bool) -> dict:
    headers: dict[str, Any] = {name: {"$ref": f"#/components/headers/{name}"} for name in _HEADERS}
    headers.update(_STATUS_HEADERS.get(status, {}))
    if status.startswith("2") and idempotent:
        headers.update(_REPLAYED_HEADER)
    return headers


def document_operation(op: dict, rc: Any, rp: ResolvedPolicy, settings: Settings) -> None:
    responses = op.setdefault("responses", {})
    declared = {str(s) for s in (getattr(rc, "responses", None) or {})}
    statuses = policy_statuses(rp, "requestBody" in op, settings)
    if "422" not in declared:
        responses.pop("422", None)  # FastAPI's HTTPValidationError entry
    for status in sorted(statuses):
        responses.setdefault(str(status), _error_response(status))
    for code, resp in responses.items():
        resp.setdefault("headers", {}).update(_response_headers(code, rp.idempotent))
    if not rp.policy.public:
        op.setdefault("security", [{bearer_scheme.scheme_name: []}])
    if rp.idempotent:
        parameters = op.setdefault("parameters", [])
        if not any(p.get("name", "").lower() == "idempotency-key" for p in parameters):
            parameters.append(dict(_IDEMPOTENCY_PARAM))
    op[EXTENSION] = rp.summary(settings)


def _add_components(schema: dict) -> None:
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION:
        schemas.pop(name, None)
    err_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in err_schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas.setdefault("ErrorResponse", err_schema)
    components.setdefault("headers", {}).update(_HEADERS)
    components.setdefault("securitySchemes", {}).setdefault(
        bearer_scheme.scheme_name, bearer_scheme.model.model_dump(by_alias=True, exclude_none=True)
    )


def augment(schema: dict, index: RouteIndex, settings: Settings) -> dict:
    _add_components(schema)
    paths = schema.get("paths", {})
    for rc in index.routes():
        if not isinstance(rc.original_route, APIRoute) or not rc.include_in_schema:
            continue
        item = paths.get(rc.path_format, {})
        for method in rc.methods:
            op = item.get(method.lower())
            if op is not None:
                document_operation(op, rc, index.policy_of(rc), settings)
    return schema


def install_openapi(app: FastAPI, index: RouteIndex, settings: Settings) -> None:
    build = app.openapi  # FastAPI's generator (caches into app.openapi_schema)

    def openapi() -> dict:
        if app.openapi_schema is None:
            index.rebuild()  # routes added since (e.g. /mcp) are known before the document is built
            app.openapi_schema = augment(build(), index, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
