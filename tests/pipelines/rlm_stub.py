"""A real OpenAI-compatible HTTP server playing the retrieve LLM loop's model from a script.

Each POST /v1/chat/completions is answered by `policy(messages)` → the assistant's content; the
scripted programs below are what a model would write (generic code over the REPL's helpers, no
knowledge of the answers). `behaviour(query)` picks one per question: good, bad (errors, then
good), endless (code that never finishes) or fabricate (a made-up passage first, then real ones).
Sub-queries (`llm_query`, a conversation without the system prompt) are answered "yes".
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from tests.http_stub import send_json, serve

EXPLORE = """```python
hits = extract(query, 10)
print(len(documents), [h["doc_id"] for h in hits[:5]])
```"""

GOOD = """```python
import re
cands = extract(query, 10)
lex = [r["doc_id"] for r in bm25(query, 10)]
first = grep(re.escape(cands[0]["text"][:20]))[:1] if cands else []
verdict = llm_query("Does this passage answer the query? " + query + " / " + cands[0]["text"][:200]) if cands else ""
out = []
for r in cands[:8]:
    # the passage re-typed with its whitespace collapsed: the host must still find it
    out.append({"doc_id": r["doc_id"], "text": " ".join(r["text"].split()), "score": r["score"]})
FINAL(out)
```"""

BAD_1 = """```python
print(documents[10 ** 9]["text"])
```"""

BAD_2 = """```python
for d in documents
    print(d)
```"""

ENDLESS = """```python
n = 0
while True:
    n += 1
```"""

FABRICATE = """```python
cands = extract(query, 8)
made_up = {"doc_id": cands[0]["doc_id"], "text": "This sentence appears in no document at all.", "score": 1.0}
ghost = {"doc_id": "no-such-document", "text": cands[0]["text"], "score": 1.0}
FINAL([made_up, ghost] + [{"doc_id": r["doc_id"], "text": r["text"], "score": r["score"]} for r in cands])
```"""

BEHAVIOURS = ("good", "bad", "endless", "fabricate")


def behaviour(query: str) -> str:
    return BEHAVIOURS[int(hashlib.sha256(query.encode()).hexdigest(), 16) % len(BEHAVIOURS)]


def scripted_policy(messages: list[dict], pick: Callable[[str], str] = behaviour) -> str:
    if not messages or messages[0].get("role") != "system":
        return "yes"  # a sub-query
    query = str(messages[1]["content"]).split("\n", 1)[0].removeprefix("query: ")
    turn = sum(1 for m in messages if m["role"] == "assistant")
    kind = pick(query)
    script = {
        "good": [EXPLORE, GOOD],
        "bad": [BAD_1, BAD_2, GOOD],
        "endless": [ENDLESS, GOOD],
        "fabricate": [FABRICATE],
    }[kind]
    return script[min(turn, len(script) - 1)]


class ScriptedModel:
    def __init__(self, policy: Callable[[list[dict]], str] = scripted_policy, delay_s: float = 0.0):
        self.policy = policy
        self.delay_s = delay_s
        self.requests = 0
        self.stop_event = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                stub.requests += 1
                if stub.delay_s:
                    stub.stop_event.wait(stub.delay_s)
                content = stub.policy(body.get("messages") or [])
                payload = {
                    "id": f"chatcmpl-rlm-{stub.requests}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "m"),
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                    ],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
                }
                send_json(self, 200, payload)

        self.server = serve(Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()
