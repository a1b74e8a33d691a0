"""/v1/search: hybrid label search, POST with a JSON body or GET with query parameters.

Both call pipelines.search.service.search (the one search the chat path, the think loop and MCP share) in a
worker thread, inside the contract's 2 s limit for the route. Each API process loads the active
collection at start-up (SEARCH_WARM_ON_START) so the first query does not pay for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import asynccontextmanager
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from api.contract.policy import AGENT_RATE, contract
from api.schemas import ERRORS, Envelope
from pipelines.labels.model import LabelHit
from pipelines.search.service import K_MAX, PAGE_SIZE_MAX, QUERY_MAX_CHARS, search, warm
from yana import context as correlation
from yana.settings import get_settings

log = logging.getLogger("yana.api.search")


@asynccontextmanager
async def _warm(app):
    if get_settings().search_warm_on_start:

        def load():
            try:
                n = warm()
                log.info("search index warmed", extra={"chunks": n})
            except Exception:  # stores not up yet: the first query loads instead
                log.warning("search warm-up failed", exc_info=True)

        threading.Thread(target=load, name="search-warm", daemon=True).start()
    yield


router = APIRouter(tags=["search"], lifespan=_warm)


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
