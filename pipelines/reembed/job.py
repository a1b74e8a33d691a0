"""Re-embedding: build a collection for another model from the stored texts, then swap the alias.

1. The source is the active collection when the job first ran; the target is a new version
   (labels__<model>__<dim>__v<N+1>). Both are kept in the job's meta, so a resumed job continues
   the same build. The target is published as the "building" collection: ingest writes new
   chunks there too while the build runs.
2. Pages of the source (documents + metadata, in Chroma's stable order) are embedded with the new
   model and upserted under the same ids; the page offset is the cursor in the job's meta, so a
   killed worker resumes where it stopped (re-upserting at most one page).
3. A catch-up pass copies ids the paging missed (deleted/added meanwhile), then the alias moves in
   one compare-and-set. Search reads the old collection until that instant and the new one after;
   the old collection stays for rollback until `yana collections drop NAME`.
"""

from __future__ import annotations

import logging
from typing import Any

from pipelines.embedding.backends import DEFAULT_MODEL_KEY, canonical_model_name, get_embedder
from pipelines.ingest.pipeline import JobHandle, LocalJob
from pipelines.memo import service as memo
from pipelines.runtime.jobs import TERMINAL, JobStore
from pipelines.search import collections as vi
from pipelines.search.collections import BUILDING_JOB_KEY, BUILDING_KEY
from yana.clients import get_chroma, get_redis
from yana.errors import conflict
from yana.settings import Settings, get_settings

log = logging.getLogger("yana.reembed")


# Claim the "building" slot for our target (or find it already ours after a restart). ARGV[3] = 1
# lets us take it over from a holder whose job has ended without releasing it (killed for good).
_CLAIM_BUILDING = """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] and ARGV[3] ~= '1' then return cur end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return ARGV[1]
"""

_RELEASE_BUILDING = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1], KEYS[2]) end
return 0
"""


def _holder_ended(r) -> bool:
    job_id = r.get(BUILDING_JOB_KEY)
    job = JobStore(r).get(job_id) if job_id else None
    return job is None or job["status"] in TERMINAL


def next_version(chroma, model: str, dim: int) -> str:
    slug = vi.model_slug(model)
    versions = [0]
    for c in chroma.list_collections():
        name = c if isinstance(c, str) else c.name
        parsed = vi.parse_collection_name(name)
        if parsed and parsed["slug"] == slug and parsed["dim"] == dim:
            versions.append(parsed["version"])
    return vi.collection_name(model, dim, max(versions) + 1)


def _copy(src, dst, emb, ids: list[str], docs: list[str], metas: list[dict], r) -> None:
    vectors = emb.embed_passages(docs)
    chunks = [
        {"id": i, "text": d, "metadata": m, "embedding": v}
        for i, d, m, v in zip(ids, docs, metas, vectors, strict=True)
    ]
    vi.upsert_chunks(dst, chunks, r=r, model=emb.model_name)


def _all_ids(col, page: int = 5000) -> set[str]:
    out: set[str] = set()
    offset = 0
    while True:
        got = col.get(limit=page, offset=offset, include=[])["ids"]
        out.update(got)
        if len(got) < page:
            return out
        offset += len(got)


def run_reembed(
    ctx: JobHandle | None, *, model: str, r=None, chroma=None, s: Settings | None = None, **_ignored
) -> dict[str, Any]:
    ctx = ctx or LocalJob()
    s = s or get_settings()
    r = r if r is not None else get_redis(s)
    chroma = chroma if chroma is not None else get_chroma(s)
    model = canonical_model_name(model)
    emb = get_embedder(model)  # MODEL_UNAVAILABLE (503) right away when it is not on this machine

    source: str = ctx.meta.get("source") or vi.active_collection(chroma, r)[0].name  # creates the default
    target = ctx.meta.get("target") or next_version(chroma, model, emb.dim)
    ctx.save_meta(source=source, target=target, model=model)
    holder = r.eval(_CLAIM_BUILDING, 2, BUILDING_KEY, BUILDING_JOB_KEY, target, ctx.job_id, "0")
    if holder != target:
        if not _holder_ended(r):
            raise conflict(f"another re-embed is building {holder}")
        r.eval(_CLAIM_BUILDING, 2, BUILDING_KEY, BUILDING_JOB_KEY, target, ctx.job_id, "1")
    try:
        dst = vi.create_collection(chroma, target, model, emb.dim)
        src = vi.open_collection(chroma, source)
        batch = max(1, s.reembed_batch_size)
        cursor = int(ctx.meta.get("cursor") or 0)
        total = src.count()
        while True:
            page = src.get(limit=batch, offset=cursor, include=["documents", "metadatas"])
            if not page["ids"]:
                break
            _copy(src, dst, emb, page["ids"], page["documents"], page["metadatas"], r)
            cursor += len(page["ids"])
            ctx.save_meta(cursor=cursor)
            ctx.progress("reembed", min(cursor, total), max(total, cursor))
        # Catch up with what changed under the paging, then swap.
        missing = sorted(_all_ids(src) - _all_ids(dst))
        for i in range(0, len(missing), batch):
            got = src.get(ids=missing[i : i + batch], include=["documents", "metadatas"])
            if got["ids"]:
                _copy(src, dst, emb, got["ids"], got["documents"], got["metadatas"], r)
        # a resumed job may have swapped already
        swapped = vi.active_name(r) == target or vi.swap_active(r, source, target)
        if not swapped:
            raise conflict(f"the active collection is no longer {source}; not swapping")
        r.set(DEFAULT_MODEL_KEY, model)  # an explicit re-embed is the one way the default changes
    except Exception:  # a clean failure frees the slot; a killed process keeps it for its resume
        r.eval(_RELEASE_BUILDING, 2, BUILDING_KEY, BUILDING_JOB_KEY, target)
        raise
    r.eval(_RELEASE_BUILDING, 2, BUILDING_KEY, BUILDING_JOB_KEY, target)
    memos = memo.reembed_memos(r, chroma, model, batch=batch)  # memos follow the labels' model
    count = dst.count()
    ctx.progress("reembed", count, count)
    log.info("re-embed swapped", extra={"source": source, "target": target, "model": model, "count": count})
    return {
        "source": source,
        "target": target,
        "active": target,
        "model": model,
        "dim": emb.dim,
        "count": count,
        "copied_after_paging": len(missing),
        "memos": memos,
    }
