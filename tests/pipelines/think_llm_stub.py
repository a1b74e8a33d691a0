"""A real OpenAI-compatible HTTP server that answers chat.completions with scripted tool calls."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler

from tests.http_stub import send_json, serve


class ToolCallStub:
    """Each POST takes the next script entry: (arguments_text, delay_s)."""

    def __init__(self):
        self.queue: deque = deque()
        self.received: list[dict] = []
        self.stop_event = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                stub.received.append(body)
                args, delay = stub.queue.popleft() if stub.queue else ('{"aspects": []}', 0.0)
                if delay:
                    stub.stop_event.wait(delay)
                tool = body.get("tools", [{}])[0].get("function", {}).get("name", "f")
                payload = {
                    "id": "chatcmpl-think",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "m"),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "tool_calls",
                            "message": {
                                "role": "assistant",
                                "content": None,
                                "tool_calls": [
                                    {
                                        "id": f"call_{len(stub.received)}",
                                        "type": "function",
                                        "function": {"name": tool, "arguments": args},
                                    }
                                ],
                            },
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
                send_json(self, 200, payload)

        self.server = serve(Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *entries: tuple[str, float]) -> None:
        self.queue.extend(entries)

    def close(self) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()
