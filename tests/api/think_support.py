"""A small labelled world for the think tests: labels written straight into the active collection
(through the same upsert ingest uses), in two regions whose names no other test uses."""

from __future__ import annotations

import uuid

from pipelines.embedding.backends import get_embedder
from pipelines.labels.schema import label_text
from pipelines.search import collections as vector_index


def make_world(tag: str | None = None) -> dict:
    from yana.clients import get_chroma, get_redis

    tag = tag or uuid.uuid4().hex[:6]
    r, chroma = get_redis(), get_chroma()
    col, model = vector_index.active_collection(chroma, r)
    emb = get_embedder(model)
    north, south = f"北試{tag}", f"南試{tag}"
    specs = [
        ("n_dry", north, f"雪峰{tag}", ["辛口", "山田錦"], "aaaaaaaaaaaaaaaa"),
        ("n_sweet", north, f"花蜜{tag}", ["甘口", "フルーティー"], "0f0f0f0f0f0f0f0f"),
        ("s_dry", south, f"海風{tag}", ["辛口", "淡麗"], "ff00ff00ff00ff00"),
        ("s_fruity", south, f"桃園{tag}", ["フルーティー"], "00ff00ff00ff00ff"),
        # the same label uploaded twice (pHash 1 bit apart, same text): one of them is evidence at most
        ("n_dry_copy", north, f"雪峰{tag}", ["辛口", "山田錦"], "aaaaaaaaaaaaaaab"),
    ]
    ids: dict[str, str] = {}
    chunks = []
    for i, (key, region, brand, feats, phash) in enumerate(specs):
        cid = f"label_think{uuid.uuid4().hex[:11]}"
        rec = {
            "id": cid,
            "doc_id": cid,
            "chunk_index": 0,
            "source": "label",
            "category": "sake",
            "brand_name": brand,
            "product_name": f"{brand} 純米吟醸",
            "brewery": f"{brand}酒造",
            "region": region,
            "label_features": feats,
            "file_path": f"images/{cid}.png",
            "hash_sha1": "",
            "phash": phash,
            "ingested_at": "x",
            "ingested_at_ts": 2.2e9 + i,
        }
        text = label_text(rec)
        chunks.append({"id": cid, "text": text, "metadata": rec, "embedding": emb.embed_passages([text])[0]})
        ids[key] = cid
    vector_index.upsert_chunks(col, chunks, r=r, model=model)
    return {
        "tag": tag,
        "north": north,
        "south": south,
        "ids": ids,
        "col": col,
        "r": r,
        "chunk_ids": [c["id"] for c in chunks],
    }


def drop_world(world: dict) -> None:
    vector_index.delete_chunks(world["col"], world["chunk_ids"], r=world["r"])


def execute(client, step: dict) -> dict:
    """Run a SEARCH step's searches through /v1/search, as a Go caller would; one history entry."""
    results = []
    for s in step["searches"]:
        body = {"query_text": s["query_text"], "k": min(s["k"], 20)}
        flt = {k: v for k, v in s["filters"].items() if k in ("category", "region", "brewery")}
        if flt:
            body["filters"] = flt
        resp = client.post("/v1/search", json=body)
        assert resp.status_code == 200, resp.text
        results += resp.json()["hits"]
    return {"queries": step["queries_text"], "results": results, "evaluation": step["rationale"]}


def step_body(world: dict, question: str, **kw) -> dict:
    return {
        "request_id": kw.pop("request_id", f"req-{uuid.uuid4().hex[:8]}"),
        "user_query": question,
        "subject_id": "sake",
        **kw,
    }


def make_labels(specs: list[tuple[str, str, str, str, list[str]]], category: str = "sake") -> dict:
    """Labels as ingest writes them, with real place names: (key, region, brand, grade, features)."""
    from yana.clients import get_chroma, get_redis

    r, chroma = get_redis(), get_chroma()
    col, model = vector_index.active_collection(chroma, r)
    emb = get_embedder(model)
    ids: dict[str, str] = {}
    chunks = []
    for i, (key, region, brand, grade, feats) in enumerate(specs):
        cid = f"label_people{uuid.uuid4().hex[:11]}"
        rec = {
            "id": cid,
            "doc_id": cid,
            "chunk_index": 0,
            "source": "label",
            "category": category,
            "brand_name": brand,
            "product_name": f"{brand} {grade}".strip(),
            "brewery": f"{brand}酒造",
            "region": region,
            "label_features": feats,
            "file_path": f"images/{cid}.png",
            "hash_sha1": "",
            "phash": f"{(i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF:016x}",
            "ingested_at": "x",
            "ingested_at_ts": 2.3e9 + i,
        }
        text = label_text(rec)
        chunks.append({"id": cid, "text": text, "metadata": rec, "embedding": emb.embed_passages([text])[0]})
        ids[key] = cid
    vector_index.upsert_chunks(col, chunks, r=r, model=model)
    return {
        "ids": ids,
        "col": col,
        "r": r,
        "chunk_ids": [c["id"] for c in chunks],
        "meta": {c["id"]: c["metadata"] for c in chunks},
    }
