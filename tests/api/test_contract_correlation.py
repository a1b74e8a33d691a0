"""Correlation: X-Run-Id / X-Trace-Id / W3C trace context in, echoed out on every response, in the
JSON-lines access log, and carried into job records, Celery task headers and worker logs."""

from __future__ import annotations

import io
import json
import logging
import re
import time

import pytest

from api.contract.correlation import parse_tracestate
from tests.api.contract_support import contract_server
from tests.stack import wait_for, wait_job
from yana.logging import JsonLinesFormatter

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID_TP = f"00-{TRACE}-{PARENT}-01"
TP_RE = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@pytest.fixture(scope="module")
def client(stack):
    with contract_server(REDIS_URL=stack.redis_url, RATE_BURST="100000", RATE_LIMIT="1000/second") as c:
        yield c


def _ids(r):
    return r.headers["x-run-id"], r.headers["x-trace-id"], r.headers["traceparent"]


@pytest.mark.parametrize(
    "path,status", [("/v1/jobs", 200), ("/v1/jobs/nope", 404), ("/test/crash", 500), ("/test/slow?s=1", 408)]
)
def test_ids_are_echoed_on_success_and_on_error(client, path, status):
    t0 = time.perf_counter()
    r = client.get(path, headers={"X-Run-Id": "duo-run.42:a", "X-Trace-Id": "trace-xyz_1"})
    wall_ms = (time.perf_counter() - t0) * 1000
    assert r.status_code == status
    assert r.headers["x-run-id"] == "duo-run.42:a"
    assert r.headers["x-trace-id"] == "trace-xyz_1"
    assert TP_RE.match(r.headers["traceparent"])
    assert 0 < float(r.headers["x-request-duration-ms"]) <= wall_ms  # the server's share of what we waited
    if status >= 400:
        body = r.json()
        assert (body["run_id"], body["trace_id"]) == ("duo-run.42:a", "trace-xyz_1")


def test_duration_header_measures_the_request(client):
    t0 = time.perf_counter()
    r = client.get("/test/sleepy", params={"s": 0.2})
    wall_ms = (time.perf_counter() - t0) * 1000
    assert r.status_code == 200
    assert 200 <= float(r.headers["x-request-duration-ms"]) <= wall_ms


def test_ids_are_generated_when_absent(client):
    a, b = client.get("/v1/jobs"), client.get("/v1/jobs")
    run_a, trace_a, tp_a = _ids(a)
    assert run_a and run_a != b.headers["x-run-id"]
    # Without X-Trace-Id the trace id is the W3C trace-id of the echoed traceparent.
    assert TP_RE.match(tp_a).group(1) == trace_a


@pytest.mark.parametrize("bad", ["has space", "x" * 129, "semi;colon", "<script>", "ü-nicode".encode()])
def test_bad_ids_are_replaced(client, bad):
    r = client.get("/v1/jobs", headers={"X-Run-Id": bad, "X-Trace-Id": bad})
    run_id, trace_id, _ = _ids(r)
    assert bad not in (run_id, trace_id, run_id.encode(), trace_id.encode())
    assert re.fullmatch(r"[A-Za-z0-9._:\-]{1,128}", run_id) and re.fullmatch(r"[0-9a-f]{32}", trace_id)
    assert client.get("/v1/jobs", headers={"X-Run-Id": "y" * 128}).headers["x-run-id"] == "y" * 128


def test_valid_traceparent_continues_the_trace(client):
    r = client.get(
        "/v1/jobs", headers={"traceparent": VALID_TP, "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}
    )
    trace, span, flags = TP_RE.match(r.headers["traceparent"]).groups()
    assert trace == TRACE and flags == "01"
    assert span != PARENT  # this server's span, the parent of what it calls next
    assert r.headers["x-trace-id"] == TRACE
    assert r.headers["tracestate"] == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    # Flags are kept (not sampled stays not sampled); a future version with extra fields is valid.
    r = client.get("/v1/jobs", headers={"traceparent": f"00-{TRACE}-{PARENT}-00"})
    assert r.headers["traceparent"].endswith("-00")
    r = client.get("/v1/jobs", headers={"traceparent": f"cc-{TRACE}-{PARENT}-01-what-the-future-holds"})
    assert TP_RE.match(r.headers["traceparent"]).group(1) == TRACE
    # An explicit X-Trace-Id wins for the trace id; the W3C trace still continues.
    r = client.get("/v1/jobs", headers={"traceparent": VALID_TP, "X-Trace-Id": "duo-trace"})
    assert r.headers["x-trace-id"] == "duo-trace" and TRACE in r.headers["traceparent"]


@pytest.mark.parametrize(
    "bad",
    [
        f"ff-{TRACE}-{PARENT}-01",  # version ff is invalid
        f"00-{'0' * 32}-{PARENT}-01",  # all-zero trace-id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent-id
        f"00-{TRACE.upper()}-{PARENT}-01",  # uppercase hex
        f"00-{TRACE}-{PARENT}-01-extra",  # version 00 must be exactly 55 chars
        f"00-{TRACE[:-1]}-{PARENT}-01",  # short trace-id
        f"00_{TRACE}_{PARENT}_01",  # wrong separators
        "garbage",
    ],
)
def test_invalid_traceparent_starts_a_new_trace(client, bad):
    r = client.get("/v1/jobs", headers={"traceparent": bad, "tracestate": "congo=t61rcWkgMzE"})
    trace, _, flags = TP_RE.match(r.headers["traceparent"]).groups()
    assert trace != TRACE and trace != "0" * 32
    assert r.headers["x-trace-id"] == trace
    assert "tracestate" not in r.headers  # tracestate never outlives its traceparent


def test_two_traceparent_headers_are_invalid(client):
    r = client.get("/v1/jobs", headers=[("traceparent", VALID_TP), ("traceparent", VALID_TP)])
    assert TRACE not in r.headers["traceparent"]


@pytest.mark.parametrize(
    "value,expected",
    [
        ("congo=t61rcWkgMzE", "congo=t61rcWkgMzE"),
        ("a=1 , ,b=2", "a=1,b=2"),  # OWS and empty members are allowed
        ("tenant@vendor=x", "tenant@vendor=x"),
        ("a=1,a=2", None),  # duplicate key
        ("A=1", None),  # uppercase key
        ("a=", None),  # empty value
        ("a=b=c", None),  # '=' in value
        ("novalue", None),
        (",".join(f"k{i}=v" for i in range(33)), None),  # more than 32 members
    ],
)
def test_tracestate_validation(value, expected):
    assert parse_tracestate([value]) == expected


def test_access_log_is_one_json_line_with_ids_route_status_duration(client):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonLinesFormatter())
    access = logging.getLogger("yana.access")
    access.addHandler(handler)
    old_level = access.level
    access.setLevel(logging.INFO)
    try:
        client.get("/v1/jobs/abc", headers={"X-Run-Id": "log-run-1", "X-Trace-Id": "log-trace-1"})
        client.get("/test/crash", headers={"X-Run-Id": "log-run-2"})
    finally:
        access.removeHandler(handler)
        access.setLevel(old_level)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    first = next(r for r in records if r.get("run_id") == "log-run-1")
    assert first["trace_id"] == "log-trace-1"
    assert first["route"] == "/v1/jobs/{job_id}" and first["path"] == "/v1/jobs/abc"
    assert first["status"] == 404 and first["method"] == "GET" and first["operation_id"] == "get_job"
    assert isinstance(first["duration_ms"], float)
    second = next(r for r in records if r.get("run_id") == "log-run-2")
    assert second["status"] == 500 and second["route"] == "/test/crash"
    assert len([r for r in records if r.get("run_id") == "log-run-1"]) == 1


def test_ids_reach_job_record_task_headers_and_worker_log(client, stack):
    from celery.signals import before_task_publish

    from tasks import registry

    published: list[dict] = []

    def capture(sender=None, headers=None, **_):
        published.append({"task": sender, **(headers or {})})

    before_task_publish.connect(capture, weak=False)
    headers = {"X-Run-Id": "corr-run-77", "X-Trace-Id": "corr-trace-77", "traceparent": VALID_TP}
    try:
        r = client.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0}, headers=headers)
    finally:
        before_task_publish.disconnect(capture)
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["run_id"] == "corr-run-77" and accepted["trace_id"] == "corr-trace-77"
    record = registry.job_store().get(accepted["job_id"])
    assert record["run_id"] == "corr-run-77" and record["trace_id"] == "corr-trace-77"
    # The job carries the trace of the request, with this server's span as its parent.
    assert record["traceparent"] == r.headers["traceparent"]
    # The Celery message's headers carry them to the worker.
    sent = [p for p in published if p["task"] == "yana.demo.sleep"]
    assert sent and sent[0]["run_id"] == "corr-run-77" and sent[0]["trace_id"] == "corr-trace-77"
    assert sent[0]["traceparent"] == r.headers["traceparent"]
    job = wait_job(client, accepted["job_id"])
    assert job["status"] == "succeeded", job
    assert job["run_id"] == "corr-run-77"

    # The worker ran it under the same ids (its JSON-lines log says so).
    def worker_line():
        for svc in stack.workers():
            for line in svc.log_path.read_text(errors="replace").splitlines():
                if accepted["job_id"] in line and line.startswith("{"):
                    rec = json.loads(line)
                    if rec.get("run_id") == "corr-run-77":
                        return rec
        return None

    rec = wait_for(worker_line, timeout_s=20, what="worker log line with the run id")
    assert rec["trace_id"] == "corr-trace-77"
