"""GET /console (the single page) and /console/static/{name} (its assets), open like /docs: the
shell holds no data; every data call the page makes carries the bearer token (when auth is on)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, RedirectResponse, Response

from api.contract import ContractRoute
from api.contract.policy import contract
from yana.errors import ErrorCode, YanaError

STATIC = Path(__file__).parent / "static"
MEDIA = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
# Everything from this server; images also from data: (thumbnails) and blob: (authorised fetches).
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}

router = APIRouter(prefix="/console", tags=["console"], include_in_schema=False, route_class=ContractRoute)
PUBLIC = contract(public=True)


def _assets() -> dict[str, Path]:
    return {p.name: p for p in STATIC.iterdir() if p.is_file() and p.suffix in MEDIA}


@router.get("", operation_id="console_root", openapi_extra=PUBLIC)
async def console_root() -> Response:
    return RedirectResponse("/console/", status_code=308)


@router.get("/", operation_id="console", openapi_extra=PUBLIC)
async def console() -> Response:
    return FileResponse(STATIC / "index.html", media_type=MEDIA[".html"], headers=HEADERS)


@router.get("/static/{name}", operation_id="console_asset", openapi_extra=PUBLIC)
async def console_asset(
    name: Annotated[str, PathParam(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")],
) -> Response:
    path = _assets().get(name)  # only the package's own files, by name: no path is joined
    if path is None:
        raise YanaError.of(ErrorCode.NOT_FOUND, f"no console asset {name}")
    return FileResponse(path, media_type=MEDIA[path.suffix], headers=HEADERS)
