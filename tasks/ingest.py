"""Ingest job entry point (kind "ingest"): label images and text documents. Logic: pipelines.ingest.pipeline."""

from __future__ import annotations

from pipelines.ingest.pipeline import run_ingest
from workers.base_task import JobContext, JobTask
from workers.celery_app import app


@app.task(base=JobTask, name="yana.ingest.run", bind=True)
def run(self, ctx: JobContext | None, items: list | None = None, documents: list | None = None, **params) -> dict:
    return run_ingest(ctx, items=items, documents=documents, **params)
