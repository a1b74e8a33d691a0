"""/v1/search: hybrid label search, POST with a JSON body or GET with query parameters.

Both call pipelines.search.service.search (the one search the chat path, the think loop and MCP share) in a
worker thread, inside the contract's 2 s limit for the route. Each API process loads the active
collection at start-up (SEARCH_WARM_ON_START) so the first query does not pay for it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import threading
from contextlib import asynccontextmanager
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError
from starlette.datastructures import UploadFile

from api.contract import ContractRoute
from api.contract.errors import validation_error
from api.contract.policy import AGENT_RATE, contract
from api.schemas import ERRORS, Envelope, inline_schema
from pipelines.ingest import identify
from pipelines.labels.model import LabelHit
from pipelines.search.service import K_MAX, PAGE_SIZE_MAX, QUERY_MAX_CHARS, search, warm
from yana import context as correlation
from yana import memory
from yana.clients import get_blobs, get_redis
from yana.errors import ErrorCode, YanaError, bad_request
from yana.settings import get_settings

log = logging.getLogger("yana.api.search")


@asynccontextmanager
async def _warm(app):
    if get_settings().search_warm_on_start:

        def load():
            try:
                n = warm()
                log.info("search index warmed", extra={"chunks": n})
                memory.give_back_freed_heap()  # the model load's temporary buffers (~18 MB)
            except Exception:  # stores not up yet: the first query loads instead
                log.warning("search warm-up failed", exc_info=True)

        threading.Thread(target=load, name="search-warm", daemon=True).start()
    yield


router = APIRouter(tags=["search"], lifespan=_warm, route_class=ContractRoute)


class SearchFilters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    category: str | list[str] | None = Field(None, description="sake | juice; a list means any of them")
    region: str | list[str] | None = Field(None, description="e.g. 小樽")
    brewery: str | list[str] | None = None


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query_text: str | None = Field(None, max_length=QUERY_MAX_CHARS, description="empty: browse the filter")
    filters: SearchFilters | None = None
    k: StrictInt = Field(5, ge=1, le=K_MAX, description="hits per page when page_size is not given")
    sort_by: Literal["relevance", "recency"] = "relevance"
    page: StrictInt = Field(1, ge=1, le=1000)
    page_size: StrictInt | None = Field(None, ge=1, le=PAGE_SIZE_MAX, description="hits per page (default: k)")


class SearchHit(LabelHit):
    image_url: str | None = Field(None, description="a label's stored image, served by the API (GET, same auth)")
    score: float


class SearchResponse(Envelope):
    hits: list[SearchHit]
    next_page: int | None
    not_found: list[str] = Field(
        default_factory=list,
        description="what the query names (a category, style, region or brand word of the glossary: 泡盛, "
        "沖縄, sparkling ...) that no label passing the filters has; the hits are then the nearest alternatives",
    )
    debug: dict
    run_id: str | None = None
    trace_id: str | None = None


async def _run(req: SearchRequest) -> dict:
    filters = req.filters.model_dump(exclude_none=True) if req.filters else None
    out = await asyncio.to_thread(
        search,
        req.query_text,
        filters,
        k=req.k,
        sort_by=req.sort_by,
        page=req.page,
        page_size=req.page_size,
    )
    return {**out, **correlation.body_ids()}


@router.post(
    "/v1/search",
    operation_id="search",
    summary="Hybrid search over labels (lexical + dense + metadata bonus), filtered and paged",
    response_model=SearchResponse,
    responses=ERRORS(408, 422),
    openapi_extra=contract(timeout_s=2, **AGENT_RATE),
)
async def search_post(req: SearchRequest) -> dict:
    return await _run(req)


@router.get(
    "/v1/search",
    operation_id="search_get",
    summary="The same search with query parameters (filters as category/region/brewery)",
    response_model=SearchResponse,
    responses=ERRORS(408, 422),
    openapi_extra=contract(timeout_s=2, **AGENT_RATE),
)
async def search_get(
    query_text: Annotated[
        str | None, Query(max_length=QUERY_MAX_CHARS, description="what to look for; empty: browse the filter")
    ] = None,
    category: Annotated[list[str] | None, Query(description="sake | juice; repeated means any of them")] = None,
    region: Annotated[list[str] | None, Query(description="e.g. 小樽; repeated means any of them")] = None,
    brewery: Annotated[list[str] | None, Query(description="brewery name; repeated means any of them")] = None,
    k: Annotated[int, Query(ge=1, le=K_MAX, description="hits per page when page_size is not given")] = 5,
    sort_by: Annotated[
        Literal["relevance", "recency"], Query(description="relevance (hybrid score) or recency (newest first)")
    ] = "relevance",
    page: Annotated[int, Query(ge=1, le=1000, description="1-based page number")] = 1,
    page_size: Annotated[int | None, Query(ge=1, le=PAGE_SIZE_MAX, description="hits per page (default: k)")] = None,
) -> dict:
    filters = SearchFilters(category=category, region=region, brewery=brewery)
    req = SearchRequest(query_text=query_text, filters=filters, k=k, sort_by=sort_by, page=page, page_size=page_size)
    return await _run(req)


# --- search by photo -------------------------------------------------------------------------

PHOTO_MAX_BODY_BYTES = 30 * 1024 * 1024  # a phone photo, base64 (4/3) with room


class PhotoSearchOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filters: SearchFilters | None = None
    k: StrictInt = Field(5, ge=1, le=K_MAX, description="hits (the label shown first, then the nearest)")


class PhotoSearchRequest(PhotoSearchOptions):
    image_base64: str | None = Field(None, description="the photo's bytes, base64")
    image_url: str | None = Field(
        None, max_length=2048, description="http(s):// URL of the photo (FETCH_ALLOW; fetched like ingest's)"
    )


class PhotoMatch(BaseModel):
    id: str
    kind: Literal["same_image", "same_label", "same_text"] = Field(
        description="same_image: the same bytes; same_label: ingest's near-duplicate decision (pHash, "
        "aligned verifier, read text); same_text: what the photo says names this label"
    )
    distance: int | None = None
    score: float | None = None


class PhotoSearchResponse(Envelope):
    hits: list[SearchHit]
    match: PhotoMatch | None = Field(description="the label the photo shows; null: not in the book")
    read_text: str | None = Field(description="what was read off the photo; null when not read (OCR_MODE=off)")
    not_found: list[str] = Field(description='["photo"] when the label shown is not in the book')
    debug: dict
    run_id: str | None = None
    trace_id: str | None = None


def _photo_source(req: PhotoSearchRequest) -> dict:
    given = [k for k in ("image_base64", "image_url") if getattr(req, k)]
    if len(given) != 1:
        raise bad_request("give one of image_base64 or image_url")
    if req.image_url:
        return {"kind": "url", "url": req.image_url}
    try:
        return {"kind": "bytes", "data": base64.b64decode(req.image_base64 or "", validate=True)}
    except (binascii.Error, ValueError):
        raise bad_request("image_base64 is not valid base64") from None


def _photo_search(source: dict, k: int, filters: dict | None) -> dict:
    s = get_settings()
    blobs = get_blobs(s)
    data = identify.load(source, s=s, blobs=blobs)
    return identify.identify(data, r=get_redis(), s=s, k=k, filters=filters, blobs=blobs)


@router.post(
    "/v1/search/photo",
    operation_id="search_photo",
    summary="Search by photo: the label a photo shows first (identity as ingest decides it), then the nearest",
    response_model=PhotoSearchResponse,
    responses=ERRORS(413, 415, 422),
    openapi_extra={
        **contract(
            media_types=("application/json", "multipart/form-data"),
            max_body_bytes=PHOTO_MAX_BODY_BYTES,
            timeout_s=60,
        ),
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": inline_schema(PhotoSearchRequest)},
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "properties": {
                            "file": {"type": "string", "format": "binary"},
                            "k": {"type": "integer", "minimum": 1, "maximum": K_MAX},
                            "category": {"type": "string"},
                            "region": {"type": "string"},
                            "brewery": {"type": "string"},
                        },
                        "required": ["file"],
                    }
                },
            },
        },
    },
)
async def search_photo(request: Request) -> dict:
    s = get_settings()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "multipart/form-data":
        form = await request.form(max_files=1, max_fields=10)  # file, k and the three filters
        try:
            f = form.get("file") or form.get("image")
            if not isinstance(f, UploadFile):
                raise bad_request("file: the photo is required")
            if f.size is not None and f.size > s.max_image_bytes:
                raise YanaError.of(ErrorCode.IMAGE_TOO_LARGE, f"{f.size} bytes; the limit is {s.max_image_bytes}")
            given = {f: str(form[f]) for f in ("category", "region", "brewery") if form.get(f)}
            try:
                req: PhotoSearchOptions = PhotoSearchOptions(
                    k=int(str(form.get("k") or 5)), filters=SearchFilters(**given) if given else None
                )
            except (ValidationError, ValueError):
                raise bad_request(f"k: an integer from 1 to {K_MAX}; category, region, brewery: strings") from None
            source = {"kind": "bytes", "data": await f.read()}
        finally:
            await form.close()
    elif ctype in ("application/json", "") or ctype.endswith("+json"):
        try:
            body = PhotoSearchRequest.model_validate_json(await request.body() or b"{}")
        except ValidationError as exc:  # the message every JSON route gives for its body
            raise validation_error(RequestValidationError(exc.errors())) from None
        source, req = _photo_source(body), body
    else:
        raise YanaError.of(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "send multipart/form-data or application/json")
    filters = req.filters.model_dump(exclude_none=True) if req.filters else None
    out = await asyncio.to_thread(_photo_search, source, req.k, filters)
    return {**out, **correlation.body_ids()}
