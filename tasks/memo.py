"""Memo job entry point: the chunks of a long memo left unembedded when /memo/save answered
(kind "memo.index"). Logic: pipelines.memo.service.index_memo_chunks."""

from __future__ import annotations

from pipelines.memo.service import index_memo_chunks
from workers.base_task import JobContext, JobTask
from workers.celery_app import app
from yana.clients import get_chroma, get_redis


@app.task(base=JobTask, name="yana.memo.index", bind=True)
def index(self, ctx: JobContext | None, **params) -> dict:
    return index_memo_chunks(get_redis(), get_chroma(), **params, progress=ctx.progress if ctx else None)
