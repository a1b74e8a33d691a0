"""The CLI's ApiLink on the API's own time limit (408 REQUEST_TIMEOUT, retryable in the contract):
on a starved machine `yana ingest` sends the batch again with the same Idempotency-Key within its
reconnect window instead of reporting the batch failed; a POST without a key is never sent twice.
The server is a real HTTP server answering with the contract's unified error body."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli.api_link import ApiLink

TIMEOUT_BODY = {
    "error": {"code": "REQUEST_TIMEOUT", "message": "request exceeded its 30 s time limit", "retryable": True}
}


class _Slow(BaseHTTPRequestHandler):
    """Answers 408 to the first `server.slow` requests, then 202 (POST) or 200 (GET)."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        srv = self.server
        with srv.lock:
            srv.seen.append((self.command, self.headers.get("idempotency-key")))
            late = len(srv.seen) <= srv.slow
        status, body = (408, TIMEOUT_BODY) if late else (202 if self.command == "POST" else 200, {"job_id": "j1"})
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def slow_api():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    srv.lock, srv.seen, srv.slow = threading.Lock(), [], 2
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def test_a_keyed_post_is_sent_again_after_408(slow_api):
    said: list[str] = []
    with ApiLink(_url(slow_api), None, timeout_s=10, reconnect_s=30) as link:
        link.say = said.append
        r = link.request("POST", "/v1/ingest", data={"category": "sake"}, headers={"Idempotency-Key": "k1"})
        assert r.status_code == 202 and link.last_retried()
    assert slow_api.seen == [("POST", "k1")] * 3  # the same key each time: the server dedups a resend
    assert len(said) == 1 and "408" in said[0]  # said once, not on every resend
    assert link.outages == 0  # slow is not down


def test_a_get_is_sent_again_after_408(slow_api):
    with ApiLink(_url(slow_api), None, timeout_s=10, reconnect_s=30) as link:
        link.say = lambda *_: None
        assert link.request("GET", "/v1/jobs/j1").status_code == 200
    assert [m for m, _ in slow_api.seen] == ["GET"] * 3


def test_a_post_without_a_key_is_never_sent_twice(slow_api):
    with ApiLink(_url(slow_api), None, timeout_s=10, reconnect_s=30) as link:
        r = link.request("POST", "/v1/reembed", json={"model": "m"})
    assert r.status_code == 408 and r.json()["error"]["code"] == "REQUEST_TIMEOUT"
    assert slow_api.seen == [("POST", None)]


def test_408_is_returned_once_the_window_has_passed(slow_api):
    slow_api.slow = 10**6  # never fast enough
    with ApiLink(_url(slow_api), None, timeout_s=10, reconnect_s=1) as link:
        link.say = lambda *_: None
        r = link.request("POST", "/v1/ingest", headers={"Idempotency-Key": "k2"})
    assert r.status_code == 408  # the caller reports it as the API's answer, with its body
    assert 2 <= len(slow_api.seen) <= 4  # resent with back-off (0.5 s, 1 s) inside the 1 s window


def test_no_window_no_resend(slow_api):
    with ApiLink(_url(slow_api), None, timeout_s=10) as link:  # reconnect_s 0: the caller decides
        assert link.request("GET", "/v1/jobs/j1").status_code == 408
    assert len(slow_api.seen) == 1
