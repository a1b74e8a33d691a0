"""Latency of POST /v1/retrieve over real HTTP on a private stack (Redis, worker, API), cold and warm
side by side per document-set size: warm requests (every vector in the Redis cache) and cold ones
(paragraphs never seen before, default options: the request embeds for RETRIEVE_EMBED_BUDGET_MS and more by size, ranks
the rest without vectors, says so in `warnings`, and a follow-up job embeds them for the next
request), p50/p95/max, hit@3 of the cold answers against the warm answers to the same questions,
the texts a cold request embedded, and the next request after the follow-up job; /v1/health as the
HTTP floor; the load average beside the numbers.

    .venv/bin/python bench/retrieve_latency.py [--quick] [--sizes 20,510] [--warm 40] [--cold 20]
        [--embed-jobs-max N] [--worker-concurrency N] [--embed-job-parallel N]

Documents are the eval sets' paragraphs (bench/evalsets/retrieve/*/corpus.jsonl, in file order),
one document each; the queries are the questions answered inside the first N paragraphs (all
questions, cycled, when fewer). The warm cache is filled before timing: from bench/.cache (vectors
computed by bench/retrieve_eval.py with the same model) or by embedding. Issue 23's bars: cold p95
<= 1.5 s for 20 paragraphs and <= 3 s for 510, hit@3 within 1 point of warm
(bench/retrieve_eval.py --cold default gives the cold answers' quality over whole sets).

Cold requests are sent back to back, so the follow-up jobs of earlier ones share the cores with
the next; `--embed-jobs-max` sets RETRIEVE_EMBED_JOBS_MAX (follow-up jobs in flight at once) in the
stack's API, e.g. the default 1 against 1000 (no cap) in the same session; `--worker-concurrency`
the worker's pool (1 by default; `yana up` on 2 cores runs 2, so two follow-up jobs at once);
`--embed-job-parallel` the threads each follow-up job embeds from (RETRIEVE_EMBED_JOB_PARALLEL).
"""

from __future__ import annotations

import argparse
import json
import os
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
        if f.exists() and d.name in ("en", "ja"):  # paragraphs (pyfaq's documents are whole answers)
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


def _hit3(body: dict, gold: set[str]) -> bool:
    return any(r["doc_id"] in gold for r in body.get("results", [])[:3])


def _fresh(docs: list[dict]) -> list[dict]:
    tag = uuid.uuid4().hex[:8]
    return [{**d, "text": d["text"] + f" ({tag})"} for d in docs]


def _post(api, query: str, docs: list[dict]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    r = api.post("/v1/retrieve", json={"query": query, "documents": docs})
    ms = 1000 * (time.perf_counter() - t0)
    assert r.status_code == 200, r.text
    return ms, r.json()


def run_size(api, stack, corpus: list[dict], questions: list[dict], n: int, warm_n: int, cold_n: int) -> dict:
    docs = [{"id": c["id"], "text": c["text"], "metadata": {"title": c.get("title")}} for c in corpus[:n]]
    ids = {d["id"] for d in docs}
    qs = [q for q in questions if set(q["answer_ids"]) <= ids] or questions
    _warm_cache(stack, docs, 800)
    _post(api, "warm up", docs)  # model load, index
    warm, cold, cold_hit, warm_hit, embedded, lacking, not_queued = [], [], [], [], [], [], []
    for i in range(warm_n):
        ms, _ = _post(api, qs[i % len(qs)]["question"], docs)
        warm.append(ms)
    follow = None
    for i in range(cold_n):
        q = qs[i % len(qs)]
        gold = set(q["answer_ids"])
        fresh = _fresh(docs)
        ms, body = _post(api, q["question"], fresh)
        cold.append(ms)
        cold_hit.append(_hit3(body, gold))
        warm_hit.append(_hit3(_post(api, q["question"], docs)[1], gold))
        embedded.append(body.get("stats", {}).get("embedded", 0))
        lacking.append(any("were not embedded" in w or "not embedded within" in w for w in body["warnings"]))
        not_queued.append(any("no follow-up embedding job was queued" in w for w in body["warnings"]))
        if follow is None and body.get("embed_job_id"):
            from tests.stack import wait_job

            wait_job(api, body["embed_job_id"], timeout_s=600)
            ms2, again = _post(api, q["question"], fresh)
            follow = (ms2, any("not embedded within" in w for w in again["warnings"]), _hit3(again, gold))
    return {
        "n": n,
        "kb": sum(len(d["text"].encode()) for d in docs) / 1024,
        "warm": warm,
        "cold": cold,
        "cold_hit3": sum(cold_hit) / max(1, len(cold_hit)),
        "warm_hit3": sum(warm_hit) / max(1, len(warm_hit)),
        "embedded": embedded,
        "lacking": sum(lacking),
        "not_queued": sum(not_queued),
        "follow": follow,
        "load": os.getloadavg(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 documents, 4 warm and 2 cold requests")
    ap.add_argument("--sizes", default="20,510", help="comma-separated numbers of paragraphs")
    ap.add_argument("--warm", type=int, default=40)
    ap.add_argument("--cold", type=int, default=20)
    ap.add_argument(
        "--embed-jobs-max",
        type=int,
        default=None,
        help="RETRIEVE_EMBED_JOBS_MAX for the stack's API (default: the setting as configured)",
    )
    ap.add_argument("--worker-concurrency", type=int, default=1, help="the stack worker's pool processes")
    ap.add_argument(
        "--embed-job-parallel",
        type=int,
        default=None,
        help="RETRIEVE_EMBED_JOB_PARALLEL: threads a follow-up embedding job embeds from (default: the setting)",
    )
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.warm, args.cold = "20", 4, 2
    corpus = _rows("corpus.jsonl")
    questions = _rows("questions.jsonl")

    from tests.stack import start_stack

    out = []
    with tempfile.TemporaryDirectory(prefix="yana-retrieve-bench-") as tmp:
        env = {"SEARCH_WARM_ON_START": "false"}
        if args.embed_jobs_max is not None:
            env["RETRIEVE_EMBED_JOBS_MAX"] = str(args.embed_jobs_max)
        if args.embed_job_parallel is not None:
            env["RETRIEVE_EMBED_JOB_PARALLEL"] = str(args.embed_job_parallel)
        stack = start_stack(Path(tmp), chroma=False, worker=False, **env)
        try:
            stack.start_worker(concurrency=args.worker_concurrency)
            with httpx.Client(base_url=stack.api_url, timeout=120) as api:
                health = []
                for _ in range(max(4, args.warm)):
                    t0 = time.perf_counter()
                    api.get("/v1/health")
                    health.append(1000 * (time.perf_counter() - t0))
                for n in [int(x) for x in args.sizes.split(",") if x]:
                    out.append(run_size(api, stack, corpus, questions, n, args.warm, args.cold))
        finally:
            stack.stop()
    from yana.settings import get_settings

    s = get_settings()
    jobs_max = s.retrieve_embed_jobs_max if args.embed_jobs_max is None else args.embed_jobs_max
    job_threads = s.retrieve_embed_job_parallel if args.embed_job_parallel is None else args.embed_job_parallel
    print(
        f"GET /v1/health (floor): p50 {pct(health, 50):.1f} ms; RETRIEVE_EMBED_BUDGET_MS {s.retrieve_embed_budget_ms}"
        f" (+8 ms a KB, at most RETRIEVE_EMBED_BUDGET_MAX_MS {s.retrieve_embed_budget_max_ms});"
        f" RETRIEVE_EMBED_PARALLEL {s.retrieve_embed_parallel}; RETRIEVE_EMBED_JOBS_MAX {jobs_max};"
        f" RETRIEVE_EMBED_JOB_PARALLEL {job_threads};"
        f" worker pool {args.worker_concurrency}"
    )
    print(
        f"{'paragraphs':>10} {'KB':>5} {'request':<6} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}"
        f" {'hit@3':>6}  load average"
    )
    for k in out:
        load = " ".join(f"{x:.2f}" for x in k["load"])
        for name, v, hit in (("warm", k["warm"], k["warm_hit3"]), ("cold", k["cold"], k["cold_hit3"])):
            if v:
                print(
                    f"{k['n']:>10} {k['kb']:>5.0f} {name:<6} {len(v):>4} {pct(v, 50):>8.1f} {pct(v, 95):>8.1f}"
                    f" {max(v):>8.1f} {hit:>6.3f}  {load}"
                )
        print(
            f"{'':>10} cold answers lacking vectors (warned): {k['lacking']}/{len(k['cold'])}; texts embedded"
            f" within the budget: {k['embedded']}; hit@3 cold {k['cold_hit3']:.3f} vs warm {k['warm_hit3']:.3f}"
            f" on the same questions ({k['cold_hit3'] - k['warm_hit3']:+.3f}); no follow-up job queued (at the"
            f" cap): {k['not_queued']}/{len(k['cold'])}"
        )
        if k["follow"]:
            ms2, still, hit = k["follow"]
            print(
                f"{'':>10} after the follow-up embedding job: the same request {ms2:.1f} ms,"
                f" {'still lacking vectors' if still else 'nothing lacking'}, hit@3 {int(hit)}"
            )
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
