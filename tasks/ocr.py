"""The `ocr` queue: read label images ahead of their ingest batch (logic:
pipelines.ingest.readings.read_ahead), and the deferred reads' background pass (logic:
pipelines.ingest.deferred). OCR workers scale apart from the embedding ones
(`yana worker -Q ocr`); the ingest body reads any image no OCR worker has read yet, so a missing
or slow OCR worker delays nothing and loses nothing. At-least-once: a redelivered read finds the
sha1-keyed reading and reads nothing twice."""

from __future__ import annotations

from celery import Task

from pipelines.ingest import deferred
from pipelines.ingest.readings import read_ahead
from workers.celery_app import app
from workers.queues import queue_lists

OCR_QUEUE = "ocr"
READ_TASK = "yana.ocr.read_batch"
DEFERRED_TASK = "yana.ocr.read_deferred"
DEFERRED_BATCH = 16  # labels per background-pass task
# Claimed reads wait in the ocr queue while it holds more messages than this: with no OCR worker
# consuming it, reads claimed again after their lease would otherwise pile up there.
DEFERRED_MAX_WAITING = 8


@app.task(name=READ_TASK, bind=True, ignore_result=True)
def read_batch(self: Task, items: list | None = None) -> int:
    from yana.clients import get_blobs, get_redis
    from yana.settings import get_settings

    s = get_settings()
    if s.ocr_mode == "off":
        return 0
    return read_ahead(items or [], r=get_redis(s), s=s, blobs=get_blobs(s))


@app.task(name=DEFERRED_TASK, bind=True, ignore_result=True)
def read_deferred(self: Task, label_ids: list | None = None) -> dict:
    from pipelines.neardup.index import shared_index
    from yana.clients import get_blobs, get_chroma, get_redis
    from yana.settings import get_settings

    s = get_settings()
    r = get_redis(s)
    return deferred.read_deferred(
        [str(x) for x in label_ids or []],
        r=r,
        chroma=get_chroma(s),
        blobs=get_blobs(s),
        s=s,
        index=shared_index(r, s.phash_threshold, s.phash_candidate_radius),
    )


def send_deferred_reads(r, s) -> int:
    """The deferred reads that are due and may run now, sent to queue `ocr` (the workers'
    maintenance loop calls this every tick). Returns how many labels were sent."""
    if s.ocr_mode != "auto":
        return 0
    with r.pipeline(transaction=False) as p:
        for key in queue_lists(OCR_QUEUE):
            p.llen(key)
        if sum(p.execute()) > DEFERRED_MAX_WAITING:
            return 0
    due = deferred.claim_due(r, s)
    for start in range(0, len(due), DEFERRED_BATCH):
        app.send_task(DEFERRED_TASK, kwargs={"label_ids": due[start : start + DEFERRED_BATCH]}, queue=OCR_QUEUE)
    return len(due)


def send_read_ahead(items: list[dict], batch_size: int, ocr_mode: str = "always") -> int:
    """One read task per ingest batch on queue `ocr`. Returns how many were sent. With
    OCR_MODE=auto an image sent with full uploader fields is read only if its decision needs it
    (pipelines.ingest.deferred): not ahead."""
    n = 0
    for start in range(0, len(items), max(1, batch_size)):
        batch = [
            {"index": it.get("index"), "source": it.get("source")}
            for it in items[start : start + batch_size]
            if (it.get("source") or {}).get("kind") in ("stored", "file")
            and not (ocr_mode == "auto" and deferred.has_full_fields(it.get("fields") or {}))
        ]
        if batch:
            app.send_task(READ_TASK, kwargs={"items": batch}, queue=OCR_QUEUE)
            n += 1
    return n
