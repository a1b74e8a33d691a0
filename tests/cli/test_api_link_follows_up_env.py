"""A data command whose API URL came from DATA_DIR/up.env follows `yana up` when its API restarts
on another port (another server took the default one) and up.env is rewritten; a URL given
explicitly is never switched. The API is a real HTTP server; the old URL is a closed port."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli.api_link import ApiLink, ApiUnreachable
from cli.processes import free_port


class _Version(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        raw = json.dumps({"name": "yana"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def moved(tmp_path, monkeypatch):
    """(old URL, new URL, rewrite()): up.env names the old one; rewrite() names the new one."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Version)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    old, new = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{server.server_address[1]}"
    up_env = tmp_path / "up.env"
    up_env.write_text(f"REDIS_URL=redis://127.0.0.1:1/0\nYANA_API_URL={old}\nDATA_DIR={tmp_path}\n")
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    monkeypatch.setenv("YANA_API_URL", old)  # as cli.main loads up.env into the environment
    yield old, new, lambda: up_env.write_text(up_env.read_text().replace(old, new))
    server.shutdown()
    server.server_close()


def test_a_url_from_up_env_follows_it_when_yana_up_rewrites_it(moved):
    old, new, rewrite = moved
    link = ApiLink(None, None, reconnect_s=20)
    said: list[str] = []
    link.say = said.append
    assert link.url == old and link.source.endswith("(written by `yana up`)")
    threading.Timer(0.8, rewrite).start()  # the API restarts on another port a moment later
    t0 = time.monotonic()
    r = link.request("GET", "/v1/version")
    assert r.status_code == 200 and r.json() == {"name": "yana"}
    assert link.url == new and time.monotonic() - t0 < 10
    assert any("moved to" in s and new in s for s in said), said
    assert link.request("GET", "/v1/version").status_code == 200  # and stays there
    link.close()


def test_an_explicit_url_is_never_switched(moved):
    old, _new, rewrite = moved
    rewrite()
    link = ApiLink(old, None, reconnect_s=1.5)
    link.say = lambda _s: None
    with pytest.raises(ApiUnreachable):
        link.request("GET", "/v1/version")
    assert link.url == old
    link.close()
