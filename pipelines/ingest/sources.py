"""Where an ingest item's bytes come from: uploaded (put in the blob store before the 202), a
`file://` path inside IMPORT_DIR, or an http(s) URL fetched with SSRF protection and limits.

A source is a small JSON-able dict kept in the job's params:
  {"kind": "stored", "path": "incoming/<job>/<n>.bin"}   a blob key (yana.blobs; BLOB_URL)
  {"kind": "file", "path": "/abs/path/inside/IMPORT_DIR"}
  {"kind": "url", "url": "https://..."}
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from pipelines.runtime.safe_http import get_pinned, resolve_target
from yana.blobs import BlobMissing, BlobStore
from yana.errors import ErrorCode, YanaError, describe

MAX_REDIRECTS = 3


def import_path(uri_or_path: str, import_dir: Path | None) -> Path:
    """Resolve a `file://` URI (or plain path) and require it to lie inside IMPORT_DIR.

    Symlinks are resolved first, so a link inside the folder pointing outside is refused too."""
    if not import_dir:
        raise YanaError.of(ErrorCode.IMPORT_DISABLED, "file:// sources need IMPORT_DIR to be configured")
    raw = uri_or_path
    if raw.startswith("file://"):
        parts = urlsplit(raw)
        if parts.netloc not in ("", "localhost"):
            raise YanaError.of(ErrorCode.PATH_NOT_ALLOWED, "file:// URIs must name a local path")
        raw = unquote(parts.path)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        # A NUL makes every OS call raise ValueError; other control characters name no file a
        # client means. Bad input either way: 400, never retryable.
        raise YanaError.of(ErrorCode.BAD_REQUEST, "file path must not contain NUL or control characters")
    base = Path(import_dir).resolve()
    p = Path(raw)
    if not p.is_absolute():
        p = base / p
    # Containment before existence: a path outside the folder gets the same answer whether or
    # not it exists (no existence oracle for the server's files).
    try:
        real = p.resolve()
    except (RuntimeError, OSError, ValueError) as exc:
        raise YanaError.of(ErrorCode.PATH_NOT_ALLOWED, "path is outside the import folder") from exc
    if real != base and base not in real.parents:
        raise YanaError.of(ErrorCode.PATH_NOT_ALLOWED, "path is outside the import folder")
    if not real.is_file():
        raise YanaError.of(ErrorCode.FILE_NOT_FOUND, f"not a regular file: {uri_or_path}")
    return real


def check_url(url: str, allow: list[str]):
    """Validate a URL source now (the API answers 400 at once); the worker checks again."""
    try:
        return resolve_target(url, allow, allow_setting="FETCH_ALLOW")
    except YanaError as exc:
        raise YanaError.of(ErrorCode.URL_NOT_ALLOWED, f"image URL refused: {exc.message}") from exc


def fetch_url(url: str, *, allow: list[str], timeout_s: float, max_bytes: int) -> bytes:
    """GET an image over http(s): every hop re-checked (no private addresses), pinned to the
    checked address, capped in size and time; at most MAX_REDIRECTS redirects."""
    for _ in range(MAX_REDIRECTS + 1):
        target = check_url(url, allow)
        try:
            resp, body = get_pinned(target, timeout_s, max_bytes, {"user-agent": "yana-ingest/1", "accept": "image/*"})
        except httpx.TimeoutException as exc:
            raise YanaError.of(ErrorCode.FETCH_TIMEOUT, f"{url}: timed out after {timeout_s}s") from exc
        except httpx.HTTPError as exc:
            raise YanaError.of(ErrorCode.FETCH_FAILED, f"{url}: {describe(exc)}", retryable=True) from exc
        if resp.status_code in (301, 302, 303, 307, 308) and resp.headers.get("location"):
            url = urljoin(url, resp.headers["location"])
            continue
        if resp.status_code != 200:
            raise YanaError.of(
                ErrorCode.FETCH_FAILED, f"{url}: HTTP {resp.status_code}", retryable=resp.status_code >= 500
            )
        return body
    raise YanaError.of(ErrorCode.FETCH_FAILED, f"{url}: more than {MAX_REDIRECTS} redirects")


def read_source(
    source: dict, *, blobs: BlobStore, import_dir: Path | None, allow: list[str], timeout_s: float, max_bytes: int
) -> bytes:
    kind = source.get("kind")
    if kind == "rejected":  # refused by the API's checks; recorded as this item's failure
        err = source.get("error") or {}
        raise YanaError(err.get("code", "BAD_REQUEST"), err.get("message", "refused"), 400)
    if kind == "stored":
        try:
            return blobs.get(source["path"], max_bytes=max_bytes)
        except BlobMissing as exc:
            raise YanaError.of(
                ErrorCode.SOURCE_MISSING, f"the uploaded bytes are gone from the blob store ({blobs.kind})"
            ) from exc
    if kind == "file":
        p = import_path(source["path"], import_dir)
        size = os.path.getsize(p)
        if size > max_bytes:
            raise YanaError.of(ErrorCode.IMAGE_TOO_LARGE, f"image is {size} bytes; the limit is {max_bytes}")
        return p.read_bytes()
    if kind == "url":
        return fetch_url(source["url"], allow=allow, timeout_s=timeout_s, max_bytes=max_bytes)
    raise YanaError.of(ErrorCode.BAD_REQUEST, f"unknown source kind {kind!r}")
