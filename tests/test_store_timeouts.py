"""Every store call is bounded: a paused (SIGSTOP) Redis or Chroma raises after the configured
timeout instead of hanging the request or job that called it. Private stores: pausing the
shared ones would stall other tests."""

from __future__ import annotations

import os
import signal
import time

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
    os.killpg(svc.proc.pid, signal.SIGSTOP)
    return svc


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
