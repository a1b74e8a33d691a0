"""Wiring the chat graph's dependencies from Settings: the real retriever, the LLM, the breaker (in
Redis), the session store, the turn log. Built once per process and settings object."""

from __future__ import annotations

import threading

from pipelines.chat.breaker import CircuitBreaker
from pipelines.chat.llm import ChatLLM
from pipelines.chat.nodes import ChatDeps
from pipelines.chat.sessions import SessionStore
from pipelines.chat.turnlog import TurnLog
from pipelines.search.service import search_or_alternatives
from yana.clients import get_fast_redis
from yana.settings import Settings, get_settings

_lock = threading.Lock()
_cache: dict[int, tuple[Settings, ChatDeps]] = {}


def search_retriever(query_text: str, filters: dict, k: int) -> dict:
    """THE search (pipelines/search.py): {hits, not_found}; the hits are alternatives from the nearest
    category when the question names something no label has."""
    result = search_or_alternatives(query_text or None, filters or None, k=k, debug=False)
    return {"hits": list(result.get("hits") or []), "not_found": list(result.get("not_found") or [])}


def llm_configured(s: Settings) -> bool:
    return bool(s.openai_base_url or s.openai_api_key)


def build_llm(s: Settings) -> ChatLLM | None:
    if not llm_configured(s):
        return None
    return ChatLLM(
        s.openai_base_url,
        s.openai_api_key,
        s.openai_model,
        max_tokens=s.chat_llm_max_tokens,
        temperature=s.chat_llm_temperature,
    )


def build_breaker(s: Settings) -> CircuitBreaker:
    return CircuitBreaker(
        CircuitBreaker.name_for(s.openai_base_url, s.openai_model),
        failure_threshold=s.chat_breaker_failures,
        open_s=s.chat_breaker_open_s,
        probe_ttl_s=s.chat_timeout_ms / 1000 + 1,
        redis_client=get_fast_redis(s),
    )


def default_deps(settings: Settings | None = None) -> ChatDeps:
    s = settings or get_settings()
    with _lock:
        hit = _cache.get(id(s))
        if hit is not None and hit[0] is s:
            return hit[1]
        redis_client = get_fast_redis(s)
        deps = ChatDeps(
            settings=s,
            retrieve=search_retriever,
            llm=build_llm(s),
            breaker=build_breaker(s),
            sessions=SessionStore(redis_client, ttl_s=s.chat_session_ttl_s, max_turns=s.chat_session_max_turns),
        )
        _cache[id(s)] = (s, deps)
        return deps


def default_turn_log(settings: Settings | None = None) -> TurnLog:
    s = settings or get_settings()
    return TurnLog(s.chat_log_dir or (s.data_dir / "logs"))
