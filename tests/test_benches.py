"""Every bench runs at a tiny size, so none rots: each must exit 0 and print its numbers. The
sizes are for coverage, not measurement (real runs: see each script's docstring)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cli import processes

ROOT = Path(__file__).resolve().parent.parent

TINY = {
    "chat_deadline.py": ["--n", "1", "--budget-ms", "3000"],
    "chat_latency.py": ["--n", "5", "--llm-ms", "50", "--turns", "2,3"],
    "chat_under_ingest.py": ["--quick"],
    "contract_overhead.py": ["--n", "50"],
    "crosslang_eval.py": ["--labels", "120", "--show", "1"],
    "identity_eval.py": ["--quick"],
    "ingest_rate.py": ["--n", "8", "--batch", "4", "--parallel", "1", "--workers", "1", "--cli"],
    "memory.py": ["--tiny"],
    "blob_ingest.py": ["--n", "8", "--batch", "4"],
    "jobs_runtime.py": ["--jobs", "20", "--paced", "5"],
    "embed_throughput.py": ["--quick"],
    "neardup_eval.py": ["--quick"],
    "ocr_eval.py": ["--quick"],
    "retrieve_eval.py": ["--quick", "--llm", "--cold", "20"],
    "retrieve_latency.py": ["--quick"],
    "think_eval.py": ["--quick", "--jobs", "3"],
    "fault_run.py": [
        "--labels",
        "24",
        "--batch",
        "4",
        "--chroma-pause",
        "3",
        "--receiver-down",
        "4",
        "--gap",
        "1",
        "--settle",
        "40",
    ],
    "failover_recovery.py": ["--runs", "1", "--labels", "16", "--kill-after", "5"],
    "memo_latency.py": ["--memos", "200", "--saves", "3", "--queries", "5", "--turns", "5"],
    "picture_pairs.py": ["--labels", "2", "--families", "1", "--per-family", "2", "--rule"],
    "phash_lookup.py": ["--sizes", "2000", "--queries", "50", "--redis-ops", "20", "--labels", "20"],
    "reembed_swap.py": ["--n", "12"],
    "search_eval.py": ["--seeds", "0", "--labels", "120"],
    "search_latency.py": ["--sizes", "2000", "--queries", "10", "--repeat", "1", "--labels", "200"],
    "search_scale.py": ["--sizes", "2000", "--queries", "10", "--repeat", "1", "--labels", "200"],
}


def test_every_bench_has_a_tiny_size():
    assert {p.name for p in (ROOT / "bench").glob("*.py")} == set(TINY)


# Run side by side, longest first: most of a tiny run is starting and waiting for processes, so
# three at a time on two cores take about half the time one after the other did (CI's 25 minutes).
PARALLEL = 3
LONGEST_FIRST = ("fault_run.py", "retrieve_eval.py", "failover_recovery.py", "identity_eval.py", "think_eval.py")


def _run(script: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *TINY[script]],
        cwd=ROOT,
        env=processes.child_env(),
        capture_output=True,
        text=True,
        timeout=420,
    )
    return proc, time.monotonic() - t0


@pytest.fixture(scope="module")
def bench_runs(request):
    selected = {  # only the benches this session runs (`-k memory` starts one)
        item.callspec.params["script"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_bench_runs_at_a_tiny_size"
    }
    order = [s for s in (*LONGEST_FIRST, *sorted(TINY)) if s in selected]
    order = list(dict.fromkeys(order))
    with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="bench") as pool:
        yield {script: pool.submit(_run, script) for script in order}


@pytest.mark.stack  # each bench starts its own processes
@pytest.mark.parametrize("script", sorted(TINY))
def test_bench_runs_at_a_tiny_size(script, bench_runs):
    proc, took = bench_runs[script].result()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert re.search(r"\d", proc.stdout), f"{script} printed no numbers:\n{out[-2000:]}"
    print(f"{script}: {took:.1f}s")
