"""Issue 26 defect 12: every client of ours honours Retry-After on 429 (the CLI's ApiLink, which
`yana ingest` / `yana reembed` / the other data commands use to follow jobs; the stdlib retrieve
client and the LangChain retriever built on it), and the operations an agent's retriever loop
calls back to back have rate defaults such a loop does not hit."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from cli.api_link import ApiLink
from cli.data import wait_job
from clients.retrieve import RetrieveClient, RetrieveError

TIGHT = {"rate": "2/second", "burst": 1}


@pytest.fixture(scope="module")
def tight(stack):
    """An API whose limits a handful of back-to-back requests exceed."""
    policies = {op: TIGHT for op in ("search", "retrieve", "get_job")}
    return stack.start_api(
        name="api-tight", RATE_LIMIT="2/second", RATE_BURST="1", ROUTE_POLICIES=json.dumps(policies)
    ).url


def test_the_retrieve_client_waits_out_429(tight):
    impatient = RetrieveClient(tight, timeout=30, rate_limit_wait=0)
    with pytest.raises(RetrieveError) as err:  # the limit is really hit
        for _ in range(4):
            impatient.search("x", k=1)
    assert err.value.status == 429 and err.value.retry_after and err.value.retry_after >= 0.1
    client = RetrieveClient(tight, timeout=30)
    started = time.monotonic()
    for _ in range(4):
        assert "hits" in client.search("x", k=1)
    assert time.monotonic() - started >= 1.0  # it waited, as told, instead of failing


def test_the_langchain_retriever_waits_out_429(tight):
    from clients.langchain import YanaSearchRetriever

    retriever = YanaSearchRetriever(base_url=tight, k=1)
    for _ in range(4):
        assert isinstance(retriever.invoke("x"), list)


def test_the_cli_link_waits_out_429_while_following_a_job(tight):
    accepted = httpx.post(tight + "/v1/demo/sleep", json={"steps": 3, "step_s": 0.2}, timeout=30)
    if accepted.status_code == 429:
        time.sleep(float(accepted.headers["retry-after"]))
        accepted = httpx.post(tight + "/v1/demo/sleep", json={"steps": 3, "step_s": 0.2}, timeout=30)
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["job_id"]
    with ApiLink(tight, None, timeout_s=30) as link:
        for _ in range(4):  # back to back: past the burst of 1
            assert link.request("GET", "/v1/jobs", params={"limit": 1}).status_code == 200
        # Polling with Prefer: wait=1 hits the get_job limit; the link waits instead of exiting 2.
        job = wait_job(link, job_id, poll_s=1)
    assert job["status"] == "succeeded"
    with ApiLink(tight, None, timeout_s=30, rate_wait_s=0) as link:
        codes = {link.request("GET", "/v1/jobs", params={"limit": 1}).status_code for _ in range(4)}
    assert 429 in codes  # the limit is really there


def test_agent_routes_take_a_retriever_loop(stack):
    """Default settings: 150 back-to-back calls of one caller to search, retrieve and memo search
    are not refused (before: 429 after the default burst of 50). Bodies that fail validation keep
    each call cheap; the rate limit is checked before the body."""
    url = stack.start_api(name="api-agent-rate").url
    with httpx.Client(base_url=url, timeout=30) as c:
        spec = c.get("/openapi.json").json()
        for path, method in (("/v1/search", "post"), ("/v1/retrieve", "post"), ("/memo/search", "get")):
            summary = spec["paths"][path][method]["x-yana-contract"]
            assert summary["burst"] >= 200, (path, summary)
        for path in ("/v1/search", "/v1/retrieve"):
            codes = [c.post(path, json={}).status_code for _ in range(150)]
            assert 429 not in codes, (path, codes.count(429))
        codes = [c.get("/memo/search").status_code for _ in range(150)]
        assert 429 not in codes, ("/memo/search", codes.count(429))


def test_the_mcp_stdio_bridge_waits_out_429(tight):
    """`yana mcp` forwards tool calls over HTTP, where they are counted: a 429 is waited out."""
    import asyncio

    from cli.mcp_stdio import Upstream

    async def calls():
        upstream = Upstream(tight, None, 30.0)
        try:
            return [await upstream.call_tool("search", {"query_text": "x", "k": 1}) for _ in range(4)]
        finally:
            await upstream.close()

    results = asyncio.run(calls())
    assert not any(r.get("isError") for r in results), results
