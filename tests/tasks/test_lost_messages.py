"""The reconciler sends again the message of a queued job that no broker message names (lost
with a Redis master that died before replicating it), and never the message of one that is
waiting in a queue or held by a worker."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis

from pipelines.jobs import JobStore
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


def test_broker_mentions_sees_waiting_and_taken_messages_only(other_db):
    from kombu import Connection

    from workers.celery_app import app

    waiting, taken, lost = (uuid.uuid4().hex for _ in range(3))
    url = other_db.connection_pool.connection_kwargs
    with Connection(f"redis://{url['host']}:{url['port']}/1") as conn:
        for job_id in (taken, waiting):  # as tasks.registry.send sends them (the oldest is taken first)
            app.send_task("yana.demo.sleep", kwargs={"job_id": job_id}, queue="default", connection=conn)
    # A worker takes `taken`: kombu moves it to its unacked hash (message, exchange, routing key).
    raw = other_db.rpop("default")
    assert taken in raw
    other_db.hset("unacked", "delivery-tag-1", json.dumps([json.loads(raw), "", "default"]))
    assert other_db.llen("default") == 1
    assert broker_mentions(other_db, {waiting, taken, lost}, max_messages=100) == {waiting, taken}
    assert broker_mentions(other_db, {lost}, max_messages=100) == set()
    assert broker_mentions(other_db, {waiting}, max_messages=1) is None, "more messages than it may read"


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
