"""Worst-case /v1/chat latency at the real budget (CHAT_TIMEOUT_MS, default 11000 ms) when the LLM
misbehaves: it accepts the request and never answers (stall), or it answers one byte at a time
(slow loris: every read gets data, so only a total bound stops it). Also two stalled sessions at
once (the talk app's load), and the same with a caller's smaller ceiling (timeout_ms).

    .venv/bin/python bench/chat_deadline.py [--n 3] [--budget-ms 11000]

Starts redis-server and the API (no Chroma, nothing ingested: retrieval finds nothing at once) wired to an
OpenAI-compatible stub server. Prints client-side elapsed times against the budget and the route's
408 backstop (budget + 1 s); asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pipelines.chat.openai_stub import OpenAIStub, reply, stall, trickle  # noqa: E402
from tests.stack import start_stack  # noqa: E402


def one(client: httpx.Client, body: dict) -> tuple[float, dict, int]:
    t = time.perf_counter()
    r = client.post("/v1/chat", json=body)
    return (time.perf_counter() - t) * 1000, r.json(), r.status_code


def series(client, stub, name, behaviour, n, budget_ms, body=None) -> None:
    body = body or {"user_text": "北の誉ってどんな酒？"}
    for _ in range(n):
        stub.script(behaviour)
        ms, out, code = one(client, body)
        print(
            f"{name:<38} status={code} elapsed={ms:8.1f} ms  budget={budget_ms} ms  "
            f"margin={budget_ms - ms:7.1f} ms  llm={out.get('llm')} warnings={out.get('warnings')}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--budget-ms", type=int, default=11000)
    args = ap.parse_args()
    stub = OpenAIStub(default=reply("ほな、ええで。")).start()
    with tempfile.TemporaryDirectory(prefix="yana-chat-deadline-") as tmp:
        stack = start_stack(
            Path(tmp),
            chroma=False,
            worker=False,
            OPENAI_BASE_URL=stub.base_url,
            OPENAI_MODEL="stub",
            OPENAI_API_KEY="sk-bench",
            CHAT_TIMEOUT_MS=str(args.budget_ms),
            CHAT_BREAKER_FAILURES="1000",
            RATE_LIMIT="1000/second",
            RATE_BURST="1000",
        )
        try:
            with httpx.Client(base_url=stack.api_url, timeout=args.budget_ms / 1000 + 10) as c:
                one(c, {"user_text": "warm"})
                ms, out, _ = one(c, {"user_text": "北の誉", "use_rag": False})
                print(f"{'baseline: LLM answers at once':<38} elapsed={ms:8.1f} ms  llm={out['llm']}")
                series(c, stub, "stalled LLM", stall(120), args.n, args.budget_ms)
                series(c, stub, "slow-loris LLM (1 byte / 0.5 s)", trickle(0.5), args.n, args.budget_ms)
                ceiling = 3000
                series(
                    c,
                    stub,
                    f"stalled LLM, caller timeout_ms={ceiling}",
                    stall(120),
                    args.n,
                    ceiling,
                    {"user_text": "北の誉", "timeout_ms": ceiling},
                )

                results: list[float] = []

                def session() -> None:
                    with httpx.Client(base_url=stack.api_url, timeout=args.budget_ms / 1000 + 10) as cc:
                        results.append(one(cc, {"user_text": "田酒のこと教えて"})[0])

                stub.script(stall(120), stall(120))
                threads = [threading.Thread(target=session) for _ in range(2)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                print(
                    f"{'2 parallel sessions, stalled LLM':<38} elapsed={[round(x, 1) for x in results]} ms  "
                    f"budget={args.budget_ms} ms"
                )
        finally:
            stack.stop()
            stub.stop()


if __name__ == "__main__":
    main()
