"""Circuit breaker for the LLM, shared by every API process through Redis.

Why shared: with several API processes (uvicorn --workers N, several hosts) a per-process breaker
lets each process pay the threshold of failures itself, and /v1/healthz would report whichever
process answered. In Redis the whole fleet learns at once, and healthz says the same everywhere.
The cost is one Redis round trip (a Lua script, atomic) before and after each LLM call.

States: closed (calls allowed) → after `failure_threshold` consecutive failures: open (no calls for
`open_s`) → half-open: exactly one caller gets the probe (SET NX with a TTL, so a probe that dies is
replaced); its success closes the circuit, its failure opens it again.

If Redis itself fails, the breaker keeps working on in-process state (stated in the health detail),
so a Redis outage never blocks chat.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass
from typing import NamedTuple

import redis

from pipelines.chat.keys import breaker_key

_KEY_TTL_S = 7 * 24 * 3600

# ARGV: probe_ttl_ms. Returns {closed | open | probe | half_open, consecutive failures, ms left open}.
_ALLOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'open_until', 'failures')
local open_until = tonumber(h[1] or '0')
local failures = tonumber(h[2] or '0')
if open_until == 0 then return {'closed', failures, 0} end
if now < open_until then return {'open', failures, open_until - now} end
if redis.call('SET', KEYS[2], now, 'NX', 'PX', ARGV[1]) then return {'probe', failures, 0} end
return {'half_open', failures, 0}
"""

# ARGV: threshold, open_ms, error code. Returns {state after the failure, consecutive failures}.
_FAILURE = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
local open_until = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
redis.call('HSET', KEYS[1], 'last_error', ARGV[3], 'last_failure_ms', now)
redis.call('EXPIRE', KEYS[1], {_KEY_TTL_S})
if open_until > 0 or failures >= tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'open_until', now + tonumber(ARGV[2]))
  redis.call('DEL', KEYS[2])
  return {{'open', failures}}
end
return {{'closed', failures}}
"""

_SUCCESS = f"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'failures', 0, 'open_until', 0, 'last_ok_ms', now)
redis.call('EXPIRE', KEYS[1], {_KEY_TTL_S})
redis.call('DEL', KEYS[2])
return 'closed'
"""


class Permit(NamedTuple):
    allowed: bool  # may call the LLM now
    state: str  # closed | open | half_open (allowed in half_open: this caller holds the probe)
    failures: int  # consecutive failures so far; 0 means a success has nothing to reset


@dataclass
class BreakerState:
    state: str  # closed | open | half_open
    failures: int
    open_for_s: float  # seconds until half-open (0 unless open)
    last_error: str | None
    last_ok_ms: int | None
    last_failure_ms: int | None
    shared: bool  # False: Redis was unreachable, this is the process's own view


class _LocalState:
    """The same state machine in process memory (fallback when Redis is unreachable)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Back to closed with no history (the lock stays: callers may hold it)."""
        self.failures = 0
        self.open_until = 0.0
        self.probe_until = 0.0
        self.last_error: str | None = None
        self.last_ok_ms: int | None = None
        self.last_failure_ms: int | None = None


class CircuitBreaker:
    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int = 3,
        open_s: float = 30.0,
        probe_ttl_s: float = 15.0,
        redis_client: redis.Redis | None = None,
    ) -> None:
        self.name = name
        self.failure_threshold = max(1, failure_threshold)
        self.open_s = open_s
        self.probe_ttl_s = probe_ttl_s
        self.redis = redis_client
        self.key = breaker_key(name)
        self.probe_key = self.key + ":probe"
        self.local = _LocalState()
        if redis_client is not None:
            self._allow = redis_client.register_script(_ALLOW)
            self._failure = redis_client.register_script(_FAILURE)
            self._success = redis_client.register_script(_SUCCESS)

    @staticmethod
    def name_for(base_url: str | None, model: str) -> str:
        """One breaker per endpoint and model: a broken endpoint does not close off another."""
        return hashlib.sha1(f"{base_url or 'openai'}|{model}".encode(), usedforsecurity=False).hexdigest()[:16]

    # --- decisions ------------------------------------------------------------------------------

    def allow(self) -> Permit:
        """closed → yes; open → no; half-open → only the one caller that gets the probe."""
        if self.redis is not None:
            try:
                state, failures, open_ms = self._allow(
                    keys=[self.key, self.probe_key], args=[int(self.probe_ttl_s * 1000)]
                )
                state = state.decode() if isinstance(state, bytes) else str(state)
                self._follow(
                    int(failures), int(open_ms) / 1000 if state == "open" else (0.0 if state == "closed" else None)
                )
                return Permit(state in ("closed", "probe"), "half_open" if state == "probe" else state, int(failures))
            except redis.RedisError:
                pass
        return self._local_allow()

    def record_success(self) -> None:
        if self.redis is not None:
            try:
                self._success(keys=[self.key, self.probe_key])
            except redis.RedisError:
                pass
        with self.local.lock:
            self.local.failures, self.local.open_until, self.local.probe_until = 0, 0.0, 0.0
            self.local.last_ok_ms = int(time.time() * 1000)

    def record_failure(self, error: str) -> str:
        """Count one failure; returns the state after it (open when this failure tripped it)."""
        if self.redis is not None:
            try:
                state, failures = self._failure(
                    keys=[self.key, self.probe_key],
                    args=[self.failure_threshold, int(self.open_s * 1000), error],
                )
                state = state.decode() if isinstance(state, bytes) else str(state)
                self._follow(int(failures), self.open_s if state == "open" else 0.0, error=error)
                return state
            except redis.RedisError:
                pass
        return self._local_failure(error)

    def reset(self) -> None:
        if self.redis is not None:
            try:
                self.redis.delete(self.key, self.probe_key)
            except redis.RedisError:
                pass
        with self.local.lock:
            self.local.reset()

    # --- status ---------------------------------------------------------------------------------

    def status(self) -> BreakerState:
        if self.redis is not None:
            try:
                h = self.redis.hgetall(self.key)
                now_ms = _redis_now_ms(self.redis)
                open_until = int(float(h.get("open_until") or 0))
                state = "closed" if open_until == 0 else ("open" if now_ms < open_until else "half_open")
                return BreakerState(
                    state=state,
                    failures=int(h.get("failures") or 0),
                    open_for_s=max(0.0, (open_until - now_ms) / 1000) if state == "open" else 0.0,
                    last_error=h.get("last_error"),
                    last_ok_ms=_int_or_none(h.get("last_ok_ms")),
                    last_failure_ms=_int_or_none(h.get("last_failure_ms")),
                    shared=True,
                )
            except redis.RedisError:
                pass
        loc = self.local
        with loc.lock:
            now = time.time()
            state = "closed" if loc.open_until == 0 else ("open" if now < loc.open_until else "half_open")
            return BreakerState(
                state,
                loc.failures,
                max(0.0, loc.open_until - now) if state == "open" else 0.0,
                loc.last_error,
                loc.last_ok_ms,
                loc.last_failure_ms,
                shared=False,
            )

    # --- in-process fallback --------------------------------------------------------------------

    def _follow(self, failures: int, open_for_s: float | None, *, error: str | None = None) -> None:
        """Take the shared state as this process's own. The local state is what a Redis error falls
        back on, so it must be the fleet's last known state: a count kept on the side (every
        failure, no skipped success, no reset) opened the circuit on the first slow Redis call.
        `open_for_s`: seconds left open, 0 closed, None half-open (the open period is over)."""
        loc = self.local
        with loc.lock:
            now = time.time()
            loc.failures = failures
            if open_for_s is None:
                loc.open_until = min(loc.open_until, now) if loc.open_until else now
            else:
                loc.open_until = now + open_for_s if open_for_s > 0 else 0.0
            if error is not None:
                loc.last_error, loc.last_failure_ms = error, int(now * 1000)

    def _local_allow(self) -> Permit:
        loc = self.local
        with loc.lock:
            now = time.time()
            if loc.open_until == 0:
                return Permit(True, "closed", loc.failures)
            if now < loc.open_until:
                return Permit(False, "open", loc.failures)
            if now >= loc.probe_until:
                loc.probe_until = now + self.probe_ttl_s
                return Permit(True, "half_open", loc.failures)
            return Permit(False, "half_open", loc.failures)

    def _local_failure(self, error: str) -> str:
        loc = self.local
        with loc.lock:
            now = time.time()
            loc.failures += 1
            loc.last_error, loc.last_failure_ms = error, int(now * 1000)
            if loc.open_until > 0 or loc.failures >= self.failure_threshold:
                loc.open_until, loc.probe_until = now + self.open_s, 0.0
                return "open"
            return "closed"


def _int_or_none(v) -> int | None:
    try:
        return int(float(v)) if v not in (None, "") else None
    except ValueError:
        return None


def _redis_now_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000
