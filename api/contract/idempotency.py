"""Idempotency-Key for job-creating POSTs (IETF draft-ietf-httpapi-idempotency-key-header).

Per (caller, key) one Redis record: first an in-flight claim (SET NX with a lease), then the
completed response. A retry with the same key and the same request gets the first response
again (`Idempotent-Replayed: true`); the same key while the first is still running gets 409; the
same key with another request gets 422; an empty or malformed key 400. Only 2xx responses are
kept: after an error the key is released and a retry runs again. After a time-out the claim is
left to expire with its lease, since the handler may still be creating the job. A claim records
the API process holding it; when that process dies mid-request (kill -9, OOM, a host lost) its
liveness key (api.contract.liveness) expires within seconds and the next retry takes the claim
over instead of getting 409 for the rest of the lease. A release that
Redis could not take (the master died mid-request; a Sentinel failover) is tried again in the
background until the new master answers: left in place, the claim would answer every retry of
the key with 409 for its whole lease (a minute by default) after Redis is back.

A job created under a key is bound to it in the same Redis transaction (`jobs_key`, see
JobStore.create), so the key never yields two jobs, even when the API process dies between
creating the job and recording the response: the retry runs again and gets the first job.

The request fingerprint ignores what a client legitimately varies between retries: JSON key order
and whitespace, form field order, the multipart boundary.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
import uuid
from dataclasses import dataclass
from urllib.parse import parse_qsl

from redis.asyncio import Redis
from redis.exceptions import RedisError, WatchError

from api.contract.liveness import alive_key
from yana.errors import ErrorCode, YanaError, bad_request, conflict

log = logging.getLogger("yana.idempotency")

KEY_PREFIX = "yana:idem:"
HEADER = "idempotency-key"
REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LEN = 255
_KEY_CHARS = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII (an sf-string without its quotes)
# Response headers worth replaying; correlation headers are the new request's own.
_REPLAY_HEADERS = {"content-type", "location", "preference-applied"}


def parse_key(raw: str) -> str:
    """The key of an Idempotency-Key header value. The draft defines it as a Structured Field
    string ("..."); a bare token is accepted too, as most clients send one."""
    value = raw.strip()
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        value = re.sub(r'\\(["\\])', r"\1", value[1:-1])
    if not value:
        raise bad_request("Idempotency-Key must not be empty")
    if len(value) > MAX_KEY_LEN or not _KEY_CHARS.match(value):
        raise bad_request(f"Idempotency-Key must be 1-{MAX_KEY_LEN} visible ASCII characters")
    return value


def fingerprint(method: str, path: str, query: bytes, content_type: str | None, body: bytes) -> str:
    essence = (content_type or "").split(";", 1)[0].strip().lower()
    canonical = body
    if essence == "application/json" or essence.endswith("+json"):
        try:
            canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
        except ValueError:
            pass
    elif essence == "application/x-www-form-urlencoded":
        canonical = repr(sorted(parse_qsl(body.decode("latin-1"), keep_blank_values=True))).encode()
    elif essence == "multipart/form-data":
        m = re.search(r'boundary="?([^";]+)"?', content_type or "")
        if m:  # the boundary is random per attempt; everything else is the request
            canonical = body.replace(m.group(1).encode("latin-1"), b"<boundary>")
    h = hashlib.sha256()
    for part in (method.encode(), path.encode(), b"&".join(sorted(query.split(b"&"))), essence.encode()):
        h.update(part + b"\n")
    h.update(canonical)
    return h.hexdigest()


@dataclass
class Claim:
    key: str
    owner: str


@dataclass
class StoredResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


# KEYS[1] the claim, KEYS[2] its holder's liveness key; ARGV: the holder's owner id as read, our
# record, lease s. Takes the claim iff it is still that holder's in-flight claim and the holder's
# liveness key is gone (the process died). Returns 1 when taken.
_TAKE_OVER = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local rec = cjson.decode(raw)
if rec['owner'] ~= ARGV[1] or rec['state'] == 'complete' then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
return 1
"""


class IdempotencyStore:
    def __init__(self, redis: Redis, ttl_s: int, process_id: str | None = None):
        self.r = redis
        self.ttl_s = ttl_s
        # This API process's id (api.contract.liveness): recorded in a claim so that a retry can
        # tell when its holder died.
        self.process_id = process_id

    @staticmethod
    def redis_key(identity: str, key: str) -> str:
        return KEY_PREFIX + hashlib.sha256(f"{identity}\n{key}".encode()).hexdigest()

    @staticmethod
    def jobs_key(rkey: str) -> str:
        """The hash of the jobs created under this key, one per kind (pipelines.runtime.jobs binds them)."""
        return rkey + ":jobs"

    async def claim(self, identity: str, key: str, fp: str, lease_s: int) -> Claim | StoredResponse:
        """Claim the key for this request, or return the stored response to replay.
        Raises 409 while another request with the key runs, 422 for a different request."""
        rkey = self.redis_key(identity, key)
        owner = uuid.uuid4().hex
        record = json.dumps({"state": "in_flight", "fp": fp, "owner": owner, "proc": self.process_id})
        for _ in range(3):
            if await self.r.set(rkey, record, nx=True, ex=max(1, lease_s)):
                return Claim(rkey, owner)
            raw = await self.r.get(rkey)
            if raw is None:
                continue  # expired between SET NX and GET: try to claim again
            stored = json.loads(raw)
            if stored.get("fp") != fp:
                raise YanaError.of(ErrorCode.UNPROCESSABLE, "Idempotency-Key was already used with a different request")
            if stored.get("state") != "complete":
                if await self.r.exists(self.jobs_key(rkey)):
                    # Its job exists: the first request got that far and may have died since (its
                    # lease cannot tell). Run again; job creation returns the job bound to the key.
                    await self.r.set(rkey, record, xx=True, ex=max(1, lease_s))  # ours now
                    return Claim(rkey, owner)
                if await self._holder_dead(rkey, stored, record, lease_s):
                    # The process holding it died mid-request (its liveness key expired): ours now,
                    # rather than 409 until the lease runs out.
                    log.info("idempotency claim of a dead API process taken over")
                    return Claim(rkey, owner)
                err = conflict("a request with this Idempotency-Key is still being processed", retryable=True)
                err.headers = {"Retry-After": "1"}  # type: ignore[attr-defined]
                raise err
            return StoredResponse(
                stored["status"], [tuple(h) for h in stored["headers"]], base64.b64decode(stored["body"])
            )
        raise conflict("Idempotency-Key is contended, retry", retryable=True)

    async def _holder_dead(self, rkey: str, stored: dict, record: str, lease_s: int) -> bool:
        holder = stored.get("proc")
        if not holder or not stored.get("owner"):
            return False  # a claim written before holders were recorded: its lease decides
        taken = await self.r.eval(_TAKE_OVER, 2, rkey, alive_key(holder), stored["owner"], record, max(1, lease_s))
        return bool(taken)

    async def complete(self, claim: Claim, fp: str, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        kept = [(k, v) for k, v in headers if k.lower() in _REPLAY_HEADERS]
        record = json.dumps(
            {
                "state": "complete",
                "fp": fp,
                "owner": claim.owner,
                "status": status,
                "headers": kept,
                "body": base64.b64encode(body).decode(),
            }
        )
        await self._if_owner(claim, lambda pipe: pipe.set(claim.key, record, ex=self.ttl_s))

    async def release(self, claim: Claim) -> None:
        await self._if_owner(claim, lambda pipe: pipe.delete(claim.key))

    async def release_when_reachable(self, claim: Claim, within_s: float, interval_s: float = 0.5) -> bool:
        """Release a claim whose release Redis refused, retrying every interval_s until it lands
        (True) or within_s has passed (False; the lease has run out by then anyway). Safe to land
        late: only a claim that is still ours is deleted."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while True:
            try:
                await self.release(claim)
                return True
            except RedisError as exc:
                if loop.time() + interval_s >= deadline:
                    log.warning("idempotency claim never released: %s", type(exc).__name__)
                    return False
            await asyncio.sleep(interval_s)

    async def _if_owner(self, claim: Claim, write) -> None:
        """Write only while the claim is still ours (its lease may have expired and been
        claimed by a retry): WATCH makes the check-and-write atomic."""
        async with self.r.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(claim.key)
                raw = await pipe.get(claim.key)
                if raw is None or json.loads(raw).get("owner") != claim.owner:
                    await pipe.unwatch()
                    return
                pipe.multi()
                write(pipe)
                await pipe.execute()
            except WatchError:
                log.info("idempotency record changed under us; left as is")
