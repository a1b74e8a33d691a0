"""Signed webhook delivery (Standard Webhooks) to SSRF-checked targets, retried from a schedule in Redis.

Schedule: zset `yana:webhooks:due` (job id -> due time, ms). A job entering a terminal state is
added by the job store's transition script. A dispatcher claims due entries by pushing their due
time forward by a lease (so a crashed sender's entry comes back), sends, and on failure sets the
next due time by exponential backoff; on success or after the last attempt the entry is removed.
Each attempt is recorded on the job record in the same transaction as the schedule change, and a
delivery's record is made durable before its entry could be retried (WebhookDispatcher).
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime

import httpx
import orjson
import redis
from standardwebhooks.webhooks import Webhook

from pipelines.runtime.jobs import WEBHOOK_SENDING, WEBHOOKS_DUE, JobStore, now_iso, public_view
from pipelines.runtime.safe_http import post_pinned, resolve_target
from yana.errors import YanaError, describe

log = logging.getLogger("yana.webhooks")

_CLAIM_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], id) end
return due
"""


# --- signing ---------------------------------------------------------------------------------


def sign(secret: str, msg_id: str, ts: datetime, payload: str) -> str:
    return Webhook(secret).sign(msg_id, ts, payload)


def webhook_id(job_id: str) -> str:
    return f"msg_{job_id}"


def build_delivery(job: dict, secret: str) -> tuple[bytes, dict]:
    payload = {"type": f"job.{job['status']}", "timestamp": now_iso(), "data": public_view(job)}
    body = orjson.dumps(payload)
    ts = datetime.now(UTC).replace(microsecond=0)
    msg_id = webhook_id(job["id"])
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(ts.timestamp())),
        "webhook-signature": sign(secret, msg_id, ts, body.decode()),
        "x-run-id": job.get("run_id") or "",
        "x-trace-id": job.get("trace_id") or "",
        "user-agent": "yana-webhooks/1",
    }
    if job.get("traceparent"):
        headers["traceparent"] = job["traceparent"]
    return body, headers


# --- schedule --------------------------------------------------------------------------------


def backoff_s(attempt: int, base: float, cap: float) -> float:
    """Delay before attempt `attempt + 1` (attempt counts from 1)."""
    return min(cap, base * (2 ** (attempt - 1)))


def schedule_span_s(max_attempts: int, base: float, cap: float) -> float:
    return sum(backoff_s(a, base, cap) for a in range(1, max_attempts))


_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class WebhookDispatcher:
    """Claims due entries and delivers them, one attempt per call.

    Exactly once, as far as it can be: a delivery is recorded, and its schedule entry removed, in
    one transaction right after the receiver's 2xx; when Redis is unreachable at that moment
    (killed, restarting) the record is written again until it is back (the dispatcher knows it
    delivered; nobody else can claim the entry meanwhile), and the write is made durable before
    the entry could be retried: WAITAOF where the server has it (7.2+), else Redis must run with
    `appendfsync always` (`yana up` starts it so). A second dispatcher never sends while one is
    sending (a lock that outlives the HTTP timeout), and a claim's lease is short (a claimed
    entry whose message died with a worker main comes back within `lease_s`). What is left is the
    instant between the receiver's answer and the record: a crash of this process there sends the
    same webhook-id again, which the receiver drops (Standard Webhooks)."""

    def __init__(
        self,
        r: redis.Redis,
        store: JobStore,
        *,
        secret: str,
        allow: list[str],
        timeout_s: float,
        backoff_base_s: float,
        backoff_max_s: float,
        max_attempts: int,
        lease_s: float | None = None,
        record_retry_s: float = 120.0,
    ):
        self.r, self.store = r, store
        self.secret, self.allow, self.timeout_s = secret, allow, timeout_s
        self.base, self.cap, self.max_attempts = backoff_base_s, backoff_max_s, max_attempts
        # Longer than one attempt (the HTTP timeout) plus a margin, short enough that an entry
        # whose deliver message died with a worker main is delivered within ~30 s of its job.
        self.lease_ms = int((lease_s if lease_s is not None else max(15.0, timeout_s + 10.0)) * 1000)
        self.sending_ms = int((timeout_s + 5.0) * 1000)
        self.record_retry_s = record_retry_s
        self._claim = r.register_script(_CLAIM_DUE)
        self._release = r.register_script(_RELEASE)

    def claim_due(self, limit: int = 50) -> list[str]:
        now = int(time.time() * 1000)
        return list(self._claim(keys=[WEBHOOKS_DUE], args=[now, now + self.lease_ms, limit]))

    def deliver(self, job_id: str) -> bool:
        """One delivery attempt for a claimed job. Returns True when delivered (now or before)."""
        token = uuid.uuid4().hex
        lock = WEBHOOK_SENDING.format(job_id)
        if not self.r.set(lock, token, nx=True, px=self.sending_ms):
            return False  # another dispatcher is sending it this moment; its record decides
        try:
            return self._deliver(job_id)
        finally:
            try:
                self._release(keys=[lock], args=[token])
            except redis.RedisError:
                pass  # it expires by itself

    def _deliver(self, job_id: str) -> bool:
        job = self.store.get(job_id)
        if job is None or not job.get("callback_url"):
            self.r.zrem(WEBHOOKS_DUE, job_id)
            return False
        hook = job.get("webhook") or {"attempts": []}
        if hook.get("delivered"):
            self.r.zrem(WEBHOOKS_DUE, job_id)
            return True
        attempt_no = len(hook.get("attempts", [])) + 1
        started = time.perf_counter()
        record: dict = {"attempt": attempt_no, "at": now_iso(), "webhook_id": webhook_id(job_id)}
        ok = False
        try:
            target = resolve_target(job["callback_url"], self.allow)
            body, headers = build_delivery(job, self.secret)
            resp = post_pinned(target, body, headers, self.timeout_s)
            record["status"] = resp.status_code
            ok = 200 <= resp.status_code < 300
        except YanaError as exc:
            record["error"] = exc.message
        except httpx.HTTPError as exc:
            record["error"] = describe(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. an unusable secret: recorded, retried, bounded
            record["error"] = describe(exc)
        record["duration_ms"] = round((time.perf_counter() - started) * 1000, 1)
        if ok:
            self._record_delivered(job_id, record)
            return True
        if attempt_no >= self.max_attempts:
            record["final"] = True
            self.store.append_webhook_attempt(job_id, record, delivered=False)
            return False
        delay = backoff_s(attempt_no, self.base, self.cap)
        record["next_attempt_in_s"] = delay
        self.store.append_webhook_attempt(job_id, record, next_due_ms=int((time.time() + delay) * 1000))
        return False

    def _record_delivered(self, job_id: str, record: dict) -> None:
        """The receiver has it: record that (and drop the schedule entry) whatever Redis is doing
        now, then make the record durable before anyone could retry the entry."""
        deadline = time.monotonic() + self.record_retry_s
        pause = 0.1
        while True:
            try:
                if ((self.store.get(job_id) or {}).get("webhook") or {}).get("delivered"):
                    self.r.zrem(WEBHOOKS_DUE, job_id)  # a write of ours that did land before an error
                else:
                    self.store.append_webhook_attempt(job_id, record, delivered=True)
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    log.error("webhook %s delivered but not recorded: Redis unreachable", webhook_id(job_id))
                    raise
                time.sleep(pause)
                pause = min(1.0, pause * 2)
        durable_barrier(self.r)


_waitaof: dict[int, bool] = {}


def durable_barrier(r: redis.Redis, timeout_ms: int = 2000) -> bool:
    """Wait until this connection's writes are in the append-only file on disk (WAITAOF, Redis
    7.2+). Older servers: True when they fsync every write (`appendfsync always`), else a warning
    (once) and False: a crash can then lose the last second, and a delivery with it."""
    key = id(r.connection_pool)
    if _waitaof.get(key, True):
        try:
            local, _replicas = r.execute_command("WAITAOF", 1, 0, timeout_ms)
            _waitaof[key] = True
            return int(local) >= 1
        except redis.ResponseError:
            _waitaof[key] = False  # unknown command (< 7.2), or AOF off
        except redis.RedisError:
            return False
    try:
        always = (r.config_get("appendfsync") or {}).get("appendfsync") == "always"
    except redis.RedisError:
        always = False
    if not always and not _warned:
        _warned.append(True)
        log.warning(
            "Redis neither has WAITAOF nor fsyncs every write (appendfsync always): a Redis crash "
            "can lose the last second of delivery records and a webhook be sent twice (same webhook-id)"
        )
    return always


_warned: list[bool] = []
