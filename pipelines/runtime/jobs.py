"""Job records in Redis: the durable, client-visible state of every job.

A record outlives Celery's own result. Every status change is a compare-and-set done by a Lua
script, so an API process cancelling, a worker finishing and a reconciler re-enqueueing can race
without one overwriting another. No Celery or HTTP imports here.

Keys (prefix `yana:`):
  job:{id}          hash: the record (nested values JSON-encoded)
  job:{id}:hb       heartbeat, value = the attempt token of the worker running it, with a TTL
  jobs:recent       zset id -> created_at (ms), for listing
  jobs:active       set of ids not yet terminal, scanned by the reconciler
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from yana.errors import ErrorCode, YanaError, internal

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = "queued", "running", "succeeded", "failed", "cancelled"
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
STATUSES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED)

PREFIX = "yana:"
RECENT = PREFIX + "jobs:recent"
ACTIVE = PREFIX + "jobs:active"
WEBHOOKS_DUE = PREFIX + "webhooks:due"  # zset job id -> when its next delivery attempt is due (ms)
WEBHOOK_SENDING = PREFIX + "webhooks:sending:{}"  # job id -> the token of the one dispatcher sending it now
LAST_ACCEPTED = PREFIX + "jobs:last_accepted"
LOST_SCAN_LOCK = PREFIX + "jobs:lost-scan"  # one reconciler of the fleet scans the broker for lost messages
CURSOR_TIES = 1000  # list cursor = created-at ms * CURSOR_TIES + jobs of that ms already passed
_JSON_FIELDS = ("progress", "result", "error", "params", "webhook", "meta")


def job_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}"


def hb_key(job_id: str) -> str:
    return f"{PREFIX}job:{job_id}:hb"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    return int(time.time() * 1000)


def _dump(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits are valid JSON, which orjson refuses to write
        return json.dumps(value, ensure_ascii=False, default=str)


# Claim an attempt. Returns {outcome, attempts}; outcome is one of
# ok | terminal | busy | exhausted | missing.
_CLAIM = """
local job, hb = KEYS[1], KEYS[2]
local token, now, hb_ttl_ms, max_attempts, error_json = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local status = redis.call('HGET', job, 'status')
if not status then return {'missing', 0} end
if status == 'succeeded' or status == 'failed' or status == 'cancelled' then return {'terminal', 0} end
local holder = redis.call('GET', hb)
if status == 'running' and holder and holder ~= token then return {'busy', 0} end
local attempts = tonumber(redis.call('HGET', job, 'attempts') or '0') + 1
if attempts > max_attempts then
  redis.call('HSET', job, 'status', 'failed', 'error', error_json, 'finished_at', now, 'updated_at', now,
             'attempts', attempts - 1)
  redis.call('SREM', KEYS[3], ARGV[6])
  if (redis.call('HGET', job, 'callback_url') or '') ~= '' then
    redis.call('ZADD', KEYS[4], ARGV[7], ARGV[6])
  end
  return {'exhausted', attempts - 1}
end
redis.call('HSET', job, 'status', 'running', 'attempts', attempts, 'updated_at', now, 'token', token)
if not redis.call('HGET', job, 'started_at') then redis.call('HSET', job, 'started_at', now) end
redis.call('SET', hb, token, 'PX', hb_ttl_ms)
return {'ok', attempts}
"""

# Compare-and-set a status. KEYS: job, active set, heartbeat, webhook schedule. ARGV: new_status,
# allowed_csv, require_token ('' = any), now_ms, job_id, then field/value pairs. Returns the previous status, or false when the transition was not allowed.
# Entering a terminal state schedules the job's webhook (if it has a callback) in the same step,
# so no path to a terminal state (worker, API cancel, reconciler) can forget it.
_TRANSITION = """
local job = KEYS[1]
local status = redis.call('HGET', job, 'status')
if not status then return false end
local ok = false
for s in string.gmatch(ARGV[2], '[^,]+') do if s == status then ok = true end end
if not ok then return false end
if ARGV[3] ~= '' and redis.call('HGET', job, 'token') ~= ARGV[3] then return false end
redis.call('HSET', job, 'status', ARGV[1])
for i = 6, #ARGV, 2 do redis.call('HSET', job, ARGV[i], ARGV[i + 1]) end
if ARGV[1] == 'succeeded' or ARGV[1] == 'failed' or ARGV[1] == 'cancelled' then
  redis.call('SREM', KEYS[2], ARGV[5])
  redis.call('DEL', KEYS[3])
  redis.call('PEXPIRE', job, tonumber(redis.call('HGET', job, 'retention_ms')))
  if (redis.call('HGET', job, 'callback_url') or '') ~= '' then
    redis.call('ZADD', KEYS[4], ARGV[4], ARGV[5])
  end
end
return status
"""

# Reconcile one running job: if its heartbeat is gone, put it back to queued (caller re-enqueues).
_RECLAIM_STALE = """
local job, hb = KEYS[1], KEYS[2]
if redis.call('HGET', job, 'status') ~= 'running' then return false end
if redis.call('EXISTS', hb) == 1 then return false end
redis.call('HSET', job, 'status', 'queued', 'updated_at', ARGV[1], 'token', '')
redis.call('HDEL', job, 'reserved_by', 'reserved_at')
return redis.call('HGET', job, 'attempts')
"""


# A worker main process took a queued job's message off the queue (prefetched, not yet running):
# who (its liveness key) and when. KEYS: job. ARGV: liveness key, now_ms.
_MARK_RESERVED = """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
redis.call('HSET', KEYS[1], 'reserved_by', ARGV[1], 'reserved_at', ARGV[2])
return 1
"""

# A queued job whose message a worker main had reserved when it died: that message is unacked
# until the broker's visibility timeout (hours), so the caller sends a new one. KEYS: job, the
# reserving worker's liveness key. ARGV: the reservation it saw, reserved before this ms.
_RELEASE_ORPHANED = """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
if redis.call('HGET', KEYS[1], 'reserved_by') ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if tonumber(redis.call('HGET', KEYS[1], 'reserved_at') or '0') > tonumber(ARGV[2]) then return 0 end
redis.call('HDEL', KEYS[1], 'reserved_by', 'reserved_at')
return 1
"""

# A queued job that no broker message names any more (it was lost with a Redis master that died
# before replicating it): take the re-send, once per idle period, so that of several reconcilers
# only one sends. KEYS: job. ARGV: updated_at as the caller saw it, now.
_TAKE_UNSENT = """
if redis.call('HGET', KEYS[1], 'status') ~= 'queued' then return 0 end
if redis.call('HGET', KEYS[1], 'updated_at') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[2])
return 1
"""


@dataclass
class Claim:
    outcome: str
    attempts: int
    token: str


class JobStore:
    """All reads and writes of job records go through here."""

    def __init__(self, r: redis.Redis, retention_s: int = 7 * 24 * 3600):
        self.r = r
        self.retention_ms = int(retention_s * 1000)
        self._claim = r.register_script(_CLAIM)
        self._transition = r.register_script(_TRANSITION)
        self._reclaim = r.register_script(_RECLAIM_STALE)
        self._mark_reserved = r.register_script(_MARK_RESERVED)
        self._release_orphaned = r.register_script(_RELEASE_ORPHANED)
        self._take_unsent = r.register_script(_TAKE_UNSENT)

    # --- create / read --------------------------------------------------------------------
    def create(
        self,
        kind: str,
        params: dict | None = None,
        *,
        correlation: dict | None = None,
        callback_url: str | None = None,
        queue: str = "default",
        job_id: str | None = None,
        parent_id: str | None = None,
        max_attempts: int = 3,
        meta: dict | None = None,
        once: tuple[str, str] | None = None,
        once_ttl_s: int = 24 * 3600,
    ) -> dict:
        """Create a queued job. With `once` (a Redis hash of an Idempotency-Key's jobs, and the
        field for this kind), at most one job is ever created for that key and kind: a later call
        returns the job the first one created (marked `existing`). That holds even when the process that created it died before the key's
        response was recorded, which the key's own in-flight lease cannot tell."""
        job_id = job_id or uuid.uuid4().hex
        corr = correlation or {}
        ts = now_iso()
        record = {
            "id": job_id,
            "kind": kind,
            "status": QUEUED,
            "progress": _dump({"stage": "queued", "done": 0, "total": 0}),
            "params": _dump(params or {}),
            "attempts": 0,
            "max_attempts": max_attempts,
            "created_at": ts,
            "updated_at": ts,
            "run_id": corr.get("run_id", ""),
            "trace_id": corr.get("trace_id", ""),
            "traceparent": corr.get("traceparent", ""),
            "callback_url": callback_url or "",
            "queue": queue,
            "parent_id": parent_id or "",
            "retention_ms": self.retention_ms,
            "token": "",
            "meta": _dump(meta or {}),
        }
        created_ms = int(time.time() * 1000)
        if once is not None:
            existing = self._write_once(once, once_ttl_s, job_id, record, created_ms)
            if existing is not None:
                return existing
        else:
            with self.r.pipeline(transaction=True) as p:
                self._write_new(p, job_id, record, created_ms)
                p.execute()
        job = self.get(job_id)
        if job is None:  # expired between the write and the read: retention shorter than a round trip
            raise internal(f"job {job_id} vanished right after it was created")
        return job

    @staticmethod
    def _write_new(p, job_id: str, record: dict, created_ms: int) -> None:
        p.hset(job_key(job_id), mapping=record)
        p.zadd(RECENT, {job_id: created_ms})
        p.sadd(ACTIVE, job_id)

    def _write_once(self, once: tuple[str, str], ttl_s: int, job_id: str, record: dict, created_ms: int) -> dict | None:
        """Write the job and bind it to `once` in one transaction, unless a job is bound there
        already: then return that job (None when ours was written)."""
        once_key, field = once
        for _ in range(5):
            with self.r.pipeline(transaction=True) as p:
                try:
                    p.watch(once_key)
                    bound = p.hget(once_key, field)
                    if bound is not None:
                        p.unwatch()
                        job = self.get(bound)
                        if job is not None:
                            return {**job, "existing": True}
                    p.multi()
                    self._write_new(p, job_id, record, created_ms)
                    p.hset(once_key, field, job_id)
                    p.expire(once_key, max(1, ttl_s))
                    p.execute()
                    return None
                except redis.WatchError:
                    continue
        raise internal("job creation for an Idempotency-Key kept being contended")

    def status(self, job_id: str) -> str | None:
        return self.r.hget(job_key(job_id), "status")

    def note_task_id(self, job_id: str, task_id: str) -> None:
        self.r.hset(job_key(job_id), "task_id", task_id)

    def bound_job(self, once_key: str, kind: str) -> str | None:
        """The job of `kind` an Idempotency-Key's record (`once` of create) is bound to, if any."""
        return self.r.hget(once_key, kind)

    def get(self, job_id: str) -> dict | None:
        raw = self.r.hgetall(job_key(job_id))
        return self._decode(raw) if raw else None

    def get_raw_field(self, job_id: str, field: str) -> str | None:
        return self.r.hget(job_key(job_id), field)

    @staticmethod
    def _decode(raw: dict) -> dict:
        out: dict[str, Any] = dict(raw)
        for f in _JSON_FIELDS:
            if out.get(f):
                out[f] = orjson.loads(out[f])
            else:
                out[f] = None
        for f in ("attempts", "max_attempts", "retention_ms"):
            out[f] = int(out.get(f) or 0)
        for f in ("callback_url", "parent_id", "started_at", "finished_at", "traceparent"):
            out[f] = out.get(f) or None
        return out

    def list(
        self, *, kind: str | None = None, status: str | None = None, limit: int = 50, cursor: int = 0
    ) -> tuple[list[dict], int | None]:
        """Newest first; returns (jobs, next_cursor). Keyset paging: a cursor is a position in the
        recent index, created-at ms * CURSOR_TIES + how many jobs of that millisecond were already
        passed (0: start at the newest), so index entries removed meanwhile shift no page."""
        bound: float | int = "+inf"  # type: ignore[assignment]
        passed = 0
        if cursor:
            bound, passed = divmod(cursor, CURSOR_TIES)
        out: list[dict] = []
        expired: list[tuple[str, int]] = []
        batch = max(limit * 2, 100)
        more = True
        while len(out) < limit:
            rows = self.r.zrevrangebyscore(RECENT, bound, "-inf", start=passed, num=batch, withscores=True)
            if not rows:
                more = False
                break
            with self.r.pipeline(transaction=False) as p:
                for jid, _score in rows:
                    p.hgetall(job_key(jid))
                records = p.execute()
            for (jid, score), raw in zip(rows, records, strict=True):
                score = int(score)
                bound, passed = (bound, passed + 1) if score == bound else (score, 1)
                if not raw:
                    expired.append((jid, score))
                elif (not kind or raw.get("kind") == kind) and (not status or raw.get("status") == status):
                    out.append(self._decode(raw))
                    if len(out) == limit:
                        break
        if more:
            more = int(self.r.zcount(RECENT, "-inf", bound)) > passed  # type: ignore[arg-type]
        # Expired records leave the index lazily; never at the cursor's own millisecond, where
        # removing one would shift the count the next page skips.
        gone = [jid for jid, score in expired if not more or score != bound]
        if gone:
            self.r.zrem(RECENT, *gone)
        return out, (int(bound) * CURSOR_TIES + passed if more else None)

    def active_ids(self) -> builtins.list[str]:  # `list` in this class body is the method above
        return list(self.r.smembers(ACTIVE))

    def wait_replicated(self, job_id: str, replicas: int, timeout_ms: int) -> None:
        """Block until `replicas` replicas have every write made before this call (the job record,
        and its message sent on another connection before it). WAIT counts this connection's last
        write, so a small write goes first on the same connection (one pipeline)."""
        with self.r.pipeline(transaction=False) as p:
            p.set(LAST_ACCEPTED, job_id, px=60_000)
            p.execute_command("WAIT", replicas, timeout_ms)
            acked = int(p.execute()[-1])
        if acked < replicas:
            raise YanaError.of(
                ErrorCode.STORE_UNAVAILABLE,
                f"job {job_id}: {acked} of {replicas} Redis replicas confirmed it within {timeout_ms} ms; "
                "retry with the same Idempotency-Key",
                retryable=True,
            )

    # --- worker side ----------------------------------------------------------------------
    def claim(self, job_id: str, token: str, *, hb_ttl_s: float, max_attempts: int) -> Claim:
        err = _dump(
            YanaError.of(
                ErrorCode.ATTEMPTS_EXHAUSTED,
                f"job was started {max_attempts} times and never finished (worker lost or killed each time)",
            ).body()
        )
        outcome, attempts = self._claim(
            keys=[job_key(job_id), hb_key(job_id), ACTIVE, WEBHOOKS_DUE],
            args=[token, now_iso(), int(hb_ttl_s * 1000), max_attempts, err, job_id, now_ms()],
        )
        if outcome == "exhausted":
            self.r.pexpire(job_key(job_id), self.retention_ms)
        return Claim(outcome, int(attempts), token)

    def heartbeat(self, job_id: str, token: str, ttl_s: float) -> bool:
        """Refresh our heartbeat. False when the job is no longer ours to run (cancelled, taken)."""
        with self.r.pipeline(transaction=False) as p:
            p.hget(job_key(job_id), "status")
            p.hget(job_key(job_id), "token")
            status, holder = p.execute()
        if status != RUNNING or holder != token:
            return False
        self.r.set(hb_key(job_id), token, px=int(ttl_s * 1000))
        return True

    def progress(self, job_id: str, stage: str, done: int, total: int, **detail: Any) -> None:
        """Record progress; `detail` (e.g. a round's queries) is shown beside stage/done/total."""
        record = {"stage": stage, "done": done, "total": total, **detail}
        self.r.hset(job_key(job_id), mapping={"progress": _dump(record), "updated_at": now_iso()})

    def update_meta(self, job_id: str, **values: Any) -> dict:
        """Merge values into the record's `meta` (task-private state such as a resume cursor)."""
        cur = self.get_raw_field(job_id, "meta")
        meta = orjson.loads(cur) if cur else {}
        meta.update(values)
        self.r.hset(job_key(job_id), "meta", _dump(meta))
        return meta

    def _set_status(self, job_id: str, new: str, allowed: Iterable[str], token: str = "", **fields: Any) -> str | None:
        args: list[Any] = [new, ",".join(allowed), token, now_ms(), job_id]
        fields.setdefault("updated_at", now_iso())
        for k, v in fields.items():
            args += [k, v if isinstance(v, (str, int, float)) else _dump(v)]
        prev = self._transition(keys=[job_key(job_id), ACTIVE, hb_key(job_id), WEBHOOKS_DUE], args=args)
        return prev or None

    def succeed(self, job_id: str, token: str, result: Any) -> bool:
        ts = now_iso()
        return self._set_status(job_id, SUCCEEDED, [RUNNING], token, result=_dump(result), finished_at=ts) is not None

    def fail(self, job_id: str, error: dict, token: str = "") -> bool:
        allowed = [RUNNING] if token else [QUEUED, RUNNING]
        return self._set_status(job_id, FAILED, allowed, token, error=_dump(error), finished_at=now_iso()) is not None

    def requeue(self, job_id: str, token: str, error: dict) -> bool:
        """Running (ours) → queued, keeping the last error, for a retry the caller schedules."""
        return self._set_status(job_id, QUEUED, [RUNNING], token, last_error=_dump(error)) is not None

    def cancel(self, job_id: str) -> str | None:
        """Cancel a queued or running job. Returns the status it had, or None if already terminal."""
        err = YanaError.of(ErrorCode.CANCELLED, "cancelled by request").body()
        return self._set_status(job_id, CANCELLED, [QUEUED, RUNNING], error=_dump(err), finished_at=now_iso())

    def release_stale(self, job_id: str) -> int | None:
        """Running with no heartbeat → queued. Returns attempts so far, or None if not stale."""
        res = self._reclaim(keys=[job_key(job_id), hb_key(job_id)], args=[now_iso()])
        return int(res) if res is not None and res is not False else None

    def mark_reserved(self, job_id: str, worker_key: str) -> bool:
        """Record that the worker main with liveness key `worker_key` holds this queued job's
        message. False when the job is not queued (any more)."""
        return bool(self._mark_reserved(keys=[job_key(job_id)], args=[worker_key, int(time.time() * 1000)]))

    def reserved_states(self, job_ids: builtins.list[str]) -> dict[str, tuple[str, str, int]]:
        """job id -> (status, reserved_by, reserved_at ms) for the jobs given, in one round trip."""
        with self.r.pipeline(transaction=False) as p:
            for job_id in job_ids:
                p.hmget(job_key(job_id), "status", "reserved_by", "reserved_at")
            rows = p.execute()
        return {j: (st or "", by or "", int(at or 0)) for j, (st, by, at) in zip(job_ids, rows, strict=True) if st}

    def release_orphaned(self, job_id: str, reserved_by: str, grace_ms: int) -> bool:
        """Queued, its message reserved more than grace_ms ago by a worker main whose liveness key
        is gone: clear the reservation and return True (the caller sends the message again)."""
        before = int(time.time() * 1000) - grace_ms
        return bool(self._release_orphaned(keys=[job_key(job_id), reserved_by], args=[reserved_by, before]))

    def idle_queued(self, job_ids: builtins.list[str], idle_s: float, now: float | None = None) -> dict[str, str]:
        """Of these jobs, the queued ones whose record has not changed for idle_s seconds:
        job id -> its updated_at (what take_unsent compares)."""
        now = time.time() if now is None else now
        with self.r.pipeline(transaction=False) as p:
            for job_id in job_ids:
                p.hmget(job_key(job_id), "status", "updated_at")
            rows = p.execute()
        out = {}
        for job_id, (status, updated_at) in zip(job_ids, rows, strict=True):
            if status != QUEUED or not updated_at:
                continue
            if now - datetime.fromisoformat(updated_at.replace("Z", "+00:00")).timestamp() >= idle_s:
                out[job_id] = updated_at
        return out

    def take_unsent(self, job_id: str, seen_updated_at: str) -> bool:
        """Still queued and unchanged since the caller saw `seen_updated_at`: mark it updated now
        and return True (the caller sends its message again); else False."""
        return bool(self._take_unsent(keys=[job_key(job_id)], args=[seen_updated_at, now_iso()]))

    def append_webhook_attempt(
        self, job_id: str, attempt: dict, delivered: bool | None = None, *, next_due_ms: int | None = None
    ) -> None:
        """Record a delivery attempt and, in the same transaction, what becomes of the job's
        schedule entry: removed when the delivery is over (delivered, or the last attempt), due
        again at `next_due_ms` otherwise. One MULTI/EXEC: Redis never holds the record without
        the schedule change or the reverse, whatever it loses in a crash (the caller is the only
        writer of this field while it holds the entry's sending lock)."""
        cur = self.get_raw_field(job_id, "webhook")
        hook: dict[str, Any] = orjson.loads(cur) if cur else {"attempts": [], "delivered": False}
        hook["attempts"].append(attempt)
        if delivered is not None:
            hook["delivered"] = delivered
        with self.r.pipeline(transaction=True) as p:
            p.hset(job_key(job_id), "webhook", _dump(hook))
            if next_due_ms is None:
                p.zrem(WEBHOOKS_DUE, job_id)
            else:
                p.zadd(WEBHOOKS_DUE, {job_id: next_due_ms})
            p.execute()


def public_view(job: dict) -> dict:
    """The record as clients see it (internal bookkeeping left out)."""
    hidden = {"token", "retention_ms", "params", "meta", "queue", "reserved_by", "reserved_at"}
    out = {k: v for k, v in job.items() if k not in hidden}
    out.setdefault("result", None)
    out.setdefault("error", None)
    return out
