"""GET /metrics: request counters and latency by route template, job and queue gauges from Redis."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.stack import wait_job


def _samples(api) -> dict:
    r = api.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_requests_and_jobs(api):
    assert api.get("/v1/jobs/no-such-job").status_code == 404
    job_id = api.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0}).json()["job_id"]
    assert wait_job(api, job_id)["status"] == "succeeded"
    m = _samples(api)
    key = ("yana_http_requests_total", (("method", "GET"), ("route", "/v1/jobs/{job_id}"), ("status", "404")))
    assert m[key] >= 1  # labelled by the route template, not the raw path
    assert not any("no-such-job" in str(k) for k in m)
    assert m[("yana_http_request_duration_seconds_count", (("method", "POST"), ("route", "/v1/demo/sleep")))] >= 1
    assert m[("yana_jobs", (("kind", "demo.sleep"), ("status", "succeeded")))] >= 1
    for queue in ("default", "ingest", "webhooks"):
        assert m[("yana_queue_depth", (("queue", queue),))] >= 0
    assert ("yana_phash_index_size", ()) in m and ("yana_webhook_backlog", ()) in m
