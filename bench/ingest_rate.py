"""End-to-end ingest rate (POST → indexed, through API, worker, Redis, Chroma server) beside the
embedding backend alone on the same label texts, in the same run.

    .venv/bin/python bench/ingest_rate.py [--n 256] [--batch 16] [--parallel 2]

Starts a private stack (tests/stack.py: redis-server, chroma, one worker with concurrency 1, the
API) in a temp folder. The ratio e2e / embedding-only says how much of the worker's time goes to
everything but the model (decode, hashes, pHash index, storage, Chroma, lexical index, HTTP).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from pipelines import labels  # noqa: E402
from pipelines.embedding import get_embedder  # noqa: E402
from tests.stack import start_stack, wait_job  # noqa: E402
from yana.datagen import images  # noqa: E402

FIELDS = ("category", "brand_name", "product_name", "brewery", "region")


def make_batch(metas, seed0):
    files, items = [], []
    for k, m in enumerate(metas):
        data = images.encode(images.render_label(m, seed=seed0 + k), "JPEG", 90)
        files.append(("files", (f"{seed0 + k}.jpg", data, "image/jpeg")))
        items.append({**{f: m[f] for f in FIELDS}, "label_features": m["label_features"]})
    return files, items


def time_embedding(texts: list[str], batch: int) -> float:
    """The embedding backend alone (same model, same batches, one thread) on the same texts."""
    emb = get_embedder()  # the backend the worker resolved (the recorded default)
    emb.embed_passages(texts[:4])
    t0 = time.perf_counter()
    for i in range(0, len(texts), batch):
        emb.embed_passages(texts[i : i + batch])
    return time.perf_counter() - t0


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=2)
    args = ap.parse_args()

    metas = images.label_set(args.n + args.batch, seed=9)
    warm, metas = metas[: args.batch], metas[args.batch :]
    import json

    batches = [make_batch(metas[i : i + args.batch], 900_000 + i) for i in range(0, len(metas), args.batch)]
    texts = [labels.label_text({**m, "label_features": m["label_features"]}) for m in metas]

    root = Path(tempfile.mkdtemp(prefix="yana-bench-ingest-"))
    stack = start_stack(root, INGEST_BATCH_SIZE=str(args.batch))
    try:
        with httpx.Client(base_url=stack.api_url, timeout=300) as client:
            files, items = make_batch(warm, 100)
            r = client.post("/v1/ingest", files=files, data={"category": "sake", "items": json.dumps(items, ensure_ascii=False)})
            wait_job(client, r.json()["job_id"], 120)  # the worker has loaded the model

            def send(batch):
                files, items = batch
                r = client.post("/v1/ingest", files=files, data={"category": "sake", "items": json.dumps(items, ensure_ascii=False)})
                assert r.status_code == 202, r.text
                return wait_job(client, r.json()["job_id"], 600)

            embed_only_s = time_embedding(texts, args.batch)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.parallel) as pool:
                jobs = list(pool.map(send, batches))
            e2e_s = time.perf_counter() - t0
        busy_s = sum(_ts(j["finished_at"]) - _ts(j["started_at"]) for j in jobs)
        indexed = sum(j["result"]["indexed"] for j in jobs)
        dedup = sum(j["result"]["dedup"] for j in jobs)
        failed = sum(j["result"]["failed"] for j in jobs)

        embed_s = embed_only_s  # measured before the e2e run; measured again after, averaged
        embed_s = (embed_s + time_embedding(texts, args.batch)) / 2
    finally:
        stack.stop()

    n = len(metas)
    e2e_rate, embed_rate = n / e2e_s, n / embed_s
    emb = get_embedder()
    print(f"model {emb.model_name} (dim {emb.dim}), {n} images of 240x360, batches of {args.batch}, {args.parallel} in flight, "
          f"1 worker process (concurrency 1), OMP_NUM_THREADS=1")
    print(f"outcomes: indexed {indexed}, dedup {dedup}, failed {failed}")
    print("| path | images/s | seconds |")
    print("|---|---:|---:|")
    print(f"| end to end (POST → indexed) | {e2e_rate:.1f} | {e2e_s:.2f} |")
    print(f"| embedding backend alone, same texts | {embed_rate:.1f} | {embed_s:.2f} |")
    print(f"| worker busy (sum of job run times) | {n / busy_s:.1f} | {busy_s:.2f} |")
    print(f"ratio e2e / embedding alone: {e2e_rate / embed_rate:.2f} (aim >= 0.85); "
          f"worker-side / embedding alone: {(n / busy_s) / embed_rate:.2f}")
    print(f"load average during the run (2 cores shared with other processes): {os.getloadavg()}")


if __name__ == "__main__":
    main()
