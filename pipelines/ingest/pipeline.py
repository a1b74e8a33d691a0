"""The ingest job body: label images and text documents into the active collection.

Per image: bytes (uploaded / import folder / URL) → safe decode → sha1 → 64-bit pHash → kept in the
blob store under images/ (yana.blobs: DATA_DIR, or the S3 bucket of BLOB_URL) → atomic near-duplicate check-and-insert (pipelines.neardup.index: candidates within a
loose pHash radius, each judged by the second stage of pipelines.neardup.decision: the uploader's fields and
an aligned thumbnail comparison; the outcome names `dedup_of`, `distance` and `verifier_score`)
→ label text from
the uploader's fields → chunks ≤ MAX_CHUNK_CHARS → embeddings, batched across the items of a batch →
upsert with content-derived ids into the active collection (and into a collection a re-embed is
building, so the swap loses nothing).

Resumable and idempotent: items are processed in batches in order; each batch's outcomes are
written to Redis and the cursor (next item) to the job's meta. A redelivered job (killed worker)
starts at the cursor; items of the interrupted batch find their own pHash insert ("self", by owner
token job:index) and upsert again under the same ids, so every image is indexed exactly once.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol

import orjson

from pipelines.embedding.cache import embed_cached
from pipelines.ingest import corrections, image_io, readings, sources
from pipelines.ingest import deferred as deferred_reads
from pipelines.ingest.accept import remove_staged, staging_prefix
from pipelines.ingest.keys import OUTCOMES_KEY, RETRY_KEY
from pipelines.ingest.pictures import stored_pictures
from pipelines.labels import schema as labels
from pipelines.labels.model import merge_field_values
from pipelines.neardup import decision as neardup
from pipelines.neardup import hashing, printed, verifier
from pipelines.neardup import index as phash_index
from pipelines.neardup.index import shared_index
from pipelines.search import collections as vector_index
from pipelines.text import chunking, variants
from yana.blobs import BlobStore
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings, get_settings

log = logging.getLogger("yana.ingest")

LABEL_IMAGES_KEY = labels.LABEL_IMAGES_KEY
LABEL_FIELDS = ("category", "brand_name", "product_name", "brewery", "region", "label_features", "text")


class JobHandle(Protocol):
    """What the ingest body needs of its job (workers.base_task.JobContext fits)."""

    job_id: str
    meta: dict

    def progress(self, stage: str, done: int, total: int) -> None: ...

    def save_meta(self, **values: Any) -> None: ...


class LocalJob:
    """Lets the pipeline run outside a job (tests, scripts): progress and cursor kept in memory."""

    def __init__(self, job_id: str = "local"):
        self.job_id = job_id
        self.meta: dict = {}

    def progress(self, stage: str, done: int, total: int) -> None:
        pass

    def save_meta(self, **values: Any) -> None:
        self.meta.update(values)


def warm_up() -> None:
    """Load the near-duplicate check's compiled code (the verifier and the pHash search) and the
    brand comparison's kanji table before a first job needs them."""
    verifier.warm_up()
    phash_index.warm_up()
    variants.warm_up()


def empty_outcome(index: int, name: str | None = None) -> dict:
    return {
        "index": index,
        "name": name,
        "id": None,
        "dedup": False,
        "dedup_of": None,
        "distance": None,
        "verifier_score": None,
        "hash_sha1": None,
        "phash": None,
        "file_path": None,
        "image_url": None,
        "error": None,
        "read_text": None,  # what OCR read off the label (None: not read)
        "warnings": [],  # [{code, message}]: e.g. OCR_FAILED / OCR_TIMEOUT (the label is kept)
    }


# --- writing chunks ------------------------------------------------------------------------


def write_targets(r) -> list[str]:
    """Collections a new chunk must go into: the active one, and the one a re-embed is building."""
    out = [n for n in (vector_index.active_name(r), r.get(vector_index.BUILDING_KEY)) if n]
    return list(dict.fromkeys(out))


def write_chunks(r, chroma, chunks: list[dict]) -> None:
    """Embed and upsert chunks {id, text, metadata} into every write target (each with its model).

    The targets are read again after writing: a swap or a re-embed starting meanwhile still gets
    these chunks (upserts are idempotent)."""
    if not chunks:
        return
    if not vector_index.active_name(r):
        vector_index.active_collection(chroma, r)  # first use: create the default collection
    done: set[str] = set()
    for _ in range(3):
        pending = [n for n in write_targets(r) if n not in done]
        if not pending:
            return
        for name in pending:
            try:
                col = vector_index.open_collection(chroma, name)
            except YanaError:
                if name == r.get(vector_index.BUILDING_KEY):  # a re-embed that just finished or was dropped
                    done.add(name)
                    continue
                raise
            model, _dim = vector_index.collection_model(col)
            emb = embed_cached([c["text"] for c in chunks], "passage", model=model, r=r)
            vector_index.upsert_chunks(
                col, [{**c, "embedding": e} for c, e in zip(chunks, emb, strict=True)], r=r, model=model
            )
            done.add(name)


def label_chunks(record: dict, fields: dict, max_chars: int) -> list[dict]:
    text = labels.label_text(fields)
    parts = chunking.chunk_text(text, max_chars) or [record["id"]]
    return [
        {"id": labels.chunk_id(record["id"], k), "text": part, "metadata": {**record, "chunk_index": k}}
        for k, part in enumerate(parts)
    ]


# --- images --------------------------------------------------------------------------------


def _read_item(r, sha1: str, image, fields: dict, out: dict, s: Settings) -> dict | None:
    """The label's reading (OCR_MODE auto|always; none with off): the read text goes on the
    outcome, a failed read is a warning there. Returns the reading or None."""
    if s.ocr_mode == "off" or r is None:
        return None
    reading, warning = readings.read_label(r, sha1, image, s)
    if warning:
        out["warnings"].append(warning)
    if reading is not None:
        out["read_text"] = reading.get("text") or ""
    return reading


def read_values(reading: dict | None) -> dict[str, dict]:
    """{name: {value, source, confidence}} of what a reading extracted."""
    return {
        k: {"value": f.get("value"), "source": f.get("source") or "ocr", "confidence": f.get("confidence", 0.0)}
        for k, f in ((reading or {}).get("fields") or {}).items()
    }


def _field_values(fields: dict, reading: dict | None) -> dict[str, dict]:
    """{name: {value, source, confidence}}: the uploader's fields win over the read ones."""
    given = {
        k: {"value": str(v), "source": "uploader", "confidence": 1.0}
        for k, v in fields.items()
        if k in labels.STRING_FIELDS and v
    }
    return merge_field_values(given, read_values(reading))


def label_record(
    label_id: str,
    fields: dict,
    reading: dict | None,
    *,
    sha1: str,
    phash: str,
    file_path: str,
    fixed: dict[str, dict] | None = None,
) -> tuple[dict, dict]:
    """(chunk metadata, fields for the label text) of a new label: the uploader's fields, then
    what was read off the image (`reading`, pipelines.ingest.readings; None: not read), then the
    corrections people made (`fixed`, pipelines.ingest.corrections), which win."""
    iso, ts = labels.now_stamp()
    record = {
        "id": label_id,
        "doc_id": label_id,
        "source": "label",
        **{k: fields.get(k) for k in LABEL_FIELDS if k != "text"},
        "file_path": file_path,
        "hash_sha1": sha1,
        "phash": phash,
        "ingested_at": iso,
        "ingested_at_ts": ts,
    }
    values = _field_values(fields, reading)
    if reading is not None:
        record["ocr_text"] = reading.get("text") or ""
        record["ocr_engine"] = reading.get("engine") or ""
        # Fields the uploader did not give, as read: kept on the record and in the label text.
        for k in labels.TEXT_FIELDS:
            if not record.get(k) and k in values:
                record[k] = values[k]["value"]
        if not record.get("label_features") and reading.get("label_features"):
            record["label_features"] = list(reading["label_features"])
    values = corrections.apply_corrections(record, values, fixed or {})
    record["field_sources"] = orjson.dumps(values).decode()
    text_fields = {**fields, "ocr_fields": {k: v["value"] for k, v in values.items()}}
    for name in (*labels.TEXT_FIELDS, "label_features"):
        if name in (fixed or {}):
            text_fields[name] = record.get(name)
    if reading is not None:
        text_fields["ocr_text"] = reading.get("text") or ""
    return record, text_fields


def _prepare_item(item: dict, *, job_id: str, s: Settings, index, blobs: BlobStore, r=None) -> tuple[dict, dict | None]:
    """Decode, hash, store, read, check-and-insert one image. Returns (outcome, label record or None)."""
    i = int(item["index"])
    out = empty_outcome(i, item.get("name"))
    fields = {k: item.get("fields", {}).get(k) for k in LABEL_FIELDS}
    try:
        if fields.get("category") not in labels.CATEGORIES:
            raise YanaError.of(ErrorCode.BAD_CATEGORY, f"category must be one of {labels.CATEGORIES}")
        data = sources.read_source(
            item["source"],
            blobs=blobs,
            import_dir=s.import_dir,
            allow=s.fetch_allow,
            timeout_s=s.fetch_timeout_s,
            max_bytes=min(s.max_image_bytes, s.fetch_max_bytes)
            if item["source"].get("kind") == "url"
            else s.max_image_bytes,
        )
        dec = image_io.decode_image(data, max_bytes=s.max_image_bytes, max_pixels=s.max_image_pixels)
        sha1 = hashing.sha1_hex(data)
        ph = hashing.phash_hex(dec.image)
        out.update(hash_sha1=sha1, phash=ph)
        image_key = image_io.store_image(blobs, sha1, dec.format, data)
        # file_path: the image on this host's disk (relative to DATA_DIR); none with a shared store.
        file_path = image_key if blobs.local_path(image_key) is not None else ""
        out["file_path"] = file_path or None
        deferred = r is not None and deferred_reads.defers(r, s, fields, sha1)
        late: dict[str, dict | None] = {}  # the deferred read, if the decision needed it after all

        def read_now() -> tuple[dict, dict, dict]:
            late["reading"] = got = _read_item(r, sha1, dec.image, fields, out, s)
            return readings.identity_fields(got, fields), readings.said_fields(got, fields), printed.field_lines(got)

        reading = None if deferred else _read_item(r, sha1, dec.image, fields, out, s)
        read = readings.identity_fields(reading, fields)
        # deferred: nothing said yet, so no read-the-same set (its members, every label of the
        # brand, would all be candidates, each ruled out by its product name at a cost per label);
        # candidates by hash and by the same fields, and the set is joined once read
        said = readings.said_fields(reading, fields)
        entry, digest, verify = neardup.verifier_for(
            dec.image,
            fields,
            s.phash_threshold,
            read=read,
            said=said,
            blob_key=image_key,
            pictures=stored_pictures(r, blobs) if s.neardup_picture_check else None,
            read_query=read_now if deferred else None,
            readings=deferred_reads.stored_readings(r, blobs, s) if r is not None and s.ocr_mode != "off" else None,
            lines=printed.field_lines(reading),
            greys=stored_pictures(r, blobs).greys if s.neardup_picture_check and s.neardup_printed_check else None,
            read_field=readings.field_reader(s),
        )
        # The phash index keeps the blob key (exact duplicates answer with the kept image).
        res = index.check_and_insert(
            ph,
            sha1,
            owner=f"{job_id}:{i}",
            file_path=image_key,
            entry=entry,
            verify=verify,
            fields_digest=digest,
            text_digests=verify.text_digests,
        )
    except YanaError as exc:
        out["error"] = exc.body()
        return out, None
    if deferred and "reading" in late:  # read after all (it had candidates): as if read inline
        deferred, reading = False, late["reading"]
        if res.status == "indexed" and reading is not None:
            deferred_reads.index_reading(index, sha1, fields, reading)
    out["id"] = res.label_id
    out["image_url"] = labels.image_url(res.label_id)
    if deferred and res.status != "dedup":
        out["read"] = "deferred"  # read after the ingest (pipelines.ingest.deferred)
    if res.status == "dedup":
        out.update(dedup=True, dedup_of=res.label_id, distance=res.distance, verifier_score=res.score)
        # What a split (pipelines.review) needs to restore the upload exactly: its fields and
        # blob key; _record_dups takes these out again before the outcome is stored.
        out["_sent"] = {"fields": fields, "image_key": image_key}
        return out, None
    # A person's correction of this label (an ingest of the same image running again) wins.
    fixed = corrections.corrections(r, res.label_id) if r is not None else {}
    record, text_fields = label_record(
        res.label_id, fields, reading, sha1=sha1, phash=ph, file_path=file_path, fixed=fixed
    )
    if deferred:
        deferred_reads.mark(record, deferred_reads.PENDING)
    if item.get("name"):  # the name the client uploaded it under (the dedup report shows it)
        record["file_name"] = str(item["name"])[:300]
    return out, {"record": record, "fields": text_fields, "image_key": image_key}


def _record_dups(r, outcomes: list[dict]) -> None:
    sent = {o["index"]: o.pop("_sent", None) or {} for o in outcomes}
    phash_index.record_merges(
        r,
        {
            o["hash_sha1"]: {
                "dedup_of": o["dedup_of"],
                "distance": o["distance"],
                "verifier_score": o["verifier_score"],
                "phash": o["phash"],
                "file_path": o["file_path"],
                "name": o.get("name"),  # the uploaded name (the dedup report shows it)
                **sent[o["index"]],
                "at": time.time(),
            }
            for o in outcomes
            if o["dedup"] and o["hash_sha1"]
        },
    )


def _prepare_batch(
    batch: list[dict], *, job_id: str, s: Settings, index, blobs: BlobStore, r=None
) -> tuple[list[dict], list[tuple[dict, dict]]]:
    outcomes, labels_to_write = [], []
    for item in batch:
        out, lab = _prepare_item(item, job_id=job_id, s=s, index=index, blobs=blobs, r=r)
        outcomes.append(out)
        if lab:
            labels_to_write.append((out, lab))
    return outcomes, labels_to_write


def ingest_images(
    ctx: JobHandle,
    items: list[dict],
    *,
    r,
    chroma,
    s: Settings | None = None,
    done_before: int = 0,
    total: int | None = None,
    blobs: BlobStore | None = None,
) -> None:
    """Process items from the cursor in ctx.meta on; outcomes go to OUTCOMES_KEY.

    Two stages overlap: while batch k is embedded and written (the model runs in C without the
    GIL), a helper thread decodes, hashes and checks batch k+1. Batch k+1's pHash inserts happen
    before batch k's cursor is saved; a crash then finds them as "self" on the retry."""
    s = s or get_settings()
    if blobs is None:
        from yana.clients import get_blobs

        blobs = get_blobs(s)
    index = shared_index(r, s.phash_threshold, s.phash_candidate_radius)
    key = OUTCOMES_KEY.format(job_id=ctx.job_id)
    total = total if total is not None else len(items)
    cursor = int(ctx.meta.get("cursor") or 0)
    batch_size = max(1, s.ingest_batch_size)
    starts = list(range(cursor, len(items), batch_size))
    if not starts:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-prep") as prep:
        submit = partial(prep.submit, _prepare_batch, job_id=ctx.job_id, s=s, index=index, blobs=blobs, r=r)  # type: ignore[call-arg]
        pending = submit(items[starts[0] : starts[0] + batch_size])  # type: ignore[call-arg]
        for n, start in enumerate(starts):
            batch = items[start : start + batch_size]
            outcomes, labels_to_write = pending.result()
            pending = submit(items[starts[n + 1] : starts[n + 1] + batch_size]) if n + 1 < len(starts) else None  # type: ignore[call-arg,assignment]
            chunks = [
                c for _o, lab in labels_to_write for c in label_chunks(lab["record"], lab["fields"], s.max_chunk_chars)
            ]
            try:
                write_chunks(r, chroma, chunks)
            except Exception:
                # Nothing of this batch (or the one prepared behind it) reached the index: take
                # their pHash entries back, so a later try or another upload is not reported as a
                # duplicate of a label that does not exist.
                undo = list(labels_to_write)
                if pending is not None:
                    try:
                        undo += pending.result()[1]
                    except Exception:  # noqa: BLE001 - the write error is the one to report
                        pass
                for out, _lab in undo:
                    index.remove(out["hash_sha1"])
                raise
            _record_dups(r, outcomes)
            with r.pipeline(transaction=True) as p:
                p.hset(key, mapping={str(o["index"]): orjson.dumps(o).decode() for o in outcomes})
                p.expire(key, s.job_retention_s)
                images = {lab["record"]["id"]: lab["image_key"] for _o, lab in labels_to_write}
                if images:
                    p.hset(LABEL_IMAGES_KEY, mapping=images)
                deferred_reads.note_batch(
                    p,
                    [lab["record"]["id"] for _o, lab in labels_to_write if deferred_reads.is_pending(lab["record"])],
                    s,
                )
                p.execute()
            cursor = start + len(batch)
            ctx.save_meta(cursor=cursor)
            ctx.progress("ingest", done_before + cursor, total)


# --- text documents ------------------------------------------------------------------------


def ingest_documents(
    ctx: JobHandle,
    documents: list[dict],
    *,
    r,
    chroma,
    s: Settings | None = None,
    done_before: int = 0,
    total: int | None = None,
) -> None:
    s = s or get_settings()
    key = OUTCOMES_KEY.format(job_id=ctx.job_id)
    total = total if total is not None else len(documents)
    cursor = int(ctx.meta.get("doc_cursor") or 0)
    while cursor < len(documents):
        doc = documents[cursor]
        out = {"index": f"doc:{cursor}", "id": doc.get("id"), "dedup": False, "chunks": 0, "error": None}
        try:
            out["chunks"] = write_document(r, chroma, doc, s)
        except YanaError as exc:
            out["error"] = exc.body()
        r.hset(key, f"doc:{cursor}", orjson.dumps(out).decode())
        r.expire(key, s.job_retention_s)
        cursor += 1
        ctx.save_meta(doc_cursor=cursor)
        ctx.progress("ingest", done_before + cursor, total)


def write_document(r, chroma, doc: dict, s: Settings) -> int:
    doc_id = str(doc.get("id") or "").strip()
    text = str(doc.get("text") or "")
    if not doc_id or not text.strip():
        raise YanaError.of(ErrorCode.BAD_DOCUMENT, "a text document needs an id and non-empty text")
    iso, ts = labels.now_stamp()
    meta = {
        k: v
        for k, v in (doc.get("metadata") or {}).items()
        if k not in labels.SCHEMA_KEYS or k in labels.STRING_FIELDS or k == "label_features"
    }
    record = {**meta, "id": doc_id, "doc_id": doc_id, "source": "text", "ingested_at": iso, "ingested_at_ts": ts}
    key = labels.text_doc_key(doc_id)
    parts = chunking.chunk_text(text, s.max_chunk_chars)
    chunks = [
        {"id": labels.chunk_id(key, k), "text": p, "metadata": {**record, "chunk_index": k}}
        for k, p in enumerate(parts)
    ]
    write_chunks(r, chroma, chunks)
    # A shorter new version leaves old chunk ids behind: remove them in every target.
    keep = {c["id"] for c in chunks}
    for name in write_targets(r):
        col = vector_index.open_collection(chroma, name)
        old = col.get(where={"doc_id": doc_id}, include=[])["ids"]
        vector_index.delete_chunks(col, [i for i in old if i not in keep], r=r)
    return len(chunks)


# --- the job -------------------------------------------------------------------------------


def refuse_exact_duplicate(outcome: dict) -> dict:
    """`strict`: an image whose exact bytes are already indexed fails with CONFLICT (409)."""
    if outcome["dedup"] and outcome["hash_sha1"] and outcome["dedup_of"] == labels.label_id(outcome["hash_sha1"]):
        err = YanaError.of(ErrorCode.CONFLICT, f"this image is already indexed as {outcome['dedup_of']}")
        return {**outcome, "dedup": False, "error": err.body()}
    return outcome


def outcomes_so_far(r, job_id: str) -> list[dict]:
    """The outcomes an ingest job has recorded so far (images by index, then documents)."""
    raw = r.hgetall(OUTCOMES_KEY.format(job_id=job_id))
    images = sorted((int(k), v) for k, v in raw.items() if k.isdigit())
    docs = sorted((int(k[4:]), v) for k, v in raw.items() if k.startswith("doc:") and k[4:].isdigit())
    return [orjson.loads(v) for _i, v in images] + [orjson.loads(v) for _i, v in docs]


def retry_binding(job_id: str) -> tuple[str, str]:
    """(hash key, field) binding an ingest job to the one job re-running its failed items; the job
    runtime sets it once, atomically with creating that job (registry.enqueue(once=...))."""
    return RETRY_KEY.format(job_id=job_id), "ingest"


def retry_job_of(r, job_id: str) -> str | None:
    """The job already re-running this job's failed items, if any."""
    key, field = retry_binding(job_id)
    return r.hget(key, field)


def failed_items_to_retry(r, job: dict, new_job_id: str, blobs: BlobStore) -> tuple[list[dict], list[dict]]:
    """(items for a new ingest job, failed items that cannot be re-run) of a finished ingest job.

    An item failed when its outcome has an error or it has none (the job ended before it). Its
    source is sent again as it was: a URL or import-folder path is read again; uploaded bytes are
    copied to the new job's staging area while the old job's are still there (they go when a job
    succeeds, or with the sweeper), else the item is listed as lost (upload it again)."""
    params = job.get("params") or {}
    outcomes = {o["index"]: o for o in outcomes_so_far(r, job["id"]) if isinstance(o.get("index"), int)}
    retry: list[dict] = []
    lost: list[dict] = []
    for item in params.get("items") or []:
        i = int(item["index"])
        out = outcomes.get(i)
        if out is not None and not out.get("error"):
            continue
        source = dict(item.get("source") or {})
        if source.get("kind") == "stored":
            path = source.get("path") or ""
            if not path or not blobs.exists(path):
                lost.append(
                    {"index": i, "name": item.get("name"), "reason": "the uploaded bytes are gone: upload again"}
                )
                continue
            key = f"{staging_prefix(new_job_id)}{len(retry)}.bin"
            blobs.put(key, b"".join(blobs.stream(path)))
            source = {"kind": "stored", "path": key}
        retry.append({**item, "index": len(retry), "source": source, "retry_of": {"job_id": job["id"], "index": i}})
    return retry, lost


def summarise(r, job_id: str, n_items: int, n_docs: int, strict: bool = False) -> dict:
    raw = r.hgetall(OUTCOMES_KEY.format(job_id=job_id))
    items = [orjson.loads(raw[str(i)]) for i in range(n_items) if str(i) in raw]
    if strict:
        items = [refuse_exact_duplicate(o) for o in items]
    docs = [orjson.loads(raw[f"doc:{i}"]) for i in range(n_docs) if f"doc:{i}" in raw]
    result: dict[str, Any] = {
        "indexed": sum(1 for o in items if not o["error"] and not o["dedup"]),
        "dedup": sum(1 for o in items if o["dedup"]),
        "failed": sum(1 for o in items if o["error"]) + sum(1 for d in docs if d["error"]),
        "documents": sum(1 for d in docs if not d["error"]),
        "total": n_items + n_docs,
        "items": items,
    }
    if docs:
        result["document_items"] = docs
    if n_items == 1 and not n_docs and items:  # one image: the seed's flat fields too (dedup is 0/1)
        one = items[0]
        result.update(
            {
                k: one.get(k)
                for k in (
                    "id",
                    "hash_sha1",
                    "phash",
                    "file_path",
                    "image_url",
                    "dedup_of",
                    "distance",
                    "verifier_score",
                )
            }
        )
    return result


def run_ingest(
    ctx: JobHandle | None,
    *,
    items: list[dict] | None = None,
    documents: list[dict] | None = None,
    r=None,
    chroma=None,
    s: Settings | None = None,
    strict: bool = False,
) -> dict:
    """The whole job: images first, then documents; returns the aggregate result. With `strict`
    an exact duplicate is a failed item (CONFLICT) instead of a dedup."""
    from yana.clients import get_blobs, get_chroma, get_redis

    ctx = ctx or LocalJob()
    s = s or get_settings()
    r = r if r is not None else get_redis(s)
    chroma = chroma if chroma is not None else get_chroma(s)
    blobs = get_blobs(s)
    items, documents = items or [], documents or []
    total = len(items) + len(documents)
    ctx.progress("ingest", int(ctx.meta.get("cursor") or 0) + int(ctx.meta.get("doc_cursor") or 0), total)
    ingest_images(ctx, items, r=r, chroma=chroma, s=s, total=total, blobs=blobs)
    ingest_documents(ctx, documents, r=r, chroma=chroma, s=s, done_before=len(items), total=total)
    result = summarise(r, ctx.job_id, len(items), len(documents), strict=strict)
    # The job has ended: its staged uploads can go (the images are kept, content-addressed), but
    # those of failed items, which POST /v1/jobs/{id}/retry-failed can send again: the sweeper
    # removes them after STAGING_GRACE_S (sweep_staging), as it does for a job that ends otherwise.
    failed = {o["index"] for o in result["items"] if o.get("error")}
    if not failed:
        remove_staged(blobs, ctx.job_id)
    else:
        for item in items:
            src = item.get("source") or {}
            if int(item["index"]) not in failed and src.get("kind") == "stored" and src.get("path"):
                blobs.delete(src["path"])
    if total == 1 and result["failed"]:  # one item: its failure is the job's (code and message)
        err = (result["items"] or result["document_items"])[0]["error"]
        raise YanaError(err["code"], err["message"], 422, bool(err.get("retryable")))
    return result
