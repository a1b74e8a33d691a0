"""Search by photo: which label a photograph shows, decided as ingest would decide it, without
indexing anything.

1. The same bytes: that label (`match: "same_image"`).
2. The near-duplicate decision of ingest (pHash candidates, the aligned verifier, and what the
   label says when it was read): that label (`match: "same_label"`, with distance and score).
3. What is read off the photo (the OCR reading, cached by the image's sha1 like ingest's) is the
   query of a text search: the nearest labels. The first of them counts as the label shown only when
   the text says so: its brand is the read brand, and no read field that both readings give (brand,
   grade, 精米歩合, アルコール分, 内容量) differs, and at least one of them besides the brand agrees
   (`match: "same_text"`). Otherwise the hits are the nearest others and `not_found` says the photo's
   label is not in the book.
"""

from __future__ import annotations

from typing import Any

from pipelines.ingest import deferred, image_io, readings, sources
from pipelines.ingest.pictures import stored_pictures
from pipelines.labels import schema as labels
from pipelines.neardup import decision as neardup
from pipelines.neardup import hashing, printed
from pipelines.neardup.index import SIG_KEY, shared_index
from pipelines.search import collections as vector_index
from pipelines.search import lexical
from pipelines.search import service as search_service
from pipelines.search.index import hit_fields
from yana.blobs import BlobStore
from yana.settings import Settings

QUERY_MAX_CHARS = 400  # of the read text, as a search query (the fields go first)


def load(source: dict, *, s: Settings, blobs: BlobStore) -> bytes:
    """The photo's bytes: {"kind": "bytes", "data": ...} or {"kind": "url", "url": ...} (fetched
    with the ingest's SSRF protection, allowlist and limits)."""
    if source.get("kind") == "bytes":
        return source["data"]
    return sources.read_source(
        source,
        blobs=blobs,
        import_dir=None,
        allow=s.fetch_allow,
        timeout_s=s.fetch_timeout_s,
        max_bytes=min(s.max_image_bytes, s.fetch_max_bytes),
    )


def _query_text(reading: dict | None) -> str:
    if not reading:
        return ""
    fields = reading.get("fields") or {}
    parts = [str((fields.get(k) or {}).get("value") or "") for k in ("brand_name", "product_name", "brewery")]
    text = " ".join(p for p in parts if p)
    return (text + " " + (reading.get("text") or "").replace("\n", " ")).strip()[:QUERY_MAX_CHARS]


def _said(reading: dict | None) -> dict[str, str]:
    sure = readings.identity_fields(reading)
    return {k: v for k, v in sure.items() if k in neardup.READ_KEYS}


def _text_match(r, said: dict[str, str], hit: dict) -> bool:
    """The text says the hit is the label shown (see the module's step 3)."""
    brand = neardup.normalise(said.get("brand_name"))
    if not brand or neardup.normalise(hit.get("brand_name")) != brand:
        return False
    _sig, theirs = neardup.parse_entry(r.hget(SIG_KEY, str(hit["id"]).removeprefix("label_")))
    stored = theirs.get("read") or {}
    if neardup.read_conflict(said, stored, sure=True):
        return False
    return any(
        k != "brand_name" and stored.get(k) and neardup.read_value(stored.get(k)) == neardup.read_value(v)
        for k, v in said.items()
    )


def identify(
    data: bytes,
    *,
    r,
    s: Settings,
    k: int = 5,
    filters: dict | None = None,
    chroma=None,
    blobs: BlobStore | None = None,
) -> dict[str, Any]:
    """{hits, match, read_text, not_found, debug}: the label the photo shows first (when it is in
    the book), then the nearest others by what the photo says. `blobs`: where the labels'
    originals are (the aligned picture check's pictures; None: no picture check)."""
    dec = image_io.decode_image(data, max_bytes=s.max_image_bytes, max_pixels=s.max_image_pixels)
    sha1 = hashing.sha1_hex(data)
    ph = hashing.phash_hex(dec.image)
    reading = None
    if s.ocr_mode != "off":
        reading, _warning = readings.read_label(r, sha1, dec.image, s)
    said = _said(reading)
    _entry, _digest, verify = neardup.verifier_for(
        dec.image,
        {},
        s.phash_threshold,
        read=said,
        said=readings.said_fields(reading),
        pictures=stored_pictures(r, blobs) if s.neardup_picture_check and blobs is not None else None,
        lines=printed.field_lines(reading),
        greys=stored_pictures(r, blobs).greys
        if s.neardup_picture_check and s.neardup_printed_check and blobs is not None
        else None,
        # a candidate whose read was deferred is read now (pipelines.ingest.deferred), as ingest does
        readings=deferred.stored_readings(r, blobs, s) if s.ocr_mode != "off" and blobs is not None else None,
        read_field=readings.field_reader(s),
    )
    index = shared_index(r, s.phash_threshold, s.phash_candidate_radius)
    found = index.identify(ph, sha1, verify, text_digests=verify.text_digests)
    query = _query_text(reading)
    res = search_service.search(query or None, filters, k=k, r=r, chroma=chroma) if query else {"hits": [], "debug": {}}
    hits = [dict(h) for h in res["hits"]]
    match: dict[str, Any] | None = None
    if found is not None:
        kind = "same_image" if found.score is None and found.distance == 0 else "same_label"
        match = {"id": found.label_id, "kind": kind, "distance": found.distance, "score": found.score}
    elif hits and _text_match(r, said, hits[0]):
        match = {"id": hits[0]["id"], "kind": "same_text", "distance": None, "score": None}
    if match is not None:
        first = next((h for h in hits if h["id"] == match["id"]), None)
        if first is None:
            first = _hit_of(r, match["id"])
        hits = [first, *[h for h in hits if h["id"] != match["id"]]][:k] if first else hits
    return {
        "hits": hits,
        "match": match,
        "read_text": (reading or {}).get("text") if reading is not None else None,
        "not_found": [] if match else ["photo"],
        "debug": {"phash": ph, "hash_sha1": sha1, "query_text": query, **(res.get("debug") or {})},
    }


def _hit_of(r, label_id: str) -> dict | None:
    """A label as a search hit, looked up by id (the identity match the text search did not rank)."""
    collection = vector_index.active_name(r)
    meta = lexical.chunk_meta(r, collection, labels.chunk_id(label_id, 0)) if collection else None
    if meta is None:
        return None
    return {**hit_fields(labels.chunk_id(label_id, 0), meta), "score": 1.0, "image_url": labels.image_url(label_id)}
