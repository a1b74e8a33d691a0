"""Failover recovery time: Redis Sentinel on loopback (a master, a replica, three sentinels), the
API and one worker pointed at the sentinels, accepting a job waiting for the replica; kill -9 of
the master during a bulk ingest, then the old master's host back (it becomes a replica).

    .venv/bin/python bench/failover_recovery.py [--runs 4] [--labels 60] [--kill-after 10]

Each run starts a fresh system in a temporary folder (tests/sentinel_stack.py, the scenario of
tests/workers/test_sentinel_failover.py), warms the worker with one job, ingests --labels labels
(one job each, every refusal sent again with the same Idempotency-Key) and kills the master once
--kill-after jobs are accepted. Per run it prints: promotion (kill -> the sentinels name a new
master), the first job finished after promotion (the worker back at work), every job accepted
before the kill finished (issue 15's bar: 30 s after promotion), accepting again (needs a replica:
the old master back), all jobs done, and how many accepted jobs did not succeed or are missing
(must be 0). RESULT PASS when every run holds the bar and loses nothing; --strict exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sentinel_stack import FailoverRun, run_failover, start_ha_stack  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--labels", type=int, default=60)
    ap.add_argument("--kill-after", type=int, default=10, help="kill the master once this many jobs are accepted")
    ap.add_argument("--bar", type=float, default=30.0, help="seconds after promotion for the jobs accepted before it")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a run fails the bar or loses a job")
    args = ap.parse_args()

    runs: list[FailoverRun] = []
    for n in range(args.runs):
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="yana-failover-") as tmp:
            ha = start_ha_stack(Path(tmp))
            try:
                started = time.monotonic() - t0
                run = run_failover(ha, args.labels, seed=500 + n, kill_after=min(args.kill_after, args.labels - 1))
            finally:
                ha.st.stop()
        runs.append(run)
        print(f"run {n + 1} (system up in {started:.0f}s): {run.line()}", flush=True)

    def row(name: str, values: list[float]) -> None:
        print(f"{name:<52} median {statistics.median(values):6.1f}s   max {max(values):6.1f}s")

    print(f"\nfailover recovery over {len(runs)} run(s), kill -9 of the master:")
    row("promotion after the kill", [r.promotion_s for r in runs])
    row("first job finished after promotion", [r.first_done_s for r in runs])
    row("jobs accepted before the kill done, after promotion", [r.at_kill_done_s for r in runs])
    row("accepting again after the kill", [r.accepting_s for r in runs])
    row("every accepted job done after the kill", [r.all_done_s for r in runs])
    lost = sum(len(r.missing) + len(r.not_succeeded) for r in runs)
    ok = lost == 0 and all(r.at_kill_done_s <= args.bar for r in runs)
    print(f"accepted jobs lost or not succeeded: {lost}")
    print(f"RESULT {'PASS' if ok else 'FAIL'} (bar: jobs accepted before the kill done {args.bar:g}s after promotion)")
    if args.strict and not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
