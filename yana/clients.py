"""Client factories for the shared stores; infrastructure is wired here and nowhere else."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from urllib.parse import urlparse

import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from yana.blobs import BlobStore, open_store
from yana.settings import Settings, get_settings


@lru_cache(maxsize=8)
def _redis(url: str, timeout_s: float = 10.0) -> redis.Redis:
    # A paused or unreachable Redis raises redis.TimeoutError after timeout_s instead of hanging.
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        health_check_interval=30,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )


def get_redis(settings: Settings | None = None) -> redis.Redis:
    s = settings or get_settings()
    return _redis(s.redis_url, s.redis_timeout_s)


def get_async_redis(settings: Settings | None = None) -> aredis.Redis:
    # One per event loop is the caller's job (the API keeps one on app.state).
    s = settings or get_settings()
    return aredis.Redis.from_url(
        s.redis_url, decode_responses=True, socket_timeout=s.redis_timeout_s, socket_connect_timeout=s.redis_timeout_s
    )


@lru_cache(maxsize=4)
def _chroma(url: str | None, path: str, timeout_s: float = 30.0):
    # Imported here: chromadb is heavy (and pulls onnxruntime/opentelemetry), and processes that
    # never talk to Chroma (the chat fast path, most CLI commands) should not load it.
    import chromadb
    import httpx
    from chromadb.config import Settings as ChromaSettings

    chroma_settings = ChromaSettings(anonymized_telemetry=False)
    if url:
        u = urlparse(url)
        client = chromadb.HttpClient(
            host=u.hostname or "127.0.0.1",
            port=u.port or (443 if u.scheme == "https" else 8000),
            ssl=u.scheme == "https",
            settings=chroma_settings,
        )
        # chromadb's HTTP session has no timeout (httpx.Client(timeout=None)) and no setting for
        # one: a paused server would hang the caller forever. Bound every request.
        session = getattr(getattr(client, "_server", None), "_session", None)
        if isinstance(session, httpx.Client):
            session.timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        return client
    return chromadb.PersistentClient(path=path, settings=chroma_settings)


def get_chroma(settings: Settings | None = None):
    s = settings or get_settings()
    return _chroma(s.chroma_url, s.chroma_path, s.chroma_timeout_s)


@lru_cache(maxsize=8)
def _redis_fast(url: str, timeout_s: float) -> redis.Redis:
    # One immediate retry (a pooled connection gone stale), not redis-py's default three with
    # exponential backoff, which turns a Redis outage into seconds per call.
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        health_check_interval=30,
        retry=Retry(NoBackoff(), 1),
    )


def get_fast_redis(settings: Settings | None = None) -> redis.Redis:
    """For the synchronous fast path (chat): short socket timeouts, so a stuck Redis costs a bounded
    wait instead of the whole request budget."""
    s = settings or get_settings()
    return _redis_fast(s.redis_url, s.chat_redis_timeout_ms / 1000)


@lru_cache(maxsize=4)
def _blobs(
    url: str | None,
    data_dir: str,
    endpoint_url: str | None,
    access_key_id: str | None,
    secret_access_key: str | None,
    region: str | None,
    timeout_s: float,
    max_attempts: int,
) -> BlobStore:
    return open_store(
        url,
        Path(data_dir),
        endpoint_url=endpoint_url,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
        region=region,
        timeout_s=timeout_s,
        max_attempts=max_attempts,
    )


def get_blobs(settings: Settings | None = None) -> BlobStore:
    """The blob store of staged uploads and label images (BLOB_URL; empty: the DATA_DIR folder)."""
    s = settings or get_settings()
    return _blobs(
        s.blob_url or None,
        str(s.data_dir),
        s.blob_endpoint_url,
        s.blob_access_key_id,
        s.blob_secret_access_key,
        s.blob_region,
        s.blob_timeout_s,
        s.blob_max_attempts,
    )
