"""Seed 003: DSState's initial values, reducers, and nodes that return only their Δ."""

from __future__ import annotations

import typing

from langgraph.graph import END, START, StateGraph

from pipelines.chat.graph import build_graph
from pipelines.chat.state import (
    ChatState,
    DSState,
    append_messages,
    initial_state,
    logging_subset,
    overwrite,
    union_or_clear,
)

SEED_KEYS = {
    "session_id",
    "turn_id",
    "messages",
    "intent",
    "dialogue_mode",
    "policy",
    "goal",
    "slots",
    "missing_slots",
    "plan",
    "tool",
    "response",
    "trace",
    "last_error",
}


def test_dsstate_has_exactly_the_seed_keys_and_initial_values():
    assert set(typing.get_type_hints(DSState)) == SEED_KEYS
    s = initial_state("sess", "t1")
    assert set(s) == SEED_KEYS
    assert s["messages"] == [] and s["missing_slots"] == []
    assert s["intent"]["intent_type"] == "unknown"
    assert s["dialogue_mode"] in ("SLOT_FILLING", "STEP_BY_STEP")
    assert s["policy"]["disallowed"] is False
    assert s["goal"]["status"] == "init"
    assert s["slots"] == {"values": {}}
    assert s["plan"] == {"steps": [], "next_action": "", "params": {}}
    assert s["tool"] == {"tool_status": "idle"}
    assert s["response"] == {"message": ""}
    assert s["trace"] == {} and s["last_error"] == {}


def test_reducers_declared_on_the_seed_keys():
    hints = typing.get_type_hints(ChatState, include_extras=True)
    assert hints["messages"].__metadata__[0] is append_messages
    assert hints["missing_slots"].__metadata__[0] is union_or_clear
    assert hints["trace"].__metadata__[0] is overwrite
    assert hints["tool"].__metadata__[0] is overwrite


def test_reducer_functions():
    a = [{"role": "user", "content": "1"}]
    assert append_messages(a, {"role": "assistant", "content": "2"}) == a + [{"role": "assistant", "content": "2"}]
    assert append_messages(a, []) == a
    assert union_or_clear(["a", "b"], ["b", "c", "a"]) == ["a", "b", "c"]
    assert union_or_clear(["a", "b"], []) == []  # the explicit clear
    assert union_or_clear(["a"], None) == ["a"]
    assert overwrite({"node": "x"}, {"node": "y"}) == {"node": "y"}


def test_reducers_inside_a_langgraph_graph():
    """messages append across nodes, missing_slots unions then clears, trace and tool are overwritten
    even when two nodes write them in the same step."""

    def a(state):
        return {
            "messages": [{"role": "user", "content": "hi"}],
            "missing_slots": ["region", "brewery"],
            "trace": {"node": "a"},
            "tool": {"tool_name": "x"},
        }

    def b1(state):
        return {
            "messages": [{"role": "assistant", "content": "yo"}],
            "missing_slots": ["region", "category"],
            "trace": {"node": "b1"},
        }

    def b2(state):
        return {"trace": {"node": "b2"}, "tool": {"tool_name": "y"}}

    def c(state):
        return {"missing_slots": []}

    g = StateGraph(ChatState)
    for name, fn in (("a", a), ("b1", b1), ("b2", b2), ("c", c)):
        g.add_node(name, fn)
    g.add_edge(START, "a")
    g.add_edge("a", "b1")
    g.add_edge("a", "b2")  # b1 and b2 run in the same step
    g.add_edge(["b1", "b2"], "c")
    g.add_edge("c", END)
    seen = []
    for _mode, chunk in g.compile().stream({"messages": [{"role": "user", "content": "old"}]}, stream_mode=["values"]):
        seen.append(chunk)
    after_b = next(v for v in seen if v.get("messages") and len(v["messages"]) == 3)
    assert [m["content"] for m in after_b["messages"]] == ["old", "hi", "yo"]
    assert after_b["missing_slots"] == ["region", "brewery", "category"]
    assert after_b["trace"]["node"] in ("b1", "b2") and after_b["tool"] == {"tool_name": "y"}
    assert seen[-1]["missing_slots"] == []
    assert [m["content"] for m in seen[-1]["messages"]] == ["old", "hi", "yo"]


def test_chat_graph_shape():
    g = build_graph().get_graph()
    nodes = set(g.nodes) - {"__start__", "__end__"}
    assert nodes == {"session", "policy", "retrieve", "generate", "fallback", "persona", "respond"}
    edges = {(e.source, e.target) for e in g.edges}
    for edge in [
        ("__start__", "session"),
        ("session", "policy"),
        ("policy", "retrieve"),
        ("policy", "generate"),
        ("retrieve", "generate"),
        ("generate", "persona"),
        ("generate", "fallback"),
        ("fallback", "persona"),
        ("persona", "respond"),
        ("respond", "__end__"),
    ]:
        assert edge in edges, edge


def test_logging_subset_has_the_seed_fields():
    s = {
        **initial_state("s", "t"),
        "missing_slots": ["a", "b", "c", "d"],
        "trace": {"node": "n", "action": "x", "latency_ms": 3, "outcome": "ok", "metrics": {"big": 1}},
        "tool": {"tool_name": "label_search", "tool_status": "success", "tool_input": {"query": "q"}},
    }
    sub = logging_subset(s)
    assert sub["session_id"] == "s" and sub["turn_id"] == "t"
    assert sub["trace"] == {"node": "n", "action": "x", "latency_ms": 3, "outcome": "ok"}
    assert sub["intent_type"] == "unknown" and sub["dialogue_mode"] == "SLOT_FILLING"
    assert sub["plan_next_action"] == "" and sub["tool_name"] == "label_search" and sub["tool_status"] == "success"
    assert sub["policy"] == {"disallowed": False, "pii_detected": False, "risk_level": "low"}
    assert sub["missing_slots"] == {"count": 4, "head": ["a", "b", "c"]}
    assert "tool_input" not in str(sub)
