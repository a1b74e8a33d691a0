"""A person's review of near-duplicate merges: split a wrong merge, merge two labels that are one.

What ingestion records for a merge (pipelines.ingest.DUPS_KEY, sha1 -> JSON): the kept label
(`dedup_of`), distance, verifier score, pHash, the upload's name, its fields as sent and the blob
key of its bytes (images are content-addressed and never deleted). So:

- split(sha1): the merged upload becomes its own label (id from its sha1, as if it had been indexed
  when it arrived): its bytes are indexed in the pHash index (the second stage is told it is no
  one's duplicate), its fields are embedded and written to every write target, its image is served.
  Its exact bytes are then in the sha1 map, so uploading them again answers that new label, never
  the one it was wrongly merged into. The pair is also recorded as apart (APART_KEY).
- merge(keep, duplicate): the duplicate's chunks leave every collection (and so search), its
  pHash record is tombstoned, and it is recorded in DUPS_KEY as a duplicate of `keep` with its
  fields and image key, so a later split restores it. Uploads that had been merged into the
  duplicate are re-pointed to `keep`.

Every decision is appended to DECISIONS_KEY (who: the caller identity or 'anonymous'; when).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from pipelines import dedup_report, imaging, ingest, labels, lexical, neardup, vector_index
from pipelines.phash_index import shared_index
from yana.blobs import BlobStore
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings

DECISIONS_KEY = "yana:review:decisions"  # list of decision JSON, newest first
APART_KEY = "yana:review:apart"  # set of "label_a|label_b" (sorted) a person said are different
DECISIONS_MAX = 10000


def _never_same(candidates: list[tuple[str, int, str | None]]) -> Any:
    """A verifier that judges every candidate different: the image is indexed as its own label."""
    del candidates
    return None


def _record(r, decision: dict) -> dict:
    decision = {**decision, "at": time.time()}
    with r.pipeline(transaction=True) as p:
        p.lpush(DECISIONS_KEY, orjson.dumps(decision).decode())
        p.ltrim(DECISIONS_KEY, 0, DECISIONS_MAX - 1)
        p.execute()
    return decision


def _apart(a: str, b: str) -> str:
    return "|".join(sorted((a, b)))


def decisions(r, limit: int = 100) -> list[dict]:
    return [orjson.loads(x) for x in r.lrange(DECISIONS_KEY, 0, max(0, limit - 1))]


def label_meta(r, label_id: str) -> dict | None:
    """The metadata of a label's first chunk in the active collection (None: not in search)."""
    collection = vector_index.active_name(r)
    if not collection:
        return None
    raw = r.hget(lexical.prefix(collection) + "doc:" + labels.chunk_id(label_id, 0), "meta")
    return orjson.loads(raw) if raw else None


def split(r, chroma, blobs: BlobStore, s: Settings, sha1: str, *, who: str) -> dict:
    """Make the upload with these bytes, merged into another label, its own label again."""
    raw = r.hget(ingest.DUPS_KEY, sha1)
    if not raw:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"no merged upload with sha1 {sha1}")
    dup = orjson.loads(raw)
    kept = dup.get("dedup_of")
    key = dup.get("image_key") or dedup_report._merged_key(blobs, sha1, dup.get("file_path"))
    if not key or not blobs.exists(key):
        raise YanaError.of(ErrorCode.NOT_FOUND, f"the image of the merged upload {sha1} is not stored")
    data = b"".join(blobs.stream(key))
    dec = imaging.decode_image(data, max_bytes=max(s.max_image_bytes, len(data)), max_pixels=s.max_image_pixels)
    fields = dup.get("fields")
    if not fields:  # merged before uploads' fields were recorded: the kept label's category only
        fields = {"category": (label_meta(r, kept) or {}).get("category") if kept else None}
    fields = {k: fields.get(k) for k in ingest.LABEL_FIELDS}
    if fields.get("category") not in labels.CATEGORIES:
        raise YanaError.of(ErrorCode.BAD_CATEGORY, f"the merged upload {sha1} has no category to index it with")
    ph = dup.get("phash") or imaging.phash_hex(dec.image)
    entry, digest, _verify = neardup.verifier_for(dec.image, fields, s.phash_threshold)
    index = shared_index(r, s.phash_threshold, s.phash_candidate_radius)
    file_path = key if blobs.local_path(key) is not None else ""
    res = index.check_and_insert(
        ph, sha1, owner=f"split:{sha1[:16]}", file_path=key, entry=entry, verify=_never_same, fields_digest=digest
    )
    label_id = res.label_id
    if res.status == "dedup":  # its exact bytes were indexed meanwhile (e.g. uploaded again, split before)
        raise YanaError.of(ErrorCode.CONFLICT, f"these bytes are already indexed as {label_id}")
    iso, ts = labels.now_stamp()
    record = {
        "id": label_id,
        "doc_id": label_id,
        "source": "label",
        **{k: fields.get(k) for k in ingest.LABEL_FIELDS if k != "text"},
        "file_path": file_path,
        "hash_sha1": sha1,
        "phash": ph,
        "ingested_at": iso,
        "ingested_at_ts": ts,
    }
    try:
        ingest.write_chunks(r, chroma, ingest.label_chunks(record, fields, s.max_chunk_chars))
    except Exception:
        index.remove(sha1)  # nothing reached search: the upload stays merged, as it was
        raise
    with r.pipeline(transaction=True) as p:
        p.hset(labels.LABEL_IMAGES_KEY, label_id, key)
        if kept:
            p.sadd(APART_KEY, _apart(kept, label_id))
        p.hdel(ingest.DUPS_KEY, sha1)
        p.execute()
    return _record(
        r, {"action": "split", "label_id": label_id, "from": kept, "hash_sha1": sha1, "who": who, "merge": dup}
    )


def _chunks_of(chroma, r, label_id: str) -> dict[str, list[str]]:
    out = {}
    for name in ingest.write_targets(r):
        col = vector_index.open_collection(chroma, name)
        out[name] = col.get(where={"doc_id": label_id}, include=[])["ids"]
    return out


def merge(r, chroma, blobs: BlobStore, s: Settings, keep: str, duplicate: str, *, who: str) -> dict:
    """Record `duplicate` as a duplicate of `keep` and take it out of search (nothing deleted)."""
    if keep == duplicate:
        raise YanaError.of(ErrorCode.BAD_REQUEST, "keep and duplicate are the same label")
    meta_keep, meta_dup = label_meta(r, keep), label_meta(r, duplicate)
    for lid, meta in ((keep, meta_keep), (duplicate, meta_dup)):
        if meta is None or meta.get("source") != "label":
            raise YanaError.of(ErrorCode.NOT_FOUND, f"no label {lid} in search")
    assert meta_dup is not None and meta_keep is not None
    sha1 = meta_dup.get("hash_sha1") or ""
    key = r.hget(labels.LABEL_IMAGES_KEY, duplicate) or meta_dup.get("file_path") or ""
    fields: dict[str, Any] = {k: meta_dup.get(k) for k in ingest.LABEL_FIELDS}
    fields["label_features"] = labels.normalise_features(meta_dup.get("label_features"))
    dist = (
        imaging.hamming(meta_keep["phash"], meta_dup["phash"])
        if meta_keep.get("phash") and meta_dup.get("phash")
        else None
    )
    record = {
        "dedup_of": keep,
        "distance": dist,
        "verifier_score": None,
        "phash": meta_dup.get("phash"),
        "file_path": meta_dup.get("file_path") or None,
        "name": None,
        "fields": fields,
        "image_key": key,
        "reason": "manual",
        "by": who,
        "at": time.time(),
    }
    for name, ids in _chunks_of(chroma, r, duplicate).items():
        vector_index.delete_chunks(vector_index.open_collection(chroma, name), ids, r=r)
    if sha1:
        shared_index(r, s.phash_threshold, s.phash_candidate_radius).remove(sha1)
    repointed = []
    for other, raw in r.hscan_iter(ingest.DUPS_KEY, count=1000):
        d = orjson.loads(raw)
        if d.get("dedup_of") == duplicate:
            d["dedup_of"] = keep
            r.hset(ingest.DUPS_KEY, other, orjson.dumps(d).decode())
            repointed.append(other)
    with r.pipeline(transaction=True) as p:
        if sha1:
            p.hset(ingest.DUPS_KEY, sha1, orjson.dumps(record).decode())
        p.srem(APART_KEY, _apart(keep, duplicate))
        p.execute()
    return _record(
        r,
        {
            "action": "merge",
            "label_id": keep,
            "duplicate": duplicate,
            "hash_sha1": sha1,
            "distance": dist,
            "repointed": repointed,
            "who": who,
        },
    )
