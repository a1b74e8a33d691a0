"""The supervisor's rules without starting the system: restart backoff and giving up, port choice."""

from __future__ import annotations

import socket

import pytest

from cli.processes import RestartPolicy, port_for


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
