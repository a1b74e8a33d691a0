"""clients/speaker.py (the talk app's SpeakerProvider over HTTP) against the real API, and against a
scripted server for the retry / RAG-off / failure paths."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

import pytest

from clients.speaker import FALLBACK_TEXT, SpeakerAHttpProvider
from tests.http_stub import send_json, serve


def test_generate_against_the_api(stack):
    speaker = SpeakerAHttpProvider.from_env(
        {"SPEAKER_A_HTTP_BASE": stack.api_url, "SPEAKER_A_TOP_K": "3", "SPEAKER_A_FILTERS_JSON": '{"category": "sake"}'}
    )
    t0 = time.perf_counter()
    reply, meta = speaker.generate("こんにちは", run_id="speaker-run-1", timeout_ms=12000, turn=1)
    wall_ms = (time.perf_counter() - t0) * 1000
    assert reply.startswith("せやなー")
    assert meta["source"] == "http_v1" and meta["run_id"] == "speaker-run-1" and meta["trace_id"]
    assert isinstance(meta["hits"], list) and isinstance(meta["warnings"], list) and 0 < meta["elapsed_ms"] <= wall_ms
    assert "fallback" not in meta


class Scripted:
    """Answers /v1/chat with scripted (status, body, delay_s) and records request bodies."""

    def __init__(self, script):
        self.script, self.bodies = list(script), []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):  # noqa: N802
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                code, body, delay = outer.script.pop(0) if outer.script else (200, {"reply": "ok"}, 0)
                time.sleep(delay)
                send_json(self, code, body)

        self.server = serve(H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _err(code, retryable):
    return {"error": {"code": code, "message": code.lower(), "retryable": retryable}}


@pytest.fixture()
def scripted():
    made = []

    def make(*script):
        s = Scripted(script)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_rag_down_is_resent_without_rag_then_retryable_retried_once(scripted):
    srv = scripted(
        (503, _err("UPSTREAM_UNAVAILABLE", True), 0),
        (429, _err("RATE_LIMITED", True), 0),
        (200, {"reply": "せやなー、ええで。", "hits": [], "warnings": [], "trace_id": "t", "run_id": "r"}, 0),
    )
    reply, meta = SpeakerAHttpProvider(srv.url, backoff_s=0.05).generate("x", run_id="r", timeout_ms=5000)
    assert reply == "せやなー、ええで。" and meta["retried_after"] == ["UPSTREAM_UNAVAILABLE", "RATE_LIMITED"]
    assert [b["use_rag"] for b in srv.bodies] == [True, False, False]
    assert all(b["timeout_ms"] <= 5000 - 500 for b in srv.bodies)  # the server is told our ceiling


def test_non_retryable_error_gives_the_fixed_text_or_a_skip(scripted):
    srv = scripted((400, _err("BAD_REQUEST", False), 0))
    reply, meta = SpeakerAHttpProvider(srv.url, use_rag=False).generate("x", run_id="r", timeout_ms=3000)
    assert reply == FALLBACK_TEXT and meta["fallback"] and meta["error"] == "BAD_REQUEST" and len(srv.bodies) == 1
    srv2 = scripted((400, _err("BAD_REQUEST", False), 0))
    reply, meta = SpeakerAHttpProvider(srv2.url, use_rag=False, on_failure="skip").generate(
        "x", run_id="r", timeout_ms=3000
    )
    assert reply == "" and meta["skip"] is True


def test_client_timeout_is_bounded(scripted):
    srv = scripted((200, {"reply": "late"}, 3), (200, {"reply": "late"}, 3))
    t = time.monotonic()
    reply, meta = SpeakerAHttpProvider(srv.url, use_rag=False, backoff_s=0.05).generate(
        "x", run_id="r", timeout_ms=1200
    )
    assert time.monotonic() - t < 1.6
    assert reply == FALLBACK_TEXT and meta["error"] == "CLIENT_TIMEOUT"
