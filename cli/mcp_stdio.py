"""`yana mcp`: the API's MCP tools over stdio, for desktop agents and for the talk app, which
spawns its speaker as a subprocess.

It is a bridge: every tool is one the API serves at /mcp (same names, schemas, results and error
bodies: the same OpenAPI-to-tool converter and the same result shaping), called as the HTTP route
it stands for. `--api URL` talks to a
running API; `--local` first starts the API inside this process on a private loopback port, so
the pipelines run here (Redis and Chroma still come from REDIS_URL / CHROMA_URL).

Framing, per message: the MCP spec's newline-delimited JSON, or LSP-style `Content-Length:`
headers, which some existing clients send; a reply goes out in the framing its request came in.
`initialize` without `protocolVersion` is answered with the server's version, and a client that
never sends `notifications/initialized` is served all the same. Nothing but protocol messages is
written to stdout: logs go to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, BinaryIO

import httpx
from fastapi_mcp.openapi.convert import convert_openapi_to_mcp_tools
from mcp.types import LATEST_PROTOCOL_VERSION

from api.contract.mcp import RATE_WAIT_S, call_route, error_result, retry_after_s

log = logging.getLogger("yana.mcp.stdio")

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", LATEST_PROTOCOL_VERSION)
LOGS_URI = "logs://today"
MAX_MESSAGE_BYTES = 16 * 1024 * 1024

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603


@dataclass
class Incoming:
    framing: str  # "ndjson" | "lsp"
    payload: bytes


def read_messages(stream: BinaryIO):
    """Yield each message with the framing it came in; stops at end of input."""
    while True:
        line = stream.readline(MAX_MESSAGE_BYTES)
        if not line:
            return
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1].strip() or 0)
            while True:  # further headers (Content-Type) up to the blank line
                header = stream.readline(65536)
                if not header or header in (b"\r\n", b"\n"):
                    break
            if length > MAX_MESSAGE_BYTES:
                stream.read(length)
                yield Incoming("lsp", b"")
                continue
            yield Incoming("lsp", stream.read(length))
        elif line.strip():
            yield Incoming("ndjson", line.strip())


def frame(message: dict, framing: str) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    if framing == "lsp":
        return b"Content-Length: %d\r\n\r\n" % len(body) + body
    return body + b"\n"


class Upstream:
    """The API's tools, built from its OpenAPI document with the same converter /mcp uses, and
    called as the routes they stand for over one keep-alive HTTP connection (no second hop
    through /mcp: the result shaping and error bodies are /mcp's own, from api.contract.mcp)."""

    def __init__(self, api_url: str, token: str | None, timeout_s: float):
        self.api_url = api_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None
        self._tools: list[dict] | None = None
        self._ops: dict[str, dict] = {}
        self._lock = asyncio.Lock()

    async def _load(self) -> httpx.AsyncClient:
        async with self._lock:
            if self._client is None:
                self._client = httpx.AsyncClient(base_url=self.api_url, headers=self.headers, timeout=self.timeout_s)
            if self._tools is None:
                r = await self._client.get("/openapi.json")
                waited = 0.0
                # rate limited (this client's calls are counted): wait as told, as tool calls do
                while (pause := retry_after_s(r)) is not None and waited + pause <= RATE_WAIT_S:
                    await asyncio.sleep(pause)
                    waited += pause
                    r = await self._client.get("/openapi.json")
                if r.status_code != 200:
                    raise _RpcError(
                        INTERNAL_ERROR, f"the API at {self.api_url} answered {r.status_code}: {r.text[:300]}"
                    )
                tools, self._ops = convert_openapi_to_mcp_tools(r.json())
                self._tools = [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in tools]
            return self._client

    async def list_tools(self) -> dict:
        await self._load()
        return {"tools": self._tools}

    async def call_tool(self, name: str, arguments: dict) -> dict:
        client = await self._load()
        if name not in self._ops:
            result = error_result("NOT_FOUND", f"unknown tool {name!r}")
        else:
            result = await call_route(client, self._ops[name], arguments)
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


class StdioBridge:
    def __init__(self, upstream: Upstream, api_url: str, token: str | None, logs_resource: bool, out: BinaryIO):
        self.upstream = upstream
        self.api_url = api_url.rstrip("/")
        self.token = token
        self.logs_resource = logs_resource
        self.out = out
        self._write_lock = threading.Lock()

    def send(self, message: dict, framing: str) -> None:
        with self._write_lock:
            self.out.write(frame(message, framing))
            self.out.flush()

    async def handle(self, msg: Incoming) -> None:
        try:
            request = json.loads(msg.payload)
        except (ValueError, RecursionError):
            self.send(_error(None, PARSE_ERROR, "parse error: not a JSON message"), msg.framing)
            return
        if isinstance(request, list):  # JSON-RPC batch
            replies = [r for r in [await self._one(item) for item in request] if r is not None]
            if replies:
                with self._write_lock:
                    self.out.write(frame(replies, msg.framing))  # type: ignore[arg-type]
                    self.out.flush()
            return
        reply = await self._one(request)
        if reply is not None:
            self.send(reply, msg.framing)

    async def _one(self, request: Any) -> dict | None:
        if (
            not isinstance(request, dict)
            or request.get("jsonrpc") != "2.0"
            or not isinstance(request.get("method"), str)
        ):
            return _error(request.get("id") if isinstance(request, dict) else None, INVALID_REQUEST, "invalid request")
        rid, method, params = request.get("id"), request["method"], request.get("params") or {}
        if rid is None:  # a notification (initialized, cancelled...): nothing to answer
            return None
        try:
            result = await self._dispatch(method, params if isinstance(params, dict) else {})
        except _RpcError as exc:
            return _error(rid, exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - any upstream failure is one JSON-RPC error, never a crash
            log.warning("mcp request %s failed", method, exc_info=True)
            return _error(rid, INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"[:500])
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    async def _dispatch(self, method: str, params: dict) -> dict:
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in SUPPORTED_VERSIONS else LATEST_PROTOCOL_VERSION
            caps: dict[str, Any] = {"tools": {"listChanged": False}}
            if self.logs_resource:
                caps["resources"] = {"subscribe": False, "listChanged": False}
            from yana import __version__

            return {
                "protocolVersion": version,
                "capabilities": caps,
                "serverInfo": {"name": "yana", "version": __version__},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return await self.upstream.list_tools()
        if method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str):
                raise _RpcError(INVALID_PARAMS, "tools/call needs a tool name")
            arguments = params.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise _RpcError(INVALID_PARAMS, "tool arguments must be an object")
            return await self.upstream.call_tool(name, arguments)
        if method == "resources/list" and self.logs_resource:
            return {
                "resources": [
                    {
                        "uri": LOGS_URI,
                        "name": "logs/today",
                        "description": "today's chat turns (JSON lines, personal data masked), read-only",
                        "mimeType": "application/x-ndjson",
                    }
                ]
            }
        if method == "resources/read" and self.logs_resource:
            if params.get("uri") != LOGS_URI:
                raise _RpcError(INVALID_PARAMS, f"unknown resource {params.get('uri')!r}")
            return {
                "contents": [{"uri": LOGS_URI, "mimeType": "application/x-ndjson", "text": await self._logs_today()}]
            }
        empty = {
            "resources/list": "resources",
            "resources/templates/list": "resourceTemplates",
            "prompts/list": "prompts",
        }
        if method in empty:
            return {empty[method]: []}
        raise _RpcError(METHOD_NOT_FOUND, f"method not found: {method}")

    async def _logs_today(self) -> str:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        async with httpx.AsyncClient(base_url=self.api_url, timeout=self.upstream.timeout_s, headers=headers) as c:
            r = await c.get("/v1/logs/today")
        if r.status_code != 200:
            raise _RpcError(INTERNAL_ERROR, f"logs/today: {r.text[:300]}")
        return "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in r.json()["records"])


class _RpcError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _error(rid: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def start_local_api() -> str:
    """Serve the API inside this process on a free loopback port; returns its URL."""
    import uvicorn

    from cli.processes import free_port

    port = free_port()
    config = uvicorn.Config("api.main:app", host="127.0.0.1", port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]  # the bridge owns signals
    threading.Thread(target=server.run, name="yana-local-api", daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/v1/version", timeout=1).status_code == 200:
                return url
        threading.Event().wait(0.2)
    raise RuntimeError("the in-process API did not start within 120 s")


def serve(api_url: str, token: str | None, *, logs_resource: bool, timeout_s: float) -> None:
    """Run the bridge until stdin closes."""
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed by accident must not corrupt the protocol stream
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    loop = asyncio.new_event_loop()
    upstream = Upstream(api_url, token, timeout_s)
    bridge = StdioBridge(upstream, api_url, token, logs_resource, out)
    queue: asyncio.Queue[Incoming | None] = asyncio.Queue()

    def reader() -> None:
        for msg in read_messages(sys.stdin.buffer):
            loop.call_soon_threadsafe(queue.put_nowait, msg)
        loop.call_soon_threadsafe(queue.put_nowait, None)

    async def main() -> None:
        threading.Thread(target=reader, name="mcp-stdin", daemon=True).start()
        pending: set[asyncio.Task] = set()
        while (msg := await queue.get()) is not None:
            task = asyncio.create_task(bridge.handle(msg))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await upstream.close()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
