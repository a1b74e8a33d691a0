"""Re-embedding and collections: POST /v1/reembed (job), GET /v1/collections, DELETE /v1/collections/{name}."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.contract import ContractRoute
from api.jobs_common import JobAccepted, accept_job
from api.schemas import ERRORS, Envelope
from pipelines.embedding import backends as embedding
from pipelines.search import collections as vector_index
from pipelines.search.collections import BUILDING_KEY
from yana.clients import get_chroma, get_redis
from yana.errors import ErrorCode, YanaError, conflict

router = APIRouter(prefix="/v1", tags=["collections"], route_class=ContractRoute)


class ReembedRequest(BaseModel):
    model: str = Field(
        ...,
        min_length=1,
        max_length=500,
        description="embedding model: a built-in default, EMBED_MODEL, a name in EMBED_MODELS_ALLOWED, or a folder under MODELS_DIR",
    )
    callback_url: str | None = Field(None, max_length=2048, description="POSTed the job record when it ends")


class CollectionInfo(BaseModel):
    name: str
    model: str | None
    dim: int | None
    count: int
    active: bool


class CollectionList(Envelope):
    collections: list[CollectionInfo]
    active: str | None
    building: str | None = None


class Dropped(Envelope):
    dropped: str


@router.post(
    "/reembed",
    operation_id="reembed",
    status_code=202,
    response_model=JobAccepted,
    responses=ERRORS(409, 422),
    summary="Re-embed every stored text with another model into a new collection, then swap the alias",
)
async def reembed(body: ReembedRequest) -> dict:
    model = embedding.allowed_model(body.model)  # 422 MODEL_NOT_ALLOWED: no arbitrary server paths
    if not await asyncio.to_thread(embedding.model_available, model):
        # The caller named a model this deployment cannot load: their request, not our outage.
        raise YanaError.of(ErrorCode.MODEL_UNAVAILABLE, f"embedding model {model!r} is not on this machine", status=422)
    return await asyncio.to_thread(accept_job, "reembed", {"model": model}, body.callback_url)


def _list() -> dict:
    r = get_redis()
    return {
        "collections": vector_index.list_collections(get_chroma(), r),
        "active": vector_index.active_name(r),
        "building": r.get(BUILDING_KEY),
    }


@router.get(
    "/collections",
    operation_id="list_collections",
    response_model=CollectionList,
    responses=ERRORS(503),
    summary="Vector collections (model, dimension, size) and which one is active",
)
async def list_collections() -> dict:
    return await asyncio.to_thread(_list)


@router.delete(
    "/collections/{name}",
    operation_id="drop_collection",
    response_model=Dropped,
    responses=ERRORS(404, 409),
    summary="Delete a collection that is not active (e.g. the one a re-embed replaced)",
)
async def drop_collection(name: str) -> dict:
    def _drop():
        r = get_redis()
        if name == r.get(BUILDING_KEY):
            raise conflict(f"{name!r} is being built by a re-embed")
        vector_index.drop_collection(get_chroma(), r, name)

    await asyncio.to_thread(_drop)
    return {"dropped": name}
