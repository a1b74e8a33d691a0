"""Near-duplicate lookup: multi-index pHash search vs a brute-force numpy scan, and the atomic
Redis check-and-insert at 10k / 100k / 1M stored hashes, first by distance alone (the baseline),
then two-stage (candidates within the radius, judged by the verifier of pipelines.neardup.decision on real
label images); then precision/recall of pHash alone on generated label variants and on real
photographs (the two-stage quality is bench/neardup_eval.py).

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

from pipelines.ingest import pipeline as ingest  # noqa: E402
from pipelines.neardup import decision as neardup  # noqa: E402
from pipelines.neardup import hashing, verifier
from pipelines.neardup.index import REC, SIG_KEY, MultiIndex, PHashIndex  # noqa: E402
from tools.datagen import images  # noqa: E402
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
    print(
        "| stored | MIH p50 | MIH p99 | MIH p99 best-of-3 | brute p50 | brute p99 | brute p99 best-of-3 | speed-up p50 | recall vs brute | build s |"
    )
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
                d = hashing.hamming_array(codes, q)
                hits = np.nonzero(d <= t)[0]
                tb.append(time.perf_counter() - t0)
            mih.append(tm[0])
            brute.append(tb[0])
            mih3.append(min(tm))
            brute3.append(min(tb))
            exp = {int(i) for i in hits}
            expected += len(exp)
            found += len(exp & {k for k, _ in got})
        recall = found / expected if expected else 1.0
        print(
            f"| {n:,} | {pct(mih, 50):.3f} | {pct(mih, 99):.3f} | {pct(mih3, 99):.3f} | {pct(brute, 50):.3f} | "
            f"{pct(brute, 99):.3f} | {pct(brute3, 99):.3f} | {pct(brute, 50) / pct(mih, 50):.1f}x | "
            f"{recall:.4f} ({expected} pairs) | {build:.2f} |"
        )


def _redis():
    import redis

    port = 20000 + os.getpid() % 20000
    d = tempfile.mkdtemp()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL
    )
    r = redis.Redis(port=port, decode_responses=True)
    for _ in range(100):
        try:
            r.ping()
            break
        except redis.ConnectionError:  # not listening yet
            time.sleep(0.05)
    return proc, r


def _label_pool(n: int) -> list[tuple]:
    """(image, signature entry, near duplicate of the image) for n generated labels: the stored
    entries reuse these signatures, so a planted neighbour is verified on real pictures."""
    kinds = images.VARIANT_KINDS
    out = []
    for i, meta in enumerate(images.label_set(n, seed=11)):
        img = images.render_label(meta, seed=90_000 + i)
        v = images.variant(img, kinds[i % len(kinds)], random.Random(i)).image
        out.append((img, neardup.make_entry(verifier.signature(img), {}), v))
    return out


def bench_redis(sizes: list[int], n_ops: int, t: int, radius: int, pool_n: int) -> None:
    """The whole atomic step a worker runs per image: sync the local copy, search it, (two-stage:
    fetch the candidates' signatures and verify them), and the Lua check-and-insert that scans
    the log tail and appends."""
    proc, r = _redis()
    pool = _label_pool(pool_n)
    ingest.warm_up()  # a worker loads its compiled kernels as it starts (workers/bootstrap.py)
    try:
        print(f"\n## atomic check-and-insert through Redis ({n_ops} inserts per row; ms)")
        print("Half the inserts are planted near duplicates (a real variant image of the stored label")
        print("behind a code 0..t+2 bits away), half random codes (new labels).")
        print(
            f"| stored | distance alone (<= {t}) p50 | p99 | two-stage (radius {radius} + verifier) p50 | p99 | "
            "signature p50 (outside) | verifier calls | first sync of the log s | Redis memory MB |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        rng = np.random.default_rng(1)
        for n in sizes:
            r.flushall()
            codes = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
            keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
            # bulk load: the same records the script writes (log, sha1 map, signature entries)
            step = 50_000
            for i in range(0, n, step):
                cs, ks = codes[i : i + step].tolist(), keys[i : i + step].tolist()
                recs = "".join(f"+{c:016x}{k:016x}" for c, k in zip(cs, ks, strict=True))
                with r.pipeline(transaction=False) as p:
                    p.append("yana:phash:log", recs)
                    p.hset(
                        "yana:phash:sha1",
                        mapping={
                            f"{k:016x}" + "0" * 24: f"label_{k:016x}|{c:016x}|bulk|"
                            for c, k in zip(cs, ks, strict=True)
                        },
                    )
                    p.hset(SIG_KEY, mapping={f"{k:016x}": pool[(i + j) % len(pool)][1] for j, k in enumerate(ks)})
                    p.execute()
            assert r.strlen("yana:phash:log") == n * REC
            idx = PHashIndex(r, t, radius=radius)
            t0 = time.perf_counter()
            idx.sync()
            first_sync = time.perf_counter() - t0
            plain, two, sig_s, calls = [], [], [], 0
            for mode in ("plain", "two"):
                for k in range(n_ops):
                    sha = f"{random.getrandbits(160):040x}"
                    if k % 2:
                        q, img = int(rng.integers(0, 2**64 - 1, dtype=np.uint64, endpoint=True)), pool[k % len(pool)][2]
                    else:
                        row = int(rng.integers(n))
                        q = int(codes[row])
                        for b in rng.choice(64, int(rng.integers(0, t + 3)), replace=False):
                            q ^= 1 << int(b)
                        img = pool[row % len(pool)][2]  # a variant of the stored entry's picture
                    if mode == "plain":
                        t0 = time.perf_counter()
                        idx.check_and_insert(f"{q:016x}", sha, "bench:0")
                        plain.append(time.perf_counter() - t0)
                    else:  # the signature is made with the pHash, before the atomic step
                        t0 = time.perf_counter()
                        entry, _digest, verify = neardup.verifier_for(img, {}, t)
                        sig_s.append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        idx.check_and_insert(f"{q:016x}", sha, "bench:0", entry=entry, verify=verify)
                        two.append(time.perf_counter() - t0)
                        calls += len(verify.judged)
            mem = int(r.info("memory")["used_memory"]) / 1e6
            print(
                f"| {n:,} | {pct(plain, 50):.3f} | {pct(plain, 99):.3f} | {pct(two, 50):.3f} | {pct(two, 99):.3f} | "
                f"{pct(sig_s, 50):.3f} | {calls} | {first_sync:.2f} | {mem:.0f} |"
            )
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
        base_h = np.array([int(hashing.phash_hex(b), 16) for b in bases], dtype=np.uint64)
        var_h, var_of, kinds = [], [], []
        for i, b in enumerate(bases):
            for v in images.variants(b, seed=seed + i):
                var_h.append(int(hashing.phash_hex(v.image), 16))
                var_of.append(i)
                kinds.append(v.kind)
        var_h = np.array(var_h, dtype=np.uint64)
        d_pos = hashing.hamming_array(var_h, base_h[np.array(var_of)])  # each variant vs its original
        d_all = hashing.hamming_array(var_h[:, None], base_h[None, :])  # vs every original
        neg_mask = np.ones_like(d_all, dtype=bool)
        neg_mask[np.arange(len(var_h)), np.array(var_of)] = False
        d_orig = hashing.hamming_array(base_h[:, None], base_h[None, :])[np.triu_indices(len(bases), 1)]
        return d_pos, d_all[neg_mask], d_orig, np.array(kinds)

    for name, bases, seed in (("synthetic labels", originals, 40_000), ("real photos (skimage)", photos, 50_000)):
        d_pos, d_neg, d_orig, kinds = evaluate(bases, seed)
        print(
            f"\n### {name}: {len(bases)} originals, {len(d_pos)} variants, {len(d_neg) + len(d_orig)} different-image pairs"
        )
        print("| threshold | recall | precision | false matches (pairs) | min distance between different images |")
        print("|---:|---:|---:|---:|---:|")
        for t in range(4, 17, 2):
            tp = int((d_pos <= t).sum())
            fp = int((d_neg <= t).sum() + (d_orig <= t).sum())
            mark = " (default)" if t == threshold else ""
            print(
                f"| {t}{mark} | {tp / len(d_pos):.3f} | {tp / max(1, tp + fp):.4f} | {fp} | {int(min(d_neg.min(), d_orig.min()))} |"
            )
        print("| variant | median distance | p90 | max | recall at default |")
        print("|---|---:|---:|---:|---:|")
        for k in images.VARIANT_KINDS:
            dk = d_pos[kinds == k]
            print(
                f"| {k} | {np.median(dk):.0f} | {np.percentile(dk, 90):.0f} | {dk.max()} | {(dk <= threshold).mean():.3f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--redis-ops", type=int, default=1000)
    ap.add_argument("--labels", type=int, default=400)
    ap.add_argument("--threshold", type=int, default=get_settings().phash_threshold)
    ap.add_argument("--radius", type=int, default=get_settings().phash_candidate_radius)
    ap.add_argument("--pool", type=int, default=200, help="label images behind the stored signatures")
    ap.add_argument("--skip-redis", action="store_true")
    ap.add_argument("--skip-lookup", action="store_true")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    if not args.skip_lookup:
        bench_lookup(sizes, args.queries, args.threshold)
    if not args.skip_redis:
        bench_redis(sizes, args.redis_ops, args.threshold, args.radius, args.pool)
    bench_quality(args.labels, args.threshold)


if __name__ == "__main__":
    main()
