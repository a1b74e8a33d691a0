"""Dialogue state: DSState, its initial values and reducers, and the chat turn's extra keys.

Nodes read the state and return only their Δ; LangGraph merges each Δ with the reducer annotated on
the key:

- `messages`: append-only. A Δ is appended; nothing is ever removed or replaced (unlike LangChain's
  `add_messages`, which can delete or overwrite by id, so it is not used here).
- `missing_slots`: set union, order kept, duplicates dropped. An EMPTY list in a Δ is the explicit
  clear (an empty list overwrites). A node with nothing to add leaves the key out of its Δ.
- `trace`, `tool`: overwritten by the latest Δ (the per-turn log keeps the history, not the state).
- every other key: last value wins (LangGraph's default channel).

Size / PII rules are enforced by the nodes: messages hold masked text only, tool holds a
summary and reference ids, never the retrieved documents.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypedDict


class Message(TypedDict, total=False):
    role: Literal["user", "assistant", "tool"]
    content: str  # PII-masked
    turn_id: str
    ts: str


class Intent(TypedDict, total=False):
    intent_type: str
    confidence: float
    candidates: list[str]


class Policy(TypedDict, total=False):
    disallowed: bool
    pii_detected: bool
    reasons: list[str]
    risk_level: str


class Goal(TypedDict, total=False):
    goal_type: str
    goal_text: str  # a summary, never the user's words verbatim
    status: str


class Slots(TypedDict, total=False):
    procedure_type: str
    contract_type: str
    customer_id: str
    values: dict


class Plan(TypedDict, total=False):
    steps: list[str]
    next_action: str
    params: dict


class ToolContext(TypedDict, total=False):
    tool_name: str
    tool_input: dict
    tool_output_summary: dict  # counts and reference ids only
    tool_status: str
    tool_ref: str


class Response(TypedDict, total=False):
    message: str
    citations: list[str]
    followup_question: str
    response_type: str


class Trace(TypedDict, total=False):
    node: str
    action: str
    latency_ms: int
    outcome: str
    metrics: dict


class ErrorInfo(TypedDict, total=False):
    error_type: str
    message: str
    node: str
    time_iso: str


# --- reducers -----------------------------------------------------------------------------------


def append_messages(left: list | None, right: list | dict | None) -> list:
    """Append-only: the Δ (one message or a list) goes after what is there; nothing is removed."""
    if right is None:
        return list(left or [])
    if isinstance(right, dict):
        right = [right]
    return list(left or []) + list(right)


def union_or_clear(left: list | None, right: list | None) -> list:
    """Set union keeping first-seen order; an empty list clears (the seed's explicit overwrite)."""
    if right is None:
        return list(left or [])
    if len(right) == 0:
        return []
    out = list(left or [])
    seen = set(out)
    for item in right:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def overwrite(_left: Any, right: Any) -> Any:
    """Latest Δ wins; unlike the default channel it also accepts two writes in one step."""
    return right


def append_unique(left: list | None, right: list | str | None) -> list:
    """Warnings: appended once each, in the order they happened."""
    if right is None:
        return list(left or [])
    if isinstance(right, str):
        right = [right]
    out = list(left or [])
    for item in right:
        if item not in out:
            out.append(item)
    return out


# --- the state ----------------------------------------------------------------------------------


class DSState(TypedDict, total=False):
    """The keys every dialogue node shares."""

    session_id: str
    turn_id: str
    messages: Annotated[list[Message], append_messages]
    intent: Intent
    dialogue_mode: str
    policy: Policy
    goal: Goal
    slots: Slots
    missing_slots: Annotated[list[str], union_or_clear]
    plan: Plan
    tool: Annotated[ToolContext, overwrite]
    response: Response
    trace: Annotated[Trace, overwrite]
    last_error: ErrorInfo


class ChatState(DSState, total=False):
    """DSState plus what one /v1/chat turn carries. Lives only for the turn; never stored whole."""

    user_text: str  # masked by the policy node before anything else reads it
    use_rag: bool
    top_k: int
    filters: dict
    context: dict
    disable_sayana: bool
    deadline: float  # time.monotonic() by which the reply must be ready
    turn_no: int
    hits: list[dict]  # what the reply is grounded on
    not_found: list[str]  # what the question names that no label has (THE search's not_found)
    rag_status: Literal["off", "ok", "no_hits", "unavailable"]
    draft: str  # the reply before the persona policy
    draft_source: Literal["llm", "template"]
    llm_used: bool
    warnings: Annotated[list[str], append_unique]


def initial_state(session_id: str = "", turn_id: str = "") -> DSState:
    """The initial value of every dialogue key."""
    return {
        "session_id": session_id,
        "turn_id": turn_id,
        "messages": [],
        "intent": {"intent_type": "unknown", "confidence": 0.0, "candidates": []},
        "dialogue_mode": "SLOT_FILLING",
        "policy": {"disallowed": False, "pii_detected": False, "reasons": [], "risk_level": "low"},
        "goal": {"goal_type": "", "goal_text": "", "status": "init"},
        "slots": {"values": {}},
        "missing_slots": [],
        "plan": {"steps": [], "next_action": "", "params": {}},
        "tool": {"tool_status": "idle"},
        "response": {"message": ""},
        "trace": {},
        "last_error": {},
    }


def logging_subset(state: dict) -> dict:
    """The state excerpt every turn writes to the JSON-lines log."""
    trace = state.get("trace") or {}
    intent = state.get("intent") or {}
    plan = state.get("plan") or {}
    tool = state.get("tool") or {}
    policy = state.get("policy") or {}
    missing = state.get("missing_slots") or []
    return {
        "session_id": state.get("session_id", ""),
        "turn_id": state.get("turn_id", ""),
        "trace": {
            "node": trace.get("node"),
            "action": trace.get("action"),
            "latency_ms": trace.get("latency_ms"),
            "outcome": trace.get("outcome"),
        },
        "intent_type": intent.get("intent_type"),
        "dialogue_mode": state.get("dialogue_mode"),
        "plan_next_action": plan.get("next_action"),
        "tool_name": tool.get("tool_name"),
        "tool_status": tool.get("tool_status"),
        "policy": {
            "disallowed": policy.get("disallowed"),
            "pii_detected": policy.get("pii_detected"),
            "risk_level": policy.get("risk_level"),
        },
        "missing_slots": {"count": len(missing), "head": missing[:3]},
    }
