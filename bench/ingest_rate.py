"""End-to-end ingest rate (POST → indexed, through API, worker, Redis, Chroma server) beside the
embedding backend alone on the same label texts, in the same run.

    .venv/bin/python bench/ingest_rate.py [--n 256] [--batch 16] [--parallel 2] [--workers 1,2] [--cli]
                                          [--ocr-modes off,auto,always]

Starts a private stack (tests/stack.py: redis-server, chroma, the API) in a temp folder, then one
phase per worker count: worker processes of concurrency 1 and one embedding thread, each pinned to
its own core, fed fresh images (no dedup across phases). Prints the end-to-end images/s of each
phase and its ratio to one worker, beside the embedding backend alone on the same texts.

--cli: in each phase, right after the bench's own requests, the real `yana ingest DIR --meta
DIR/labels.jsonl` (a subprocess, its default options, against the same API) on as many other
fresh images of the same kind, written to disk as a user's folder; its images/s end to end
(process start to exit, as a user waits) and the rate it reports are printed beside the bench's.

--ocr-modes: one stack per OCR_MODE, in one run, on the same images (sent with full uploader
fields): `off` is the rate before labels were read, `auto` defers their reads to the background
pass (pipelines.ingest.deferred), `always` reads them inline. Each phase's rate stops when its jobs
end; the deferred reads then left, and the seconds the pass took to drain them, are printed
beside it (the next phase starts after they are done).

It also prints the CPU time each part of the system spent per image in each phase (the workers,
the API, Chroma, Redis, this client): on a host with as many cores as workers, the other parts
take CPU from the workers, and the rate the workers alone would reach on cores of their own
(worker processes / worker CPU seconds per image) says whether they scale.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli.api_link import ApiLink  # noqa: E402
from pipelines.embedding.backends import get_embedder, resolve_default_model  # noqa: E402
from pipelines.labels import schema as labels  # noqa: E402
from tests.stack import start_stack, wait_job  # noqa: E402
from tools.datagen import images  # noqa: E402

FIELDS = ("category", "brand_name", "product_name", "brewery", "region")


def make_batch(metas, seed0):
    files, items = [], []
    for k, m in enumerate(metas):
        data = images.encode(images.render_label(m, seed=seed0 + k), "JPEG", 90)
        files.append(("files", (f"{seed0 + k}.jpg", data, "image/jpeg")))
        items.append({**{f: m[f] for f in FIELDS}, "label_features": m["label_features"]})
    return files, items


def time_embedding(texts: list[str], batch: int, model: str) -> float:
    """The embedding backend alone (same model, same batches, one thread) on the same texts."""
    emb = get_embedder(model)
    emb.embed_passages(texts[:4])
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        emb.embed_passages(texts[i : i + batch])
    return time.perf_counter() - t0


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def pin(svc, cpu: int) -> None:
    """Pin a worker (the Celery parent and its pool children) to one core."""
    import psutil

    proc = psutil.Process(svc.proc.pid)
    for p in [proc, *proc.children(recursive=True)]:
        p.cpu_affinity([cpu])


def cpu_seconds(stack) -> dict[str, float]:
    """CPU seconds (user + system) so far per part: workers (with their pool children), the API,
    Chroma, Redis, and this process (the client)."""
    import psutil

    out: dict[str, float] = {}
    for svc in stack.services:
        part = "workers" if svc.name.startswith("w") else svc.name
        try:
            proc = psutil.Process(svc.proc.pid)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            out[part] = out.get(part, 0.0) + t.user + t.system
    me = psutil.Process().cpu_times()
    out["client"] = me.user + me.system
    return out


def write_folder(metas, seed0: int, folder: Path) -> None:
    """A user's folder: JPEG files and labels.jsonl, as `yana sample-labels` writes them."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "labels.jsonl").open("w", encoding="utf-8") as f:
        for k, m in enumerate(metas):
            name = f"label-{seed0 + k}.jpg"
            (folder / name).write_bytes(images.encode(images.render_label(m, seed=seed0 + k), "JPEG", 90))
            row = {"file": name, "category": "sake", **{x: m[x] for x in FIELDS if x != "category"}}
            f.write(json.dumps({**row, "label_features": m["label_features"]}, ensure_ascii=False) + "\n")


def run_cli(folder: Path, api_url: str, batch: int | None, parallel: int | None = None) -> tuple[float, str, str]:
    """`yana ingest` as a user runs it: seconds from process start to exit, the rate it printed,
    and its summary."""
    import re
    import subprocess

    argv = [sys.executable, "-m", "cli.main", "ingest", str(folder), "--meta", str(folder / "labels.jsonl")]
    if batch:
        argv += ["--batch", str(batch)]
    if parallel:
        argv += ["--parallel", str(parallel)]
    env = {**os.environ, "YANA_API_URL": api_url, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    secs = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"yana ingest failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    m = re.search(r"│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)\s*│\s*(\d+)\s*│\s*([\d.]+)\s*│\s*([\d.-]+)\s*│", done.stdout)
    return secs, (m.group(6) if m else "?"), (m.group(0) if m else done.stdout[-300:])


def drain_deferred(redis_url: str, timeout_s: float = 1800) -> tuple[float, int]:
    """Wait for the deferred label reads (OCR_MODE=auto, full fields) to be done: (seconds, how
    many there were when the phase's jobs ended)."""
    import redis

    from pipelines.ingest import deferred

    r = redis.Redis.from_url(redis_url, decode_responses=True)
    n0 = deferred.pending(r)
    t0 = time.perf_counter()
    while deferred.pending(r) and time.perf_counter() - t0 < timeout_s:
        time.sleep(0.2)
    return time.perf_counter() - t0, n0


def run_mode(args, mode: str, metas, warm, counts, cores) -> dict:
    """One private stack with OCR_MODE=mode, one phase per worker count."""
    import json

    def post(link: ApiLink, batch):
        files, items = batch
        key = uuid.uuid4().hex  # as the CLI does: a resent batch is the same job, never a second one
        # The CLI's own link: a 408 on a starved machine is sent again with the same key, as `yana ingest` does.
        r = link.request(
            "POST",
            "/v1/ingest",
            files=files,
            data={"category": "sake", "items": json.dumps(items, ensure_ascii=False)},
            headers={"Idempotency-Key": key},
        )
        assert r.status_code == 202, r.text
        return wait_job(link.client, r.json()["job_id"], 900)

    per_phase = args.n * (2 if args.cli else 1)
    cli_rows: list[tuple[int, float, float, str, str, float]] = []
    root = Path(tempfile.mkdtemp(prefix="yana-bench-ingest-"))
    # One process per worker, one thread each (processes x threads = cores), pinned to its own core.
    stack = start_stack(root, worker=False, INGEST_BATCH_SIZE=str(args.batch), EMBED_THREADS="1", OCR_MODE=mode)
    rows = []
    drains = []
    cpu_ms: list[dict[str, float]] = []
    try:
        with ApiLink(stack.api_url, None, timeout_s=300, reconnect_s=120) as link:
            workers = []
            for phase, count in enumerate(counts):
                while len(workers) < count:
                    svc = stack.start_worker(name=f"w{len(workers)}", concurrency=1)
                    workers.append(svc)
                    pin(svc, cores[(len(workers) - 1) % len(cores)])
                    # warm-up jobs: every worker loads the model (the first one may build it)
                    w = [make_batch(warm[k * 4 : k * 4 + 4], 100 + 10 * len(workers) + k) for k in range(4)]
                    with ThreadPoolExecutor(4) as pool:
                        list(pool.map(lambda b: post(link, b), w))
                    drain_deferred(stack.redis_url)
                part = metas[phase * per_phase : phase * per_phase + args.n]
                batches = [
                    make_batch(part[i : i + args.batch], 900_000 + 10_000 * phase + i)
                    for i in range(0, len(part), args.batch)
                ]
                texts = [labels.label_text({**m, "label_features": m["label_features"]}) for m in part]
                cpu0 = cpu_seconds(stack)
                t0 = time.perf_counter()
                with ThreadPoolExecutor(args.parallel * count) as pool:
                    jobs = list(pool.map(lambda b: post(link, b), batches))
                e2e_s = time.perf_counter() - t0
                cpu1 = cpu_seconds(stack)
                drains.append(drain_deferred(stack.redis_url))
                cpu_ms.append({k: 1e3 * (cpu1[k] - cpu0.get(k, 0.0)) / len(part) for k in cpu1})
                res = [j["result"] for j in jobs]
                if args.cli:  # the same number of other fresh images, through `yana ingest`
                    folder = root / f"cli-{phase}"
                    write_folder(
                        metas[phase * per_phase + args.n : (phase + 1) * per_phase], 500_000 * (phase + 1), folder
                    )
                    cli_s, cli_rate, summary = run_cli(folder, stack.api_url, args.cli_batch, args.cli_parallel)
                    cli_rows.append((count, args.n / cli_s, cli_s, cli_rate, summary, os.getloadavg()[0]))
                    drain_deferred(stack.redis_url)
                rows.append(
                    (
                        count,
                        len(part) / e2e_s,
                        e2e_s,
                        sum(x["indexed"] for x in res),
                        sum(x["failed"] for x in res),
                        os.getloadavg()[0],
                    )
                )
        import redis

        # the model the workers resolved, recorded in the stack's own Redis (never the default one)
        model = resolve_default_model(redis.Redis.from_url(stack.redis_url, decode_responses=True))
    finally:
        stack.stop()
    return {"rows": rows, "cli_rows": cli_rows, "cpu_ms": cpu_ms, "drains": drains, "model": model, "texts": texts}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256, help="images per phase")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=2, help="jobs in flight per worker process")
    ap.add_argument("--workers", default="1,2", help="worker process counts to run, one phase each")
    ap.add_argument("--cli", action="store_true", help="also run the real `yana ingest` in each phase")
    ap.add_argument("--cli-batch", type=int, help="--batch for `yana ingest` (default: its own default)")
    ap.add_argument("--cli-parallel", type=int, help="--parallel for `yana ingest` (default: its own default)")
    ap.add_argument(
        "--ocr-modes",
        default="auto",
        help="OCR_MODE of each run, a stack each, on the same images (e.g. off,auto,always: the rate"
        " before labels were read, with the read deferred, read inline)",
    )
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    cores = sorted(os.sched_getaffinity(0))

    per_phase = args.n * (2 if args.cli else 1)
    metas = images.label_set(per_phase * len(counts) + 4 * args.batch, seed=9)
    warm, metas = metas[: 4 * args.batch], metas[4 * args.batch :]
    runs = {mode: run_mode(args, mode, metas, warm, counts, cores) for mode in args.ocr_modes.split(",")}
    first = next(iter(runs.values()))
    embed_s = time_embedding(first["texts"], args.batch, first["model"])
    emb = get_embedder(first["model"])
    print(
        f"model {emb.model_name} (dim {emb.dim}), {args.n} images of 240x360 per phase, batches of {args.batch}, "
        f"{args.parallel} jobs in flight per worker; worker processes of concurrency 1, EMBED_THREADS=1, "
        f"each pinned to its own core ({len(cores)} cores); full uploader fields (brand, product, brewery, region)"
    )
    base = runs.get("off")
    for mode, run in runs.items():
        rows = run["rows"]
        print(f"\nOCR_MODE={mode}:")
        print(
            "| worker processes | images/s end to end | seconds | indexed | failed | load avg (1 min) | x one worker |"
            + (" x OCR_MODE=off |" if base and mode != "off" else "")
            + " deferred reads after the jobs: labels, seconds to drain |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if base and mode != "off" else "") + "---:|")
        for k, (count, rate, secs, indexed, failed, load) in enumerate(rows):
            vs = f" {rate / base['rows'][k][1]:.2f} |" if base and mode != "off" else ""
            drain_s, n_def = run["drains"][k]
            print(
                f"| {count} | {rate:.1f} | {secs:.2f} | {indexed} | {failed} | {load:.1f} | {rate / rows[0][1]:.2f} |"
                f"{vs} {n_def}, {drain_s:.1f} |"
            )
        if run["cli_rows"]:
            print(
                "\n`yana ingest DIR --meta DIR/labels.jsonl` (its defaults) on as many other fresh images, same stack:"
            )
            print("| worker processes | bench images/s | CLI images/s (process start to exit) | CLI / bench | "
                  "rate the CLI printed | seconds | load avg (1 min) |")  # fmt: skip
            print("|---:|---:|---:|---:|---:|---:|---:|")
            for (count, rate, *_r), (_c, cli_rate, cli_s, printed, _summary, load) in zip(
                rows, run["cli_rows"], strict=True
            ):
                print(
                    f"| {count} | {rate:.1f} | {cli_rate:.1f} | {cli_rate / rate:.2f} | {printed} | {cli_s:.2f} | {load:.1f} |"
                )
        parts = ["workers", "api", "chroma", "redis", "client"]
        print(
            "\nCPU ms per image by part (user + system), and the rate the workers alone would reach with a core each:"
        )
        print(f"| worker processes | {' | '.join(parts)} | all | worker-bound images/s | x one worker |")
        print("|---:|" + "---:|" * (len(parts) + 3))
        bound = [count / (cpu["workers"] / 1e3) for (count, *_r), cpu in zip(rows, run["cpu_ms"], strict=True)]
        for (count, *_r), cpu, b in zip(rows, run["cpu_ms"], bound, strict=True):
            cells = " | ".join(f"{cpu.get(p, 0.0):.1f}" for p in parts)
            print(f"| {count} | {cells} | {sum(cpu.values()):.1f} | {b:.1f} | {b / bound[0]:.2f} |")
    print(f"\nembedding backend alone, one thread, same texts: {len(first['texts']) / embed_s:.1f} texts/s")
    print(f"load average after the run (cores shared with other processes): {os.getloadavg()}")


if __name__ == "__main__":
    main()
