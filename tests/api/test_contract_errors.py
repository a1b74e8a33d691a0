"""Every error class of seed 000, through a real HTTP server and client, in the one error body."""

from __future__ import annotations

import json

import pytest

from tests.api.contract_support import SECRET, assert_error, contract_server


@pytest.fixture(scope="module")
def client(redis_url):
    with contract_server(REDIS_URL=redis_url, RATE_BURST="100000", RATE_LIMIT="1000/second") as c:
        yield c


def test_malformed_json_is_400(client):
    r = client.post("/v1/demo/sleep", content=b'{"steps": 1,', headers={"content-type": "application/json"})
    body = assert_error(r, 400, "BAD_REQUEST", retryable=False)
    assert "malformed JSON" in body["error"]["message"]


def test_wrong_and_missing_fields_are_400(client):
    r = client.post("/v1/demo/sleep", json={"steps": "many"})
    body = assert_error(r, 400, "BAD_REQUEST")
    assert "steps" in body["error"]["message"]
    assert_error(client.post("/v1/demo/sleep", json=[1, 2]), 400, "BAD_REQUEST")
    # A schema-violation route (seed 002) still answers 400 for a missing field or bad JSON...
    assert_error(client.post("/test/retrieve", json={"top_k": 3}), 400, "BAD_REQUEST")
    assert_error(
        client.post("/test/retrieve", content=b"{", headers={"content-type": "application/json"}), 400, "BAD_REQUEST"
    )


def test_schema_violation_is_422_where_the_seed_asks(client):
    # ...and 422 for a value the schema forbids (empty query).
    body = assert_error(client.post("/test/retrieve", json={"query": ""}), 422, "UNPROCESSABLE", retryable=False)
    assert "query" in body["error"]["message"]
    assert client.post("/test/retrieve", json={"query": "酒"}).status_code == 200


def test_unknown_route_and_unknown_resource_are_404(client):
    assert_error(client.get("/v1/nothing-here"), 404, "NOT_FOUND")
    assert_error(client.get("/v1/jobs/0123456789abcdef"), 404, "NOT_FOUND")


def test_wrong_method_is_405_in_the_error_body(client):
    assert_error(client.put("/v1/jobs"), 405, "METHOD_NOT_ALLOWED")


def test_time_limit_is_408_and_retryable(client):
    r = client.get("/test/slow", params={"s": 2})
    body = assert_error(r, 408, "REQUEST_TIMEOUT", retryable=True)
    assert "0.3" in body["error"]["message"]
    assert float(r.headers["x-request-duration-ms"]) < 1500
    assert client.get("/test/slow", params={"s": 0.01}).status_code == 200


def test_conflict_is_409(client):
    assert_error(client.get("/test/conflict"), 409, "CONFLICT", retryable=False)


def test_body_over_the_cap_is_413_by_length_and_by_stream(client):
    big = {"name": "x", "items": list(range(2000))}  # > 1000 bytes
    assert_error(client.post("/test/upload", json=big), 413, "PAYLOAD_TOO_LARGE")
    # No Content-Length (chunked): counted while it arrives.
    data = json.dumps(big).encode()

    def chunks():
        for i in range(0, len(data), 256):
            yield data[i : i + 256]

    r = client.post("/test/upload", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers
    assert_error(r, 413, "PAYLOAD_TOO_LARGE")
    assert client.post("/test/upload", json={"name": "x", "items": [1, 2]}).status_code == 200
    # FastAPI's own max_body_size on a route is honoured as its cap, with the same error body.
    assert_error(
        client.post("/test/native-cap", json={"name": "x", "items": list(range(3000))}), 413, "PAYLOAD_TOO_LARGE"
    )
    assert client.post("/test/native-cap", json={"name": "x", "items": list(range(100))}).status_code == 200
    # The default cap (MAX_BODY_BYTES, 1 MiB) covers every other route.
    huge = b'{"steps": 1, "pad": "' + b"a" * (1024 * 1024) + b'"}'
    assert_error(
        client.post("/v1/demo/sleep", content=huge, headers={"content-type": "application/json"}),
        413,
        "PAYLOAD_TOO_LARGE",
    )


def test_wrong_media_type_is_415(client):
    r = client.post("/v1/demo/sleep", content=b'{"steps": 1}', headers={"content-type": "text/plain"})
    assert_error(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    r = client.post("/test/retrieve", content=b"query=x", headers={"content-type": "application/x-www-form-urlencoded"})
    assert_error(r, 415, "UNSUPPORTED_MEDIA_TYPE")
    # +json media types are JSON.
    r = client.post(
        "/test/retrieve", content=b'{"query": "x"}', headers={"content-type": "application/merge-patch+json"}
    )
    assert r.status_code == 200, r.text


def test_unhandled_exception_is_500_without_leaks(client):
    r = client.get("/test/crash")
    body = assert_error(r, 500, "INTERNAL", retryable=True)
    assert SECRET not in r.text and "Traceback" not in r.text and "/srv" not in r.text
    assert body["error"]["message"] == "internal error"


def test_backing_service_failures_are_503_and_504_without_leaks(client):
    r = client.get("/test/redis-down")
    assert_error(r, 503, "UPSTREAM_UNAVAILABLE", retryable=True)
    assert SECRET not in r.text
    assert_error(client.get("/test/redis-slow"), 504, "UPSTREAM_TIMEOUT", retryable=True)


def test_success_bodies_carry_the_versions(client):
    from yana import POLICY_VERSION, __version__

    for path in ("/v1/jobs", "/v1/version", "/test/bare"):
        r = client.get(path)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["server_version"] == __version__ and body["policy_version"] == POLICY_VERSION, (path, body)
        assert int(r.headers["content-length"]) == len(r.content)
    # Error bodies stay exactly the seed's shape (no versions mixed in).
    assert "server_version" not in client.get("/v1/nothing").json()
