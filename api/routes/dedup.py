"""Near-duplicate review: GET /v1/dedup/groups (the kept label and what was merged into it)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from api.schemas import ERRORS, Envelope
from pipelines.ingest.dedup_report import dedup_groups
from yana.clients import get_blobs, get_redis
from yana.settings import get_settings

router = APIRouter(prefix="/v1/dedup", tags=["ingest"])


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
