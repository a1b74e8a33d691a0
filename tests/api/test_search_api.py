"""/v1/search over HTTP: the seed's contract, GET and POST, bounds, and freshness across two API
processes (a write seen by one is seen by the other, with no wait)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from pipelines.embedding.backends import get_embedder
from pipelines.labels.schema import label_text
from pipelines.search import collections as vector_index
from tests.stack import wait_for


@pytest.fixture(scope="module")
def world(stack):
    from yana.clients import get_chroma, get_redis

    r, chroma = get_redis(), get_chroma()
    col, model = vector_index.active_collection(chroma, r)
    emb = get_embedder(model)
    region = f"API試験町{uuid.uuid4().hex[:6]}"

    def chunk(i: int, brand: str) -> dict:
        cid = f"label_api{uuid.uuid4().hex[:13]}"
        rec = {
            "id": cid,
            "doc_id": cid,
            "chunk_index": 0,
            "source": "label",
            "category": "sake" if i % 3 else "juice",
            "brand_name": brand,
            "product_name": f"{brand} 純米吟醸",
            "brewery": f"試験酒造{i % 4}",
            "region": region,
            "label_features": ["辛口", "山田錦"] if i % 2 else ["甘口"],
            "file_path": f"images/{cid}.png",
            "hash_sha1": "",
            "phash": "",
            "ingested_at": "x",
            "ingested_at_ts": 2.1e9 + i,
        }
        text = label_text(rec)
        return {"id": cid, "text": text, "metadata": rec, "embedding": emb.embed_passages([text])[0]}

    chunks = [chunk(i, f"試験銘柄{i:02d}") for i in range(24)]
    vector_index.upsert_chunks(col, chunks, r=r, model=model)
    # a second API process with its own memory, and no rate limit in the way of the paging walk
    second = stack.start_api(name="api-search", RATE_LIMIT="10000/second", RATE_BURST="10000")
    with httpx.Client(base_url=second.url, timeout=30) as client:
        # A new process answers 408 (retryable) until its model and index are loaded: wait for that.
        wait_for(
            lambda: client.post("/v1/search", json={"query_text": "warm-up", "k": 1}).status_code == 200,
            timeout_s=120,
            interval_s=0.5,
            what="the second API process to be warm",
        )
        yield {
            "r": r,
            "col": col,
            "model": model,
            "region": region,
            "chunks": chunks,
            "chunk": chunk,
            "client": client,
            "first_url": stack.api_url,
        }
    vector_index.delete_chunks(col, [c["id"] for c in chunks], r=r)


def test_post_answers_the_seed_contract(world):
    c = world["client"]
    resp = c.post(
        "/v1/search",
        json={"query_text": "試験銘柄07", "filters": {"region": world["region"]}, "k": 3},
        headers={"X-Run-Id": "run-search-1"},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert set(body) >= {"hits", "next_page", "debug", "server_version", "policy_version", "run_id", "trace_id"}
    assert body["run_id"] == "run-search-1" and body["trace_id"]
    hit = body["hits"][0]
    assert hit["brand_name"] == "試験銘柄07"
    for key in ("id", "brand_name", "product_name", "brewery", "region", "label_features", "file_path", "score"):
        assert key in hit
    assert isinstance(hit["label_features"], list)
    assert body["next_page"] == 2
    d = body["debug"]
    assert {"score", "meta_bonus", "hits"} <= set(d)
    assert {"dense", "lexical", "meta_bonus"} <= set(d["hits"][0])
    assert d["hits"][0]["meta_bonus"] > 0  # the query names the brand


def test_get_gives_the_same_as_post(world):
    c = world["client"]
    post = c.post(
        "/v1/search",
        json={"query_text": "辛口", "filters": {"region": world["region"], "category": "sake"}, "k": 5, "page": 2},
    ).json()
    get = c.get(
        "/v1/search", params={"query_text": "辛口", "region": world["region"], "category": "sake", "k": 5, "page": 2}
    ).json()
    assert [h["id"] for h in get["hits"]] == [h["id"] for h in post["hits"]]
    assert all(h["region"] == world["region"] and h["category"] == "sake" for h in get["hits"])


def test_english_feature_words_and_not_found_over_http(world):
    c = world["client"]
    flt = {"region": world["region"]}
    body = c.post("/v1/search", json={"query_text": "dry Yamada Nishiki", "filters": flt, "k": 5}).json()
    assert len(body["hits"]) == 5 and all("辛口" in h["label_features"] for h in body["hits"])
    assert body["not_found"] == []
    body = c.post("/v1/search", json={"query_text": "awamori", "filters": flt, "k": 3}).json()
    assert body["not_found"] == ["泡盛"] and len(body["hits"]) == 3  # the nearest alternatives still come
    got = c.get("/v1/search", params={"query_text": "泡盛", "region": world["region"], "k": 3}).json()
    assert got["not_found"] == ["泡盛"]
    chat = c.post("/v1/chat", json={"user_text": "泡盛ある？", "filters": flt, "top_k": 3})
    assert chat.status_code == 200, chat.text
    reply = chat.json()["reply"]
    assert "泡盛" in reply and "見つからへん" in reply  # said, not a 辛口 sake presented as an answer
    assert any(h["brand_name"] in reply for h in chat.json()["hits"])  # and the alternative, named


def test_paging_over_http_covers_the_filter_once(world):
    c = world["client"]
    for query in ("純米吟醸 辛口", None):
        ids, page = [], 1
        while page:
            body = c.post(
                "/v1/search",
                json={"query_text": query, "filters": {"region": world["region"]}, "page": page, "page_size": 5},
            ).json()
            ids += [h["id"] for h in body["hits"]]
            page = body["next_page"]
        assert sorted(ids) == sorted(x["id"] for x in world["chunks"])
        assert len(ids) == len(set(ids))


def test_empty_query_browses_by_recency(world):
    body = world["client"].get("/v1/search", params={"region": world["region"], "k": 4, "sort_by": "recency"}).json()
    want = sorted(world["chunks"], key=lambda x: -x["metadata"]["ingested_at_ts"])[:4]
    assert [h["id"] for h in body["hits"]] == [x["id"] for x in want]


@pytest.mark.parametrize(
    "body",
    [
        {"query_text": "x", "k": 0},
        {"query_text": "x", "k": 21},
        {"query_text": "x", "page_size": 51},
        {"query_text": "x", "page": 0},
        {"query_text": "x", "sort_by": "price"},
        {"query_text": "x", "filters": {"colour": "red"}},
        {"query_text": "x", "k": "many"},
        {"query_text": 5},
    ],
)
def test_bounds_are_400_with_the_error_body(world, body):
    resp = world["client"].post("/v1/search", json=body)
    assert resp.status_code == 400, resp.text
    err = resp.json()
    assert err["error"]["code"] == "BAD_REQUEST" and err["error"]["retryable"] is False
    assert "run_id" in err and "trace_id" in err


def test_get_bounds_are_400(world):
    assert world["client"].get("/v1/search", params={"query_text": "x", "page_size": 51}).status_code == 400


def test_a_write_is_seen_at_once_by_both_api_processes_and_a_delete_too(world):
    r, col = world["r"], world["col"]
    new = world["chunk"](99, "新着即時銘柄")
    vector_index.upsert_chunks(col, [new], r=r, model=world["model"])
    body = {"query_text": "新着即時銘柄", "filters": {"region": world["region"]}, "k": 1}
    with httpx.Client(base_url=world["first_url"], timeout=30) as first:
        for client in (world["client"], first):
            assert [h["id"] for h in client.post("/v1/search", json=body).json()["hits"]] == [new["id"]]
        vector_index.delete_chunks(col, [new["id"]], r=r)
        for client in (world["client"], first):
            hits = client.post("/v1/search", json=dict(body, k=20)).json()["hits"]
            assert new["id"] not in [h["id"] for h in hits]
