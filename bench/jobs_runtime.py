"""Job runtime benchmark: submit-to-start latency and accepted jobs/s through the API, beside a
bare Celery apply_async round trip in the same run (same Redis, same worker).

    .venv/bin/python bench/jobs_runtime.py [--jobs 1000] [--paced 200]

Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.stack import start_stack, use_stack_stores  # noqa: E402


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1000, help="burst size for accepted jobs/s")
    ap.add_argument("--paced", type=int, default=200, help="jobs sent one at a time for start latency")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        # The per-client rate limit (5 rps by default) would measure itself, not the runtime.
        stack = start_stack(Path(tmp), chroma=False, RATE_LIMIT="1000000/second", RATE_BURST="1000000")

        use_stack_stores(stack)
        from workers.celery_app import create_app

        celery = create_app()
        try:
            client = httpx.Client(base_url=stack.api_url, timeout=30)
            # warm up both paths
            for _ in range(5):
                client.post("/v1/demo/sleep", json={"steps": 0})
                celery.send_task("yana.demo.ping", args=[time.time()]).get(timeout=30)

            # 1) burst: accepted jobs/s through the API (4 client threads)
            def submit(_):
                return client.post("/v1/demo/sleep", json={"steps": 0}).json()["job_id"]

            t0 = time.perf_counter()
            with ThreadPoolExecutor(4) as pool:
                ids = list(pool.map(submit, range(args.jobs)))
            accept_s = time.perf_counter() - t0
            deadline = time.time() + 600
            pending = set(ids)
            while pending and time.time() < deadline:
                for jid in list(pending)[:200]:
                    if client.get(f"/v1/jobs/{jid}").json()["status"] == "succeeded":
                        pending.discard(jid)
                time.sleep(0.2)
            drain_s = time.perf_counter() - t0

            # bare Celery burst: apply_async of the same number of trivial tasks
            t0 = time.perf_counter()
            results = [celery.send_task("yana.demo.ping", args=[time.time()]) for _ in range(args.jobs)]
            send_s = time.perf_counter() - t0
            for res in results:
                res.get(timeout=600)
            bare_drain_s = time.perf_counter() - t0

            # 2) paced: submit-to-start latency with an idle worker
            api_lat, bare_lat = [], []
            for _ in range(args.paced):
                jid = submit(0)
                while (job := client.get(f"/v1/jobs/{jid}").json())["status"] != "succeeded":
                    time.sleep(0.005)
                api_lat.append((ts(job["started_at"]) - ts(job["created_at"])) * 1000)
                out = celery.send_task("yana.demo.ping", args=[time.time()]).get(timeout=30)
                bare_lat.append((out["started_at"] - out["sent_at"]) * 1000)
        finally:
            stack.stop()

    print(f"jobs: {args.jobs} burst, {args.paced} paced; 1 worker (prefork, concurrency 1), 1 API process")
    print(
        f"API accepted jobs/s       {args.jobs / accept_s:8.1f}   (bare apply_async sends/s {args.jobs / send_s:8.1f}, ratio {(args.jobs / accept_s) / (args.jobs / send_s):.2f})"
    )
    print(
        f"API jobs completed/s      {args.jobs / drain_s:8.1f}   (bare tasks completed/s   {args.jobs / bare_drain_s:8.1f}, ratio {bare_drain_s / drain_s:.2f})"
    )
    print(
        f"submit->start p50 ms      {statistics.median(api_lat):8.1f}   (bare {statistics.median(bare_lat):6.1f}, ratio {statistics.median(api_lat) / statistics.median(bare_lat):.2f})"
    )
    print(
        f"submit->start p99 ms      {pct(api_lat, 99):8.1f}   (bare {pct(bare_lat, 99):6.1f}, ratio {pct(api_lat, 99) / pct(bare_lat, 99):.2f})"
    )


if __name__ == "__main__":
    main()
