"""Run the retrieve LLM loop (pipelines.retrieve.rlm) over an eval set, beside the extractor alone.

For each question the extractor answers first (its results are the loop's evidence and fallback),
then the loop runs with the given chat model (in the bench and the tests: the scripted test model,
a real OpenAI-compatible server). Reported: hit@1/hit@3/MRR by document for both, the number of
returned results whose text is not in their document verbatim or whose spans are not valid byte
ranges inside that text (`fabricated`: must be 0), which path answered, passages the host dropped. Used by
bench/retrieve_eval.py --llm and tests/pipelines/test_retrieve_rlm.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np

from pipelines.retrieve import lexical_results
from pipelines.retrieve import passage as PS
from pipelines.retrieve import rank as R
from pipelines.retrieve.rlm import ChatModel, LoopConfig, run_loop


def make_extractor(
    documents: list[dict],
    max_chunk_chars: int = 800,
    chunk_vectors: Callable | None = None,
    query_vector: Callable[[str], np.ndarray] | None = None,
    passage: str = "chunk",
) -> Callable[[str, int], list[dict]]:
    """extract(query, k) → the extractor's top k results ({doc_id, score, text, spans}); hybrid
    when vectors are given, else lexical (BM25 fused with the neighbour context)."""
    texts = [d["text"] for d in documents]

    def extract(query: str, k: int) -> list[dict]:
        qv = query_vector(query) if query_vector is not None else None
        ranking = R.rank(
            query,
            texts,
            max_chunk_chars=max_chunk_chars,
            chunk_vectors=chunk_vectors if qv is not None else None,
            query_vector=qv,
            windows=k + 32,
            passage=passage,
        )
        ordered = sorted(ranking.ranked, key=lambda r: (-r.score, documents[r.doc_index]["id"]))[:k]
        out = []
        for r in ordered:
            p = PS.Passage(r.window[0], r.window[1], r.evidence)
            doc = texts[r.doc_index]
            out.append(
                {
                    "doc_id": documents[r.doc_index]["id"],
                    "score": r.score,
                    "text": p.text(doc),
                    "metadata": None,
                    "spans": p.spans(doc),
                }
            )
        return out

    return extract


def fabricated(results: list[dict], documents: list[dict]) -> int:
    """Results whose text is not verbatim in their (real) document, or without spans, or whose spans
    are not non-empty byte ranges inside the text."""
    by_id = {d["id"]: d["text"] for d in documents}
    bad = 0
    for r in results:
        doc = by_id.get(r["doc_id"])
        raw = r["text"].encode("utf-8")
        spans = r.get("spans") or []
        whole = doc is not None and bool(r["text"]) and r["text"] in doc and bool(spans)
        if not whole or any(not (0 <= s["start"] < s["end"] <= len(raw)) for s in spans):
            bad += 1
        else:
            try:
                [raw[s["start"] : s["end"]].decode("utf-8") for s in spans]
            except UnicodeDecodeError:  # a span that cuts a character
                bad += 1
    return bad


def _rank_of(results: list[dict], gold: set[str]) -> int | None:
    return next((i + 1 for i, r in enumerate(results) if r["doc_id"] in gold), None)


def metrics(ranks: list[int | None]) -> dict:
    n = len(ranks) or 1
    return {
        "n": len(ranks),
        "hit@1": sum(1 for r in ranks if r == 1) / n,
        "hit@3": sum(1 for r in ranks if r is not None and r <= 3) / n,
        "mrr": sum(1 / r for r in ranks if r) / n,
    }


def evaluate(
    corpus: list[dict],
    questions: list[dict],
    model: ChatModel,
    config: LoopConfig,
    extract: Callable[[str, int], list[dict]],
    top_k: int = 5,
) -> dict:
    documents = [{"id": c["id"], "text": c["text"], "metadata": None} for c in corpus]
    ext_ranks: list[int | None] = []
    rlm_ranks: list[int | None] = []
    paths: Counter[str] = Counter()
    fab = dropped = iterations = tokens = 0
    fallbacks: Counter[str] = Counter()
    for q in questions:
        gold = set(q["answer_ids"])
        baseline = extract(q["question"], config.evidence_k)
        ext_ranks.append(_rank_of(baseline[:top_k], gold))
        out = run_loop(
            q["question"],
            documents,
            model=model,
            extract=extract,
            lexical=lambda s, k: lexical_results(s, documents, k),
            baseline=baseline,
            config=config,
            top_k=top_k,
        )
        paths[out.path] += 1
        if out.path != "llm":
            fallbacks[out.warnings[0].split("(", 1)[1].split(")", 1)[0] if out.warnings else "?"] += 1
        fab += fabricated(out.results, documents)
        dropped += int(out.stats.get("dropped_passages", 0))
        iterations += int(out.stats.get("iterations", 0))
        tokens += int(out.stats.get("tokens", 0))
        rlm_ranks.append(_rank_of(out.results, gold))
    return {
        "extractor": metrics(ext_ranks),
        "rlm": metrics(rlm_ranks),
        "fabricated": fab,
        "dropped": dropped,
        "paths": dict(paths),
        "fallbacks": dict(fallbacks),
        "iterations": iterations,
        "tokens": tokens,
        "worse": sum(
            1
            for e, r in zip(ext_ranks, rlm_ranks, strict=True)
            if (e is not None and e <= 3) and not (r is not None and r <= 3)
        ),
    }
