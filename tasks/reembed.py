"""Re-embed job entry point (kind "reembed"): new collection for a model, then an alias swap.
Logic: pipelines.reembed.job."""

from __future__ import annotations

from pipelines.reembed.job import run_reembed
from workers.base_task import JobContext, JobTask
from workers.celery_app import app


@app.task(base=JobTask, name="yana.reembed.run", bind=True)
def run(self, ctx: JobContext | None, model: str, **params) -> dict:
    return run_reembed(ctx, model=model, **params)
