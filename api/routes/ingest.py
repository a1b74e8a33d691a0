"""POST /v1/ingest: label images (multipart or JSON) and text documents → one ingest job.

Accepted forms
  multipart/form-data: one or many files (field `file` or `files`) plus the label fields
    (category, brand_name, product_name, brewery, region, label_features, text) that apply to
    every file; optional `items`: a JSON array of per-file field overrides in file order;
    optional `strict`, `callback_url`.
  application/json: label fields plus `image_base64`, or `image_url` (http(s)://, fetched by the
    worker with SSRF protection, or file:// inside IMPORT_DIR); or `items: [...]` of such objects;
    and/or `documents: [{id, text, metadata}]` (also a single `{id, text, metadata}` without image).

Answers 202 with the job (uploaded bytes are on disk under DATA_DIR/incoming/<job> first, so a
killed worker loses nothing). A single image whose exact bytes are already indexed answers at once:
200 `{id, dedup: true, hash_sha1, phash}`, or 409 with `strict`. A request with one item answers
its problem (wrong type, too large, path outside the import folder, private URL) as a 4xx; in a
request with many, such an item is recorded as a failed item of the job and the rest go on.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from pathlib import Path
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError

from api.contract.policy import contract
from api.jobs_common import JobAccepted, accept_job
from api.schemas import ERRORS, Envelope
from pipelines import imaging, labels, phash_index, sources
from yana import context
from yana.errors import YanaError
from yana.ids import new_job_id
from yana.settings import Settings, get_settings

router = APIRouter(prefix="/v1", tags=["ingest"])

FIELD_NAMES = ("category", "brand_name", "product_name", "brewery", "region", "label_features", "text")


class LabelFields(BaseModel):
    category: str | None = Field(None, description="sake | juice (required for images)")
    brand_name: str | None = Field(None, max_length=200)
    product_name: str | None = Field(None, max_length=200)
    brewery: str | None = Field(None, max_length=200)
    region: str | None = Field(None, max_length=200)
    label_features: list[str] | str | None = Field(None, description="list, or a 、/,-separated string")
    text: str | None = Field(None, max_length=20000, description="free text about the label")


class IngestItem(LabelFields):
    image_base64: str | None = Field(None, description="the image bytes, base64")
    image_url: str | None = Field(None, max_length=4096, description="http(s):// URL, or file:// inside IMPORT_DIR")
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
    file_path: str | None = None
    run_id: str | None = None
    trace_id: str | None = None


# --- building items ------------------------------------------------------------------------


class _Item:
    """One image of the request: its fields and where its bytes are (or why it was refused)."""

    def __init__(self, index: int, fields: dict, name: str | None = None):
        self.index, self.fields, self.name = index, fields, name
        self.data: bytes | None = None  # uploaded / base64 bytes, written to incoming/ before 202
        self.source: dict | None = None
        self.error: YanaError | None = None

    def param(self, job_id: str) -> dict:
        if self.error is not None:
            source = {"kind": "rejected", "error": self.error.body()}
        elif self.data is not None:
            source = {"kind": "stored", "path": f"incoming/{job_id}/{self.index}.bin"}
        else:
            source = self.source
        return {"index": self.index, "name": self.name, "source": source, "fields": self.fields}


def _fields(base: dict, override: dict | None = None) -> dict:
    out = {k: base.get(k) for k in FIELD_NAMES}
    for k, v in (override or {}).items():
        if k in FIELD_NAMES and v not in (None, ""):
            out[k] = v
    out["label_features"] = labels.normalise_features(out.get("label_features"))
    return out


def _check_item(item: _Item, s: Settings) -> None:
    """The cheap checks done before answering: category, size, type, import path, URL target."""
    cat = item.fields.get("category")
    if cat not in labels.CATEGORIES:
        raise YanaError("BAD_REQUEST", f"category is required for an image and must be one of {list(labels.CATEGORIES)}", 400)
    if item.data is not None:
        imaging.check_bytes(item.data, s.max_image_bytes)
    elif item.source and item.source["kind"] == "file":
        p = sources.import_path(item.source["path"], s.import_dir)
        if p.stat().st_size > s.max_image_bytes:
            raise YanaError("IMAGE_TOO_LARGE", f"image is larger than {s.max_image_bytes} bytes", 413)
    elif item.source and item.source["kind"] == "url":
        sources.check_url(item.source["url"], s.fetch_allow)


def _item_from_json(index: int, obj: IngestItem, base: dict) -> _Item:
    item = _Item(index, _fields(base, obj.model_dump(include=set(FIELD_NAMES))), obj.name)
    try:
        if obj.image_base64 and obj.image_url:
            raise YanaError("BAD_REQUEST", "give image_base64 or image_url, not both", 400)
        if obj.image_base64:
            try:
                item.data = base64.b64decode(obj.image_base64, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise YanaError("BAD_REQUEST", "image_base64 is not valid base64", 400) from exc
        elif obj.image_url:
            url = obj.image_url.strip()
            if url.startswith("file://"):
                item.source = {"kind": "file", "path": url}
            elif url.lower().startswith(("http://", "https://")):
                item.source = {"kind": "url", "url": url}
            else:
                raise YanaError("BAD_REQUEST", "image_url must be http(s):// or file://", 400)
        else:
            raise YanaError("BAD_REQUEST", "an item needs image_base64 or image_url", 400)
    except YanaError as exc:
        item.error = exc
    return item


def _parse_json(raw: bytes) -> tuple[list[_Item], list[dict], IngestRequest]:
    try:
        body = IngestRequest.model_validate_json(raw or b"{}")
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e.get("loc", ()))
        raise YanaError("BAD_REQUEST", f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")), 400) from exc
    base = body.model_dump(include=set(FIELD_NAMES))
    items: list[_Item] = []
    if body.image_base64 or body.image_url:
        items.append(_item_from_json(0, body, base))
    for obj in body.items:
        items.append(_item_from_json(len(items), obj, base))
    docs = [d.model_dump() for d in body.documents]
    if not items and body.id and body.text:  # a single text document
        docs.append({"id": body.id, "text": body.text, "metadata": body.metadata or {}})
    return items, docs, body


async def _parse_multipart(request: Request, s: Settings) -> tuple[list[_Item], list[dict], dict]:
    form = await request.form(max_files=s.max_images_per_request, max_fields=1000)
    files = [f for key in ("file", "files", "image", "images") for f in form.getlist(key) if hasattr(f, "read")]
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
    overrides: list[dict] = []
    if form.get("items"):
        try:
            overrides = orjson.loads(form["items"])
            assert isinstance(overrides, list) and all(isinstance(o, dict) for o in overrides)
        except (orjson.JSONDecodeError, AssertionError) as exc:
            raise YanaError("BAD_REQUEST", "items must be a JSON array of objects, one per file", 400) from exc
    items = []
    for i, f in enumerate(files):
        ov = overrides[i] if i < len(overrides) else {}
        item = _Item(i, _fields(base, ov), ov.get("name") or f.filename)
        if f.size is not None and f.size > s.max_image_bytes:
            item.error = YanaError("IMAGE_TOO_LARGE", f"{f.filename}: {f.size} bytes; the limit is {s.max_image_bytes}", 413)
        else:
            item.data = await f.read()
        items.append(item)
    opts = {
        "strict": str(form.get("strict") or "").lower() in ("1", "true", "yes", "on"),
        "callback_url": form.get("callback_url") or None,
    }
    await form.close()
    return items, [], opts


def _stage_uploads(data_dir: Path, job_id: str, items: list[_Item]) -> None:
    """Make uploaded bytes durable before the 202: the worker reads them from here."""
    for item in items:
        if item.data is not None and item.error is None:
            imaging.write_atomic(Path(data_dir) / "incoming" / job_id / f"{item.index}.bin", item.data)


def _fast_dedup(item: _Item, s: Settings, strict: bool) -> dict | None:
    """Exact bytes already indexed → the existing label, without a job."""
    if item.data is not None:
        data = item.data
    elif item.source and item.source["kind"] == "file":
        data = sources.import_path(item.source["path"], s.import_dir).read_bytes()
    else:
        return None
    sha1 = imaging.sha1_hex(data)
    from yana.clients import get_redis

    hit = phash_index.lookup_sha1(get_redis(), sha1)
    if hit is None:
        return None
    if strict:
        raise YanaError("CONFLICT", f"this image is already indexed as {hit['id']}", 409)
    return IngestDedup(
        id=hit["id"], hash_sha1=sha1, phash=hit["phash"], file_path=hit["file_path"] or None, **context.body_ids(),
    ).model_dump()


def _accept(items: list[_Item], docs: list[dict], strict: bool, callback_url: str | None, s: Settings):
    if not items and not docs:
        raise YanaError("BAD_REQUEST", "nothing to ingest: send an image (file, image_base64, image_url) or documents", 400)
    if len(items) + len(docs) > s.max_images_per_request:
        raise YanaError("PAYLOAD_TOO_LARGE", f"at most {s.max_images_per_request} items per request", 413)
    for item in items:
        if item.error is None:
            try:
                _check_item(item, s)
            except YanaError as exc:
                item.error = exc
    if len(items) == 1 and not docs:
        if items[0].error is not None:
            raise items[0].error
        fast = _fast_dedup(items[0], s, strict)
        if fast is not None:
            return JSONResponse(fast, status_code=200)
    job_id = new_job_id()
    _stage_uploads(s.data_dir, job_id, items)
    params = {"items": [it.param(job_id) for it in items], "documents": docs, "strict": strict}
    return accept_job("ingest", params, callback_url, job_id=job_id)


def _inline_schema(model: type[BaseModel]) -> dict:
    """The model's JSON schema with its $defs inlined (the OpenAPI document has no $defs root)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.split("/")[-1]])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


@router.post(
    "/ingest",
    operation_id="ingest",
    status_code=202,
    response_model=JobAccepted,
    responses={200: {"model": IngestDedup, "description": "exact duplicate of an indexed image"},
               **ERRORS(409, 413, 415, 422)},
    summary="Ingest label images (multipart or JSON: base64, URL, file://) and text documents as a job",
    openapi_extra={
        # Idempotency-Key, the body cap (50 MiB) and dedup replays: api.contract.policy SEED_DEFAULTS.
        **contract(media_types=("application/json", "multipart/form-data")),
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": _inline_schema(IngestRequest)},
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
        }
    },
)
async def ingest(request: Request):
    s = get_settings()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "multipart/form-data":
        items, docs, opts = await _parse_multipart(request, s)
        strict, callback_url = opts["strict"], opts["callback_url"]
    elif ctype in ("application/json", "") or ctype.endswith("+json"):
        raw = await request.body()
        items, docs, body = await asyncio.to_thread(_parse_json, raw)
        strict, callback_url = body.strict, body.callback_url
    else:
        raise YanaError("UNSUPPORTED_MEDIA_TYPE", "send multipart/form-data or application/json", 415)
    return await asyncio.to_thread(_accept, items, docs, strict, callback_url, s)
