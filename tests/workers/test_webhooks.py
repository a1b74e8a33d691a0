"""Webhooks end to end: signed delivery, exactly one per webhook-id, retry until the receiver is back."""

from __future__ import annotations

from cli.processes import free_port
from pipelines.runtime.jobs import WEBHOOKS_DUE
from tests.stack import wait_for, wait_job
from tests.webhook_receiver import Receiver
from yana.settings import Settings


def _closed(api, redis_client, job_id: str) -> dict | None:
    """The job's webhook state once delivery is over: recorded as delivered and nothing left
    scheduled, so no later attempt can POST again (a late claim sees `delivered` and stops)."""
    hook = api.get(f"/v1/jobs/{job_id}").json()["webhook"]
    if hook and hook["delivered"] and redis_client.zscore(WEBHOOKS_DUE, job_id) is None:
        return hook
    return None


def test_signed_delivery_exactly_once(api, redis_client):
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
        hook = wait_for(lambda: _closed(api, redis_client, job_id), what="delivery closed")
        assert [a["status"] for a in hook["attempts"]] == [200]
        assert rx.rejected == []
        assert len(rx.deliveries) == 1
        d = rx.deliveries[0]
        assert d["headers"]["webhook-id"] == f"msg_{job_id}"
        assert d["headers"]["x-run-id"] == "run-hook"
        assert d["headers"]["traceparent"].split("-")[1] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert d["payload"]["type"] == "job.succeeded"
        assert d["payload"]["data"]["id"] == job_id and d["payload"]["data"]["status"] == "succeeded"
    finally:
        rx.close()


def test_receiver_down_then_back_gets_delivery(api, redis_client):
    secret = Settings().webhook_secret
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    job_id = api.post("/v1/demo/sleep", json={"steps": 0, "callback_url": url}).json()["job_id"]
    wait_job(api, job_id)
    failed = wait_for(
        lambda: (w := api.get(f"/v1/jobs/{job_id}").json()["webhook"]) and len(w["attempts"]) >= 2 and w,
        timeout_s=30,
        what="failed attempts",
    )
    assert not failed["delivered"] and all("error" in a for a in failed["attempts"])
    rx = Receiver(secret, port=port)
    try:
        hook = wait_for(
            lambda: _closed(api, redis_client, job_id), timeout_s=30, what="delivery after receiver came back"
        )
        assert len(rx.deliveries) == 1
        assert hook["attempts"][-1]["status"] == 200 and len(hook["attempts"]) >= 3
        assert [a for a in hook["attempts"] if a.get("status") == 200] == hook["attempts"][-1:]
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
    for url in (
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest",
        "http://192.168.0.10:8080/x",
        "ftp://example.org/x",
    ):
        r = api.post("/v1/demo/sleep", json={"steps": 0, "callback_url": url})
        assert r.status_code == 400, (url, r.text)
        assert r.json()["error"]["code"] == "BAD_REQUEST"


def test_a_failing_delivery_is_recorded_and_bounded_whatever_the_cause(redis_client):
    """An unusable secret (as an empty WEBHOOK_SECRET once was) fails the attempt like a network
    error would: recorded on the job, rescheduled, and finally given up."""
    from pipelines.runtime.jobs import WEBHOOKS_DUE, JobStore
    from pipelines.runtime.webhooks import WebhookDispatcher

    store = JobStore(redis_client)
    job = store.create("demo.sleep", {}, callback_url="http://127.0.0.1:9/hook")
    hooks = WebhookDispatcher(
        redis_client,
        store,
        secret="whsec_",
        allow=["127.0.0.0/8"],
        timeout_s=1,
        backoff_base_s=0.01,
        backoff_max_s=0.01,
        max_attempts=2,
    )
    assert hooks.deliver(job["id"]) is False
    assert hooks.deliver(job["id"]) is False
    attempts = store.get(job["id"])["webhook"]["attempts"]
    assert len(attempts) == 2 and "secret" in attempts[0]["error"] and attempts[-1]["final"]
    assert redis_client.zscore(WEBHOOKS_DUE, job["id"]) is None


def test_an_empty_webhook_secret_refuses_to_start(monkeypatch):
    import pytest
    from pydantic import ValidationError

    monkeypatch.setenv("WEBHOOK_SECRET", "")
    with pytest.raises(ValidationError, match="WEBHOOK_SECRET"):
        Settings()


def test_the_public_default_secret_is_flagged_where_it_matters():
    s = Settings(webhook_secret=Settings.model_fields["webhook_secret"].default)
    assert s.insecure_webhook_secret("127.0.0.1") is None
    assert "WEBHOOK_SECRET" in s.insecure_webhook_secret("0.0.0.0")
    assert "WEBHOOK_SECRET" in Settings(webhook_secret=s.webhook_secret, auth_enabled=True).insecure_webhook_secret()
    assert Settings(webhook_secret="whsec_c2VjcmV0LXNlY3JldA==").insecure_webhook_secret("0.0.0.0") is None


def test_a_claimed_delivery_whose_message_died_with_a_worker_main_comes_back_within_30s(api, redis_client):
    """Issue 26 #4: the dispatcher claims a due entry (pushes it forward by its lease) and sends a
    deliver message; if the worker main holding that message is killed, only the lease brings the
    entry back. It was 120 s: a webhook arrived 122 s after its job. The worst case now stays
    within the 30 s recovery goal."""
    import time

    from pipelines.runtime.jobs import JobStore
    from tasks.webhooks import dispatcher

    rx = Receiver(Settings().webhook_secret)
    try:
        from pipelines.runtime.jobs import ACTIVE, job_key, now_iso

        job = JobStore(redis_client).create("demo.sleep", {}, callback_url=rx.url)
        # In one step: the job ended, and its entry was claimed by a dispatcher whose deliver
        # message was then lost with its worker main (no message names the entry any more).
        t0 = time.time()
        with redis_client.pipeline(transaction=True) as p:
            p.hset(job_key(job["id"]), mapping={"status": "succeeded", "finished_at": now_iso(), "result": "{}"})
            p.srem(ACTIVE, job["id"])
            p.zadd(WEBHOOKS_DUE, {job["id"]: int(t0 * 1000) + dispatcher().lease_ms})
            p.execute()
        wait_for(lambda: rx.deliveries, timeout_s=40, interval_s=0.2, what="the delivery")
        late = rx.deliveries[0]["at"] - t0
        print(f"delivered {late:.1f} s after the lost claim")
        assert late <= 30, late
        wait_for(lambda: _closed(api, redis_client, job["id"]), what="delivery closed")
        assert len(rx.deliveries) == 1
    finally:
        rx.close()
