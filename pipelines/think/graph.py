"""One think step as a LangGraph graph, and the whole loop (the job) over the same graph.

    START → check ─┬─ ok ──→ plan → evaluate → decide ─┬─→ search   → END
                   └─ bad ─────────────────────────────┼─→ complete → END
                                                       └─→ error    → END

`check` verifies the signed state and counts the round: the larger of the state's count and the
search history's length, so a caller can neither reset the counter (an edited state is refused) nor
gain rounds by dropping it (the history still counts). `decide` enforces the loop limit: no SEARCH
once max_loops rounds are done; then COMPLETE with what covers the question (coverage notes name
what is missing), or ERROR LOOP_LIMIT when nothing does.

`run_step` bounds the step by its budget (constraints.latency_budget_ms, default 8 000, capped at
30 000): past it the answer is ERROR TIMEOUT. `run_loop` runs steps and executes their SEARCH actions
with a search function (ours: pipelines.search.service.search) until COMPLETE or ERROR, inside one budget.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from pydantic import TypeAdapter, ValidationError

from pipelines.labels.schema import CATEGORIES
from pipelines.think import evaluator, planner
from pipelines.think import state as signed
from pipelines.think.models import (
    Aspect,
    ThinkRequest,
    ThinkResponse,
)
from yana.settings import Settings, get_settings

log = logging.getLogger("yana.think")
_RESPONSE = TypeAdapter(ThinkResponse)


@dataclass
class ThinkDeps:
    settings: Settings
    vocabulary: Callable[[], planner.Vocabulary] = field(default=planner.index_vocabulary)
    llm: Any = None  # pipelines.think.llm.ThinkLLM when an endpoint is configured


class StepState(TypedDict, total=False):
    req: ThinkRequest
    deps: ThinkDeps
    rounds: int
    max_loops: int
    subject_category: str
    aspects: list[Aspect]
    planner: str
    coverage: evaluator.Coverage
    history: list[dict]
    outcome: dict  # the action's fields
    deadline: float  # time.monotonic() when the step's budget ends
    evaluator: str  # deterministic | llm
    warnings: list[str]


def subject_category(subject_id: str) -> str:
    """subject_id is the hard filter: a label category narrows every search to it."""
    s = (subject_id or "").strip().lower()
    return s if s in CATEGORIES else ""


def effective_budget_ms(req: ThinkRequest, s: Settings) -> int:
    return min(req.constraints.latency_budget_ms or s.think_budget_ms_default, s.think_budget_ms_max)


# ------------------------------------------------------------------ nodes
def check_node(st: StepState) -> StepState:
    req, s = st["req"], st["deps"].settings
    max_loops = min(req.constraints.max_loops, s.think_max_loops)
    rounds = len(req.search_history)
    aspects: list[Aspect] = []
    plan_by = "deterministic"
    if req.state:
        try:
            data = signed.verify(req.state, signed.secret_of(s))
        except signed.StateError as exc:
            return {"outcome": {"action": "ERROR", "error_type": "INVALID_INPUT", "message": str(exc)}}
        if data.get("q") != signed.query_digest(req.user_query, req.subject_id):
            return {
                "outcome": {
                    "action": "ERROR",
                    "error_type": "INVALID_INPUT",
                    "message": "state belongs to another question or subject",
                }
            }
        rounds = max(rounds, int(data.get("round") or 0))
        max_loops = min(max_loops, int(data.get("max_loops") or max_loops))
        try:
            aspects = [Aspect.model_validate(a) for a in data.get("aspects") or []]
        except ValidationError:
            aspects = []
        plan_by = data.get("planner") or plan_by
    history = [h if isinstance(h, dict) else h.model_dump() for h in req.search_history]
    return {
        "rounds": rounds,
        "max_loops": max_loops,
        "aspects": aspects,
        "planner": plan_by,
        "history": history,
        "subject_category": subject_category(req.subject_id),
    }


def plan_node(st: StepState) -> StepState:
    if st.get("aspects"):
        return {}
    req, deps = st["req"], st["deps"]
    warnings = list(st.get("warnings") or [])
    try:
        vocab = deps.vocabulary()
    except Exception:  # the index unreachable: plan from the lexicon alone
        log.warning("think: vocabulary unavailable", exc_info=True)
        vocab, warnings = planner.Vocabulary.empty(), [*warnings, "vocabulary_unavailable"]
    if deps.llm is not None:
        aspects, warning = deps.llm.plan(req, st)
        unknown = planner.unknown_places(aspects or [], vocab)
        if aspects and not unknown:
            # the model's places and categories resolved against the catalogue like the planner's own
            return {"aspects": planner.finalize(aspects, vocab), "planner": "llm", "warnings": warnings}
        warnings.append(warning or f"llm_unknown_place: {'、'.join(unknown)[:100]}")
    return {
        "aspects": planner.plan_aspects(req.user_query, vocab, st["subject_category"]),
        "planner": "deterministic",
        "warnings": warnings,
    }


def evaluate_node(st: StepState) -> StepState:
    req, deps = st["req"], st["deps"]
    s = deps.settings
    if deps.llm is not None and st["history"]:
        cands = evaluator.candidates(st["history"], [])
        if cands:
            judged, warning = deps.llm.judge(req, st["aspects"], cands, float(st.get("deadline") or 0))
            if judged is not None:
                cov = evaluator.from_judgement(st["history"], st["aspects"], judged, s.phash_threshold)
                cov.evidence = cov.evidence[: req.constraints.max_evidence]
                return {"coverage": cov, "evaluator": "llm"}
            st_warnings = [*(st.get("warnings") or []), f"{warning or 'llm_judge_failed'} (evaluation)"]
            cov = evaluator.evaluate(st["history"], st["aspects"], req.constraints.max_evidence, s.phash_threshold)
            return {"coverage": cov, "warnings": st_warnings, "evaluator": "deterministic"}
    cov = evaluator.evaluate(st["history"], st["aspects"], req.constraints.max_evidence, s.phash_threshold)
    return {"coverage": cov, "evaluator": "deterministic"}


def _route_after_check(st: StepState) -> str:
    return "end" if st.get("outcome") else "plan"


def decide_node(st: StepState) -> StepState:
    cov, rounds, max_loops, aspects = st["coverage"], st["rounds"], st["max_loops"], st["aspects"]
    history = st.get("history") or []
    if rounds > max_loops:
        return {
            "outcome": {
                "action": "ERROR",
                "error_type": "LOOP_LIMIT",
                "message": f"{rounds} search rounds exceed the limit of {max_loops}",
            }
        }
    if not cov.missing or (rounds >= max_loops and cov.evidence):
        # at the cap: COMPLETE with the best evidence there is; `missing` and the notes say the rest
        return {"outcome": _complete(cov, aspects, rounds, history)}
    if rounds >= max_loops:
        # nothing relevant at all: say what was not found, what is nearest, and what was searched
        by_id = {a.id: a for a in aspects}
        alt = evaluator.alternatives_text(cov, aspects)
        searched = evaluator.searched_text(history)
        message = (
            f"該当なし: {'、'.join(by_id[i].label for i in cov.missing)}（{rounds} 回検索、上限 {max_loops}）。"
            + (alt + "。" if alt else "近い候補も見つからない。")
            + (searched if searched else "")
        )
        return {"outcome": {"action": "ERROR", "error_type": "LOOP_LIMIT", "message": message[:4000]}}
    return {"outcome": _search(st, cov)}


def _complete(cov: evaluator.Coverage, aspects: list[Aspect], rounds: int, history: list[dict]) -> dict:
    return {
        "action": "COMPLETE",
        "evidence": [e.model_dump() for e in evaluator.to_evidence(cov.evidence, aspects)],
        "coverage_notes": evaluator.coverage_notes(cov, aspects, rounds, final=True, history=history),
        "covered": cov.covered,
        "missing": cov.missing,
    }


def _search(st: StepState, cov: evaluator.Coverage) -> dict:
    req, rounds = st["req"], st["rounds"]
    by_id = {a.id: a for a in st["aspects"]}
    todo = [by_id[i] for i in cov.missing]
    searches = []
    for a in todo:
        searches += planner.searches_for(a, rounds, st["subject_category"], free_text=req.user_query)
    hint: dict[str, Any] = {"subject_id": req.subject_id}
    if st["subject_category"]:
        hint["category"] = [st["subject_category"]]
    why = "初回検索: " if rounds == 0 else f"再検索 {rounds + 1} 回目（語の言い換え・絞り込み緩和）: "
    rationale = why + "、".join(a.label for a in todo)
    if cov.covered:
        rationale += "（充足済み: " + "、".join(by_id[i].label for i in cov.covered) + "）"
    return {
        "action": "SEARCH",
        "queries_text": [p.query_text for p in searches],
        "queries_vector": [p.query_vector for p in searches],
        "filters_hint": hint,
        "rationale": rationale,
        "searches": [p.model_dump() for p in searches],
    }


def build_graph():
    g = StateGraph(StepState)
    g.add_node("check", check_node)
    g.add_node("plan", plan_node)
    g.add_node("evaluate", evaluate_node)
    g.add_node("decide", decide_node)
    g.add_edge(START, "check")
    g.add_conditional_edges("check", _route_after_check, {"plan": "plan", "end": END})
    g.add_edge("plan", "evaluate")
    g.add_edge("evaluate", "decide")
    g.add_edge("decide", END)
    return g.compile()


@lru_cache(maxsize=1)
def get_graph():
    return build_graph()


# ------------------------------------------------------------------ one step
def _finish(req: ThinkRequest, st: dict, outcome: dict, started: float, s: Settings) -> dict:
    rounds = int(st.get("rounds") or len(req.search_history))
    max_loops = int(st.get("max_loops") or min(req.constraints.max_loops, s.think_max_loops))
    aspects = st.get("aspects") or []
    next_round = rounds + 1 if outcome["action"] == "SEARCH" else rounds
    token = signed.sign(
        {
            "q": signed.query_digest(req.user_query, req.subject_id),
            "round": next_round,
            "max_loops": max_loops,
            "aspects": [a.model_dump(exclude_defaults=True) for a in aspects],
            "planner": st.get("planner") or "deterministic",
            "rid": req.request_id,
        },
        signed.secret_of(s),
    )
    body = {
        **outcome,
        "request_id": req.request_id,
        "round": rounds,
        "max_loops": max_loops,
        "aspects": [a.model_dump() for a in aspects],
        "planner": st.get("planner") or "deterministic",
        "evaluator": st.get("evaluator") or "deterministic",
        "warnings": list(st.get("warnings") or []),
        "elapsed_ms": int((time.monotonic() - started) * 1000),
        "state": token,
    }
    return _RESPONSE.validate_python(body).model_dump()


def run_step(req: ThinkRequest, deps: ThinkDeps | None = None, *, started: float | None = None) -> dict:
    """One step, synchronously (no budget: the caller bounds it; see run_step_bounded)."""
    started = time.monotonic() if started is None else started
    deps = deps or ThinkDeps(get_settings())
    deadline = started + effective_budget_ms(req, deps.settings) / 1000
    final = get_graph().invoke({"req": req, "deps": deps, "warnings": [], "deadline": deadline})
    out = _finish(req, final, final["outcome"], started, deps.settings)
    log.info(
        "think step",
        extra={
            "request_id": req.request_id,
            "action": out["action"],
            "round": out["round"],
            "planner": out["planner"],
            "elapsed_ms": out["elapsed_ms"],
        },
    )
    return out


_step_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="think-step")


def error_step(req: ThinkRequest, error_type: str, message: str, s: Settings, started: float) -> dict:
    return _finish(req, {}, {"action": "ERROR", "error_type": error_type, "message": message}, started, s)


def run_step_bounded(req: ThinkRequest, deps: ThinkDeps | None = None, *, started: float | None = None) -> dict:
    """One step inside its budget: past it, ERROR TIMEOUT (the state keeps the round as it was)."""
    started = time.monotonic() if started is None else started
    deps = deps or ThinkDeps(get_settings())
    budget_s = effective_budget_ms(req, deps.settings) / 1000
    # the correlation context (run_id / trace_id in every log line) goes with the step into the pool
    fut = _step_pool.submit(contextvars.copy_context().run, run_step, req, deps, started=started)
    try:
        return fut.result(timeout=max(0.0, started + budget_s - time.monotonic()))
    except FutureTimeout:
        return error_step(
            req, "TIMEOUT", f"the step did not finish within {int(budget_s * 1000)} ms", deps.settings, started
        )
    except Exception as exc:  # noqa: BLE001 - a bug answers ERROR OTHER, never a hang
        log.exception("think step failed", extra={"request_id": req.request_id})
        return error_step(req, "OTHER", f"{type(exc).__name__}: {str(exc)[:200]}", deps.settings, started)


# ------------------------------------------------------------------ the whole loop (job)
SearchFn = Callable[[str, dict, int], list[dict]]
_search_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="think-search")

# what a hit keeps in the history (the text is the snippet; vectors and debug stay out)
_HIT_KEYS = (
    "id",
    "score",
    "category",
    "brand_name",
    "product_name",
    "brewery",
    "region",
    "label_features",
    "text",
    "phash",
    "file_path",
)


def our_search(query_text: str, filters: dict, k: int) -> list[dict]:
    from pipelines.search.service import search

    return list(search(query_text or None, filters or None, k=min(k, 20), debug=False).get("hits") or [])


def run_loop(
    req: ThinkRequest,
    deps: ThinkDeps | None = None,
    *,
    search_fn: SearchFn = our_search,
    on_round: Callable[[int, int, list[str]], None] | None = None,
    started: float | None = None,
) -> dict:
    """Steps until COMPLETE or ERROR, executing each SEARCH with `search_fn` (filters: the planned
    ones, which always include the subject's). `on_round(round, max_loops, queries)` is called before
    each round (progress; it may raise to cancel). Returns the last step's answer."""
    started = time.monotonic() if started is None else started
    deps = deps or ThinkDeps(get_settings())
    s = deps.settings
    deadline = started + effective_budget_ms(req, s) / 1000
    history = [h.model_dump() for h in req.search_history]
    state = req.state
    while True:
        step_req = req.model_copy(update={"search_history": history, "state": state})
        out = run_step_bounded(step_req, deps, started=started)
        if out["action"] != "SEARCH":
            out["history"] = _history_summary(history)
            return out
        rnd = out["round"] + 1
        if on_round is not None:
            on_round(rnd, out["max_loops"], out["queries_text"])
        results: list[dict] = []
        futures = [
            _search_pool.submit(contextvars.copy_context().run, search_fn, p["query_text"], p["filters"], p["k"])
            for p in out["searches"]
        ]
        for fut in futures:
            left = deadline - time.monotonic()
            try:
                hits = fut.result(timeout=max(0.0, left))
            except FutureTimeout:
                return error_step(
                    step_req,
                    "TIMEOUT",
                    f"search round {rnd} did not finish within the budget ({effective_budget_ms(req, s)} ms)",
                    s,
                    started,
                )
            results += [{k: h.get(k) for k in _HIT_KEYS if k in h} for h in hits]
        history.append({"queries": out["searches"], "results": results, "evaluation": out["rationale"]})
        state = out["state"]


def _history_summary(history: list[dict]) -> list[dict]:
    return [
        {
            "round": i + 1,
            "queries": [q.get("query_text") if isinstance(q, dict) else q for q in h["queries"]],
            "hits": len(h["results"]),
        }
        for i, h in enumerate(history)
    ]
