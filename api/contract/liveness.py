"""This API process's liveness in Redis, so that another process can tell a dead holder of an
Idempotency-Key claim from a slow one.

Each API process (each uvicorn worker) has a random id and keeps `yana:api:alive:<id>` with a
short TTL (API_LIVENESS_TTL_S), refreshed by a task of its event loop every third of it. A claim
records its holder's id; a request that finds the claim in flight and its holder's key gone takes
the claim over (atomically, in one script) instead of answering 409 until the lease runs out. A
process that is alive but whose event loop stalls longer than the TTL can lose a claim this way:
that is the same as a retry after the lease, only sooner, and job creation under the key stays
exactly-once (the job is bound to the key, see api.contract.idempotency).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger("yana.liveness")

KEY_PREFIX = "yana:api:alive:"


def alive_key(process_id: str) -> str:
    return KEY_PREFIX + process_id


class ProcessLiveness:
    def __init__(self, ttl_s: float):
        self.process_id = uuid.uuid4().hex
        self.ttl_ms = max(1000, int(ttl_s * 1000))
        self._task: asyncio.Task | None = None
        self._redis: Redis | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def key(self) -> str:
        return alive_key(self.process_id)

    async def ensure(self, redis: Redis) -> None:
        """Mark this process alive now (before it claims anything) and keep it marked."""
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._redis is redis and self._loop is loop:
            return
        await redis.set(self.key, "1", px=self.ttl_ms)
        if self._task is not None:
            self._task.cancel()
        self._redis, self._loop = redis, loop
        self._task = loop.create_task(self._beat(redis))

    async def _beat(self, redis: Redis) -> None:
        interval = self.ttl_ms / 3000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await redis.set(self.key, "1", px=self.ttl_ms)
            except RedisError as exc:  # Redis away: claims cannot be taken or checked either
                log.warning("liveness not refreshed: %s", type(exc).__name__)
            except RuntimeError:  # the client was closed (shutdown)
                return
