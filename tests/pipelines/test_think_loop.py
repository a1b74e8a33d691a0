"""The think loop in process: budget (a search that stalls), cancel between rounds, the evaluator's
de-duplication and set cover. Searches are a stand-in function here (the real one runs in the API
and job tests); the job record and its cancellation are real (the stack's Redis)."""

from __future__ import annotations

import threading
import time

import pytest

from pipelines.runtime.jobs import JobStore
from pipelines.think import evaluator, planner
from pipelines.think.graph import ThinkDeps, run_loop
from pipelines.think.job import run_think_job
from pipelines.think.models import Aspect, ThinkRequest
from workers.base_task import JobCancelled, JobContext
from yana.settings import Settings

VOCAB = planner.Vocabulary(
    {"brand_name": {"獺祭": "獺祭"}, "brewery": {}, "region": {"小樽": "小樽", "山形": "山形"}},
    {"brand_name": {}, "brewery": {}, "region": {"otaru": {"小樽"}, "yamagata": {"山形"}}},
)
HITS = {
    "小樽": {
        "id": "l1",
        "region": "小樽",
        "brand_name": "北の誉",
        "label_features": ["辛口"],
        "category": "sake",
        "text": "小樽 辛口",
    },
    "山形": {
        "id": "l2",
        "region": "山形",
        "brand_name": "十四代",
        "label_features": ["辛口"],
        "category": "sake",
        "text": "山形 辛口",
    },
}


def deps() -> ThinkDeps:
    return ThinkDeps(settings=Settings(), vocabulary=lambda: VOCAB)


RELEASE = threading.Event()  # ends a stalled search once its test is over


def fake_search(delay_s: float = 0.0, stall_after: int | None = None):
    calls = []

    def search(query_text, filters, k):
        calls.append((query_text, filters, k))
        if stall_after is not None and len(calls) > stall_after:
            RELEASE.wait(30)
        time.sleep(delay_s)
        region = (filters.get("region") or [""])[0]
        return [dict(HITS[region])] if region in HITS else []

    search.calls = calls
    return search


def req(q: str = "小樽と山形の辛口を比べたい", **kw) -> ThinkRequest:
    return ThinkRequest(request_id="r1", user_query=q, subject_id="sake", **kw)


def test_loop_completes_with_one_label_per_aspect():
    out = run_loop(req(), deps(), search_fn=fake_search())
    assert out["action"] == "COMPLETE"
    assert [e["document_id"] for e in out["evidence"]] == ["l1", "l2"]


def test_a_stalled_search_is_error_timeout_within_the_budget():
    t = time.monotonic()
    out = run_loop(req(constraints={"latency_budget_ms": 600}), deps(), search_fn=fake_search(stall_after=0))
    took = time.monotonic() - t
    RELEASE.set()
    assert out["action"] == "ERROR" and out["error_type"] == "TIMEOUT", out
    assert took < 1.5


def test_a_stalled_step_is_error_timeout_and_keeps_the_round():
    from pipelines.think.graph import run_step_bounded

    stalled = threading.Event()

    def slow_vocabulary():
        stalled.wait(5)  # an index that does not answer
        return VOCAB

    t = time.monotonic()
    out = run_step_bounded(
        req(constraints={"latency_budget_ms": 300}), ThinkDeps(settings=Settings(), vocabulary=slow_vocabulary)
    )
    took = time.monotonic() - t
    stalled.set()
    assert out["action"] == "ERROR" and out["error_type"] == "TIMEOUT" and out["round"] == 0
    assert 0.25 < took < 0.8


def test_english_question_plans_the_same_aspects():
    ja = planner.plan_aspects("小樽と山形の辛口を比べたい", VOCAB)
    en = planner.plan_aspects("Compare dry sake from Otaru and Yamagata", VOCAB)
    assert [(a.region, a.features) for a in ja] == [(a.region, a.features) for a in en]


def test_evaluator_drops_near_duplicates_and_keeps_the_smallest_cover():
    aspects = [
        Aspect(id="a1", label="小樽×辛口", region="小樽", features=["辛口"]),
        Aspect(id="a2", label="獺祭", brand_name="獺祭"),
    ]
    hits = [
        {
            "id": "x1",
            "region": "小樽",
            "brand_name": "獺祭",
            "label_features": ["辛口"],
            "score": 0.5,
            "phash": "aaaaaaaaaaaaaaaa",
            "text": "獺祭 小樽 辛口",
        },
        {
            "id": "x2",
            "region": "小樽",
            "brand_name": "獺祭",
            "label_features": ["辛口"],
            "score": 0.9,
            "phash": "aaaaaaaaaaaaaaab",
            "text": "獺祭 小樽 辛口 です",
        },
        {
            "id": "x3",
            "region": "小樽",
            "brand_name": "北の誉",
            "label_features": ["辛口"],
            "score": 0.95,
            "text": "北の誉",
        },
        {
            "id": "x4",
            "region": "山形",
            "brand_name": "獺祭",
            "label_features": ["甘口"],
            "score": 0.99,
            "text": "獺祭 山形",
        },
    ]
    cov = evaluator.evaluate([{"results": hits}], aspects, max_evidence=8)
    assert cov.missing == [] and cov.duplicates_dropped == 1
    assert [c.doc_id for c in cov.evidence] == ["x2"]  # one label covers both aspects; the better copy


def test_cancel_between_rounds(redis_client):
    store = JobStore(redis_client)
    job = store.create("think", {}, queue="think")
    lost = threading.Event()
    ctx = JobContext(store, job, "token", lost)
    rounds: list[str] = []
    orig = ctx.progress

    def progress(stage, done, total, **detail):
        rounds.append(stage)
        if stage.startswith("round 2"):
            store.cancel(job["id"])
            lost.set()  # what the heartbeat does when the record is no longer ours
        orig(stage, done, total, **detail)

    ctx.progress = progress  # type: ignore[method-assign]
    search = fake_search()
    params = req("小樽の辛口と獺祭の甘口").model_dump(mode="json")  # 獺祭 has no hit: a second round
    with pytest.raises(JobCancelled):  # the test's vocabulary, not whatever the stack's index holds now
        run_think_job(ctx, params, search_fn=search, vocabulary=lambda: VOCAB)
    assert rounds[-1].startswith("round 2/3")
    assert len({c[0] for c in search.calls}) == 2  # round 1's two searches; round 2 never ran
    assert store.get(job["id"])["status"] == "cancelled"


def test_step_logs_carry_request_id_and_the_contract_ids():
    import io
    import json
    import logging

    from yana import context
    from yana.logging import JsonLinesFormatter

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonLinesFormatter())
    logger = logging.getLogger("yana.think")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    corr = context.Correlation.new()
    token = context.set_current(corr)
    try:
        from pipelines.think.graph import run_step_bounded

        # its own request_id: a step of an earlier test still finishing in the step pool may log too
        run_step_bounded(ThinkRequest(request_id="log-check", user_query="小樽の辛口", subject_id="sake"), deps())
    finally:
        context.reset(token)
        logger.removeHandler(handler)
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    step = [r for r in records if r["msg"] == "think step" and r.get("request_id") == "log-check"]
    assert len(step) == 1
    assert step[0]["run_id"] == corr.run_id and step[0]["trace_id"] == corr.trace_id
