"""Chat fast-path benchmark: /v1/chat latency p50/p99 without an LLM and with a stub LLM of fixed
latency (overhead = total minus the LLM's time), the graph alone in process, and seed 000's load
plan (6-20 turns x 2 parallel sessions: throughput and failure rate).

Runs a private stack (redis-server, chroma, one worker, the API), ingests a few labels through
/v1/ingest so retrieval is the real hybrid search, and starts two extra API processes: one without
an LLM and one wired to an OpenAI-compatible stub server that answers after --llm-ms.

    .venv/bin/python bench/chat_latency.py [--n 200] [--llm-ms 300] [--turns 6,20]

Baselines in the same run: GET /v1/version (the HTTP + contract floor), and the graph
in process with an injected retriever (the LangGraph + policy cost alone). Prints numbers; asserts
nothing. On a shared 2-core machine expect noise: compare numbers from the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.pipelines.chat.api_support import ingest_labels, start_chat_api  # noqa: E402
from tests.pipelines.chat.openai_stub import OpenAIStub, reply  # noqa: E402
from tests.stack import start_stack  # noqa: E402

QUESTIONS = [
    "小樽の辛口ある？",
    "田酒ってどんな酒？",
    "りんごのジュースある？",
    "北の誉の特徴は？",
    "青森の酒でおすすめは？",
    "甘酸っぱいのが好きやねん",
    "こんにちは",
    "フルーティーなのある？",
]


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def summary(name: str, ms: list[float], minus: float = 0.0) -> None:
    line = f"{name:<46} n={len(ms):<4} p50={pct(ms, 50):7.1f} ms  p99={pct(ms, 99):7.1f} ms  mean={statistics.mean(ms):7.1f} ms"
    if minus:
        over = [m - minus for m in ms]
        line += f"  | overhead p50={pct(over, 50):6.1f} p99={pct(over, 99):6.1f} ms"
    print(line, flush=True)


def timed_posts(client: httpx.Client, n: int, body_of) -> tuple[list[float], int]:
    ms, failures = [], 0
    for i in range(n):
        t = time.perf_counter()
        r = client.post("/v1/chat", json=body_of(i))
        ms.append((time.perf_counter() - t) * 1000)
        if r.status_code != 200 or not r.json().get("reply"):
            failures += 1
    return ms, failures


def load_plan(url: str, turns: tuple[int, int], sessions: int = 2, seed: int = 0) -> None:
    """Seed 000: 6-20 turns x 2 parallel sessions; throughput and failure rate."""
    rng = random.Random(seed)
    plan = [rng.randint(*turns) for _ in range(sessions)]
    results: list[tuple[float, bool]] = []
    lock = threading.Lock()

    def session(i: int, n_turns: int) -> None:
        sid = f"bench-{uuid.uuid4().hex[:8]}"
        with httpx.Client(base_url=url, timeout=30) as c:
            for turn in range(1, n_turns + 1):
                body = {
                    "user_text": QUESTIONS[(i + turn) % len(QUESTIONS)],
                    "top_k": 5,
                    "context": {"turn": turn, "session_id": sid, "run_id": "bench"},
                }
                t = time.perf_counter()
                try:
                    r = c.post("/v1/chat", json=body)
                    ok = r.status_code == 200 and bool(r.json().get("reply"))
                except httpx.HTTPError:
                    ok = False
                with lock:
                    results.append(((time.perf_counter() - t) * 1000, ok))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=session, args=(i, n)) for i, n in enumerate(plan)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    ms = [m for m, _ in results]
    failed = sum(1 for _, ok in results if not ok)
    print(
        f"  sessions={sessions} turns={plan} total={len(results)} wall={wall:.2f}s "
        f"throughput={len(results) / wall:.2f} turns/s failure_rate={failed / len(results):.1%} "
        f"p50={pct(ms, 50):.1f} ms p99={pct(ms, 99):.1f} ms",
        flush=True,
    )


def graph_in_process(n: int) -> None:
    """The graph alone: injected retriever, no LLM, no Redis (session-less turns)."""
    from pipelines.chat import ChatDeps, ChatInput, run_chat
    from tests.pipelines.chat.conftest import HITS
    from yana.settings import Settings

    deps = ChatDeps(
        settings=Settings(openai_base_url=None, openai_api_key=None),
        retrieve=lambda q, f, k: [dict(h) for h in HITS[:k]],
    )

    async def go() -> list[float]:
        out = []
        for i in range(n):
            t = time.perf_counter()
            await run_chat(ChatInput(QUESTIONS[i % len(QUESTIONS)]), deps)
            out.append((time.perf_counter() - t) * 1000)
        return out

    timings = asyncio.run(go())
    summary("graph in process (fake retriever, no LLM)", timings[min(5, len(timings) // 2) :])  # less warm-up


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200, help="requests per latency series")
    ap.add_argument("--llm-ms", type=int, default=300, help="fixed latency of the stub LLM")
    ap.add_argument("--turns", default="6,20", help="turns per session: min,max (seed 000 load plan)")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.turns.split(","))

    graph_in_process(args.n)
    stub = OpenAIStub(
        default=reply("ほな、北の誉の純米吟醸がええで。辛口でキレがあるんよ。", delay_s=args.llm_ms / 1000)
    ).start()
    with tempfile.TemporaryDirectory(prefix="yana-chat-bench-") as tmp:
        stack = start_stack(Path(tmp), RATE_LIMIT="10000/second", RATE_BURST="10000")
        try:
            with httpx.Client(base_url=stack.api_url, timeout=300) as api:
                ingest_labels(api)
            plain = start_chat_api(
                stack, "api-nollm", OPENAI_BASE_URL="", OPENAI_API_KEY="", RATE_LIMIT="10000/second", RATE_BURST="10000"
            )
            with_llm = start_chat_api(
                stack,
                "api-llm",
                OPENAI_BASE_URL=stub.base_url,
                OPENAI_MODEL="stub",
                OPENAI_API_KEY="sk-bench",
                RATE_LIMIT="10000/second",
                RATE_BURST="10000",
            )
            q = lambda i: QUESTIONS[i % len(QUESTIONS)]  # noqa: E731
            for name, svc in (("no LLM", plain), (f"stub LLM {args.llm_ms} ms", with_llm)):
                with httpx.Client(base_url=svc.url, timeout=30) as c:
                    for _ in range(10):  # warm: connections, the embedder, the search index
                        c.post("/v1/chat", json={"user_text": q(_)})
                    if name == "no LLM":
                        ver = []
                        for _ in range(args.n):
                            t = time.perf_counter()
                            c.get("/v1/version")
                            ver.append((time.perf_counter() - t) * 1000)
                        summary("baseline GET /v1/version", ver)
                    minus = args.llm_ms if "stub" in name else 0.0
                    for rag in (False, True):
                        ms, failed = timed_posts(
                            c, args.n, lambda i, rag=rag: {"user_text": q(i), "use_rag": rag, "top_k": 5}
                        )
                        summary(f"/v1/chat {name}, use_rag={str(rag).lower()}", ms, minus)
                        if failed:
                            print(f"  failures: {failed}")
            print(f"load plan (seed 000), stub LLM {args.llm_ms} ms, use_rag=true:")
            load_plan(with_llm.url, (lo, hi))
            print("load plan (seed 000), no LLM, use_rag=true:")
            load_plan(plain.url, (lo, hi), seed=1)
        finally:
            stack.stop()
            stub.stop()


if __name__ == "__main__":
    main()
