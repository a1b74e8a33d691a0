"""Every bench runs at a tiny size, so none rots: each must exit 0 and print its numbers. The
sizes are for coverage, not measurement (real runs: see each script's docstring)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
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
    "identity_eval.py": ["--quick", "--picture-rows", "--why"],
    "ingest_rate.py": ["--n", "8", "--batch", "4", "--parallel", "1", "--workers", "1", "--cli"],
    "memory.py": ["--tiny"],
    "blob_ingest.py": ["--n", "8", "--batch", "4"],
    "jobs_runtime.py": ["--jobs", "20", "--paced", "5"],
    "embed_throughput.py": ["--quick"],
    "neardup_eval.py": ["--quick"],
    "ocr_eval.py": ["--quick"],
    "retrieve_eval.py": ["--quick", "--llm", "--cold", "default"],
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
    "photo_search_eval.py": ["--quick"],
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
# Under pytest-xdist every worker collects every test but the runs must start once: the worker that
# first creates the run's shared folder starts them and writes each result there; a bench test on
# any worker reads its result from that folder.
PARALLEL = 2
LONGEST_FIRST = ("fault_run.py", "neardup_eval.py", "think_eval.py", "failover_recovery.py", "blob_ingest.py")
TIMEOUT_S = 900  # fault_run.py took over 600 s with two suites at once (load ~8)


class BenchRuns:
    """The selected benches' tiny runs, in threads, each a subprocess with the environment as it
    was when collection ended (tests change os.environ as they run); each result is also written to
    `results_dir` (if given) for the other xdist workers; `stop` kills what still runs when the
    session ends early."""

    def __init__(self, scripts: set[str], results_dir: Path | None = None):
        self.env = processes.child_env()
        self.results_dir = results_dir
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
        result = (proc.returncode, out, err, time.monotonic() - t0)
        if self.results_dir is not None:
            tmp = self.results_dir / f".{script}.json"
            tmp.write_text(json.dumps(result))
            tmp.rename(self.results_dir / f"{script}.json")  # atomic: a reader never sees half a file
        return result

    def stop(self, *, wait: bool = False) -> None:
        """Kill what still runs; with `wait` (an xdist worker whose own tests are done while another
        worker may still wait on these results), let the runs finish first."""
        self.pool.shutdown(wait=wait, cancel_futures=not wait)
        with self.lock:
            for proc in self.procs:
                proc.kill()
        self.pool.shutdown(wait=True)


class SharedResult:
    """A bench result another xdist worker is producing: `result()` waits for its file."""

    def __init__(self, path: Path):
        self.path = path

    def result(self) -> tuple[int, str, str, float]:
        deadline = time.monotonic() + TIMEOUT_S * len(TINY)  # bounded by the runner's own timeouts
        while not self.path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no result at {self.path}: did the worker running the benches die?")
            time.sleep(0.5)
        return tuple(json.loads(self.path.read_text()))  # (returncode, out, err, took)


def start(config, scripts: set[str]) -> tuple[BenchRuns | None, dict[str, Future | SharedResult]]:
    """Start the runs in this process, or, under xdist where another worker already started them,
    return readers of that worker's results."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        runs = BenchRuns(scripts)
        return runs, dict(runs.futures)
    shared = Path(tempfile.gettempdir()) / f"yana-bench-{workerinput['testrunuid']}"
    try:
        shared.mkdir()
    except FileExistsError:
        return None, {s: SharedResult(shared / f"{s}.json") for s in scripts}
    runs = BenchRuns(scripts, results_dir=shared)
    return runs, dict(runs.futures)


def selected_scripts(items) -> set[str]:
    """The benches this session runs (`-k memory` starts one)."""
    return {
        item.callspec.params["script"]
        for item in items
        if getattr(item, "originalname", "") == "test_bench_runs_at_a_tiny_size"
    }


BENCH_RUNS = pytest.StashKey[BenchRuns | None]()
BENCH_RESULTS = pytest.StashKey[dict]()


@pytest.fixture(scope="module")
def bench_runs(request) -> dict:
    return request.config.stash[BENCH_RESULTS]  # started by tests/conftest.py


@pytest.mark.stack  # each bench starts its own processes
@pytest.mark.parametrize("script", sorted(TINY))
def test_bench_runs_at_a_tiny_size(script, bench_runs):
    returncode, stdout, stderr, took = bench_runs[script].result()
    out = stdout + stderr
    assert returncode == 0, out[-3000:]
    assert re.search(r"\d", stdout), f"{script} printed no numbers:\n{out[-2000:]}"
    print(f"{script}: {took:.1f}s")


def test_picture_pairs_can_draw_the_identity_evals_pairs():
    """`picture_pairs.py --identity`: the pairs bench/identity_eval.py decides on, by kind."""
    sys.path.insert(0, str(ROOT / "bench"))
    import picture_pairs

    kinds = [kind for kind, _note, _a, _b in picture_pairs.identity_pairs("tune", 0, 1, 1, 2)]
    assert kinds.count("rephoto") == 1
    assert {"brand", "grade", "number"} <= set(kinds)
    assert sum(k.startswith("edition-") for k in kinds) == 1
