"""Client factories for the shared stores; infrastructure is wired here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from yana.blobs import BlobStore, open_store
from yana.settings import Settings, get_settings


@dataclass(frozen=True)
class SentinelTarget:
    """REDIS_URL=sentinel://[:password@]host:26379,host2:26379/<master name>[/<db>]"""

    hosts: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    password: str | None = None


def parse_sentinel(url: str) -> SentinelTarget | None:
    """The Sentinel deployment a REDIS_URL names, or None for a plain redis:// URL."""
    if not url.startswith("sentinel://"):
        return None
    rest = url[len("sentinel://") :]
    netloc, _, path = rest.partition("/")
    password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        password = unquote(userinfo.partition(":")[2] or userinfo) or None
    hosts = []
    for part in netloc.split(","):
        host, _, port = part.strip().rpartition(":")
        hosts.append((host or part.strip(), int(port) if host and port else 26379))
    segments = [p for p in path.split("/") if p]
    if not hosts or not segments:
        raise ValueError("a sentinel REDIS_URL is sentinel://host:26379[,host2:26379]/<master name>[/<db>]")
    return SentinelTarget(tuple(hosts), segments[0], int(segments[1]) if len(segments) > 1 else 0, password)


def redis_for_url(url: str, timeout_s: float = 10.0, *, decode: bool = True, **kwargs) -> redis.Redis:
    """A client of the Redis a URL names: redis:// / rediss:// / unix://, or the current master of a
    Sentinel deployment (sentinel://...), found again through the sentinels after a failover."""
    target = parse_sentinel(url)
    common = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s, **kwargs}
    if target is None:
        return redis.Redis.from_url(url, decode_responses=decode, **common)
    from redis.sentinel import Sentinel

    sentinel = Sentinel(
        list(target.hosts),
        sentinel_kwargs={"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s},
        **common,
    )
    return sentinel.master_for(target.service, db=target.db, password=target.password, decode_responses=decode)


@lru_cache(maxsize=8)
def _redis(url: str, timeout_s: float = 10.0) -> redis.Redis:
    # A paused or unreachable Redis raises redis.TimeoutError after timeout_s instead of hanging.
    return redis_for_url(url, timeout_s, health_check_interval=30)


def get_redis(settings: Settings | None = None) -> redis.Redis:
    s = settings or get_settings()
    return _redis(s.redis_url, s.redis_timeout_s)


def get_async_redis(settings: Settings | None = None) -> aredis.Redis:
    # One per event loop is the caller's job (the API keeps one on app.state).
    s = settings or get_settings()
    t = s.redis_timeout_s
    target = parse_sentinel(s.redis_url)
    if target is None:
        return aredis.Redis.from_url(s.redis_url, decode_responses=True, socket_timeout=t, socket_connect_timeout=t)
    from redis.asyncio.sentinel import Sentinel

    sentinel = Sentinel(
        list(target.hosts),
        sentinel_kwargs={"socket_timeout": t, "socket_connect_timeout": t},
        socket_timeout=t,
        socket_connect_timeout=t,
    )
    return sentinel.master_for(target.service, db=target.db, password=target.password, decode_responses=True)


def celery_redis_config(url: str) -> tuple[str, dict]:
    """Celery's broker/result URL and the transport options it adds for REDIS_URL: Sentinel is
    `sentinel://h1:26379;sentinel://h2:26379/<db>` with the master name in the options."""
    target = parse_sentinel(url)
    if target is None:
        return url, {}
    auth = f":{quote(target.password, safe='')}@" if target.password else ""
    joined = ";".join(f"sentinel://{auth}{h}:{p}/{target.db}" for h, p in target.hosts)
    return joined, {"master_name": target.service}


def celery_transport_options(url: str, timeout_s: float) -> dict:
    """Broker and result-backend transport options for REDIS_URL (Celery's worker and Flower).

    Every socket gets `timeout_s` (REDIS_TIMEOUT_S), the sentinels too: without one, a command sent
    on a connection to a master that died in a failover can wait forever, and kombu's own health
    checks never run again (its documentation of `socket_timeout`). A CI run of the Sentinel
    failover test saw exactly that: the worker never consumed again after the master's kill -9,
    with no "connection lost" logged. The BRPOP a consumer waits in is sent with a 1 s server-side
    timeout, so the socket timeout never cuts a healthy wait."""
    _url, sentinel_options = celery_redis_config(url)
    opts: dict = {
        **sentinel_options,
        "socket_keepalive": True,
        "retry_on_timeout": True,
        "health_check_interval": 30,
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
    }
    if sentinel_options:
        opts["sentinel_kwargs"] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    return opts


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
    return redis_for_url(url, timeout_s, health_check_interval=30, retry=Retry(NoBackoff(), 1))


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
