"""MCP over streamable HTTP (/mcp) with the official `mcp` SDK client against the real stack: the
tools are the operations, results come as text and structured content, a route's error is a tool
error carrying the contract's error body, and a long tool (ingest) returns a job that wait_job
follows to its end."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tools.datagen import images

EXPECTED_TOOLS = {
    "chat",
    "search",
    "ingest",
    "get_job",
    "cancel_job",
    "list_jobs",
    "wait_job",
    "save_memo",
    "query_memo",
    "get_memo",
    "delete_memo",
    "clear_expired",
}


def _run(coro):
    return asyncio.run(coro)


async def _with_session(url: str, fn):
    async with (
        httpx.AsyncClient(timeout=httpx.Timeout(60, read=300)) as http,
        streamable_http_client(url + "/mcp", http_client=http) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await fn(session)


def _payload(result) -> dict:
    """The route's JSON: the same in the text content and in the structured content."""
    text = json.loads(result.content[0].text)
    if result.structuredContent is not None:
        assert result.structuredContent == text
    return text


@pytest.fixture(scope="module")
def mcp_url(stack):
    return stack.start_api(name="api-mcp", RATE_LIMIT="10000/second", RATE_BURST="10000").url


def test_tools_are_the_operations_with_their_schemas(mcp_url):
    tools = _run(_with_session(mcp_url, lambda s: s.list_tools())).tools
    by_name = {t.name: t for t in tools}
    assert set(by_name) >= EXPECTED_TOOLS
    chat = by_name["chat"].inputSchema
    assert chat["required"] == ["user_text"]
    assert chat["properties"]["top_k"]["minimum"] == 1 and chat["properties"]["top_k"]["maximum"] == 10
    chat_filters = chat["properties"]["filters"]["anyOf"][0]
    assert set(chat_filters["properties"]) == {"category", "region", "brewery"}
    assert chat_filters["additionalProperties"] is False
    search = by_name["search"].inputSchema["properties"]
    assert search["k"]["minimum"] == 1 and search["k"]["maximum"] == 20
    assert set(search) >= {"query_text", "filters", "k", "sort_by", "page", "page_size"}
    assert by_name["wait_job"].inputSchema["required"] == ["job_id"]


def test_chat_and_search_results_are_text_and_structured(mcp_url):
    async def calls(session):
        chat = await session.call_tool(
            "chat", {"user_text": "小樽のお酒ある？", "context": {"sessionId": "mcp-s1", "runId": "mcp-r1"}}
        )
        search = await session.call_tool("search", {"query_text": "辛口", "k": 3})
        return chat, search

    chat, search = _run(_with_session(mcp_url, calls))
    assert not chat.isError, chat.content[0].text
    body = _payload(chat)
    assert body["reply"] and "server_version" in body
    assert not search.isError, search.content[0].text
    assert isinstance(_payload(search)["hits"], list)


def test_route_errors_are_tool_errors_with_the_contract_body(mcp_url):
    async def calls(session):
        missing = await session.call_tool("get_memo", {"memo_id": uuid.uuid4().hex})
        no_job = await session.call_tool("get_job", {"job_id": "0" * 32})
        return missing, no_job

    for result in _run(_with_session(mcp_url, calls)):
        assert result.isError
        body = json.loads(result.content[0].text)
        assert body["error"]["code"] == "NOT_FOUND"
        assert body["error"]["message"] and "retryable" in body["error"]


def test_ingest_returns_a_job_and_wait_job_follows_it(mcp_url):
    meta = images.label_set(3, seed=77)[2]
    image = images.encode(images.render_label(meta, seed=7702), "JPEG", 90)
    args = {
        "category": meta["category"],
        "brand_name": f"{meta['brand_name']}{uuid.uuid4().hex[:4]}",
        "region": meta["region"],
        "image_base64": base64.b64encode(image).decode(),
    }

    async def calls(session):
        accepted = await session.call_tool("ingest", args)
        job = _payload(accepted)
        done = await session.call_tool("wait_job", {"job_id": job["job_id"], "timeout_s": 60})
        return accepted, done

    accepted, done = _run(_with_session(mcp_url, calls))
    assert not accepted.isError, accepted.content[0].text
    job = _payload(done)
    assert job["status"] == "succeeded", job
    assert job["kind"] == "ingest"


def test_memo_tools_round_trip(mcp_url):
    session_id = f"mcp-{uuid.uuid4().hex[:8]}"

    async def calls(session):
        saved = _payload(
            await session.call_tool("save_memo", {"session_id": session_id, "text": "MCP から保存したメモ"})
        )
        found = _payload(await session.call_tool("query_memo", {"query": "保存したメモ", "session_id": session_id}))
        got = _payload(await session.call_tool("get_memo", {"memo_id": saved["memo_id"]}))
        deleted = _payload(await session.call_tool("delete_memo", {"memo_id": saved["memo_id"]}))
        return saved, found, got, deleted

    saved, found, got, deleted = _run(_with_session(mcp_url, calls))
    assert [r["metadata"]["memo_id"] for r in found["results"]] == [saved["memo_id"]]
    assert got["text"] == "MCP から保存したメモ"
    assert deleted["deleted"] is True
