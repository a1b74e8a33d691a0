"""Ingest job entry point (kind "ingest"): label images and text documents. Logic: pipelines.ingest.pipeline."""

from __future__ import annotations

from pipelines.ingest.pipeline import run_ingest
from tasks.ocr import send_read_ahead
from workers.base_task import JobContext, JobTask
from workers.celery_app import app
from yana.settings import get_settings


@app.task(base=JobTask, name="yana.ingest.run", bind=True)
def run(self, ctx: JobContext | None, items: list | None = None, documents: list | None = None, **params) -> dict:
    s = get_settings()
    if items and s.ocr_mode != "off":
        # The reading stage first, on its own queue: OCR workers read the batches ahead of this body
        # (which reads whatever they have not, waiting on a read in progress rather than repeating it).
        cursor = int((ctx.meta.get("cursor") if ctx else 0) or 0)
        send_read_ahead(items[cursor:], s.ingest_batch_size, s.ocr_mode)
    return run_ingest(ctx, items=items, documents=documents, **params)
