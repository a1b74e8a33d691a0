"""Ingest rate with the local blob store vs an S3-compatible one, in the same run; and the blob
store calls alone (put/get of a label-sized image).

    .venv/bin/python bench/blob_ingest.py [--n 96] [--batch 16]

Starts Redis and Chroma once (tests/stack.py) and moto's S3 server on loopback (tests/s3server.py),
then one phase per backend: a fresh worker (concurrency 1) and API with that backend, fed fresh
images in multipart batches of --batch, two jobs in flight. Prints images/s per backend, their
ratio, and the put/get latencies of each store. The S3 server is moto (Python, same machine):
a lower bound for a real S3/MinIO on a LAN, not a measurement of one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from tests.s3server import start_s3  # noqa: E402
from tests.stack import start_stack, wait_job  # noqa: E402
from tools.datagen import images  # noqa: E402
from yana.blobs import open_store  # noqa: E402

FIELDS = ("category", "brand_name", "product_name", "brewery", "region")
BUCKET = "yana-bench"


def make_batch(metas, seed0):
    files, items = [], []
    for k, m in enumerate(metas):
        data = images.encode(images.render_label(m, seed=seed0 + k), "JPEG", 90)
        files.append(("files", (f"{seed0 + k}.jpg", data, "image/jpeg")))
        items.append({**{f: m[f] for f in FIELDS}, "label_features": m["label_features"]})
    return files, items


def run_phase(api_url: str, batches) -> tuple[float, int]:
    import orjson

    def one(batch) -> int:
        files, items = batch
        with httpx.Client(base_url=api_url, timeout=120) as c:
            r = c.post("/v1/ingest", files=files, data={"category": "sake", "items": orjson.dumps(items).decode()})
            r.raise_for_status()
            job = wait_job(c, r.json()["job_id"], timeout_s=600)
            assert job["status"] == "succeeded", job
            return int(job["result"]["indexed"]) + int(job["result"]["dedup"])

    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        done = sum(pool.map(one, batches))
    return time.perf_counter() - t0, done


def store_latency(store, data: bytes, n: int) -> tuple[float, float]:
    puts, gets = [], []
    for i in range(n):
        t = time.perf_counter()
        store.put(f"bench/{i}.jpg", data)
        puts.append(time.perf_counter() - t)
        t = time.perf_counter()
        assert store.get(f"bench/{i}.jpg") == data
        gets.append(time.perf_counter() - t)
    store.delete_prefix("bench/")
    return statistics.median(puts) * 1e3, statistics.median(gets) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=96, help="images per backend")
    ap.add_argument("--batch", type=int, default=16)
    args = ap.parse_args()
    metas = images.label_set(2 * args.n + args.batch, seed=31)

    with tempfile.TemporaryDirectory(prefix="yana-blob-bench-") as tmp:
        root = Path(tmp)
        s3 = start_s3(root / "s3")
        s3.create_bucket(BUCKET)
        st = start_stack(
            root / "shared",
            worker=False,
            api=False,
            **{k: v for k, v in s3.env(BUCKET).items() if k.startswith("AWS_")},
        )
        try:
            sample = images.encode(images.render_label(metas[0], seed=1), "JPEG", 90)
            os.environ.update({k: v for k, v in s3.env(BUCKET).items() if k.startswith("AWS_")})
            lat = {
                "local": store_latency(open_store(None, root / "lat"), sample, 30),
                "s3": store_latency(open_store(f"s3://{BUCKET}/lat", root), sample, 30),
            }
            rates = {}
            for k, backend in enumerate(("local", "s3")):
                env = {
                    "DATA_DIR": str(root / f"host-{backend}"),
                    "BLOB_URL": f"s3://{BUCKET}/yana" if backend == "s3" else "",
                }
                worker = st.start_worker(name=f"worker-{backend}", **env)
                api = st.start_api(name=f"api-{backend}", **env)
                # Warm-up (model load, first Chroma calls), then fresh images only.
                run_phase(api.url, [make_batch(metas[-args.batch :][k::2], 90_000 + k * 1000)])
                chunk = metas[k * args.n : (k + 1) * args.n]
                batches = [
                    make_batch(chunk[i : i + args.batch], 10_000 * (k + 1) + i)
                    for i in range(0, len(chunk), args.batch)
                ]
                secs, done = run_phase(api.url, batches)
                rates[backend] = done / secs
                for svc in (api, worker):
                    st.kill(svc)
            staged = [key for key in s3.keys(BUCKET) if key.startswith("yana/incoming/")]
        finally:
            st.stop()
            s3.stop()

    print(f"images per backend: {args.n}, batch {args.batch}, 2 jobs in flight, 1 worker (concurrency 1)")
    for backend in ("local", "s3"):
        put_ms, get_ms = lat[backend]
        print(
            f"{backend:>5}: {rates[backend]:7.2f} images/s   blob put {put_ms:6.2f} ms  get {get_ms:6.2f} ms (median, {len(sample)} B)"
        )
    print(f"s3/local ingest rate: {rates['s3'] / rates['local']:.2f}")
    print(f"staged uploads left in the bucket: {len(staged)}")


if __name__ == "__main__":
    main()
