"""Signed webhook delivery (Standard Webhooks) to SSRF-checked targets, retried from a schedule in Redis.

Schedule: zset `yana:webhooks:due` (job id -> due time, ms). A job entering a terminal state is
added by the job store's transition script. A dispatcher claims due entries by pushing their due
time forward by a lease (so a crashed sender's entry comes back), sends, and on failure sets the
next due time by exponential backoff; on success or after the last attempt the entry is removed.
Each attempt is recorded on the job record.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import orjson
import redis
from standardwebhooks.webhooks import Webhook

from pipelines.runtime.jobs import WEBHOOKS_DUE, JobStore, now_iso, public_view
from pipelines.runtime.safe_http import post_pinned, resolve_target
from yana.errors import YanaError, describe

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


class WebhookDispatcher:
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
        lease_s: float = 120.0,
    ):
        self.r, self.store = r, store
        self.secret, self.allow, self.timeout_s = secret, allow, timeout_s
        self.base, self.cap, self.max_attempts = backoff_base_s, backoff_max_s, max_attempts
        self.lease_ms = int(lease_s * 1000)
        self._claim = r.register_script(_CLAIM_DUE)

    def claim_due(self, limit: int = 50) -> list[str]:
        now = int(time.time() * 1000)
        return list(self._claim(keys=[WEBHOOKS_DUE], args=[now, now + self.lease_ms, limit]))

    def deliver(self, job_id: str) -> bool:
        """One delivery attempt for a claimed job. Returns True when delivered."""
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
            self.store.append_webhook_attempt(job_id, record, delivered=True)
            self.r.zrem(WEBHOOKS_DUE, job_id)
            return True
        if attempt_no >= self.max_attempts:
            record["final"] = True
            self.store.append_webhook_attempt(job_id, record, delivered=False)
            self.r.zrem(WEBHOOKS_DUE, job_id)
            return False
        delay = backoff_s(attempt_no, self.base, self.cap)
        record["next_attempt_in_s"] = delay
        self.store.append_webhook_attempt(job_id, record)
        self.r.zadd(WEBHOOKS_DUE, {job_id: int((time.time() + delay) * 1000)})
        return False
