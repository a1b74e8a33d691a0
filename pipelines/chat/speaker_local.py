"""Speaker A's `local` mode (clients.speaker, SPEAKER_A_MODE=local): the chat pipeline in the talk
app's own process. Registered under the entry-point group `yana.speakers` (pyproject.toml), so the
client package finds it without importing server code."""

from __future__ import annotations

import asyncio
import os
import time

from clients.speaker import SpeakerError, _ResilientSpeaker
from pipelines.chat import ChatInput, default_deps, default_turn_log, run_chat


class SpeakerALocalProvider(_ResilientSpeaker):
    """The chat pipeline in this process, for a talk app that runs beside yana's code."""

    source = "local"

    @classmethod
    def from_env(cls, env: dict | None = None) -> SpeakerALocalProvider:
        return cls(**cls._options_from_env(os.environ if env is None else env))

    def _call(self, body: dict, *, run_id: str, timeout_s: float) -> tuple[dict, dict]:
        started = time.monotonic()
        try:
            out = asyncio.run(
                run_chat(
                    ChatInput(
                        user_text=body["user_text"],
                        use_rag=body["use_rag"],
                        top_k=body["top_k"],
                        filters=body.get("filters") or {},
                        context=body.get("context") or {},
                        timeout_ms=body["timeout_ms"],
                    ),
                    default_deps(),
                    started=started,
                    turn_log=default_turn_log(),
                )
            )
        except Exception as exc:  # noqa: BLE001 - any pipeline failure is one retryable speaker error
            raise SpeakerError("INTERNAL", f"{type(exc).__name__}: {exc}"[:300], True, 500) from None
        return {
            "reply": out.reply,
            "hits": out.hits,
            "llm": out.llm,
            "warnings": out.warnings,
            "elapsed_ms": int((time.monotonic() - started) * 1000),
            "run_id": run_id,
        }, {}
