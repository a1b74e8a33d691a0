"""Corrections people made to labels, kept apart from the index so that every write of a label
applies them: the correction's own re-index, and an ingest of the same image that runs again (a
retried batch, a redelivered job). So a correction outranks what is read off the label (OCR, a
vision model), however often it is read.
"""

from __future__ import annotations

import orjson

from pipelines.ingest.keys import CORRECTIONS_KEY
from pipelines.labels import schema as labels
from pipelines.labels.model import TEXT_FIELDS, merge_field_values


def corrections(r, label_id: str) -> dict[str, dict]:
    raw = r.hget(CORRECTIONS_KEY, label_id)
    return orjson.loads(raw) if raw else {}


def apply_corrections(record: dict, values: dict[str, dict], fixed: dict[str, dict]) -> dict[str, dict]:
    """Put corrections into a label record (in place) and its field values; returns the values.

    A corrected value of "" clears the field: the label says nothing there."""
    if not fixed:
        return values
    out = merge_field_values(values, {k: v for k, v in fixed.items() if k != "label_features"})
    for name, fv in fixed.items():
        if name == "label_features":
            record["label_features"] = labels.normalise_features(fv.get("value"))
            continue
        value = str(fv.get("value") or "")
        if not value.strip():
            out.pop(name, None)
        if name in TEXT_FIELDS:
            record[name] = value
    return out
