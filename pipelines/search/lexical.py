"""The shared search store in Redis: what every search process loads and keeps in step with.

Ingest calls `index_chunks` right after its Chroma upsert and `remove_chunks` right after its
Chroma delete. Each call is one Lua script per batch, so a reader never sees half a chunk, and
every change bumps a per-collection sequence number and records the chunk id in a change log
(a sorted set id -> seq of its last change: it never grows past the number of ids ever indexed).

Search processes (pipelines.search.index) read the sequence number before every query and, when
it moved, fetch only the ids changed since their last sync. So there is no per-process state that
can go stale: any search that starts after `index_chunks`/`remove_chunks` returned sees the change,
whichever API process or host serves it (cost: one Redis GET per query).

Keys (prefix `yana:lex:{collection}:`):
  doc:{id}   hash: text (indexed text), terms (JSON term -> tf), tok (tokenizer version),
             meta (JSON: the chunk's metadata), vec (float16 bytes of the embedding, when the
             caller passed one; otherwise search fetches the vector from Chroma)
  seq        change counter
  changes    zset id -> seq of its last change (deleted ids stay as tombstones: no doc hash)
  count      number of indexed chunks
  epoch      a random token set when the collection's index is first written: a dropped and
             re-created index (or a Redis that lost its data) gets a new one, so a position in
             the change log is only meaningful together with the epoch it was read under

Why a copy of the vectors: a cold search process loads 100k vectors from Redis in about a second,
Chroma's HTTP `get` takes ~15 s for the same (JSON floats). float16 halves the memory; ranking
differences to float32 are below 1e-3 in cosine.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter

import numpy as np
import orjson
import redis

from pipelines.search.keys import lexical_prefix
from pipelines.search.tokenizer import TOKENIZER_VERSION, normalize, tokenize

log = logging.getLogger("yana.lexical")

FILTER_FIELDS = ("category", "region", "brewery")
_BATCH = 256
# The field names label_text writes before each value: indexing them would only add noise.
_FIELD_LABELS = re.compile(r"^(カテゴリ|銘柄|商品名|蔵元|メーカー|地域|特徴)\s*[:：]\s*", re.MULTILINE)


def prefix(collection: str) -> str:
    return lexical_prefix(collection)


def filter_value(value) -> str:
    """The form filter values are compared in (NFKC, lower case, trimmed)."""
    return normalize(str(value)).strip()


def index_text(text: str, metadata: dict | None) -> str:
    """The text a chunk is found by: its own text without field names, plus any label field the
    text does not already contain, plus the category code (so "sake"/"juice" match)."""
    md = metadata or {}
    body = _FIELD_LABELS.sub("", text or "")
    parts = [body]
    seen = normalize(body)
    for key in ("category", "brand_name", "product_name", "brewery", "region", "label_features"):
        v = md.get(key)
        if isinstance(v, (list, tuple)):
            v = " ".join(map(str, v))
        v = str(v or "").strip()
        if v and normalize(v) not in seen:
            parts.append(v)
            seen += " " + normalize(v)
    return "\n".join(p for p in parts if p)


def terms_of(text: str) -> dict[str, int]:
    return dict(Counter(tokenize(text)))


def vec_bytes(embedding) -> bytes:
    if embedding is None:
        return b""
    return np.asarray(embedding, dtype=np.float32).astype(np.float16).tobytes()


# KEYS[1] = prefix. ARGV[1] = a fresh epoch token (kept only when the index has none yet), then
# groups of (id, text, terms, tok, meta, vec)
_INDEX = """
local p = KEYS[1]
redis.call('SET', p .. 'epoch', ARGV[1], 'NX')
local seq = 0
for i = 2, #ARGV, 6 do
  local id = ARGV[i]
  local dk = p .. 'doc:' .. id
  if redis.call('DEL', dk) == 0 then redis.call('INCR', p .. 'count') end
  redis.call('HSET', dk, 'text', ARGV[i+1], 'terms', ARGV[i+2], 'tok', ARGV[i+3], 'meta', ARGV[i+4])
  if ARGV[i+5] ~= '' then redis.call('HSET', dk, 'vec', ARGV[i+5]) end
  seq = redis.call('INCR', p .. 'seq')
  redis.call('ZADD', p .. 'changes', seq, id)
end
return seq
"""

# KEYS[1] = prefix. ARGV: ids
_REMOVE = """
local p = KEYS[1]
local seq = 0
for i = 1, #ARGV do
  local id = ARGV[i]
  if redis.call('DEL', p .. 'doc:' .. id) == 1 then
    redis.call('DECR', p .. 'count')
    seq = redis.call('INCR', p .. 'seq')
    redis.call('ZADD', p .. 'changes', seq, id)
  end
end
return seq
"""


def _chunk_args(chunk: dict) -> list:
    md = dict(chunk.get("metadata") or {})
    text = index_text(chunk.get("text") or "", md)
    return [
        chunk["id"],
        text,
        orjson.dumps(terms_of(text)).decode(),
        TOKENIZER_VERSION,
        orjson.dumps(md, default=str).decode(),
        vec_bytes(chunk.get("embedding")),
    ]


def index_chunks(r: redis.Redis, collection: str, chunks: list[dict]) -> None:
    """Index (or re-index) chunks {id, text, metadata[, embedding]}; call right after the Chroma
    upsert of the same chunks. Passing the embedding spares search processes a Chroma fetch."""
    if not chunks:
        return
    script = r.register_script(_INDEX)
    p = prefix(collection)
    for i in range(0, len(chunks), _BATCH):
        args: list = [uuid.uuid4().hex]
        for chunk in chunks[i : i + _BATCH]:
            args.extend(_chunk_args(chunk))
        script(keys=[p], args=args)


def remove_chunks(r: redis.Redis, collection: str, ids: list[str]) -> None:
    """Drop chunks from the index; call right after the Chroma delete of the same ids."""
    if not ids:
        return
    script = r.register_script(_REMOVE)
    p = prefix(collection)
    for i in range(0, len(ids), _BATCH):
        script(keys=[p], args=list(ids[i : i + _BATCH]))


def drop_collection(r: redis.Redis, collection: str) -> None:
    """Delete every key of a collection's index (the collection itself was dropped)."""
    batch = []
    for key in r.scan_iter(match=prefix(collection) + "*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            r.delete(*batch)
            batch.clear()
    if batch:
        r.delete(*batch)


def ensure_epoch(r: redis.Redis, collection: str) -> str:
    """The collection's epoch, set now when its index predates epochs."""
    key = prefix(collection) + "epoch"
    r.set(key, uuid.uuid4().hex, nx=True)
    value = r.get(key)
    return value.decode() if isinstance(value, bytes) else str(value or "")


def position(r: redis.Redis, collection: str) -> tuple[str | None, int]:
    """(epoch, change counter), read together."""
    epoch, seq = r.mget(prefix(collection) + "epoch", prefix(collection) + "seq")
    if isinstance(epoch, bytes):
        epoch = epoch.decode()
    return epoch, int(seq or 0)


def current_seq(r: redis.Redis, collection: str) -> int:
    return int(r.get(prefix(collection) + "seq") or 0)


def chunk_meta(r: redis.Redis, collection: str, chunk_id: str) -> dict | None:
    """The stored metadata of one indexed chunk, or None."""
    raw = r.hget(prefix(collection) + "doc:" + chunk_id, "meta")
    return orjson.loads(raw) if raw else None


def count(r: redis.Redis, collection: str) -> int:
    return int(r.get(prefix(collection) + "count") or 0)


def backfill_from_chroma(r: redis.Redis, col, batch: int = 1000) -> int:
    """Index every chunk a Chroma collection holds (a collection filled before this index existed,
    or a Redis that lost its data). Idempotent; returns the number of chunks indexed."""
    total = col.count()
    done = 0
    offset = 0
    while offset < total:
        got = col.get(limit=batch, offset=offset, include=["documents", "metadatas", "embeddings"])
        ids = got.get("ids") or []
        if not ids:
            break
        embs = got.get("embeddings")
        chunks = [
            {"id": i, "text": d or "", "metadata": m or {}, "embedding": (embs[n] if embs is not None else None)}
            for n, (i, d, m) in enumerate(
                zip(ids, got.get("documents") or [""] * len(ids), got.get("metadatas") or [{}] * len(ids), strict=True)
            )
        ]
        index_chunks(r, col.name, chunks)
        done += len(ids)
        offset += len(ids)
    log.info("lexical backfill", extra={"collection": col.name, "chunks": done})
    return done
