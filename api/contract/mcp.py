"""The MCP endpoint (streamable HTTP at /mcp): every documented operation is a tool named by its
operation_id (seed 000: tool names and arguments equal the HTTP ones).

Tool calls go through the whole contract again as in-process HTTP calls: the caller's bearer
token and correlation headers are forwarded, so auth, body caps, time limits and error bodies
are the HTTP ones. They skip the rate limit (marked by a per-process secret header), since the
MCP request that carried the call was already counted.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from fastapi_mcp import FastApiMCP

from yana.settings import Settings

MCP_PATH = "/mcp"
FORWARDED_HEADERS = ["authorization", "x-run-id", "x-trace-id", "traceparent", "tracestate"]


def mount_mcp(app: FastAPI, settings: Settings, internal_header: str, internal_secret: str) -> FastApiMCP:
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url="http://apiserver",
        timeout=settings.mcp_tool_timeout_s,
        headers={internal_header: internal_secret},
    )
    mcp = FastApiMCP(
        app,
        name=app.title,
        description=app.description,
        http_client=client,
        headers=FORWARDED_HEADERS,
        describe_all_responses=False,
    )
    mcp.mount_http(app, mount_path=MCP_PATH)
    return mcp
