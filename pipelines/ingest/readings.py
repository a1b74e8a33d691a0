"""What a label image says, read once per image bytes: the OCR reading and the fields extracted
from it, cached in Redis under the image's sha1 (content-addressed), so a retried or re-run batch
does not read the same image twice. The only module that spells the cache's keys.

A failed or timed-out read is returned as a warning (never raised): the label is kept without it,
and a failure is not cached (a later ingest of the same bytes tries again)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from PIL import Image

from yana.settings import Settings

log = logging.getLogger("yana.ingest.read")

READING_KEY = "yana:read:{sha1}"  # string: the reading + extraction JSON (TTL READING_TTL_S)
READING_TTL_S = 30 * 86400


def cached(r, sha1: str) -> dict | None:
    raw = r.get(READING_KEY.format(sha1=sha1))
    return orjson.loads(raw) if raw else None


def store(r, sha1: str, reading: dict) -> None:
    r.set(READING_KEY.format(sha1=sha1), orjson.dumps(reading), ex=READING_TTL_S)


def read_label(r, sha1: str, image: Image.Image, s: Settings) -> tuple[dict | None, dict | None]:
    """(reading, warning): the cached reading of these bytes, else a fresh read (then cached).

    reading = {engine, text, lines: [{text, box, confidence, vertical, order}], fields:
    {name: {value, source, confidence, evidence}}, label_features: [...]}."""
    got = cached(r, sha1)
    if got is not None:
        return got, None
    from pipelines.read.fields import extract_fields
    from pipelines.read.ocr import OcrError, OcrTimeout, read_image

    try:
        reading = read_image(image, engine=s.ocr_engine, timeout_s=s.ocr_timeout_s)
    except OcrTimeout as exc:
        return None, {"code": "OCR_TIMEOUT", "message": str(exc)}
    except OcrError as exc:
        return None, {"code": "OCR_FAILED", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a reader bug must not lose the label
        log.exception("OCR read failed")
        return None, {"code": "OCR_FAILED", "message": f"{type(exc).__name__}: {exc}"}
    out: dict[str, Any] = reading.to_dict()
    try:
        out.update(extract_fields(reading).to_dict())
    except Exception as exc:  # noqa: BLE001
        log.exception("field extraction failed")
        out.update(fields={}, label_features=[])
        store(r, sha1, out)
        return out, {"code": "OCR_FIELDS_FAILED", "message": f"{type(exc).__name__}: {exc}"}
    store(r, sha1, out)
    return out, None
