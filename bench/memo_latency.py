"""Memo save and search latency through the API with N memos stored, and the MCP stdio round trip
of a chat turn against plain HTTP /v1/chat, in the same run.

    .venv/bin/python bench/memo_latency.py [--memos 10000] [--saves 100] [--queries 200] [--turns 100]

Starts a private Redis + Chroma server + API (the test harness's code). The memo store is filled to
--memos through the memo collection directly (Redis raw text + Chroma upserts): the vectors are real
embeddings of a few hundred distinct memo texts plus small noise per copy (embedding 10k memos one
by one would take longer than the bench, and the latency of search does not depend on the text).
Then it times, from a keep-alive client: POST /memo/save (real embedding per save) and
GET /memo/search (one query embedding each; distinct query texts, so no cache helps). Finally it
times one chat turn (no RAG, no LLM: the fast path itself) over HTTP and through `yana mcp`
(stdio, newline-delimited JSON-RPC) against the same API; the overhead is the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

TOPICS = [
    "小樽の酒蔵",
    "函館の朝市",
    "山形の果物",
    "会議の予定",
    "旅行の計画",
    "好きな銘柄",
    "甘口と辛口",
    "新潟の米",
    "発泡性の酒",
    "りんごジュース",
]
ACTIONS = ["について話した", "を調べた", "をメモした", "が気になった", "を比べた", "をまた聞きたい"]


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, p))


def line(label: str, xs: list[float]) -> None:
    print(f"  {label:<38} n={len(xs):>5}  p50 {pct(xs, 50):7.1f} ms  p99 {pct(xs, 99):7.1f} ms", flush=True)


def texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"{TOPICS[rng.integers(len(TOPICS))]}{ACTIONS[rng.integers(len(ACTIONS))]}（{i}）" for i in range(n)]


def fill(n: int, base: int = 300) -> float:
    """n memos straight into the store (raw in Redis, vectors in the memo collection)."""
    from pipelines.embedding.backends import get_embedder
    from pipelines.memo import service as memo
    from yana.clients import get_chroma, get_redis

    r, chroma = get_redis(), get_chroma()
    col, model = memo.memo_collection(chroma, r)
    base_texts = texts(base, seed=1)
    base_vecs = get_embedder(model).embed_passages(base_texts)
    rng = np.random.default_rng(2)
    t = time.time()
    for start in range(0, n, 1000):
        ids, docs, metas, vecs = [], [], [], []
        pipe = r.pipeline(transaction=False)
        for i in range(start, min(n, start + 1000)):
            memo_id = uuid.uuid4().hex
            text = f"{base_texts[i % base]} #{i}"
            v = base_vecs[i % base] + rng.normal(0, 0.02, base_vecs.shape[1])
            ids.append(memo.CHUNK_ID.format(memo_id, 0))
            docs.append(text)
            metas.append(
                {
                    "memo_id": memo_id,
                    "session_id": f"s{i % 50}",
                    "chunk_index": 0,
                    "is_summary": False,
                    "importance": float(i % 10) / 10,
                    "saved_at": "2026-01-01T00:00:00Z",
                }
            )
            vecs.append(v / np.linalg.norm(v))
            pipe.hset(
                memo.RAW_KEY.format(memo_id),
                mapping={
                    "memo_id": memo_id,
                    "session_id": f"s{i % 50}",
                    "text": text,
                    "summary": "",
                    "saved_at": "2026-01-01T00:00:00Z",
                    "keywords": "[]",
                    "importance": "0.0",
                },
            )
            pipe.expire(memo.RAW_KEY.format(memo_id), 86400)
        pipe.execute()
        col.upsert(ids=ids, documents=docs, metadatas=metas, embeddings=np.asarray(vecs, dtype=np.float32))
    return time.time() - t


def warm_up(c: httpx.Client, limit_s: float = 180) -> None:
    """The API's first search loads the model; on a busy machine that can outlast the request's time
    limit, which answers the designed, retryable 408. Retry until it answers (not timed)."""
    end = time.monotonic() + limit_s
    while True:
        r = c.get("/memo/search", params={"query": "warm up"})
        if r.status_code != 408 or time.monotonic() > end:
            r.raise_for_status()
            return
        time.sleep(1)


def time_memo_routes(api_url: str, saves: int, queries: int) -> None:
    with httpx.Client(base_url=api_url, timeout=60) as c:
        warm_up(c)
        save_t, search_t = [], []
        for text in texts(saves, seed=3):
            t = time.perf_counter()
            c.post("/memo/save", json={"session_id": "bench", "text": text, "keywords": ["bench"]}).raise_for_status()
            save_t.append(time.perf_counter() - t)
        for i, q in enumerate(texts(queries, seed=4)):
            t = time.perf_counter()
            c.get("/memo/search", params={"query": f"{q} {i}", "n_results": 5}).raise_for_status()
            search_t.append(time.perf_counter() - t)
    line("POST /memo/save", save_t)
    line("GET /memo/search (n_results=5)", search_t)


def time_chat(api_url: str, env: dict, turns: int) -> None:
    body = {"user_text": "こんにちは、元気？", "use_rag": False, "top_k": 3}
    http_t, mcp_t = [], []
    with httpx.Client(base_url=api_url, timeout=30) as c:
        for _ in range(3):
            c.post("/v1/chat", json=body).raise_for_status()
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "mcp", "--api", api_url],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

        def rpc(i: int, method: str, params: dict) -> dict:
            proc.stdin.write(
                json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}).encode() + b"\n"
            )
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())

        try:
            rpc(0, "initialize", {"capabilities": {}})
            for i in range(1, 4):
                rpc(i, "tools/call", {"name": "chat", "arguments": body})
            for i in range(turns):  # interleaved, so both see the same load
                t = time.perf_counter()
                c.post("/v1/chat", json=body).raise_for_status()
                http_t.append(time.perf_counter() - t)
                t = time.perf_counter()
                answer = rpc(100 + i, "tools/call", {"name": "chat", "arguments": body})
                mcp_t.append(time.perf_counter() - t)
                assert not answer["result"].get("isError"), answer
        finally:
            proc.stdin.close()
            proc.wait(timeout=20)
    line("chat over HTTP /v1/chat", http_t)
    line("chat over yana mcp (stdio)", mcp_t)
    print(
        f"  stdio overhead: p50 {pct(mcp_t, 50) - pct(http_t, 50):+.1f} ms  p99 {pct(mcp_t, 99) - pct(http_t, 99):+.1f} ms"
    )


def long_text(chars: int) -> str:
    base = texts(400, seed=7)
    out, i = [], 0
    while sum(map(len, out)) < chars:
        out.append(f"{base[i % len(base)]}（{i}）。")
        i += 1
    return "".join(out)[:chars]


def time_long_memo(api_url: str, chars: int, label: str) -> None:
    """One /memo/save of `chars` characters, with a search client running beside it (the API's
    budget for others meanwhile), then how long until the memo.index job (if any) is done."""
    import threading

    text = long_text(chars)
    searches: list[float] = []
    stop = threading.Event()

    def search_loop() -> None:
        with httpx.Client(base_url=api_url, timeout=60) as s:
            i = 0
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    s.get("/memo/search", params={"query": f"小樽の酒蔵 {i}", "n_results": 5}).raise_for_status()
                except httpx.HTTPError:
                    break
                searches.append(time.perf_counter() - t)
                i += 1

    with httpx.Client(base_url=api_url, timeout=300) as c:
        warm_up(c)
        th = threading.Thread(target=search_loop, daemon=True)
        th.start()
        t = time.perf_counter()
        r = c.post("/memo/save", json={"session_id": "bench-long", "text": text})
        save_s = time.perf_counter() - t
        stop.set()
        th.join(60)
        if r.status_code != 200:  # e.g. 408: the request's budget (60 s) ran out while it embedded
            print(
                f"  [{label}] /memo/save of {chars} chars: HTTP {r.status_code} "
                f"{r.json().get('error', {}).get('code')} after {save_s:.1f} s  (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            if searches:
                line(f"[{label}] /memo/search during that save", searches)
            return
        out = r.json()
        job_s = 0.0
        if out.get("index_job_id"):
            while True:
                job = c.get(f"/v1/jobs/{out['index_job_id']}", headers={"Prefer": "wait=10"}).json()
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    break
            job_s = time.perf_counter() - t
            assert job["status"] == "succeeded", job
    print(
        f"  [{label}] /memo/save of {chars} chars: answered in {save_s:.1f} s "
        f"({len(out['chroma_ids'])} chunks, {out.get('indexed_chunks')} before the answer); "
        + (f"all chunks searchable after {job_s:.1f} s" if job_s else "all chunks embedded in the request")
        + f"  (load {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    if searches:
        line(f"[{label}] /memo/search during that save", searches)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--memos", type=int, default=10_000)
    ap.add_argument("--saves", type=int, default=100)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument(
        "--long-chars",
        type=int,
        default=0,
        help="only time one save of a memo this long: everything embedded in the request (before, "
        "MEMO_SYNC_EMBED_CHARS huge) against the first chunks plus a memo.index job (after)",
    )
    args = ap.parse_args()
    if args.long_chars:
        return long_memo_main(args.long_chars)

    from cli import processes
    from tests.stack import start_stack, use_stack_stores

    with tempfile.TemporaryDirectory() as tmp:
        stack = start_stack(Path(tmp), worker=False, api=False)
        try:
            use_stack_stores(stack)
            secs = fill(args.memos)
            print(f"memo store: {args.memos} memos loaded in {secs:.1f}s (load: {os.getloadavg()[0]:.1f})")
            api_url = stack.start_api(RATE_LIMIT="100000/second", RATE_BURST="100000").url
            time_memo_routes(api_url, args.saves, args.queries)
            time_chat(api_url, processes.child_env(REDIS_URL=stack.redis_url, CHROMA_URL=stack.chroma_url), args.turns)
        finally:
            stack.stop()


def long_memo_main(chars: int) -> None:
    from tests.stack import start_stack, use_stack_stores

    with tempfile.TemporaryDirectory() as tmp:
        stack = start_stack(Path(tmp), worker=True, api=False)
        try:
            use_stack_stores(stack)
            limits = {"RATE_LIMIT": "100000/second", "RATE_BURST": "100000"}
            print(f"long memo, {chars} characters (load {os.getloadavg()[0]:.1f})", flush=True)
            before = stack.start_api(name="api-before", MEMO_SYNC_EMBED_CHARS=str(10**9), **limits).url
            time_long_memo(before, chars, "before: all in the request")
            after = stack.start_api(name="api-after", **limits).url
            time_long_memo(after, chars, "after: first chunks + job")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
