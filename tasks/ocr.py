"""The `ocr` queue: read label images ahead of their ingest batch (logic:
pipelines.ingest.readings.read_ahead). OCR workers scale apart from the embedding ones
(`yana worker -Q ocr`); the ingest body reads any image no OCR worker has read yet, so a missing
or slow OCR worker delays nothing and loses nothing. At-least-once: a redelivered read finds the
sha1-keyed reading and reads nothing twice."""

from __future__ import annotations

from celery import Task

from pipelines.ingest.readings import read_ahead
from workers.celery_app import app

OCR_QUEUE = "ocr"
READ_TASK = "yana.ocr.read_batch"


@app.task(name=READ_TASK, bind=True, ignore_result=True)
def read_batch(self: Task, items: list | None = None) -> int:
    from yana.clients import get_blobs, get_redis
    from yana.settings import get_settings

    s = get_settings()
    if s.ocr_mode == "off":
        return 0
    return read_ahead(items or [], r=get_redis(s), s=s, blobs=get_blobs(s))


def send_read_ahead(items: list[dict], batch_size: int) -> int:
    """One read task per ingest batch on queue `ocr`. Returns how many were sent."""
    n = 0
    for start in range(0, len(items), max(1, batch_size)):
        batch = [
            {"index": it.get("index"), "source": it.get("source")}
            for it in items[start : start + batch_size]
            if (it.get("source") or {}).get("kind") in ("stored", "file")
        ]
        if batch:
            app.send_task(READ_TASK, kwargs={"items": batch}, queue=OCR_QUEUE)
            n += 1
    return n
