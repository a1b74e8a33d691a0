"""Label records: the text a label is searched by, and the metadata every chunk carries.

Chunk metadata schema (Chroma values must be scalars; search and chat read these keys):

  id              label id ("label_<sha1[:16]>") or the text document's own id
  doc_id          same as id (the unit a chunk belongs to)
  chunk_index     0-based position of the chunk in its document
  source          "label" | "text"
  category        "sake" | "juice" | "" (text documents may have any)
  brand_name, product_name, brewery, region     strings, "" when unknown
  label_features  the feature list joined with "、" (FEATURE_SEP); from_metadata() splits it back
  file_path       image path relative to DATA_DIR ("images/ab/abcd....jpg"), "" for text
  hash_sha1       sha1 of the image bytes (hex), "" for text
  phash           64-bit perceptual hash as 16 hex chars, "" for text
  ingested_at     ISO-8601 UTC
  ingested_at_ts  the same instant as float epoch seconds (sort by recency)

Anything else a client sends as text-document metadata is kept if it is a scalar.
"""

from __future__ import annotations

import hashlib
import re
import time
from datetime import UTC, datetime
from typing import Any

from pipelines.labels.model import TEXT_FIELDS

CATEGORIES = ("sake", "juice")
CATEGORY_JA = {"sake": "日本酒", "juice": "ジュース"}
FEATURE_SEP = "、"
STRING_FIELDS = ("category", *TEXT_FIELDS)
SCHEMA_KEYS = (
    "id",
    "doc_id",
    "chunk_index",
    "source",
    *STRING_FIELDS,
    "label_features",
    "file_path",
    "hash_sha1",
    "phash",
    "ingested_at",
    "ingested_at_ts",
)


LABEL_ID = re.compile(r"^label_[0-9a-f]{16}$")  # what label_id() makes


def label_id(sha1_hex: str) -> str:
    """Content-derived label id: the same bytes always give the same id."""
    return f"label_{sha1_hex[:16]}"


LABEL_IMAGES_KEY = "yana:label:images"  # hash label id -> blob key of its stored image


def image_url(label_id: str) -> str:
    """Where the API serves a label's stored image (any API host: it reads the blob store)."""
    return f"/v1/labels/{label_id}/image"


def text_doc_key(doc_id: str) -> str:
    """Chroma-safe, stable prefix for a text document's chunk ids."""
    return "doc_" + hashlib.sha1(doc_id.encode("utf-8"), usedforsecurity=False).hexdigest()[:16]


def chunk_id(doc_key: str, index: int) -> str:
    return f"{doc_key}#{index}"


def normalise_features(value: Any) -> list[str]:
    """A list, a "、"/","-separated string or None → a clean list of feature strings."""
    if value is None:
        return []
    if isinstance(value, str):
        raw = value.replace(",", FEATURE_SEP).replace("，", FEATURE_SEP).split(FEATURE_SEP)
    else:
        raw = [str(v) for v in value]
    out = []
    for v in raw:
        v = v.strip().replace(FEATURE_SEP, " ")
        if v and v not in out:
            out.append(v)
    return out


def now_stamp() -> tuple[str, float]:
    ts = time.time()
    iso = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return iso, ts


# Fields read off a label (pipelines.read.fields), in the order the label text lists them.
OCR_FIELD_NAMES = (
    ("brand_name", "銘柄"),
    ("product_name", "商品名"),
    ("brewery", "蔵元"),
    ("region", "地域"),
    ("grade", "特定名称"),
    ("rice", "原料米"),
    ("seimai", "精米歩合"),
    ("alcohol", "アルコール分"),
    ("volume", "内容量"),
)


def label_text(record: dict) -> str:
    """The text a label is embedded and searched by: the uploader's fields first, then the fields
    read off the label that the uploader did not give, then the read text."""
    cat = record.get("category") or ""
    features = normalise_features(record.get("label_features"))
    maker = "メーカー" if cat == "juice" else "蔵元"
    lines = []
    if cat:
        lines.append(f"カテゴリ: {CATEGORY_JA.get(cat, cat)}")
    for key, name in (("brand_name", "銘柄"), ("product_name", "商品名"), ("brewery", maker), ("region", "地域")):
        v = (record.get(key) or "").strip()
        if v:
            lines.append(f"{name}: {v}")
    if features:
        lines.append(f"特徴: {FEATURE_SEP.join(features)}")
    free = (record.get("text") or "").strip()
    if free:
        lines.append(free)
    # Then what was read off the label and not given by the uploader: the fields extracted from the
    # read text (ocr_fields: {name: value}), then the read text itself.
    read_fields = record.get("ocr_fields") or {}
    for key, name in OCR_FIELD_NAMES:
        v = str(read_fields.get(key) or "").strip()
        if v and not (record.get(key) or "").strip():
            lines.append(f"{name}: {v}")
    read = (record.get("ocr_text") or "").strip()
    if read:
        lines.append(f"ラベル文字: {read}")
    return "\n".join(lines)


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) and not (isinstance(v, float) and v != v)


def to_metadata(record: dict) -> dict:
    """A label/text record → Chroma-safe metadata (scalars only, schema keys always present)."""
    md: dict[str, Any] = {}
    for k, v in record.items():
        if k in ("label_features", "text", "ocr_fields", "fields", "read"):
            continue
        if _scalar(v):
            md[k] = v
    for k in STRING_FIELDS + ("file_path", "hash_sha1", "phash", "source", "ingested_at"):
        md[k] = str(record.get(k) or "")
    md["label_features"] = FEATURE_SEP.join(normalise_features(record.get("label_features")))
    md["id"] = str(record.get("id") or "")
    md["doc_id"] = str(record.get("doc_id") or md["id"])
    md["chunk_index"] = int(record.get("chunk_index") or 0)
    md["ingested_at_ts"] = float(record.get("ingested_at_ts") or 0.0)
    return md


def from_metadata(meta: dict | None) -> dict:
    """Chroma metadata → a record with label_features as list[str] (inverse of to_metadata)."""
    out = dict(meta or {})
    out["label_features"] = normalise_features(out.get("label_features") or "")
    return out
