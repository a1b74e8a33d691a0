"""Think job entry point (kind "think", queue "think"): the Librarian's loop. Logic: pipelines.think.

pipelines.think (langgraph, the OpenAI client: ~120 MB and seconds of imports) is imported by the
first think job, not by every worker as it starts: a worker that never thinks never pays for it.
It is imported before the job is claimed (JobTask.body_modules), where a cancel cannot interrupt it."""

from __future__ import annotations

from workers.base_task import JobContext, JobTask
from workers.celery_app import app


@app.task(base=JobTask, name="yana.think.run", bind=True, body_modules=("pipelines.think.job",))
def run(self, ctx: JobContext | None, **params) -> dict:
    from pipelines.think.job import run_think_job

    return run_think_job(ctx, params)
