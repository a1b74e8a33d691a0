"""DELETE /v1/jobs/{id} on a running think job: the job ends `cancelled` at once and stays so; the
worker stops the loop (its search is stalled on a paused Chroma, so the job cannot finish by
itself first). A private stack: pausing the shared Chroma would stall other tests."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.stack import start_stack, wait_for, wait_job
from tests.tasks.test_ingest_jobs import _files, distinct_labels

pytestmark = pytest.mark.stack  # starts its own processes (Redis, workers...): the stack tier


@pytest.fixture(scope="module")
def pstack(tmp_path_factory):
    s = start_stack(tmp_path_factory.mktemp("think-cancel"), CHROMA_TIMEOUT_S="30")
    yield s
    chroma = s.get("chroma")
    if chroma.alive():
        os.killpg(chroma.proc.pid, signal.SIGCONT)
    s.stop()


def test_delete_cancels_a_running_think_job(pstack):
    chroma = pstack.get("chroma")
    with httpx.Client(base_url=pstack.api_url, timeout=60) as client:
        r = client.post("/v1/ingest", files=_files(distinct_labels(4, seed=5), "think"), data={"category": "sake"})
        assert r.status_code == 202, r.text
        assert wait_job(client, r.json()["job_id"], timeout_s=180)["status"] == "succeeded"

        os.killpg(chroma.proc.pid, signal.SIGSTOP)
        try:
            body = {
                "request_id": "cancel-1",
                "user_query": "小樽と山形の辛口を比べたい",
                "subject_id": "sake",
                "constraints": {"latency_budget_ms": 30000},
            }
            job_id = client.post("/v1/think", json=body).json()["job_id"]
            wait_for(
                lambda: client.get(f"/v1/jobs/{job_id}").json()["status"] == "running",
                timeout_s=60,
                what="the think job running",
            )
            time.sleep(0.5)  # into its first search, which waits on the paused store
            t = time.monotonic()
            r = client.delete(f"/v1/jobs/{job_id}")
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "cancelled"
            assert time.monotonic() - t < 5
            # Cancelling twice is a conflict: it is already over.
            assert client.delete(f"/v1/jobs/{job_id}").status_code == 409
        finally:
            os.killpg(chroma.proc.pid, signal.SIGCONT)
        # The worker stopped the body; nothing it does afterwards turns the record into a result.
        time.sleep(3)
        job = wait_job(client, job_id, timeout_s=30)
        assert job["status"] == "cancelled" and job["result"] is None, job
        # The worker is free again: the next think job runs to the end.
        body["request_id"] = "after-cancel"
        job2 = wait_job(client, client.post("/v1/think", json=body).json()["job_id"], timeout_s=60)
        assert job2["status"] == "succeeded" and job2["result"]["action"] in ("COMPLETE", "ERROR"), (
            job2.get("error") or job2
        )
