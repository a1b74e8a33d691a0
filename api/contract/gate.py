"""What the contract checks between routing and a route's handler, with the state it shares in
one app: RouteGate (app.state.route_gate), used by api.contract.route.

Per request: the route's merged policy -> bearer auth and rate limit (api.contract.admission) ->
media type, body cap and body checks (api.contract.body) -> Idempotency-Key (replay / 409 / 422)
-> the route under its time limit (408) -> versions added to a success JSON body lacking them.
Failures are raised as YanaError; the error handlers and the contract middleware answer them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import orjson
from fastapi import FastAPI
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from api.contract.admission import Admission
from api.contract.auth import caller_identity
from api.contract.body import admit_body, json_request, read_body, replaying_receive
from api.contract.idempotency import HEADER as IDEMPOTENCY_HEADER
from api.contract.idempotency import REPLAYED_HEADER, Claim, IdempotencyStore, StoredResponse, fingerprint, parse_key
from api.contract.liveness import ProcessLiveness
from api.contract.policy import ResolvedPolicy
from api.contract.routing import RouteIndex
from yana import POLICY_VERSION, __version__, context
from yana.clients import get_async_redis
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings

log = logging.getLogger("yana.api")

POLICY_KEY = "yana.policy"  # scope key: the policy the request was admitted under (error handlers, access log)
_VERSIONS = {"server_version": __version__, "policy_version": POLICY_VERSION}

ASGIHandle = Callable[[Scope, Receive, Send], Awaitable[None]]


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    return json_request(Headers(raw=headers))


def add_versions(body: bytes) -> bytes:
    """Seed 000: every success JSON body carries server_version and policy_version."""
    if b'"server_version"' in body and b'"policy_version"' in body:
        return body
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(data, dict):
        return body
    for k, v in _VERSIONS.items():
        data.setdefault(k, v)
    return orjson.dumps(data)


class ResponseBuffer:
    """Holds back a JSON response (to add the versions, to keep it for idempotent replay, and so
    a time-out can still answer 408); anything else streams straight through."""

    def __init__(self, send: Send, *, envelope: bool, capture: bool):
        self._send = send
        self.envelope = envelope
        self.capture = capture
        self.start: Message | None = None
        self.chunks: list[bytes] = []
        self.forwarded = False
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            self.status = message["status"]
            self.headers = list(message.get("headers", []))
            if not (self.capture or (self.envelope and _is_json(self.headers))):
                self.forwarded = True
                await self._send(message)
            return
        if message["type"] == "http.response.body" and not self.forwarded:
            self.chunks.append(message.get("body", b""))
            return
        await self._send(message)

    def finalize(self) -> None:
        """The held-back response as it will be sent (versions added, length fixed)."""
        if self.forwarded or self.start is None:
            return
        body = b"".join(self.chunks)
        if self.envelope and 200 <= self.status < 300 and _is_json(self.headers):
            body = add_versions(body)
        self.body = body
        headers = [(k, v) for k, v in self.headers if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        self.headers = headers

    async def flush(self) -> None:
        if self.forwarded or self.start is None:
            return
        self.forwarded = True
        await self._send({**self.start, "headers": self.headers})
        await self._send({"type": "http.response.body", "body": self.body, "more_body": False})


def app_redis(app: FastAPI) -> Redis:
    """The app's async Redis client (made by the lifespan; lazily here when served without one,
    e.g. through a bare ASGI transport)."""
    r = getattr(app.state, "redis", None)
    if r is None:
        settings = getattr(app.state, "settings", None)
        r = app.state.redis = get_async_redis(settings)
    return r


@dataclass(frozen=True)
class Admitted:
    """A request past admission (RouteGate.admit): the policy it was admitted under, the caller's
    identity (None on a public route), the body when admission read it, and the receive the route
    reads the body from."""

    rp: ResolvedPolicy
    identity: str | None
    body: bytes | None
    receive: Receive


class RouteGate:
    """The contract's per-route checks, with the state they share in one app (settings, the
    policies of its routes, the limiters, this process's liveness): app.state.route_gate."""

    def __init__(self, app: FastAPI, settings: Settings, internal_secret: str):
        self.app = app
        self.settings = settings
        self.policies = RouteIndex(app, settings)
        self.admission = Admission(settings, partial(app_redis, app), internal_secret)
        self.liveness = ProcessLiveness(settings.api_liveness_ttl_s)
        self._background: set[asyncio.Task] = set()  # idempotency releases retried after a Redis failure

    @staticmethod
    def of(scope: Scope) -> RouteGate:
        return scope["app"].state.route_gate

    async def admit(self, scope: Scope, receive: Receive, rp: ResolvedPolicy) -> Admitted:
        """Auth and rate limit (unless public), then the body's media type, size and content."""
        scope[POLICY_KEY] = rp
        identity = None
        if not rp.policy.public:
            client = scope.get("client")
            identity = await self.admission.admit(Headers(scope=scope), client[0] if client else None, rp)
        body, receive = await admit_body(scope, receive, rp)
        return Admitted(rp, identity, body, receive)

    async def respond(self, scope: Scope, send: Send, req: Admitted, app: ASGIHandle) -> None:
        """An admitted request's answer: the stored one for a repeated Idempotency-Key, else the
        route's under its time limit."""
        raw_key = Headers(scope=scope).get(IDEMPOTENCY_HEADER)
        if req.rp.idempotent and scope.get("method") == "POST" and raw_key is not None:
            identity = req.identity or caller_identity(None, None)
            await self.idempotent_call(scope, req.receive, send, req.rp, identity, raw_key, req.body, app)
            return
        await self.call_app(scope, req.receive, send, req.rp, app)

    async def call_app(
        self, scope: Scope, receive: Receive, send: Send, rp: ResolvedPolicy, app: ASGIHandle, *, capture: bool = False
    ) -> ResponseBuffer:
        """Run the route under its time limit. With capture the whole response is held back and
        returned unsent (the caller flushes it)."""
        buffer = ResponseBuffer(send, envelope=rp.api_route, capture=capture)
        limit = rp.timeout(self.settings)
        if not limit:
            await app(scope, receive, buffer.send)
        else:
            try:
                async with asyncio.timeout(limit) as deadline:
                    await app(scope, receive, buffer.send)
            except TimeoutError:
                if not deadline.expired() or buffer.forwarded:
                    raise
                raise YanaError.of(ErrorCode.REQUEST_TIMEOUT, f"request exceeded its {limit:g} s time limit") from None
        buffer.finalize()
        if not capture:
            await buffer.flush()
        return buffer

    async def idempotent_call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        rp: ResolvedPolicy,
        identity: str,
        raw_key: str,
        body: bytes | None,
        app: ASGIHandle,
    ) -> None:
        key = parse_key(raw_key)
        if body is None:
            body = await read_body(receive)
        headers = Headers(scope=scope)
        fp = fingerprint(
            scope["method"], scope["path"], scope.get("query_string", b""), headers.get("content-type"), body
        )
        redis = app_redis(self.app)
        await self.liveness.ensure(redis)
        store = IdempotencyStore(redis, self.settings.idempotency_ttl_s, self.liveness.process_id)
        lease_s = int((rp.timeout(self.settings) or self.settings.request_timeout_s) + 30)
        claimed = await store.claim(identity, key, fp, lease_s)
        if isinstance(claimed, StoredResponse):
            await self.replay(send, claimed, rp)
            return
        bound = context.set_idempotency_record(store.jobs_key(claimed.key))
        try:
            buffer = await self.call_app(scope, replaying_receive(body, receive), send, rp, app, capture=True)
        except YanaError as err:
            if err.status != 408:  # after a time-out the handler may still run: keep the claim
                await self.release_claim(store, claimed, lease_s)
            raise
        except BaseException:
            await self.release_claim(store, claimed, lease_s)
            raise
        finally:
            context.reset_idempotency_record(bound)
        # Recorded before the caller sees the response, so its next retry finds it complete.
        if 200 <= buffer.status < 300:
            text_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in buffer.headers]
            try:
                await store.complete(claimed, fp, buffer.status, text_headers, buffer.body)
            except RedisError as exc:  # the work is done; only its memory is lost (the lease expires)
                log.warning("idempotency record not saved: %s", type(exc).__name__)
        else:
            await self.release_claim(store, claimed, lease_s)
        await buffer.flush()

    async def release_claim(self, store: IdempotencyStore, claim: Claim, lease_s: int) -> None:
        """Release the key after an error. When Redis itself is what failed (its master died
        mid-request), keep trying in the background until it answers, so that the client's retries
        are not refused with 409 for the whole lease once Redis is back; the request's own error
        is what the client gets."""
        try:
            await store.release(claim)
        except RedisError as exc:
            log.warning("idempotency claim not released (%s); retrying in the background", type(exc).__name__)
            task = asyncio.get_running_loop().create_task(store.release_when_reachable(claim, lease_s))
            self._background.add(task)  # a reference, or the task may be collected before it ends
            task.add_done_callback(self._background.discard)

    @staticmethod
    async def replay(send: Send, stored: StoredResponse, rp: ResolvedPolicy) -> None:
        body = stored.body
        if rp.policy.replay_dedup:
            try:
                data = orjson.loads(body)
                if isinstance(data, dict):
                    data["dedup"] = True
                    body = orjson.dumps(data)
            except orjson.JSONDecodeError:
                pass
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in stored.headers]
        headers += [(REPLAYED_HEADER.lower().encode(), b"true"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": stored.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})
