"""Every bench runs at a tiny size, so none rots: each must exit 0 and print its numbers. The
sizes are for coverage, not measurement (real runs: see each script's docstring)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
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


# The tiny runs start when collection ends (tests/conftest.py: pytest_collection_finish), two at a
# time, longest first, and overlap the rest of the session: a stack test mostly waits on processes
# it started, and the runs used to take ~6 minutes of CI's 25 at the end, one after the other.
PARALLEL = 2
LONGEST_FIRST = ("fault_run.py", "neardup_eval.py", "think_eval.py", "failover_recovery.py", "blob_ingest.py")
TIMEOUT_S = 600


class BenchRuns:
    """The selected benches' tiny runs, in threads, each a subprocess with the environment as it
    was when collection ended (tests change os.environ as they run); `stop` kills what still runs
    when the session ends early."""

    def __init__(self, scripts: set[str]):
        self.env = processes.child_env()
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="bench")
        order = list(dict.fromkeys(s for s in (*LONGEST_FIRST, *sorted(TINY)) if s in scripts))
        self.futures: dict[str, Future] = {script: self.pool.submit(self._run, script) for script in order}

    def _run(self, script: str) -> tuple[int, str, str, float]:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / script), *TINY[script]],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with self.lock:
            self.procs.add(proc)
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            err += f"\n(killed after {TIMEOUT_S} s)"
        finally:
            with self.lock:
                self.procs.discard(proc)
        return proc.returncode, out, err, time.monotonic() - t0

    def stop(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        with self.lock:
            for proc in self.procs:
                proc.kill()
        self.pool.shutdown(wait=True)


def selected_scripts(items) -> set[str]:
    """The benches this session runs (`-k memory` starts one)."""
    return {
        item.callspec.params["script"]
        for item in items
        if getattr(item, "originalname", "") == "test_bench_runs_at_a_tiny_size"
    }


BENCH_RUNS = pytest.StashKey[BenchRuns]()


@pytest.fixture(scope="module")
def bench_runs(request) -> dict[str, Future]:
    return request.config.stash[BENCH_RUNS].futures  # started by tests/conftest.py


@pytest.mark.stack  # each bench starts its own processes
@pytest.mark.parametrize("script", sorted(TINY))
def test_bench_runs_at_a_tiny_size(script, bench_runs):
    returncode, stdout, stderr, took = bench_runs[script].result()
    out = stdout + stderr
    assert returncode == 0, out[-3000:]
    assert re.search(r"\d", stdout), f"{script} printed no numbers:\n{out[-2000:]}"
    print(f"{script}: {took:.1f}s")
