"""/v1/chat latency while a bulk ingest runs on the same host, against the same API idle.

    .venv/bin/python bench/chat_under_ingest.py [--labels 200] [--n 150] [--nice 0,10]

Per worker niceness in --nice: a private stack (redis-server, chroma, the API, one worker with
WORKER_CONCURRENCY=0, i.e. one process per core), a few labels ingested so chat retrieves through
the real hybrid search, then /v1/chat (no LLM, use_rag=true) timed --n times idle and again
while a job ingests --labels generated label images. Goal (issue 13): p99 during the ingest
within 2x the idle p99. Prints numbers; asserts nothing. Other processes on the machine add
noise: compare rows of one run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chat_latency import QUESTIONS, pct  # noqa: E402
from tests.pipelines.chat.api_support import ingest_labels  # noqa: E402
from tests.stack import start_stack, wait_job  # noqa: E402
from tests.tasks.test_ingest_jobs import _files, distinct_labels  # noqa: E402


def chat_series(c: httpx.Client, n: int, until: threading.Event | None = None) -> list[float]:
    """n timed chat turns (or, with `until`, turns until it is set, at least n)."""
    ms: list[float] = []
    i = 0
    while i < n or (until is not None and not until.is_set()):
        t = time.perf_counter()
        r = c.post("/v1/chat", json={"user_text": QUESTIONS[i % len(QUESTIONS)], "use_rag": True, "top_k": 5})
        ms.append((time.perf_counter() - t) * 1000)
        if r.status_code != 200:
            print(f"  chat answered {r.status_code}: {r.text[:200]}", flush=True)
        i += 1
    return ms


def one_run(nice: int, rows, n: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="yana-chat-ingest-") as tmp:
        stack = start_stack(
            Path(tmp), worker=False, RATE_LIMIT="10000/second", RATE_BURST="10000", WORKER_CONCURRENCY="0"
        )
        try:
            stack.start_worker(WORKER_NICE=str(nice))
            with httpx.Client(base_url=stack.api_url, timeout=120) as c:
                ingest_labels(c)
                chat_series(c, 10)  # warm: connections, the query embedder, the search index
                idle = chat_series(c, n)
                done = threading.Event()
                result: dict = {}

                def bulk() -> None:
                    with httpx.Client(base_url=stack.api_url, timeout=600) as b:
                        t0 = time.perf_counter()
                        r = b.post("/v1/ingest", files=_files(rows, f"bulk{nice}-"), data={"category": "sake"})
                        job = wait_job(b, r.json()["job_id"], timeout_s=1800)
                        result.update(status=job["status"], seconds=time.perf_counter() - t0)
                    done.set()

                th = threading.Thread(target=bulk)
                th.start()
                time.sleep(2)  # the job is accepted and the worker is embedding
                busy = chat_series(c, n, until=done)
                th.join()
            return {"idle": idle, "busy": busy, **result}
        finally:
            stack.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", type=int, default=200, help="label images in the bulk ingest")
    ap.add_argument("--n", type=int, default=150, help="chat turns per series (at least)")
    ap.add_argument("--nice", default="0,10", help="worker niceness values to compare")
    ap.add_argument("--quick", action="store_true", help="tiny run (CI): 12 labels, 10 turns, nice 10 only")
    args = ap.parse_args()
    if args.quick:
        args.labels, args.n, args.nice = 12, 10, "10"
    rows = distinct_labels(args.labels, seed=77)
    print(f"# /v1/chat (no LLM, use_rag=true) idle vs during a bulk ingest of {args.labels} labels\n")
    print(
        "| worker nice | idle p50 | idle p99 | during p50 | during p99 | p99 ratio (goal <= 2) | ingest images/s | job |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for nice in (int(x) for x in args.nice.split(",")):
        out = one_run(nice, rows, args.n)
        idle, busy = out["idle"], out["busy"]
        print(
            f"| {nice} | {pct(idle, 50):.1f} | {pct(idle, 99):.1f} | {pct(busy, 50):.1f} | {pct(busy, 99):.1f} | "
            f"{pct(busy, 99) / pct(idle, 99):.2f} | {args.labels / out['seconds']:.2f} | {out['status']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
