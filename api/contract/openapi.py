"""The OpenAPI document states the contract of every operation, not just its success body.

Added to each operation from its resolved policy: the error responses it can answer (400, 401
and 429 unless public, 408 with a time limit, 413/415 with a body, 409/422 with
Idempotency-Key, 500/503/504) with the unified error schema; the correlation headers on every
response and Retry-After / WWW-Authenticate where they apply; the bearer security scheme; the
Idempotency-Key and correlation request headers; and the merged policy under x-yana-contract.
FastAPI's default 422 "HTTPValidationError" is replaced: validation errors answer 400 here.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from api.contract.policy import EXTENSION
from api.contract.routing import RouteIndex
from api.schemas import DESCRIPTIONS, ErrorResponse
from yana.settings import Settings

_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}
_HEADERS = {
    "X-Run-Id": {"description": "Run id: the caller's X-Run-Id when valid, else generated",
                 "schema": {"type": "string"}},
    "X-Trace-Id": {"description": "Trace id: the caller's X-Trace-Id when valid, else the W3C trace-id",
                   "schema": {"type": "string"}},
    "traceparent": {"description": "W3C trace context of this server's span", "schema": {"type": "string"}},
    "X-Request-Duration-Ms": {"description": "Server time spent on the request", "schema": {"type": "number"}},
}
_REQUEST_HEADERS = {
    "X-Run-Id": "Run id to correlate logs and jobs (1-128 of A-Z a-z 0-9 . _ : -; generated when absent)",
    "X-Trace-Id": "Trace id (same charset; defaults to the traceparent trace-id)",
    "traceparent": "W3C Trace Context traceparent (an invalid one starts a new trace)",
    "tracestate": "W3C Trace Context tracestate (dropped when invalid)",
}
_IDEMPOTENCY_PARAM = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Makes the POST safe to retry: the same key and body replay the first response "
                   "(Idempotent-Replayed: true); the same key while the first runs -> 409; "
                   "with another body -> 422 (IETF draft-ietf-httpapi-idempotency-key-header)",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


def _error_response(status: int) -> dict:
    return {"description": DESCRIPTIONS.get(status, "Error"),
            "content": {"application/json": {"schema": _ERROR_REF}}}


def _response_headers(status: str, idempotent: bool) -> dict:
    headers: dict = {name: {"$ref": f"#/components/headers/{name}"} for name in _HEADERS}
    if status == "429":
        headers["Retry-After"] = {"description": "Seconds until a request is admitted again",
                                  "schema": {"type": "integer"}}
    elif status == "401":
        headers["WWW-Authenticate"] = {"description": "Bearer challenge", "schema": {"type": "string"}}
    elif status.startswith("2") and idempotent:
        headers["Idempotent-Replayed"] = {"description": "true when this is the stored response of an "
                                          "earlier request with the same Idempotency-Key",
                                          "schema": {"type": "string"}}
    return headers


def _schema_refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            out.add(ref.rsplit("/", 1)[1])
        for v in node.values():
            _schema_refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _schema_refs(v, out)


def augment(schema: dict, index: RouteIndex, settings: Settings) -> dict:
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    err_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in err_schema.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas["ErrorResponse"] = err_schema
    components.setdefault("headers", {}).update(_HEADERS)
    components.setdefault("securitySchemes", {})["bearerAuth"] = {
        "type": "http", "scheme": "bearer",
        "description": "AUTH_TOKENS; required on every operation but health and version when AUTH_ENABLED",
    }
    params = components.setdefault("parameters", {})
    for name, text in _REQUEST_HEADERS.items():
        params[f"header_{name}"] = {"name": name, "in": "header", "required": False, "description": text,
                                    "schema": {"type": "string", "maxLength": 512}}

    for rc in index.routes():
        if not isinstance(rc.original_route, APIRoute) or not rc.include_in_schema:
            continue
        rp = index.policy_of(rc)
        item = schema.get("paths", {}).get(rc.path_format, {})
        for method in rc.methods:
            op = item.get(method.lower())
            if op is None:
                continue
            statuses = {400, 500, 503, 504}
            if not rp.policy.public:
                statuses |= {401, 429}
                op["security"] = [{"bearerAuth": []}]
            else:
                op["security"] = []
            if rp.timeout(settings):
                statuses.add(408)
            if "requestBody" in op or rp.has_body:
                statuses |= {413, 415}
            if rp.idempotent:
                statuses |= {409, 422}
            if rp.policy.schema_error_status != 400:
                statuses.add(rp.policy.schema_error_status)
            responses = op.setdefault("responses", {})
            declared_422 = 422 in (getattr(rc, "responses", None) or {})
            v422 = responses.get("422")
            if v422 is not None and "HTTPValidationError" in str(v422) and not declared_422:
                del responses["422"]
            for status in sorted(statuses):
                current = responses.get(str(status))
                if current is None or "HTTPValidationError" in str(current):
                    responses[str(status)] = _error_response(status)
            for code, resp in responses.items():
                resp.setdefault("headers", {}).update(_response_headers(code, rp.idempotent))
            parameters = op.setdefault("parameters", [])
            names = {p.get("name", "").lower() for p in parameters if "name" in p}
            for name in _REQUEST_HEADERS:
                if name.lower() not in names:
                    parameters.append({"$ref": f"#/components/parameters/header_{name}"})
            if rp.idempotent and "idempotency-key" not in names:
                parameters.append(dict(_IDEMPOTENCY_PARAM))
            op[EXTENSION] = rp.summary(settings)

    # Drop FastAPI's validation-error schemas when nothing refers to them any more.
    for name in ("HTTPValidationError", "ValidationError"):
        if name in schemas:
            refs: set[str] = set()
            _schema_refs({k: v for k, v in schema.items() if k != "components"}, refs)
            _schema_refs({k: v for k, v in schemas.items() if k not in ("HTTPValidationError", "ValidationError")}, refs)
            if name not in refs:
                schemas.pop(name, None)
    return schema


def install_openapi(app: FastAPI, index: RouteIndex, settings: Settings) -> None:
    build = app.openapi  # FastAPI's generator (caches into app.openapi_schema)

    def openapi() -> dict:
        if app.openapi_schema is None:
            index.rebuild()  # routes added since (e.g. /mcp) are known before the document is built
            app.openapi_schema = augment(build(), index, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
