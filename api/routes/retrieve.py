"""POST /v1/retrieve: a query plus inline documents → the best passages, with byte spans.

The seed's request and response, unchanged for its clients, plus fields they may ignore: `path`
(which path answered: "extractor", or "llm" for the LLM + REPL loop when OPENAI_BASE_URL is set), `run_id`, `stats`, `embed_job_id` (the job warming the vector
cache when chunks were not embedded within `options.timeout_ms`; null when RETRIEVE_EMBED_JOBS_MAX
such jobs are already running). Errors use the contract's body:
400 malformed JSON or documents missing/empty, 422 other schema violations (empty query, wrong
types), 500 with trace_id.

`Prefer: respond-async` (RFC 7240), or documents over RETRIEVE_MAX_SYNC_BYTES of text or
RETRIEVE_MAX_SYNC_CHUNKS chunks, makes the whole retrieve a job: 202 + job id, the response body
as the job's result (GET /v1/jobs/{id}, or `callback_url`); so does a request the LLM loop would
answer whose `timeout_ms` is below RETRIEVE_LLM_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

from api.contract import ContractRoute
from api.contract.policy import AGENT_RATE, contract
from api.jobs_common import JobAccepted, accept_job
from api.schemas import ERRORS, Envelope
from pipelines import retrieve as P
from pipelines.retrieve.vectors import EmbedJobClaim, claim_embed_job
from yana import context
from yana.clients import get_redis
from yana.errors import ErrorCode, YanaError
from yana.settings import get_settings

router = APIRouter(prefix="/v1", tags=["retrieve"], route_class=ContractRoute)

QUERY_MAX_CHARS = 4000


class RetrieveDocument(BaseModel):
    id: str = Field(..., min_length=1, max_length=1000)
    text: str = Field(..., description="the document text; spans are UTF-8 byte offsets into it")
    metadata: dict[str, Any] | None = Field(None, description="passed through to the results")


class RetrieveOptions(BaseModel):
    top_k: int = Field(5, ge=1, le=1000)
    max_chunk_chars: int = Field(800, ge=20, le=100_000)
    min_score: float = Field(0.0, ge=0.0, le=1.0)
    include_spans: bool = True
    timeout_ms: int | None = Field(
        None,
        ge=1,
        description="time budget for embedding (capped by RETRIEVE_TIMEOUT_MAX_MS); when absent a request embeds"
        " for RETRIEVE_EMBED_BUDGET_MS plus 8 ms per KB of documents, at most RETRIEVE_EMBED_BUDGET_MAX_MS, and ranks"
        " what is left without vectors (`warnings` says so)"
        " while a follow-up job embeds it for the next request (none when RETRIEVE_EMBED_JOBS_MAX are running)",
    )
    mode: Literal["auto", "extractor"] = Field(
        "auto",
        description="auto: the LLM loop when an LLM is configured (else the extractor); extractor: never the LLM",
    )
    passage: Literal["chunk", "window", "document"] = Field(
        "chunk",
        description="what `text` is: chunk = the chunk holding the evidence, grown to whole sentences around it"
        " within max_chunk_chars; window = the best window of up to three sentences; document = the whole"
        " document. `spans` are the evidence's UTF-8 byte ranges inside `text` in every mode",
    )


class RetrieveRequest(BaseModel):
    query: str = Field(..., min_length=1, max_length=QUERY_MAX_CHARS)
    documents: list[RetrieveDocument] = Field(..., description="inline documents (not stored)")
    options: RetrieveOptions = Field(default_factory=RetrieveOptions)
    callback_url: str | None = Field(None, max_length=2048, description="for a job: POSTed the job when it ends")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query is empty")
        return v


class Span(BaseModel):
    """UTF-8 byte range of evidence inside the result's `text`: text.encode()[start:end]."""

    start: int
    end: int


class RetrieveResult(BaseModel):
    doc_id: str
    score: float = Field(ge=0.0, le=1.0)
    text: str = Field(description="the passage (options.passage) holding the evidence")
    metadata: dict[str, Any] | None = None
    spans: list[Span] = Field(description="the evidence's UTF-8 byte ranges inside `text` (several when split)")


class RetrieveResponse(Envelope):
    trace_id: str | None = None
    run_id: str | None = None
    results: list[RetrieveResult]
    warnings: list[str]
    path: str = Field(description="which path answered: extractor or llm")
    embed_job_id: str | None = Field(
        None,
        description="job embedding the chunks left lexical-only; null when none was queued"
        " (RETRIEVE_EMBED_JOBS_MAX follow-up jobs already running: `warnings` says so)",
    )
    stats: dict = Field(default_factory=dict)


def _options(req: RetrieveRequest) -> P.Options:
    s = get_settings()
    o = req.options
    timeout = min(o.timeout_ms or s.retrieve_timeout_ms, s.retrieve_timeout_max_ms)
    # Without an explicit timeout_ms a request embeds for RETRIEVE_EMBED_BUDGET_MS, more for more text
    # (the rest is ranked without vectors and embedded by the follow-up job); with one, for up to that.
    explicit = o.timeout_ms is not None
    return P.Options(
        o.top_k,
        o.max_chunk_chars,
        o.min_score,
        o.include_spans,
        timeout,
        o.mode,
        o.passage,
        embed_budget_ms=None if explicit else s.retrieve_embed_budget_ms,
        embed_budget_max_ms=None if explicit else s.retrieve_embed_budget_max_ms,
    )


def _wants_async(request: Request) -> bool:
    prefer = ",".join(request.headers.getlist("prefer")).lower()
    return any(p.strip().split(";")[0].strip() == "respond-async" for p in prefer.split(","))


def _enqueue_embedding(texts: list[str]) -> EmbedJobClaim:
    """One follow-up job per distinct set of chunks left unembedded, at most RETRIEVE_EMBED_JOBS_MAX
    in flight (requests over a set whose job is in flight get its id)."""
    return claim_embed_job(
        get_redis(),
        texts,
        lambda: accept_job("retrieve.embed", {"texts": texts})["job_id"],
        cap=get_settings().retrieve_embed_jobs_max,
    )


def _sync(req: RetrieveRequest, docs: list[dict], opts: P.Options, deadline: float) -> dict:
    out = P.retrieve(req.query, docs, opts, deadline=deadline)
    warnings, embed_job_id = out.warnings, None
    if out.lexical_only_texts:
        claim = _enqueue_embedding(out.lexical_only_texts)
        warnings.append(P.follow_up_warning(claim, get_settings().retrieve_embed_jobs_max))
        embed_job_id = claim.job_id  # None when skipped
    return {
        **context.body_ids(),
        "results": out.results,
        "warnings": warnings,
        "path": out.path,
        "embed_job_id": embed_job_id,
        "stats": out.stats,
    }


@router.post(
    "/retrieve",
    operation_id="retrieve",
    summary="Best passages of inline documents for a query (hybrid extractor), with UTF-8 byte spans",
    response_model=RetrieveResponse,
    responses={202: {"model": JobAccepted, "description": "run as a job"}, **ERRORS(408, 413, 422)},
    # The route bounds itself (options.timeout_ms, capped); the contract's limit is the backstop.
    # A request that parses but breaks the schema (an empty query) is 422; malformed JSON is 400.
    openapi_extra=contract(
        timeout_ms_setting="retrieve_timeout_max_ms",
        timeout_grace_s=10.0,
        max_body_bytes=64 * 1024 * 1024,
        schema_error_status=422,
        **AGENT_RATE,
    ),
)
async def retrieve(req: RetrieveRequest, request: Request):
    started = time.monotonic()
    if not req.documents:
        raise YanaError.of(ErrorCode.BAD_REQUEST, "documents is empty")
    s = get_settings()
    opts = _options(req)
    docs = [d.model_dump() for d in req.documents]
    too_big = P.size_of(docs) > s.retrieve_max_sync_bytes
    if not too_big:
        too_big = await asyncio.to_thread(P.chunk_count, docs, opts.max_chunk_chars) > s.retrieve_max_sync_chunks
    # The LLM loop runs as a job when its wall-clock cap does not fit in the request's budget.
    llm_too_slow = P.llm_model(opts) is not None and s.retrieve_llm_timeout_s * 1000 > opts.timeout_ms
    if _wants_async(request) or too_big or llm_too_slow:
        params = {"query": req.query, "documents": docs, "options": vars(opts)}
        accepted = await asyncio.to_thread(accept_job, "retrieve", params, req.callback_url)
        return JSONResponse(accepted, status_code=202, headers={"Preference-Applied": "respond-async"})
    deadline = started + opts.timeout_ms / 1000.0
    return await asyncio.to_thread(_sync, req, docs, opts, deadline)
