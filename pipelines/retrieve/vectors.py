"""Chunk embeddings for inline documents, in the shared Redis embedding cache (model, kind, sha256).

`passage_vectors` is the one entry point, over pipelines.embedding.cache's `embed_cached_until`: a chunk
embedded for a retrieve and the same text embedded at ingest are one entry, and every API process and
worker reads the same keys, so a document set embedded once (by a request or by the follow-up job)
is warm everywhere. Retrieve keeps its own TTL (RETRIEVE_CACHE_TTL_S) and counters (STATS_KEY).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass

import numpy as np

from pipelines.embedding.backends import Embedder, get_embedder
from pipelines.embedding.cache import cache_key, embed_cached_until
from yana.settings import get_settings

log = logging.getLogger("yana.retrieve.vectors")

STATS_KEY = "yana:retrieve:emb:stats"  # hash: hits / misses / embedded (for the bench's hit ratio)
EMBED_JOB_KEY = "yana:retrieve:embedjob:{digest}"  # the follow-up job embedding one set of chunks
# zset: digest of each text set whose follow-up job is in flight -> its start time (epoch seconds).
# The job removes its member when it ends; members older than EMBED_JOB_GUARD_S (a killed worker's)
# are pruned by the next claim.
EMBED_JOBS_IN_FLIGHT_KEY = "yana:retrieve:embedjobs"
EMBED_JOB_GUARD_S = 600  # one follow-up embedding job per distinct chunk set in this window

QUEUED, IN_FLIGHT, SKIPPED = "queued", "in_flight", "skipped"

# A cold request's glance at a chunk: its first 16 tokens (2.9 ms a text on one core, against 18 ms
# for a 90-token chunk). 32 order a little better on the dev halves at twice the cost; docs/retrieve.md.
GLANCE_TOKENS = 16

# KEYS: in-flight zset, guard, guard's job id. ARGV: digest, now, guard window (s), cap.
# Prune stale members; a set whose guard is there gets its job id; at the cap nothing is set;
# else the guard and the member are set together, so API processes racing count the same jobs.
_CLAIM = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[3]))
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'in_flight', redis.call('GET', KEYS[3]), redis.call('ZCARD', KEYS[1])}
end
local running = redis.call('ZCARD', KEYS[1])
if running >= tonumber(ARGV[4]) then
  return {'skipped', false, running}
end
redis.call('SET', KEYS[2], '1', 'EX', ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return {'queued', false, running + 1}
"""


@dataclass
class EmbedJobClaim:
    status: str  # QUEUED (this call started it), IN_FLIGHT (started for this set before), SKIPPED (at the cap)
    job_id: str | None  # None when skipped, or in flight before its id is known
    running: int  # follow-up jobs in flight after this claim (the cap's count)


def texts_digest(texts: list[str]) -> str:
    """The id of a set of texts in EMBED_JOB_KEY and EMBED_JOBS_IN_FLIGHT_KEY (claim and job agree)."""
    return hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest()


def claim_embed_job(r, texts: list[str], start, *, cap: int, window_s: int = EMBED_JOB_GUARD_S) -> EmbedJobClaim:
    """One follow-up embedding job per distinct set of chunks, at most `cap` in flight at once: the
    first caller under the cap starts it (`start()` returns its job id); callers while it is in
    flight (or within `window_s` of its start) get that id; at the cap none is started."""
    digest = texts_digest(texts)
    guard = EMBED_JOB_KEY.format(digest=digest)
    status, job_id, running = r.eval(
        _CLAIM, 3, EMBED_JOBS_IN_FLIGHT_KEY, guard, f"{guard}:id", digest, time.time(), window_s, cap
    )
    status = status.decode() if isinstance(status, bytes) else status
    if isinstance(job_id, bytes):
        job_id = job_id.decode()
    if status != QUEUED:
        return EmbedJobClaim(status, job_id or None, int(running))
    try:
        job_id = start()
    except BaseException:
        release_embed_job(r, texts)  # no job will end to free its place
        r.delete(guard)
        raise
    r.set(f"{guard}:id", job_id, ex=window_s)
    return EmbedJobClaim(QUEUED, job_id, int(running))


def release_embed_job(r, texts: list[str]) -> None:
    """A follow-up job over `texts` ended: its place under the cap is free (the guard stays, so
    the same set is not embedded again within the window)."""
    r.zrem(EMBED_JOBS_IN_FLIGHT_KEY, texts_digest(texts))


def text_key(model: str, text: str) -> str:
    """The shared embedding cache's key (pipelines.embedding.cache): a chunk embedded for a retrieve
    and the same text embedded at ingest are one entry."""
    return cache_key(model, "passage", text)


@dataclass
class PassageVectors:
    vectors: np.ndarray  # n x dim; rows of missing texts are zero
    present: np.ndarray  # bool per text: a vector is there
    hits: int  # found in the cache
    embedded: int  # computed by this call
    cached: np.ndarray | None = None  # bool per text: found in the cache


def embedder() -> Embedder:
    return get_embedder(get_settings().retrieve_embed_model or None)


def _redis():
    from yana.clients import get_redis

    return get_redis()


def passage_vectors(
    texts: list[str], *, deadline: float | None = None, r=None, parallel: int | None = None
) -> PassageVectors:
    """Vectors of `texts` from the cache; the missing ones embedded (and stored) in batches while
    time.monotonic() stays under `deadline` (None: all of them), from `parallel` threads (None:
    RETRIEVE_EMBED_PARALLEL). Redis trouble means no cache, not a failure."""
    s = get_settings()
    ttl = s.retrieve_cache_ttl_s
    if r is None and ttl > 0:
        try:
            r = _redis()
        except Exception:  # noqa: BLE001 - no Redis client: no cache
            log.warning("retrieve vector cache unavailable", exc_info=True)
    got = embed_cached_until(
        texts,
        "passage",
        embedder().model_name,
        r,
        deadline=deadline,
        ttl=ttl,
        stats_key=STATS_KEY,
        parallel=s.retrieve_embed_parallel if parallel is None else parallel,
    )
    return PassageVectors(got.vectors, got.present, int(got.cached.sum()), got.embedded, got.cached)


def passage_glances(texts: list[str], *, deadline: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(vectors, present) of each text's head (`glance_passages`), until `deadline`, from
    RETRIEVE_EMBED_PARALLEL threads; None when the encoder offers no glance (then a cold request
    orders its chunks lexically)."""
    emb = embedder()
    glance = getattr(emb, "glance_passages", None)
    if glance is None:
        return None
    return glance(texts, GLANCE_TOKENS, deadline=deadline, parallel=get_settings().retrieve_embed_parallel)


def query_vector(query: str) -> np.ndarray:
    return np.asarray(embedder().embed_queries([query])[0], dtype=np.float32)
