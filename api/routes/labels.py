"""GET /v1/labels/{id}/image: a label's stored image, from whatever blob store holds it.

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

from api.contract.policy import contract
from api.schemas import ERRORS
from pipelines.ingest import image_io
from pipelines.search.label_images import image_key
from yana.blobs import BlobInfo, BlobMissing
from yana.clients import get_blobs, get_redis
from yana.errors import ErrorCode, YanaError

router = APIRouter(prefix="/v1/labels", tags=["search"])

CACHE_CONTROL = "private, max-age=31536000, immutable"
LabelId = Annotated[str, Path(max_length=64, description="a label id (label_ + 16 hex), as in search hits")]


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
