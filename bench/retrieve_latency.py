"""Latency of POST /v1/retrieve over real HTTP on a private stack (Redis, worker, API): warm requests
(every chunk vector in the Redis cache) and cold ones (new text: embedded within options.timeout_ms,
the rest ranked lexically), p50/p99, with the cache hit ratio and /v1/health as the HTTP floor.

    .venv/bin/python bench/retrieve_latency.py [--quick] [--docs 510] [--warm 40] [--cold 3]

Documents are the eval sets' paragraphs (bench/evalsets/retrieve/*/corpus.jsonl), one document
each; queries are their questions. The warm cache is filled before timing: from bench/.cache
(vectors computed by bench/retrieve_eval.py with the same model) or by embedding. Prints the load
average too: timings on a shared machine mean little without it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

SETS = Path(__file__).resolve().parent / "evalsets" / "retrieve"


def _rows(name: str) -> list[dict]:
    out = []
    for d in sorted(SETS.iterdir()):
        f = d / name
        if f.exists():
            out += [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines() if x.strip()]
    return out


def pct(values: list[float], p: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(p / 100 * len(v) + 0.5) - 1))]


def _warm_cache(stack, docs: list[dict], max_chunk_chars: int) -> None:
    from tests.stack import use_stack_stores
    from yana import clients

    use_stack_stores(stack)
    from bench.retrieve_eval import FileVectors
    from pipelines.embedding.cache import store_vectors
    from pipelines.retrieve import rank, vectors
    from yana.settings import get_settings

    texts = rank.vector_texts([d["text"] for d in docs], max_chunk_chars)  # chunks, neighbour pairs, sentences
    fv = FileVectors(vectors.embedder().model_name)  # embeds (and keeps) what bench/.cache lacks
    r = clients.get_redis()
    keys = [vectors.text_key(fv.emb.model_name, t) for t in texts]
    store_vectors(r, keys, fv.get("p", texts), get_settings().retrieve_cache_ttl_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="60 documents, 8 warm and 1 cold request")
    ap.add_argument("--docs", type=int, default=510)
    ap.add_argument("--warm", type=int, default=40)
    ap.add_argument("--cold", type=int, default=3)
    ap.add_argument("--cold-timeout-ms", type=int, default=10_000)
    args = ap.parse_args()
    if args.quick:
        args.docs, args.warm, args.cold, args.cold_timeout_ms = 60, 8, 1, 2000
    corpus = _rows("corpus.jsonl")[: args.docs]
    questions = [q["question"] for q in _rows("questions.jsonl")]
    docs = [{"id": c["id"], "text": c["text"], "metadata": {"title": c.get("title")}} for c in corpus]
    size = sum(len(d["text"].encode()) for d in docs)

    from tests.stack import start_stack

    with tempfile.TemporaryDirectory(prefix="yana-retrieve-bench-") as tmp:
        stack = start_stack(Path(tmp), chroma=False, SEARCH_WARM_ON_START="false")
        try:
            _warm_cache(stack, docs, 800)
            with httpx.Client(base_url=stack.api_url, timeout=120) as api:
                api.post("/v1/retrieve", json={"query": "warm up", "documents": docs})  # model load, index
                health = []
                for _ in range(args.warm):
                    t0 = time.perf_counter()
                    api.get("/v1/health")
                    health.append(1000 * (time.perf_counter() - t0))
                warm, hits, chunks, ctx_hits, ctx, sent_hits, sent = [], 0, 0, 0, 0, 0, 0
                for i in range(args.warm):
                    t0 = time.perf_counter()
                    r = api.post("/v1/retrieve", json={"query": questions[i % len(questions)], "documents": docs})
                    warm.append(1000 * (time.perf_counter() - t0))
                    body = r.json()
                    assert r.status_code == 200, body
                    hits += body["stats"].get("cache_hits", 0)
                    chunks += body["stats"].get("chunks", 0)
                    ctx_hits += body["stats"].get("context_hits", 0)
                    ctx += body["stats"].get("context_vectors", 0)
                    sent_hits += body["stats"].get("sentence_hits", 0)
                    sent += body["stats"].get("sentence_vectors", 0)
                cold, lexical_only, no_context, embedded = [], [], [], []
                for i in range(args.cold):
                    tag = uuid.uuid4().hex[:8]
                    fresh = [{**d, "text": d["text"] + f" ({tag})"} for d in docs]
                    opts = {"timeout_ms": args.cold_timeout_ms}
                    t0 = time.perf_counter()
                    r = api.post("/v1/retrieve", json={"query": questions[i], "documents": fresh, "options": opts})
                    cold.append(1000 * (time.perf_counter() - t0))
                    warns = r.json().get("warnings", [])
                    embedded.append(r.json().get("stats", {}).get("embedded", 0))
                    lexical_only.append(any("lexically only" in w for w in warns))
                    no_context.append(any("without their context" in w for w in warns))
        finally:
            stack.stop()
    load = os.getloadavg()
    print(f"documents {len(docs)} ({size / 1024:.0f} KB), load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'request':<28} {'n':>4} {'p50 ms':>9} {'p99 ms':>9} {'mean ms':>9}")
    for name, v in (("GET /v1/health (floor)", health), ("retrieve warm", warm), ("retrieve cold", cold)):
        if v:
            print(f"{name:<28} {len(v):>4} {pct(v, 50):>9.1f} {pct(v, 99):>9.1f} {statistics.fmean(v):>9.1f}")
    print(
        f"warm cache hit ratio {(hits + ctx_hits + sent_hits) / max(1, chunks + ctx + sent):.3f}"
        f" ({hits}/{chunks} chunk vectors, {ctx_hits}/{ctx} neighbour-pair vectors,"
        f" {sent_hits}/{sent} shortlisted sentence vectors)"
    )
    print(
        f"cold budget {args.cold_timeout_ms} ms; lexical-only remainder in {sum(lexical_only)}/{len(cold)} cold requests,"
        f" context missing in {sum(no_context)}/{len(cold)}; texts embedded within it: {embedded}"
        " (bench/retrieve_eval.py --cold N: the ranking's quality at that many)"
    )


if __name__ == "__main__":
    main()
