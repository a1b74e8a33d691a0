"""Memos over HTTP against the real stack: save (summary or chunks), search joined per memo, get,
delete, expiry observed with a short TTL (not mocked), the expired-entries sweep from two API
processes at once, the optional near-duplicate merge, filters and validation."""

from __future__ import annotations

import concurrent.futures
import uuid

import httpx
import pytest

from pipelines.memo import service as memo_pipeline
from tests.stack import wait_for, wait_job

NO_LIMIT = {"RATE_LIMIT": "10000/second", "RATE_BURST": "10000"}


def _session() -> str:
    return f"sess-{uuid.uuid4().hex[:10]}"


def _save(client: httpx.Client, **body) -> dict:
    r = client.post("/memo/save", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _search(client: httpx.Client, **params) -> list[dict]:
    r = client.get("/memo/search", params=params)
    assert r.status_code == 200, r.text
    return r.json()["results"]


@pytest.fixture(scope="module")
def client(stack):
    # Small chunks keep the embedding of a "long" memo quick on a small machine.
    svc = stack.start_api(name="api-memo", MAX_CHUNK_CHARS="300", **NO_LIMIT)
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def short_ttl(stack):
    """Two API processes whose memos expire after 2 s and which prune expired Chroma entries."""
    env = {"MEMO_TTL_SECONDS": "2", "MEMO_PRUNE_EXPIRED": "true", **NO_LIMIT}
    a = stack.start_api(name="api-memo-ttl-a", **env)
    b = stack.start_api(name="api-memo-ttl-b", **env)
    with httpx.Client(base_url=a.url, timeout=60) as ca, httpx.Client(base_url=b.url, timeout=60) as cb:
        yield ca, cb


def test_save_with_summary_embeds_the_summary_and_search_returns_raw(client):
    session = _session()
    out = _save(
        client,
        session_id=session,
        text="今日は小樽の酒蔵を三軒まわった。二軒目の純米吟醸が特に気に入った。",
        summary="小樽の酒蔵めぐりで純米吟醸が気に入った",
        keywords=["小樽", "日本酒"],
        importance=0.8,
    )
    assert out["used_summary"] is True
    assert out["chroma_ids"] == [f"memo_summary:{out['memo_id']}"]
    assert out["merged_into"] is None
    assert out["saved_at"].endswith("Z")

    raw = client.get("/memo/get", params={"memo_id": out["memo_id"]}).json()
    assert raw["text"].startswith("今日は小樽")
    assert raw["keywords"] == ["小樽", "日本酒"]
    assert raw["importance"] == 0.8
    assert raw["session_id"] == session

    hits = _search(client, query="小樽で飲んだお酒", session_id=session)
    assert len(hits) == 1
    hit = hits[0]
    assert hit["summary"] == "小樽の酒蔵めぐりで純米吟醸が気に入った"
    assert hit["metadata"]["memo_id"] == out["memo_id"]
    assert hit["metadata"]["is_summary"] is True
    assert hit["metadata"]["keywords"] == ["小樽", "日本酒"]
    assert 0.0 <= hit["distance"] < 1.0
    assert hit["raw"]["text"] == raw["text"]


def test_long_text_is_chunked_and_search_joins_a_memos_chunks(client):
    session = _session()
    sentence = "北海道の港町では冬になると魚がおいしくなり、地元の酒と合わせる楽しみが増える。"
    text = sentence * 20  # 780 characters: three chunks of at most MAX_CHUNK_CHARS (300)
    out = _save(client, session_id=session, text=text)
    assert out["used_summary"] is False
    n = len(out["chroma_ids"])
    assert n == 3
    assert out["chroma_ids"] == [f"memo_chunk:{out['memo_id']}:{i}" for i in range(n)]
    other = _save(client, session_id=session, text="明日は函館で朝市に行く予定。")

    hits = _search(client, query="港町の冬の魚と地酒", session_id=session, n_results=5)
    memo_ids = [h["metadata"]["memo_id"] for h in hits]
    assert memo_ids.count(out["memo_id"]) == 1  # its chunks joined into one result
    assert set(memo_ids) == {out["memo_id"], other["memo_id"]}
    assert memo_ids[0] == out["memo_id"]
    assert [h["distance"] for h in hits] == sorted(h["distance"] for h in hits)


def test_filters_session_keywords_importance(client):
    s1, s2 = _session(), _session()
    a = _save(
        client,
        session_id=s1,
        text="函館の夜景を見ながら飲んだ地ビールの話",
        keywords=["函館", "ビール"],
        importance=0.9,
    )
    b = _save(client, session_id=s1, text="函館の朝市でイカ刺しを食べた話", keywords=["函館"], importance=0.2)
    c = _save(client, session_id=s2, text="函館の教会群を歩いた話", keywords=["函館"], importance=0.9)

    def ids(**params):
        return {h["metadata"]["memo_id"] for h in _search(client, query="函館の思い出", n_results=10, **params)}

    assert ids(session_id=s1) == {a["memo_id"], b["memo_id"]}
    assert ids(session_id=s1, keywords=["ビール"]) == {a["memo_id"]}
    assert ids(session_id=s1, min_importance=0.5) == {a["memo_id"]}
    assert c["memo_id"] in ids(keywords=["函館"], min_importance=0.5)
    assert ids(session_id=s1, keywords=["函館", "ビール"]) == {a["memo_id"]}


def test_delete_removes_raw_and_every_chunk(client, stack):
    from yana.clients import get_chroma, get_redis

    session = _session()
    out = _save(client, session_id=session, text="消える予定のメモ。" * 60)
    assert len(out["chroma_ids"]) >= 2
    r = client.post("/memo/delete", json={"memo_id": out["memo_id"]})
    assert r.status_code == 200, r.text
    assert r.json()["deleted"] is True
    assert sorted(r.json()["chroma_ids"]) == sorted(out["chroma_ids"])

    col, _model = memo_pipeline.memo_collection(get_chroma(), get_redis())
    assert col.get(ids=out["chroma_ids"])["ids"] == []
    assert client.get("/memo/get", params={"memo_id": out["memo_id"]}).status_code == 404
    assert _search(client, query="消える予定", session_id=session) == []

    again = client.post("/memo/delete", json={"memo_id": out["memo_id"]})
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "NOT_FOUND"


def test_memos_live_in_their_own_collection(client, stack):
    from pipelines.search import collections as vector_index
    from yana.clients import get_chroma, get_redis

    out = _save(client, session_id=_session(), text="ラベルと混ざってはいけないメモ")
    r, chroma = get_redis(), get_chroma()
    col, _ = memo_pipeline.memo_collection(chroma, r)
    labels, _ = vector_index.active_collection(chroma, r)
    assert col.name.startswith("memos__") and col.name != labels.name
    assert labels.get(ids=out["chroma_ids"])["ids"] == []
    assert col.get(ids=out["chroma_ids"])["ids"] == out["chroma_ids"]


def test_raw_expires_then_clear_expired_prunes_once_across_processes(short_ttl):
    ca, cb = short_ttl
    session = _session()
    saved = [_save(ca, session_id=session, text=f"すぐ消える生テキスト {i} 番") for i in range(3)]
    ids = {s["memo_id"] for s in saved}

    # expiry is Redis's own TTL, observed, not simulated
    wait_for(
        lambda: all(ca.get("/memo/get", params={"memo_id": i}).status_code == 404 for i in ids),
        timeout_s=15,
        what="raw memos to expire",
    )
    gone = ca.get("/memo/get", params={"memo_id": saved[0]["memo_id"]})
    assert gone.json()["error"]["code"] == "NOT_FOUND"

    # the Chroma copy outlives the raw text until pruned: search answers raw null
    hits = _search(ca, query="消える生テキスト", session_id=session, n_results=5)
    assert {h["metadata"]["memo_id"] for h in hits} == ids
    assert all(h["raw"] is None for h in hits)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda c: c.post("/memo/clear_expired"), [ca, cb]))
    assert all(o.status_code == 200 for o in outs), [o.text for o in outs]
    bodies = [o.json() for o in outs]
    assert all(b["enabled"] for b in bodies)
    ran = [b for b in bodies if not b["skipped"]]
    assert ran, bodies
    assert sum(b["pruned_chunks"] for b in bodies) >= 3  # other expired memos may be pruned too
    assert _search(ca, query="消える生テキスト", session_id=session) == []
    # nothing left to prune for this session, and a second sweep is harmless
    again = cb.post("/memo/clear_expired").json()
    assert again["enabled"] and not again["skipped"]


def test_clear_expired_is_off_by_default(client):
    body = client.post("/memo/clear_expired").json()
    assert body["enabled"] is False and body["pruned_chunks"] == 0


def test_near_duplicate_merge_when_configured(stack):
    svc = stack.start_api(name="api-memo-dedup", MEMO_DEDUP_THRESHOLD="0.97", **NO_LIMIT)
    session = _session()
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        first = _save(
            c, session_id=session, text="次の打ち合わせは金曜の午後三時から", keywords=["予定"], importance=0.3
        )
        second = _save(
            c, session_id=session, text="次の打ち合わせは金曜の午後三時から", keywords=["会議"], importance=0.7
        )
        different = _save(c, session_id=session, text="ラーメン屋の新しい店が駅前にできた")
        elsewhere = _save(c, session_id=_session(), text="次の打ち合わせは金曜の午後三時から")
        raw = c.get("/memo/get", params={"memo_id": first["memo_id"]}).json()
    assert second["merged_into"] == first["memo_id"] and second["memo_id"] == first["memo_id"]
    assert raw["keywords"] == ["予定", "会議"] and raw["importance"] == 0.7
    assert different["merged_into"] is None and different["memo_id"] != first["memo_id"]
    assert elsewhere["merged_into"] is None  # another session's memo is never merged into


@pytest.mark.parametrize(
    ("method", "path", "kwargs"),
    [
        ("post", "/memo/save", {"json": {"session_id": "s", "text": ""}}),
        ("post", "/memo/save", {"json": {"session_id": "s", "text": "\u200b\u200b"}}),
        ("post", "/memo/save", {"json": {"text": "no session"}}),
        ("post", "/memo/save", {"json": {"session_id": "s", "text": "x", "importance": 2}}),
        ("post", "/memo/save", {"json": {"session_id": "s", "text": "x", "importance": True}}),
        ("post", "/memo/save", {"json": {"session_id": "s", "text": "x", "extra": 1}}),
        ("post", "/memo/save", {"content": b"{not json", "headers": {"content-type": "application/json"}}),
        ("get", "/memo/search", {"params": {"query": ""}}),
        ("get", "/memo/search", {"params": {"query": "\u200b"}}),
        ("get", "/memo/search", {"params": {"query": "x", "n_results": 0}}),
        ("get", "/memo/search", {"params": {"query": "x", "n_results": 51}}),
        ("get", "/memo/get", {"params": {"memo_id": "../../etc"}}),
        ("post", "/memo/delete", {"json": {"memo_id": "nope"}}),
    ],
)
def test_bad_input_gets_the_error_body(client, method, path, kwargs):
    r = getattr(client, method)(path, **kwargs)
    assert r.status_code in (400, 422), (r.status_code, r.text)
    body = r.json()
    assert body["error"]["code"] in ("BAD_REQUEST", "UNPROCESSABLE")
    assert body["error"]["message"]
    assert body["run_id"]


def test_unknown_memo_is_404(client):
    unknown = uuid.uuid4().hex
    assert client.get("/memo/get", params={"memo_id": unknown}).json()["error"]["code"] == "NOT_FOUND"
    assert client.post("/memo/delete", json={"memo_id": unknown}).status_code == 404


@pytest.fixture(scope="module")
def long_client(stack):
    """Chunks of 300 characters, and only the first 600 characters embedded before the answer."""
    svc = stack.start_api(name="api-memo-long", MAX_CHUNK_CHARS="300", MEMO_SYNC_EMBED_CHARS="600", **NO_LIMIT)
    with httpx.Client(base_url=svc.url, timeout=60) as c:
        yield c


def test_a_long_memo_answers_after_its_first_chunks_and_a_job_embeds_the_rest(long_client):
    """Issue 26 #8: embedding is ~0.5 ms of CPU per character, so a 100k-character memo cost a
    minute inside the request. The answer now waits for the first MEMO_SYNC_EMBED_CHARS only."""
    from yana.clients import get_chroma, get_redis

    session = _session()
    parts = [f"第{i}章では港町{i}番地の酒蔵について書いた。" * 12 for i in range(12)]
    parts[-1] = "最後の章は函館の朝市で食べたいくら丼とりんごの話だけをまとめて書いておく。" * 6
    text = "\n".join(parts)
    out = _save(long_client, session_id=session, text=text, keywords=["長文"], importance=0.4)
    n = len(out["chroma_ids"])
    assert n >= 8 and out["chroma_ids"] == [f"memo_chunk:{out['memo_id']}:{i}" for i in range(n)]
    assert 1 <= out["indexed_chunks"] <= 2 < n
    assert out["index_job_id"], out  # the rest is a job, not this request's CPU

    job = wait_job(long_client, out["index_job_id"], timeout_s=120)
    assert job["status"] == "succeeded", job
    col, _model = memo_pipeline.memo_collection(get_chroma(), get_redis())
    got = col.get(ids=out["chroma_ids"], include=["metadatas"])
    assert sorted(got["ids"]) == sorted(out["chroma_ids"])  # every chunk, once
    assert {m["chunk_index"] for m in got["metadatas"]} == set(range(n))
    assert all(m["session_id"] == session and m["keywords"] == ["長文"] for m in got["metadatas"])
    hits = _search(long_client, query="函館の朝市のいくら丼", session_id=session)
    assert [h["metadata"]["memo_id"] for h in hits] == [out["memo_id"]]  # found by its last chunk


def test_a_long_memo_deleted_before_its_job_leaves_nothing(long_client):
    from yana.clients import get_chroma, get_redis

    session = _session()
    out = _save(long_client, session_id=session, text="消すつもりの長いメモ。" * 300)
    assert out["index_job_id"]
    assert long_client.post("/memo/delete", json={"memo_id": out["memo_id"]}).status_code == 200
    assert wait_job(long_client, out["index_job_id"], timeout_s=120)["status"] == "succeeded"
    col, _model = memo_pipeline.memo_collection(get_chroma(), get_redis())
    assert col.get(ids=out["chroma_ids"])["ids"] == []
