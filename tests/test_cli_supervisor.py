"""The supervisor's rules without starting the system: restart backoff and giving up, port choice,
health checks that only our own servers can pass."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cli.processes import SERVER_PORTS_FROM, RestartPolicy, ServerPort, _ephemeral_range, free_port, http_ok, port_for
from yana import INSTANCE_HEADER


def test_restart_backoff_doubles_then_gives_up_within_the_window():
    p = RestartPolicy(max_crashes=4, window_s=60, base_s=0.5, max_delay_s=1.5)
    assert [p.crashed(t) for t in (0, 1, 2)] == [0.5, 1.0, 1.5]
    assert p.crashed(3) is None  # the fourth crash within a minute


def test_crashes_outside_the_window_are_forgotten():
    p = RestartPolicy(max_crashes=3, window_s=10, base_s=1, max_delay_s=30)
    assert p.crashed(0) == 1 and p.crashed(1) == 2
    assert p.crashed(100) == 1  # long after: a fresh start, not a give-up


def test_explicit_port_must_be_free_default_falls_back():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"API port {port} is taken"):
            port_for(port, 8000, "API")
        other = port_for(None, port, "API")
        assert other != port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert port_for(free, 8000, "API") == free


def test_a_default_port_moves_when_taken_by_the_time_the_server_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    default, asked = ServerPort(None, port, "API"), ServerPort(port, 8000, "API")
    assert default.take() == port and asked.take() == port
    with socket.socket() as taken:  # another `yana up` took it meanwhile
        taken.bind(("127.0.0.1", port))
        taken.listen()
        moved = default.take()
        assert moved != port and default.take() == moved
        assert asked.take() == port  # asked for: kept, and that start fails loudly


def test_server_ports_are_drawn_below_the_ephemeral_range_whatever_random_was_seeded_with():
    """Outgoing connections take their source ports from the ephemeral range, so a port drawn there
    could be taken before our server binds it; and two processes that seeded `random` alike must
    not draw the same ports."""
    import random

    low = _ephemeral_range()[0]
    if low - SERVER_PORTS_FROM < 1000:
        pytest.skip(f"this machine's ephemeral range starts at {low}: no room below it")
    drawn = []
    for _ in range(2):
        random.seed(7)
        drawn.append([free_port() for _ in range(5)])
    assert all(SERVER_PORTS_FROM <= p < low for p in drawn[0] + drawn[1]), drawn
    assert drawn[0] != drawn[1]
    port = drawn[0][0]
    with socket.socket() as s:  # and a server can bind it
        s.bind(("127.0.0.1", port))


class _Foreign(BaseHTTPRequestHandler):
    """Any HTTP server on the port: 200 to everything, with the instance header it was given."""

    instance: str | None = None

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        if self.instance:
            self.send_header(INSTANCE_HEADER, self.instance)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(("answers", "ours"), [(None, False), ("other-up", False), ("ours-123", True)])
def test_a_health_check_with_an_instance_passes_only_for_that_instance(answers, ours):
    handler = type("Handler", (_Foreign,), {"instance": answers})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/health"
        assert http_ok(url, "ours-123")() is ours
        assert http_ok(url)() is True  # without an instance any answer under 500 counts
    finally:
        server.shutdown()
        server.server_close()
