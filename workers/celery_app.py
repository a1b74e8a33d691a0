"""The one Celery app: broker/result config, queues and routing. Tasks live in tasks/."""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from workers.queues import QUEUES
from yana.clients import celery_redis_config, celery_transport_options
from yana.settings import get_settings

TASK_MODULES = [
    "tasks.demo",
    "tasks.webhooks",
    "tasks.ingest",
    "tasks.ocr",
    "tasks.reembed",
    "tasks.retrieve",
    "tasks.think",
    "tasks.memo",
]


def create_app() -> Celery:
    s = get_settings()
    # REDIS_URL may name Redis Sentinel: broker and results then follow the current master.
    url = celery_redis_config(s.redis_url)[0]
    app = Celery("yana", broker=url, backend=url, include=TASK_MODULES)
    transport = {
        **celery_transport_options(s.redis_url, s.redis_timeout_s),
        # Must exceed the longest task, or Redis hands an unacked message to a second worker.
        "visibility_timeout": s.visibility_timeout_s,
    }
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        timezone="UTC",
        enable_utc=True,
        # At-least-once delivery: ack after the body ran, requeue if the child died under it.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_track_started=True,
        task_time_limit=s.task_time_limit_s,
        task_soft_time_limit=s.task_time_limit_s - 30,
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        # Celery's own results are a convenience; the job record in Redis is the source of truth.
        result_expires=24 * 3600,
        broker_connection_retry_on_startup=True,
        worker_max_tasks_per_child=s.worker_max_tasks_per_child,
        worker_max_memory_per_child=s.worker_max_memory_per_child_kb,
        worker_concurrency=s.worker_concurrency,
        worker_send_task_events=True,  # Flower
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
        task_queues=[Queue(q) for q in QUEUES],
        task_default_queue="default",
        task_routes={
            "yana.ingest.*": {"queue": "ingest"},
            "yana.ocr.*": {"queue": "ocr"},
            "yana.reembed.*": {"queue": "reembed"},
            "yana.retrieve.*": {"queue": "retrieve"},
            "yana.think.*": {"queue": "think"},
            "yana.webhooks.*": {"queue": "webhooks"},
        },
    )
    return app


app = create_app()

# Process bootstrap (thread pinning, logging, model preload) hooks into signals; maintenance is the
# worker's bootstep that tasks/worker.py adds.
import workers.bootstrap  # noqa: E402,F401
