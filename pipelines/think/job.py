"""The think job (kind "think"): the whole loop over our own hybrid search, with progress per round
and cancellation between rounds. The result is the last step's COMPLETE or ERROR object (an ERROR is
an answer of the Librarian, so the job still succeeds; only a crash fails it)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipelines.think import planner
from pipelines.think.graph import SearchFn, ThinkDeps, our_search, run_loop
from pipelines.think.llm import build_think_llm
from pipelines.think.models import ThinkRequest
from yana.errors import YanaError
from yana.settings import get_settings

_RESULT_DROP = ("state", "searches", "queries_text", "queries_vector", "filters_hint")


def run_think_job(
    ctx,
    params: dict,
    search_fn: SearchFn = our_search,
    vocabulary: Callable[[], planner.Vocabulary] = planner.index_vocabulary,
) -> dict:
    """`ctx`: workers' JobContext (progress raises when the job was cancelled), or None.
    `search_fn` and `vocabulary` default to the index's (tests pass their own)."""
    started = time.monotonic()
    try:
        req = ThinkRequest.model_validate(params)
    except ValueError as exc:
        raise YanaError("BAD_REQUEST", f"invalid think params: {exc}", 400) from exc
    s = get_settings()

    def on_round(rnd: int, max_loops: int, queries: list[str]) -> None:
        if ctx is not None:
            ctx.progress(f"round {rnd}/{max_loops}", rnd, max_loops, queries=[q[:200] for q in queries[:20]])

    if ctx is not None:
        ctx.progress("planning", 0, min(req.constraints.max_loops, s.think_max_loops))
    out = run_loop(
        req,
        ThinkDeps(settings=s, vocabulary=vocabulary, llm=build_think_llm(s)),
        on_round=on_round,
        started=started,
        search_fn=search_fn,
    )
    if ctx is not None:
        ctx.progress("done", out["round"], out["max_loops"])
    return {k: v for k, v in out.items() if k not in _RESULT_DROP}
