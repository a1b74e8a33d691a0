"""Memos for agents: save, search, get, delete, and the expired-entries sweep.

The operation ids (save_memo, query_memo, get_memo, delete_memo, clear_expired) are also the MCP
tool names. Logic: pipelines.memo.service; this module only translates HTTP.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.contract import ContractRoute
from api.contract.policy import AGENT_RATE, contract
from api.jobs_common import accept_job
from api.schemas import ERRORS, Envelope
from pipelines.memo import service as memo
from yana.clients import get_chroma, get_redis
from yana.errors import bad_request
from yana.settings import get_settings

router = APIRouter(tags=["memo"], route_class=ContractRoute)

TEXT_MAX_CHARS = 100_000
SUMMARY_MAX_CHARS = 4_000
QUERY_MAX_CHARS = 1_000
KEYWORDS_MAX = 32
KEYWORD_MAX_CHARS = 64
N_RESULTS_MAX = 50
MEMO_ID = r"^[0-9a-f]{32}$"
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


def _visible(value: str) -> str:
    """Text that is blank once zero-width characters are removed counts as empty."""
    if not value.translate(_INVISIBLE).strip():
        raise ValueError("must not be blank")
    return value


def _config() -> memo.MemoConfig:
    s = get_settings()
    return memo.MemoConfig(
        ttl_s=s.memo_ttl_seconds,
        max_chunk_chars=s.max_chunk_chars,
        dedup_threshold=s.memo_dedup_threshold,
        prune_expired=s.memo_prune_expired,
        sync_embed_chars=s.memo_sync_embed_chars,
    )


class SaveMemoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    session_id: str = Field(
        min_length=1, max_length=128, description="the conversation or agent session the memo belongs to"
    )
    text: str = Field(
        min_length=1, max_length=TEXT_MAX_CHARS, description="the raw text; kept in Redis for MEMO_TTL_SECONDS"
    )
    summary: str | None = Field(
        None, max_length=SUMMARY_MAX_CHARS, description="optional summary; embedded instead of the text when given"
    )
    keywords: list[Annotated[str, Field(min_length=1, max_length=KEYWORD_MAX_CHARS)]] = Field(
        default_factory=list, max_length=KEYWORDS_MAX, description="tags to filter searches by"
    )
    importance: float = Field(0.0, ge=0.0, le=1.0, description="0..1; searches can ask for a minimum")

    @field_validator("session_id", "text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return _visible(value)


class SaveMemoResponse(Envelope):
    memo_id: str
    saved_at: str | None
    chroma_ids: list[str]
    used_summary: bool
    merged_into: str | None = Field(
        None, description="the existing memo this one was merged into (MEMO_DEDUP_THRESHOLD)"
    )
    indexed_chunks: int | None = Field(
        None, description="chunks searchable when the answer left (the first MEMO_SYNC_EMBED_CHARS characters)"
    )
    index_job_id: str | None = Field(
        None,
        description="a long memo's other chunks are embedded by this job (GET /v1/jobs/{id}); null when none",
    )


class MemoRaw(BaseModel):
    model_config = ConfigDict(extra="allow")
    memo_id: str
    session_id: str
    text: str
    summary: str | None = None
    saved_at: str
    keywords: list[str]
    importance: float


class MemoHit(BaseModel):
    summary: str = Field(description="the stored document that matched: the summary, or the best chunk of the text")
    metadata: dict
    distance: float = Field(description="cosine distance of the best matching chunk (smaller is closer)")
    raw: MemoRaw | None = Field(description="the raw memo, or null once its TTL passed")


class QueryMemoResponse(Envelope):
    query: str
    results: list[MemoHit]


class GetMemoResponse(Envelope, MemoRaw):
    pass


class DeleteMemoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    memo_id: str = Field(pattern=MEMO_ID, description="the memo_id save_memo returned")


class DeleteMemoResponse(Envelope):
    deleted: bool
    memo_id: str
    chroma_ids: list[str]


class ClearExpiredResponse(Envelope):
    enabled: bool = Field(description="MEMO_PRUNE_EXPIRED: when off, nothing is removed")
    skipped: bool = Field(description="another process was pruning at the same time")
    scanned: int
    pruned_memos: int
    pruned_chunks: int


@router.post(
    "/memo/save",
    operation_id="save_memo",
    summary="Save a memo: raw text in Redis with a TTL, its summary (or the text in chunks) embedded in Chroma",
    response_model=SaveMemoResponse,
    responses=ERRORS(422),
    # The first MEMO_SYNC_EMBED_CHARS characters are embedded before the answer, the rest by a job.
    openapi_extra=contract(timeout_s=60),
)
async def save_memo(req: SaveMemoRequest) -> dict:
    out = await asyncio.to_thread(
        memo.save_memo,
        get_redis(),
        get_chroma(),
        _config(),
        session_id=req.session_id,
        text=req.text,
        summary=req.summary,
        keywords=req.keywords,
        importance=req.importance,
    )
    pending = out.pop("pending", None)
    out["index_job_id"] = None
    if pending:  # a long memo: the rest of its chunks go to a job, not into this request's time
        try:
            out["index_job_id"] = (await asyncio.to_thread(accept_job, "memo.index", pending))["job_id"]
        except BaseException:
            await asyncio.to_thread(memo.delete_memo, get_redis(), get_chroma(), out["memo_id"])  # all or nothing
            raise
    return out


@router.get(
    "/memo/search",
    operation_id="query_memo",
    summary="Search memos by meaning; one result per memo with its best distance and the raw text while it lives",
    response_model=QueryMemoResponse,
    responses=ERRORS(422),
    openapi_extra=contract(timeout_s=5, **AGENT_RATE),
)
async def query_memo(
    query: Annotated[str, Query(min_length=1, max_length=QUERY_MAX_CHARS, description="what to look for")],
    n_results: Annotated[
        int | None, Query(ge=1, le=N_RESULTS_MAX, description="memos to return (default N_RESULTS_DEFAULT)")
    ] = None,
    session_id: Annotated[str | None, Query(max_length=128, description="only this session's memos")] = None,
    keywords: Annotated[
        list[str] | None, Query(max_length=KEYWORDS_MAX, description="memos tagged with every one of these")
    ] = None,
    min_importance: Annotated[
        float | None, Query(ge=0.0, le=1.0, description="only memos at least this important")
    ] = None,
) -> dict:
    if not query.translate(_INVISIBLE).strip():
        raise bad_request("query must not be blank")
    return await asyncio.to_thread(
        memo.query_memo,
        get_redis(),
        get_chroma(),
        query=query,
        n_results=n_results or get_settings().n_results_default,
        session_id=session_id,
        keywords=keywords,
        min_importance=min_importance,
    )


@router.get(
    "/memo/get",
    operation_id="get_memo",
    summary="The raw memo by memo_id (404 once its TTL passed)",
    response_model=GetMemoResponse,
    responses=ERRORS(404, 422),
)
async def get_memo(
    memo_id: Annotated[str, Query(pattern=MEMO_ID, description="the memo_id save_memo returned")],
) -> dict:
    return await asyncio.to_thread(memo.get_memo, get_redis(), memo_id)


@router.post(
    "/memo/delete",
    operation_id="delete_memo",
    summary="Delete a memo: its raw text and every Chroma entry",
    response_model=DeleteMemoResponse,
    responses=ERRORS(404, 422),
)
async def delete_memo(req: DeleteMemoRequest) -> dict:
    return await asyncio.to_thread(memo.delete_memo, get_redis(), get_chroma(), req.memo_id)


@router.post(
    "/memo/clear_expired",
    operation_id="clear_expired",
    summary="Remove the Chroma entries of memos whose raw text expired (when MEMO_PRUNE_EXPIRED is on)",
    response_model=ClearExpiredResponse,
    openapi_extra=contract(timeout_s=60),
)
async def clear_expired() -> dict:
    return await asyncio.to_thread(memo.clear_expired, get_redis(), get_chroma(), _config())
