"""Chunk embeddings for inline documents, in the shared Redis embedding cache (model, kind, sha256).

`passage_vectors` is the one entry point: the cache behind it can be swapped for a shared
embedding cache without touching the ranking. Every API process and worker reads the same keys,
so a document set embedded once (by a request or by the follow-up job) is warm everywhere.
Vectors are float32, L2-normalised, stored base64 (the shared Redis client decodes to str).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import redis

from pipelines.embed_cache import cache_key, decode_vector, encode_vector
from pipelines.embedding import Embedder, get_embedder
from yana.settings import get_settings

log = logging.getLogger("yana.retrieve.vectors")

STATS_KEY = "yana:retrieve:emb:stats"  # hash: hits / misses / embedded (for the bench's hit ratio)


def text_key(model: str, text: str) -> str:
    """The shared embedding cache's key (pipelines.embed_cache): a chunk embedded for a retrieve
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
    if deadline is not None and math.isinf(deadline):
        deadline = None
    emb = embedder()
    out = np.zeros((len(texts), emb.dim), dtype=np.float32)
    present = np.zeros(len(texts), dtype=bool)
    r = _redis() if r is None else r
    keys = [text_key(emb.model_name, t) for t in texts]
    hits, r = _read(r, keys, out, present)
    cached = present.copy()
    missing = [i for i in range(len(texts)) if not present[i]]
    first: dict[str, int] = {}  # identical texts are embedded once
    todo = [i for i in missing if first.setdefault(texts[i], i) == i]
    embedded = _embed_until(emb, texts, todo, keys, out, present, deadline, r)
    for i in missing:  # duplicates of an embedded text
        j = first[texts[i]]
        if not present[i] and present[j]:
            out[i], present[i] = out[j], True
    if r is not None and texts:
        _count(r, hits, len(texts) - hits, embedded)
    return PassageVectors(out, present, hits, embedded, cached)


def _read(r, keys: list[str], out: np.ndarray, present: np.ndarray):
    if r is None or not keys:
        return 0, r
    try:
        raws = r.mget(keys)
    except redis.RedisError:
        log.warning("retrieve vector cache unreadable", exc_info=True)
        return 0, None
    hits = 0
    for i, raw in enumerate(raws):
        v = decode_vector(raw, out.shape[1]) if raw else None
        if v is not None:
            out[i], present[i] = v, True
            hits += 1
    return hits, r


def _embed_until(emb, texts, todo, keys, out, present, deadline, r) -> int:
    """Embed texts[todo] in batches; with a deadline, a batch starts only if it should end in time
    (a first batch of 4 measures the speed)."""
    batch = max(1, get_settings().embed_batch_size)
    per_text_s = 0.0
    pos = 0
    while pos < len(todo):
        n = batch
        if deadline is not None:
            left = deadline - time.monotonic()
            n = min(batch, int(left / per_text_s)) if per_text_s > 0 else (4 if left > 0 else 0)
            if n <= 0:
                break
        idx = todo[pos : pos + n]
        t0 = time.monotonic()
        vecs = np.asarray(emb.embed_passages([texts[i] for i in idx]), dtype=np.float32)
        per_text_s = (time.monotonic() - t0) / len(idx)
        for i, v in zip(idx, vecs, strict=True):
            out[i], present[i] = v, True
        pos += len(idx)
        if r is not None:
            _store(r, [keys[i] for i in idx], vecs)
    return pos


def _count(r, hits: int, misses: int, embedded: int) -> None:
    try:
        pipe = r.pipeline(transaction=False)
        pipe.hincrby(STATS_KEY, "hits", hits)
        pipe.hincrby(STATS_KEY, "misses", misses)
        pipe.hincrby(STATS_KEY, "embedded", embedded)
        pipe.execute()
    except redis.RedisError:
        log.debug("retrieve cache stats not counted", exc_info=True)


def _store(r, keys: list[str], vecs: np.ndarray) -> None:
    ttl = get_settings().retrieve_cache_ttl_s
    try:
        pipe = r.pipeline(transaction=False)
        for k, v in zip(keys, vecs, strict=True):
            pipe.set(k, encode_vector(v), ex=ttl)
        pipe.execute()
    except redis.RedisError:
        log.warning("retrieve vector cache not written", exc_info=True)


def query_vector(query: str) -> np.ndarray:
    return np.asarray(embedder().embed_queries([query])[0], dtype=np.float32)
