"""Token-bucket rate limits kept in Redis, shared by every API process.

Why not a `limits` strategy: the installed `limits` (5.x, also its newest release) offers fixed
window, moving window and sliding-window counter, none of which is a token bucket. With 50 per
10 s, a moving window admits the 50-burst and then nothing for 10 s, then 50 again; a sliding
window counter also stalls for a whole window after a burst. The rule is a token bucket
(e.g. 5 rps, burst 50): after a burst, one more request every 1/rate seconds.

So this is GCRA (the Generic Cell Rate Algorithm), which is exactly a token bucket expressed as
one timestamp per bucket (the "theoretical arrival time"): a request is admitted iff
TAT - now <= (burst - 1) * interval, and then TAT = max(TAT, now) + interval. It runs as one
short Lua script, so the read-modify-write is atomic in Redis however many API processes hit the
bucket at once, and it uses Redis' clock (TIME), so processes on hosts with skewed clocks still
share one budget. The rate notation ("5/second", "300 per minute") is parsed by `limits`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import lru_cache

from limits import parse as parse_rate
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger("yana.ratelimit")

KEY_PREFIX = "yana:rl:"

# KEYS[1] bucket; ARGV: interval ms (1/rate), burst, cost. Returns {allowed, retry_after_ms, remaining}.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + interval * cost
local allow_at = new_tat - burst * interval
if allow_at > now then
  local remaining = math.floor((now - (tat - burst * interval)) / interval)
  if remaining < 0 then remaining = 0 end
  return {0, math.ceil(allow_at - now), remaining}
end
redis.call('SET', KEYS[1], string.format('%.3f', new_tat), 'PX', math.ceil(new_tat - now) + 1)
return {1, 0, math.floor((now - (new_tat - burst * interval)) / interval)}
"""


@dataclass(frozen=True)
class Rate:
    per_second: float
    burst: int

    @classmethod
    def parse(cls, notation: str, burst: int) -> Rate:
        return _parse(notation, int(burst))

    @property
    def interval_ms(self) -> float:
        return 1000.0 / self.per_second


@lru_cache(maxsize=64)
def _parse(notation: str, burst: int) -> Rate:
    item = parse_rate(notation)
    return Rate(item.amount / item.get_expiry(), max(1, burst))


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_s: int  # whole seconds, >= 1 when refused (Retry-After)
    remaining: int


class TokenBucketLimiter:
    def __init__(self, redis: Redis):
        self._script = redis.register_script(_GCRA)

    async def hit(self, bucket: str, rate: Rate, cost: int = 1) -> Decision:
        allowed, retry_ms, remaining = await self._script(
            keys=[KEY_PREFIX + bucket], args=[f"{rate.interval_ms:.6f}", rate.burst, cost]
        )
        retry_s = max(1, math.ceil(int(retry_ms) / 1000)) if not allowed else 0
        return Decision(bool(allowed), retry_s, int(remaining))

    async def hit_or_allow(self, bucket: str, rate: Rate) -> Decision:
        """Fail open: a Redis outage must not turn every request into a 429 (health shows it)."""
        try:
            return await self.hit(bucket, rate)
        except RedisError as exc:
            log.warning("rate limiter unavailable, allowing: %s", type(exc).__name__)
            return Decision(True, 0, rate.burst)


AUTH_FAIL_PREFIX = "yana:authfail:"

# KEYS[1] the address's failure counter; ARGV: limit, window ms, record (1: count a failure now).
# Returns {refused, retry_after_ms, failures}. A fixed window from the first failure: after
# `limit` failures every request of the address is refused until the window ends.
_AUTH_FAIL = """
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local limit = tonumber(ARGV[1])
if n >= limit then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]); ttl = tonumber(ARGV[2]) end
  return {1, ttl, n}
end
if ARGV[3] == '1' then
  n = redis.call('INCR', KEYS[1])
  if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
end
return {0, 0, n}
"""


class AuthFailureLimiter:
    """Wrong-token guessing slowed down per client address, shared by every API process (Redis):
    after AUTH_FAIL_LIMIT failed authentications within AUTH_FAIL_WINDOW_S of the first, every
    request of that address answers 429 with Retry-After until the window ends, whatever token it
    carries (a valid token must not tell a guesser it was right). Fails open on a Redis outage,
    as the rate limiter does."""

    def __init__(self, redis: Redis, limit: int, window_s: float):
        self._script = redis.register_script(_AUTH_FAIL)
        self.limit = max(1, limit)
        self.window_ms = max(1000, int(window_s * 1000))

    async def _run(self, address: str, record: bool) -> Decision:
        try:
            refused, retry_ms, n = await self._script(
                keys=[AUTH_FAIL_PREFIX + address], args=[self.limit, self.window_ms, "1" if record else "0"]
            )
        except RedisError as exc:
            log.warning("auth failure limiter unavailable, allowing: %s", type(exc).__name__)
            return Decision(True, 0, self.limit)
        return Decision(not refused, max(1, math.ceil(int(retry_ms) / 1000)) if refused else 0, self.limit - int(n))

    async def check(self, address: str) -> Decision:
        """Whether the address may try to authenticate now."""
        return await self._run(address, record=False)

    async def failed(self, address: str) -> Decision:
        """Count one failed authentication of the address."""
        return await self._run(address, record=True)
