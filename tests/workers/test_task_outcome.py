"""Monitoring tells a job with failed items from a clean one: the Celery task's result (what
Flower shows) says "succeeded with failed items"."""

from __future__ import annotations

import base64
import io

from PIL import Image

from tests.stack import wait_for, wait_job


def _png(color) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_task_result_shows_failed_items(api, redis_client):
    from workers.celery_app import app

    corrupt = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()
    r = api.post("/v1/ingest", json={"items": [{"image_base64": _png((10, 200, 30))}, {"image_base64": corrupt}]})
    assert r.status_code == 202, r.text
    job = wait_job(api, r.json()["job_id"], 120)
    failed = job["result"]["failed"]
    assert job["status"] == "succeeded" and failed >= 1, job
    task_id = redis_client.hget(f"yana:job:{job['id']}", "task_id")
    assert task_id
    outcome = wait_for(lambda: app.AsyncResult(task_id).result, timeout_s=10, what="the task result")
    assert outcome.startswith(f"succeeded with failed items: {failed} of"), outcome
