"""Speaker A over HTTP for the talk app (seed 000 "Duo 側 Provider 抽象"), standard library only.

    from clients.speaker import SpeakerAHttpProvider
    speaker = SpeakerAHttpProvider.from_env()          # SPEAKER_A_* variables
    reply, meta = speaker.generate("小樽のお酒ある？", run_id="run-1", top_k=5, filters={}, timeout_ms=12000)

`meta`: {hits, elapsed_ms, trace_id, run_id, warnings, llm, source: "http_v1"} (+ error, fallback).

Behaviour (seed 000): the server is told the caller's ceiling (timeout_ms minus a network margin) so
it answers with its own fallback before the caller gives up; an error with retryable=true is retried
once after a short backoff; an error while use_rag was on is retried once with use_rag=false; when
all fails, either a fixed short text (SPEAKER_A_ON_FAILURE=fixed, the default) or an empty reply with
meta["skip"]=True (SPEAKER_A_ON_FAILURE=skip) so the caller skips the turn.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from typing import Protocol

FALLBACK_TEXT = "ごめんな、いまちょっと答えられへんねん。また後で聞いてな。"
_NETWORK_MARGIN_MS = 500


class SpeakerProvider(Protocol):
    def generate(self, user_text: str, *, run_id: str, top_k: int, filters: dict, timeout_ms: int) -> tuple[str, dict]:
        ...


class SpeakerError(Exception):
    def __init__(self, code: str, message: str, retryable: bool, status: int | None = None):
        super().__init__(message)
        self.code, self.message, self.retryable, self.status = code, message, retryable, status


def _env_bool(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


class SpeakerAHttpProvider:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        use_rag: bool = True,
        top_k: int = 5,
        filters: dict | None = None,
        timeout_ms: int = 12000,
        auth_token: str | None = None,
        on_failure: str = "fixed",
        session_id: str | None = None,
        disable_sayana: bool = False,
        backoff_s: float = 0.3,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.use_rag = use_rag
        self.top_k = top_k
        self.filters = dict(filters or {})
        self.timeout_ms = timeout_ms
        self.auth_token = auth_token
        self.on_failure = on_failure
        self.session_id = session_id
        self.disable_sayana = disable_sayana
        self.backoff_s = backoff_s

    @classmethod
    def from_env(cls, env: dict | None = None) -> "SpeakerAHttpProvider":
        e = os.environ if env is None else env
        return cls(
            e.get("SPEAKER_A_HTTP_BASE", "http://127.0.0.1:8000"),
            use_rag=_env_bool(e.get("SPEAKER_A_USE_RAG"), True),
            top_k=int(e.get("SPEAKER_A_TOP_K") or 5),
            filters=json.loads(e.get("SPEAKER_A_FILTERS_JSON") or "{}"),
            timeout_ms=int(e.get("SPEAKER_A_TIMEOUT_MS") or 12000),
            auth_token=e.get("SPEAKER_A_AUTH_TOKEN") or None,
            on_failure=e.get("SPEAKER_A_ON_FAILURE") or "fixed",
            session_id=e.get("SPEAKER_A_SESSION_ID") or None,
        )

    # --- one HTTP call --------------------------------------------------------------------------

    def _post(self, body: dict, *, run_id: str, timeout_s: float) -> tuple[dict, dict]:
        headers = {"Content-Type": "application/json", "Accept": "application/json", "X-Run-Id": run_id}
        if self.auth_token:
            headers["Authorization"] = f"Bearer {self.auth_token}"
        req = urllib.request.Request(f"{self.base_url}/v1/chat", data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=max(0.1, timeout_s)) as resp:
                return json.loads(resp.read() or b"{}"), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read() or b"{}").get("error") or {}
            except ValueError:
                err = {}
            raise SpeakerError(err.get("code") or f"HTTP_{exc.code}", err.get("message") or str(exc),
                               bool(err.get("retryable", exc.code >= 500 or exc.code in (408, 429))), exc.code) from None
        except (socket.timeout, TimeoutError):
            raise SpeakerError("CLIENT_TIMEOUT", "no answer within the caller's timeout", True) from None
        except (urllib.error.URLError, ConnectionError, ValueError) as exc:
            raise SpeakerError("UNREACHABLE", str(exc), True) from None

    # --- SpeakerProvider ------------------------------------------------------------------------

    def generate(self, user_text: str, *, run_id: str, top_k: int | None = None, filters: dict | None = None,
                 timeout_ms: int | None = None, turn: int | None = None, topic: str | None = None) -> tuple[str, dict]:
        timeout_ms = timeout_ms or self.timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        context = {"run_id": run_id, "disable_sayana": self.disable_sayana}
        if self.session_id:
            context["session_id"] = self.session_id
        if turn is not None:
            context["turn"] = turn
        if topic:
            context["topic"] = topic
        body = {
            "user_text": user_text,
            "use_rag": self.use_rag,
            "top_k": top_k or self.top_k,
            "filters": self.filters if filters is None else filters,
            "context": context,
        }
        attempts: list[str] = []
        retried = rag_dropped = False
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms < 200:
                break
            # The server answers with its own fallback before our deadline.
            body["timeout_ms"] = int(max(100, min(120_000, left_ms - _NETWORK_MARGIN_MS)))
            t = time.monotonic()
            try:
                data, headers = self._post(body, run_id=run_id, timeout_s=left_ms / 1000)
            except SpeakerError as exc:
                attempts.append(exc.code)
                if body["use_rag"] and not rag_dropped and exc.status is not None and exc.status >= 500:
                    body["use_rag"], rag_dropped = False, True  # seed: RAG down → use_rag=false, once
                    continue
                if exc.retryable and not retried:
                    retried = True
                    time.sleep(min(self.backoff_s, max(0.0, deadline - time.monotonic() - 0.2)))
                    continue
                break
            meta = {
                "hits": data.get("hits", []),
                "elapsed_ms": data.get("elapsed_ms", int((time.monotonic() - t) * 1000)),
                "trace_id": data.get("trace_id") or headers.get("x-trace-id"),
                "run_id": data.get("run_id") or headers.get("x-run-id"),
                "warnings": list(data.get("warnings", [])),
                "llm": data.get("llm"),
                "source": "http_v1",
            }
            if attempts:
                meta["retried_after"] = attempts
            return data.get("reply", ""), meta
        meta = {"hits": [], "elapsed_ms": int(timeout_ms - (deadline - time.monotonic()) * 1000), "trace_id": None,
                "warnings": ["speaker_failed"], "error": attempts[-1] if attempts else "CLIENT_TIMEOUT",
                "source": "http_v1", "fallback": True}
        if self.on_failure == "skip":
            meta["skip"] = True
            return "", meta
        return FALLBACK_TEXT, meta
