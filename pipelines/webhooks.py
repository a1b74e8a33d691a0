"""Signed webhook delivery (Standard Webhooks) with SSRF protection and a retry schedule in Redis.

Schedule: zset `yana:webhooks:due` (job id -> due time, ms). A job entering a terminal state is
added by the job store's transition script. A dispatcher claims due entries by pushing their due
time forward by a lease (so a crashed sender's entry comes back), sends, and on failure sets the
next due time by exponential backoff; on success or after the last attempt the entry is removed.
Each attempt is recorded on the job record.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import urlsplit, urlunsplit

import httpx
import orjson
import redis
from standardwebhooks.webhooks import Webhook

from pipelines.jobs import WEBHOOKS_DUE, JobStore, now_iso, public_view
from yana.errors import YanaError

_CLAIM_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], id) end
return due
"""


# --- SSRF-safe targets ---------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    url: str  # as given
    host: str
    port: int
    scheme: str
    address: str  # the checked IP we connect to


def _allowed_by_list(host: str, addr: ipaddress._BaseAddress, allow: list[str]) -> bool:
    for entry in allow:
        entry = entry.strip()
        if not entry:
            continue
        if entry.lower() == host.lower():
            return True
        try:
            if addr in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def resolve_target(url: str, allow: list[str] | None = None) -> Target:
    """Validate a callback/fetch URL and pin it to one checked address.

    Refuses non-http(s), credentials in the URL, and any resolved address that is not global
    (loopback, private, link-local, CGNAT, multicast, reserved) unless the allow-list names the
    host or a network containing the address. Raises YanaError(BAD_REQUEST).
    """
    allow = allow or []
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise YanaError("BAD_REQUEST", f"invalid URL: {exc}", 400) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise YanaError("BAD_REQUEST", "callback URL must be http(s)://host/...", 400)
    if parts.username or parts.password:
        raise YanaError("BAD_REQUEST", "credentials in the URL are not allowed", 400)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise YanaError("BAD_REQUEST", f"cannot resolve host {host!r}", 400) from exc
    addrs = []
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
            addr = addr.ipv4_mapped
        addrs.append(addr)
    # Every address must pass: a name that resolves to one public and one private address is
    # refused, so DNS tricks cannot pick the private one later.
    for addr in addrs:
        if not addr.is_global and not _allowed_by_list(host, addr, allow):
            raise YanaError(
                "BAD_REQUEST",
                "callback URL resolves to a private, loopback or link-local address; "
                "allow it with WEBHOOK_ALLOW if intended",
                400,
            )
    return Target(url=url, host=host, port=port, scheme=parts.scheme, address=str(addrs[0]))


def post_pinned(target: Target, body: bytes, headers: dict, timeout: float) -> httpx.Response:
    """POST to the checked address (not a fresh DNS lookup), keeping Host and TLS SNI."""
    parts = urlsplit(target.url)
    ip = target.address
    netloc_ip = f"[{ip}]" if ":" in ip else ip
    pinned = urlunsplit((parts.scheme, f"{netloc_ip}:{target.port}", parts.path or "/", parts.query, ""))
    host_header = target.host if parts.port is None else f"{target.host}:{parts.port}"
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        return client.post(
            pinned,
            content=body,
            headers={**headers, "Host": host_header},
            extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
        )


def get_pinned(target: Target, timeout: float, max_bytes: int, headers: dict | None = None) -> tuple[httpx.Response, bytes]:
    """GET from the checked address with a byte cap (streamed; stops reading past max_bytes).

    Returns the response (headers, status) and its body. Redirects are not followed here: the
    caller re-checks the Location with resolve_target before the next hop.
    Raises YanaError FETCH_TOO_LARGE when the body exceeds max_bytes."""
    parts = urlsplit(target.url)
    ip = target.address
    netloc_ip = f"[{ip}]" if ":" in ip else ip
    pinned = urlunsplit((parts.scheme, f"{netloc_ip}:{target.port}", parts.path or "/", parts.query, ""))
    host_header = target.host if parts.port is None else f"{target.host}:{parts.port}"
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        with client.stream(
            "GET",
            pinned,
            headers={**(headers or {}), "Host": host_header},
            extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
        ) as resp:
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise YanaError("FETCH_TOO_LARGE", f"{target.url} is {declared} bytes; the limit is {max_bytes}", 413)
            chunks, size = [], 0
            deadline = time.monotonic() + timeout  # httpx's timeout is per read; a slow drip must end too
            for chunk in resp.iter_bytes():
                if time.monotonic() > deadline:
                    raise YanaError("FETCH_TIMEOUT", f"{target.url} took longer than {timeout}s", 504, retryable=True)
                size += len(chunk)
                if size > max_bytes:
                    raise YanaError("FETCH_TOO_LARGE", f"{target.url} is larger than {max_bytes} bytes", 413)
                chunks.append(chunk)
            return resp, b"".join(chunks)


# --- signing ---------------------------------------------------------------------------------


def sign(secret: str, msg_id: str, ts: datetime, payload: str) -> str:
    return Webhook(secret).sign(msg_id, ts, payload)


def webhook_id(job_id: str) -> str:
    return f"msg_{job_id}"


def build_delivery(job: dict, secret: str) -> tuple[bytes, dict]:
    payload = {"type": f"job.{job['status']}", "timestamp": now_iso(), "data": public_view(job)}
    body = orjson.dumps(payload)
    ts = datetime.now(timezone.utc).replace(microsecond=0)
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
            record["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
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
