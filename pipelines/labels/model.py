"""The label record, once: the fields an uploader sends (and OCR will read) and a label as search
and chat answer it. The HTTP schemas, the ingest validation, the CLI's metadata columns and the
chunk metadata (pipelines.labels.schema) all take their field names from here."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Category = Literal["sake", "juice"]
# The label's own words: searched, filtered and shown. Strings, "" when unknown.
TEXT_FIELDS = ("brand_name", "product_name", "brewery", "region")


class LabelFields(BaseModel):
    """What a label says, as an uploader may send it: every field optional."""

    # Published as an enum (tool schemas); any other value is refused with BAD_CATEGORY by ingest.
    category: str | None = Field(
        None, description="sake | juice (required for images)", json_schema_extra={"enum": ["sake", "juice"]}
    )
    brand_name: str | None = Field(None, max_length=200, description="銘柄")
    product_name: str | None = Field(None, max_length=200, description="商品名")
    brewery: str | None = Field(None, max_length=200, description="蔵元 / maker")
    region: str | None = Field(None, max_length=200, description="prefecture and/or city")
    label_features: list[str] | str | None = Field(None, description="list, or a 、/,-separated string")
    text: str | None = Field(None, max_length=20000, description="free text about the label")


FIELD_NAMES: tuple[str, ...] = tuple(LabelFields.model_fields)


class LabelCard(BaseModel):
    """A label as the talk app shows it (the chat hit's fields, exactly)."""

    id: str
    brand_name: str = ""
    product_name: str = ""
    brewery: str = ""
    region: str = ""
    label_features: list[str] = Field(default_factory=list)
    file_path: str = Field(
        "", description="stored image relative to DATA_DIR; empty for text and with an S3 blob store"
    )


class LabelHit(LabelCard):
    """A label (or text document) as search returns it: the card, its category and whatever else the
    index holds for it."""

    model_config = ConfigDict(extra="allow")
    category: str = ""


# Where a field's value came from, weakest first: a correction outranks everything, the uploader's
# value outranks what was read (OCR) or seen (a vision model).
FIELD_SOURCES: tuple[str, ...] = ("ocr", "llm", "uploader", "corrected")


class FieldValue(BaseModel):
    """One field of a label record with its provenance."""

    value: str
    source: Literal["uploader", "ocr", "llm", "corrected"]
    confidence: float = Field(1.0, ge=0.0, le=1.0)


def source_rank(source: str) -> int:
    return FIELD_SOURCES.index(source) if source in FIELD_SOURCES else -1


def merge_field_values(*layers: dict[str, dict]) -> dict[str, dict]:
    """{name: {value, source, confidence}} from several layers: per field, the value of the
    strongest source wins (a tie keeps the earlier layer's); empty values never win."""
    out: dict[str, dict] = {}
    for layer in layers:
        for name, fv in (layer or {}).items():
            if not fv or not str(fv.get("value") or "").strip():
                continue
            have = out.get(name)
            if have is None or source_rank(fv.get("source", "")) > source_rank(have.get("source", "")):
                out[name] = {
                    "value": str(fv["value"]),
                    "source": fv.get("source", ""),
                    "confidence": float(fv.get("confidence", 1.0)),
                }
    return out
