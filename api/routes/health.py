"""Health and version: open without a token, never rate limited.

Each check is a real probe with its own time limit: Redis PING; Chroma's heartbeat; the LLM
endpoint's /models (only when OPENAI_BASE_URL is set; cached, it is an outbound call); the active
collection named by the Redis alias exists in Chroma (RAG); the persona policy's self-check.
A health route answers 200 while the service can serve, with what is degraded; 503 (the error
body, its message naming the failures) only when it cannot: without Redis there are no jobs,
no rate limits and no idempotency.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
from fastapi import APIRouter, Request, Response
from pydantic import Field

from api.contract import ContractRoute, contract
from api.contract.errors import last_error
from api.contract.gate import app_redis
from api.schemas import ERRORS, Envelope
from pipelines.chat.health import circuit_problem
from pipelines.chat.persona import policy_self_check
from pipelines.search.collections import ACTIVE_ALIAS_KEY
from yana import INSTANCE_HEADER, NAME, POLICY_VERSION, __version__
from yana.clients import get_chroma
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings, get_settings

router = APIRouter(tags=["health"], route_class=ContractRoute)

_PUBLIC = contract(public=True, timeout_s=10)
_PROCESS_STARTED = time.monotonic()


@dataclass
class Check:
    ok: bool | None  # None: not configured (no LLM endpoint), which is not a degradation
    error: str | None = None


async def _guarded(name: str, probe, timeout_s: float) -> Check:
    try:
        return await asyncio.wait_for(probe(), timeout_s)
    except TimeoutError:
        return Check(False, f"{name}: no answer within {timeout_s:g} s")
    except Exception as exc:  # noqa: BLE001 - a failing probe is a result, never a 500
        return Check(False, f"{name}: {type(exc).__name__}")


async def _redis(request: Request) -> Check:
    await app_redis(request.app).ping()
    return Check(True)


async def _chroma(settings: Settings) -> Check:
    if settings.chroma_url:
        async with httpx.AsyncClient(timeout=settings.health_timeout_s) as client:
            resp = await client.get(settings.chroma_url.rstrip("/") + "/api/v2/heartbeat")
        return Check(resp.status_code == 200, None if resp.status_code == 200 else f"chroma: HTTP {resp.status_code}")
    if not Path(settings.chroma_path).is_dir():  # opening a PersistentClient would create one
        return Check(False, "chroma: no CHROMA_URL and no database at CHROMA_PATH")
    await asyncio.to_thread(lambda: get_chroma(settings).heartbeat())
    return Check(True)


class _LlmProbe:
    """GET {OPENAI_BASE_URL}/models with the key: reachable and the key accepted."""

    def __init__(self):
        self.at = 0.0
        self.target: tuple | None = None
        self.result: Check | None = None

    async def __call__(self, settings: Settings) -> Check:
        if not settings.openai_base_url:
            return Check(None)
        # chat's breaker: no LLM calls while open
        problem = await asyncio.to_thread(circuit_problem, settings)
        if problem:
            return Check(False, f"llm: {problem}")
        target = (settings.openai_base_url, settings.openai_api_key)
        if (
            self.result is not None
            and self.target == target
            and time.monotonic() - self.at < settings.health_llm_cache_s
        ):
            return self.result
        headers = {"Authorization": f"Bearer {settings.openai_api_key}"} if settings.openai_api_key else {}
        try:
            async with httpx.AsyncClient(timeout=settings.health_timeout_s) as client:
                resp = await client.get(settings.openai_base_url.rstrip("/") + "/models", headers=headers)
            result = Check(
                resp.status_code == 200, None if resp.status_code == 200 else f"llm: HTTP {resp.status_code}"
            )
        except httpx.HTTPError as exc:
            result = Check(False, f"llm: {type(exc).__name__}")
        self.result, self.at, self.target = result, time.monotonic(), target
        return result


_llm = _LlmProbe()


async def _rag(request: Request, settings: Settings, chroma: Check) -> Check:
    if not chroma.ok:
        return Check(False, "rag: chroma unreachable")
    alias = await app_redis(request.app).get(ACTIVE_ALIAS_KEY)
    if not alias:
        return Check(True)  # nothing ingested yet: search answers empty, which is correct
    try:
        await asyncio.to_thread(lambda: get_chroma(settings).get_collection(alias, embedding_function=None))
    except Exception:  # noqa: BLE001 - chromadb raises several types for a missing collection
        return Check(False, f"rag: active collection {alias!r} missing")
    return Check(True)


async def _policy() -> Check:
    ok, detail = await asyncio.to_thread(policy_self_check)
    return Check(ok, None if ok else f"policy: {detail}")


@dataclass
class Report:
    redis: Check
    chroma: Check
    llm: Check
    rag: Check
    policy: Check

    @property
    def can_serve(self) -> bool:
        return bool(self.redis.ok)

    @property
    def degraded(self) -> list[str]:
        return [name for name in ("redis", "chroma", "llm", "rag", "policy") if getattr(self, name).ok is False]

    def errors(self) -> list[str]:
        return [c.error for c in (self.redis, self.chroma, self.llm, self.rag, self.policy) if c.error]


def _settings(request: Request) -> Settings:
    s = getattr(request.app.state, "settings", None)
    if s is None:
        s = get_settings()
    return s


async def run_checks(request: Request) -> Report:
    settings = _settings(request)
    t = settings.health_timeout_s
    redis_c, chroma_c, llm_c, policy_c = await asyncio.gather(
        _guarded("redis", lambda: _redis(request), t),
        _guarded("chroma", lambda: _chroma(settings), t),
        _guarded("llm", lambda: _llm(settings), t + 0.5),
        _guarded("policy", _policy, t),
    )
    rag_c = (
        await _guarded("rag", lambda: _rag(request, settings, chroma_c), t)
        if redis_c.ok
        else Check(False, "rag: redis unreachable")
    )
    return Report(redis_c, chroma_c, llm_c, rag_c, policy_c)


def _unavailable(report: Report) -> YanaError:
    return YanaError.of(ErrorCode.UPSTREAM_UNAVAILABLE, "cannot serve: " + "; ".join(report.errors()))


def _uptime(request: Request) -> float:
    started = getattr(request.app.state, "started_at", None) or _PROCESS_STARTED
    return round(time.monotonic() - started, 3)


class VersionInfo(Envelope):
    name: str = Field(description="service name")
    version: str = Field(description="server version (semver), the same as server_version")
    model: str = Field(description="LLM model used by chat (OPENAI_MODEL), or 'none' without an LLM endpoint")
    build: str = Field(description="build id (BUILD)")


class Healthz(Envelope):
    status: Literal["ok", "degraded"]
    llm_ok: bool | None = Field(description="LLM endpoint answers; null when none is configured (template replies)")
    rag_ok: bool = Field(description="Chroma reachable and the active collection present")
    policy_ok: bool = Field(description="persona policy self-check passes")
    redis_ok: bool
    chroma_ok: bool
    uptime_s: float
    last_error: str | None = Field(description="failing checks, else the last 5xx this process answered")
    degraded: list[str] = Field(default_factory=list, description="components whose check failed")


class Health(Envelope):
    status: Literal["ok", "degraded"]
    name: str
    version: str
    degraded: list[str] = Field(default_factory=list)


class Healthcheck(Envelope):
    status: Literal["ok", "degraded"]
    redis: bool
    chroma: bool


@router.get(
    "/v1/version",
    operation_id="version",
    response_model=VersionInfo,
    responses=ERRORS(),
    openapi_extra=_PUBLIC,
    summary="Server, policy and model versions",
)
async def version(request: Request) -> dict:
    s = _settings(request)
    return {
        "server_version": __version__,
        "policy_version": POLICY_VERSION,
        "name": NAME,
        "version": __version__,
        "model": s.openai_model if s.openai_base_url else "none",
        "build": s.build,
    }


@router.get(
    "/v1/healthz",
    operation_id="healthz",
    response_model=Healthz,
    responses=ERRORS(503),
    openapi_extra=_PUBLIC,
    summary="Dependency checks: 200 while the service can serve (listing what is degraded), 503 when not",
)
async def healthz(request: Request) -> dict:
    report = await run_checks(request)
    if not report.can_serve:
        raise _unavailable(report)
    errors = report.errors()
    return {
        "status": "degraded" if report.degraded else "ok",
        "llm_ok": report.llm.ok,
        "rag_ok": bool(report.rag.ok),
        "policy_ok": bool(report.policy.ok),
        "redis_ok": bool(report.redis.ok),
        "chroma_ok": bool(report.chroma.ok),
        "uptime_s": _uptime(request),
        "last_error": "; ".join(errors) if errors else last_error.value,
        "degraded": report.degraded,
    }


@router.get(
    "/v1/health",
    operation_id="health",
    response_model=Health,
    responses=ERRORS(503),
    openapi_extra=_PUBLIC,
    summary="Liveness: status, name and version",
)
async def health(request: Request, response: Response) -> dict:
    report = await run_checks(request)
    if not report.can_serve:
        raise _unavailable(report)
    if instance := _settings(request).yana_instance:
        response.headers[INSTANCE_HEADER] = instance
    return {
        "status": "degraded" if report.degraded else "ok",
        "name": NAME,
        "version": __version__,
        "degraded": report.degraded,
    }


@router.get(
    "/healthcheck",
    operation_id="healthcheck",
    response_model=Healthcheck,
    responses=ERRORS(503),
    openapi_extra=_PUBLIC,
    summary="Whether Redis and Chroma are reachable",
)
async def healthcheck(request: Request) -> dict:
    t = _settings(request).health_timeout_s
    redis_c, chroma_c = await asyncio.gather(
        _guarded("redis", lambda: _redis(request), t), _guarded("chroma", lambda: _chroma(_settings(request)), t)
    )
    if not redis_c.ok:
        raise YanaError.of(ErrorCode.UPSTREAM_UNAVAILABLE, f"cannot serve: {redis_c.error}")
    return {"status": "ok" if chroma_c.ok else "degraded", "redis": True, "chroma": bool(chroma_c.ok)}
