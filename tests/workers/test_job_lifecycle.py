"""Job runtime end to end: real API process, real Redis, real Celery worker processes."""

from __future__ import annotations

import json
import time

from tests.stack import wait_for, wait_job


def submit(api, **body) -> dict:
    r = api.post("/v1/demo/sleep", json=body)
    assert r.status_code == 202, r.text
    return r.json()


def test_submit_progress_and_succeed(api):
    accepted = submit(api, steps=8, step_s=0.2)
    assert accepted["status"] == "queued" and accepted["status_url"].endswith(accepted["job_id"])
    job_id = accepted["job_id"]

    # Running and past its first progress report (the claim sets "running" before the body reports).
    running = wait_for(
        lambda: (
            (j := api.get(f"/v1/jobs/{job_id}").json())["status"] == "running"
            and (j["progress"] or {}).get("stage") == "sleeping"
            and j
        ),
        interval_s=0.05,
        what="running with progress",
    )
    assert running["progress"]["total"] == 8 and running["progress"]["stage"] == "sleeping"
    assert running["attempts"] == 1

    done = wait_job(api, job_id)
    assert done["status"] == "succeeded"
    assert done["result"] == {"steps": 8, "slept_s": 1.6}
    assert done["progress"] == {"stage": "sleeping", "done": 8, "total": 8}
    assert done["started_at"] and done["finished_at"] and done["created_at"] <= done["started_at"]
    assert done["run_id"] == accepted["run_id"] and done["trace_id"] == accepted["trace_id"]
    assert done["server_version"] and done["policy_version"]


def test_prefer_wait_blocks_until_final(api):
    job_id = submit(api, steps=2, step_s=0.3)["job_id"]
    t0 = time.monotonic()
    r = api.get(f"/v1/jobs/{job_id}", headers={"Prefer": "wait=20"})
    elapsed = time.monotonic() - t0
    assert r.json()["status"] == "succeeded"
    assert r.headers["preference-applied"] == "wait=20"
    assert elapsed < 15


def test_prefer_wait_returns_current_state_at_deadline(api):
    job_id = submit(api, steps=20, step_s=0.5)["job_id"]
    t0 = time.monotonic()
    r = api.get(f"/v1/jobs/{job_id}", headers={"Prefer": "wait=1"})
    assert 0.9 <= time.monotonic() - t0 < 5
    assert r.json()["status"] in ("queued", "running")
    api.delete(f"/v1/jobs/{job_id}")


def test_failure_carries_error_body(api):
    job = wait_job(api, submit(api, steps=1, step_s=0, fail=True)["job_id"])
    assert job["status"] == "failed"
    assert job["error"] == {"code": "DEMO_FAILURE", "message": "failure requested by the demo job", "retryable": False}


def test_correlation_reaches_job_record(api):
    r = api.post("/v1/demo/sleep", json={"steps": 0}, headers={"X-Run-Id": "run-abc", "X-Trace-Id": "trace-def"})
    job = wait_job(api, r.json()["job_id"])
    assert job["run_id"] == "run-abc" and job["trace_id"] == "trace-def"


def _worker_logged(stack, job_id: str, message: str) -> dict | None:
    """The worker's JSON-lines log record for job_id whose message starts with `message`, if written."""
    for svc in stack.workers():
        for line in svc.log_path.read_text(errors="replace").splitlines():
            if job_id in line and line.startswith("{"):
                rec = json.loads(line)
                if rec.get("msg", "").startswith(message):
                    return rec
    return None


def test_cancel_running_job(api, stack):
    job_id = submit(api, steps=200, step_s=0.1)["job_id"]  # 20 s if nothing stops it
    wait_for(lambda: api.get(f"/v1/jobs/{job_id}").json()["status"] == "running", what="running")
    r = api.delete(f"/v1/jobs/{job_id}")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    # The task body itself stopped (not just the record saying so): the worker logs it at its next
    # progress report, and the progress written so far stays where it was.
    wait_for(
        lambda: _worker_logged(stack, job_id, "job cancelled while running"),
        timeout_s=10,
        what="the worker to stop the cancelled task",
    )
    stopped_at = api.get(f"/v1/jobs/{job_id}").json()["progress"]["done"]
    assert stopped_at < 200
    # the worker is free again: a new job runs to the end, and the cancelled one did not move on
    assert wait_job(api, submit(api, steps=1, step_s=0)["job_id"])["status"] == "succeeded"
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "cancelled" and job["result"] is None
    assert job["progress"]["done"] == stopped_at


def test_cancel_queued_job_never_runs(api, stack):
    blocker = submit(api, steps=30, step_s=0.1)["job_id"]  # occupies the only worker slot
    queued = submit(api, steps=1, step_s=0)["job_id"]
    assert api.get(f"/v1/jobs/{queued}").json()["status"] == "queued"
    assert api.delete(f"/v1/jobs/{queued}").json()["status"] == "cancelled"
    assert api.delete(f"/v1/jobs/{queued}").status_code == 409
    wait_job(api, blocker)
    # The worker got the queued job's message and dropped it (a condition, not a pause).
    wait_for(lambda: _worker_logged(stack, queued, "job not run"), timeout_s=20, what="the worker to skip it")
    job = api.get(f"/v1/jobs/{queued}").json()
    assert job["status"] == "cancelled" and job["started_at"] is None and job["attempts"] == 0


def test_unknown_job_404_with_error_body(api):
    r = api.get("/v1/jobs/does-not-exist")
    assert r.status_code == 404
    body = r.json()
    assert body["error"]["code"] == "NOT_FOUND" and body["error"]["retryable"] is False
    assert body["run_id"] and body["trace_id"]
    assert api.delete("/v1/jobs/does-not-exist").status_code == 404


def test_list_filters_and_pages(api):
    ids = [submit(api, steps=0)["job_id"] for _ in range(5)]
    for j in ids:
        wait_job(api, j)
    failed = wait_job(api, submit(api, steps=0, fail=True)["job_id"])

    first = api.get("/v1/jobs", params={"kind": "demo.sleep", "limit": 3}).json()
    assert len(first["jobs"]) == 3 and first["next_cursor"] is not None
    second = api.get("/v1/jobs", params={"kind": "demo.sleep", "limit": 3, "cursor": first["next_cursor"]}).json()
    seen = [j["id"] for j in first["jobs"] + second["jobs"]]
    assert len(seen) == len(set(seen)), "pages overlap"
    assert seen[0] == failed["id"] and seen[1:6] == list(reversed(ids)), "newest first, no gaps"

    only_failed = api.get("/v1/jobs", params={"status": "failed", "limit": 50}).json()["jobs"]
    assert failed["id"] in [j["id"] for j in only_failed]
    assert all(j["status"] == "failed" for j in only_failed)
    assert api.get("/v1/jobs", params={"status": "bogus"}).status_code == 400
