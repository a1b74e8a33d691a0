"""Inline-document retrieve: a query plus the documents themselves → the best passages.

`retrieve` is the whole operation for the API and the job: the deterministic extractor
(`retrieve_inline`, pipelines.retrieve.rank) always runs; with an LLM configured (OPENAI_BASE_URL,
RETRIEVE_LLM) the LLM + REPL loop (pipelines.retrieve.rlm) answers from the extractor's evidence, or
falls back to it with a warning. `embed_chunk_texts` is the follow-up job that warms the vector
cache for chunks a request could not embed within its time budget.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from pipelines.retrieve import passage as PS
from pipelines.retrieve import rank as R
from pipelines.retrieve.vectors import (
    SKIPPED,
    EmbedJobClaim,
    passage_glances,
    passage_vectors,
    query_vector,
    release_embed_job,
)

log = logging.getLogger("yana.retrieve")

PATH_EXTRACTOR = "extractor"


@dataclass
class Options:
    top_k: int = 5
    max_chunk_chars: int = 800
    min_score: float = 0.0
    include_spans: bool = True
    timeout_ms: int = 10_000
    mode: str = "auto"  # auto: the LLM loop when one is configured; extractor: never the LLM
    passage: str = "chunk"  # chunk: the evidence's chunk grown around it; window: <= 3 sentences; document
    # Time a request spends embedding texts missing from the cache (None: up to timeout_ms), plus
    # EMBED_MS_PER_KB per KB of document text up to embed_budget_max_ms when that is set; the rest
    # are ranked without their vectors (warnings say which) and embedded by a follow-up job.
    embed_budget_ms: int | None = None
    embed_budget_max_ms: int | None = None


# A large cold request may take longer than a small one: this much more embedding time per KB of
# text (embedding time grows with the text: a KB takes ~90 ms to embed on one core), up to
# Options.embed_budget_max_ms.
EMBED_MS_PER_KB = 8.0
# Of a cold request's embedding time, at most this much for glancing at the chunks' heads (ja's 503
# chunks take ~0.75 s of 2.3 on two threads); the rest embeds them in the order the glance gives.
GLANCE_SHARE = 0.35


def embed_budget_s(options: Options, size_bytes: int) -> float | None:
    """Seconds a request over `size_bytes` of documents may spend embedding (None: up to its timeout)."""
    if options.embed_budget_ms is None:
        return None
    ms = float(options.embed_budget_ms)
    if options.embed_budget_max_ms is not None:
        ms = max(ms, min(float(options.embed_budget_max_ms), ms + EMBED_MS_PER_KB * size_bytes / 1024))
    return ms / 1000.0


@dataclass
class Outcome:
    results: list[dict]
    warnings: list[str]
    path: str
    lexical_only_texts: list[str] = field(default_factory=list)  # chunk and context texts left to embed
    stats: dict = field(default_factory=dict)


def size_of(documents: list[dict]) -> int:
    """Bytes of document text (the cap that sends a retrieve to a job)."""
    return sum(len(d["text"].encode("utf-8")) for d in documents)


def chunk_count(documents: list[dict], max_chunk_chars: int) -> int:
    return len(R.chunk_all([d["text"] for d in documents], max_chunk_chars))


def _left_to_embed(ranking: R.Ranking, texts: list[str], max_chunk_chars: int, warnings: list[str]) -> list[str]:
    """The texts a follow-up job embeds when some vectors were missing (a warning for each kind;
    whether a job embeds them is the caller's to say: `follow_up_warning`)."""
    n = len(ranking.chunks)
    left = [ranking.chunks[i].text for i in ranking.lexical_only]
    if left:
        warnings.append(
            f"{len(left)} of {n} chunks were not embedded within the time budget and were ranked lexically only"
        )
    if ranking.context_missing:
        warnings.append(
            f"{len(ranking.context_missing)} neighbouring-context vectors were not embedded within the time"
            " budget; those chunks were ranked without their context"
        )
    if ranking.sentences_missing:
        warnings.append(
            f"{len(ranking.sentences_missing)} sentence vectors were not embedded within the time budget; those"
            " chunks were ranked without their sentence evidence"
        )
    if left or ranking.context_missing or ranking.sentences_missing:
        # every pair and sentence (a superset of those missing): the next query may shortlist other chunks
        left += R.vector_texts(texts, max_chunk_chars)[n:]
    return list(dict.fromkeys(left))


def follow_up_warning(claim: EmbedJobClaim, cap: int) -> str:
    """The closing warning of an answer that lacked vectors: whether a follow-up job embeds the rest."""
    if claim.status != SKIPPED:
        return "the texts not embedded in time are being embedded for the next request"
    why = (
        "follow-up jobs are off (RETRIEVE_EMBED_JOBS_MAX=0)"
        if cap <= 0
        else f"{claim.running} already running, the cap (RETRIEVE_EMBED_JOBS_MAX={cap})"
    )
    return (
        f"no follow-up embedding job was queued for the texts not embedded in time: {why};"
        " the next request over these documents may again be partly lexical"
    )


def retrieve_inline(query: str, documents: list[dict], options: Options, *, deadline: float | None = None) -> Outcome:
    """Rank `documents` ({id, text, metadata}) for `query`. Chunks without a cached vector are
    embedded until `deadline` (time.monotonic()); those left are ranked lexically only."""
    t0 = time.monotonic()
    if deadline is None:
        deadline = t0 + options.timeout_ms / 1000.0
    texts = [d["text"] for d in documents]
    warnings: list[str] = []
    stats: dict = {}
    qv: np.ndarray | None
    try:
        qv = query_vector(query)
    except Exception:  # no model: still an answer, lexically
        log.warning("query embedding failed; lexical ranking only", exc_info=True)
        qv = None
        warnings.append("the embedding model is unavailable: ranked lexically only")

    # Embedding stops early enough to leave time for ranking and the answer within the budget, and
    # at the embedding budget (a cold request answers in about that much more than a warm one).
    embed_deadline = deadline - min(1.0, 0.1 * max(0.0, deadline - t0))
    budget_s = embed_budget_s(options, size_of(documents))
    if budget_s is not None:
        embed_deadline = min(embed_deadline, t0 + budget_s)

    got: list = []
    peeked_misses = 0

    def chunk_vectors(vector_texts: list[str], share: float = 1.0):  # rank.py asks in stages
        nonlocal peeked_misses
        now = time.monotonic()
        pv = passage_vectors(vector_texts, deadline=now + share * max(0.0, embed_deadline - now))
        got.append(pv)
        if share <= 0:
            peeked_misses += int((~pv.present).sum())
        return pv.vectors, pv.present

    def chunk_glances(chunk_texts: list[str]):  # a cold request's cheap first look (rank._own_vectors)
        now = time.monotonic()
        g = passage_glances(chunk_texts, deadline=now + GLANCE_SHARE * max(0.0, embed_deadline - now))
        if g is None:
            return None
        stats["glanced"] = int(g[1].sum())
        assert qv is not None  # asked only with a query vector
        return g[0] @ qv, g[1]

    ranking = R.rank(
        query,
        texts,
        max_chunk_chars=options.max_chunk_chars,
        chunk_vectors=chunk_vectors if qv is not None else None,
        query_vector=qv,
        windows=options.top_k + 32,  # passages only for what can be returned (margin: ties by doc_id)
        passage=options.passage,
        glance=chunk_glances if math.isfinite(embed_deadline) else None,  # a job embeds them all
    )
    n = len(ranking.chunks)
    if got:  # the first ask is the chunks' own vectors; later ones their context and sentences
        stats.update(
            chunks=n,
            cache_hits=got[0].hits,
            embedded=sum(pv.embedded for pv in got),
            # a cache-only look (rank's peek before a glance) asks again for what it missed
            vectors=sum(len(pv.present) for pv in got) - peeked_misses,
            vector_hits=sum(pv.hits for pv in got),
        )
    left = _left_to_embed(ranking, texts, options.max_chunk_chars, warnings)
    ordered = sorted(ranking.ranked, key=lambda r: (-r.score, documents[r.doc_index]["id"]))
    results = []
    for r in ordered:
        if r.score < options.min_score:
            continue
        doc = documents[r.doc_index]
        p = PS.Passage(r.window[0], r.window[1], r.evidence)
        item = {"doc_id": doc["id"], "score": r.score, "text": p.text(doc["text"]), "metadata": doc.get("metadata")}
        item["spans"] = p.spans(doc["text"]) if options.include_spans else []
        results.append(item)
        if len(results) >= options.top_k:
            break
    warnings.append(f"answered by the {PATH_EXTRACTOR} (deterministic hybrid BM25 + dense ranking, no LLM)")
    stats["elapsed_ms"] = round(1000 * (time.monotonic() - t0), 1)
    return Outcome(results, warnings, PATH_EXTRACTOR, sorted(set(left)), stats)


def llm_model(options: Options):
    """The chat model the LLM loop would use for these options, or None (extractor only)."""
    from pipelines.retrieve.rlm import build_model
    from yana.settings import get_settings

    if options.mode == "extractor":
        return None
    return build_model(get_settings())


def lexical_results(
    query: str, documents: list[dict], k: int, max_chunk_chars: int = 800, passage: str = "chunk"
) -> list[dict]:
    ranking = R.rank(
        query,
        [d["text"] for d in documents],
        max_chunk_chars=max_chunk_chars,
        mode="lexical",
        windows=k,
        passage=passage,
    )
    ordered = sorted(ranking.ranked, key=lambda r: (-r.score, documents[r.doc_index]["id"]))[:k]
    return [
        {
            "doc_id": documents[r.doc_index]["id"],
            "score": r.score,
            "text": documents[r.doc_index]["text"][slice(*r.window)],
        }
        for r in ordered
    ]


def retrieve(
    query: str, documents: list[dict], options: Options, *, deadline: float | None = None, job: bool = False
) -> Outcome:
    """The extractor, then the LLM loop when a model is configured (its evidence and fallback)."""
    from dataclasses import replace

    from pipelines.retrieve import rlm
    from yana.settings import get_settings

    model = llm_model(options)
    if model is None:
        return retrieve_inline(query, documents, options, deadline=deadline)
    s = get_settings()
    cfg = rlm.config_from(s)
    if job:
        cfg.timeout_s = s.retrieve_llm_job_timeout_s
    loop_deadline = None if deadline is None or deadline == float("inf") else deadline
    wide = replace(options, top_k=max(options.top_k, cfg.evidence_k), min_score=0.0, include_spans=True)
    base = retrieve_inline(query, documents, wide, deadline=deadline)

    def extract(q: str, k: int) -> list[dict]:
        if q == query:
            return base.results[:k]
        return retrieve_inline(q, documents, replace(options, top_k=k), deadline=deadline).results

    out = rlm.run_loop(
        query,
        documents,
        model=model,
        extract=extract,
        lexical=lambda q, k: lexical_results(q, documents, k, options.max_chunk_chars, options.passage),
        baseline=base.results,
        config=cfg,
        top_k=options.top_k,
        min_score=options.min_score,
        include_spans=options.include_spans,
        deadline=loop_deadline,
        passage=options.passage,
        max_chunk_chars=options.max_chunk_chars,
    )
    if out.path == "extractor" and not options.include_spans:
        for r in out.results:
            r["spans"] = []
    warnings = [w for w in base.warnings if not w.startswith(f"answered by the {PATH_EXTRACTOR}")] + out.warnings
    stats = {**base.stats, "llm": out.stats}
    return Outcome(out.results, warnings, out.path, base.lexical_only_texts, stats)


def embed_chunk_texts(texts: list[str], progress=None) -> dict:
    """Embed (and cache) chunk texts in batches; the follow-up of a request that ran out of time.
    However it ends, its place among the follow-up jobs in flight (RETRIEVE_EMBED_JOBS_MAX) is freed.
    It embeds from RETRIEVE_EMBED_JOB_PARALLEL threads (1: a cold request beside it keeps a core)."""
    from yana.settings import get_settings

    done = 0
    batch = 64
    threads = get_settings().retrieve_embed_job_parallel
    try:
        for s in range(0, len(texts), batch):
            part = texts[s : s + batch]
            passage_vectors(part, deadline=None, parallel=threads)
            done += len(part)
            if progress is not None:
                progress("embed", done, len(texts))
    finally:
        from yana.clients import get_redis

        try:
            release_embed_job(get_redis(), texts)
        except Exception:  # noqa: BLE001 - Redis gone: the next claim prunes the member after the window
            log.warning("could not free the follow-up embedding job's place", exc_info=True)
    return {"embedded": done}


def run_retrieve_job(ctx, query: str, documents: list[dict], options: dict) -> dict:
    """A whole retrieve as a job (large request or `Prefer: respond-async`): no time budget, every
    chunk embedded, the response body as the job's result."""
    # The request's embedding budget (the route's cold-request default) is the synchronous
    # answer's; a job has time for every vector.
    opts = Options(**{**options, "embed_budget_ms": None, "embed_budget_max_ms": None})
    if ctx is not None:
        ctx.progress("retrieve", 0, 1)
    out = retrieve(query, documents, opts, deadline=float("inf"), job=True)
    if ctx is not None:
        ctx.progress("retrieve", 1, 1)
    return {"results": out.results, "warnings": out.warnings, "path": out.path}
