"""Client factories for the shared stores; infrastructure is wired here and nowhere else."""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlparse

import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from yana.settings import Settings, get_settings


@lru_cache(maxsize=8)
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)


def get_redis(settings: Settings | None = None) -> redis.Redis:
    return _redis((settings or get_settings()).redis_url)


def get_async_redis(settings: Settings | None = None) -> aredis.Redis:
    # One per event loop is the caller's job (the API keeps one on app.state).
    return aredis.Redis.from_url((settings or get_settings()).redis_url, decode_responses=True)


@lru_cache(maxsize=4)
def _chroma(url: str | None, path: str):
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    chroma_settings = ChromaSettings(anonymized_telemetry=False)
    if url:
        u = urlparse(url)
        return chromadb.HttpClient(
            host=u.hostname or "127.0.0.1",
            port=u.port or (443 if u.scheme == "https" else 8000),
            ssl=u.scheme == "https",
            settings=chroma_settings,
        )
    return chromadb.PersistentClient(path=path, settings=chroma_settings)


def get_chroma(settings: Settings | None = None):
    s = settings or get_settings()
    return _chroma(s.chroma_url, s.chroma_path)


@lru_cache(maxsize=8)
def _redis_fast(url: str, timeout_s: float) -> redis.Redis:
    # One immediate retry (a pooled connection gone stale), not redis-py's default three with
    # exponential backoff, which turns a Redis outage into seconds per call.
    return redis.Redis.from_url(
        url, decode_responses=True, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        health_check_interval=30, retry=Retry(NoBackoff(), 1),
    )


def get_fast_redis(settings: Settings | None = None) -> redis.Redis:
    """For the synchronous fast path (chat): short socket timeouts, so a stuck Redis costs a bounded
    wait instead of the whole request budget."""
    s = settings or get_settings()
    return _redis_fast(s.redis_url, s.chat_redis_timeout_ms / 1000)
