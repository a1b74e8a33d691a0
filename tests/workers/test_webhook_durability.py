"""Webhook exactly-once across a Redis kill (issue 26, defect 2), against a real redis-server
started the way `yana up` starts it and killed with SIGKILL.

The receiver kills Redis the moment a delivery reaches it (before it answers 200), so the
dispatcher's delivery record meets a dead server: the worst instant of the issue's fault (the
record written just before kill -9 and lost, the claimed schedule entry surviving). Redis comes
back from its append-only file; the entry's lease then runs out and the entry is tried again. The
receiver must have got the webhook once."""

from __future__ import annotations

import signal
import threading
import time

import redis

from cli import processes
from pipelines.runtime.jobs import WEBHOOKS_DUE, JobStore
from pipelines.runtime.webhooks import WebhookDispatcher, durable_barrier
from tests.stack import wait_for
from tests.webhook_receiver import Receiver

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


class KillableRedis:
    def __init__(self, tmp_path):
        self.data, self.logs, self.port = tmp_path / "data", tmp_path / "logs", processes.free_port()
        self.svc = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.svc = processes.start_redis(self.data, self.port, self.logs, processes.child_env())
        wait_for(self.svc.healthy, timeout_s=30, what="redis up")

    def kill9(self) -> None:
        self.svc.proc.send_signal(signal.SIGKILL)
        self.svc.proc.wait(10)

    def stop(self) -> None:
        if self.svc.proc.poll() is None:
            self.kill9()


def _dispatcher(r) -> WebhookDispatcher:
    return WebhookDispatcher(
        r,
        JobStore(r),
        secret=SECRET,
        allow=["127.0.0.0/8"],
        timeout_s=5,
        backoff_base_s=0.1,
        backoff_max_s=0.1,
        max_attempts=5,
        lease_s=1,
        record_retry_s=60,
    )


def test_a_delivery_recorded_while_redis_is_killed_is_not_sent_again(tmp_path):
    srv = KillableRedis(tmp_path)
    r = redis.Redis.from_url(srv.url, decode_responses=True, socket_timeout=5)
    rx = Receiver(SECRET)
    try:
        store = JobStore(r)
        job = store.create("demo.sleep", {}, callback_url=rx.url)
        r.zadd(WEBHOOKS_DUE, {job["id"]: 0})
        hooks = _dispatcher(r)
        assert hooks.claim_due() == [job["id"]]

        killed = threading.Event()
        original = rx.server.RequestHandlerClass.do_POST

        def do_post(handler):  # Redis dies between the receiver getting it and the dispatcher's record
            if not killed.is_set():
                srv.kill9()
                killed.set()
            original(handler)

        rx.server.RequestHandlerClass.do_POST = do_post

        def restart():
            killed.wait(30)
            time.sleep(1.0)
            srv.start()

        t = threading.Thread(target=restart, daemon=True)
        t.start()
        try:
            first = hooks.deliver(job["id"])
        except redis.RedisError:
            first = None  # the old dispatcher: the record is lost with the server
        t.join(60)
        assert killed.is_set() and len(rx.deliveries) == 1

        # Redis came back from its AOF. Kill it once more at once (nothing of the record may
        # depend on the last second), then let the claim's lease run out and retry the entry.
        srv.kill9()
        srv.start()
        r2 = redis.Redis.from_url(srv.url, decode_responses=True, socket_timeout=5)
        time.sleep(1.2)
        again = _dispatcher(r2)
        for job_id in again.claim_due() or [job["id"]]:
            again.deliver(job_id)
        assert len(rx.deliveries) == 1, f"the webhook went out {len(rx.deliveries)} times (first attempt: {first})"
        hook = JobStore(r2).get(job["id"])["webhook"]
        assert hook["delivered"] is True and [a["status"] for a in hook["attempts"]] == [200]
        assert r2.zscore(WEBHOOKS_DUE, job["id"]) is None
    finally:
        rx.close()
        srv.stop()


def test_yana_up_redis_makes_every_write_durable(tmp_path):
    srv = KillableRedis(tmp_path)
    try:
        r = redis.Redis.from_url(srv.url, decode_responses=True)
        assert r.config_get("appendonly")["appendonly"] == "yes"
        assert durable_barrier(r) is True  # WAITAOF (7.2+) or appendfsync always
    finally:
        srv.stop()


def test_a_second_dispatcher_does_not_send_while_one_is_sending(tmp_path):
    """The claim's lease is short (a lost deliver message comes back within seconds); a slow
    delivery still in flight when it runs out is not sent a second time beside it."""
    srv = KillableRedis(tmp_path)
    r = redis.Redis.from_url(srv.url, decode_responses=True, socket_timeout=5)
    rx = Receiver(SECRET)
    try:
        job = JobStore(r).create("demo.sleep", {}, callback_url=rx.url)
        original = rx.server.RequestHandlerClass.do_POST

        def slow(handler):
            time.sleep(2.0)
            original(handler)

        rx.server.RequestHandlerClass.do_POST = slow
        a, b = _dispatcher(r), _dispatcher(r)
        results: list = []
        t = threading.Thread(target=lambda: results.append(a.deliver(job["id"])))
        t.start()
        time.sleep(0.5)
        assert b.deliver(job["id"]) is False  # a is sending: b does not
        t.join(30)
        assert results == [True]
        assert b.deliver(job["id"]) is True  # recorded: nothing more goes out
        assert len(rx.deliveries) == 1
    finally:
        rx.close()
        srv.stop()
