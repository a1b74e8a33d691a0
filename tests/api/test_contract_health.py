"""Health and version: real checks, 200 while serving (saying what is degraded), 503 only when
the service cannot serve."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.api.contract_support import assert_error, contract_server, free_port
from yana import INSTANCE_HEADER, NAME, POLICY_VERSION, __version__

FAST = {"RATE_BURST": "100000", "RATE_LIMIT": "1000/second"}


class _ModelsHandler(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint's GET /v1/models, as the real wire format has it."""

    def do_GET(self):  # noqa: N802
        if self.path != "/v1/models":
            self.send_error(404)
            return
        if self.headers.get("Authorization") != "Bearer sk-good":
            body = json.dumps({"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}).encode()
            self.send_response(401)
        else:
            body = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "t"}]}).encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def llm_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ModelsHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_version_has_the_seed_fields(stack):
    with contract_server(
        REDIS_URL=stack.redis_url,
        CHROMA_URL=stack.chroma_url,
        BUILD="b42",
        OPENAI_MODEL="tiny",
        YANA_INSTANCE="6f1c0a9e",
        **FAST,
    ) as c:
        body = c.get("/v1/version").json()
        # `yana up` tells its own API from another instance's on the same port by this header
        assert c.get("/v1/health").headers[INSTANCE_HEADER] == "6f1c0a9e"
    assert body == {
        "server_version": __version__,
        "policy_version": POLICY_VERSION,
        "name": NAME,
        "version": __version__,
        "model": "none",
        "build": "b42",
    }


def test_all_ok_with_every_dependency_up(stack, llm_url):
    with contract_server(
        REDIS_URL=stack.redis_url,
        CHROMA_URL=stack.chroma_url,
        OPENAI_BASE_URL=llm_url,
        OPENAI_API_KEY="sk-good",
        OPENAI_MODEL="tiny",
        **FAST,
    ) as c:
        first = c.get("/v1/healthz")
        assert first.status_code == 200, first.text
        h = first.json()
        assert h["status"] == "ok" and h["degraded"] == []
        assert h["llm_ok"] is True and h["rag_ok"] is True and h["policy_ok"] is True
        assert h["redis_ok"] is True and h["chroma_ok"] is True
        assert h["server_version"] == __version__ and h["policy_version"] == POLICY_VERSION
        second = c.get("/v1/healthz").json()
        assert second["uptime_s"] >= h["uptime_s"] > 0
        assert c.get("/v1/version").json()["model"] == "tiny"
        assert INSTANCE_HEADER not in c.get("/v1/health").headers  # no instance token without `yana up`
        assert c.get("/v1/health").json() == {
            "server_version": __version__,
            "policy_version": POLICY_VERSION,
            "status": "ok",
            "name": NAME,
            "version": __version__,
            "degraded": [],
        }
        hc = c.get("/healthcheck").json()
        assert hc["status"] == "ok" and hc["redis"] is True and hc["chroma"] is True
        # last_error names the last 5xx when every check passes.
        c.get("/test/crash")
        assert "INTERNAL" in c.get("/v1/healthz").json()["last_error"]


def test_degraded_dependencies_answer_200_and_say_what(stack, llm_url):
    dead = f"http://127.0.0.1:{free_port()}"
    with contract_server(
        REDIS_URL=stack.redis_url, CHROMA_URL=dead, OPENAI_BASE_URL=llm_url, OPENAI_API_KEY="sk-wrong", **FAST
    ) as c:
        r = c.get("/v1/healthz")
        assert r.status_code == 200, r.text
        h = r.json()
        assert h["status"] == "degraded"
        assert h["chroma_ok"] is False and h["rag_ok"] is False and h["llm_ok"] is False
        assert h["redis_ok"] is True and h["policy_ok"] is True
        assert set(h["degraded"]) == {"chroma", "rag", "llm"}
        assert "llm: HTTP 401" in h["last_error"] and "chroma" in h["last_error"]
        assert "sk-wrong" not in r.text
        assert c.get("/v1/health").json()["status"] == "degraded"
        hc = c.get("/healthcheck")
        assert hc.status_code == 200 and hc.json()["chroma"] is False and hc.json()["status"] == "degraded"


def test_without_an_llm_endpoint_llm_ok_is_null_not_a_degradation(stack):
    with contract_server(REDIS_URL=stack.redis_url, CHROMA_URL=stack.chroma_url, OPENAI_BASE_URL="", **FAST) as c:
        h = c.get("/v1/healthz").json()
    assert h["llm_ok"] is None and h["status"] == "ok"


def test_without_redis_the_service_cannot_serve_503(stack):
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    with contract_server(REDIS_URL=dead_redis, CHROMA_URL=stack.chroma_url, **FAST) as c:
        for path in ("/v1/healthz", "/v1/health", "/healthcheck"):
            body = assert_error(c.get(path), 503, "UPSTREAM_UNAVAILABLE", retryable=True)
            assert "redis" in body["error"]["message"]
            assert "127.0.0.1" not in body["error"]["message"]
        assert c.get("/v1/version").status_code == 200
        # A route that needs Redis says so in the error body, not with a stack trace.
        r = c.get("/v1/jobs")
        assert_error(r, 503, "UPSTREAM_UNAVAILABLE", retryable=True)
