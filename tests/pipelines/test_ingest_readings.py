"""The per-image reading lock of pipelines.ingest.readings against real Redis: a reader that dies
mid-read (kill -9 of a pool process) holds the others up for a lease, not for the read timeout.

In the fault run (bench/fault_run.py, 2026-11-26) a pool process killed while reading left its
lock for the read timeout + 5 s (35 s): the batch's read-ahead and the job's re-run both waited it
out, the whole pool of 2 stalled, and a webhook waited 26 s behind them."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest
import redis

from pipelines.ingest import readings
from pipelines.ingest.keys import READING_KEY, READING_LOCK_KEY
from yana.settings import Settings

SHA1 = "f" * 40


@pytest.fixture()
def r(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.delete(READING_KEY.format(sha1=SHA1), READING_LOCK_KEY.format(sha1=SHA1))
    yield client
    client.delete(READING_KEY.format(sha1=SHA1), READING_LOCK_KEY.format(sha1=SHA1))
    client.close()


def _slow_reader(redis_url: str) -> None:
    """A reader that takes the lock and never finishes (killed by the test)."""

    def never_done(r, sha1, image, s):
        time.sleep(600)
        return None, None

    readings._read = never_done  # this process only
    readings.read_label(redis.Redis.from_url(redis_url), SHA1, None, Settings(ocr_timeout_s=30))


def test_a_dead_readers_lock_holds_the_next_reader_up_for_a_lease_only(r, redis_url, monkeypatch):
    lock = READING_LOCK_KEY.format(sha1=SHA1)
    holder = multiprocessing.get_context("spawn").Process(target=_slow_reader, args=(redis_url,))
    holder.start()
    try:
        deadline = time.monotonic() + 60
        while not r.exists(lock):
            assert time.monotonic() < deadline, "the holder never took the lock"
            assert holder.is_alive(), "the holder died before taking the lock"
            time.sleep(0.05)
        time.sleep(readings.LEASE_S * 1.5)  # a live holder keeps its lock past one lease
        assert r.exists(lock), "the lock lapsed while its holder was reading"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)

    reads: list[str] = []

    def read_here(r_, sha1, image, s):
        reads.append(sha1)
        out = {"engine": "fake", "text": "読めた", "lines": [], "fields": {}, "label_features": []}
        readings.store(r_, sha1, out)
        return out, None

    monkeypatch.setattr(readings, "_read", read_here)
    t0 = time.monotonic()
    reading, warning = readings.read_label(r, SHA1, None, Settings(ocr_timeout_s=30))
    waited = time.monotonic() - t0
    assert reading is not None and reading["text"] == "読めた" and warning is None
    assert reads == [SHA1]
    assert waited <= readings.LEASE_S + 2, f"waited {waited:.1f}s for a dead reader's lock"
    assert not r.exists(lock), "the lock was left behind"


def test_a_live_readers_lock_is_waited_for_and_its_reading_taken(r, monkeypatch):
    """The point of the lock stays: a second reader of the same bytes takes the first one's
    reading instead of reading again."""
    lock = READING_LOCK_KEY.format(sha1=SHA1)
    r.set(lock, "someone-else", ex=readings.LEASE_S)

    def read_here(r_, sha1, image, s):
        raise AssertionError("read again while another reader held the lock")

    monkeypatch.setattr(readings, "_read", read_here)
    out = {"engine": "fake", "text": "先に読んだ", "lines": [], "fields": {}, "label_features": []}

    import threading

    def the_other_reader_finishes():
        time.sleep(0.5)
        readings.store(r, SHA1, out)
        r.delete(lock)

    threading.Thread(target=the_other_reader_finishes, daemon=True).start()
    reading, warning = readings.read_label(r, SHA1, None, Settings(ocr_timeout_s=30))
    assert reading == out and warning is None
