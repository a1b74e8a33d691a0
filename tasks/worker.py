"""The app a worker process runs (`celery -A tasks.worker worker`, which `yana worker` starts):
the one Celery app of workers/ with the worker's own component, maintenance (tasks.maintenance).
API processes and the CLI send tasks through workers.celery_app and run no maintenance."""

from __future__ import annotations

from tasks.maintenance import Maintenance
from workers.celery_app import app

app.steps["worker"].add(Maintenance)

__all__ = ["app"]
