"""`yana mcp` over stdio against the real stack: the official SDK's stdio client, a raw client that
writes LSP-style `Content-Length:` framed messages (initialize without protocolVersion, no
initialized notification), newline-delimited JSON, malformed input, and `--local`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from cli import processes

ROOT = Path(__file__).resolve().parent.parent


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "mcp", *args]


def _env(stack, **extra: str) -> dict:
    return processes.child_env(
        REDIS_URL=stack.redis_url, CHROMA_URL=stack.chroma_url, DATA_DIR=str(stack.data_dir), **extra
    )


@pytest.fixture(scope="module")
def api_url(stack):
    return stack.start_api(name="api-mcp-stdio", RATE_LIMIT="10000/second", RATE_BURST="10000").url


class RawClient:
    """Speaks to the bridge's stdin/stdout by hand, in the framing each test chooses."""

    def __init__(self, argv: list[str], env: dict):
        self.proc = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )

    def send_framed(self, message: dict | bytes) -> None:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(
            b"Content-Length: %d\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" % len(body) + body
        )
        self.proc.stdin.flush()

    def send_line(self, message: dict | bytes) -> None:
        body = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(body + b"\n")
        self.proc.stdin.flush()

    def read_framed(self) -> dict:
        header = self.proc.stdout.readline()
        assert header.lower().startswith(b"content-length:"), header
        length = int(header.split(b":")[1])
        assert self.proc.stdout.readline() == b"\r\n"
        return json.loads(self.proc.stdout.read(length))

    def read_line(self) -> dict:
        line = self.proc.stdout.readline()
        assert line and not line.lower().startswith(b"content-length"), line
        return json.loads(line)

    def close(self) -> str:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        rest = self.proc.stdout.read()
        assert rest == b"", f"nothing but protocol messages on stdout, got {rest[:200]!r}"
        return self.proc.stderr.read().decode(errors="replace")


def test_sdk_stdio_client_lists_and_calls_tools(stack, api_url):
    params = StdioServerParameters(
        command=sys.executable, args=_argv("--api", api_url)[1:], env=_env(stack), cwd=str(ROOT)
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name for t in (await session.list_tools()).tools}
            chat = await session.call_tool("chat", {"user_text": "小樽のお酒ある？"})
            memo = await session.call_tool("save_memo", {"session_id": "stdio", "text": "stdio で保存"})
            missing = await session.call_tool("get_job", {"job_id": "0" * 32})
            return tools, chat, memo, missing

    tools, chat, memo, missing = asyncio.run(run())
    assert {"chat", "search", "ingest", "wait_job", "save_memo", "query_memo"} <= tools
    assert not chat.isError and json.loads(chat.content[0].text)["reply"]
    assert chat.structuredContent and chat.structuredContent["reply"]
    assert not memo.isError and json.loads(memo.content[0].text)["memo_id"]
    assert missing.isError and json.loads(missing.content[0].text)["error"]["code"] == "NOT_FOUND"


def test_content_length_framing_without_protocol_version_or_initialized(stack, api_url):
    c = RawClient(_argv("--api", api_url), _env(stack))
    try:
        c.send_framed({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}})
        init = c.read_framed()
        assert init["id"] == 1 and init["result"]["protocolVersion"]
        assert init["result"]["serverInfo"]["name"] == "yana"
        # no notifications/initialized: the next requests are served all the same
        c.send_framed({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        names = {t["name"] for t in c.read_framed()["result"]["tools"]}
        assert "chat" in names
        c.send_framed(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": {
                    "name": "chat",
                    "arguments": {"user_text": "辛口のお酒を教えて", "context": {"sessionId": "raw-1"}},
                },
            }
        )
        result = c.read_framed()["result"]
        assert not result.get("isError") and json.loads(result["content"][0]["text"])["reply"]
        # the same process answers a newline-delimited request in newline-delimited JSON
        c.send_line({"jsonrpc": "2.0", "id": 4, "method": "ping"})
        assert c.read_line() == {"jsonrpc": "2.0", "id": 4, "result": {}}
    finally:
        c.close()


def test_malformed_and_deep_messages_get_json_rpc_errors(stack, api_url):
    c = RawClient(_argv("--api", api_url), _env(stack))
    try:
        c.send_line(b"{not json")
        assert c.read_line()["error"]["code"] == -32700
        c.send_framed(b"[" * 100_000 + b"]" * 100_000)
        assert c.read_framed()["error"]["code"] in (-32700, -32600)
        c.send_line({"jsonrpc": "2.0", "id": 7, "method": "no/such"})
        assert c.read_line()["error"]["code"] == -32601
        c.send_line({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": 5}})
        assert c.read_line()["error"]["code"] == -32602
        c.send_line({"jsonrpc": "2.0", "id": 9, "method": "ping"})
        assert c.read_line()["id"] == 9  # still serving
    finally:
        stderr = c.close()
    assert "Traceback" not in stderr


def test_local_mode_runs_the_api_in_process(stack):
    c = RawClient(_argv("--local", "--logs"), _env(stack, LOG_LEVEL="WARNING"))
    try:
        c.send_line(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-03-26", "capabilities": {}},
            }
        )
        init = c.read_line()["result"]
        assert init["protocolVersion"] == "2025-03-26" and "resources" in init["capabilities"]
        session = f"local-{uuid.uuid4().hex[:6]}"
        c.send_line(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "chat",
                    "arguments": {"user_text": "こんにちは", "context": {"session_id": session}},
                },
            }
        )
        assert not c.read_line()["result"].get("isError")
        c.send_line({"jsonrpc": "2.0", "id": 3, "method": "resources/list"})
        assert [r["uri"] for r in c.read_line()["result"]["resources"]] == ["logs://today"]
        c.send_line({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "logs://today"}})
        text = c.read_line()["result"]["contents"][0]["text"]
        assert any(json.loads(line).get("session_id") == session for line in text.splitlines()), text[-500:]
    finally:
        c.close()


def test_auth_applies_and_the_token_comes_from_the_environment(stack):
    token = "tok-stdio-0123456789abcdef"
    locked = stack.start_api(name="api-mcp-locked", AUTH_ENABLED="true", AUTH_TOKENS=token)
    refused = RawClient(_argv("--api", locked.url), _env(stack))
    try:
        refused.send_line({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        error = refused.read_line()["error"]
        assert "401" in error["message"] and "UNAUTHORIZED" in error["message"]
    finally:
        refused.close()
    allowed = RawClient(_argv("--api", locked.url), _env(stack, YANA_API_TOKEN=token))
    try:
        allowed.send_line(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "list_jobs", "arguments": {"limit": 1}},
            }
        )
        result = allowed.read_line()["result"]
        assert not result["isError"] and "jobs" in result["structuredContent"]
    finally:
        allowed.close()


def test_the_bridge_waits_out_a_429_on_the_tool_list(api_url):
    """The tool list (GET /openapi.json) is rate limited like any call: the bridge waits as the
    answer's Retry-After says, as it does for tool calls, instead of failing the tools/list. A real
    HTTP server in front of the API answers the first request 429."""
    import http.server
    import threading

    import httpx

    from cli.mcp_stdio import Upstream

    doc = httpx.get(api_url + "/openapi.json", timeout=30).content
    seen: list[str] = []

    class Limited(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(self.path)
            if len(seen) == 1:
                self.send_response(429)
                self.send_header("Retry-After", "0.2")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(doc)))
            self.end_headers()
            self.wfile.write(doc)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Limited)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        upstream = Upstream(f"http://127.0.0.1:{server.server_address[1]}", None, 10.0)

        async def run():
            try:
                return await upstream.list_tools()
            finally:
                await upstream.close()

        tools = asyncio.run(run())["tools"]
    finally:
        server.shutdown()
    assert seen == ["/openapi.json", "/openapi.json"]
    assert "chat" in {t["name"] for t in tools}
