"""The contract middleware: one pure-ASGI layer every request passes, whatever route it reaches.

Order per request: correlation ids (set for the whole request, echoed on every response) ->
route policy -> bearer auth -> token-bucket rate limit -> media type (415) and body cap (413) ->
Idempotency-Key (replay / 409 / 422) -> the app under the route's time limit (408) -> versions
added to a success JSON body that lacks them -> one JSON-lines access record.

Pure ASGI rather than BaseHTTPMiddleware: the correlation context var stays visible to handlers,
exception handlers and the access log, and streaming bodies are not wrapped in extra tasks.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
from typing import Any
from urllib.parse import unquote

import orjson
from fastapi import FastAPI
from redis.asyncio import Redis
from redis.exceptions import RedisError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.contract import correlation
from api.contract.auth import BearerAuth, bearer_token, caller_identity
from api.contract.errors import error_response, from_exception
from api.contract.idempotency import HEADER as IDEMPOTENCY_HEADER
from api.contract.idempotency import REPLAYED_HEADER, Claim, IdempotencyStore, StoredResponse, fingerprint, parse_key
from api.contract.liveness import ProcessLiveness
from api.contract.mcp import MAX_ERROR_TEXT, MCP_PATH
from api.contract.policy import ResolvedPolicy, media_type_accepted
from api.contract.ratelimit import AuthFailureLimiter, Rate, TokenBucketLimiter
from api.contract.routing import RouteIndex
from yana import POLICY_VERSION, __version__, context
from yana.clients import get_async_redis
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings

access_log = logging.getLogger("yana.access")
log = logging.getLogger("yana.api")

INTERNAL_HEADER = "x-yana-internal"  # in-process calls of the MCP tool bridge (already limited)
_VERSIONS = {"server_version": __version__, "policy_version": POLICY_VERSION}
_BODY_METHODS = {"POST", "PUT", "PATCH"}
# No request of this API nests deeper; far deeper JSON would exhaust a recursive parser (Python's
# json fails near 1000 levels) somewhere behind this layer, so it is refused before anyone parses it.
MAX_JSON_DEPTH = 64
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _is_json(headers: list[tuple[bytes, bytes]]) -> bool:
    for k, v in headers:
        if k.lower() == b"content-type":
            essence = v.split(b";", 1)[0].strip().lower()
            return essence == b"application/json" or essence.endswith(b"+json")
    return False


def _depth_of_text(body: bytes, limit: int) -> int:
    """Bracket depth of text that is not valid JSON (strings skipped), counted up to limit + 1."""
    depth = deepest = 0
    for m in _JSON_TOKENS.finditer(body):
        tok = m.group()
        if tok in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        elif tok in (b"]", b"}"):
            depth -= 1
    return deepest


def json_depth(body: bytes, limit: int) -> int:
    """How deep a JSON body nests (counted up to limit + 1, then it stops looking)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _depth_of_text(body, limit)
    return _depth_of_value(data, limit)


def _depth_of_value(data: Any, limit: int) -> int:
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            if deepest > limit:
                break
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def check_json(body: bytes) -> None:
    """Refuse what RFC 8259 does not allow but Python's json (FastAPI's parser) accepts: NaN,
    Infinity and -Infinity, numbers that overflow to infinity, a byte order mark; and anything
    nested deeper than MAX_JSON_DEPTH. orjson is strict about all of these."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if _depth_of_text(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise YanaError.of(ErrorCode.BAD_REQUEST, f"JSON body nests deeper than {MAX_JSON_DEPTH} levels") from None
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"malformed JSON body: {exc}") from None
    if _depth_of_value(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"JSON body nests deeper than {MAX_JSON_DEPTH} levels")


def jsonrpc_parse_error(body: bytes) -> bytes | None:
    """JSON-RPC's parse error (-32700) for a /mcp body that is not RFC 8259 JSON, None for one that
    is. The MCP transport parses with Python's json, which takes NaN, Infinity and a byte order
    mark; refused here as on every JSON route (check_json), in JSON-RPC's shape."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        error = {"code": -32700, "message": f"Parse error: {exc}"}
        return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error})
    return None


def check_no_body(body: bytes) -> None:
    """An operation without a request body refuses one that is there, rather than ignoring it
    (a malformed `{` is a client's bug worth telling); an empty object or null is no body."""
    if body.strip() in (b"", b"{}", b"null"):
        return
    raise YanaError.of(ErrorCode.BAD_REQUEST, "this operation takes no request body (send none, or {})")


_ENCODED_SLASH = re.compile(rb"%2f", re.IGNORECASE)


def keep_encoded_slashes(scope: Scope) -> None:
    """`/v1%2fversion` is one path segment, not `/v1/version`: the server decodes %2F into the
    path the router matches, so it is put back as %2F within its segment (no route takes a slash
    inside a parameter; such a request now answers 404 or its route's own id check)."""
    raw = scope.get("raw_path")
    if not raw or not _ENCODED_SLASH.search(raw):
        return
    text = raw.decode("latin-1")
    scope["path"] = "/".join(
        unquote(seg, encoding="utf-8", errors="surrogateescape").replace("/", "%2F") for seg in text.split("/")
    )


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"... ({len(text) - limit} more characters not shown)"


def rewrite_mcp_message(msg: Any) -> Any:
    """A JSON-RPC message from /mcp as it leaves: an error carries the request's run_id and
    trace_id in `error.data` (its shape stays JSON-RPC's); an error message, or the text of a tool
    error result (the SDK's input validation quotes the offending argument whole), is cut to
    MAX_ERROR_TEXT characters."""
    if isinstance(msg, list):
        return [rewrite_mcp_message(m) for m in msg]
    if not isinstance(msg, dict):
        return msg
    err = msg.get("error")
    if isinstance(err, dict):
        data = err.get("data")
        ids = context.body_ids()
        if isinstance(data, dict):
            err["data"] = {**data, **ids}
        else:
            err["data"] = {**ids, **({"detail": _truncate(str(data), MAX_ERROR_TEXT)} if data else {})}
        if isinstance(err.get("message"), str):
            err["message"] = _truncate(err["message"], MAX_ERROR_TEXT)
    result = msg.get("result")
    if isinstance(result, dict) and result.get("isError"):
        for item in result.get("content") or []:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                item["text"] = _truncate(item["text"], MAX_ERROR_TEXT)
    return msg


class McpResponse:
    """Rewrites what /mcp sends (rewrite_mcp_message): a JSON answer whole, an event stream event
    by event; a plain-text error of the transport (wrong Accept, no session) becomes a JSON-RPC
    error with the ids."""

    def __init__(self, send: Send):
        self._send = send
        self.start: Message | None = None
        self.mode = "pass"
        self.chunks: list[bytes] = []

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = Headers(raw=list(message.get("headers", [])))
            ctype = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
            if ctype == "text/event-stream":
                self.mode = "sse"
            elif ctype == "application/json" or message["status"] >= 400:
                self.mode = "json"
                self.start = message
                return
            await self._send(message)
            return
        if message["type"] != "http.response.body":
            await self._send(message)
            return
        if self.mode == "sse":
            await self._send({**message, "body": self._rewrite_events(message.get("body", b""))})
            return
        if self.mode == "json":
            self.chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            assert self.start is not None
            body = self._rewrite_json(b"".join(self.chunks), self.start["status"])
            headers = [
                (k, v)
                for k, v in self.start.get("headers", [])
                if k.lower() not in (b"content-length", b"content-type")
            ]
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await self._send({**self.start, "headers": headers})
            await self._send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await self._send(message)

    @staticmethod
    def _rewrite_json(body: bytes, status: int) -> bytes:
        try:
            data = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            data = None
        if data is None and status >= 400:  # the transport's plain text
            text = body.decode("utf-8", "replace").strip() or "request refused"
            data = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}}
        if data is None:
            return body
        return orjson.dumps(rewrite_mcp_message(data))

    @staticmethod
    def _rewrite_events(chunk: bytes) -> bytes:
        if b"data:" not in chunk:
            return chunk
        lines = chunk.split(b"\n")
        for i, line in enumerate(lines):
            stripped = line.rstrip(b"\r")
            if not stripped.startswith(b"data:"):
                continue
            try:
                msg = orjson.loads(stripped[5:])
            except orjson.JSONDecodeError:
                continue
            ending = line[len(stripped) :]
            lines[i] = b"data: " + orjson.dumps(rewrite_mcp_message(msg)) + ending
        return b"\n".join(lines)


def _json_request(headers: Headers) -> bool:
    essence = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    return essence == "application/json" or (essence.startswith("application/") and essence.endswith("+json"))


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


def _is_mcp(scope: Scope) -> bool:
    path = scope.get("path", "")
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


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


def capped_receive(receive: Receive, cap: int) -> Receive:
    """Counts body bytes as they arrive; over the cap -> 413 (an HTTPException, so FastAPI's body
    reader passes it on instead of turning it into a 400)."""
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > cap:
                raise StarletteHTTPException(413, f"request body exceeds {cap} bytes")
        return message

    return wrapped


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise YanaError.of(ErrorCode.BAD_REQUEST, "client disconnected before the body was complete")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying_receive(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped


def app_redis(app: FastAPI) -> Redis:
    """The app's async Redis client (made by the lifespan; lazily here when served without one,
    e.g. through a bare ASGI transport)."""
    r = getattr(app.state, "redis", None)
    if r is None:
        settings = getattr(app.state, "settings", None)
        r = app.state.redis = get_async_redis(settings)
    return r


class ContractMiddleware:
    def __init__(self, app: ASGIApp, *, fastapi_app: FastAPI, settings: Settings, internal_secret: str):
        self.app = app
        self.fastapi_app = fastapi_app
        self.settings = settings
        self.routes = RouteIndex(fastapi_app, settings)
        self.auth = BearerAuth(settings)
        self.default_rate = Rate.parse(settings.rate_limit, settings.rate_burst)
        self.internal_secret = internal_secret.encode()
        self._limiter: tuple[Redis, TokenBucketLimiter] | None = None
        self._auth_failures: tuple[Redis, AuthFailureLimiter] | None = None
        self.liveness = ProcessLiveness(settings.api_liveness_ttl_s)
        self._background: set[asyncio.Task] = set()  # idempotency releases retried after a Redis failure

    # -- shared state -------------------------------------------------------------------------
    def redis(self) -> Redis:
        return app_redis(self.fastapi_app)

    def limiter(self) -> TokenBucketLimiter:
        r = self.redis()
        if self._limiter is None or self._limiter[0] is not r:
            self._limiter = (r, TokenBucketLimiter(r))
        return self._limiter[1]

    # -- entry ----------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # No route takes websockets today; one added later is closed to callers without a token.
        if (
            scope["type"] == "websocket"
            and self.auth.enabled
            and not self.auth.valid(bearer_token(Headers(scope=scope).get("authorization")))
        ):
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        keep_encoded_slashes(scope)
        corr, tracestate = correlation.from_headers(scope.get("headers", []))
        scope["headers"] = correlation.rewrite_request_headers(scope.get("headers", []), corr, tracestate)
        ctx_token = context.set_current(corr)
        _, resolved = self.routes.match(scope)
        scope["yana.policy"] = resolved
        echo = correlation.response_headers(corr, tracestate)
        outcome: dict[str, Any] = {"status": 500, "started": False}

        async def send_out(message: Message) -> None:
            if message["type"] == "http.response.start":
                outcome["status"] = message["status"]
                outcome["started"] = True
                elapsed = f"{(time.perf_counter() - started) * 1000:.1f}".encode()
                message = {
                    **message,
                    "headers": [*message.get("headers", []), *echo, (b"x-request-duration-ms", elapsed)],
                }
            await send(message)

        try:
            await self.handle(scope, receive, send_out, resolved)
        except Exception as exc:  # noqa: BLE001 - every failure leaves as the seed's error body
            err = from_exception(exc)
            if err.status >= 500:
                log.error("unhandled error", exc_info=exc)
            if outcome["started"]:
                raise
            await error_response(err)(scope, receive, send_out)
        finally:
            access_log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "route": resolved.route_path,
                    "path": scope.get("path", "")[:200],
                    "operation_id": resolved.operation_id,
                    "status": outcome["status"],
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
            context.reset(ctx_token)

    async def handle(self, scope: Scope, receive: Receive, send: Send, rp: ResolvedPolicy) -> None:
        headers = Headers(scope=scope)
        client = scope.get("client")
        identity = None
        if not rp.policy.public:
            identity = await self.admit(headers, client[0] if client else None, rp)

        method = scope.get("method", "GET")
        length_header = headers.get("content-length")
        try:
            length = int(length_header) if length_header is not None else None
        except ValueError:
            raise YanaError.of(ErrorCode.BAD_REQUEST, "invalid Content-Length") from None
        has_body = (length or 0) > 0 or "transfer-encoding" in headers
        if (
            has_body
            and rp.media_types
            and method in _BODY_METHODS
            and not media_type_accepted(headers.get("content-type"), rp.media_types)
        ):
            raise YanaError.of(
                ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be one of: {', '.join(rp.media_types)}"
            )
        if length is not None and length > rp.body_cap:
            raise YanaError.of(ErrorCode.PAYLOAD_TOO_LARGE, f"request body exceeds {rp.body_cap} bytes")
        receive = capped_receive(receive, rp.body_cap)
        body: bytes | None = None
        if has_body and method in _BODY_METHODS:
            body, receive = await self.checked_body(headers, receive, rp)

        if _is_mcp(scope):
            if method == "POST" and not _json_request(headers):
                raise YanaError.of(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json")
            out = McpResponse(send)
            refused = jsonrpc_parse_error(body) if body is not None else None
            if refused is not None:  # through McpResponse: error.data gets the ids
                await out.send({"type": "http.response.start", "status": 400, "headers": []})
                await out.send({"type": "http.response.body", "body": refused, "more_body": False})
                return
            await self.app(scope, receive, out.send)
            return

        raw_key = headers.get(IDEMPOTENCY_HEADER)
        if rp.idempotent and method == "POST" and raw_key is not None:
            identity = identity or caller_identity(None, None)
            await self.idempotent_call(scope, receive, send, rp, identity, raw_key, body)
            return
        await self.call_app(scope, receive, send, rp)

    @staticmethod
    async def checked_body(headers: Headers, receive: Receive, rp: ResolvedPolicy) -> tuple[bytes | None, Receive]:
        """Read and check a body before the app: one sent to an operation that takes none (400),
        JSON that RFC 8259 does not allow or that nests too deep (400). Returns the body (None when
        left unread: forms and uploads stream to the route) and the receive that replays it."""
        if rp.api_route and not rp.has_body:
            body = await read_body(receive)
            check_no_body(body)
            return body, replaying_receive(body, receive)
        if not _json_request(headers):
            return None, receive
        body = await read_body(receive)
        if rp.api_route:
            check_json(body)
        elif json_depth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise YanaError.of(ErrorCode.BAD_REQUEST, f"JSON body nests deeper than {MAX_JSON_DEPTH} levels")
        return body, replaying_receive(body, receive)

    async def admit(self, headers: Headers, address: str | None, rp: ResolvedPolicy) -> str:
        """Authenticate and rate-limit a request to a protected route; returns the caller's
        identity. A wrong token is 401 and counts against its address; once the address has failed
        AUTH_FAIL_LIMIT times in AUTH_FAIL_WINDOW_S every request of it is 429, a right token
        included (checked together with the token bucket, so one Redis round trip as before).
        In-process MCP tool calls carry the caller's own header and were counted on /mcp already."""
        internal = self._internal(headers)
        if not self.auth.enabled:
            identity = caller_identity(None, address)
            if not internal:
                await self.check_rate(identity, rp)
            return identity
        where = address or "unknown"
        try:
            token = self.auth.authenticate(headers.get("authorization"))
        except YanaError:
            if not internal:
                decision = await self.auth_failures().failed(where)
                if not decision.allowed:
                    raise self._auth_throttled(decision) from None
            raise
        identity = caller_identity(token, address)
        if not internal:
            lock, _ = await asyncio.gather(self.auth_failures().check(where), self.check_rate(identity, rp))
            if not lock.allowed:
                raise self._auth_throttled(lock)
        return identity

    @staticmethod
    def _auth_throttled(decision) -> YanaError:
        err = YanaError.of(
            ErrorCode.RATE_LIMITED,
            f"too many failed authentications from this address; retry in {decision.retry_after_s} s",
        )
        err.headers = {"Retry-After": str(decision.retry_after_s)}  # type: ignore[attr-defined]
        return err

    def auth_failures(self) -> AuthFailureLimiter:
        r = self.redis()
        if self._auth_failures is None or self._auth_failures[0] is not r:
            limiter = AuthFailureLimiter(r, self.settings.auth_fail_limit, self.settings.auth_fail_window_s)
            self._auth_failures = (r, limiter)
        return self._auth_failures[1]

    def _internal(self, headers: Headers) -> bool:
        given = headers.get(INTERNAL_HEADER)
        return given is not None and hmac.compare_digest(given.encode(), self.internal_secret)

    async def check_rate(self, identity: str, rp: ResolvedPolicy) -> None:
        if rp.bucket == "default":
            rate = self.default_rate
        else:
            rate = Rate.parse(rp.policy.rate or self.settings.rate_limit, rp.policy.burst or self.settings.rate_burst)
        decision = await self.limiter().hit_or_allow(f"{rp.bucket}:{identity}", rate)
        if not decision.allowed:
            err = YanaError.of(ErrorCode.RATE_LIMITED, f"rate limit exceeded; retry in {decision.retry_after_s} s")
            err.headers = {"Retry-After": str(decision.retry_after_s)}  # type: ignore[attr-defined]
            raise err

    async def call_app(
        self, scope: Scope, receive: Receive, send: Send, rp: ResolvedPolicy, *, capture: bool = False
    ) -> ResponseBuffer:
        """Run the app under the route's time limit. With capture the whole response is held
        back and returned unsent (the caller flushes it)."""
        buffer = ResponseBuffer(send, envelope=rp.api_route, capture=capture)
        limit = rp.timeout(self.settings)
        if not limit:
            await self.app(scope, receive, buffer.send)
        else:
            try:
                async with asyncio.timeout(limit) as deadline:
                    await self.app(scope, receive, buffer.send)
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
        body: bytes | None = None,
    ) -> None:
        key = parse_key(raw_key)
        if body is None:
            body = await read_body(receive)
        headers = Headers(scope=scope)
        fp = fingerprint(
            scope["method"], scope["path"], scope.get("query_string", b""), headers.get("content-type"), body
        )
        redis = self.redis()
        await self.liveness.ensure(redis)
        store = IdempotencyStore(redis, self.settings.idempotency_ttl_s, self.liveness.process_id)
        lease_s = int((rp.timeout(self.settings) or self.settings.request_timeout_s) + 30)
        claimed = await store.claim(identity, key, fp, lease_s)
        if isinstance(claimed, StoredResponse):
            await self.replay(send, claimed, rp)
            return
        bound = context.set_idempotency_record(store.jobs_key(claimed.key))
        try:
            buffer = await self.call_app(scope, replaying_receive(body, receive), send, rp, capture=True)
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

    async def replay(self, send: Send, stored: StoredResponse, rp: ResolvedPolicy) -> None:
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
