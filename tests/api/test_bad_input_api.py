"""Bad input answers a 4xx with the error body, never a 500 (real stack): deep JSON, huge and
odd ids and cursors, bools as ints, invisible text; and job paging that loses nothing while
expired records leave the index."""

from __future__ import annotations

import uuid

import pytest

from pipelines.runtime.jobs import JobStore, job_key
from tests.stack import wait_for

DEEP = b"[" * 10_000 + b"]" * 10_000
DEEP_OBJECT = b'{"a":' * 10_000 + b"1" + b"}" * 10_000


def _error(r, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] and body["error"]["message"] and body["run_id"]
    return body["error"]


@pytest.mark.parametrize(
    "path,body,headers",
    [
        ("/v1/demo/sleep", DEEP, {"Idempotency-Key": "deep-1"}),
        ("/v1/ingest", DEEP_OBJECT, {"Idempotency-Key": "deep-2"}),
        ("/v1/search", DEEP_OBJECT, {}),
        ("/v1/chat", DEEP, {}),
    ],
)
def test_deeply_nested_json_is_a_400(api, path, body, headers):
    r = api.post(path, content=body, headers={"content-type": "application/json", **headers})
    assert "nests deeper" in _error(r, 400)["message"]


def test_deeply_nested_json_rpc_to_mcp_is_an_error_not_a_500(api):
    params = b'{"x":' * 10_000 + b"1" + b"}" * 10_000
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + params + b"}"
    r = api.post(
        "/mcp",
        content=body,
        headers={"content-type": "application/json", "accept": "application/json, text/event-stream"},
    )
    _error(r, 400)


def test_a_cursor_past_64_bits_or_beyond_the_bound_is_a_400(api):
    for cursor in ("9223372036854775807", "99999999999999999999999", "-1"):
        _error(api.get("/v1/jobs", params={"cursor": cursor}), 400)


def test_a_job_id_that_is_not_one_is_a_404_even_where_a_key_exists(api, redis_client):
    r = api.post("/v1/demo/sleep", json={"steps": 200, "step_s": 0.05})
    job_id = r.json()["job_id"]
    wait_for(lambda: redis_client.exists(f"yana:job:{job_id}:hb"), timeout_s=60, what="heartbeat key")
    try:
        for suffix in (":hb", "x", "%3Ahb"):
            _error(api.get(f"/v1/jobs/{job_id}{suffix}"), 404)
            _error(api.delete(f"/v1/jobs/{job_id}{suffix}"), 404)
        _error(api.get("/v1/jobs/" + "a" * 65), 400)
    finally:
        api.delete(f"/v1/jobs/{job_id}")


def test_bools_are_not_ints_and_invisible_text_is_blank(api):
    _error(api.post("/v1/search", json={"query_text": "酒", "k": True}), 400)
    _error(api.post("/v1/search", json={"query_text": "酒", "page": 1.0}), 400)
    _error(api.post("/v1/demo/sleep", json={"steps": True}), 400)
    _error(api.post("/v1/chat", json={"user_text": "こんにちは", "top_k": True}), 400)
    _error(api.post("/v1/chat", json={"user_text": "\u200b\u200b"}), 400)
    _error(api.post("/v1/chat", json={"user_text": " \u200b\ufeff\u3000"}), 400)
    _error(api.post("/v1/ingest", json={"documents": [{"id": "d", "text": "\u200b\u200b"}]}), 400)


def test_paging_loses_no_job_when_records_expire_between_pages(api, redis_client):
    kind = f"pagetest.{uuid.uuid4().hex[:8]}"
    store = JobStore(redis_client)
    for _ in range(9):  # many share a millisecond: ties too
        store.create(kind, {})
    # the list's own order (newest first; ties in one millisecond in a fixed order of their own)
    newest_first = [j["id"] for j in api.get("/v1/jobs", params={"kind": kind, "limit": 50}).json()["jobs"]]
    assert len(newest_first) == 9
    first = api.get("/v1/jobs", params={"kind": kind, "limit": 3}).json()
    assert [j["id"] for j in first["jobs"]] == newest_first[:3] and first["next_cursor"]
    gone = newest_first[3:5]  # the next two expire before the second page is asked for
    for jid in gone:
        redis_client.delete(job_key(jid))
    seen = [j["id"] for j in first["jobs"]]
    cursor = first["next_cursor"]
    while cursor is not None:
        page = api.get("/v1/jobs", params={"kind": kind, "limit": 3, "cursor": cursor}).json()
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
    assert seen == [j for j in newest_first if j not in gone]
