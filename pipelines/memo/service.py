"""Memos for agents: the raw text short-lived in Redis, its summary (or chunks) long-lived in Chroma.

A memo is saved as
  * Redis hash ``memo:{memo_id}`` (memo_id, session_id, text, summary, saved_at, keywords as JSON,
    importance) with a TTL of MEMO_TTL_SECONDS: the raw text is short-term memory;
  * Chroma documents in the memo collection (never the labels' collection): the summary when the
    client gave one (id ``memo_summary:<memo_id>``), else the text cut into MAX_CHUNK_CHARS chunks
    (ids ``memo_chunk:<memo_id>:<i>``), with metadata memo_id, session_id, chunk_index, is_summary,
    keywords, importance, saved_at. These stay after the raw expired, so search still finds the
    memo and answers ``raw: null``.

Search embeds the query, asks Chroma for enough chunks, and joins a memo's chunks into one result
(its best distance). The memo collection has its own alias in Redis (like the labels'), so a
re-embed builds the memos' collection for the new model and swaps it atomically too.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chromadb.errors import NotFoundError

from pipelines.embedding.backends import canonical_model_name, get_embedder, resolve_default_model
from pipelines.search.collections import (
    ACTIVE_ALIAS_KEY,
    collection_model,
    create_collection,
    model_slug,
    open_collection,
)
from pipelines.text.chunking import chunk_text
from yana.errors import ErrorCode, YanaError

log = logging.getLogger("yana.memo")

RAW_KEY = "memo:{}"
ALIAS_KEY = "yana:memo:collection:active"
PRUNE_LOCK_KEY = "yana:memo:prune_lock"
COLLECTION_PREFIX = "memos"
SUMMARY_ID = "memo_summary:{}"
CHUNK_ID = "memo_chunk:{}:{}"
# Chunks asked from Chroma per wanted memo: a long memo has several chunks near the same query.
OVERFETCH = 4


@dataclass(frozen=True)
class MemoConfig:
    ttl_s: int
    max_chunk_chars: int
    dedup_threshold: float | None = None  # cosine similarity; None: never merge
    prune_expired: bool = False
    sync_embed_chars: int | None = None  # None: every chunk before the answer


def collection_name(model: str, dim: int, version: int = 1) -> str:
    return f"{COLLECTION_PREFIX}__{model_slug(model)}__{int(dim)}__v{int(version)}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def memo_collection(chroma, r):
    """The collection memos are written to and searched in; created on first use for the model
    the labels use, so one embedder serves both."""
    name = r.get(ALIAS_KEY)
    if not name:
        label_alias = r.get(ACTIVE_ALIAS_KEY)
        model = collection_model(open_collection(chroma, label_alias))[0] if label_alias else resolve_default_model(r)
        dim = get_embedder(model).dim
        name = collection_name(model, dim)
        create_collection(chroma, name, model, dim)
        r.set(ALIAS_KEY, name, nx=True)
        name = r.get(ALIAS_KEY) or name  # another process may have created it first
    key = (id(chroma), name)
    hit = _opened.get(key)
    if hit is None:  # opening is a round trip to Chroma; the alias (one Redis GET) is still read every call
        col = open_collection(chroma, name)
        hit = _opened[key] = (col, collection_model(col)[0])
    return hit


# (client, collection name) -> (collection, model). A name is never reused for another collection
# (it carries the model, dim and a version), so an entry stays valid while its collection exists;
# query_memo drops it when Chroma says the collection is gone.
_opened: dict[tuple[int, str], tuple[Any, str]] = {}


def _metadata(
    memo_id: str, session_id: str, index: int, is_summary: bool, keywords: list[str], importance: float, saved_at: str
) -> dict:
    md: dict[str, Any] = {
        "memo_id": memo_id,
        "session_id": session_id,
        "chunk_index": index,
        "is_summary": is_summary,
        "importance": float(importance),
        "saved_at": saved_at,
    }
    if keywords:  # Chroma refuses empty lists
        md["keywords"] = list(keywords)
    return md


def _raw_from_hash(h: dict) -> dict | None:
    if not h:
        return None
    out: dict[str, Any] = dict(h)
    out["keywords"] = json.loads(h.get("keywords") or "[]")
    out["importance"] = float(h.get("importance") or 0.0)
    if not out.get("summary"):
        out["summary"] = None
    return out


def _merge_target(col, embedding, session_id: str, threshold: float) -> str | None:
    """The memo of this session whose stored text is at least `threshold` cosine-similar."""
    if col.count() == 0:
        return None
    got = col.query(
        query_embeddings=[embedding], n_results=1, where={"session_id": session_id}, include=["metadatas", "distances"]
    )
    if not got["ids"] or not got["ids"][0]:
        return None
    similarity = 1.0 - float(got["distances"][0][0])  # cosine space: distance = 1 - cosine
    return got["metadatas"][0][0]["memo_id"] if similarity >= threshold else None


def save_memo(
    r,
    chroma,
    cfg: MemoConfig,
    *,
    session_id: str,
    text: str,
    summary: str | None = None,
    keywords: list[str] | None = None,
    importance: float = 0.0,
) -> dict:
    keywords = list(dict.fromkeys(k.strip() for k in (keywords or []) if k.strip()))
    used_summary = bool(summary and summary.strip())
    all_sources = [summary.strip()] if used_summary and summary else chunk_text(text, cfg.max_chunk_chars)
    # Embedding costs ~0.3-0.6 ms of CPU per character (every token of every chunk goes through the
    # model), so a 100k-character memo is a minute of CPU: only the leading chunks up to
    # sync_embed_chars are embedded before the answer, the rest by a job (index_memo_chunks).
    sources = _sync_part(all_sources, cfg.sync_embed_chars)
    col, model = memo_collection(chroma, r)
    vectors = get_embedder(model).embed_passages(sources)

    if cfg.dedup_threshold is not None:
        target = _merge_target(col, vectors[0].tolist(), session_id, cfg.dedup_threshold)
        if target is not None:
            return _merge_into(r, col, cfg, target, keywords, importance)

    memo_id = uuid.uuid4().hex
    saved_at = _now()
    raw = {
        "memo_id": memo_id,
        "session_id": session_id,
        "text": text,
        "summary": summary.strip() if used_summary and summary else "",
        "saved_at": saved_at,
        "keywords": json.dumps(keywords, ensure_ascii=False),
        "importance": repr(float(importance)),
    }
    key = RAW_KEY.format(memo_id)
    pipe = r.pipeline(transaction=True)
    pipe.hset(key, mapping=raw)
    pipe.expire(key, cfg.ttl_s)
    pipe.execute()

    all_ids = (
        [SUMMARY_ID.format(memo_id)] if used_summary else [CHUNK_ID.format(memo_id, i) for i in range(len(all_sources))]
    )
    ids = all_ids[: len(sources)]
    metas = [
        _metadata(memo_id, session_id, i, used_summary, keywords, importance, saved_at) for i in range(len(sources))
    ]
    try:
        col.upsert(ids=ids, documents=sources, metadatas=metas, embeddings=vectors)
    except Exception:
        r.delete(key)  # nothing half-saved: the caller may retry the whole save
        raise
    return {
        "memo_id": memo_id,
        "saved_at": saved_at,
        "chroma_ids": all_ids,
        "used_summary": used_summary,
        "merged_into": None,
        "indexed_chunks": len(ids),
        # what the caller hands to a "memo.index" job when some chunks are left (else None)
        "pending": (
            {
                "memo_id": memo_id,
                "session_id": session_id,
                "start": len(ids),
                "max_chunk_chars": cfg.max_chunk_chars,
                "keywords": keywords,
                "importance": float(importance),
                "saved_at": saved_at,
            }
            if len(ids) < len(all_ids)
            else None
        ),
    }


def _sync_part(sources: list[str], budget_chars: int | None) -> list[str]:
    """The leading chunks whose characters fit `budget_chars` (always the first one)."""
    if budget_chars is None:
        return sources
    n, used = 0, 0
    for src in sources:
        if n and used + len(src) > budget_chars:
            break
        n, used = n + 1, used + len(src)
    return sources[:n]


def index_memo_chunks(
    r,
    chroma,
    *,
    memo_id: str,
    session_id: str,
    start: int,
    max_chunk_chars: int,
    keywords: list[str],
    importance: float,
    saved_at: str,
    batch: int = 4,
    progress=None,
) -> dict:
    """The job half of a long memo's save: embed its chunks from `start` on (cut from the raw text
    exactly as the save cut them) and upsert them, a few at a time. Idempotent (ids are fixed), so
    a retried job only redoes work; a memo deleted meanwhile is left alone (and what this job
    wrote for it is removed)."""
    key = RAW_KEY.format(memo_id)
    text = r.hget(key, "text")
    if text is None:
        return {"memo_id": memo_id, "indexed": 0, "deleted": True}
    chunks = chunk_text(text, max_chunk_chars)
    col, model = memo_collection(chroma, r)
    embedder = get_embedder(model)
    done = 0
    for s in range(start, len(chunks), batch):
        if not r.exists(key):
            break
        part = chunks[s : s + batch]
        vectors = embedder.embed_passages(part)
        col.upsert(
            ids=[CHUNK_ID.format(memo_id, s + i) for i in range(len(part))],
            documents=part,
            metadatas=[
                _metadata(memo_id, session_id, s + i, False, keywords, importance, saved_at) for i in range(len(part))
            ],
            embeddings=vectors,
        )
        done += len(part)
        if progress is not None:
            progress("embed", done, len(chunks) - start)
    if not r.exists(key):  # deleted while this ran: take back what it wrote
        col.delete(ids=[CHUNK_ID.format(memo_id, i) for i in range(start, len(chunks))])
        return {"memo_id": memo_id, "indexed": 0, "deleted": True}
    return {"memo_id": memo_id, "indexed": done, "deleted": False}


def _merge_into(r, col, cfg: MemoConfig, memo_id: str, keywords: list[str], importance: float) -> dict:
    """A near-duplicate of an existing memo: keep that one, widen its keywords and importance."""
    got = col.get(where={"memo_id": memo_id}, include=["metadatas"])
    metas = got["metadatas"] or []
    old_kw = list(metas[0].get("keywords") or []) if metas else []
    merged_kw = list(dict.fromkeys(old_kw + keywords))
    new_importance = max([float(m.get("importance") or 0.0) for m in metas] + [float(importance)])
    if got["ids"]:
        col.update(
            ids=got["ids"],
            metadatas=[
                {**m, "importance": new_importance, **({"keywords": merged_kw} if merged_kw else {})} for m in metas
            ],
        )
    key = RAW_KEY.format(memo_id)
    if r.exists(key):
        r.hset(key, mapping={"keywords": json.dumps(merged_kw, ensure_ascii=False), "importance": repr(new_importance)})
        r.expire(key, cfg.ttl_s)
    saved_at = metas[0].get("saved_at") if metas else None
    return {
        "memo_id": memo_id,
        "saved_at": saved_at,
        "chroma_ids": list(got["ids"]),
        "used_summary": bool(metas and metas[0].get("is_summary")),
        "merged_into": memo_id,
    }


def _where(session_id: str | None, keywords: list[str] | None, min_importance: float | None) -> dict | None:
    clauses: list[dict] = []
    if session_id:
        clauses.append({"session_id": session_id})
    for kw in keywords or []:
        clauses.append({"keywords": {"$contains": kw}})
    if min_importance is not None:
        clauses.append({"importance": {"$gte": float(min_importance)}})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def query_memo(
    r,
    chroma,
    *,
    query: str,
    n_results: int,
    session_id: str | None = None,
    keywords: list[str] | None = None,
    min_importance: float | None = None,
) -> dict:
    col, model = memo_collection(chroma, r)
    results: list[dict] = []
    vector = get_embedder(model).embed_queries([query])[0]
    try:
        got = _nearest(col, vector, n_results * OVERFETCH, _where(session_id, keywords, min_importance))
    except NotFoundError:  # the collection was dropped (a re-embed finished): open the current one
        _opened.clear()
        col, _model = memo_collection(chroma, r)
        got = _nearest(col, vector, n_results * OVERFETCH, _where(session_id, keywords, min_importance))
    if got["ids"] and got["ids"][0]:
        best: dict[str, dict] = {}
        for doc, md, dist in zip(got["documents"][0], got["metadatas"][0], got["distances"][0], strict=True):
            memo_id = md["memo_id"]
            if memo_id not in best or dist < best[memo_id]["distance"]:
                best[memo_id] = {"summary": doc, "metadata": dict(md), "distance": float(dist)}
        ranked = sorted(best.values(), key=lambda h: (h["distance"], h["metadata"]["memo_id"]))[:n_results]
        raws = _raw_many(r, [h["metadata"]["memo_id"] for h in ranked])
        for hit, raw in zip(ranked, raws, strict=True):
            hit["metadata"].setdefault("keywords", [])
            results.append({**hit, "raw": raw})
    return {"query": query, "results": results}


def _nearest(col, vector, n: int, where: dict | None) -> dict:
    """One Chroma query (an empty collection answers empty lists; no count() round trip first)."""
    return col.query(
        query_embeddings=[vector.tolist()], n_results=n, where=where, include=["documents", "metadatas", "distances"]
    )


def _raw_many(r, memo_ids: list[str]) -> list[dict | None]:
    pipe = r.pipeline(transaction=False)
    for memo_id in memo_ids:
        pipe.hgetall(RAW_KEY.format(memo_id))
    return [_raw_from_hash(h) for h in pipe.execute()]


def get_memo(r, memo_id: str) -> dict:
    raw = _raw_from_hash(r.hgetall(RAW_KEY.format(memo_id)))
    if raw is None:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"memo {memo_id} does not exist or its raw text expired")
    return raw


def delete_memo(r, chroma, memo_id: str) -> dict:
    col, _model = memo_collection(chroma, r)
    ids = col.get(where={"memo_id": memo_id}, include=[])["ids"]
    removed_raw = r.delete(RAW_KEY.format(memo_id))
    if not ids and not removed_raw:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"memo {memo_id} does not exist")
    if ids:
        col.delete(ids=ids)
    return {"deleted": True, "memo_id": memo_id, "chroma_ids": ids}


def clear_expired(r, chroma, cfg: MemoConfig, *, batch: int = 500, lock_s: int = 300) -> dict:
    """Remove Chroma entries whose raw text expired, when MEMO_PRUNE_EXPIRED is on (by default the
    Chroma copy is long-term memory and stays). One process at a time prunes (a Redis lock); the
    others answer at once with `skipped`."""
    if not cfg.prune_expired:
        return {"pruned_memos": 0, "pruned_chunks": 0, "scanned": 0, "enabled": False, "skipped": False}
    token = uuid.uuid4().hex
    if not r.set(PRUNE_LOCK_KEY, token, nx=True, ex=lock_s):
        return {"pruned_memos": 0, "pruned_chunks": 0, "scanned": 0, "enabled": True, "skipped": True}
    try:
        col, _model = memo_collection(chroma, r)
        expired_ids: list[str] = []
        expired_memos: set[str] = set()
        scanned = 0
        offset = 0
        while True:
            page = col.get(include=["metadatas"], limit=batch, offset=offset)
            if not page["ids"]:
                break
            scanned += len(page["ids"])
            memo_ids = [md["memo_id"] for md in page["metadatas"]]
            pipe = r.pipeline(transaction=False)
            for memo_id in memo_ids:
                pipe.exists(RAW_KEY.format(memo_id))
            for cid, memo_id, alive in zip(page["ids"], memo_ids, pipe.execute(), strict=True):
                if not alive:
                    expired_ids.append(cid)
                    expired_memos.add(memo_id)
            offset += len(page["ids"])
        for i in range(0, len(expired_ids), batch):
            col.delete(ids=expired_ids[i : i + batch])
        return {
            "pruned_memos": len(expired_memos),
            "pruned_chunks": len(expired_ids),
            "scanned": scanned,
            "enabled": True,
            "skipped": False,
        }
    finally:
        # Release only our own lock (a slow run whose lock expired must not free another's).
        r.eval(
            "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
            1,
            PRUNE_LOCK_KEY,
            token,
        )


def reembed_memos(r, chroma, model: str, *, batch: int = 64) -> dict:
    """Build the memos' collection for `model` from the current one, then swap the memo alias.
    Called by the re-embed job after the labels' swap, so memos follow the labels to a new model.
    Memos saved while it copies are caught up before the swap."""
    if not r.get(ALIAS_KEY):
        return {"copied": 0, "swapped": False, "reason": "no memos yet"}
    src, src_model = memo_collection(chroma, r)
    embedder = get_embedder(model)
    if canonical_model_name(src_model) == canonical_model_name(model):
        return {"from": src.name, "to": src.name, "copied": 0, "swapped": False, "reason": "already on this model"}
    existing = {c if isinstance(c, str) else c.name for c in chroma.list_collections()}
    version = 1
    while collection_name(model, embedder.dim, version) in existing:
        version += 1
    name = collection_name(model, embedder.dim, version)
    dst = create_collection(chroma, name, model, embedder.dim)

    def copy(page: dict) -> int:
        if page["ids"]:
            vectors = embedder.embed_passages(page["documents"])
            dst.upsert(ids=page["ids"], documents=page["documents"], metadatas=page["metadatas"], embeddings=vectors)
        return len(page["ids"])

    copied = offset = 0
    while n := copy(src.get(include=["documents", "metadatas"], limit=batch, offset=offset)):
        copied += n
        offset += n
    missing = sorted(set(src.get(include=[])["ids"]) - set(dst.get(include=[])["ids"]))
    for i in range(0, len(missing), batch):
        copied += copy(src.get(ids=missing[i : i + batch], include=["documents", "metadatas"]))
    swapped = r.eval(
        "if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end redis.call('SET', KEYS[1], ARGV[2]) return 1",
        1,
        ALIAS_KEY,
        src.name,
        name,
    )
    return {"from": src.name, "from_model": src_model, "to": name, "copied": copied, "swapped": bool(swapped)}
