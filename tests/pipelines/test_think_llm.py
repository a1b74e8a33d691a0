"""Planning by the LLM through the official openai client against a real HTTP stub speaking the
wire format with tool calls: a good plan, a malformed one repaired, malformed twice, and a slow model
(the deterministic planner answers, with a warning, inside the budget)."""

from __future__ import annotations

import json
import time

import pytest

from pipelines.think.graph import ThinkDeps, run_step_bounded
from pipelines.think.llm import ThinkLLM
from pipelines.think.models import ThinkRequest
from tests.pipelines.test_think_loop import VOCAB
from tests.pipelines.think_llm_stub import ToolCallStub
from yana.settings import Settings

GOOD = json.dumps(
    {
        "aspects": [
            {"label": "小樽の辛口", "region": "小樽", "features": ["辛口"], "category": "sake"},
            {"label": "山形の辛口", "region": "山形", "features": ["辛口"], "category": "sake"},
        ]
    },
    ensure_ascii=False,
)
MALFORMED = '{"aspects": [{"region": "小樽"'  # cut off mid-object
WRONG_SHAPE = json.dumps({"aspects": [{"label": "x", "category": "spaceship"}]})  # no such kind of drink


@pytest.fixture()
def stub():
    s = ToolCallStub()
    yield s
    s.close()


def deps(stub) -> ThinkDeps:
    s = Settings(openai_base_url=stub.base_url, openai_model="think-stub")
    return ThinkDeps(settings=s, vocabulary=lambda: VOCAB, llm=ThinkLLM(s, None))


def req(**kw) -> ThinkRequest:
    return ThinkRequest(request_id="r-llm", user_query="小樽と山形、辛口で比べるなら？", subject_id="sake", **kw)


def test_a_good_tool_call_is_the_plan(stub):
    stub.script((GOOD, 0.0))
    out = run_step_bounded(req(), deps(stub))
    assert out["action"] == "SEARCH" and out["planner"] == "llm" and out["warnings"] == []
    assert [a["region"] for a in out["aspects"]] == ["小樽", "山形"]
    sent = stub.received[0]
    assert sent["tools"][0]["function"]["name"] == "plan_aspects"
    assert sent["tool_choice"]["function"]["name"] == "plan_aspects"


def test_a_malformed_call_gets_one_repair_attempt(stub):
    stub.script((MALFORMED, 0.0), (GOOD, 0.0))
    out = run_step_bounded(req(), deps(stub))
    assert out["planner"] == "llm" and len(stub.received) == 2
    repair = stub.received[1]["messages"]
    assert repair[-1]["role"] == "tool" and "invalid arguments" in repair[-1]["content"]


def test_malformed_twice_falls_back_to_the_deterministic_plan(stub):
    stub.script((MALFORMED, 0.0), (WRONG_SHAPE, 0.0))
    out = run_step_bounded(req(), deps(stub))
    assert out["action"] == "SEARCH" and out["planner"] == "deterministic"
    assert out["warnings"] == ["llm_invalid_output"]
    assert [a["region"] for a in out["aspects"]] == ["小樽", "山形"]
    assert len(stub.received) == 2


def test_a_slow_model_never_costs_more_than_the_budget(stub):
    stub.script((GOOD, 5.0))
    t = time.monotonic()
    out = run_step_bounded(req(constraints={"latency_budget_ms": 1000}), deps(stub))
    took = time.monotonic() - t
    assert took < 1.0
    assert out["action"] == "SEARCH" and out["planner"] == "deterministic"
    assert out["warnings"] == ["llm_timeout"]


def test_the_plan_rides_in_the_state_so_the_next_step_does_not_ask_again(stub):
    stub.script((GOOD, 0.0))
    d = deps(stub)
    first = run_step_bounded(req(), d)
    hist = [{"queries": first["queries_text"], "results": []}]
    second = run_step_bounded(req(state=first["state"], search_history=hist), d)
    assert second["planner"] == "llm" and len(stub.received) == 1
    assert second["round"] == 1 and second["action"] == "SEARCH"


HISTORY = [
    {
        "queries": ["小樽 辛口", "山形 辛口"],
        "results": [
            {
                "id": "l1",
                "region": "小樽",
                "brand_name": "北の誉",
                "label_features": ["辛口"],
                "category": "sake",
                "text": "小樽の辛口",
            },
            {
                "id": "l2",
                "region": "山形",
                "brand_name": "十四代",
                "label_features": ["辛口"],
                "category": "sake",
                "text": "山形の辛口",
            },
            {
                "id": "l3",
                "region": "山形",
                "brand_name": "月の鶴",
                "label_features": ["甘口"],
                "category": "sake",
                "text": "山形の甘口",
            },
        ],
    }
]


def judged(*pairs) -> str:
    return json.dumps(
        {"aspects": [{"id": a, "covered": bool(d), "document_ids": d, "why": f"{a} はこれ"} for a, d in pairs]},
        ensure_ascii=False,
    )


def _second_step(stub, *judge_script):
    stub.script((GOOD, 0.0))
    d = deps(stub)
    first = run_step_bounded(req(), d)
    stub.script(*judge_script)
    return run_step_bounded(req(state=first["state"], search_history=HISTORY), d)


def test_the_model_judges_coverage_and_says_why(stub):
    out = _second_step(stub, (judged(("a1", ["l1"]), ("a2", ["l2"])), 0.0))
    assert out["action"] == "COMPLETE" and out["evaluator"] == "llm", out
    assert [e["document_id"] for e in out["evidence"]] == ["l1", "l2"]
    assert [e["why_relevant"] for e in out["evidence"]] == ["a1 はこれ", "a2 はこれ"]
    judge = stub.received[-1]
    assert judge["tools"][0]["function"]["name"] == "judge_coverage"
    assert "l3" in judge["messages"][-1]["content"]  # every candidate was shown


def test_an_invented_document_id_is_repaired_once(stub):
    out = _second_step(stub, (judged(("a1", ["nope"]), ("a2", ["l2"])), 0.0), (judged(("a1", ["l1"]), ("a2", [])), 0.0))
    assert out["evaluator"] == "llm" and out["action"] == "SEARCH"  # a2 judged missing: search again
    assert out["queries_text"] and len(out["searches"]) == 1
    assert "not among the candidates" in stub.received[-1]["messages"][-1]["content"]


def test_a_judge_failing_twice_falls_back_to_the_deterministic_evaluator(stub):
    out = _second_step(stub, ("not json", 0.0), (judged(("a1", ["l1"])), 0.0))  # second misses a2
    assert out["evaluator"] == "deterministic" and out["action"] == "COMPLETE"
    assert out["warnings"] == ["llm_invalid_output (evaluation)"]
    assert [e["document_id"] for e in out["evidence"]] == ["l1", "l2"]
