"""The request body as the contract admits it, before FastAPI reads it: media type (415), size
(413, by Content-Length and as it streams), strictly RFC 8259 JSON nesting at most MAX_JSON_DEPTH
deep (400), no body where an operation takes none (400).

ASGI-level (receive functions), so a route reads the checked body as if it came off the wire.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive, Scope

from api.contract.policy import ResolvedPolicy, media_type_accepted
from yana.errors import ErrorCode, YanaError

BODY_METHODS = {"POST", "PUT", "PATCH"}
# No request of this API nests deeper; far deeper JSON would exhaust a recursive parser (Python's
# json fails near 1000 levels) somewhere behind this layer, so it is refused before anyone parses it.
MAX_JSON_DEPTH = 64
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


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


def check_no_body(body: bytes) -> None:
    """An operation without a request body refuses one that is there, rather than ignoring it
    (a malformed `{` is a client's bug worth telling); an empty object or null is no body."""
    if body.strip() in (b"", b"{}", b"null"):
        return
    raise YanaError.of(ErrorCode.BAD_REQUEST, "this operation takes no request body (send none, or {})")


def json_request(headers: Headers) -> bool:
    """JSON by its Content-Type (application/json or application/*+json); a response's too."""
    essence = (headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    return essence == "application/json" or (essence.startswith("application/") and essence.endswith("+json"))


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


async def admit_body(scope: Scope, receive: Receive, rp: ResolvedPolicy) -> tuple[bytes | None, Receive]:
    """Media type (415) and size (413) of the request's body, then its content (400) where the
    contract reads it before the route: returns the body (None when left unread: no body, a form
    or an upload streams to the route) and the receive the route reads it from (capped, replaying
    what was read)."""
    headers = Headers(scope=scope)
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
        and method in BODY_METHODS
        and not media_type_accepted(headers.get("content-type"), rp.media_types)
    ):
        raise YanaError.of(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"Content-Type must be one of: {', '.join(rp.media_types)}"
        )
    if length is not None and length > rp.body_cap:
        raise YanaError.of(ErrorCode.PAYLOAD_TOO_LARGE, f"request body exceeds {rp.body_cap} bytes")
    receive = capped_receive(receive, rp.body_cap)
    if not (has_body and method in BODY_METHODS):
        return None, receive
    if rp.api_route and not rp.has_body:
        body = await read_body(receive)
        check_no_body(body)
        return body, replaying_receive(body, receive)
    if not json_request(headers):
        return None, receive
    body = await read_body(receive)
    if rp.api_route:
        check_json(body)
    elif json_depth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    return body, replaying_receive(body, receive)
