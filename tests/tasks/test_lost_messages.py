"""The reconciler sends again the message of a queued job that no live broker message names
(lost with a Redis master that died before replicating it, or taken by a worker whose broker
connection died with the master), and never the message of one that is waiting in a queue, just
taken by a worker, or waiting out a retry's countdown."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis

from pipelines.runtime.jobs import JobStore
from tasks.maintenance import broker_mentions
from tests.stack import wait_job


@pytest.fixture()
def other_db(redis_url):
    """Database 1 of the stack's Redis: a broker no worker consumes, for messages that must stay."""
    r = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/1", decode_responses=True)
    r.flushdb()
    yield r
    r.flushdb()
    r.close()


def test_broker_mentions_names_waiting_and_freshly_taken_messages_only(other_db):
    from kombu import Connection

    from workers.celery_app import app

    waiting, fresh, stale, retry, lost = (uuid.uuid4().hex for _ in range(5))
    url = other_db.connection_pool.connection_kwargs
    eta = datetime.now(UTC) + timedelta(seconds=60)
    with Connection(f"redis://{url['host']}:{url['port']}/1") as conn:
        for job_id in (fresh, stale, retry, waiting):  # as tasks.registry.send sends them
            options = {"eta": eta} if job_id == retry else {}
            app.send_task("yana.demo.sleep", kwargs={"job_id": job_id}, queue="default", connection=conn, **options)
    now = time.time()
    # A worker takes three (kombu moves each to its unacked hash, with when it took it): `fresh`
    # just now; `stale` 60 s ago, its worker's connection gone with the master; `retry` 60 s ago
    # too, but it waits for its ETA, a minute from now.
    for job_id, taken_at in ((fresh, now), (stale, now - 60), (retry, now - 60)):
        raw = other_db.rpop("default")
        assert job_id in raw, "the oldest message is taken first"
        other_db.hset("unacked", f"tag-{job_id}", json.dumps([json.loads(raw), "", "default"]))
        other_db.zadd("unacked_index", {f"tag-{job_id}": taken_at})
    assert other_db.llen("default") == 1
    every = {waiting, fresh, stale, retry, lost}
    assert broker_mentions(other_db, every, max_messages=100, stale_before=now - 15) == {waiting, fresh, retry}
    assert broker_mentions(other_db, every, max_messages=100, stale_before=now - 120) == every - {lost}
    assert broker_mentions(other_db, {lost}, max_messages=100, stale_before=now - 15) == set()
    assert broker_mentions(other_db, {waiting}, max_messages=3, stale_before=now) is None, "more than it may read"


def test_a_queued_job_whose_message_was_lost_runs_once(api, redis_client):
    """The record is written and its message never reaches the broker (what a failover before
    replication leaves): the reconciler sends it after LOST_MESSAGE_AFTER_S (3 s in tests)."""
    store = JobStore(redis_client)
    job = store.create("demo.sleep", {"steps": 1, "step_s": 0}, queue="default")
    t = time.monotonic()
    done = wait_job(api, job["id"], timeout_s=60)
    assert done["status"] == "succeeded", done
    assert done["attempts"] == 1, "one run: the message was sent again once"
    assert time.monotonic() - t < 30
