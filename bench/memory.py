"""Memory of `yana up` per process (RSS, PSS, USS), this code beside a baseline checkout, same run.

    .venv/bin/python bench/memory.py [--labels 100] [--searches 200] [--baseline-rev HEAD~1 | --baseline-src DIR]

For this checkout, then the baseline (a `git worktree` of --baseline-rev, removed afterwards, or
the checkout --baseline-src names), it runs `yana up` exactly as a user does (default settings,
its own data folder, free ports; the one-time builds shared through MODELS_DIR so neither run
pays for them), and prints every process of it (the supervisor and all its descendants:
Redis, Chroma, the worker main and its pool, Flower, the API) at three points:

  * idle, right after `yana up` printed "yana is up" (how long that took is printed too);
  * after `yana ingest` of --labels fresh sample labels (`yana sample-labels`), then idle;
  * after --searches searches (GET /v1/search, varied queries), then idle.

"Idle" is measured, not assumed: each snapshot waits until no label waits for its deferred read
(they run after `yana ingest` has returned, once ingest has been quiet for OCR_DEFER_IDLE_S) and the
whole process tree has used under --idle-cpu of one core over 3 s, and says how long that took. A fixed pause used to catch pool
processes mid-read (their RSS then holds a read's working memory).

PSS (proportional set size, from /proc/PID/smaps_rollup through psutil) splits each shared page
among the processes that map it, so the PSS column adds up to what the whole system costs; RSS
counts shared pages in full in every process. `torch` says whether the process mapped libtorch.
The load average is printed beside every table (the machine is shared).

--tiny: 4 labels, 5 searches, no baseline (tests/test_benches.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402

QUERIES = [
    "純米吟醸",
    "dry sake",
    "りんごジュース",
    "新潟の酒",
    "fruity",
    "辛口",
    "orange juice",
    "山田錦",
    "北海道",
    "甘口",
]


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f}"


def role(p: psutil.Process, supervisor_pid: int, worker_main: set[int]) -> str:
    try:
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return "?"
    if p.pid == supervisor_pid:
        return "supervisor (yana up)"
    if "redis-server" in cmd:
        return "redis"
    if "chroma" in cmd and " run " in cmd + " ":
        return "chroma"
    if "uvicorn" in cmd:
        return "api"
    if "flower" in cmd:
        return "flower"
    if " worker " in cmd + " ":
        if p.pid in worker_main:
            return "worker main"
        return "worker pool"
    if "prepare" in cmd:
        return "prepare"
    return cmd[:40]


def snapshot(supervisor: psutil.Process) -> list[dict]:
    procs = [supervisor, *supervisor.children(recursive=True)]
    worker_main = set()
    for p in procs:
        try:
            if (
                " worker " in " ".join(p.cmdline()) + " "
                and p.parent()
                and " worker " not in " ".join(p.parent().cmdline())
            ):
                worker_main.add(p.pid)
        except psutil.Error:
            pass
    rows = []
    for p in procs:
        try:
            mi = p.memory_full_info()
            maps = Path(f"/proc/{p.pid}/maps").read_text()
        except (psutil.Error, OSError):
            continue
        rows.append(
            {
                "pid": p.pid,
                "role": role(p, supervisor.pid, worker_main),
                "rss": mi.rss / 2**20,
                "pss": mi.pss / 2**20,
                "uss": mi.uss / 2**20,
                "torch": "libtorch" in maps,
                "onnx": "onnxruntime" in maps,
            }
        )
    return sorted(rows, key=lambda r: (r["role"], r["pid"]))


def show(title: str, rows: list[dict]) -> dict:
    print(f"\n{title}   ({load()})")
    print(f"  {'process':<22}{'pid':>8}{'RSS MiB':>10}{'PSS MiB':>10}{'USS MiB':>10}  torch  onnxruntime")
    for r in rows:
        print(
            f"  {r['role']:<22}{r['pid']:>8}{r['rss']:>10.0f}{r['pss']:>10.0f}{r['uss']:>10.0f}  "
            f"{'yes' if r['torch'] else 'no':<6} {'yes' if r['onnx'] else 'no'}"
        )
    total = {k: sum(r[k] for r in rows) for k in ("rss", "pss", "uss")}
    biggest = max(rows, key=lambda r: r["rss"])
    print(
        f"  {'total':<22}{'':>8}{total['rss']:>10.0f}{total['pss']:>10.0f}{total['uss']:>10.0f}   "
        f"largest RSS: {biggest['role']} {biggest['rss']:.0f} MiB; torch mapped in "
        f"{sum(r['torch'] for r in rows)} process(es)",
        flush=True,
    )
    return {**total, "max_rss": biggest["rss"], "torch": sum(r["torch"] for r in rows)}


def tree_cpu(supervisor: psutil.Process) -> float:
    total = 0.0
    for p in [supervisor, *supervisor.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def deferred_reads(data: Path) -> int:
    """Labels of this `yana up` whose deferred read has not been done yet (its up.env names Redis)."""
    import redis

    from cli.api_link import read_up_env
    from pipelines.ingest.keys import DEFERRED_READS_KEY

    with redis.Redis.from_url(read_up_env(data)["REDIS_URL"], socket_timeout=5) as r:
        return int(r.zcard(DEFERRED_READS_KEY))


def wait_idle(supervisor: psutil.Process, data: Path, args) -> str:
    """Wait until `yana up`'s processes are idle (see the module docstring); returns what to print."""
    t0 = time.monotonic()
    while (waiting := deferred_reads(data)) and time.monotonic() - t0 < args.idle_timeout:
        time.sleep(0.5)
    if waiting:
        return f"NOT idle after {args.idle_timeout:.0f} s ({waiting} deferred reads still waiting)"
    window = 3.0
    samples = [(t0, tree_cpu(supervisor))]
    while True:
        time.sleep(0.5)
        now = time.monotonic()
        samples.append((now, tree_cpu(supervisor)))
        while len(samples) > 2 and now - samples[1][0] >= window:  # keep the last `window` seconds
            samples.pop(0)
        span = now - samples[0][0]
        if span >= window and (samples[-1][1] - samples[0][1]) / span < args.idle_cpu:
            return f"idle after {now - t0:.1f} s"
        if now - t0 > args.idle_timeout:
            return (
                f"NOT idle after {args.idle_timeout:.0f} s (still {(samples[-1][1] - samples[0][1]) / span:.2f} cores)"
            )


def yana(src: Path, *args: str, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=src, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_one(name: str, src: Path, args, tmp: Path, models_dir: Path) -> dict:
    from cli.api_link import read_up_env

    data = tmp / f"data-{name}"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CHROMA_URL", "YANA_API_URL", "PYTHONPATH")}
    env.update(PYTHONPATH=str(src), MODELS_DIR=str(models_dir), HF_HUB_OFFLINE="1", DATA_DIR=str(data))
    # The one-time builds for this source first, untimed: the compiled kernels' cache is keyed by
    # the source's path, so a baseline worktree would otherwise compile them inside `yana up`.
    built = yana(src, "prepare", env=env, timeout=1800)
    if built.returncode:
        raise RuntimeError(f"{name}: yana prepare failed:\n{built.stderr[-2000:]}")
    log = (tmp / f"up-{name}.log").open("w")
    t0 = time.monotonic()
    up = subprocess.Popen(
        # the default ports, which move when taken; the API's URL from up.env (see fault_run.py)
        [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data)],
        cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    out: dict = {}
    try:
        log_path = Path(log.name)
        while "yana is up" not in log_path.read_text(errors="replace"):
            if up.poll() is not None or time.monotonic() - t0 > args.up_timeout:
                raise RuntimeError(f"{name}: yana up did not come up:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        out["up_s"] = time.monotonic() - t0
        api = read_up_env(data)["YANA_API_URL"]
        print(f"\n=== {name} ({src}): `yana up` said it is up after {out['up_s']:.1f} s ({load()})", flush=True)
        sup = psutil.Process(up.pid)
        time.sleep(args.settle)
        print(f"[{name}] {wait_idle(sup, data, args)}")
        out["idle"] = show(f"[{name}] idle after start", snapshot(sup))

        labels = tmp / f"labels-{name}"
        done = yana(
            src, "sample-labels", str(labels), "--n", str(args.labels), "--variants", "0", "--seed", "7", env=env
        )
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        env_api = {**env, "YANA_API_URL": api}
        t1 = time.monotonic()
        done = yana(src, "ingest", str(labels), "--meta", str(labels / "labels.jsonl"), env=env_api)
        if done.returncode:
            raise RuntimeError(f"ingest failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        m = re.search(r"│\s*(\d+)\s*│\s*(\d+)\s*│", done.stdout)
        print(f"[{name}] ingested {args.labels} labels in {time.monotonic() - t1:.1f} s ({m and m.group(0)})")
        time.sleep(args.settle)
        print(f"[{name}] {wait_idle(sup, data, args)}")
        out["ingest"] = show(f"[{name}] idle after ingesting {args.labels} labels", snapshot(sup))

        with httpx.Client(base_url=api, timeout=60) as client:
            t1 = time.monotonic()
            for i in range(args.searches):
                q = f"{QUERIES[i % len(QUERIES)]} {i // len(QUERIES)}"
                r = client.get("/v1/search", params={"query_text": q, "k": 5})
                while r.status_code == 429:  # the API's rate limit (RATE_LIMIT): wait as a client does
                    time.sleep(float(r.headers.get("Retry-After") or 1))
                    r = client.get("/v1/search", params={"query_text": q, "k": 5})
                if r.status_code != 200:
                    raise RuntimeError(f"search answered {r.status_code}: {r.text[:300]}")
        print(f"[{name}] {args.searches} searches in {time.monotonic() - t1:.1f} s")
        time.sleep(args.settle)
        print(f"[{name}] {wait_idle(sup, data, args)}")
        out["search"] = show(f"[{name}] idle after {args.searches} searches", snapshot(sup))
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
        log.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", type=int, default=100)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--baseline-rev", default="HEAD~1", help="git revision to compare with (a temporary worktree)")
    ap.add_argument("--baseline-src", help="a checkout to compare with instead of --baseline-rev")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds to wait before the idle check")
    ap.add_argument("--idle-cpu", type=float, default=0.1, help="idle: the tree's CPU use under this many cores")
    ap.add_argument("--idle-timeout", type=float, default=300.0, help="snapshot anyway after this many seconds")
    ap.add_argument("--up-timeout", type=float, default=600.0)
    ap.add_argument("--tiny", action="store_true", help="4 labels, 5 searches, no baseline")
    args = ap.parse_args()
    if args.tiny:
        args.labels, args.searches, args.no_baseline, args.settle = 4, 5, True, 1.0
    models_dir = Path(os.environ.get("MODELS_DIR") or Path.home() / ".cache" / "yana-bench" / "models")
    models_dir.mkdir(parents=True, exist_ok=True)
    print(f"bench/memory.py: {args.labels} labels, {args.searches} searches; models in {models_dir}; {load()}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="yana-mem-") as tmp_s:
        tmp = Path(tmp_s)
        results["this"] = run_one("this", ROOT, args, tmp, models_dir)
        if not args.no_baseline:
            worktree = None
            if args.baseline_src:
                base = Path(args.baseline_src).resolve()
            else:
                worktree = tmp / "baseline-src"
                rev = subprocess.run(
                    ["git", "rev-parse", "--short", args.baseline_rev], cwd=ROOT, capture_output=True, text=True
                ).stdout.strip()
                subprocess.run(["git", "worktree", "add", "--detach", str(worktree), rev], cwd=ROOT, check=True,
                               capture_output=True)  # fmt: skip
                base = worktree
                print(f"\nbaseline: {args.baseline_rev} = {rev}")
            try:
                results["baseline"] = run_one("baseline", base, args, tmp, models_dir)
            finally:
                if worktree is not None:
                    subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT)
                    shutil.rmtree(worktree, ignore_errors=True)
    print(f"\nsummary ({load()}): MiB totals over every process of `yana up`")
    print(
        f"  {'':<10}{'up s':>6}" + "".join(f"{p + ' PSS':>14}{p + ' maxRSS':>16}" for p in ("idle", "ingest", "search"))
    )
    for name, res in results.items():
        print(
            f"  {name:<10}{res['up_s']:>6.1f}"
            + "".join(f"{res[p]['pss']:>14.0f}{res[p]['max_rss']:>16.0f}" for p in ("idle", "ingest", "search"))
        )


if __name__ == "__main__":
    main()
