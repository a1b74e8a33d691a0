"""Webhooks end to end: signed delivery, exactly one per webhook-id, retry until the receiver is back."""

from __future__ import annotations

import time

from tests.stack import wait_for, wait_job
from tests.webhook_receiver import Receiver
from yana.processes import free_port
from yana.settings import Settings


def test_signed_delivery_exactly_once(api):
    secret = Settings().webhook_secret
    rx = Receiver(secret)
    try:
        r = api.post(
            "/v1/demo/sleep",
            json={"steps": 1, "step_s": 0, "callback_url": rx.url},
            headers={"X-Run-Id": "run-hook", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
        )
        job_id = r.json()["job_id"]
        wait_job(api, job_id)
        wait_for(lambda: rx.deliveries, what="a delivery")
        time.sleep(2.0)  # would-be duplicates have time to arrive
        assert rx.rejected == []
        assert len(rx.deliveries) == 1
        d = rx.deliveries[0]
        assert d["headers"]["webhook-id"] == f"msg_{job_id}"
        assert d["headers"]["x-run-id"] == "run-hook"
        assert d["headers"]["traceparent"].split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert d["payload"]["type"] == "job.succeeded"
        assert d["payload"]["data"]["id"] == job_id and d["payload"]["data"]["status"] == "succeeded"
        job = wait_for(lambda: (j := api.get(f"/v1/jobs/{job_id}").json())["webhook"] and j["webhook"]["delivered"] and j)
        assert [a["status"] for a in job["webhook"]["attempts"]] == [200]
    finally:
        rx.close()


def test_receiver_down_then_back_gets_delivery(api):
    secret = Settings().webhook_secret
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    job_id = api.post("/v1/demo/sleep", json={"steps": 0, "callback_url": url}).json()["job_id"]
    wait_job(api, job_id)
    failed = wait_for(
        lambda: (w := api.get(f"/v1/jobs/{job_id}").json()["webhook"]) and len(w["attempts"]) >= 2 and w,
        timeout_s=30, what="failed attempts",
    )
    assert not failed["delivered"] and all("error" in a for a in failed["attempts"])
    rx = Receiver(secret, port=port)
    try:
        wait_for(lambda: rx.deliveries, timeout_s=30, what="delivery after receiver came back")
        time.sleep(2.0)
        assert len(rx.deliveries) == 1
        hook = wait_for(lambda: (w := api.get(f"/v1/jobs/{job_id}").json()["webhook"])["delivered"] and w)
        assert hook["attempts"][-1]["status"] == 200 and len(hook["attempts"]) >= 3
    finally:
        rx.close()


def test_receiver_answering_5xx_is_retried(api):
    rx = Receiver(Settings().webhook_secret, status=503)
    try:
        job_id = api.post("/v1/demo/sleep", json={"steps": 0, "callback_url": rx.url}).json()["job_id"]
        wait_for(lambda: len(rx.deliveries) >= 2, timeout_s=30, what="retries after 503")
        rx.status = 200
        hook = wait_for(lambda: (w := api.get(f"/v1/jobs/{job_id}").json()["webhook"])["delivered"] and w, timeout_s=30)
        assert hook["attempts"][0]["status"] == 503 and hook["attempts"][-1]["status"] == 200
        ids = {d["headers"]["webhook-id"] for d in rx.deliveries}
        assert ids == {f"msg_{job_id}"}, "retries reuse the webhook-id so receivers can de-duplicate"
    finally:
        rx.close()


def test_private_callback_refused_at_submit(api):
    for url in ("http://10.1.2.3/hook", "http://169.254.169.254/latest", "http://192.168.0.10:8080/x", "ftp://example.org/x"):
        r = api.post("/v1/demo/sleep", json={"steps": 0, "callback_url": url})
        assert r.status_code == 400, (url, r.text)
        assert r.json()["error"]["code"] == "BAD_REQUEST"
