"""Retrieve job entry points: a whole retrieve (kind "retrieve") and the follow-up embedding of
chunks a request could not embed in time (kind "retrieve.embed"). Logic: pipelines.retrieve."""

from __future__ import annotations

from pipelines.retrieve import embed_chunk_texts, run_retrieve_job
from workers.base_task import JobContext, JobTask
from workers.celery_app import app


@app.task(base=JobTask, name="yana.retrieve.run", bind=True)
def run(self, ctx: JobContext | None, query: str, documents: list, options: dict) -> dict:
    return run_retrieve_job(ctx, query, documents, options)


@app.task(base=JobTask, name="yana.retrieve.embed", bind=True)
def embed(self, ctx: JobContext | None, texts: list) -> dict:
    return embed_chunk_texts(texts, progress=ctx.progress if ctx else None)
