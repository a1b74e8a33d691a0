"""Idempotency-Key on job-creating POSTs (IETF draft): replay, 409 in flight, 422 other body,
400 empty key, keys per token, retention."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from api.contract.auth import caller_identity
from api.contract.idempotency import KEY_PREFIX, IdempotencyStore, fingerprint
from tests.api.contract_support import assert_error, contract_server
from tests.stack import wait_for

TOKENS = "idem-token-a,idem-token-b"
A = {"Authorization": "Bearer idem-token-a"}
B = {"Authorization": "Bearer idem-token-b"}


@pytest.fixture(scope="module")
def client(redis_url):
    with contract_server(
        REDIS_URL=redis_url,
        AUTH_ENABLED="true",
        AUTH_TOKENS=TOKENS,
        IDEMPOTENCY_TTL_S="600",
        RATE_BURST="100000",
        RATE_LIMIT="1000/second",
    ) as c:
        yield c


def key() -> str:
    return uuid.uuid4().hex


def test_same_key_and_body_replays_the_first_response(client, redis_client):
    k = key()
    first = client.post("/v1/demo/sleep", json={"steps": 1, "step_s": 0}, headers={**A, "Idempotency-Key": k})
    assert first.status_code == 202, first.text
    assert "idempotent-replayed" not in first.headers
    # Same body with other key order and spacing: the same request.
    again = client.post(
        "/v1/demo/sleep",
        content=b'{ "step_s": 0,  "steps": 1 }',
        headers={**A, "Idempotency-Key": k, "content-type": "application/json"},
    )
    assert again.status_code == 202
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    # Only one job was created; the replay got its own correlation ids in the headers.
    assert again.headers["x-run-id"] != first.headers["x-run-id"]
    assert first.json()["job_id"] == again.json()["job_id"]
    stored = IdempotencyStore.redis_key(caller_identity("idem-token-a", None), k)
    assert stored.startswith(KEY_PREFIX)
    assert 500 < redis_client.ttl(stored) <= 600  # IDEMPOTENCY_TTL_S


def test_same_key_while_in_flight_is_409(client, redis_client):
    k = key()
    stored = IdempotencyStore.redis_key(caller_identity("idem-token-a", None), k)
    results = {}
    body = {"name": "slow", "delay_s": 3.0}

    def slow():
        results["first"] = client.post("/test/jobs", json=body, headers={**A, "Idempotency-Key": k})

    t = threading.Thread(target=slow)
    t.start()
    # The first request has claimed the key (its record says in flight) before the second is sent.
    wait_for(
        lambda: (raw := redis_client.get(stored)) and json.loads(raw)["state"] == "in_flight",
        timeout_s=10,
        interval_s=0.02,
        what="the first request's in-flight claim",
    )
    r = client.post("/test/jobs", json=body, headers={**A, "Idempotency-Key": k})
    t.join()
    assert_error(r, 409, "CONFLICT", retryable=True)
    assert r.headers["retry-after"] == "1"
    assert results["first"].status_code == 202
    # Once the first is done, the same request replays it.
    replay = client.post("/test/jobs", json=body, headers={**A, "Idempotency-Key": k})
    assert replay.status_code == 202 and replay.json()["job_id"] == results["first"].json()["job_id"]


def test_a_retry_after_the_api_died_mid_request_gets_the_first_job(client, redis_client):
    """The API created the job, then died before recording the response: the key's record still
    says in flight (its lease has not run out). The retry must get that job, not a 409 until the
    lease expires and then a second job."""
    k = key()
    body = {"steps": 1, "step_s": 0}
    first = client.post("/v1/demo/sleep", json=body, headers={**A, "Idempotency-Key": k})
    assert first.status_code == 202, first.text
    stored = IdempotencyStore.redis_key(caller_identity("idem-token-a", None), k)
    record = json.loads(redis_client.get(stored))
    assert redis_client.hget(IdempotencyStore.jobs_key(stored), "demo.sleep") == first.json()["job_id"]
    # What a kill -9 between job creation and the response leaves behind.
    died = {"state": "in_flight", "fp": record["fp"], "owner": "a-process-that-died"}
    redis_client.set(stored, json.dumps(died), ex=600)
    retry = client.post("/v1/demo/sleep", json=body, headers={**A, "Idempotency-Key": k})
    assert retry.status_code == 202, retry.text
    assert retry.json()["job_id"] == first.json()["job_id"]
    # The retry's answer is now the key's record: a third try is a plain replay.
    third = client.post("/v1/demo/sleep", json=body, headers={**A, "Idempotency-Key": k})
    assert third.headers["idempotent-replayed"] == "true" and third.json()["job_id"] == first.json()["job_id"]
    # Without a job bound to it, an in-flight key is still a 409 (the handler may not have got there).
    k2 = key()
    stored2 = IdempotencyStore.redis_key(caller_identity("idem-token-a", None), k2)
    redis_client.set(stored2, json.dumps(died), ex=600)
    assert_error(client.post("/v1/demo/sleep", json=body, headers={**A, "Idempotency-Key": k2}), 409, "CONFLICT")


def test_same_key_with_another_body_is_422(client):
    k = key()
    assert client.post("/test/jobs", json={"name": "one"}, headers={**A, "Idempotency-Key": k}).status_code == 202
    r = client.post("/test/jobs", json={"name": "two"}, headers={**A, "Idempotency-Key": k})
    assert_error(r, 422, "UNPROCESSABLE", retryable=False)
    # Another path with the same key is another request too.
    r = client.post("/test/labels", json={"name": "one"}, headers={**A, "Idempotency-Key": k})
    assert_error(r, 422, "UNPROCESSABLE")


@pytest.mark.parametrize("bad", ["", '"   "', '""', "x" * 256, "naïve"])
def test_empty_or_malformed_key_is_400(client, bad):
    r = client.post("/test/jobs", json={"name": "x"}, headers={**A, "Idempotency-Key": bad.encode()})
    assert_error(r, 400, "BAD_REQUEST")


def test_structured_field_string_key_is_the_same_key(client):
    k = key()
    first = client.post("/test/jobs", json={"name": "sf"}, headers={**A, "Idempotency-Key": f'"{k}"'})
    again = client.post("/test/jobs", json={"name": "sf"}, headers={**A, "Idempotency-Key": k})
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json()["job_id"] == first.json()["job_id"]


def test_keys_are_scoped_per_token(client):
    k = key()
    a = client.post("/test/jobs", json={"name": "scoped"}, headers={**A, "Idempotency-Key": k})
    b = client.post("/test/jobs", json={"name": "scoped"}, headers={**B, "Idempotency-Key": k})
    assert a.status_code == b.status_code == 202
    assert "idempotent-replayed" not in b.headers
    assert a.json()["job_id"] != b.json()["job_id"]


def test_errors_are_not_kept(client):
    k = key()
    bad = client.post("/test/jobs", json={"delay_s": 0}, headers={**A, "Idempotency-Key": k})  # missing name
    assert_error(bad, 400, "BAD_REQUEST")
    good = client.post("/test/jobs", json={"name": "fixed"}, headers={**A, "Idempotency-Key": k})
    assert good.status_code == 202 and "idempotent-replayed" not in good.headers


def test_replay_marks_dedup_where_the_seed_says(client):
    # A retry sent the moment the first response arrives is a replay, never a 409: the record
    # is complete before the response leaves (repeated to catch that race).
    for _ in range(10):
        k = key()
        first = client.post("/test/labels", json={"name": "label"}, headers={**A, "Idempotency-Key": k})
        assert first.json()["dedup"] is False
        again = client.post("/test/labels", json={"name": "label"}, headers={**A, "Idempotency-Key": k})
        assert again.status_code == 202, again.text
        assert again.json()["dedup"] is True and again.json()["job_id"] == first.json()["job_id"]


def test_without_a_key_nothing_is_deduplicated(client):
    a = client.post("/test/jobs", json={"name": "free"}, headers=A)
    b = client.post("/test/jobs", json={"name": "free"}, headers=A)
    assert a.json()["job_id"] != b.json()["job_id"]


def test_fingerprint_ignores_what_retries_vary():
    j1 = fingerprint("POST", "/v1/x", b"", "application/json", b'{"a": 1, "b": [1, 2]}')
    j2 = fingerprint("POST", "/v1/x", b"", "application/json; charset=utf-8", b'{"b":[1,2],"a":1}')
    assert j1 == j2
    assert j1 != fingerprint("POST", "/v1/x", b"", "application/json", b'{"a": 2, "b": [1, 2]}')
    assert j1 != fingerprint("POST", "/v1/y", b"", "application/json", b'{"a": 1, "b": [1, 2]}')

    def multipart(boundary: str) -> bytes:
        return (
            f'--{boundary}\r\nContent-Disposition: form-data; name="brand"\r\n\r\n北の誉\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n'
            f"Content-Type: image/png\r\n\r\n\x89PNG...\r\n--{boundary}--\r\n"
        ).encode()

    m1 = fingerprint("POST", "/v1/ingest", b"", "multipart/form-data; boundary=aaa111", multipart("aaa111"))
    m2 = fingerprint("POST", "/v1/ingest", b"", 'multipart/form-data; boundary="zzz999"', multipart("zzz999"))
    assert m1 == m2
    f1 = fingerprint("POST", "/p", b"", "application/x-www-form-urlencoded", b"a=1&b=2")
    assert f1 == fingerprint("POST", "/p", b"", "application/x-www-form-urlencoded", b"b=2&a=1")


def test_retention_is_configurable(redis_url):
    import asyncio

    import redis.asyncio as aredis

    async def run():
        r = aredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            store = IdempotencyStore(r, ttl_s=1)
            claim = await store.claim("t:x", "ret-key", "fp", lease_s=30)
            await store.complete(claim, "fp", 202, [("content-type", "application/json")], b'{"ok":true}')
            replay = await store.claim("t:x", "ret-key", "fp", lease_s=30)
            assert 0 < await r.pttl(store.redis_key("t:x", "ret-key")) <= 1000
            for _ in range(100):  # until Redis has expired it (TTL 1 s), not a fixed pause
                if not await r.exists(store.redis_key("t:x", "ret-key")):
                    break
                await asyncio.sleep(0.05)
            fresh = await store.claim("t:x", "ret-key", "fp", lease_s=30)
            return replay, fresh
        finally:
            await r.aclose()

    replay, fresh = asyncio.run(run())
    assert replay.status == 202 and json.loads(replay.body) == {"ok": True}
    assert hasattr(fresh, "owner")  # expired: a new claim, the request runs again


def test_record_is_complete_before_the_response_leaves(redis_url):
    """Deterministic form of the race above: at the moment the response body is sent, the
    stored record must already be complete."""
    import asyncio

    import redis.asyncio as aredis

    from tests.api.contract_support import build_app
    from yana.settings import get_settings

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REDIS_URL", redis_url)
        mp.setenv("AUTH_ENABLED", "false")
        get_settings.cache_clear()
        try:
            app = build_app()
        finally:
            mp.undo()
            get_settings.cache_clear()

    k = key()
    body = b'{"name": "ordered"}'
    states = []

    async def run():
        r = aredis.Redis.from_url(redis_url, decode_responses=True)
        stored_key = IdempotencyStore.redis_key(caller_identity(None, "10.1.2.3"), k)
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/test/labels",
            "raw_path": b"/test/labels",
            "query_string": b"",
            "root_path": "",
            "client": ("10.1.2.3", 5000),
            "server": ("testserver", 80),
            "headers": [
                (b"host", b"testserver"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"idempotency-key", k.encode()),
            ],
        }
        sent = False

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)

        async def send(message):
            if message["type"] == "http.response.start":
                states.append(message["status"])
            if message["type"] == "http.response.body":
                states.append(json.loads(await r.get(stored_key))["state"])

        try:
            await app(scope, receive, send)
        finally:
            await r.aclose()
            await app.state.redis.aclose()

    asyncio.run(run())
    assert states == [202, "complete"]


@pytest.mark.stack  # starts a redis-server of its own, stops it and starts it again
def test_a_release_redis_refused_lands_once_redis_answers_again(tmp_path):
    """The master died mid-request (a Sentinel failover): the release after the error fails, and
    left in place the claim would answer 409 to every retry for its whole lease. Retried in the
    background, it lands once Redis answers again; it never deletes a claim that is not ours."""
    import asyncio

    import redis.asyncio as aredis
    from redis.exceptions import RedisError

    from cli import processes

    port = processes.free_port()
    env = processes.child_env()
    servers = [processes.start_redis(tmp_path, port, tmp_path / "logs", env)]

    async def run() -> tuple[bool, bool]:
        r = aredis.Redis(port=port, decode_responses=True, socket_timeout=1, socket_connect_timeout=1)
        try:
            store = IdempotencyStore(r, ttl_s=600)
            ours = await store.claim("t:x", "failover-key", "fp", lease_s=60)
            other = await store.claim("t:x", "someone-elses-key", "fp", lease_s=60)
            processes.stop(servers)  # SIGTERM: its append-only file keeps both claims
            with pytest.raises(RedisError):
                await store.release(ours)
            retry = asyncio.create_task(store.release_when_reachable(ours, within_s=30, interval_s=0.1))
            await asyncio.sleep(1.0)
            pending_while_down = not retry.done()
            servers.append(processes.start_redis(tmp_path, port, tmp_path / "logs", env))
            processes.wait_healthy(servers[-1])
            landed = await asyncio.wait_for(retry, 20)
            assert await r.get(ours.key) is None
            assert json.loads(await r.get(other.key))["owner"] == other.owner  # not ours: kept
            return pending_while_down, landed
        finally:
            await r.aclose()

    try:
        processes.wait_healthy(servers[0])
        pending_while_down, landed = asyncio.run(run())
        assert pending_while_down and landed
    finally:
        processes.stop([s for s in servers if s.alive()])
