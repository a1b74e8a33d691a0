"""The MCP endpoint (streamable HTTP at /mcp): every documented operation is a tool named by its
operation_id, with the route's own request schema as the tool's input schema (tool names and
arguments equal the HTTP ones).

Tool calls go through the whole contract again as in-process HTTP calls: the caller's bearer
token and correlation headers are forwarded, so auth, body caps, time limits and error bodies
are the HTTP ones. They skip the rate limit (marked by a per-process secret header), since the
MCP request that carried the call was already counted.

A tool's result is the route's JSON twice over, as MCP clients expect: as text content and as
structured content. A route's error becomes a tool error (isError) whose text is the contract's
error body, so an agent sees the same `code` (BAD_REQUEST, NOT_FOUND, RATE_LIMITED...) as an HTTP
client would.

/mcp is a route like the others (fastapi_mcp registers it with `api_route` on the router it is
given): McpRoute, a ContractRoute, so it has the same auth, rate limit, body cap and JSON checks,
and answers in JSON-RPC's terms where the transport would not (McpResponse).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any
from urllib.parse import quote

import httpx
import mcp.types as types
import orjson
from fastapi import APIRouter, FastAPI
from fastapi_mcp import FastApiMCP
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Scope, Send

from api.contract.body import json_request
from api.contract.errors import error_response, from_exception
from api.contract.gate import Admitted, RouteGate
from api.contract.route import ContractRoute
from yana import context
from yana.errors import ErrorCode, YanaError
from yana.settings import Settings

MCP_PATH = "/mcp"
# Operations that answer bytes, not the JSON envelope (a label's image): a tool too, whose result
# is MCP image content (base64 with its media type) instead of JSON text.
BINARY_OPERATIONS = ["label_image"]
MAX_ERROR_TEXT = 2000  # characters of an error text a tool result or JSON-RPC error may carry
FORWARDED_HEADERS = ["authorization", "x-run-id", "x-trace-id", "traceparent", "tracestate"]


def tool_result(status: int, payload: Any, raw_text: str) -> types.CallToolResult:
    """The MCP result of one HTTP answer: JSON as text and structured content; >= 400 is an error."""
    text = json.dumps(payload, ensure_ascii=False) if payload is not None else raw_text
    structured = payload if isinstance(payload, dict) else None
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structuredContent=structured,
        isError=status >= 400,
    )


def error_result(code: str, message: str, retryable: bool = False) -> types.CallToolResult:
    body = {"error": {"code": code, "message": message, "retryable": retryable}, **context.body_ids()}
    return tool_result(400, body, "")


def binary_result(content_type: str, data: bytes) -> types.CallToolResult:
    """A route's bytes as a tool result: an image as MCP image content, anything else as base64
    text (a tool result cannot carry raw bytes)."""
    media = content_type.split(";", 1)[0].strip().lower()
    encoded = base64.b64encode(data).decode()
    if media.startswith("image/"):
        return types.CallToolResult(content=[types.ImageContent(type="image", data=encoded, mimeType=media)])
    text = json.dumps({"content_type": media, "base64": encoded})
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def route_request(op: dict[str, Any], arguments: dict[str, Any]) -> tuple[str, str, dict, dict, Any]:
    """The HTTP request a tool call stands for: (method, path, query, headers, JSON body). Shared
    by /mcp and the stdio bridge (`yana mcp`), so both call routes the same way."""
    path, method = op["path"], op["method"].upper()
    args = dict(arguments or {})
    query: dict[str, Any] = {}
    headers: dict[str, str] = {}
    for param in op.get("parameters", []):
        name, where = param.get("name"), param.get("in")
        if name not in args:
            continue
        if where == "path":
            path = path.replace("{" + name + "}", quote(str(args.pop(name)), safe=""))
        elif where == "query":
            query[name] = args.pop(name)
        elif where == "header":
            headers[name] = str(args.pop(name))
    body = args if (args and method in ("POST", "PUT", "PATCH")) else None
    return method, path, query, headers, body


async def call_route(
    client: httpx.AsyncClient, op: dict[str, Any], arguments: dict[str, Any], headers: dict | None = None
) -> types.CallToolResult:
    method, path, query, own_headers, body = route_request(op, arguments)
    waited = 0.0
    while True:
        response = await client.request(
            method, path, params=query, headers={**(headers or {}), **own_headers}, json=body
        )
        # Rate limited (the stdio bridge's calls are counted; /mcp's in-process ones are not):
        # wait as told, up to RATE_WAIT_S per call, then the 429 is the tool's error.
        pause = retry_after_s(response)
        if pause is None or waited + pause > RATE_WAIT_S:
            break
        await asyncio.sleep(pause)
        waited += pause
    content_type = response.headers.get("content-type", "")
    if response.status_code < 400 and not content_type.startswith("application/json"):
        return binary_result(content_type, response.content)
    try:
        payload = response.json()
    except ValueError:
        payload = None
    return tool_result(response.status_code, payload, response.text)


RATE_WAIT_S = 30.0


def retry_after_s(response: httpx.Response) -> float | None:
    if response.status_code != 429:
        return None
    try:
        return min(max(float(response.headers.get("retry-after", "1")), 0.1), RATE_WAIT_S)
    except ValueError:
        return 1.0


class YanaMCP(FastApiMCP):
    async def _execute_api_tool(  # type: ignore[override]
        self,
        client: httpx.AsyncClient,
        tool_name: str,
        arguments: dict[str, Any],
        operation_map: dict[str, dict[str, Any]],
        http_request_info=None,
    ) -> types.CallToolResult:
        if tool_name not in operation_map:
            return error_result("NOT_FOUND", f"unknown tool {tool_name!r}")
        forwarded = {}
        if http_request_info and http_request_info.headers:
            forwarded = {k: v for k, v in http_request_info.headers.items() if k.lower() in self._forward_headers}
        return await call_route(client, operation_map[tool_name], arguments, forwarded)


def mount_mcp(app: FastAPI, settings: Settings, internal_header: str, internal_secret: str) -> FastApiMCP:
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url="http://apiserver",
        timeout=settings.mcp_tool_timeout_s,
        headers={internal_header: internal_secret},
    )
    mcp = YanaMCP(
        app,
        name=app.title,
        description=app.description,
        http_client=client,
        headers=FORWARDED_HEADERS,
        describe_all_responses=False,
    )
    router = APIRouter(route_class=McpRoute)
    mcp.mount_http(router, mount_path=MCP_PATH)  # fastapi_mcp then includes the router in the app
    return mcp


def jsonrpc_parse_error(body: bytes) -> bytes | None:
    """JSON-RPC's parse error (-32700) for a /mcp body that is not RFC 8259 JSON, None for one that
    is. The MCP transport parses with Python's json, which takes NaN, Infinity and a byte order
    mark; refused here as on every JSON route (api.contract.body.check_json), in JSON-RPC's shape."""
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        error = {"code": -32700, "message": f"Parse error: {exc}"}
        return orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error})
    return None


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


class McpRoute(ContractRoute):
    """/mcp: admitted as every route is; then answered by the MCP transport through McpResponse,
    with no time limit (a session's stream stays open) and no Idempotency-Key (JSON-RPC has ids)."""

    async def respond(self, gate: RouteGate, scope: Scope, send: Send, req: Admitted) -> None:
        body, receive = req.body, req.receive
        if scope["method"] == "POST" and not json_request(Headers(scope=scope)):
            raise YanaError.of(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json")
        out = McpResponse(send)
        refused = jsonrpc_parse_error(body) if body is not None else None
        if refused is not None:  # through McpResponse: error.data gets the ids
            await out.send({"type": "http.response.start", "status": 400, "headers": []})
            await out.send({"type": "http.response.body", "body": refused, "more_body": False})
            return
        try:
            await super(ContractRoute, self).handle(scope, receive, out.send)
        except StarletteHTTPException as exc:  # a wrong method (405), raised before the transport runs
            await error_response(from_exception(exc), exc.headers)(scope, receive, out.send)
