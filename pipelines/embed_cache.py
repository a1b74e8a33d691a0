"""Embeddings cached in Redis by (model, kind, sha256(text)), shared by every process.

Identical label texts (the same product uploaded again, a re-ingest) and repeated queries are
embedded once: ``embed_cached`` reads all keys with one MGET, embeds only the misses, writes them
with a TTL in one pipeline, and counts hits and misses in ``yana:embcache:stats``. The kind is part
of the key because e5 embeds a query and a passage of the same text differently. Vectors are stored
as base64 of float32 bytes (the shared client decodes responses to str). Redis being down never
fails an embedding: the texts are embedded without the cache.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from typing import Literal

import numpy as np

from pipelines.embedding import get_embedder
from yana.settings import get_settings

log = logging.getLogger("yana.embedding")

STATS_KEY = "yana:embcache:stats"  # hash: hits, misses
Kind = Literal["query", "passage"]


def cache_key(model: str, kind: str, text: str) -> str:
    return f"yana:emb:{model}:{kind}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"


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


def embed_cached(texts: list[str], kind: Kind, model: str | None = None, r=None) -> np.ndarray:
    """n x dim float32 L2-normalised vectors of `texts` by `model` (default: the resolved default),
    from the Redis cache where present."""
    if kind not in ("query", "passage"):
        raise ValueError(f"kind must be 'query' or 'passage', not {kind!r}")
    emb = get_embedder(model)
    embed = emb.embed_queries if kind == "query" else emb.embed_passages
    texts = list(texts)
    ttl = get_settings().embed_cache_ttl_s
    if not texts or ttl <= 0:
        return embed(texts)
    if r is None:
        from yana.clients import get_redis

        r = get_redis()
    keys = [cache_key(emb.model_name, kind, t) for t in texts]
    out = np.zeros((len(texts), emb.dim), dtype=np.float32)
    try:
        cached = r.mget(keys)
    except Exception:  # Redis down or slow: embed everything, do not fail the caller
        log.warning("embedding cache unavailable", exc_info=True)
        return embed(texts)
    missing: dict[str, list[int]] = {}  # text -> rows (a batch may repeat a text)
    for i, raw in enumerate(cached):
        v = decode_vector(raw, emb.dim) if raw else None
        if v is None:
            missing.setdefault(texts[i], []).append(i)
        else:
            out[i] = v
    if missing:
        todo = list(missing)
        vecs = embed(todo)
        for t, v in zip(todo, vecs, strict=True):
            out[missing[t]] = v
    hits = len(texts) - sum(len(rows) for rows in missing.values())
    try:
        pipe = r.pipeline(transaction=False)
        if missing:
            for t, v in zip(todo, vecs, strict=True):
                pipe.set(cache_key(emb.model_name, kind, t), encode_vector(v), ex=ttl)
        pipe.hincrby(STATS_KEY, "hits", hits)
        pipe.hincrby(STATS_KEY, "misses", len(texts) - hits)
        pipe.execute()
    except Exception:
        log.warning("cannot write the embedding cache", exc_info=True)
    return out


def cache_stats(r=None) -> dict[str, int]:
    if r is None:
        from yana.clients import get_redis

        r = get_redis()
    raw = r.hgetall(STATS_KEY) or {}
    return {"hits": int(raw.get("hits", 0)), "misses": int(raw.get("misses", 0))}
