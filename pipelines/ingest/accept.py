"""Accepting an ingest request (from HTTP, the CLI through HTTP, MCP): check everything, answer
an exact duplicate at once, else stage the uploaded bytes and create the job.

The order is the rule: every check (callback URL, counts, categories, sizes, import paths, URL
targets, documents and their metadata) runs before a byte is written; uploaded bytes are staged
in the blob store (yana.blobs: DATA_DIR, or the S3 bucket every host shares) under
`incoming/<job>/`; when anything fails after staging and before the job record exists, the staged
blobs are removed; the job removes them when it ends; and `sweep_staging` (run by every worker's
maintenance loop) removes staged blobs that have no job, or a finished one, after STAGING_GRACE_S
(a process killed between staging and the record, or a job killed for good).

Transport code builds an `IngestInput` of plain values and maps the outcome: a `Duplicate`
(exact bytes already indexed), or the job accepted (whatever `enqueue` returned).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipelines.ingest import image_io, sources
from pipelines.labels import schema as labels
from pipelines.labels.model import FIELD_NAMES
from pipelines.neardup import hashing
from pipelines.neardup import index as phash_index
from pipelines.runtime.jobs import TERMINAL, job_key
from pipelines.runtime.safe_http import resolve_target
from pipelines.text.check import is_blank, unsafe_identifier_char
from yana.blobs import BlobStore
from yana.errors import ErrorCode, YanaError
from yana.ids import new_job_id
from yana.settings import Settings

log = logging.getLogger("yana.ingest")

LABEL_FIELDS = FIELD_NAMES
STAGING = "incoming"  # blob keys incoming/<job id>/<item index>.bin
METADATA_MAX_KEYS = 64
METADATA_KEY_MAX_CHARS = 128
METADATA_VALUE_MAX_CHARS = 4096
HEADER_PROBE_BYTES = 256 * 1024  # enough for any header's size fields (JPEG's may follow EXIF)

# enqueue(job_id, params, callback_url) -> the accepted job (created record, message sent).
Enqueue = Callable[[str, dict, str | None], dict]


@dataclass
class ImageInput:
    """One image of a request: its label fields and its bytes or where to get them."""

    fields: dict[str, Any]
    name: str | None = None
    data: bytes | None = None  # uploaded or base64-decoded bytes
    url: str | None = None  # http(s):// (fetched by the worker) or file:// inside IMPORT_DIR
    error: YanaError | None = None  # refused while parsing (bad base64, upload over the limit)


@dataclass
class IngestInput:
    images: list[ImageInput] = field(default_factory=list)
    documents: list[dict] = field(default_factory=list)  # {id, text, metadata}
    strict: bool = False
    callback_url: str | None = None


@dataclass
class Duplicate:
    """The request's one image is already indexed byte for byte."""

    id: str
    hash_sha1: str
    phash: str
    file_path: str | None
    image_url: str | None = None  # GET it from the API (any host): /v1/labels/{id}/image


def merge_fields(base: dict, override: dict | None = None) -> dict:
    """The label fields of one image: the request's, overridden by the item's non-empty ones."""
    out = {k: base.get(k) for k in LABEL_FIELDS}
    for k, v in (override or {}).items():
        if k in LABEL_FIELDS and v not in (None, ""):
            out[k] = v
    out["label_features"] = labels.normalise_features(out.get("label_features"))
    return out


# --- checks ----------------------------------------------------------------------------------


def _image_source(img: ImageInput) -> dict:
    if img.data is not None:
        return {"kind": "stored"}
    url = (img.url or "").strip()
    if url.startswith("file://"):
        return {"kind": "file", "path": url}
    if url.lower().startswith(("http://", "https://")):
        return {"kind": "url", "url": url}
    if url:
        raise YanaError.of(ErrorCode.BAD_REQUEST, "image_url must be http(s):// or file://")
    raise YanaError.of(ErrorCode.BAD_REQUEST, "an item needs image_base64 or image_url")


def check_image(img: ImageInput, s: Settings) -> dict:
    """The checks done before answering (category, size, type, import path, URL target).
    Returns the image's source for the job."""
    if img.error is not None:
        raise img.error
    if img.fields.get("category") not in labels.CATEGORIES:
        raise YanaError.of(
            ErrorCode.BAD_REQUEST, f"category is required for an image and must be one of {list(labels.CATEGORIES)}"
        )
    source = _image_source(img)
    if img.data is not None:
        image_io.check_bytes(img.data, s.max_image_bytes)
        image_io.check_header_pixels(img.data, s.max_image_pixels)
    elif source["kind"] == "file":
        p = sources.import_path(source["path"], s.import_dir)
        if p.stat().st_size > s.max_image_bytes:
            raise YanaError.of(ErrorCode.IMAGE_TOO_LARGE, f"image is larger than {s.max_image_bytes} bytes")
        with p.open("rb") as f:  # the header is in the first bytes; PIL reads no further to size it
            image_io.check_header_pixels(f.read(HEADER_PROBE_BYTES), s.max_image_pixels)
    else:
        sources.check_url(source["url"], s.fetch_allow)
    return source


def _check_metadata(where: str, metadata: Any) -> dict:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"{where}.metadata must be an object")
    if len(metadata) > METADATA_MAX_KEYS:
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"{where}.metadata has more than {METADATA_MAX_KEYS} keys")
    for k, v in metadata.items():
        if not isinstance(k, str) or not k.strip() or len(k) > METADATA_KEY_MAX_CHARS:
            raise YanaError.of(
                ErrorCode.BAD_REQUEST, f"{where}.metadata keys must be 1-{METADATA_KEY_MAX_CHARS} characters"
            )
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise YanaError.of(ErrorCode.BAD_REQUEST, f"{where}.metadata.{k} must be a string, number or boolean")
        if isinstance(v, str) and len(v) > METADATA_VALUE_MAX_CHARS:
            raise YanaError.of(
                ErrorCode.BAD_REQUEST, f"{where}.metadata.{k} is longer than {METADATA_VALUE_MAX_CHARS} characters"
            )
    return metadata


def check_documents(documents: list[dict]) -> list[dict]:
    out = []
    for i, doc in enumerate(documents):
        where = f"documents[{i}]"
        doc_id, text = doc.get("id"), doc.get("text")
        if not isinstance(doc_id, str) or is_blank(doc_id):
            raise YanaError.of(ErrorCode.BAD_REQUEST, f"{where}.id must not be blank")
        bad = unsafe_identifier_char(doc_id)
        if bad is not None:
            raise YanaError.of(
                ErrorCode.BAD_REQUEST,
                f"{where}.id must not contain control or bidirectional characters (U+{ord(bad):04X})",
            )
        if not isinstance(text, str) or is_blank(text):
            raise YanaError.of(ErrorCode.BAD_REQUEST, f"{where}.text must not be blank")
        out.append({"id": doc_id, "text": text, "metadata": _check_metadata(where, doc.get("metadata"))})
    return out


def check_request(req: IngestInput, s: Settings) -> list[dict]:
    """Whole-request checks; returns the checked documents."""
    if not req.images and not req.documents:
        raise YanaError.of(
            ErrorCode.BAD_REQUEST, "nothing to ingest: send an image (file, image_base64, image_url) or documents"
        )
    if len(req.images) + len(req.documents) > s.max_images_per_request:
        raise YanaError.of(ErrorCode.PAYLOAD_TOO_LARGE, f"at most {s.max_images_per_request} items per request")
    if req.callback_url:
        resolve_target(req.callback_url, s.webhook_allow)
    return check_documents(req.documents)


# --- the fast path -----------------------------------------------------------------------------


def exact_duplicate(img: ImageInput, source: dict, r, s: Settings, blobs: BlobStore | None = None) -> Duplicate | None:
    """Exact bytes already indexed: the existing label, without a job."""
    if source["kind"] == "stored" and img.data is not None:
        data = img.data
    elif source["kind"] == "file":
        data = sources.import_path(source["path"], s.import_dir).read_bytes()
    else:
        return None
    sha1 = hashing.sha1_hex(data)
    hit = phash_index.lookup_sha1(r, sha1)
    if hit is None:
        return None
    key = hit["file_path"] or None  # the phash index keeps the image's blob key there
    local = key if key and blobs is not None and blobs.local_path(key) is not None else None
    return Duplicate(
        id=hit["id"], hash_sha1=sha1, phash=hit["phash"], file_path=local, image_url=labels.image_url(hit["id"])
    )


# --- staging -----------------------------------------------------------------------------------


def staging_prefix(job_id: str) -> str:
    return f"{STAGING}/{job_id}/"


def remove_staged(blobs: BlobStore, job_id: str) -> int:
    """The job's staged uploads (the job ended, or was never created)."""
    return blobs.delete_prefix(staging_prefix(job_id))


def _job_exists(r, job_id: str) -> bool | None:
    try:
        return bool(r.exists(job_key(job_id)))
    except Exception:  # noqa: BLE001 - unknown: keep the files, the sweeper decides later
        return None


def accept_ingest(
    req: IngestInput,
    *,
    enqueue: Enqueue,
    r,
    s: Settings,
    blobs: BlobStore | None = None,
    answer_duplicates: bool = True,
) -> Duplicate | dict:
    """Check the request, answer an exact duplicate, else stage the bytes and enqueue the job.

    One image: its problem is raised (4xx), and with `strict` an exact duplicate is a 409
    CONFLICT. Many: an image's problem is recorded as that item's failure and the rest go on.
    answer_duplicates=False skips the duplicate answer (a retry that must get its first job)."""
    if blobs is None:
        from yana.clients import get_blobs

        blobs = get_blobs(s)
    documents = check_request(req, s)
    item_sources: list[dict] = []
    for img in req.images:
        try:
            item_sources.append(check_image(img, s))
        except YanaError as exc:
            if len(req.images) == 1 and not documents:
                raise
            item_sources.append({"kind": "rejected", "error": exc.body()})
    if answer_duplicates and len(req.images) == 1 and not documents:
        dup = exact_duplicate(req.images[0], item_sources[0], r, s, blobs)
        if dup is not None:
            if req.strict:
                raise YanaError.of(ErrorCode.CONFLICT, f"this image is already indexed as {dup.id}")
            return dup

    return _stage_and_enqueue(req, item_sources, documents, enqueue=enqueue, r=r, blobs=blobs)


def _stage_and_enqueue(
    req: IngestInput, item_sources: list[dict], documents: list[dict], *, enqueue: Enqueue, r, blobs: BlobStore
) -> dict:
    job_id = new_job_id()
    items = []
    staged = False
    try:
        for i, (img, source) in enumerate(zip(req.images, item_sources, strict=True)):
            if img.data is not None and source["kind"] == "stored":
                key = f"{staging_prefix(job_id)}{i}.bin"
                staged = True
                blobs.put(key, img.data)
                source = {"kind": "stored", "path": key}
            items.append({"index": i, "name": img.name, "source": source, "fields": img.fields})
        params = {"items": items, "documents": documents, "strict": req.strict}
        accepted = enqueue(job_id, params, req.callback_url)
        if staged and accepted.get("job_id") != job_id:  # an Idempotency-Key retry: the first job has its own
            remove_staged(blobs, job_id)
        return accepted
    except BaseException:
        if staged and _job_exists(r, job_id) is False:
            try:
                remove_staged(blobs, job_id)
            except Exception:  # noqa: BLE001 - the sweeper removes them later; report the first error
                log.warning("staged uploads of %s not removed", job_id, exc_info=True)
        raise


def sweep_staging(r, blobs: BlobStore, grace_s: float, now: float | None = None) -> int:
    """Remove the staged uploads of jobs that do not exist or have finished, once the newest of
    them is older than grace_s. Returns how many jobs' uploads were removed."""
    now = time.time() if now is None else now
    newest: dict[str, float] = {}
    for blob in blobs.list(f"{STAGING}/"):
        parts = blob.key.split("/")
        if len(parts) >= 3:
            newest[parts[1]] = max(newest.get(parts[1], 0.0), blob.mtime)
    removed = 0
    for job_id, mtime in newest.items():
        if now - mtime < grace_s:
            continue
        status = r.hget(job_key(job_id), "status")
        if status is None or status in TERMINAL:
            remove_staged(blobs, job_id)
            removed += 1
            log.info("staged uploads removed", extra={"job_id": job_id, "job_status": status})
    return removed
