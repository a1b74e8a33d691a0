"""Per-route contract settings: auth, rate bucket, body cap, media types, time limit, idempotency.

A route declares what differs from the defaults once, in its decorator::

    @router.post("/v1/search", operation_id="search", ..., openapi_extra=contract(timeout_s=2))

The values are merged, later wins: built-in defaults -> the route's `contract(...)` ->
ROUTE_POLICIES[operation_id] from settings (operators; every field but `public`, which only the
route declares). The merged policy is what the route enforces (api.contract.route) and what the OpenAPI
document shows under `x-yana-contract`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from fastapi import params as fastapi_params
from fastapi.routing import APIRoute
from limits import parse as parse_rate

from yana.settings import Settings

EXTENSION = "x-yana-contract"

JSON_TYPES = ("application/json",)  # plus any application/*+json
FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


@dataclass(frozen=True)
class RoutePolicy:
    # No bearer token and no rate limit: health and version only.
    public: bool = False
    # Own token bucket for this route ("10/second" notation of the `limits` package) and burst;
    # None shares the default bucket (RATE_LIMIT / RATE_BURST).
    rate: str | None = None
    burst: int | None = None
    # Request body cap in bytes; None: the route's FastAPI `max_body_size`, else MAX_BODY_BYTES.
    max_body_bytes: int | None = None
    # Accepted request media types; None: derived from the route's body (JSON or form).
    media_types: tuple[str, ...] | None = None
    # Time limit in seconds (408 after it); None: REQUEST_TIMEOUT_S; 0: no limit (the route bounds
    # itself). `timeout_ms_setting` names a Settings field in ms instead (e.g. chat_timeout_ms),
    # plus `timeout_grace_s` so the route's own deadline handling answers first.
    timeout_s: float | None = None
    timeout_ms_setting: str | None = None
    timeout_grace_s: float = 0.0
    # Idempotency-Key handling; None: on for POST routes answering 202 (job-creating).
    idempotent: bool | None = None
    # A replayed body carries "dedup": true (/v1/ingest: the replay is a duplicate submission).
    replay_dedup: bool = False
    # Status for schema violations that are not malformed JSON or missing fields (400 or 422).
    schema_error_status: int = 400

    def replace(self, **changes: Any) -> RoutePolicy:
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name for f in fields(RoutePolicy)}

# Rate of the operations an agent's retriever loop calls back to back (retrieve, search, memo
# search), each in its own bucket: one caller sending warm requests one after another (~20-60 per
# second) must not hit 429 after the default burst of 50. Still a limit: a flood is refused.
AGENT_RATE: dict[str, Any] = {"rate": "100/second", "burst": 500}


def declared_public(route: Any) -> bool:
    """Whether a route declares itself open (contract(public=True)); ROUTE_POLICIES cannot."""
    extra = getattr(route, "openapi_extra", None) or {}
    return bool(extra.get(EXTENSION, {}).get("public", False))


def contract(**values: Any) -> dict:
    """`openapi_extra` for a route that differs from the defaults, e.g. contract(timeout_s=2)."""
    unknown = set(values) - _FIELDS
    if unknown:
        raise TypeError(f"unknown contract field(s): {sorted(unknown)}")
    if "rate" in values and values["rate"] is not None:
        parse_rate(values["rate"])  # fail at import, not at the first request
    return {EXTENSION: {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}}


def _coerce(values: dict) -> dict:
    out = {k: v for k, v in values.items() if k in _FIELDS}
    if isinstance(out.get("media_types"), list):
        out["media_types"] = tuple(out["media_types"])
    return out


@dataclass
class ResolvedPolicy:
    """A route's merged policy plus what the contract derives from the route itself."""

    policy: RoutePolicy
    operation_id: str | None = None
    route_path: str | None = None
    api_route: bool = False  # a FastAPI JSON route in the schema (not /mcp, not /docs)
    has_body: bool = False
    idempotent: bool = False
    media_types: tuple[str, ...] | None = None
    body_cap: int = 0
    bucket: str = "default"
    extra: dict = field(default_factory=dict)

    def timeout(self, settings: Settings) -> float | None:
        p = self.policy
        if not self.api_route:
            return None  # /mcp streams, /docs is static: only JSON routes get a deadline
        if p.timeout_ms_setting:
            return getattr(settings, p.timeout_ms_setting) / 1000.0 + p.timeout_grace_s
        t = settings.request_timeout_s if p.timeout_s is None else p.timeout_s
        return (t + p.timeout_grace_s) if t and t > 0 else None

    def summary(self, settings: Settings) -> dict:
        """What the OpenAPI document shows under x-yana-contract."""
        p = self.policy
        return {
            "public": p.public,
            "rate": p.rate or settings.rate_limit,
            "burst": p.burst or settings.rate_burst,
            "max_body_bytes": self.body_cap,
            "timeout_s": self.timeout(settings),
            "idempotent": self.idempotent,
        }


def _body_media_types(route: Any) -> tuple[str, ...] | None:
    body_field = getattr(route, "body_field", None)
    if body_field is None:
        return None
    if isinstance(body_field.field_info, (fastapi_params.Form, fastapi_params.File)):
        return FORM_TYPES
    return JSON_TYPES


def resolve(route_ctx: Any | None, settings: Settings) -> ResolvedPolicy:
    """Merge the policy of a route (a fastapi RouteContext, or None for no route)."""
    if route_ctx is None:
        return ResolvedPolicy(RoutePolicy(), body_cap=settings.max_body_bytes)
    original = getattr(route_ctx, "original_route", route_ctx)
    op_id = getattr(route_ctx, "operation_id", None) if isinstance(original, APIRoute) else None
    extra = getattr(route_ctx, "openapi_extra", None) or {}
    merged: dict[str, Any] = dict(extra.get(EXTENSION, {}))
    if op_id:
        merged.update({k: v for k, v in settings.route_policies.get(op_id, {}).items() if k != "public"})
    policy = RoutePolicy(**_coerce(merged))

    api_route = isinstance(original, APIRoute) and bool(getattr(route_ctx, "include_in_schema", False))
    methods = set(getattr(route_ctx, "methods", None) or ())
    media = policy.media_types or (_body_media_types(original) if isinstance(original, APIRoute) else None)
    idempotent = policy.idempotent
    if idempotent is None:
        idempotent = api_route and "POST" in methods and getattr(route_ctx, "status_code", None) == 202
    if policy.max_body_bytes is not None:
        cap = policy.max_body_bytes
    elif getattr(route_ctx, "max_body_size", None) is not None:
        cap = route_ctx.max_body_size
    else:
        cap = settings.max_body_bytes
    return ResolvedPolicy(
        policy=policy,
        operation_id=op_id,
        route_path=getattr(route_ctx, "path_format", None) or getattr(route_ctx, "path", None),
        api_route=api_route,
        has_body=media is not None,
        idempotent=bool(idempotent) and "POST" in methods,
        media_types=media,
        body_cap=cap,
        bucket=(op_id or route_ctx.path) if policy.rate or policy.burst else "default",
    )


def media_type_accepted(content_type: str | None, accepted: tuple[str, ...]) -> bool:
    if not content_type:
        return False
    essence = content_type.split(";", 1)[0].strip().lower()
    if essence in accepted:
        return True
    # RFC 6839 structured syntax suffix: application/problem+json is JSON too.
    return "application/json" in accepted and essence.startswith("application/") and essence.endswith("+json")
