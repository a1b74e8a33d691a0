"""Chat as a LangGraph graph over the dialogue state, run inside a deadline.

    START → session → policy ─┬─ use_rag ─→ retrieve ─┐
                              └───────────────────────┴→ generate ─┬─ reply ──────────→ persona → respond → END
                                                                   └─ none → fallback ─┘

`run_chat` owns the budget: min(CHAT_TIMEOUT_MS, the caller's ceiling). The nodes spend it (retrieval
≤ 2 s, the LLM what is left minus a margin); on top, the whole graph runs under an asyncio timeout a
little before the budget ends, and if it fires (or a node has a bug) the reply is built from the
latest state snapshot (the LLM's draft if there is one, else the grounded template), so an answer
always leaves in time. The route's own 408 limit sits after the budget as the last-resort guard.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache

from langgraph.graph import END, START, StateGraph

from pipelines.chat import nodes
from pipelines.chat.nodes import ChatDeps
from pipelines.chat.persona import apply_persona
from pipelines.chat.pii import mask_text
from pipelines.chat.sessions import valid_session_id
from pipelines.chat.state import ChatState, initial_state, logging_subset
from pipelines.chat.templates import grounded_reply, hits_for_reply
from pipelines.chat.turnlog import TurnLog
from yana import context as correlation

log = logging.getLogger("yana.chat")

# Kept back from the budget for the last-resort reply and writing the HTTP body.
FINISH_GUARD_S = 0.1


@dataclass
class ChatInput:
    user_text: str
    use_rag: bool = True
    top_k: int = 5
    filters: dict | None = None
    context: dict | None = None
    timeout_ms: int | None = None  # the caller's ceiling; the effective budget is the smaller one


@dataclass
class ChatOutput:
    reply: str
    hits: list[dict]
    llm: str  # "on" | "off"
    warnings: list[str]
    elapsed_ms: int
    budget_ms: int
    turn_id: str
    session_id: str
    nodes: list[dict] = field(default_factory=list)
    state: dict = field(default_factory=dict)

    @property
    def rag_hit_count(self) -> int:
        return len(self.hits)


def _route_after_policy(state: ChatState) -> str:
    return "retrieve" if state.get("use_rag") else "generate"


def _route_after_generate(state: ChatState) -> str:
    return "persona" if state.get("llm_used") and state.get("draft") else "fallback"


def build_graph():
    g = StateGraph(ChatState, context_schema=ChatDeps)
    g.add_node("session", nodes.session_node)
    g.add_node("policy", nodes.policy_node)
    g.add_node("retrieve", nodes.retrieve_node)
    g.add_node("generate", nodes.generate_node)
    g.add_node("fallback", nodes.fallback_node)
    g.add_node("persona", nodes.persona_node)
    g.add_node("respond", nodes.respond_node)
    g.add_edge(START, "session")
    g.add_edge("session", "policy")
    g.add_conditional_edges("policy", _route_after_policy, ["retrieve", "generate"])
    g.add_edge("retrieve", "generate")
    g.add_conditional_edges("generate", _route_after_generate, ["persona", "fallback"])
    g.add_edge("fallback", "persona")
    g.add_edge("persona", "respond")
    g.add_edge("respond", END)
    return g.compile()


@lru_cache(maxsize=1)
def get_graph():
    return build_graph()


def budget_ms_for(settings, timeout_ms: int | None) -> int:
    budget = settings.chat_timeout_ms
    if timeout_ms:
        budget = min(budget, int(timeout_ms))
    return max(1, budget)


def _last_resort(values: dict, deps: ChatDeps, reason: str) -> tuple[str, list[dict], bool, list[str]]:
    """A reply from whatever the graph got done: the LLM's draft, else the template over the hits."""
    s = deps.settings
    hits = list(values.get("hits") or [])
    draft, llm_used = values.get("draft") or "", bool(values.get("llm_used") and values.get("draft"))
    not_found = list(values.get("not_found") or [])
    if not llm_used:
        intent = (values.get("intent") or {}).get("intent_type", "")
        hits = hits_for_reply(intent, hits, limit=1 if not_found else 2)
        draft = grounded_reply(
            values.get("user_text") or "",
            hits,
            rag_status=values.get("rag_status") or "off",
            intent=intent,
            variant=int(values.get("turn_no") or 0),
            not_found=not_found,
        )
    result = apply_persona(
        draft,
        user_text=values.get("user_text") or "",
        disable_sayana=bool(values.get("disable_sayana")),
        hits=hits,
        provenance=s.chat_provenance,
        max_chars=s.chat_max_reply_chars,
    )
    return result.text, hits, llm_used, [reason, *result.warnings]


async def run_chat(
    inp: ChatInput, deps: ChatDeps, *, started: float | None = None, turn_log: TurnLog | None = None
) -> ChatOutput:
    """One turn. `started` is time.monotonic() when the request arrived (the budget counts from it)."""
    started = time.monotonic() if started is None else started
    budget_ms = budget_ms_for(deps.settings, inp.timeout_ms)
    deadline = started + budget_ms / 1000 - FINISH_GUARD_S
    ctx = dict(inp.context or {})
    session_id = str(ctx.get("session_id") or "")
    early_warnings = []
    if session_id and not valid_session_id(session_id):
        session_id, early_warnings = "", ["session_id_invalid"]
    turn_id = uuid.uuid4().hex[:16]
    state: dict = {
        **initial_state(session_id=session_id, turn_id=turn_id),
        "user_text": inp.user_text,
        "use_rag": bool(inp.use_rag),
        "top_k": int(inp.top_k),
        "filters": dict(inp.filters or {}),
        "context": ctx,
        "disable_sayana": bool(ctx.get("disable_sayana")),
        "deadline": deadline,
        "warnings": early_warnings,
    }
    values: dict = state
    node_traces: list[dict] = []
    extra_warnings: list[str] = []
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
            async for mode, chunk in get_graph().astream(state, context=deps, stream_mode=["updates", "values"]):
                if mode == "values":
                    values = chunk
                else:
                    for delta in chunk.values():
                        if isinstance(delta, dict) and delta.get("trace"):
                            t = delta["trace"]
                            node_traces.append(
                                {"node": t.get("node"), "latency_ms": t.get("latency_ms"), "outcome": t.get("outcome")}
                            )
        reply = (values.get("response") or {}).get("message") or ""
        hits = list(values.get("hits") or [])
        llm_used = bool(values.get("llm_used"))
        if not reply:  # cannot happen by construction; never send an empty reply anyway
            reply, hits, llm_used, extra_warnings = _last_resort(values, deps, "internal_fallback")
    except TimeoutError:
        # The snapshot may predate the policy node: mask before the text goes anywhere.
        values = {**values, "user_text": mask_text(values.get("user_text") or "")}
        reply, hits, llm_used, extra_warnings = _last_resort(values, deps, "deadline_fallback")
        node_traces.append({"node": "deadline", "latency_ms": None, "outcome": "fired"})
    except Exception:
        log.exception("chat graph failed; answering with the template")
        values = {**values, "user_text": mask_text(values.get("user_text") or "")}
        reply, hits, llm_used, extra_warnings = _last_resort(values, deps, "internal_fallback")
    warnings = list(values.get("warnings") or [])
    for w in extra_warnings:
        if w not in warnings:
            warnings.append(w)
    elapsed_ms = int((time.monotonic() - started) * 1000)
    out = ChatOutput(
        reply=reply,
        hits=hits,
        llm="on" if llm_used else "off",
        warnings=warnings,
        elapsed_ms=elapsed_ms,
        budget_ms=budget_ms,
        turn_id=turn_id,
        session_id=session_id,
        nodes=node_traces,
        state=values,
    )
    if turn_log is not None:
        turn_log.write(turn_record(out))
    return out


def turn_record(out: ChatOutput) -> dict:
    """The logged state excerpt + the turn's outcome, for the JSON-lines log (masked by TurnLog)."""
    v = out.state
    return {
        "event": "chat_turn",
        **correlation.body_ids(),
        **logging_subset(v),
        "session_id": out.session_id,
        "turn_id": out.turn_id,
        "turn_no": v.get("turn_no"),
        "context_run_id": (v.get("context") or {}).get("run_id"),  # the talk app's own run id
        "nodes": out.nodes,
        "llm": out.llm,
        "rag_status": v.get("rag_status"),
        "rag_hit_count": out.rag_hit_count,
        "hit_ids": [h.get("id") for h in out.hits],
        "warnings": out.warnings,
        "elapsed_ms": out.elapsed_ms,
        "budget_ms": out.budget_ms,
        "user_text": v.get("user_text") or "",
        "reply": out.reply,
    }
