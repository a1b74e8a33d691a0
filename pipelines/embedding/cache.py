"""Embeddings cached in Redis by (model, kind, sha256(text)), shared by every process.

Identical label texts (the same product uploaded again, a re-ingest) and repeated queries are
embedded once: ``embed_cached`` reads all keys with one MGET, embeds only the misses, writes them
with a TTL in one pipeline, and counts hits and misses in ``yana:embcache:stats``.
``embed_cached_until`` is the same under a time budget (the inline retrieve's cold requests: what is
not embedded in time comes back marked absent). The kind is part
of the key because e5 embeds a query and a passage of the same text differently. Vectors are stored
as base64 of float32 bytes (the shared client decodes responses to str). Redis being down never
fails an embedding: the texts are embedded without the cache.
"""

from __future__ import annotations

import base64
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pipelines.embedding.backends import get_embedder
from pipelines.embedding.keys import CACHE_STATS_KEY, cache_key
from yana.settings import get_settings

log = logging.getLogger("yana.embedding")

STATS_KEY = CACHE_STATS_KEY
Kind = Literal["query", "passage"]


def encode_vector(v: np.ndarray) -> str:
    """The cache's storage form of one vector: base64 of its float32 bytes."""
    return base64.b64encode(np.ascontiguousarray(v, dtype=np.float32).tobytes()).decode()


def decode_vector(raw: str, dim: int) -> np.ndarray | None:
    """A stored vector, or None when the entry is not a `dim`-d float32 vector."""
    try:
        v = np.frombuffer(base64.b64decode(raw), dtype=np.float32)
    except (ValueError, TypeError):
        return None
    return v if v.shape == (dim,) else None


@dataclass
class CachedVectors:
    vectors: np.ndarray  # n x dim; the rows of texts not embedded in time are zero
    present: np.ndarray  # bool per text: a vector is there
    cached: np.ndarray  # bool per text: read from the cache
    embedded: int  # distinct texts embedded by this call


def embed_cached(texts: list[str], kind: Kind, model: str | None = None, r=None) -> np.ndarray:
    """n x dim float32 L2-normalised vectors of `texts` by `model` (default: the resolved default),
    from the Redis cache where present."""
    return embed_cached_until(texts, kind, model, r).vectors


def embed_cached_until(
    texts: list[str],
    kind: Kind,
    model: str | None = None,
    r=None,
    *,
    deadline: float | None = None,
    ttl: int | None = None,
    stats_key: str = STATS_KEY,
    parallel: int = 1,
) -> CachedVectors:
    """`embed_cached` under a time budget: the misses are embedded while time.monotonic() stays under
    `deadline` (None: all of them, in one call), batch by batch, each batch written to the cache as it
    is done (a later request or a follow-up job finds the work). Identical texts are embedded once.
    `ttl` defaults to EMBED_CACHE_TTL_S; 0 means no cache. `parallel`: texts embedded at once from
    as many threads, where the embedder allows it (`concurrent_runs`); the vectors are the same."""
    if kind not in ("query", "passage"):
        raise ValueError(f"kind must be 'query' or 'passage', not {kind!r}")
    if deadline is not None and math.isinf(deadline):
        deadline = None
    emb = get_embedder(model)
    texts = list(texts)
    ttl = get_settings().embed_cache_ttl_s if ttl is None else ttl
    out = np.zeros((len(texts), emb.dim), dtype=np.float32)
    present = np.zeros(len(texts), dtype=bool)
    keys = [cache_key(emb.model_name, kind, t) for t in texts]
    if ttl <= 0 or not texts:
        r = None
    elif r is None:
        from yana.clients import get_redis

        r = get_redis()
    r = _read(r, keys, out, present)
    cached = present.copy()
    rows: dict[str, list[int]] = {}  # text -> rows (a batch may repeat a text)
    for i in np.flatnonzero(~present):
        rows.setdefault(texts[i], []).append(int(i))
    runs = max(1, min(parallel, getattr(emb, "concurrent_runs", 1)))
    embedded = _embed_until(emb, kind, list(rows), rows, keys, out, present, deadline, r, ttl, runs)
    if r is not None:
        hits = int(cached.sum())
        try:
            pipe = r.pipeline(transaction=False)
            pipe.hincrby(stats_key, "hits", hits)
            pipe.hincrby(stats_key, "misses", len(texts) - hits)
            pipe.hincrby(stats_key, "embedded", embedded)
            pipe.execute()
        except Exception:  # noqa: BLE001 - statistics only
            log.debug("embedding cache statistics not counted", exc_info=True)
    return CachedVectors(out, present, cached, embedded)


def _read(r, keys: list[str], out: np.ndarray, present: np.ndarray):
    """Fill `out`/`present` from the cache; the client back, or None when Redis cannot be read."""
    if r is None or not keys:
        return r
    try:
        raws = r.mget(keys)
    except Exception:  # noqa: BLE001 - Redis down or slow: embed everything, do not fail the caller
        log.warning("embedding cache unavailable", exc_info=True)
        return None
    for i, raw in enumerate(raws):
        v = decode_vector(raw, out.shape[1]) if raw else None
        if v is not None:
            out[i], present[i] = v, True
    return r


# A text's embedding time is about (characters + this) x a per-character speed: a fixed cost per run
# (~2.6 ms, about 30 characters' worth on this encoder) plus time linear in its length.
_TEXT_OVERHEAD_CHARS = 32


def _cost(text: str) -> int:
    return len(text) + _TEXT_OVERHEAD_CHARS


def _fits(todo: list[str], pos: int, budget: float, batch: int) -> int:
    """How many texts from `pos` fit in `budget` (in _cost units), at most `batch`."""
    n, used = 0, 0.0
    while n < batch and pos + n < len(todo):
        used += _cost(todo[pos + n])
        if used > budget:
            break
        n += 1
    return n


def _embed_until(emb, kind, todo, rows, keys, out, present, deadline, r, ttl, runs: int = 1) -> int:
    """Embed the distinct texts `todo`; with a deadline in batches, a batch starting only if it should
    end in time by the speed measured so far, per character: a request mixes long texts (a pair of
    paragraphs) and short ones (a sentence), and a speed per text measured on one kind would send
    a batch of the other far past the deadline. The first batch, one text per run, measures it.
    `runs` > 1: each batch is split among that many threads. Returns how many were embedded."""
    embed = emb.embed_queries if kind == "query" else emb.embed_passages
    batch = max(1, get_settings().embed_batch_size)
    per_unit_s = 0.0
    pos = 0
    pool = ThreadPoolExecutor(runs, thread_name_prefix="embed") if runs > 1 else None
    try:
        while pos < len(todo):
            n = len(todo)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                n = _fits(todo, pos, left / per_unit_s, batch) if per_unit_s > 0 else runs
                if n <= 0:
                    break
            part = todo[pos : pos + n]
            t0 = time.monotonic()
            if pool is None or len(part) == 1:
                vecs = np.asarray(embed(part), dtype=np.float32)
            else:  # interleaved slices: each thread gets a like share of long and short texts
                slices = [part[k::runs] for k in range(runs) if part[k::runs]]
                vecs = np.empty((len(part), out.shape[1]), dtype=np.float32)
                for k, got in enumerate(pool.map(embed, slices)):
                    vecs[k::runs] = got
            per_unit_s = (time.monotonic() - t0) / sum(_cost(t) for t in part)
            for t, v in zip(part, vecs, strict=True):
                out[rows[t]] = v
                present[rows[t]] = True
            pos += len(part)
            if r is not None:
                store_vectors(r, [keys[rows[t][0]] for t in part], vecs, ttl)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    return pos


def store_vectors(r, keys: list[str], vecs: np.ndarray, ttl: int) -> None:
    """Write vectors under their cache keys with a TTL (one pipeline); Redis trouble is logged."""
    try:
        pipe = r.pipeline(transaction=False)
        for k, v in zip(keys, vecs, strict=True):
            pipe.set(k, encode_vector(v), ex=ttl)
        pipe.execute()
    except Exception:  # noqa: BLE001 - a cache that cannot be written is no cache, not a failure
        log.warning("cannot write the embedding cache", exc_info=True)


def cache_stats(r=None) -> dict[str, int]:
    if r is None:
        from yana.clients import get_redis

        r = get_redis()
    raw = r.hgetall(STATS_KEY) or {}
    return {"hits": int(raw.get("hits", 0)), "misses": int(raw.get("misses", 0))}
