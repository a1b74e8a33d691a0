"""Near-duplicate lookup: multi-index pHash search vs a brute-force numpy scan, and the atomic
Redis check-and-insert, at 10k / 100k / 1M stored hashes; then precision/recall of the default
threshold on generated label variants and on real photographs.

    .venv/bin/python bench/phash_lookup.py [--sizes 10000,100000,1000000] [--queries 2000]

Stored hashes are uniform random 64-bit codes (pHash bits are balanced, ~50% ones); half of the
queries are planted near neighbours (distance 0..threshold+2), half random. Every multi-index
answer is compared with the brute-force answer (recall must be 100%). Needs `redis-server` on PATH
(started privately on a free port) for the Redis part.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines import imaging  # noqa: E402
from pipelines.phash_index import REC, MultiIndex, PHashIndex  # noqa: E402
from yana.datagen import images  # noqa: E402
from yana.settings import get_settings  # noqa: E402


def pct(xs, p):
    return float(np.percentile(np.asarray(xs) * 1e3, p))


def queries(codes: np.ndarray, n: int, t: int, rng) -> list[int]:
    out = []
    for k in range(n):
        if k % 2:
            out.append(int(rng.integers(0, 2**64 - 1, dtype=np.uint64, endpoint=True)))
        else:
            q = int(codes[rng.integers(len(codes))])
            for b in rng.choice(64, int(rng.integers(0, t + 3)), replace=False):
                q ^= 1 << int(b)
            out.append(q)
    return out


def bench_lookup(sizes: list[int], n_queries: int, t: int) -> None:
    rng = np.random.default_rng(0)
    print(f"\n## lookup, threshold {t} ({n_queries} queries each; times in ms)")
    print("| stored | MIH p50 | MIH p99 | MIH p99 best-of-3 | brute p50 | brute p99 | brute p99 best-of-3 | speed-up p50 | recall vs brute | build s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        codes = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
        t0 = time.perf_counter()
        mi = MultiIndex(t)
        mi.add_many(codes, np.arange(n, dtype=np.uint64))
        build = time.perf_counter() - t0
        qs = queries(codes, n_queries, t, rng)
        mih, brute, mih3, brute3, found, expected = [], [], [], [], 0, 0
        for q in qs:
            tm, tb = [], []
            for _rep in range(3):  # best of 3 per query filters preemption on a shared machine
                t0 = time.perf_counter()
                got = mi.search(q)
                tm.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                d = np.bitwise_count(codes ^ np.uint64(q))
                hits = np.nonzero(d <= t)[0]
                tb.append(time.perf_counter() - t0)
            mih.append(tm[0]); brute.append(tb[0]); mih3.append(min(tm)); brute3.append(min(tb))
            exp = {int(i) for i in hits}
            expected += len(exp)
            found += len(exp & {k for k, _ in got})
        recall = found / expected if expected else 1.0
        print(f"| {n:,} | {pct(mih, 50):.3f} | {pct(mih, 99):.3f} | {pct(mih3, 99):.3f} | {pct(brute, 50):.3f} | "
              f"{pct(brute, 99):.3f} | {pct(brute3, 99):.3f} | {pct(brute, 50) / pct(mih, 50):.1f}x | "
              f"{recall:.4f} ({expected} pairs) | {build:.2f} |")


def _redis():
    import redis

    port = 20000 + os.getpid() % 20000
    d = tempfile.mkdtemp()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d],
                            stdout=subprocess.DEVNULL)
    r = redis.Redis(port=port, decode_responses=True)
    for _ in range(100):
        try:
            r.ping()
            break
        except Exception:
            time.sleep(0.05)
    return proc, r


def bench_redis(sizes: list[int], n_ops: int, t: int) -> None:
    """The whole atomic step a worker runs per image: sync the local copy, search it, and the Lua
    check-and-insert that scans the log tail and appends."""
    proc, r = _redis()
    try:
        print(f"\n## atomic check-and-insert through Redis, threshold {t} ({n_ops} inserts; ms)")
        print("| stored | p50 | p99 | first sync of the log s | Redis memory MB |")
        print("|---:|---:|---:|---:|---:|")
        rng = np.random.default_rng(1)
        for n in sizes:
            r.flushall()
            codes = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
            keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
            # bulk load: the same records the script writes (log + sha1 map), in large appends
            step = 50_000
            for i in range(0, n, step):
                recs = "".join(f"+{c:016x}{k:016x}" for c, k in zip(codes[i:i + step].tolist(), keys[i:i + step].tolist()))
                with r.pipeline(transaction=False) as p:
                    p.append("yana:phash:log", recs)
                    p.hset("yana:phash:sha1", mapping={f"{k:016x}" + "0" * 24: f"label_{k:016x}|{c:016x}|bulk|"
                                                       for c, k in zip(codes[i:i + step].tolist(), keys[i:i + step].tolist())})
                    p.execute()
            assert r.strlen("yana:phash:log") == n * REC
            idx = PHashIndex(r, t)
            t0 = time.perf_counter()
            idx.sync()
            first_sync = time.perf_counter() - t0
            lat = []
            for q in queries(codes, n_ops, t, rng):
                sha = "%040x" % random.getrandbits(160)
                t0 = time.perf_counter()
                idx.check_and_insert(f"{q:016x}", sha, "bench:0")
                lat.append(time.perf_counter() - t0)
            mem = int(r.info("memory")["used_memory"]) / 1e6
            print(f"| {n:,} | {pct(lat, 50):.3f} | {pct(lat, 99):.3f} | {first_sync:.2f} | {mem:.0f} |")
    finally:
        proc.terminate()


def bench_quality(n_labels: int, threshold: int) -> None:
    """Precision/recall of "distance <= t means duplicate" on generated variants (ground truth)
    and on real photographs (scikit-image) with the same edits."""
    print(f"\n## precision / recall on generated data ({n_labels} labels x {len(images.VARIANT_KINDS)} variants)")
    metas = images.label_set(n_labels, seed=3)
    originals = [images.render_label(m, seed=30_000 + i) for i, m in enumerate(metas)]
    photos = [img.resize((320, int(320 * img.height / img.width))) for _n, img in images.real_photos()]

    def evaluate(bases: list, seed: int):
        base_h = np.array([int(imaging.phash_hex(b), 16) for b in bases], dtype=np.uint64)
        var_h, var_of, kinds = [], [], []
        for i, b in enumerate(bases):
            for v in images.variants(b, seed=seed + i):
                var_h.append(int(imaging.phash_hex(v.image), 16))
                var_of.append(i)
                kinds.append(v.kind)
        var_h = np.array(var_h, dtype=np.uint64)
        d_pos = np.bitwise_count(var_h ^ base_h[np.array(var_of)])  # each variant vs its original
        d_all = np.bitwise_count(var_h[:, None] ^ base_h[None, :])  # vs every original
        neg_mask = np.ones_like(d_all, dtype=bool)
        neg_mask[np.arange(len(var_h)), np.array(var_of)] = False
        d_orig = np.bitwise_count(base_h[:, None] ^ base_h[None, :])[np.triu_indices(len(bases), 1)]
        return d_pos, d_all[neg_mask], d_orig, np.array(kinds)

    for name, bases, seed in (("synthetic labels", originals, 40_000), ("real photos (skimage)", photos, 50_000)):
        d_pos, d_neg, d_orig, kinds = evaluate(bases, seed)
        print(f"\n### {name}: {len(bases)} originals, {len(d_pos)} variants, {len(d_neg) + len(d_orig)} different-image pairs")
        print("| threshold | recall | precision | false matches (pairs) | min distance between different images |")
        print("|---:|---:|---:|---:|---:|")
        for t in range(4, 17, 2):
            tp = int((d_pos <= t).sum())
            fp = int((d_neg <= t).sum() + (d_orig <= t).sum())
            mark = " (default)" if t == threshold else ""
            print(f"| {t}{mark} | {tp / len(d_pos):.3f} | {tp / max(1, tp + fp):.4f} | {fp} | {int(min(d_neg.min(), d_orig.min()))} |")
        print("| variant | median distance | p90 | max | recall at default |")
        print("|---|---:|---:|---:|---:|")
        for k in images.VARIANT_KINDS:
            dk = d_pos[kinds == k]
            print(f"| {k} | {np.median(dk):.0f} | {np.percentile(dk, 90):.0f} | {dk.max()} | {(dk <= threshold).mean():.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--redis-ops", type=int, default=1000)
    ap.add_argument("--labels", type=int, default=400)
    ap.add_argument("--threshold", type=int, default=get_settings().phash_threshold)
    ap.add_argument("--skip-redis", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    bench_lookup(sizes, args.queries, args.threshold)
    if not args.skip_redis:
        bench_redis(sizes, args.redis_ops, args.threshold)
    bench_quality(args.labels, args.threshold)


if __name__ == "__main__":
    main()
