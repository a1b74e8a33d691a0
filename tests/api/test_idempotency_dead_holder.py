"""Issue 26 defect 3: an Idempotency-Key claim whose holder (an API process) died mid-request is
taken over within seconds, not answered 409 until its lease runs out (about a minute).

Two real uvicorn processes share the stack's Redis; the first is killed with SIGKILL while it
holds the claim (its handler waits before creating the job), and the same request with the same
key goes to the second, which must create the job within API_LIVENESS_TTL_S plus a margin."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import httpx
import pytest
import redis

from api.contract.idempotency import KEY_PREFIX
from cli import processes
from tests.stack import wait_for

pytestmark = pytest.mark.stack


def _serve(stack, name: str, **env: str) -> tuple[subprocess.Popen, str]:
    port = processes.free_port()
    argv = [sys.executable, "-m", "uvicorn", "tests.api.idem_probe_app:app", "--host", "127.0.0.1", "--port", str(port)]
    proc, _ = processes._spawn(name, argv, {**stack.env, **env}, stack.log_dir)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: proc.poll() is None and processes.http_ok(url + "/v1/health")(), 120, 0.3, f"{name} up")
    return proc, url


def _claims(r: redis.Redis) -> list[dict]:
    out = []
    for k in r.scan_iter(KEY_PREFIX + "*"):
        if k.endswith(":jobs"):
            continue
        raw = r.get(k)
        if raw:
            out.append(json.loads(raw))
    return out


def test_a_dead_holders_claim_is_taken_over_within_seconds(stack):
    env = {"API_LIVENESS_TTL_S": "3", "RATE_LIMIT": "1000/second", "RATE_BURST": "1000"}
    a, url_a = _serve(stack, "api-idem-a", PROBE_DELAY_S="60", **env)
    b, url_b = _serve(stack, "api-idem-b", **env)
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        key = uuid.uuid4().hex
        before = {json.dumps(c, sort_keys=True) for c in _claims(r)}
        body = {"tag": key}

        def first():
            try:
                httpx.post(url_a + "/test/slow-job", json=body, headers={"Idempotency-Key": key}, timeout=90)
            except httpx.HTTPError:
                pass  # its server is killed under it

        t = threading.Thread(target=first, daemon=True)
        t.start()
        wait_for(
            lambda: [c for c in _claims(r) if json.dumps(c, sort_keys=True) not in before],
            30,
            0.05,
            "the first request's claim",
        )
        # The claim is held: the same request to the other process is refused for now.
        held = httpx.post(url_b + "/test/slow-job", json=body, headers={"Idempotency-Key": key}, timeout=30)
        assert held.status_code == 409 and held.headers.get("retry-after"), held.text
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=10)
        killed_at = time.monotonic()
        # Retry as a client does (honouring Retry-After) until the job is accepted.
        while True:
            resp = httpx.post(url_b + "/test/slow-job", json=body, headers={"Idempotency-Key": key}, timeout=90)
            if resp.status_code != 409:
                break
            assert time.monotonic() - killed_at < 20, "still 409 20 s after the holder died"
            time.sleep(float(resp.headers.get("retry-after", "1")))
        took = time.monotonic() - killed_at
        assert resp.status_code == 202, resp.text
        job_id = resp.json()["job_id"]
        assert took < 15, took
        # Exactly one job for the key: a replay returns the same job.
        again = httpx.post(url_b + "/test/slow-job", json=body, headers={"Idempotency-Key": key}, timeout=30)
        assert again.status_code == 202 and again.json()["job_id"] == job_id
        assert again.headers.get("idempotent-replayed") == "true"
    finally:
        for p in (a, b):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def test_a_live_holders_claim_is_not_taken(stack):
    """A slow request of a live process keeps its claim past the liveness TTL (409 goes on)."""
    env = {"API_LIVENESS_TTL_S": "3", "RATE_LIMIT": "1000/second", "RATE_BURST": "1000"}
    a, url_a = _serve(stack, "api-idem-c", PROBE_DELAY_S="12", **env)
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        key = uuid.uuid4().hex
        before = {json.dumps(c, sort_keys=True) for c in _claims(r)}
        body = {"tag": key}
        result: dict = {}

        def first():
            result["r"] = httpx.post(url_a + "/test/slow-job", json=body, headers={"Idempotency-Key": key}, timeout=90)

        t = threading.Thread(target=first)
        t.start()
        wait_for(
            lambda: [c for c in _claims(r) if json.dumps(c, sort_keys=True) not in before],
            30,
            0.05,
            "the first request's claim",
        )
        time.sleep(7)  # more than twice the TTL: only the refreshed liveness key keeps the claim
        held = httpx.post(url_a + "/test/slow-job", json=body, headers={"Idempotency-Key": key}, timeout=30)
        assert held.status_code == 409, held.text
        t.join(90)
        assert result["r"].status_code == 202
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait(timeout=10)
