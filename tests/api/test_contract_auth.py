"""Bearer auth: on and off; health and version stay open; the MCP endpoint and Flower are closed
too when auth is on."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import httpx
import pytest

from api.contract.auth import FLOWER_AUTH_ENV, BearerAuth, bearer_token, flower_auth_env
from cli import processes
from tests.api.contract_support import assert_error, contract_server
from yana.settings import Settings

TOKENS = "tok-alpha-0123456789,tok-beta-9876543210"
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "contract-test", "version": "0"},
    },
}


@pytest.fixture(scope="module")
def locked(redis_url):
    with contract_server(
        REDIS_URL=redis_url,
        AUTH_ENABLED="true",
        AUTH_TOKENS=TOKENS,
        RATE_BURST="100000",
        RATE_LIMIT="1000/second",
        AUTH_FAIL_LIMIT="100000",  # these tests send many wrong tokens on purpose
    ) as c:
        yield c


@pytest.fixture(scope="module")
def open_api(redis_url):
    with contract_server(REDIS_URL=redis_url, AUTH_ENABLED="false", RATE_BURST="100000", RATE_LIMIT="1000/second") as c:
        yield c


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_protected_routes_answer_401_without_a_valid_token(locked):
    for headers in (
        {},
        bearer("wrong"),
        bearer("tok-alpha-012345678"),
        {"Authorization": "tok-alpha-0123456789"},
        {"Authorization": "Basic " + base64.b64encode(b"yana:tok-alpha-0123456789").decode()},
    ):
        r = locked.get("/v1/jobs", headers=headers)
        assert_error(r, 401, "UNAUTHORIZED", retryable=False)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "tok-alpha" not in r.text
    # Every kind of route: a job-creating POST, an unknown path, the OpenAPI document.
    assert_error(locked.post("/v1/demo/sleep", json={}), 401, "UNAUTHORIZED")
    assert_error(locked.get("/v1/does-not-exist"), 401, "UNAUTHORIZED")
    assert_error(locked.get("/openapi.json"), 401, "UNAUTHORIZED")


def test_every_configured_token_is_accepted(locked):
    for token in TOKENS.split(","):
        r = locked.get("/v1/jobs", headers=bearer(token))
        assert r.status_code == 200, r.text
    assert locked.get("/v1/jobs", headers={"Authorization": "bearer tok-beta-9876543210"}).status_code == 200
    assert_error(locked.get("/v1/does-not-exist", headers=bearer("tok-beta-9876543210")), 404, "NOT_FOUND")
    # The trailing-slash redirect is the router's answer too: only to a caller with a token.
    assert_error(locked.get("/v1/jobs/", follow_redirects=False), 401, "UNAUTHORIZED")
    r = locked.get("/v1/jobs/", headers=bearer("tok-beta-9876543210"), follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"].endswith("/v1/jobs"), r.status_code


def test_health_and_version_stay_open(locked):
    for path in ("/v1/version", "/v1/healthz", "/v1/health", "/healthcheck"):
        assert locked.get(path).status_code == 200, path


def test_auth_off_leaves_everything_open(open_api):
    assert open_api.get("/v1/jobs").status_code == 200
    assert open_api.get("/v1/jobs", headers=bearer("anything")).status_code == 200
    assert open_api.get("/openapi.json").status_code == 200


def _mcp_session(client: httpx.Client, headers: dict) -> dict:
    r = client.post("/mcp", json=INIT, headers={**MCP_HEADERS, **headers})
    assert r.status_code == 200, r.text
    session = {**MCP_HEADERS, **headers, "mcp-session-id": r.headers["mcp-session-id"]}
    client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
    return session


def test_mcp_endpoint_needs_the_token_and_its_tools_are_the_operations(locked):
    assert_error(locked.post("/mcp", json=INIT, headers=MCP_HEADERS), 401, "UNAUTHORIZED")
    assert_error(locked.post("/mcp", json=INIT, headers={**MCP_HEADERS, **bearer("nope")}), 401, "UNAUTHORIZED")
    session = _mcp_session(locked, bearer("tok-alpha-0123456789"))
    r = locked.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session)
    assert r.status_code == 200, r.text
    names = {t["name"] for t in r.json()["result"]["tools"]}
    assert {"version", "healthz", "get_job", "list_jobs", "demo_sleep"} <= names
    # A tool call goes through the HTTP contract with the caller's token and correlation ids.
    r = locked.post(
        "/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "list_jobs", "arguments": {"limit": 1}},
        },
        headers={**session, "X-Run-Id": "mcp-run-1"},
    )
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    assert not result.get("isError"), result
    assert '"server_version"' in result["content"][0]["text"]


def test_bearer_parsing_and_constant_time_check():
    assert bearer_token("Bearer abc") == "abc" and bearer_token("BEARER  abc ") == "abc"
    assert bearer_token("Basic abc") is None and bearer_token("Bearer") is None and bearer_token(None) is None
    auth = BearerAuth(Settings(auth_enabled=True, auth_tokens="a1,b2"))
    assert auth.valid("a1") and auth.valid("b2") and not auth.valid("a") and not auth.valid("a1b2")
    # Auth on with no token configured fails closed.
    assert not BearerAuth(Settings(auth_enabled=True, auth_tokens="")).valid("")


def test_flower_answers_401_without_a_valid_token(stack, tmp_path):
    settings = Settings(auth_enabled=True, auth_tokens=TOKENS)
    flower_env = flower_auth_env(settings)
    assert flower_auth_env(Settings(auth_enabled=False)) == {}
    env = {k: v for k, v in stack.env.items() if k != "FLOWER_UNAUTHENTICATED_API"}
    svc = processes.start_flower({**env, **flower_env}, processes.free_port(), tmp_path)
    try:
        processes.wait_healthy(svc, timeout_s=60)
        # The tokens are not on any process's command line (`ps` shows those to every user).
        cmdline = Path(f"/proc/{svc.proc.pid}/cmdline").read_bytes().decode(errors="replace")
        assert "--basic-auth" not in cmdline
        for token in TOKENS.split(","):
            assert token not in cmdline
        with httpx.Client(base_url=svc.url, timeout=10) as flower:
            # /metrics (task names, hostnames, runtimes) and /healthcheck too, not only the UI and API.
            for path in ("/", "/api/workers", "/metrics", "/healthcheck"):
                assert flower.get(path).status_code == 401, path
                assert flower.get(path, headers=bearer("tok-alpha-0123456789")).status_code == 401, path
                assert flower.get(path, auth=("yana", "wrong")).status_code == 401, path
                for token in TOKENS.split(","):
                    assert flower.get(path, auth=("yana", token)).status_code == 200, path
    finally:
        processes.stop([svc])


def test_flower_without_auth_keeps_its_monitoring_open(stack, tmp_path):
    env = {k: v for k, v in stack.env.items() if k not in ("FLOWER_UNAUTHENTICATED_API", FLOWER_AUTH_ENV)}
    svc = processes.start_flower(env, processes.free_port(), tmp_path)
    try:
        processes.wait_healthy(svc, timeout_s=60)
        with httpx.Client(base_url=svc.url, timeout=10) as flower:
            assert flower.get("/healthcheck").status_code == 200
            assert flower.get("/metrics").status_code == 200
    finally:
        processes.stop([svc])


def _from(address: str, base_url: str) -> httpx.Client:
    """A client whose requests come from another loopback address (its own failure budget)."""
    return httpx.Client(base_url=base_url, timeout=30, transport=httpx.HTTPTransport(local_address=address))


def test_wrong_tokens_are_slowed_down_per_address_across_api_processes(stack, redis_url):
    """Issue 26 defect 5: 120 guesses used to answer 120 x 401. After AUTH_FAIL_LIMIT failures in
    the window, the address gets 429 + Retry-After from every API process (the count is in
    Redis), even with a valid token; another address is not affected."""
    env = dict(AUTH_ENABLED="true", AUTH_TOKENS=TOKENS, AUTH_FAIL_LIMIT="5", AUTH_FAIL_WINDOW_S="30")
    other = stack.start_api(name="api-authfail", RATE_LIMIT="1000/second", RATE_BURST="1000", **env)
    with contract_server(REDIS_URL=redis_url, RATE_BURST="100000", RATE_LIMIT="1000/second", **env) as first:
        guesser = f"127.0.0.{50 + os.getpid() % 150}"
        with _from(guesser, str(first.base_url)) as a, _from(guesser, other.url) as b:
            for i in range(5):
                assert_error(a.get("/v1/jobs", headers=bearer(f"guess-{i}")), 401, "UNAUTHORIZED")
            for client in (a, b):  # the next one, on either process, is refused before it is checked
                r = client.get("/v1/jobs", headers=bearer("guess-next"))
                assert_error(r, 429, "RATE_LIMITED", retryable=True)
                assert 1 <= int(r.headers["retry-after"]) <= 30
                # A right token from that address is refused too: 429 must not tell a guesser it won.
                assert_error(client.get("/v1/jobs", headers=bearer("tok-alpha-0123456789")), 429, "RATE_LIMITED")
            assert b.get("/v1/health").status_code == 200  # public routes stay open
        with _from("127.0.0.2", other.url) as c:
            assert c.get("/v1/jobs", headers=bearer("tok-alpha-0123456789")).status_code == 200
