"""Think job entry point (kind "think", queue "think"): the Librarian's loop. Logic: pipelines.think."""

from __future__ import annotations

from pipelines.think.job import run_think_job
from workers.base_task import JobContext, JobTask
from workers.celery_app import app


@app.task(base=JobTask, name="yana.think.run", bind=True)
def run(self, ctx: JobContext | None, **params) -> dict:
    return run_think_job(ctx, params)
