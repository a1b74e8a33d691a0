"""A person's review of near-duplicate merges: split a wrong merge, merge two labels that are one.

What ingestion records for a merge (pipelines.neardup.index.record_merges, sha1 -> JSON): the kept label
(`dedup_of`), distance, verifier score, pHash, the upload's name, its fields as sent and the blob
key of its bytes (images are content-addressed and never deleted). So:

- split(sha1): the merged upload becomes its own label (id from its sha1, as if it had been indexed
  when it arrived): its bytes are indexed in the pHash index (the second stage is told it is no
  one's duplicate), its fields (and, with OCR on, the cached reading of its bytes, as ingestion
  would have used it) are embedded and written to every write target, its image is served.
  Its exact bytes are then in the sha1 map, so uploading them again answers that new label, never
  the one it was wrongly merged into. The pair is also recorded as apart (keys.APART_KEY).
- merge(keep, duplicate): the duplicate's chunks leave every collection (and so search), its
  pHash record is tombstoned, and it is recorded as a merge into `keep` with its
  fields and image key, so a later split restores it. Uploads that had been merged into the
  duplicate are re-pointed to `keep`.

Every decision is appended to keys.DECISIONS_KEY (who: the caller identity or 'anonymous'; when).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from pipelines.ingest import dedup_report, image_io, readings
from pipelines.ingest import pipeline as ingest
from pipelines.labels import schema as labels
from pipelines.neardup import decision as neardup
from pipelines.neardup import hashing
from pipelines.neardup import index as phash_index
from pipelines.neardup.index import shared_index
from pipelines.review.keys import APART_KEY, DECISIONS_KEY, DECISIONS_MAX
from pipelines.search import collections as vector_index
from pipelines.search import lexical
from yana.blobs import BlobStore
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings


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
    return lexical.chunk_meta(r, collection, labels.chunk_id(label_id, 0))


def split(r, chroma, blobs: BlobStore, s: Settings, sha1: str, *, who: str) -> dict:
    """Make the upload with these bytes, merged into another label, its own label again."""
    dup = phash_index.merge_of(r, sha1)
    if dup is None:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"no merged upload with sha1 {sha1}")
    kept = dup.get("dedup_of")
    key = dup.get("image_key") or dedup_report._merged_key(blobs, sha1, dup.get("file_path"))
    if not key or not blobs.exists(key):
        raise YanaError.of(ErrorCode.NOT_FOUND, f"the image of the merged upload {sha1} is not stored")
    data = b"".join(blobs.stream(key))
    dec = image_io.decode_image(data, max_bytes=max(s.max_image_bytes, len(data)), max_pixels=s.max_image_pixels)
    fields = dup.get("fields")
    if not fields:  # merged before uploads' fields were recorded: the kept label's category only
        fields = {"category": (label_meta(r, kept) or {}).get("category") if kept else None}
    fields = {k: fields.get(k) for k in ingest.LABEL_FIELDS}
    if fields.get("category") not in labels.CATEGORIES:
        raise YanaError.of(ErrorCode.BAD_CATEGORY, f"the merged upload {sha1} has no category to index it with")
    ph = dup.get("phash") or hashing.phash_hex(dec.image)
    # What ingestion read off these bytes (cached by sha1), as it would have used it had the upload
    # been indexed when it arrived; no fresh read here (a request, not a worker).
    reading = readings.cached(r, sha1) if s.ocr_mode != "off" else None
    read, said = readings.identity_fields(reading, fields), readings.said_fields(reading, fields)
    entry, digest, _verify = neardup.verifier_for(
        dec.image, fields, s.phash_threshold, read=read, said=said, blob_key=key
    )
    index = shared_index(r, s.phash_threshold, s.phash_candidate_radius)
    file_path = key if blobs.local_path(key) is not None else ""
    res = index.check_and_insert(
        ph, sha1, owner=f"split:{sha1[:16]}", file_path=key, entry=entry, verify=_never_same, fields_digest=digest
    )
    label_id = res.label_id
    if res.status == "dedup":  # its exact bytes were indexed meanwhile (e.g. uploaded again, split before)
        raise YanaError.of(ErrorCode.CONFLICT, f"these bytes are already indexed as {label_id}")
    record, text_fields = ingest.label_record(label_id, fields, reading, sha1=sha1, phash=ph, file_path=file_path)
    try:
        ingest.write_chunks(r, chroma, ingest.label_chunks(record, text_fields, s.max_chunk_chars))
    except Exception:
        index.remove(sha1)  # nothing reached search: the upload stays merged, as it was
        raise
    with r.pipeline(transaction=True) as p:
        p.hset(labels.LABEL_IMAGES_KEY, label_id, key)
        if kept:
            p.sadd(APART_KEY, _apart(kept, label_id))
        phash_index.forget_merge(p, sha1)
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
        hashing.hamming(meta_keep["phash"], meta_dup["phash"])
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
    for other, d in phash_index.iter_merges(r):
        if d.get("dedup_of") == duplicate:
            phash_index.record_merges(r, {other: {**d, "dedup_of": keep}})
            repointed.append(other)
    with r.pipeline(transaction=True) as p:
        if sha1:
            phash_index.record_merges(p, {sha1: record})
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
