"""POST /v1/ingest: label images (multipart or JSON) and text documents → one ingest job.

Accepted forms
  multipart/form-data: one or many files (field `file` or `files`) plus the label fields
    (category, brand_name, product_name, brewery, region, label_features, text) that apply to
    every file; optional `items`: a JSON array of per-file field overrides in file order;
    optional `strict`, `callback_url`.
  application/json: label fields plus `image_base64`, or `image_url` (http(s)://, fetched by the
    worker with SSRF protection, or file:// inside IMPORT_DIR); or `items: [...]` of such objects;
    and/or `documents: [{id, text, metadata}]` (also a single `{id, text, metadata}` without image).

Answers 202 with the job (uploaded bytes are first staged in the blob store under incoming/<job>:
DATA_DIR, or the S3 bucket of BLOB_URL that every host shares; so a killed worker loses nothing). A single image whose exact bytes are already indexed answers at once:
200 `{id, dedup: true, hash_sha1, phash}`, or 409 with `strict`. A request with one item answers
its problem (wrong type, too large, path outside the import folder, private URL) as a 4xx; in a
request with many, such an item is recorded as a failed item of the job and the rest go on.

This module only translates HTTP: the checks, the fast path and staging are
pipelines.ingest.accept.accept_ingest.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import pathlib
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.datastructures import UploadFile

from api.contract import ContractRoute
from api.contract.policy import contract
from api.jobs_common import JobAccepted, accept_job
from api.schemas import ERRORS, Envelope, inline_schema
from pipelines.ingest import accept as ingest_accept
from pipelines.labels.model import LabelFields
from tasks import registry
from yana import context
from yana.clients import get_redis
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings, get_settings

router = APIRouter(prefix="/v1", tags=["ingest"], route_class=ContractRoute)

FIELD_NAMES = ingest_accept.LABEL_FIELDS


class IngestItem(LabelFields):
    image_base64: str | None = Field(None, description="the image bytes, base64")
    image_url: str | None = Field(None, max_length=4096, description="http(s):// URL, or file:// inside IMPORT_DIR")
    image_path: str | None = Field(
        None, max_length=4096, description="an absolute path on the server inside IMPORT_DIR (same as a file:// URL)"
    )
    name: str | None = Field(None, max_length=500, description="a client-side name echoed in the outcome")


class TextDocument(BaseModel):
    id: str = Field(..., min_length=1, max_length=500)
    text: str = Field(..., min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)


class IngestRequest(IngestItem):
    items: list[IngestItem] = Field(default_factory=list, description="many images in one job")
    documents: list[TextDocument] = Field(default_factory=list, description="text documents")
    id: str | None = Field(None, max_length=500, description="single text document: its id")
    metadata: dict[str, Any] | None = Field(None, description="single text document: its metadata")
    strict: bool = Field(False, description="an exact duplicate answers 409 instead of 200 dedup")
    callback_url: str | None = Field(None, max_length=2048, description="POSTed the job record when it ends")


class IngestDedup(Envelope):
    id: str
    dedup: bool = True
    hash_sha1: str
    phash: str
    file_path: str | None = Field(None, description="stored image relative to DATA_DIR; null with an S3 blob store")
    image_url: str | None = Field(None, description="the stored image, served by the API (GET, same auth)")
    run_id: str | None = None
    trace_id: str | None = None


# --- HTTP -> plain inputs ------------------------------------------------------------------------


def _image_from_json(obj: IngestItem, base: dict) -> ingest_accept.ImageInput:
    img = ingest_accept.ImageInput(ingest_accept.merge_fields(base, obj.model_dump(include=set(FIELD_NAMES))), obj.name)
    given = [k for k in ("image_base64", "image_url", "image_path") if getattr(obj, k)]
    if len(given) > 1:
        img.error = YanaError.of(ErrorCode.BAD_REQUEST, f"give one of image_base64, image_url, image_path, not {given}")
    elif obj.image_path:
        if not obj.image_path.startswith("/"):
            img.error = YanaError.of(ErrorCode.BAD_REQUEST, "image_path must be an absolute path")
        elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in obj.image_path):
            img.error = YanaError.of(ErrorCode.BAD_REQUEST, "image_path must not contain NUL or control characters")
        else:
            img.url = pathlib.PurePosixPath(obj.image_path).as_uri()  # judged as file:// (IMPORT_DIR)
    elif obj.image_base64:
        try:
            img.data = base64.b64decode(obj.image_base64, validate=True)
        except (binascii.Error, ValueError):
            img.error = YanaError.of(ErrorCode.BAD_REQUEST, "image_base64 is not valid base64")
    else:
        img.url = obj.image_url
    return img


def _parse_json(raw: bytes) -> ingest_accept.IngestInput:
    try:
        body = IngestRequest.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e.get("loc", ()))
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"{loc}: {e.get('msg')}" if loc else str(e.get("msg"))) from None
    base = body.model_dump(include=set(FIELD_NAMES))
    images = []
    if body.image_base64 or body.image_url or body.image_path:
        images.append(_image_from_json(body, base))
    images += [_image_from_json(obj, base) for obj in body.items]
    docs = [d.model_dump() for d in body.documents]
    if not images and body.id is not None:  # a single text document
        docs.append({"id": body.id, "text": body.text, "metadata": body.metadata or {}})
    return ingest_accept.IngestInput(images, docs, body.strict, body.callback_url)


def _form_fields(form) -> dict:
    base: dict[str, Any] = {}
    for k in FIELD_NAMES:
        vals = [v for v in form.getlist(k) if isinstance(v, str)]
        if k == "label_features" and len(vals) > 1:
            base[k] = vals
        elif vals:
            v = vals[0]
            if k == "label_features" and v.strip().startswith("["):
                try:
                    v = orjson.loads(v)
                except orjson.JSONDecodeError:
                    pass
            base[k] = v
    return base


def _form_overrides(form) -> list[dict]:
    raw = form.get("items")
    if not raw:
        return []
    try:
        overrides = orjson.loads(raw)
    except orjson.JSONDecodeError:
        overrides = None
    if not isinstance(overrides, list) or not all(isinstance(o, dict) for o in overrides):
        raise YanaError.of(ErrorCode.BAD_REQUEST, "items must be a JSON array of objects, one per file")
    return overrides


async def _parse_multipart(request: Request, s: Settings) -> ingest_accept.IngestInput:
    form = await request.form(max_files=s.max_images_per_request, max_fields=1000)
    try:
        files = [
            f for key in ("file", "files", "image", "images") for f in form.getlist(key) if isinstance(f, UploadFile)
        ]
        base = _form_fields(form)
        overrides = _form_overrides(form)
        images = []
        for i, f in enumerate(files):
            ov = overrides[i] if i < len(overrides) else {}
            name = ov.get("name") if isinstance(ov.get("name"), str) else None
            img = ingest_accept.ImageInput(ingest_accept.merge_fields(base, ov), name or f.filename)
            if f.size is not None and f.size > s.max_image_bytes:
                img.error = YanaError.of(
                    ErrorCode.IMAGE_TOO_LARGE, f"{f.filename}: {f.size} bytes; the limit is {s.max_image_bytes}"
                )
            else:
                img.data = await f.read()
            images.append(img)
        strict = str(form.get("strict") or "").lower() in ("1", "true", "yes", "on")
        callback_url = form.get("callback_url")
        return ingest_accept.IngestInput(images, [], strict, callback_url if isinstance(callback_url, str) else None)
    finally:
        await form.close()


def _accept(req: ingest_accept.IngestInput, s: Settings):
    def enqueue(job_id: str, params: dict, callback_url: str | None) -> dict:
        return accept_job("ingest", params, callback_url, job_id=job_id)

    r = get_redis()
    idem = context.idempotency_record()
    # A retry whose first try created the job (and was then answered 503: no replica confirmed
    # it) gets that job, as the Idempotency-Key promises, even once the job has indexed the image.
    retry_of_a_job = bool(idem) and bool(registry.job_store().bound_job(idem, "ingest"))
    outcome = ingest_accept.accept_ingest(req, enqueue=enqueue, r=r, s=s, answer_duplicates=not retry_of_a_job)
    if isinstance(outcome, ingest_accept.Duplicate):
        body = IngestDedup(**dataclasses.asdict(outcome), **context.body_ids())
        return JSONResponse(body.model_dump(), status_code=200)
    return outcome


@router.post(
    "/ingest",
    operation_id="ingest",
    status_code=202,
    response_model=JobAccepted,
    responses={
        200: {"model": IngestDedup, "description": "exact duplicate of an indexed image"},
        **ERRORS(409, 413, 415, 422),
    },
    summary="Ingest label images (multipart or JSON: base64, URL, file://) and text documents as a job",
    openapi_extra={
        **contract(
            media_types=("application/json", "multipart/form-data"),
            max_body_bytes=50 * 1024 * 1024,
            idempotent=True,
            replay_dedup=True,
        ),
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": inline_schema(IngestRequest)},
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "file": {"type": "array", "items": {"type": "string", "format": "binary"}},
                            **{k: {"type": "string"} for k in FIELD_NAMES},
                            "items": {"type": "string", "description": "JSON array of per-file field overrides"},
                            "strict": {"type": "boolean"},
                            "callback_url": {"type": "string"},
                        },
                        "required": ["file", "category"],
                    }
                },
            },
        },
    },
)
async def ingest(request: Request):
    s = get_settings()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "multipart/form-data":
        req = await _parse_multipart(request, s)
    elif ctype in ("application/json", "") or ctype.endswith("+json"):
        req = await asyncio.to_thread(_parse_json, await request.body())
    else:
        raise YanaError.of(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "send multipart/form-data or application/json")
    return await asyncio.to_thread(_accept, req, s)
