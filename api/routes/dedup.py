"""Near-duplicate review: GET /v1/dedup/groups (the kept label and what was merged into it);
POST /v1/dedup/split and /v1/dedup/merge (a person's decisions, pipelines.review.service) and
GET /v1/dedup/decisions (who decided what, when)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from api.contract import ContractRoute
from api.contract.auth import caller_identity
from api.deps import BearerToken
from api.schemas import ERRORS, Envelope
from pipelines.ingest.dedup_report import dedup_groups
from pipelines.review import service as review
from yana.clients import get_blobs, get_chroma, get_redis
from yana.settings import get_settings

router = APIRouter(prefix="/v1/dedup", tags=["ingest"], route_class=ContractRoute)


class KeptLabel(BaseModel):
    id: str
    brand_name: str | None = None
    product_name: str | None = None
    category: str | None = None
    brewery: str | None = None
    region: str | None = None
    phash: str | None = None
    hash_sha1: str | None = None
    file_path: str | None = Field(None, description="stored image, relative to DATA_DIR")
    file_name: str | None = None
    ingested_at: str | None = None
    thumbnail: str | None = Field(None, description="JPEG data URI (with thumbs=true)")


class MergedImage(BaseModel):
    hash_sha1: str
    distance: int | None = Field(None, description="Hamming distance of the pHashes (64 bits)")
    verifier_score: float | None = Field(None, description="the second stage's score of the match")
    reason: str | None = Field(None, description="exact | near-duplicate | manual (a person merged it)")
    by: str | None = Field(None, description="who merged it by hand (manual merges)")
    phash: str | None = None
    file_path: str | None = None
    file_name: str | None = Field(None, description="the uploaded name when recorded, else the stored file's")
    at: str | None = Field(None, description="when it was merged (UTC)")
    thumbnail: str | None = None


class DedupGroup(BaseModel):
    kept: KeptLabel
    duplicates: list[MergedImage]


class DedupGroups(Envelope):
    groups: list[DedupGroup]
    total_groups: int
    total_duplicates: int
    next_cursor: int | None


@router.get(
    "/groups",
    operation_id="dedup_groups",
    response_model=DedupGroups,
    responses=ERRORS(503),
    summary="Near-duplicate groups, largest first: the kept label and the images merged into it",
)
async def list_dedup_groups(
    limit: Annotated[int, Query(ge=1, le=200, description="groups per page, largest groups first")] = 50,
    cursor: Annotated[int, Query(ge=0, le=2**53 - 1, description="next_cursor of the previous page")] = 0,
    thumbs: Annotated[bool, Query(description="include small JPEG thumbnails as data URIs")] = False,
) -> dict:
    s = get_settings()
    return await asyncio.to_thread(
        dedup_groups, get_redis(), s.data_dir, limit=limit, cursor=cursor, thumbs=thumbs, blobs=get_blobs(s)
    )


class SplitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hash_sha1: str = Field(
        ...,
        min_length=40,
        max_length=40,
        pattern="^[0-9a-f]{40}$",
        description="the merged upload (a group's duplicate)",
    )


class MergeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keep: str = Field(..., max_length=64, description="the label that stays in search")
    duplicate: str = Field(
        ..., max_length=64, description="the label recorded as its duplicate and removed from search"
    )


class DecisionRecord(BaseModel):
    model_config = ConfigDict(extra="allow")  # split: from, merge (the record restored); merge: duplicate...
    action: str = Field(description="split | merge")
    label_id: str = Field(description="split: the new label; merge: the kept label")
    who: str = Field(description="the caller's token id (t:...) or 'anonymous' with auth off")
    at: float = Field(description="when (Unix seconds, UTC)")


class Decision(Envelope, DecisionRecord):
    pass


class Decisions(Envelope):
    decisions: list[DecisionRecord]


def _who(token: str | None) -> str:
    return caller_identity(token, None) if token is not None else "anonymous"


@router.post(
    "/split",
    operation_id="dedup_split",
    response_model=Decision,
    responses=ERRORS(404, 409, 422),
    summary="Split a wrong merge: the merged upload becomes its own label (indexed with its own image and fields)",
)
async def dedup_split(body: SplitRequest, token: BearerToken) -> dict:
    s = get_settings()
    return await asyncio.to_thread(
        review.split, get_redis(), get_chroma(), get_blobs(s), s, body.hash_sha1, who=_who(token)
    )


@router.post(
    "/merge",
    operation_id="dedup_merge",
    response_model=Decision,
    responses=ERRORS(404, 422),
    summary="Merge two labels that are one: keep one, record the other as its duplicate and remove it from search",
)
async def dedup_merge(body: MergeRequest, token: BearerToken) -> dict:
    s = get_settings()
    return await asyncio.to_thread(
        review.merge, get_redis(), get_chroma(), get_blobs(s), s, body.keep, body.duplicate, who=_who(token)
    )


@router.get(
    "/decisions",
    operation_id="dedup_decisions",
    response_model=Decisions,
    responses=ERRORS(503),
    summary="A person's split and merge decisions, newest first (who, when, what)",
)
async def dedup_decisions(
    limit: Annotated[int, Query(ge=1, le=1000, description="decisions to answer, newest first")] = 100,
) -> dict:
    return {"decisions": await asyncio.to_thread(review.decisions, get_redis(), limit)}
