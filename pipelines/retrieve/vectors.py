"""Chunk embeddings for inline documents, in the shared Redis embedding cache (model, kind, sha256).

`passage_vectors` is the one entry point, over pipelines.embedding.cache's `embed_cached_until`: a chunk
embedded for a retrieve and the same text embedded at ingest are one entry, and every API process and
worker reads the same keys, so a document set embedded once (by a request or by the follow-up job)
is warm everywhere. Retrieve keeps its own TTL (RETRIEVE_CACHE_TTL_S) and counters (STATS_KEY).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import numpy as np

from pipelines.embedding.backends import Embedder, get_embedder
from pipelines.embedding.cache import cache_key, embed_cached_until
from yana.settings import get_settings

log = logging.getLogger("yana.retrieve.vectors")

STATS_KEY = "yana:retrieve:emb:stats"  # hash: hits / misses / embedded (for the bench's hit ratio)
EMBED_JOB_KEY = "yana:retrieve:embedjob:{digest}"  # the follow-up job embedding one set of chunks


def claim_embed_job(r, texts: list[str], ttl_s: int, start) -> str | None:
    """One follow-up embedding job per distinct set of chunks: the first caller starts it
    (`start()` returns its job id); callers while it is in flight get that id (None until known)."""
    guard = EMBED_JOB_KEY.format(digest=hashlib.sha256("\x00".join(texts).encode("utf-8")).hexdigest())
    if not r.set(guard, "1", nx=True, ex=ttl_s):
        return r.get(f"{guard}:id")
    job_id = start()
    r.set(f"{guard}:id", job_id, ex=ttl_s)
    return job_id


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


def passage_vectors(texts: list[str], *, deadline: float | None = None, r=None) -> PassageVectors:
    """Vectors of `texts` from the cache; the missing ones embedded (and stored) in batches while
    time.monotonic() stays under `deadline` (None: all of them). Redis trouble means no cache, not
    a failure."""
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
        parallel=s.retrieve_embed_parallel,
    )
    return PassageVectors(got.vectors, got.present, int(got.cached.sum()), got.embedded, got.cached)


def query_vector(query: str) -> np.ndarray:
    return np.asarray(embedder().embed_queries([query])[0], dtype=np.float32)
