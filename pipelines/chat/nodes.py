"""The chat graph's nodes. Each reads the state and returns only its Δ (what it changes).

    session → policy → [retrieve] → generate → [fallback] → persona → respond

Every node knows the turn's deadline (state["deadline"], time.monotonic()) and spends at most what is
left: retrieval at most CHAT_RETRIEVAL_TIMEOUT_MS, the LLM the rest minus CHAT_LLM_MARGIN_MS. Blocking
work (retrieval, Redis) runs in threads and is waited for with a bound; a node never raises for an
unavailable dependency, it writes a warning and the graph goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from langgraph.runtime import Runtime

from pipelines.chat import pii
from pipelines.chat.breaker import CircuitBreaker, Permit
from pipelines.chat.llm import ChatLLM, LLMOutcome, build_messages
from pipelines.chat.persona import apply_persona, split_sentences
from pipelines.chat.sessions import SessionStore
from pipelines.chat.state import ChatState
from pipelines.chat.templates import classify_intent, ensure_not_found, grounded_reply, hits_for_reply
from pipelines.search.service import QUERY_MAX_CHARS
from yana.settings import Settings

log = logging.getLogger("yana.chat")

# (query_text, filters, k) -> hits, or THE search's result {hits, not_found}. Blocking; the graph
# runs it in a thread with a deadline.
Retriever = Callable[[str, dict, int], list[dict] | dict]

HIT_FIELDS = ("id", "brand_name", "product_name", "brewery", "region", "label_features", "file_path")
STEPS = ["session", "policy", "retrieve", "generate", "fallback", "persona", "respond"]


# Retrieval gets its own threads: a hung search must not starve Redis calls (default executor).
# Shared by every ChatDeps of the process; threads are started on first use.
RETRIEVAL_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="chat-retrieve")

# The user asking the model to drop its rules: answered as usual (the prompt's guard holds), but
# recorded in the policy (risk_level high) so the turn log shows it.
_INJECTION_RE = re.compile(
    r"(?:(?:前の|以前の|上の|これまでの|全ての|すべての)?(?:指示|命令|ルール|設定|プロンプト)を(?:無視|忘れ)"
    r"|システムプロンプト|ignore (?:all |the )?(?:previous|above|prior) (?:instructions|rules)|system prompt)",
    re.I,
)


@dataclass
class ChatDeps:
    """What the graph's nodes use (LangGraph runtime context): injected, so tests and the API wire
    their own retriever, LLM and stores."""

    settings: Settings
    retrieve: Retriever | None = None
    llm: ChatLLM | None = None
    breaker: CircuitBreaker | None = None
    sessions: SessionStore | None = None
    retrieval_pool: ThreadPoolExecutor = field(default_factory=lambda: RETRIEVAL_POOL)


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _left(state: ChatState) -> float:
    return state["deadline"] - time.monotonic()


def _trace(node: str, action: str, started: float, outcome: str, **metrics: Any) -> dict:
    return {
        "node": node,
        "action": action,
        "latency_ms": int((time.perf_counter() - started) * 1000),
        "outcome": outcome,
        "metrics": metrics,
    }


def _error(node: str, error_type: str, message: str) -> dict:
    return {"error_type": error_type, "message": message[:200], "node": node, "time_iso": _now_iso()}


async def _blocking(fn: Callable, *args, timeout: float):
    """Run a blocking call in the default executor, waiting at most `timeout` seconds."""
    return await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout=max(0.01, timeout))


def public_hit(hit: dict) -> dict:
    out = {k: hit.get(k) for k in HIT_FIELDS}
    out["id"] = str(out["id"] or "")
    for k in ("brand_name", "product_name", "brewery", "region", "file_path"):
        out[k] = "" if out[k] is None else str(out[k])
    feats = hit.get("label_features") or []
    out["label_features"] = [str(f) for f in (feats if isinstance(feats, list) else [feats])]
    if hit.get("category"):
        out["category"] = str(hit["category"])
    return out


def _dedupe(hits: list[dict]) -> list[dict]:
    """Same label twice (several chunks, or near-duplicate uploads with the same names): keep the first."""
    seen, out = set(), []
    for h in hits:
        key = h["id"] or (h["brand_name"], h["product_name"], h["brewery"])
        name_key = (h["brand_name"], h["product_name"], h["brewery"])
        if key in seen or (any(name_key) and name_key in seen):
            continue
        seen.update({key, name_key})
        out.append(h)
    return out


# --- nodes --------------------------------------------------------------------------------------


async def session_node(state: ChatState, runtime: Runtime[ChatDeps]) -> dict:
    """Load the session's recent turns and carried state (Redis), so the conversation continues."""
    started = time.perf_counter()
    deps = runtime.context
    sid = state.get("session_id") or ""
    asked_turn = (state.get("context") or {}).get("turn")
    if not sid or deps.sessions is None:
        return {"turn_no": int(asked_turn or 1), "trace": _trace("session", "skip", started, "no_session")}
    try:
        snap = await _blocking(
            deps.sessions.load, sid, deps.settings.chat_history_turns, timeout=min(1.0, _left(state) / 4)
        )
    except Exception as exc:  # noqa: BLE001 - Redis down, slow or holding bad data: answer without the history
        return {
            "turn_no": int(asked_turn or 1),
            "warnings": ["session_unavailable"],
            "last_error": _error("session", "session_unavailable", exc.__class__.__name__),
            "trace": _trace("session", "load", started, "error"),
        }
    delta: dict = {
        "messages": snap.messages(),
        "turn_no": int(asked_turn or snap.turn_count + 1),
        "trace": _trace("session", "load", started, "ok", turns=len(snap.turns)),
    }
    for key in ("intent", "dialogue_mode", "goal", "slots"):
        if key in snap.state:
            delta[key] = snap.state[key]
    if snap.state.get("missing_slots"):
        delta["missing_slots"] = snap.state["missing_slots"]
    return delta


async def policy_node(state: ChatState, runtime: Runtime[ChatDeps]) -> dict:
    """Mask PII before anything else reads the text; classify the intent; plan the turn."""
    started = time.perf_counter()
    masked, kinds = pii.mask(state.get("user_text") or "")
    context = dict(state.get("context") or {})
    if context.get("topic"):
        context["topic"] = pii.mask_text(str(context["topic"]))
    intent_type, confidence = classify_intent(masked)
    use_rag = bool(state.get("use_rag"))
    filters = pii.mask_obj(state.get("filters") or {})
    values = dict((state.get("slots") or {}).get("values") or {})
    values.update({"filters": filters, "topic": context.get("topic") or values.get("topic", "")})
    reasons = [f"pii_masked:{k}" for k in kinds]
    injection = bool(_INJECTION_RE.search(masked))
    if injection:
        reasons.append("prompt_injection_suspected")
    return {
        "user_text": masked,
        "context": context,
        "filters": filters,
        "policy": {
            "disallowed": False,
            "pii_detected": bool(kinds),
            "reasons": reasons,
            "risk_level": "high" if injection else "medium" if kinds else "low",
        },
        "intent": {"intent_type": intent_type, "confidence": confidence, "candidates": [intent_type]},
        "dialogue_mode": state.get("dialogue_mode") or "SLOT_FILLING",
        "goal": {"goal_type": "label_guide", "goal_text": "ラベル帳にもとづく案内", "status": "active"},
        "slots": {"values": values},
        "plan": {
            "steps": [s for s in STEPS if use_rag or s != "retrieve"],
            "next_action": "retrieve" if use_rag else "generate",
            "params": {"top_k": state.get("top_k", 5)},
        },
        "messages": [{"role": "user", "content": masked, "turn_id": state.get("turn_id", ""), "ts": _now_iso()}],
        "rag_status": "off",
        "hits": [],
        "trace": _trace("policy", "mask_and_plan", started, "pii_masked" if kinds else "ok", pii=kinds),
    }


def retrieval_query(user_text: str, max_chars: int = QUERY_MAX_CHARS) -> str:
    """What the search is asked: the turn's last max_chars characters (never more than search
    accepts). A long turn is valid; a rejected or slow query would silently turn retrieval off.
    The end is kept, where a spoken question usually is."""
    limit = max(1, min(max_chars, QUERY_MAX_CHARS))
    return user_text[-limit:].strip() if len(user_text) > limit else user_text


async def retrieve_node(state: ChatState, runtime: Runtime[ChatDeps]) -> dict:
    """Label search with at most CHAT_RETRIEVAL_TIMEOUT_MS; down or slow → no context, rag_unavailable."""
    started = time.perf_counter()
    deps = runtime.context
    k = int(state.get("top_k") or 5)
    filters = {k_: v for k_, v in (state.get("filters") or {}).items() if v not in (None, "", [])}
    query = retrieval_query(state.get("user_text") or "", deps.settings.chat_retrieval_query_chars)
    tool = {"tool_name": "label_search", "tool_input": {"query": query[:200], "filters": filters, "k": k}}
    # Keep enough of the budget for the reply itself after the search.
    timeout = min(
        deps.settings.chat_retrieval_timeout_ms / 1000, _left(state) - deps.settings.chat_llm_margin_ms / 1000
    )

    def unavailable(status: str, why: str) -> dict:
        return {
            "rag_status": "unavailable",
            "hits": [],
            "warnings": ["rag_unavailable"],
            "tool": {**tool, "tool_status": status, "tool_output_summary": {"hit_count": 0}, "tool_ref": ""},
            "last_error": _error("retrieve", "rag_unavailable", why),
            "plan": {**(state.get("plan") or {}), "next_action": "generate"},
            "trace": _trace("retrieve", "label_search", started, status),
        }

    if deps.retrieve is None:
        return unavailable("error", "no retriever configured")
    if timeout <= 0.05:
        return unavailable("timeout", "no budget left for retrieval")
    ctx = contextvars.copy_context()  # the search logs with this request's run_id / trace_id
    loop = asyncio.get_running_loop()
    try:
        raw = await asyncio.wait_for(
            loop.run_in_executor(deps.retrieval_pool, ctx.run, deps.retrieve, query, filters, k), timeout=timeout
        )
    except TimeoutError:
        return unavailable("timeout", f"retrieval exceeded {timeout:.2f}s")
    except Exception as exc:  # noqa: BLE001 - any failure of the store or the search: answer without it
        log.warning("chat retrieval failed", extra={"error": exc.__class__.__name__})
        return unavailable("error", exc.__class__.__name__)
    not_found: list[str] = []
    if isinstance(raw, dict):  # THE search's result: the hits and what the question names that no label has
        not_found = [str(x) for x in raw.get("not_found") or []]
        raw = raw.get("hits")
    hits = _dedupe([public_hit(h) for h in (raw or [])])[:k]
    ids = [h["id"] for h in hits]
    return {
        "rag_status": "ok" if hits else "no_hits",
        "hits": hits,
        "not_found": not_found,
        "tool": {
            **tool,
            "tool_status": "success",
            "tool_output_summary": {"hit_count": len(hits), "ids": ids[:10], "not_found": not_found},
            "tool_ref": "labels:" + ",".join(ids[:5]),
        },
        "plan": {**(state.get("plan") or {}), "next_action": "generate"},
        "trace": _trace(
            "retrieve",
            "label_search",
            started,
            "ok" if hits else "no_hits",
            hits=len(hits),
            timeout_ms=int(timeout * 1000),
        ),
    }


async def generate_node(state: ChatState, runtime: Runtime[ChatDeps]) -> dict:
    """The LLM, if configured, allowed by the breaker and there is budget; else leave it to fallback."""
    started = time.perf_counter()
    deps = runtime.context
    s = deps.settings
    plan = {**(state.get("plan") or {}), "next_action": "persona"}

    def no_llm(outcome: str, warning: str | None = None, **extra) -> dict:
        delta = {
            "draft": "",
            "llm_used": False,
            "plan": {**plan, "next_action": "fallback"},
            "trace": _trace("generate", "llm", started, outcome, **extra),
        }
        if warning:
            delta["warnings"] = [warning]
        return delta

    if deps.llm is None:
        return no_llm("not_configured")
    timeout = _left(state) - s.chat_llm_margin_ms / 1000
    if timeout < s.chat_llm_min_ms / 1000:
        return no_llm("skipped", "llm_skipped_low_budget", budget_ms=int(timeout * 1000))
    permit = await _ask_breaker(deps)
    if permit is not None and not permit.allowed:
        return no_llm("circuit_open", "llm_circuit_open", breaker=permit.state)
    if deps.breaker is not None:
        timeout = _left(state) - s.chat_llm_margin_ms / 1000

    history = list(state.get("messages") or [])[:-1][-2 * s.chat_history_turns :] if s.chat_history_turns else []
    not_found = list(state.get("not_found") or [])
    messages = build_messages(
        state.get("user_text") or "",
        state.get("hits") or [],
        rag_status=state.get("rag_status") or "off",
        history=history,
        not_found=not_found,
    )
    outcome = await deps.llm.complete(messages, timeout)
    await _record_outcome(deps, state, permit, outcome, timeout)
    if outcome.text is None:
        delta = no_llm("error", outcome.warning, status=outcome.status, llm_ms=outcome.latency_ms)
        if outcome.failure:
            delta["last_error"] = _error("generate", outcome.warning or "llm_error", f"status {outcome.status}")
        return delta
    text, warnings = _trim_reply(outcome.text, outcome.finish_reason, s.chat_max_reply_chars)
    text = ensure_not_found(text, not_found)
    delta = {
        "draft": text,
        "draft_source": "llm",
        "llm_used": True,
        "plan": plan,
        "trace": _trace("generate", "llm", started, "ok", llm_ms=outcome.latency_ms),
    }
    if warnings:
        delta["warnings"] = warnings
    return delta


async def _ask_breaker(deps: ChatDeps) -> Permit | None:
    """The circuit breaker's permit; None without a breaker or when its store is too slow to ask
    (then the LLM is called rather than refused)."""
    if deps.breaker is None:
        return None
    try:
        return await _blocking(deps.breaker.allow, timeout=0.5)
    except TimeoutError:  # the breaker falls back to memory on Redis errors; only slowness is left
        return None


async def _record_outcome(deps: ChatDeps, state: ChatState, permit: Permit | None, outcome: LLMOutcome, timeout: float):
    """Tell the breaker how the call went, when that changes anything."""
    if deps.breaker is None:
        return
    # A timeout under a caller's tight ceiling (less than half of our own budget) says nothing about
    # the endpoint's health: it must not open the circuit for every other caller.
    failure = outcome.failure and not (
        outcome.status is None and outcome.warning == "llm_timeout" and timeout < deps.settings.chat_timeout_ms / 2000
    )
    # A success on a clean, closed circuit has nothing to reset: skip that Redis round trip.
    clean = permit is not None and permit.state == "closed" and permit.failures == 0
    if not failure and (clean or outcome.failure):  # nothing to reset, or a failure that does not count
        return
    record = deps.breaker.record_failure if failure else deps.breaker.record_success
    args = (outcome.warning,) if failure else ()
    try:
        await _blocking(record, *args, timeout=max(0.05, min(0.3, _left(state) - 0.1)))
    except TimeoutError:
        pass  # the breaker's bookkeeping must never cost the reply (Redis errors it absorbs itself)


def _trim_reply(text: str, finish_reason: str | None, max_chars: int) -> tuple[str, list[str]]:
    """The reply without an unfinished last sentence, and llm_overlong_reply when it ran long."""
    if finish_reason == "length":
        # Cut off by max_tokens: drop the unfinished last sentence when there is a finished one.
        sentences = split_sentences(text)
        if len(sentences) > 1 and sentences[-1].rstrip()[-1:] not in "。！？!?」』）)":
            text = "".join(sentences[:-1])
        return text, ["llm_overlong_reply"]
    if len(text) > max_chars or len(split_sentences(text)) > 5:
        return text, ["llm_overlong_reply"]
    return text, []


async def fallback_node(state: ChatState, runtime: Runtime[ChatDeps]) -> dict:
    """The grounded template reply (no LLM, or the LLM failed / was empty)."""
    started = time.perf_counter()
    intent = (state.get("intent") or {}).get("intent_type", "")
    not_found = list(state.get("not_found") or [])
    # the template names at most two labels; one alternative when the asked thing is not there
    used = hits_for_reply(intent, state.get("hits") or [], limit=1 if not_found else 2)
    text = grounded_reply(
        state.get("user_text") or "",
        used,
        rag_status=state.get("rag_status") or "off",
        intent=intent,
        variant=int(state.get("turn_no") or 0),
        topic=(state.get("context") or {}).get("topic") or "",
        not_found=not_found,
    )
    return {
        "draft": text,
        "draft_source": "template",
        "hits": used,
        "plan": {**(state.get("plan") or {}), "next_action": "persona"},
        "trace": _trace("fallback", "template", started, "ok", hits=len(used)),
    }


async def persona_node(state: ChatState, runtime: Runtime[ChatDeps]) -> dict:
    """yana's output policy: interjection once (or none), ≤5 sentences, optional provenance."""
    started = time.perf_counter()
    s = runtime.context.settings
    hits = state.get("hits") or []
    result = apply_persona(
        state.get("draft") or "",
        user_text=state.get("user_text") or "",
        disable_sayana=bool(state.get("disable_sayana")),
        hits=hits,
        provenance=s.chat_provenance,
        max_chars=s.chat_max_reply_chars,
    )
    delta = {
        "response": {
            "message": result.text,
            "citations": [h["id"] for h in hits],
            "followup_question": "",
            "response_type": state.get("draft_source") or "template",
        },
        "plan": {**(state.get("plan") or {}), "next_action": "respond"},
        "trace": _trace("persona", "apply_policy", started, "ok", warnings=len(result.warnings)),
    }
    if result.warnings:
        delta["warnings"] = result.warnings
    return delta


async def respond_node(state: ChatState, runtime: Runtime[ChatDeps]) -> dict:
    """Append the reply to the conversation and store the turn (masked) under the session."""
    started = time.perf_counter()
    deps = runtime.context
    reply = pii.mask_text((state.get("response") or {}).get("message") or "")
    message = {"role": "assistant", "content": reply, "turn_id": state.get("turn_id", ""), "ts": _now_iso()}
    delta: dict = {"messages": [message], "plan": {**(state.get("plan") or {}), "next_action": "done"}}
    sid = state.get("session_id") or ""
    if not sid or deps.sessions is None:
        delta["trace"] = _trace("respond", "reply", started, "ok", stored=False)
        return delta
    hits = state.get("hits") or []
    turn = {
        "turn_id": state.get("turn_id", ""),
        "turn_no": state.get("turn_no"),
        "ts": message["ts"],
        "user": state.get("user_text") or "",
        "assistant": reply,
        "hit_ids": [h["id"] for h in hits],
        "llm": "on" if state.get("llm_used") else "off",
        "warnings": list(state.get("warnings") or []),
    }
    carried = {k: state.get(k) for k in ("intent", "dialogue_mode", "goal", "slots", "missing_slots", "policy")}
    try:
        await _blocking(deps.sessions.append_turn, sid, turn, carried, timeout=min(0.5, max(0.05, _left(state))))
        delta["trace"] = _trace("respond", "reply", started, "ok", stored=True)
    except Exception as exc:  # noqa: BLE001 - storing the turn must never cost the reply
        delta["warnings"] = ["session_unavailable"]
        delta["last_error"] = _error("respond", "session_unavailable", exc.__class__.__name__)
        delta["trace"] = _trace("respond", "reply", started, "store_failed", stored=False)
    return delta
