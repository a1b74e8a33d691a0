"""A label's record as people look at it and fix it (GET and PATCH /v1/labels/{id}).

The record is what the index holds for the label (the chunk metadata: fields, sources, the read
text) plus the reading's lines with their boxes (pipelines.ingest.readings, by the image's sha1).

A correction is kept (pipelines.ingest.corrections) before the index is touched, then the label's
chunks are written again at once: text, embedding and lexical postings, in every collection ingest
writes to.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

from pipelines.ingest import deferred, readings
from pipelines.ingest.corrections import apply_corrections, corrections
from pipelines.ingest.keys import CORRECTIONS_KEY, LABEL_LOCK_KEY
from pipelines.ingest.pipeline import label_chunks, write_chunks, write_targets
from pipelines.labels import schema as labels
from pipelines.labels.model import TEXT_FIELDS, merge_field_values
from pipelines.search import collections as vector_index
from yana.errors import ErrorCode, YanaError
from yana.settings import get_settings

LOCK_TTL_S = 60

READ_FIELDS = tuple(k for k, _ja in labels.OCR_FIELD_NAMES if k not in TEXT_FIELDS)  # grade, rice, ...
# What a person may correct: the label's own words, what was read off it, and its feature list.
CORRECTABLE = (*TEXT_FIELDS, *READ_FIELDS, "label_features")
VALUE_MAX_CHARS = 200
FEATURES_MAX = 32

# The lines label_text writes for the fields (and the read text): what is left is the uploader's
# free text, which the metadata does not keep.
_FIELD_LINE = re.compile(
    r"^(カテゴリ|特徴|ラベル文字|" + "|".join(ja for _k, ja in labels.OCR_FIELD_NAMES) + r"|メーカー)\s*:\s"
)


def check_changes(changes: Any) -> dict[str, Any]:
    """The PATCH body's fields, validated: {name: str} or label_features as a list or string."""
    if not isinstance(changes, dict) or not changes:
        raise YanaError.of(ErrorCode.BAD_REQUEST, "fields: give at least one field to correct")
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in CORRECTABLE:
            raise YanaError.of(ErrorCode.BAD_REQUEST, f"fields.{name}: not a correctable field {list(CORRECTABLE)}")
        if name == "label_features":
            feats = labels.normalise_features(value)
            if len(feats) > FEATURES_MAX or any(len(f) > VALUE_MAX_CHARS for f in feats):
                raise YanaError.of(ErrorCode.BAD_REQUEST, "fields.label_features: too many or too long")
            out[name] = feats
            continue
        if not isinstance(value, str) or len(value) > VALUE_MAX_CHARS:
            raise YanaError.of(ErrorCode.BAD_REQUEST, f"fields.{name}: a string of at most {VALUE_MAX_CHARS} chars")
        out[name] = value.strip()
    return out


def _chunks(chroma, r, label_id: str) -> tuple[list[str], list[str], list[dict]]:
    """(ids, documents, metadatas) of the label's chunks in the active collection, in order."""
    if not labels.LABEL_ID.match(label_id) or not vector_index.active_name(r):
        return [], [], []
    col, _model = vector_index.active_collection(chroma, r)
    got = col.get(where={"doc_id": label_id}, include=["documents", "metadatas"])
    rows = sorted(
        zip(got["ids"], got["documents"] or [], got["metadatas"] or [], strict=True),
        key=lambda t: int((t[2] or {}).get("chunk_index") or 0),
    )
    return [t[0] for t in rows], [t[1] or "" for t in rows], [dict(t[2] or {}) for t in rows]


def _values_of(meta: dict) -> dict[str, dict]:
    """The field values with their sources; labels indexed before sources were kept: the uploader's."""
    raw = meta.get("field_sources")
    if raw:
        try:
            return dict(orjson.loads(raw))
        except orjson.JSONDecodeError:
            pass
    return {
        k: {"value": str(meta[k]), "source": "uploader", "confidence": 1.0}
        for k in labels.STRING_FIELDS
        if k != "category" and meta.get(k)
    }


def _free_text(documents: list[str], ocr_text: str) -> str:
    """The uploader's free text, taken back out of the label's text (the lines that are not fields)."""
    doc = "\n".join(documents)
    read = ocr_text.strip()
    if read:
        at = doc.rfind("ラベル文字: ")
        if at >= 0:
            doc = doc[:at]
    return "\n".join(line for line in doc.splitlines() if line.strip() and not _FIELD_LINE.match(line)).strip()


def get_record(r, chroma, label_id: str) -> dict | None:
    """The label as a person reviews it, or None when no such label is indexed."""
    _ids, docs, metas = _chunks(chroma, r, label_id)
    if not metas:
        return None
    return _view(r, label_id, metas[0], corrections(r, label_id))


def _view(r, label_id: str, meta: dict, fixed: dict[str, dict]) -> dict:
    rec = labels.from_metadata(meta)
    values = _values_of(meta)
    fields: dict[str, dict] = {
        k: {"value": v.get("value"), "source": v.get("source") or "", "confidence": v.get("confidence")}
        for k, v in values.items()
    }
    if rec["label_features"]:
        source = "corrected" if "label_features" in fixed else "uploader"
        fields["label_features"] = {"value": rec["label_features"], "source": source, "confidence": 1.0}
    sha1 = str(meta.get("hash_sha1") or "")
    reading = readings.cached(r, sha1) if sha1 else None
    ocr_text = str(meta.get("ocr_text") or "")
    read = None
    if ocr_text or reading:
        read = {
            "text": ocr_text or (reading or {}).get("text") or "",
            "engine": str(meta.get("ocr_engine") or (reading or {}).get("engine") or ""),
            "lines": [
                {k: line.get(k) for k in ("text", "box", "confidence", "vertical", "order")}
                for line in (reading or {}).get("lines") or []
            ],
        }
    return {
        "id": label_id,
        "category": rec.get("category") or "",
        "image_url": labels.image_url(label_id) if rec.get("source") == "label" else None,
        "hash_sha1": sha1,
        "phash": str(meta.get("phash") or ""),
        "ingested_at": str(meta.get("ingested_at") or ""),
        **{k: rec.get(k) or "" for k in TEXT_FIELDS},
        "label_features": rec["label_features"],
        "fields": fields,
        "read": read,
        "read_pending": deferred.is_pending(meta),
        "read_failed": deferred.has_failed(meta),
        "corrections": fixed,
    }


@contextmanager
def _label_lock(r, label_id: str, busy: str) -> Iterator[None]:
    """One writer of a label's record at a time (a correction, a deferred read): CONFLICT with
    `busy` when another holds it past half the lock's lifetime."""
    lock = r.lock(LABEL_LOCK_KEY.format(label_id=label_id), timeout=LOCK_TTL_S, blocking_timeout=LOCK_TTL_S / 2)
    if not lock.acquire():
        raise YanaError.of(ErrorCode.CONFLICT, f"{label_id} {busy}")
    try:
        yield
    finally:
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - expired meanwhile: the write is done either way
            pass


@dataclass
class _Stored:
    """A label as its chunks store it: their ids and texts, the first one's metadata, the record."""

    ids: list[str]
    docs: list[str]
    meta: dict
    record: dict

    @property
    def ocr_text(self) -> str:
        return str(self.meta.get("ocr_text") or "")


def _stored(r, chroma, label_id: str) -> _Stored | None:
    ids, docs, metas = _chunks(chroma, r, label_id)
    if not metas:
        return None
    record = {k: v for k, v in labels.from_metadata(metas[0]).items() if k != "chunk_index"}
    return _Stored(ids, docs, metas[0], record)


def correct(r, chroma, label_id: str, changes: dict[str, Any]) -> dict:
    """Correct a label's fields: kept first, then the label re-indexed at once (lexical and dense,
    every collection ingest writes to). Returns the corrected record."""
    wanted = check_changes(changes)
    with _label_lock(r, label_id, "is being corrected by another request; try again"):
        got = _stored(r, chroma, label_id)
        if got is None:
            raise YanaError.of(ErrorCode.NOT_FOUND, f"no label {label_id}")
        at = time.time()
        fixed = {
            **corrections(r, label_id),
            **{k: {"value": v, "source": "corrected", "confidence": 1.0, "at": at} for k, v in wanted.items()},
        }
        r.hset(CORRECTIONS_KEY, label_id, orjson.dumps(fixed).decode())
        record = got.record
        values = apply_corrections(record, _values_of(got.meta), fixed)
        record["field_sources"] = orjson.dumps(values).decode()
        record["corrected_at"] = at
        free = _free_text(got.docs, got.ocr_text)
        _rewrite(r, chroma, record, _text_fields(record, values, free, got.ocr_text), old_ids=got.ids)
        return _view(r, label_id, labels.to_metadata(record) | {"field_sources": record["field_sources"]}, fixed)


def apply_reading(r, chroma, label_id: str, reading: dict) -> bool:
    """A deferred read (pipelines.ingest.deferred) joins the label it was deferred for: the fields
    read and the read text go into its record and its text, as if read during its ingest (the
    uploader's fields and people's corrections still win), and the label is re-indexed at once.
    False when no such label is indexed (removed meanwhile). Idempotent."""
    from pipelines.ingest.pipeline import read_values

    with _label_lock(r, label_id, "is being corrected; its read is applied later"):
        got = _stored(r, chroma, label_id)
        if got is None:
            return False
        record = got.record
        deferred.mark(record, deferred.READ)
        values = merge_field_values(_values_of(got.meta), read_values(reading))
        record["ocr_text"] = reading.get("text") or ""
        record["ocr_engine"] = reading.get("engine") or ""
        for k in TEXT_FIELDS:
            if not record.get(k) and k in values:
                record[k] = values[k]["value"]
        if not record.get("label_features") and reading.get("label_features"):
            record["label_features"] = list(reading["label_features"])
        values = apply_corrections(record, values, corrections(r, label_id))
        record["field_sources"] = orjson.dumps(values).decode()
        free = _free_text(got.docs, got.ocr_text)
        _rewrite(r, chroma, record, _text_fields(record, values, free, record["ocr_text"]), old_ids=got.ids)
        return True


def give_up_reading(r, chroma, label_id: str) -> bool:
    """The deferred read of this label failed for good: its record says so (`read_failed`) instead
    of a read pending for ever; its fields and text stay as they are. False when no such label."""
    with _label_lock(r, label_id, "is being corrected; its read is marked later"):
        got = _stored(r, chroma, label_id)
        if got is None:
            return False
        if not deferred.is_pending(got.record):
            return True  # read meanwhile (a decision needed it), or marked already
        deferred.mark(got.record, deferred.FAILED)
        fields = _text_fields(got.record, _values_of(got.meta), _free_text(got.docs, got.ocr_text), got.ocr_text)
        _rewrite(r, chroma, got.record, fields, old_ids=got.ids)
        return True


def _text_fields(record: dict, values: dict[str, dict], free_text: str, ocr_text: str) -> dict:
    """What label_text writes a label's text from, rebuilt from its record and field values."""
    return {
        "category": record.get("category"),
        **{k: record.get(k) for k in TEXT_FIELDS},
        "label_features": record.get("label_features"),
        "text": free_text,
        "ocr_fields": {k: v["value"] for k, v in values.items() if k not in TEXT_FIELDS},
        "ocr_text": ocr_text,
    }


def _rewrite(r, chroma, record: dict, text_fields: dict, old_ids: list[str]) -> None:
    chunks = label_chunks(record, text_fields, get_settings().max_chunk_chars)
    write_chunks(r, chroma, chunks)
    stale = sorted(set(old_ids) - {c["id"] for c in chunks})
    if stale:
        for name in write_targets(r):
            vector_index.delete_chunks(vector_index.open_collection(chroma, name), stale, r=r)
