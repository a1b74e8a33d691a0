"""The talk app's speaker providers (http, mcp over stdio and streamable HTTP, local): the six
contract classes (normal / 429 / 408 / 5xx / empty / overlong) against scripted servers that speak
the real wire formats, the same providers against the real yana, client-side limits, the legacy
form fallback, the factory, and the talk app's load plan through the mcp provider."""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli import processes
from clients.speaker import (
    FALLBACK_TEXT,
    SpeakerAHttpProvider,
    SpeakerAMcpProvider,
    make_speaker,
)
from pipelines.chat.speaker_local import SpeakerALocalProvider

ROOT = Path(__file__).resolve().parents[2]
LONG_REPLY = "せやなー、" + "このお酒はほんまにおいしいねん。" * 60


def _err(code: str, retryable: bool) -> dict:
    return {"error": {"code": code, "message": code.lower(), "retryable": retryable}}


def _ok(reply: str) -> dict:
    return {"reply": reply, "hits": [], "warnings": [], "trace_id": "t-1", "run_id": "r-1", "llm": "off"}


# One script per contract class: what the server answers, turn by turn, as (HTTP status, body).
CLASSES = {
    "normal": [(200, _ok("せやなー、小樽のお酒あるで。"))],
    "429": [(429, _err("RATE_LIMITED", True)), (200, _ok("せやせや、待たせたな。"))],
    "408": [(408, _err("REQUEST_TIMEOUT", True)), (200, _ok("せやなー、今度は間に合ったで。"))],
    "5xx": [(503, _err("UPSTREAM_UNAVAILABLE", True)), (200, _ok("せやなー、検索なしで答えるわ。"))],
    "empty": [(200, _ok("")), (200, _ok(""))],
    "overlong": [(200, _ok(LONG_REPLY))],
}


def _check_class(name: str, reply: str, meta: dict, sent: list[dict]) -> None:
    if name == "normal":
        assert reply == "せやなー、小樽のお酒あるで。" and "fallback" not in meta and len(sent) == 1
    elif name in ("429", "408"):
        assert reply.startswith("せや") and meta["retried_after"] == [CLASSES[name][0][1]["error"]["code"]]
        assert len(sent) == 2
    elif name == "5xx":
        assert reply.startswith("せやなー") and [b["use_rag"] for b in sent] == [True, False]  # RAG off, once
    elif name == "empty":
        assert reply == FALLBACK_TEXT and meta["fallback"] and meta["error"] == "EMPTY_REPLY" and len(sent) == 2
    elif name == "overlong":
        assert 0 < len(reply) <= 400 and reply.endswith("。") and "reply_trimmed_by_speaker" in meta["warnings"]
    assert all(b["timeout_ms"] <= 5000 - 500 for b in sent)  # the server is told the caller's ceiling


class ScriptedServer:
    """A real HTTP server on loopback: /v1/chat and /chat answer the script; /mcp speaks MCP's
    streamable HTTP (JSON answers) and answers tools/call chat from the same script."""

    def __init__(self, script: list[tuple[int, dict]], *, chat_404: bool = False):
        self.script = list(script)
        self.sent: list[dict] = []
        self.paths: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, status: int, body: dict | None, headers: dict | None = None) -> None:
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                outer.paths.append(self.path)
                if self.path == "/mcp":
                    return self._mcp(json.loads(raw))
                if self.path == "/v1/chat" and chat_404:
                    return self._reply(404, _err("NOT_FOUND", False))
                if self.path == "/chat":
                    from urllib.parse import parse_qs

                    form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                    body = {**form, "use_rag": form["use_rag"] == "true", "timeout_ms": 0}
                else:
                    body = json.loads(raw)
                outer.sent.append(body)
                status, answer = outer.script.pop(0) if outer.script else (200, _ok("せやなー"))
                self._reply(status, answer)

            def _mcp(self, msg: dict) -> None:
                if "id" not in msg:
                    return self._reply(202, None)
                if msg["method"] == "initialize":
                    result = {
                        "protocolVersion": "2025-03-26",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "scripted", "version": "1"},
                    }
                    return self._reply(
                        200, {"jsonrpc": "2.0", "id": msg["id"], "result": result}, {"Mcp-Session-Id": "s-1"}
                    )
                assert self.headers.get("Mcp-Session-Id") == "s-1"
                assert msg["params"]["name"] == "chat"
                outer.sent.append(msg["params"]["arguments"])
                status, answer = outer.script.pop(0) if outer.script else (200, _ok("せやなー"))
                result = {
                    "content": [{"type": "text", "text": json.dumps(answer, ensure_ascii=False)}],
                    "isError": status >= 400,
                }
                if status < 400:
                    result["structuredContent"] = answer
                self._reply(200, {"jsonrpc": "2.0", "id": msg["id"], "result": result})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def scripted():
    made: list[ScriptedServer] = []

    def make(script, **kw):
        s = ScriptedServer(script, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.mark.parametrize("name", list(CLASSES))
def test_http_provider_contract_classes(scripted, name):
    srv = scripted(CLASSES[name])
    reply, meta = SpeakerAHttpProvider(srv.url, backoff_s=0.05).generate(
        "小樽のお酒ある？", run_id="r", timeout_ms=5000
    )
    assert meta["source"] == "http_v1"
    _check_class(name, reply, meta, srv.sent)


@pytest.mark.parametrize("name", list(CLASSES))
def test_mcp_http_provider_contract_classes(scripted, name):
    srv = scripted(CLASSES[name])
    speaker = SpeakerAMcpProvider(url=srv.url + "/mcp", backoff_s=0.05)
    reply, meta = speaker.generate("小樽のお酒ある？", run_id="r", timeout_ms=5000)
    assert meta["source"] == "mcp"
    _check_class(name, reply, meta, srv.sent)


def test_client_side_limits_are_checked_before_sending(scripted):
    srv = scripted([])
    speaker = SpeakerAHttpProvider(srv.url)
    for kwargs in (
        {"user_text": "x" * 4001},
        {"user_text": "   "},
        {"user_text": "ok", "top_k": 11},
        {"user_text": "ok", "filters": {"colour": "red"}},
    ):
        text = kwargs.pop("user_text")
        reply, meta = speaker.generate(text, run_id="r", timeout_ms=3000, **kwargs)
        assert reply == FALLBACK_TEXT and meta["error"] == "BAD_REQUEST"
    assert srv.sent == []  # nothing reached the server


def test_legacy_form_endpoint_when_v1_chat_is_missing(scripted):
    srv = scripted([(200, _ok("せやなー、旧いほうで答えたで。"))], chat_404=True)
    reply, meta = SpeakerAHttpProvider(srv.url).generate("こんにちは", run_id="r", timeout_ms=5000)
    assert reply == "せやなー、旧いほうで答えたで。"
    assert srv.paths == ["/v1/chat", "/chat"]
    assert srv.sent[0]["user_text"] == "こんにちは"


def test_factory_reads_the_mode():
    assert isinstance(make_speaker({"SPEAKER_A_MODE": "http"}), SpeakerAHttpProvider)
    assert isinstance(make_speaker({}), SpeakerAHttpProvider)
    assert isinstance(
        make_speaker({"SPEAKER_A_MODE": "mcp", "SPEAKER_A_MCP_URL": "http://127.0.0.1:9/mcp"}), SpeakerAMcpProvider
    )
    stdio = make_speaker({"SPEAKER_A_MODE": "mcp", "SPEAKER_A_HTTP_BASE": "http://h:1", "SPEAKER_A_TOP_K": "3"})
    assert stdio.rpc.command == ["yana", "mcp", "--api", "http://h:1"] and stdio.top_k == 3
    assert isinstance(make_speaker({"SPEAKER_A_MODE": "local"}), SpeakerALocalProvider)
    with pytest.raises(ValueError):
        make_speaker({"SPEAKER_A_MODE": "carrier-pigeon"})


def _stdio_command(api_url: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "mcp", "--api", api_url]


@pytest.fixture(scope="module")
def api_url(stack):
    return stack.start_api(name="api-speakers", RATE_LIMIT="10000/second", RATE_BURST="10000").url


def test_every_provider_against_the_real_yana(stack, api_url):
    env = processes.child_env(REDIS_URL=stack.redis_url, CHROMA_URL=stack.chroma_url)
    speakers = {
        "http_v1": SpeakerAHttpProvider(api_url),
        "mcp": SpeakerAMcpProvider(url=api_url + "/mcp"),
        "mcp-stdio": SpeakerAMcpProvider(command=_stdio_command(api_url), env=env),
        "local": SpeakerALocalProvider(),
    }
    try:
        for name, speaker in speakers.items():
            reply, meta = speaker.generate(
                "小樽のお酒ある？", run_id=f"run-{name}", top_k=3, filters={}, timeout_ms=15000
            )
            assert reply.startswith("せや"), (name, reply, meta)
            assert "fallback" not in meta, (name, meta)
            assert isinstance(meta["hits"], list) and isinstance(meta["warnings"], list)
            assert meta["source"] == name.split("-")[0]
    finally:
        speakers["mcp-stdio"].close()


def test_talk_app_load_plan_through_the_mcp_provider(stack, api_url):
    """6-20 turns x 2 parallel sessions, each with its own `yana mcp` subprocess: 0 failures."""
    env = processes.child_env(REDIS_URL=stack.redis_url, CHROMA_URL=stack.chroma_url)
    questions = [
        "小樽のお酒ある？",
        "辛口のおすすめは？",
        "ジュースもある？",
        "山形の酒は？",
        "甘口がええな",
        "ありがとう",
    ]

    def session(seed: int) -> list[dict]:
        rng = random.Random(seed)
        speaker = SpeakerAMcpProvider(command=_stdio_command(api_url), env=env, session_id=f"load-{seed}")
        metas = []
        try:
            for turn in range(rng.randint(6, 20)):
                reply, meta = speaker.generate(
                    rng.choice(questions), run_id=f"load-{seed}", timeout_ms=15000, turn=turn
                )
                metas.append({"reply": reply, **meta})
        finally:
            speaker.close()
        return metas

    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(session, [1, 2]))
    turns = [m for r in results for m in r]
    failures = [m for m in turns if m.get("fallback") or not m["reply"]]
    print(f"load plan: {len(turns)} turns in {time.monotonic() - t0:.1f}s, {len(failures)} failures")
    assert len(turns) >= 12 and failures == []
