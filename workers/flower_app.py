"""The Celery app Flower runs with: the broker, result backend and queues only.

Flower needs to reach the broker and know the queue names (its Broker tab); it learns the tasks
and workers from their events. Loading workers.celery_app instead would import every task module
(numba kernels, chat graph, LLM clients...) into Flower's process for nothing (~230 MB RSS)."""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from workers.queues import QUEUES
from yana.clients import celery_redis_config, celery_transport_options
from yana.settings import get_settings


def create_app() -> Celery:
    s = get_settings()
    url = celery_redis_config(s.redis_url)[0]
    app = Celery("yana", broker=url, backend=url)
    transport = celery_transport_options(s.redis_url, s.redis_timeout_s)
    app.conf.update(
        accept_content=["json"],
        result_accept_content=["json"],
        timezone="UTC",
        enable_utc=True,
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        broker_connection_retry_on_startup=True,
        task_queues=[Queue(q) for q in QUEUES],
        task_default_queue="default",
    )
    return app


app = create_app()
