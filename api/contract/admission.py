"""Who may call a protected route, and how often: the bearer token (401), the lockout of an
address after repeated wrong tokens (429) and the caller's token bucket (429 with Retry-After).

Together because the bucket is keyed by the identity the token gives, and the lockout and the
bucket are checked in one Redis round trip. Runs in the route (api.contract.route) before the
body is read, so a caller without a token learns nothing about the body (401 before 413/415/422).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable

from redis.asyncio import Redis
from starlette.datastructures import Headers

from api.contract.auth import BearerAuth, caller_identity
from api.contract.policy import ResolvedPolicy
from api.contract.ratelimit import AuthFailureLimiter, Decision, Rate, TokenBucketLimiter
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings

INTERNAL_HEADER = "x-yana-internal"  # in-process calls of the MCP tool bridge (already limited)


class Admission:
    def __init__(self, settings: Settings, redis: Callable[[], Redis], internal_secret: str):
        self.settings = settings
        self.redis = redis
        self.auth = BearerAuth(settings)
        self.default_rate = Rate.parse(settings.rate_limit, settings.rate_burst)
        self.internal_secret = internal_secret.encode()
        self._limiter: tuple[Redis, TokenBucketLimiter] | None = None
        self._auth_failures: tuple[Redis, AuthFailureLimiter] | None = None

    async def admit(self, headers: Headers, address: str | None, rp: ResolvedPolicy) -> str:
        """Authenticate and rate-limit a request to a protected route; returns the caller's
        identity. A wrong token is 401 and counts against its address; once the address has failed
        AUTH_FAIL_LIMIT times in AUTH_FAIL_WINDOW_S every request of it is 429, a right token
        included (checked together with the token bucket, so one Redis round trip as before).
        In-process MCP tool calls carry the caller's own header and were counted on /mcp already."""
        internal = self._internal(headers)
        if not self.auth.enabled:
            identity = caller_identity(None, address)
            if not internal:
                await self.check_rate(identity, rp)
            return identity
        where = address or "unknown"
        try:
            token = self.auth.authenticate(headers.get("authorization"))
        except YanaError:
            if not internal:
                decision = await self.auth_failures().failed(where)
                if not decision.allowed:
                    raise _auth_throttled(decision) from None
            raise
        identity = caller_identity(token, address)
        if not internal:
            lock, _ = await asyncio.gather(self.auth_failures().check(where), self.check_rate(identity, rp))
            if not lock.allowed:
                raise _auth_throttled(lock)
        return identity

    async def check_rate(self, identity: str, rp: ResolvedPolicy) -> None:
        if rp.bucket == "default":
            rate = self.default_rate
        else:
            rate = Rate.parse(rp.policy.rate or self.settings.rate_limit, rp.policy.burst or self.settings.rate_burst)
        decision = await self.limiter().hit_or_allow(f"{rp.bucket}:{identity}", rate)
        if not decision.allowed:
            err = YanaError.of(ErrorCode.RATE_LIMITED, f"rate limit exceeded; retry in {decision.retry_after_s} s")
            err.headers = {"Retry-After": str(decision.retry_after_s)}  # type: ignore[attr-defined]
            raise err

    def limiter(self) -> TokenBucketLimiter:
        r = self.redis()
        if self._limiter is None or self._limiter[0] is not r:
            self._limiter = (r, TokenBucketLimiter(r))
        return self._limiter[1]

    def auth_failures(self) -> AuthFailureLimiter:
        r = self.redis()
        if self._auth_failures is None or self._auth_failures[0] is not r:
            limiter = AuthFailureLimiter(r, self.settings.auth_fail_limit, self.settings.auth_fail_window_s)
            self._auth_failures = (r, limiter)
        return self._auth_failures[1]

    def _internal(self, headers: Headers) -> bool:
        given = headers.get(INTERNAL_HEADER)
        return given is not None and hmac.compare_digest(given.encode(), self.internal_secret)


def _auth_throttled(decision: Decision) -> YanaError:
    err = YanaError.of(
        ErrorCode.RATE_LIMITED,
        f"too many failed authentications from this address; retry in {decision.retry_after_s} s",
    )
    err.headers = {"Retry-After": str(decision.retry_after_s)}  # type: ignore[attr-defined]
    return err
