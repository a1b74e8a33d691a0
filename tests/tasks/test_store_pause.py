"""A paused Chroma (SIGSTOP) during an ingest job: the store call times out, the job retries
with backoff, and once Chroma resumes it ends succeeded with every image indexed once.
A private stack: pausing the shared Chroma would stall other tests."""

from __future__ import annotations

import os
import signal
import time

import chromadb
import httpx
import pytest
import redis
from chromadb.config import Settings as ChromaSettings

from pipelines.neardup import hashing
from pipelines.search import collections as vector_index
from tests.stack import start_stack, wait_for, wait_job
from tests.tasks.test_ingest_jobs import _files, distinct_labels

pytestmark = pytest.mark.stack  # starts its own processes (Redis, workers...): the stack tier

N_IMAGES = 200


@pytest.fixture(scope="module")
def pstack(tmp_path_factory):
    s = start_stack(
        tmp_path_factory.mktemp("paused-chroma"),
        CHROMA_TIMEOUT_S="5",
        JOB_MAX_ATTEMPTS="5",
        INGEST_BATCH_SIZE="4",
        RATE_LIMIT="1000/second",  # the test polls the job every 50 ms
        RATE_BURST="1000",
    )
    yield s
    chroma = s.get("chroma")
    if chroma.alive():
        os.killpg(chroma.proc.pid, signal.SIGCONT)
    s.stop()


def test_paused_chroma_mid_job_retries_and_indexes_each_image_once(pstack):
    # Enough images that the job is still writing when the pause comes: with the model preloaded
    # and one label text for all, 40 small images took 0.5 s and the job had ended before it (CI).
    rows = distinct_labels(N_IMAGES, seed=3)
    chroma_svc = pstack.get("chroma")
    with httpx.Client(base_url=pstack.api_url, timeout=60) as client:
        r = client.post("/v1/ingest", files=_files(rows, "pause"), data={"category": "sake"})
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]
        wait_for(
            lambda: (client.get(f"/v1/jobs/{job_id}").json()["progress"] or {}).get("done", 0) >= 4,
            timeout_s=120,
            interval_s=0.05,
            what="the job under way",
        )
        os.killpg(chroma_svc.proc.pid, signal.SIGSTOP)
        progress = client.get(f"/v1/jobs/{job_id}").json()["progress"] or {}
        assert progress.get("done", 0) < N_IMAGES, f"the job ended before the pause: {progress}"
        paused_at = time.monotonic()
        try:
            wait_for(
                lambda: client.get(f"/v1/jobs/{job_id}").json()["attempts"] >= 2,
                timeout_s=40,
                interval_s=0.5,
                what="a retry after the store timeout",
            )
            time.sleep(max(0.0, 20 - (time.monotonic() - paused_at)))  # the pause lasts ~20 s
        finally:
            os.killpg(chroma_svc.proc.pid, signal.SIGCONT)
        job = wait_job(client, job_id, timeout_s=240)
    assert job["status"] == "succeeded", job
    assert job["attempts"] >= 2
    res = job["result"]
    assert (res["indexed"], res["dedup"], res["failed"]) == (N_IMAGES, 0, 0), res

    host, port = pstack.chroma_url.split("//")[1].split(":")
    chroma = chromadb.HttpClient(host=host, port=int(port), settings=ChromaSettings(anonymized_telemetry=False))
    rc = redis.Redis.from_url(pstack.redis_url, decode_responses=True)
    col = vector_index.open_collection(chroma, vector_index.active_name(rc))
    got = col.get(include=["metadatas"])
    label_ids = [m["id"] for m in got["metadatas"]]
    assert col.count() == len(label_ids) == N_IMAGES, "one chunk per label, none twice"
    assert set(label_ids) == {f"label_{hashing.sha1_hex(d)[:16]}" for _m, d, _p in rows}
