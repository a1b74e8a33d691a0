"""Every store call is bounded: a paused (SIGSTOP) Redis or Chroma raises after the configured
timeout instead of hanging the request or job that called it. Private stores: pausing the
shared ones would stall other tests."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import redis

from tests.stack import start_stack
from yana import clients
from yana.settings import Settings


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    s = start_stack(tmp_path_factory.mktemp("paused-stores"), worker=False, api=False)
    yield s
    for svc in s.services:
        if svc.alive():
            os.killpg(svc.proc.pid, signal.SIGCONT)
    s.stop()


def _paused(svc):
    """SIGSTOP the service's process group, and wait until every thread of it has stopped: kill()
    returns before the signal is taken, and on a loaded machine a server thread could still answer
    the call the test then makes (a CI unit-tier run saw Chroma's heartbeat answered)."""
    os.killpg(svc.proc.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while not _all_stopped(svc.proc.pid):
        assert time.monotonic() < deadline, f"{svc.name} did not stop"
        time.sleep(0.02)
    return svc


def _all_stopped(pgid: int) -> bool:
    """Every thread of every process in `pgid` is stopped (state T in /proc)."""
    found = False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                found = True
                if Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                    return False
        except (OSError, ValueError, IndexError):
            continue  # the process or thread ended meanwhile
    return found


def test_paused_redis_times_out(stores):
    settings = Settings(redis_url=stores.redis_url, redis_timeout_s=0.5)
    r = clients.get_redis(settings)
    assert r.ping()
    svc = _paused(stores.get("redis"))
    try:
        t = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            r.get("anything")
        assert time.monotonic() - t < 5
    finally:
        os.killpg(svc.proc.pid, signal.SIGCONT)
    assert r.ping()


def test_paused_chroma_times_out(stores):
    import httpx

    settings = Settings(chroma_url=stores.chroma_url, chroma_timeout_s=1.0)
    chroma = clients.get_chroma(settings)
    assert chroma.heartbeat()
    svc = _paused(stores.get("chroma"))
    try:
        t = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            chroma.heartbeat()
        assert time.monotonic() - t < 8
    finally:
        os.killpg(svc.proc.pid, signal.SIGCONT)
    assert chroma.heartbeat()
