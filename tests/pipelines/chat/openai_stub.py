"""A real OpenAI-compatible HTTP server for tests and benches (the one thing that cannot exist here).

Speaks the chat.completions wire format on a free loopback port; each request takes the next scripted
behaviour (reply text, delay, stall, HTTP status such as 429/408/500, empty or overlong reply) or the
default one. Every request body is recorded, so tests can check what the client actually sent.

    stub = OpenAIStub().start()
    stub.script(status(429), reply("ほな、これやね。", delay_s=0.2))
    ... OPENAI_BASE_URL=stub.base_url ...
    stub.stop()
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Behaviour:
    kind: str = "reply"  # reply | status | stall | trickle
    text: str = "ほな、それやったら小樽の酒がええと思うで。"
    status: int = 200
    delay_s: float = 0.0
    finish_reason: str = "stop"


def reply(text: str, delay_s: float = 0.0, finish_reason: str = "stop") -> Behaviour:
    return Behaviour("reply", text=text, delay_s=delay_s, finish_reason=finish_reason)


def empty(delay_s: float = 0.0) -> Behaviour:
    return Behaviour("reply", text="", delay_s=delay_s)


def status(code: int, delay_s: float = 0.0) -> Behaviour:
    return Behaviour("status", status=code, delay_s=delay_s)


def stall(seconds: float = 120.0) -> Behaviour:
    """Accept the request and never answer (until `seconds` pass or the stub stops)."""
    return Behaviour("stall", delay_s=seconds)


def trickle(interval_s: float = 0.5, text: str = "ほな、ゆっくり答えるで。") -> Behaviour:
    """Answer 200 with the headers at once, then one body byte every `interval_s` (a slow-loris
    upstream: every read gets data before a per-read timeout, so only a total bound stops it)."""
    return Behaviour("trickle", text=text, delay_s=interval_s)


@dataclass
class Received:
    path: str
    headers: dict
    body: dict
    at: float


@dataclass
class OpenAIStub:
    default: Behaviour = field(default_factory=Behaviour)
    models_status: int = 200
    queue: deque = field(default_factory=deque)
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> OpenAIStub:
        handler = type("Handler", (_StubHandler,), {"stub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="openai-stub", daemon=True).start()
        return self

    def script(self, *behaviours: Behaviour) -> OpenAIStub:
        with self._lock:
            self.queue.extend(behaviours)
        return self

    def clear(self) -> None:
        with self._lock:
            self.queue.clear()
            self.received.clear()

    def chat_requests(self) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path.rstrip("/").endswith("/chat/completions")]

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class _StubHandler(BaseHTTPRequestHandler):
    """Speaks enough of the OpenAI wire format for the chat client; `stub` says how to answer."""

    protocol_version = "HTTP/1.1"
    stub: OpenAIStub

    def log_message(self, *args):  # quiet
        pass

    def setup(self):
        super().setup()
        # Headers and body go out in two writes: without this, Nagle + delayed ACK add ~40 ms.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, code: int, payload: dict, headers: dict | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self):  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            if self.stub.models_status != 200:
                self._send(self.stub.models_status, {"error": {"message": "down", "type": "server_error"}})
                return
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": "stub-model", "object": "model", "created": 0, "owned_by": "stub"}],
                },
            )
            return
        self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        with self.stub._lock:
            self.stub.received.append(Received(self.path, dict(self.headers), body, time.monotonic()))
            b = self.stub.queue.popleft() if self.stub.queue else self.stub.default
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        if b.kind == "stall":
            self.stub._stopping.wait(b.delay_s)
            self.close_connection = True
            return
        if b.kind == "trickle":
            self._trickle(b, body)
            return
        if b.delay_s:
            self.stub._stopping.wait(b.delay_s)
        if b.kind == "status":
            kinds = {429: "rate_limit_error", 408: "timeout", 401: "authentication_error"}
            err = {
                "error": {
                    "message": f"stub status {b.status}",
                    "type": kinds.get(b.status, "server_error"),
                    "code": str(b.status),
                }
            }
            self._send(b.status, err, {"Retry-After": "1"} if b.status == 429 else None)
            return
        self._send(200, self._completion(b, body))

    def _completion(self, b: Behaviour, body: dict) -> dict:
        n = len(self.stub.received)
        return {
            "id": f"chatcmpl-stub-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub-model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": b.text},
                    "finish_reason": b.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": len(b.text), "total_tokens": 10 + len(b.text)},
        }

    def _trickle(self, b: Behaviour, body: dict) -> None:
        data = json.dumps(self._completion(b, body), ensure_ascii=False).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for i in range(len(data)):
                if self.stub._stopping.wait(b.delay_s):
                    break
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
