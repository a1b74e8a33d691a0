"""A label: its record (GET /v1/labels/{id}), corrections (PATCH /v1/labels/{id}) and its stored
image (GET /v1/labels/{id}/image), from whatever blob store holds it.

The record shows each field with where its value came from (uploader, ocr, llm, corrected) and
what was read off the label, with the boxes of the read lines. A correction is kept and the label
re-indexed before the answer (pipelines.ingest.records): the next search finds it by the new words.

Any API host answers, whichever host stored the image (the blob store of BLOB_URL is shared).
Images are content-addressed, so the response is cacheable for good: a strong ETag (the sha1 of
the bytes), `Cache-Control: private, max-age=31536000, immutable` (private: the route needs the
same bearer token as every other), and `If-None-Match` answers 304.
"""

from __future__ import annotations

import asyncio
from pathlib import PurePosixPath
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from api.contract import ContractRoute
from api.contract.policy import contract
from api.schemas import ERRORS, Envelope
from pipelines.ingest import image_io, records
from pipelines.search.label_images import image_key
from yana.blobs import BlobInfo, BlobMissing
from yana.clients import get_blobs, get_chroma, get_redis
from yana.errors import ErrorCode, YanaError

router = APIRouter(prefix="/v1/labels", tags=["search"], route_class=ContractRoute)

CACHE_CONTROL = "private, max-age=31536000, immutable"
LabelId = Annotated[str, Path(max_length=64, description="a label id (label_ + 16 hex), as in search hits")]


class FieldValue(BaseModel):
    value: str | list[str] | None = None
    source: str = Field("", description="uploader | ocr | llm | corrected")
    confidence: float | None = None


class ReadLine(BaseModel):
    text: str | None = None
    box: list[list[float]] | None = Field(None, description="the line's corners in image pixels")
    confidence: float | None = None
    vertical: bool | None = None
    order: int | None = None


class Reading(BaseModel):
    text: str = Field("", description="what was read off the label, in reading order")
    engine: str = ""
    lines: list[ReadLine] = Field(default_factory=list, description="empty once the reading cache expired")


class LabelRecord(Envelope):
    id: str
    category: str = ""
    image_url: str | None = None
    hash_sha1: str = ""
    phash: str = ""
    ingested_at: str = ""
    brand_name: str = ""
    product_name: str = ""
    brewery: str = ""
    region: str = ""
    label_features: list[str] = Field(default_factory=list)
    fields: dict[str, FieldValue] = Field(description="each field's value and where it came from")
    read: Reading | None = Field(None, description="null when the label was not read (OCR_MODE=off, text)")
    read_pending: bool = Field(
        False, description="its read was deferred (OCR_MODE=auto, full uploader fields): a background pass reads it"
    )
    read_failed: bool = Field(
        False, description="its deferred read failed every try (OCR_DEFER_ATTEMPTS): it keeps the uploader's fields"
    )
    corrections: dict[str, dict] = Field(default_factory=dict, description="what people corrected, when")


class LabelCorrection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fields: dict[str, str | list[str]] = Field(
        min_length=1,
        max_length=len(records.CORRECTABLE),
        description=f'field -> corrected value ({", ".join(records.CORRECTABLE)}); "" clears a field; '
        "label_features as a list or a 、-separated string",
        json_schema_extra={"propertyNames": {"enum": list(records.CORRECTABLE)}},
    )


def _record(label_id: str) -> dict:
    rec = records.get_record(get_redis(), get_chroma(), label_id)
    if rec is None:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"no label {label_id}")
    return rec


@router.get(
    "/{label_id}",
    operation_id="get_label",
    summary="A label's record: fields with their sources, what was read off it, corrections",
    response_model=LabelRecord,
    responses=ERRORS(404, 503),
    openapi_extra=contract(timeout_s=10),
)
async def get_label(label_id: LabelId) -> dict:
    return await asyncio.to_thread(_record, label_id)


@router.patch(
    "/{label_id}",
    operation_id="correct_label",
    summary="Correct a label's fields: kept over later reads, re-indexed before the answer",
    response_model=LabelRecord,
    responses=ERRORS(404, 409, 503),
    openapi_extra=contract(timeout_s=60),
)
async def correct_label(label_id: LabelId, body: LabelCorrection) -> dict:
    return await asyncio.to_thread(records.correct, get_redis(), get_chroma(), label_id, body.fields)


def _find(label_id: str) -> tuple[str, BlobInfo]:
    key = image_key(get_redis(), label_id)
    info = get_blobs().stat(key) if key else None
    if key is None or info is None:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"no stored image for {label_id}")
    return key, info


def _open(key: str, label_id: str):
    try:
        return get_blobs().stream(key)
    except BlobMissing as exc:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"no stored image for {label_id}") from exc


@router.get(
    "/{label_id}/image",
    operation_id="label_image",
    summary="A label's stored image (any API host, whatever the blob store); cacheable, ETag = sha1",
    response_class=Response,
    responses={
        200: {
            "description": "the image bytes as uploaded",
            "content": {t: {"schema": {"type": "string", "format": "binary"}} for t in image_io.MEDIA_TYPES.values()},
        },
        304: {"description": "If-None-Match matched: the cached copy is current"},
        **ERRORS(404, 503),
    },
    openapi_extra=contract(timeout_s=30),
)
async def label_image(label_id: LabelId, request: Request) -> Response:
    key, info = await asyncio.to_thread(_find, label_id)
    etag = f'"{PurePosixPath(key).stem}"'
    headers = {"ETag": etag, "Cache-Control": CACHE_CONTROL}
    given = request.headers.get("if-none-match") or ""
    if etag in [t.strip().removeprefix("W/") for t in given.split(",")] or given.strip() == "*":
        return Response(status_code=304, headers=headers)
    chunks = await asyncio.to_thread(_open, key, label_id)
    return StreamingResponse(
        chunks, media_type=image_io.media_type(key), headers={**headers, "Content-Length": str(info.size)}
    )
