"""Measure THE search on the labelled evaluation set (tools.datagen.eval_queries).

`index_labels` writes generated labels straight into a collection through the same pipelines
ingest uses (vector_index.upsert_chunks, which mirrors into the lexical index), without rendering
images. `evaluate` runs every query through `pipelines.search.service.search` in a given mode and returns
nDCG@10 and recall@5, overall and per query kind. Used by bench/search_eval.py and by the
regression test in tests/pipelines/test_search_eval.py.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import numpy as np

from pipelines.labels import schema as labelrec
from pipelines.search.collections import upsert_chunks
from pipelines.search.service import search
from tools.datagen.catalog import Label
from tools.datagen.eval_queries import EvalQuery, ndcg_at, recall_at


def label_chunk_id(label: Label) -> str:
    return labelrec.label_id(hashlib.sha1(label.key.encode("utf-8"), usedforsecurity=False).hexdigest())


def label_chunks(labels: list[Label], t0: float = 1_700_000_000.0) -> list[dict]:
    """Chunks as ingest makes them (text from label_text, schema metadata), one per label."""
    out = []
    for n, lab in enumerate(labels):
        rec = lab.fields()
        cid = label_chunk_id(lab)
        ts = t0 + n
        rec.update(
            id=cid,
            doc_id=cid,
            chunk_index=0,
            source="label",
            file_path=f"images/{cid}.png",
            hash_sha1=hashlib.sha1(lab.key.encode(), usedforsecurity=False).hexdigest(),
            phash="",
            ingested_at_ts=ts,
            ingested_at=f"ts-{ts:.0f}",
        )
        out.append({"id": cid, "text": labelrec.label_text(rec), "metadata": rec})
    return out


def embed_chunks(chunks: list[dict], embedder) -> np.ndarray:
    return embedder.embed_passages([c["text"] for c in chunks])


def index_labels(col, r, chunks: list[dict], embeddings: np.ndarray, batch: int = 500) -> None:
    for i in range(0, len(chunks), batch):
        part = [dict(c, embedding=e) for c, e in zip(chunks[i : i + batch], embeddings[i : i + batch], strict=True)]
        upsert_chunks(col, part, r=r)


def evaluate(queries: list[EvalQuery], labels: list[Label], mode: str, *, collection: str, r, chroma) -> dict:
    key_of = {label_chunk_id(lab): lab.key for lab in labels}
    ndcg, recall = [], []
    per_kind: dict[str, list[float]] = defaultdict(list)
    for q in queries:
        res = search(q.text, q.filters or None, k=10, mode=mode, debug=False, collection=collection, r=r, chroma=chroma)
        ranked = [key_of.get(h["id"], h["id"]) for h in res["hits"]]
        n = ndcg_at(ranked, q.relevance, 10)
        ndcg.append(n)
        recall.append(recall_at(ranked, q.relevance, 5))
        per_kind[q.kind].append(n)
    return {
        "mode": mode,
        "queries": len(queries),
        "ndcg@10": float(np.mean(ndcg)) if ndcg else 0.0,
        "recall@5": float(np.mean(recall)) if recall else 0.0,
        "ndcg_by_kind": {k: float(np.mean(v)) for k, v in sorted(per_kind.items())},
    }
