"""/v1/retrieve over real HTTP: seed 002's contract, errors, exact spans, the shared vector cache,
the cold time budget with its follow-up job, and respond-async jobs."""

from __future__ import annotations

import json
import time
import uuid

import httpx

from pipelines.retrieve.vectors import EMBED_JOB_GUARD_S, EMBED_JOBS_IN_FLIGHT_KEY, texts_digest
from pipelines.runtime.jobs import job_key
from tests.stack import wait_for, wait_job

JA_DOC = "日本酒の歴史は古い。小樽の酒蔵は明治に始まった。\n\n🍣と🍶はよく合う。北海道の米で造る酒は軽やかだ。"
DOCS = [
    {"id": "b-tides", "text": "The tide rises twice a day because the moon pulls the ocean.", "metadata": {"src": "t"}},
    {"id": "a-sake", "text": JA_DOC, "metadata": {"lang": "ja", "n": 1}},
    {"id": "c-bread", "text": "Bread riots spread in 1789 when flour prices doubled. 🍞 Crowds marched."},
]


def _fresh(docs: list[dict]) -> list[dict]:
    """The same documents with a unique sentence, so their chunks are not in the cache yet."""
    tag = uuid.uuid4().hex[:8]
    return [{**d, "text": d["text"] + f" Note {tag}."} for d in docs]


def _post(api: httpx.Client, body, **kw) -> httpx.Response:
    return api.post("/v1/retrieve", json=body, **kw)


def _evidence(result: dict, doc: str) -> list[str]:
    """The result's text is verbatim in its document and every span is a non-empty UTF-8 byte range
    inside that text: the evidence pieces."""
    assert result["text"] and result["text"] in doc
    raw = result["text"].encode("utf-8")
    assert result["spans"]
    out = []
    for s in result["spans"]:
        assert 0 <= s["start"] < s["end"] <= len(raw), (s, len(raw))
        out.append(raw[s["start"] : s["end"]].decode("utf-8"))
    return out


def test_seed_contract_and_exact_spans(api):
    r = _post(api, {"query": "小樽の酒蔵はいつ始まった", "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert uuid.UUID(body["trace_id"]) and isinstance(body["warnings"], list)
    assert body["path"] == "extractor" and any("extractor" in w for w in body["warnings"])
    results = body["results"]
    assert results[0]["doc_id"] == "a-sake" and results[0]["metadata"] == {"lang": "ja", "n": 1}
    keys = [(-x["score"], x["doc_id"]) for x in results]
    assert keys == sorted(keys)
    by_id = {d["id"]: d for d in DOCS}
    for x in results:
        assert 0.0 <= x["score"] <= 1.0
        _evidence(x, by_id[x["doc_id"]]["text"])
    assert results[0]["text"] in JA_DOC


def test_options_top_k_min_score_spans_and_determinism(api):
    body = {"query": "bread flour riots 1789", "documents": DOCS, "options": {"top_k": 1, "include_spans": False}}
    a, b = _post(api, body).json(), _post(api, body).json()
    assert len(a["results"]) == 1 and a["results"][0]["doc_id"] == "c-bread" and a["results"][0]["spans"] == []
    assert [x["score"] for x in a["results"]] == [x["score"] for x in b["results"]]
    none = _post(api, {"query": "bread", "documents": DOCS, "options": {"min_score": 1.0}}).json()
    assert all(x["score"] >= 1.0 for x in none["results"])
    emoji = _post(api, {"query": "🍞 crowds marched", "documents": DOCS, "options": {"max_chunk_chars": 30}}).json()
    top = emoji["results"][0]
    assert top["doc_id"] == "c-bread" and len(top["text"]) <= 30
    assert "🍞" in "".join(_evidence(top, DOCS[2]["text"]))


# Three sentences full of the query's words, then the one that answers (1947), then more: today's
# short window stopped before the answer.
HARBOUR = (
    "The harbour of Otaru froze over in a hard winter. The frozen harbour stopped the herring boats of Otaru. "
    "Otaru's harbour master wrote about the frozen harbour every day. That winter was the winter of 1947. "
    "Spring came late. 港は凍った 🌊."
)


def test_passage_modes_text_holds_the_evidence_and_spans_point_inside_it(api):
    docs = [*DOCS, {"id": "harbour", "text": HARBOUR}]
    query = "when did the harbour of Otaru freeze over"
    got = {}
    for mode in (None, "chunk", "window", "document"):
        options = {"top_k": 2} | ({"passage": mode} if mode else {})
        r = _post(api, {"query": query, "documents": docs, "options": options})
        assert r.status_code == 200, r.text
        top = r.json()["results"][0]
        assert top["doc_id"] == "harbour"
        pieces = _evidence(top, HARBOUR)
        assert all(p.strip() == p and p in top["text"] for p in pieces)
        got[mode] = top["text"]
    assert got[None] == got["chunk"] == HARBOUR  # the default: the chunk, here the whole paragraph
    assert "That winter was the winter of 1947." in got["chunk"]
    assert "1947" not in got["window"] and got["window"] in HARBOUR  # today's three-sentence window
    assert got["document"] == HARBOUR
    bad = _post(api, {"query": query, "documents": docs, "options": {"passage": "paragraph"}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "UNPROCESSABLE"


def _error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code and body["error"]["message"] and body["trace_id"]
    return body


def test_errors(api):
    bad_json = api.post(
        "/v1/retrieve", content=b'{"query": "x", "documents": [', headers={"content-type": "application/json"}
    )
    _error(bad_json, 400, "BAD_REQUEST")
    _error(_post(api, {"query": "x"}), 400, "BAD_REQUEST")
    assert (
        "documents is empty"
        in _error(_post(api, {"query": "x", "documents": []}), 400, "BAD_REQUEST")["error"]["message"]
    )
    _error(_post(api, {"query": "", "documents": DOCS}), 422, "UNPROCESSABLE")
    _error(_post(api, {"query": "   ", "documents": DOCS}), 422, "UNPROCESSABLE")
    _error(_post(api, {"query": "x", "documents": DOCS, "options": {"top_k": 0}}), 422, "UNPROCESSABLE")
    _error(_post(api, {"query": "x", "documents": [{"id": "a", "text": 3}]}), 422, "UNPROCESSABLE")
    _error(_post(api, {"query": "x", "documents": [{"text": "no id"}]}), 400, "BAD_REQUEST")


def _no_follow_up_jobs_in_flight(redis_client) -> None:
    """Follow-up jobs of earlier tests' cold requests have ended (the stack's cap is 1)."""
    wait_for(lambda: redis_client.zcard(EMBED_JOBS_IN_FLIGHT_KEY) == 0, timeout_s=120, what="follow-up jobs to end")


def test_cache_is_shared_by_api_processes_and_cold_requests_stay_in_budget(api, stack, redis_client):
    _no_follow_up_jobs_in_flight(redis_client)
    docs = _fresh(DOCS)
    # Cold, with a budget too small to embed anything: lexical ranking, a warning, a follow-up job.
    cold = _post(api, {"query": "why does the tide rise", "documents": docs, "options": {"timeout_ms": 1}})
    assert cold.status_code == 200, cold.text
    cb = cold.json()
    assert cb["results"][0]["doc_id"] == "b-tides"
    assert any("lexically only" in w for w in cb["warnings"]) and cb["embed_job_id"]
    assert any("being embedded for the next request" in w for w in cb["warnings"])
    job = wait_job(api, cb["embed_job_id"], timeout_s=120)
    assert job["status"] == "succeeded", job
    # Warm, on a second API process: every chunk comes from the shared Redis cache.
    other = stack.start_api(name="api-retrieve-2")
    with httpx.Client(base_url=other.url, timeout=60) as api2:
        warm = _post(api2, {"query": "why does the tide rise", "documents": docs}).json()
    assert warm["stats"]["cache_hits"] == warm["stats"]["chunks"] == len(docs)
    assert warm["stats"]["embedded"] == 0 and warm["embed_job_id"] is None
    assert "glanced" not in warm["stats"]  # a warm request does not glance at its chunks
    assert not any("lexically only" in w for w in warm["warnings"])
    assert warm["results"][0]["doc_id"] == "b-tides"


def _cold(api: httpx.Client) -> dict:
    r = _post(api, {"query": "why does the tide rise", "documents": _fresh(DOCS), "options": {"timeout_ms": 1}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["results"][0]["doc_id"] == "b-tides" and any("lexically only" in w for w in body["warnings"])
    return body


NOT_QUEUED = "no follow-up embedding job was queued"


def test_follow_up_jobs_are_capped_and_a_stale_one_is_pruned(api, redis_client):
    """The stack runs with RETRIEVE_EMBED_JOBS_MAX=1: a job in flight (planted) means a cold request
    queues none and says so; one older than the guard window (a killed worker's) is pruned."""
    _no_follow_up_jobs_in_flight(redis_client)
    planted = f"planted-{uuid.uuid4().hex}"
    redis_client.zadd(EMBED_JOBS_IN_FLIGHT_KEY, {planted: time.time()})
    try:
        capped = _cold(api)
    finally:
        redis_client.zrem(EMBED_JOBS_IN_FLIGHT_KEY, planted)
    assert capped["embed_job_id"] is None
    assert any(NOT_QUEUED in w and "RETRIEVE_EMBED_JOBS_MAX=1" in w for w in capped["warnings"]), capped["warnings"]
    assert not any("being embedded for the next request" in w for w in capped["warnings"])

    redis_client.zadd(EMBED_JOBS_IN_FLIGHT_KEY, {planted: time.time() - EMBED_JOB_GUARD_S - 5})
    cold = _cold(api)
    assert redis_client.zscore(EMBED_JOBS_IN_FLIGHT_KEY, planted) is None
    assert cold["embed_job_id"] and not any(NOT_QUEUED in w for w in cold["warnings"])
    assert any("being embedded for the next request" in w for w in cold["warnings"])
    texts = json.loads(redis_client.hget(job_key(cold["embed_job_id"]), "params"))["texts"]
    job = wait_job(api, cold["embed_job_id"], timeout_s=120)
    assert job["status"] == "succeeded", job
    assert redis_client.zscore(EMBED_JOBS_IN_FLIGHT_KEY, texts_digest(texts)) is None  # the job freed its place


def test_respond_async_runs_the_retrieve_as_a_job(api):
    r = _post(api, {"query": "flour prices", "documents": _fresh(DOCS)}, headers={"Prefer": "respond-async"})
    assert r.status_code == 202, r.text
    job = wait_job(api, r.json()["job_id"], timeout_s=120)
    assert job["status"] == "succeeded", job
    result = job["result"]
    assert result["results"][0]["doc_id"] == "c-bread" and result["path"] == "extractor"
    assert not any("lexically only" in w for w in result["warnings"])


def test_a_retrieve_job_embeds_every_chunk_whatever_the_request_budget(stack):
    # the route hands the job its options, the cold-request embedding budget included
    from pipelines.retrieve import run_retrieve_job

    options = {"embed_budget_ms": 0, "embed_budget_max_ms": 0}
    result = run_retrieve_job(None, "flour prices", _fresh(DOCS), options)
    assert result["results"][0]["doc_id"] == "c-bread"
    assert not any("time budget" in w for w in result["warnings"]), result["warnings"]


def test_a_request_without_timeout_embeds_within_the_embedding_budget():
    """Issue 23: a default request embeds for RETRIEVE_EMBED_BUDGET_MS plus a little per KB, at
    most RETRIEVE_EMBED_BUDGET_MAX_MS (the rest is ranked without vectors, warned about and embedded
    by the follow-up job); an explicit timeout_ms is the caller's own budget, as before."""
    from api.routes.retrieve import RetrieveRequest, _options
    from pipelines.retrieve import EMBED_MS_PER_KB, embed_budget_s
    from yana.settings import get_settings

    s = get_settings()
    default = _options(RetrieveRequest(query="q", documents=[{"id": "a", "text": "x"}]))
    assert default.embed_budget_ms == s.retrieve_embed_budget_ms and 0 < default.embed_budget_ms <= 1000
    assert default.embed_budget_max_ms == s.retrieve_embed_budget_max_ms
    assert default.passage == "chunk"
    # 20 paragraphs (8 KB) get the base budget and a little more; 510 (203 KB) the most, under 3 s.
    assert embed_budget_s(default, 8 * 1024) == (s.retrieve_embed_budget_ms + 8 * EMBED_MS_PER_KB) / 1000
    assert embed_budget_s(default, 203 * 1024) == s.retrieve_embed_budget_max_ms / 1000 < 3.0
    explicit = _options(
        RetrieveRequest(
            query="q", documents=[{"id": "a", "text": "x"}], options={"timeout_ms": 5000, "passage": "window"}
        )
    )
    assert explicit.embed_budget_ms is None and explicit.timeout_ms == 5000 and explicit.passage == "window"
    assert embed_budget_s(explicit, 203 * 1024) is None  # up to the caller's timeout
