"""POST /v1/think: the whole loop as a job on the `think` queue, against our hybrid search."""

from __future__ import annotations

import httpx
import pytest

from tests.api.think_support import drop_world, make_world, step_body
from tests.stack import wait_for, wait_job
from tests.webhook_receiver import Receiver
from yana.settings import Settings


@pytest.fixture(scope="module")
def world(stack):
    w = make_world()
    yield w
    drop_world(w)


@pytest.fixture(scope="module")
def client(stack):
    svc = stack.start_api(name="api-think-job", RATE_LIMIT="10000/second", RATE_BURST="10000")
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        yield c


def test_job_runs_the_loop_and_returns_complete(client, world):
    q = f"{world['north']}と{world['south']}の辛口を比べたい"
    resp = client.post("/v1/think", json=step_body(world, q, request_id="job-1"), headers={"X-Run-Id": "run-think-1"})
    assert resp.status_code == 202, resp.text
    acc = resp.json()
    assert acc["kind"] == "think" and acc["run_id"] == "run-think-1"
    job = wait_job(client, acc["job_id"])
    assert job["status"] == "succeeded", job
    res = job["result"]
    assert res["action"] == "COMPLETE" and res["request_id"] == "job-1"
    ids = {e["document_id"] for e in res["evidence"]}
    assert world["ids"]["s_dry"] in ids and len(ids) == 2
    assert res["history"][0]["round"] == 1 and res["history"][0]["queries"]
    assert job["progress"]["stage"] == "done" and job["progress"]["done"] == 1


def test_job_without_request_id_is_accepted_and_gets_one(client, world):
    # issue 25 item 4: a job POST without request_id answered 400; the id is generated like a trace id
    body = step_body(world, f"{world['north']}の辛口")
    del body["request_id"]
    resp = client.post("/v1/think", json=body)
    assert resp.status_code == 202, resp.text
    job = wait_job(client, resp.json()["job_id"])
    assert job["status"] == "succeeded", job
    assert job["result"]["request_id"].startswith("req-") and job["result"]["action"] == "COMPLETE"
    ids = {e["document_id"] for e in job["result"]["evidence"]}
    assert ids & {world["ids"]["n_dry"], world["ids"]["n_dry_copy"]}


def test_progress_is_recorded_per_round(client, world, redis_client):
    # a gap that is never filled: three rounds, each recorded as {stage: "round n/3", queries}
    q = f"{world['north']}の甘口と{world['south']}の甘口"
    acc = client.post("/v1/think", json=step_body(world, q)).json()
    job_id = acc["job_id"]
    stages: set[str] = set()

    def seen_all():
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["progress"]:
            stages.add(job["progress"]["stage"])
            if job["progress"]["stage"].startswith("round"):
                assert job["progress"]["queries"], job["progress"]
        return job["status"] in ("succeeded", "failed", "cancelled") and job

    job = wait_for(seen_all, timeout_s=60, interval_s=0.01, what="think job")
    assert job["status"] == "succeeded"
    assert job["result"]["action"] == "COMPLETE" and job["result"]["missing"] == ["a2"]
    assert [h["round"] for h in job["result"]["history"]] == [1, 2, 3]
    assert stages <= {"queued", "planning", "round 1/3", "round 2/3", "round 3/3", "done"}
    assert "done" in stages


def test_prefer_wait_answers_a_small_request_within_the_budget(client, world):
    q = f"{world['north']}の辛口"
    body = step_body(world, q, constraints={"latency_budget_ms": 5000})
    resp = client.post("/v1/think", json=body, headers={"Prefer": "wait=10"})
    assert resp.status_code == 200, resp.text
    job = resp.json()
    assert job["status"] == "succeeded" and job["result"]["action"] == "COMPLETE"
    assert resp.headers["Preference-Applied"] == "wait=10"


def test_webhook_carries_the_result(client, world):
    rx = Receiver(Settings().webhook_secret)
    try:
        q = f"{world['south']}の辛口"
        acc = client.post("/v1/think", json={**step_body(world, q), "callback_url": rx.url}).json()
        wait_for(lambda: rx.deliveries, timeout_s=60, what="webhook delivery")
        payload = rx.deliveries[0]["payload"]["data"]
        assert payload["id"] == acc["job_id"] and payload["status"] == "succeeded"
        assert payload["result"]["action"] == "COMPLETE"
        assert [e["document_id"] for e in payload["result"]["evidence"]] == [world["ids"]["s_dry"]]
        assert rx.rejected == []
    finally:
        rx.close()


def test_bad_job_body_is_400(client):
    # a missing request_id is no longer bad (it is generated); a missing question or a bad field is
    for body in ({"request_id": "r"}, {"user_query": "x", "constraints": {"max_loops": 0}}, {"user_query": ""}):
        resp = client.post("/v1/think", json=body)
        assert resp.status_code == 400, (body, resp.text)
        assert resp.json()["error"]["code"] == "BAD_REQUEST"
