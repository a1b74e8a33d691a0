"""Webhook delivery task: one attempt per message; the schedule lives in Redis, not in Celery."""

from __future__ import annotations

from pipelines.runtime.webhooks import WebhookDispatcher
from tasks.registry import job_store
from workers.celery_app import app
from yana.clients import get_redis
from yana.settings import get_settings


def dispatcher() -> WebhookDispatcher:
    s = get_settings()
    return WebhookDispatcher(
        get_redis(),
        job_store(),
        secret=s.webhook_secret,
        allow=s.webhook_allow,
        timeout_s=s.webhook_timeout_s,
        backoff_base_s=s.webhook_backoff_base_s,
        backoff_max_s=s.webhook_backoff_max_s,
        max_attempts=s.webhook_max_attempts,
    )


@app.task(name="yana.webhooks.deliver", acks_late=True)
def deliver(job_id: str) -> bool:
    return dispatcher().deliver(job_id)
