"""The app a worker process runs (`celery -A tasks.worker worker`, which `yana worker` starts):
the one Celery app of workers/ with the worker's own components: maintenance (tasks.maintenance)
and a consumer that is back within ~2 s of the broker (workers.consumer). API processes and the
CLI send tasks through workers.celery_app and run neither."""

from __future__ import annotations

from tasks.maintenance import Maintenance
from workers.celery_app import app

app.steps["worker"].add(Maintenance)
app.conf.worker_consumer = "workers.consumer:FastReconnectConsumer"

__all__ = ["app"]
