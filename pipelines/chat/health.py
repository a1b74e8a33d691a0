"""What /v1/healthz needs from chat (api/routes/health.py): whether the LLM circuit is open.

The health route probes the endpoint itself (GET /models, cached) and runs the persona policy's
self-check (pipelines.chat.persona.policy_self_check). An endpoint that answers /models while chat's
breaker is open still gets no calls from chat, so llm_ok must be false then: `circuit_problem` says so.
Synchronous (one Redis round trip with the fast path's short timeouts); call via to_thread.
"""

from __future__ import annotations

from pipelines.chat.service import build_breaker, llm_configured
from yana.settings import Settings, get_settings


def circuit_problem(settings: Settings | None = None) -> str | None:
    """Why chat is not calling the LLM right now (circuit open / half-open), or None."""
    s = settings or get_settings()
    if not llm_configured(s):
        return None
    b = build_breaker(s).status()
    if b.state == "closed":
        return None
    detail = f"circuit {b.state} after {b.failures} failures (last: {b.last_error})"
    return detail + (f", half-open in {b.open_for_s:.1f} s" if b.state == "open" else "")
