"""Near-duplicate groups for review: each indexed label with the images merged into it.

Reads what ingestion records: the duplicates hash (`pipelines.neardup.index.iter_merges`, sha1 -> dedup_of,
distance, pHash, stored file, time, and the uploaded name when recorded) and the kept label's
metadata from the active collection's lexical store (brand, product, category, ingested_at).
Groups are ordered by size (largest first), then label id, so an integer offset pages them stably.
"""

from __future__ import annotations

import base64
import io
import logging
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from pipelines.ingest import image_io
from pipelines.labels import schema as labels
from pipelines.neardup import index as phash_index
from pipelines.search import collections as vector_index
from pipelines.search import lexical
from pipelines.search.label_images import image_key
from yana.blobs import BlobMissing, BlobStore
from yana.errors import YanaError

log = logging.getLogger("yana.dedup_report")

THUMB_PX = 160
KEPT_FIELDS = ("brand_name", "product_name", "category", "brewery", "region", "phash", "hash_sha1", "file_path")


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(float(ts), UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def thumbnail(blobs: BlobStore, rel: str | None, size: int = THUMB_PX) -> str | None:
    """A small JPEG data URI of a stored image, or None when the blob is missing or unreadable."""
    if not rel:
        return None
    from PIL import Image

    try:
        with Image.open(io.BytesIO(blobs.get(rel))) as im:
            im.thumbnail((size, size))
            buf = io.BytesIO()
            im.convert("RGB").save(buf, format="JPEG", quality=80)
    except (OSError, ValueError, BlobMissing, YanaError) as exc:
        log.info("no thumbnail for %s: %s", rel, exc)
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def _kept_label(r, collection: str | None, label_id: str) -> dict:
    meta: dict = {}
    if collection:
        meta = lexical.chunk_meta(r, collection, labels.chunk_id(label_id, 0)) or {}
    kept = {"id": label_id, **{k: meta.get(k) for k in KEPT_FIELDS}, "ingested_at": meta.get("ingested_at")}
    # The name it was uploaded under when ingestion recorded it, else the stored file's name.
    kept["file_name"] = meta.get("file_name") or (PurePosixPath(kept["file_path"]).name if kept["file_path"] else None)
    return kept


def _duplicate(sha1: str, d: dict) -> dict:
    path = d.get("file_path")
    return {
        "hash_sha1": sha1,
        "distance": d.get("distance"),
        "verifier_score": d.get("verifier_score"),
        # why it was merged: exact bytes, the pHash (and verifier), or a person (manual)
        "reason": d.get("reason")
        or ("exact" if d.get("distance") == 0 and d.get("verifier_score") is None else "near-duplicate"),
        "by": d.get("by"),
        "phash": d.get("phash"),
        "file_path": path,
        # The name it was uploaded under when ingestion recorded it, else the stored file's name.
        "file_name": d.get("name") or (PurePosixPath(path).name if path else None),
        "at": _iso(d.get("at")),
    }


def _merged_key(blobs: BlobStore, sha1: str, path: str | None) -> str | None:
    """A merged image's blob key: its file_path with the local store, else found by its sha1."""
    if path:
        return path
    for ext in image_io.MEDIA_TYPES:
        key = f"images/{sha1[:2]}/{sha1}.{ext}"
        if blobs.exists(key):
            return key
    return None


def dedup_groups(
    r, data_dir: Path, *, limit: int = 50, cursor: int = 0, thumbs: bool = False, blobs: BlobStore | None = None
) -> dict:
    """One page of groups: {groups: [{kept, duplicates}], total_groups, total_duplicates, next_cursor}."""
    members: dict[str, list[tuple[str, dict]]] = {}
    for sha1, d in phash_index.iter_merges(r):
        members.setdefault(d["dedup_of"], []).append((sha1, d))
    order = sorted(members, key=lambda lid: (-len(members[lid]), lid))
    page = order[cursor : cursor + limit]
    collection = vector_index.active_name(r)
    groups = []
    for label_id in page:
        kept = _kept_label(r, collection, label_id)
        dups = sorted((_duplicate(sha1, d) for sha1, d in members[label_id]), key=lambda x: x["distance"] or 0)
        if thumbs:
            if blobs is None:
                from yana.blobs import LocalBlobStore

                blobs = LocalBlobStore(data_dir)
            kept["thumbnail"] = thumbnail(blobs, image_key(r, label_id) or kept["file_path"])
            for d in dups:
                d["thumbnail"] = thumbnail(blobs, _merged_key(blobs, d["hash_sha1"], d["file_path"]))
        groups.append({"kept": kept, "duplicates": dups})
    nxt = cursor + limit if cursor + limit < len(order) else None
    return {
        "groups": groups,
        "total_groups": len(order),
        "total_duplicates": sum(len(v) for v in members.values()),
        "next_cursor": nxt,
    }
