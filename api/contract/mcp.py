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
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any
from urllib.parse import quote

import httpx
import mcp.types as types
from fastapi import FastAPI
from fastapi_mcp import FastApiMCP

from yana import context
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
        pause = _retry_after(response)
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


def _retry_after(response: httpx.Response) -> float | None:
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
    mcp.mount_http(app, mount_path=MCP_PATH)
    return mcp
