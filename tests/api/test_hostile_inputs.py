"""A hostile-input corpus against every route of the running API: each case answers 4xx with the
contract's error body, creates no job, stores nothing and leaves nothing on disk.

Cases per operation: JSON nested far too deep, a body over the cap, a wrong media type, bytes
that are not UTF-8, unicode edge cases (NUL, lone surrogate escapes, bidi overrides, zero-width
only), path traversal in path parameters, numbers out of any range; per upload: corrupt and
truncated images, a decompression bomb; per request: header injection (CR/LF in a correlation
header, sent on a raw socket because HTTP clients refuse to)."""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import zlib
from urllib.parse import urlsplit

import httpx
import pytest
from PIL import Image

DEEP = b"[" * 20_000 + b"]" * 20_000
# As JSON string literals (a lone surrogate cannot be encoded by a client, only escaped).
WEIRD_TEXTS = ['"\\u0000"', '"\\ud800"', '"\\u202e\\u202d"', '"\\u200b\\u200b\\u200b"', '"' + "a" * 1_000_000 + '"']


def _png(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (200, 10, 10)).save(buf, "PNG")
    return buf.getvalue()


def _bomb() -> bytes:
    """A valid PNG header claiming 60000 x 60000 pixels over a tiny compressed body."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 100_000))
        + chunk(b"IEND", b"")
    )


BAD_IMAGES = {
    "corrupt": b"\xff\xd8\xff\xe0 this is not a jpeg at all",
    "truncated": _png(64, 64)[:120],
    "bomb": _bomb(),
    "empty": b"",
}


@pytest.fixture(scope="module")
def hostile(stack):
    svc = stack.start_api(name="api-hostile", RATE_LIMIT="100000/second", RATE_BURST="100000")
    with httpx.Client(base_url=svc.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def operations(hostile) -> list[tuple[str, str, dict]]:
    spec = hostile.get("/openapi.json").json()
    return [(m.upper(), p, op) for p, item in spec["paths"].items() for m, op in item.items() if p != "/mcp"]


def _jobs(client: httpx.Client) -> set[str]:
    return {j["id"] for j in client.get("/v1/jobs", params={"limit": 200}).json()["jobs"]}


def _incoming(stack) -> list:
    folder = stack.data_dir / "incoming"
    return sorted(folder.rglob("*")) if folder.exists() else []


def _assert_refused(r: httpx.Response, what: str) -> None:
    assert 400 <= r.status_code < 500, f"{what}: {r.status_code} {r.text[:300]}"
    body = r.json()
    assert set(body["error"]) >= {"code", "message", "retryable"}, (what, body)
    assert body["run_id"], (what, body)


def _concrete(path: str) -> str:
    return path.replace("{job_id}", "0" * 32).replace("{name}", "labels__nope__1__v1").replace("{id}", "nope")


def test_every_body_route_refuses_hostile_bodies(hostile, operations, stack):
    jobs_before, files_before = _jobs(hostile), _incoming(stack)
    checked = 0
    for method, path, op in operations:
        if method not in ("POST", "PUT", "PATCH") or "requestBody" not in op:
            continue
        url = _concrete(path)
        cases = {
            "deep JSON": dict(content=DEEP, headers={"content-type": "application/json"}),
            "over the cap": dict(
                content=b'{"x":"' + b"a" * (60 * 1024 * 1024) + b'"}', headers={"content-type": "application/json"}
            ),
            "wrong media type": dict(content=b"<xml/>", headers={"content-type": "application/xml"}),
            "not UTF-8": dict(content=b'{"user_text": "\xff\xfe\xfa"}', headers={"content-type": "application/json"}),
            "not an object": dict(content=b"[1, 2, 3]", headers={"content-type": "application/json"}),
        }
        for name, kw in cases.items():
            _assert_refused(hostile.request(method, url, **kw), f"{method} {path}: {name}")
            checked += 1
    assert checked >= 30
    assert _jobs(hostile) == jobs_before, "a refused request created a job"
    assert _incoming(stack) == files_before, "a refused request left files behind"


def test_unicode_edge_cases_never_500(hostile):
    for literal in WEIRD_TEXTS:
        for url, template in (
            ("/v1/chat", '{"user_text": %s}'),
            ("/v1/search", '{"query_text": %s}'),
            ("/memo/save", '{"session_id": "s", "text": %s}'),
            ("/memo/save", '{"session_id": %s, "text": "x"}'),
        ):
            body = (template % literal).encode()
            r = hostile.post(url, content=body, headers={"content-type": "application/json"})
            assert r.status_code < 500, (url, literal[:20], r.status_code, r.text[:300])
            if r.status_code >= 400:
                _assert_refused(r, f"{url} {literal[:10]}")


def test_numbers_out_of_range(hostile):
    for method, url, kw in (
        ("POST", "/v1/chat", {"content": b'{"user_text": "x", "top_k": 99999999999999999999999}'}),
        ("POST", "/v1/search", {"content": b'{"query_text": "x", "k": 1e999999}'}),
        ("POST", "/v1/search", {"content": b'{"query_text": "x", "page": -1}'}),
        ("GET", "/v1/jobs", {"params": {"limit": "99999999999999999999"}}),
        ("GET", "/v1/jobs", {"params": {"cursor": "9223372036854775807"}}),
        ("GET", "/memo/search", {"params": {"query": "x", "n_results": "1e9"}}),
    ):
        headers = {"content-type": "application/json"} if "content" in kw else {}
        r = hostile.request(method, url, headers=headers, **kw)
        assert r.status_code < 500, (url, r.status_code, r.text[:200])
        if r.status_code >= 400:
            _assert_refused(r, url)


def test_path_traversal_and_odd_ids(hostile, operations):
    odd = ["..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f%2e%2e%2f", "x" * 5000, "%00", "a:hb", "0" * 32 + ":hb"]
    for method, path, _op in operations:
        if "{" not in path:
            continue
        for value in odd:
            url = path.split("{")[0] + value + path.split("}", 1)[1]
            r = hostile.request(method, url, json={} if method in ("POST", "PUT", "PATCH") else None)
            assert 400 <= r.status_code < 500, (method, url, r.status_code, r.text[:200])


def test_bad_images_are_refused_and_nothing_is_kept(hostile, stack):
    for name, data in BAD_IMAGES.items():
        sends = {
            "multipart": lambda data=data: hostile.post(
                "/v1/ingest",
                files={"file": ("x.png", data, "image/png")},
                data={"category": "sake", "brand_name": "攻撃"},
            ),
            "base64": lambda data=data: hostile.post(
                "/v1/ingest",
                json={"category": "sake", "brand_name": "攻撃", "image_base64": base64.b64encode(data).decode()},
            ),
        }
        for how, send in sends.items():
            files_before, jobs_before = _incoming(stack), _jobs(hostile)
            r = send()
            if r.status_code == 202:  # judged inside the job instead: the item fails, nothing is indexed
                job = hostile.get(f"/v1/jobs/{r.json()['job_id']}", headers={"Prefer": "wait=30"}).json()
                items = (job.get("result") or {}).get("items") or []
                assert job["status"] == "failed" or (items and all(i.get("error") for i in items)), (name, how, job)
            else:
                _assert_refused(r, f"image {name} ({how})")
                assert _incoming(stack) == files_before, f"refused {name} ({how}) left files behind"
                assert _jobs(hostile) == jobs_before


def test_header_injection_is_not_reflected(hostile):
    parts = urlsplit(str(hostile.base_url))
    request = (
        b"GET /v1/version HTTP/1.1\r\nHost: x\r\n"
        b"X-Run-Id: abc\r\nSet-Cookie: injected=1\r\n"
        b"X-Trace-Id: t\x01\x02\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert b"set-cookie: injected" not in head
    assert b"\x01" not in head
    status = int(head.split(b" ", 2)[1])
    assert status < 500


# --- round 3 (issue 26): NUL in file sources, loose JSON, odd ids, encoded slashes, pixel bombs ---


@pytest.fixture(scope="module")
def importing(stack, tmp_path_factory):
    """An API with IMPORT_DIR set, holding one good image and one pixel bomb."""
    folder = tmp_path_factory.mktemp("import")
    (folder / "ok.png").write_bytes(_png(32, 32))
    (folder / "bomb.png").write_bytes(_bomb())
    svc = stack.start_api(
        name="api-hostile-import", IMPORT_DIR=str(folder), RATE_LIMIT="100000/second", RATE_BURST="100000"
    )
    with httpx.Client(base_url=svc.url, timeout=60) as client:
        yield client, folder


def test_nul_byte_in_a_file_source_is_a_400_never_retryable(importing, stack):
    client, folder = importing
    jobs_before = _jobs(client)
    for body in (
        {"category": "sake", "image_url": f"file://{folder}/ok.png%00.jpg"},
        {"category": "sake", "image_url": "file:///etc/passwd%00"},
        {"category": "sake", "image_path": f"{folder}/ok.png\u0000.jpg"},
        {"category": "sake", "items": [{"category": "sake", "image_url": f"file://{folder}/ok.png%00"}]},
    ):
        r = client.post("/v1/ingest", json=body)
        _assert_refused(r, f"NUL in {body}")
        assert r.status_code == 400 and r.json()["error"]["retryable"] is False, r.text
    # The MCP ingest tool goes through the same check.
    from tests.api.test_mcp import _run, _with_session

    result = _run(
        _with_session(
            str(client.base_url).rstrip("/"),
            lambda s: s.call_tool("ingest", {"category": "sake", "image_path": f"{folder}/ok.png\u0000"}),
        )
    )
    assert result.isError, result
    err = json.loads(result.content[0].text)["error"]
    assert err["code"] == "BAD_REQUEST" and err["retryable"] is False, err
    assert _jobs(client) == jobs_before


def test_a_pixel_bomb_is_refused_at_submit(importing):
    client, folder = importing
    jobs_before = _jobs(client)
    for how, send in {
        "base64": lambda: client.post(
            "/v1/ingest", json={"category": "sake", "image_base64": base64.b64encode(_bomb()).decode()}
        ),
        "multipart": lambda: client.post(
            "/v1/ingest", files={"file": ("b.png", _bomb(), "image/png")}, data={"category": "sake"}
        ),
        "file://": lambda: client.post("/v1/ingest", json={"category": "sake", "image_path": f"{folder}/bomb.png"}),
    }.items():
        r = send()
        _assert_refused(r, f"pixel bomb ({how})")
        assert r.json()["error"]["code"] == "IMAGE_TOO_MANY_PIXELS", (how, r.text)
    assert _jobs(client) == jobs_before


def test_a_pixel_bomb_is_refused_at_submit_by_url_and_over_mcp(importing):
    """The same header check for the other ways one image comes in: a file:// image_url, the MCP
    ingest tool."""
    from tests.api.test_mcp import _run, _with_session

    client, folder = importing
    jobs_before = _jobs(client)
    r = client.post("/v1/ingest", json={"category": "sake", "image_url": f"file://{folder}/bomb.png"})
    _assert_refused(r, "pixel bomb (image_url file://)")
    assert r.json()["error"]["code"] == "IMAGE_TOO_MANY_PIXELS", r.text
    result = _run(
        _with_session(
            str(client.base_url).rstrip("/"),
            lambda s: s.call_tool("ingest", {"category": "sake", "image_path": f"{folder}/bomb.png"}),
        )
    )
    assert result.isError, result
    assert json.loads(result.content[0].text)["error"]["code"] == "IMAGE_TOO_MANY_PIXELS", result
    assert _jobs(client) == jobs_before


def test_a_pixel_bomb_in_a_batch_is_that_items_failure_from_submit(importing, stack):
    """In a batch an image's problem is that item's failure and the rest go on (accept_ingest):
    a bomb among good items is judged at submit from its header, its bytes never staged nor
    decoded, and its outcome says IMAGE_TOO_MANY_PIXELS."""
    import redis

    from pipelines.runtime.jobs import job_key
    from tests.stack import wait_job

    client, folder = importing
    good = [{"category": "sake", "image_base64": base64.b64encode(_png(33 + i, 33)).decode()} for i in range(2)]
    items = [
        good[0],
        {"category": "sake", "image_base64": base64.b64encode(_bomb()).decode()},
        {"category": "sake", "image_path": f"{folder}/bomb.png"},
        good[1],
    ]
    r = client.post("/v1/ingest", json={"category": "sake", "items": items})
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    with redis.Redis.from_url(stack.redis_url, decode_responses=True) as rd:
        sources = [it["source"] for it in json.loads(rd.hget(job_key(job_id), "params"))["items"]]
    assert [src["kind"] for src in sources] == ["stored", "rejected", "rejected", "stored"], sources
    job = wait_job(client, job_id, timeout_s=180)
    outcomes = {o["index"]: o for o in job["result"]["items"]}
    for i in (1, 2):
        assert (outcomes[i]["error"] or {}).get("code") == "IMAGE_TOO_MANY_PIXELS", (i, outcomes[i])
    for i in (0, 3):
        assert not outcomes[i]["error"], (i, outcomes[i])


DOC = b'{"documents": [{"id": "loose-json", "text": "t", "metadata": {"x": %s}}]}'


@pytest.mark.parametrize(
    "raw",
    [DOC % b"NaN", DOC % b"Infinity", DOC % b"-Infinity", DOC % b"1e999", b"\xef\xbb\xbf" + DOC % b"1"],
    ids=["NaN", "Infinity", "-Infinity", "overflow", "BOM"],
)
def test_loose_json_is_refused(hostile, raw):
    jobs_before = _jobs(hostile)
    r = hostile.post("/v1/ingest", content=raw, headers={"content-type": "application/json"})
    _assert_refused(r, raw.decode("utf-8", "replace"))
    assert r.status_code == 400, r.text
    assert _jobs(hostile) == jobs_before


def test_a_byte_order_mark_is_refused(hostile):
    r = hostile.post(
        "/v1/search", content=b'\xef\xbb\xbf{"query_text": "x"}', headers={"content-type": "application/json"}
    )
    _assert_refused(r, "BOM")
    assert r.status_code == 400


def test_a_body_sent_to_an_operation_without_one_is_not_ignored(hostile):
    r = hostile.post("/memo/clear_expired", content=b"{", headers={"content-type": "application/json"})
    _assert_refused(r, "clear_expired {")
    assert r.status_code == 400
    r = hostile.post("/memo/clear_expired", content=b"garbage", headers={"content-type": "text/plain"})
    _assert_refused(r, "clear_expired garbage")
    assert hostile.post("/memo/clear_expired").status_code == 200
    assert hostile.post("/memo/clear_expired", json={}).status_code == 200


@pytest.mark.parametrize("doc_id", ["doc\u0000x", "doc\u202ex", "\u202egpj.exe", "a\x1bb"])
def test_document_ids_with_control_or_bidi_characters_are_refused(hostile, doc_id):
    jobs_before = _jobs(hostile)
    r = hostile.post("/v1/ingest", json={"documents": [{"id": doc_id, "text": "本文"}]})
    _assert_refused(r, repr(doc_id))
    assert r.status_code == 400
    r = hostile.post("/v1/ingest", json={"id": doc_id, "text": "本文"})
    _assert_refused(r, repr(doc_id))
    assert _jobs(hostile) == jobs_before


def test_an_encoded_slash_is_not_a_path_separator(hostile):
    assert hostile.get("/v1/version").status_code == 200
    for raw in ("/v1%2fversion", "/v1%2Fversion", "/v1%2fjobs"):
        r = hostile.get(httpx.URL(str(hostile.base_url).rstrip("/") + raw))
        assert r.status_code == 404, (raw, r.status_code, r.text[:200])
        _assert_refused(r, raw)


# --- round 3 (issue 26 defect 9): what reaches /mcp, and what the HTTP server refuses itself ---

MCP_ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "h", "version": "1"}},
}


def _rpc(r: httpx.Response) -> dict:
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return json.loads(next(line[5:] for line in r.text.splitlines() if line.startswith("data:")))
    return r.json()


def test_mcp_errors_carry_the_correlation_ids(hostile):
    session = hostile.post("/mcp", json=INIT, headers=MCP_ACCEPT).headers["mcp-session-id"]
    with_session = {**MCP_ACCEPT, "mcp-session-id": session}
    hostile.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=with_session)
    cases = {
        "malformed JSON-RPC": dict(content=b"{", headers=MCP_ACCEPT),
        "no session": dict(json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=MCP_ACCEPT),
        "not acceptable": dict(json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        "unknown method": dict(json={"jsonrpc": "2.0", "id": 2, "method": "nope/x"}, headers=with_session),
        "params not an object": dict(
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": "bad"}, headers=with_session
        ),
        "unknown session": dict(
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers={**MCP_ACCEPT, "mcp-session-id": "x"}
        ),
    }
    for name, kw in cases.items():
        r = hostile.post("/mcp", **kw)
        msg = _rpc(r)
        assert msg.get("jsonrpc") == "2.0" and "error" in msg, (name, r.status_code, r.text[:300])
        data = msg["error"].get("data")
        assert isinstance(data, dict) and data.get("run_id") == r.headers["x-run-id"], (name, msg)
        assert data.get("trace_id") == r.headers["x-trace-id"], (name, msg)
    # Plain text is not JSON-RPC: a 415 in the contract's error body, not a bare line.
    r = hostile.post("/mcp", content=b"hello", headers={**MCP_ACCEPT, "content-type": "text/plain"})
    _assert_refused(r, "text/plain to /mcp")
    assert r.status_code == 415 and r.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"


@pytest.mark.parametrize(
    "ctype",
    [
        "text/plain",
        "application/xml",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json-seq",
        "text/json",
        None,
    ],
)
def test_a_non_json_body_to_mcp_is_a_415_in_the_unified_body(hostile, ctype):
    """Only application/json (or +json) is JSON-RPC: any other type, or none, is refused before
    the MCP transport sees it, with the contract's error body and the correlation ids."""
    headers = {"accept": "application/json, text/event-stream"} | ({"content-type": ctype} if ctype else {})
    r = hostile.post("/mcp", content=json.dumps(INIT).encode(), headers=headers)
    _assert_refused(r, f"{ctype} to /mcp")
    assert r.status_code == 415 and r.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE", (ctype, r.text)
    assert r.json()["run_id"] == r.headers["x-run-id"]
    assert "mcp-session-id" not in r.headers


def _mcp_session(client: httpx.Client) -> dict:
    """Headers of an initialized MCP session."""
    session = client.post("/mcp", json=INIT, headers=MCP_ACCEPT).headers["mcp-session-id"]
    with_session = {**MCP_ACCEPT, "mcp-session-id": session}
    client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=with_session)
    return with_session


CALL = b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'


@pytest.mark.parametrize(
    "raw",
    [
        CALL % (b"ingest", b'{"documents": [{"id": "mcp-loose", "text": "t", "metadata": {"x": NaN}}]}'),
        CALL % (b"search", b'{"query_text": "x", "k": Infinity}'),
        CALL % (b"search", b'{"query_text": "x", "k": -Infinity}'),
        CALL % (b"search", b'{"query_text": "x", "k": 1e999}'),
        b'{"jsonrpc": "2.0", "id": NaN, "method": "tools/list"}',
        b'\xef\xbb\xbf{"jsonrpc": "2.0", "id": 8, "method": "tools/list"}',
    ],
    ids=["NaN", "Infinity", "-Infinity", "overflow", "NaN id", "BOM"],
)
def test_loose_json_to_mcp_is_a_parse_error(hostile, raw):
    """What RFC 8259 does not allow is refused on /mcp as on every JSON route, as JSON-RPC's parse
    error (the SDK's Python json took NaN, Infinity and a BOM: an ingest tool call with a NaN in a
    document's metadata was a job)."""
    with_session = _mcp_session(hostile)
    jobs_before = _jobs(hostile)
    r = hostile.post("/mcp", content=raw, headers=with_session)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    msg = _rpc(r)
    assert msg["jsonrpc"] == "2.0" and msg["id"] is None and msg["error"]["code"] == -32700, msg
    assert msg["error"]["data"]["run_id"] == r.headers["x-run-id"], msg
    assert msg["error"]["data"]["trace_id"] == r.headers["x-trace-id"], msg
    assert _jobs(hostile) == jobs_before


def test_an_mcp_validation_error_does_not_echo_a_huge_argument(hostile):
    session = hostile.post("/mcp", json=INIT, headers=MCP_ACCEPT).headers["mcp-session-id"]
    with_session = {**MCP_ACCEPT, "mcp-session-id": session}
    hostile.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=with_session)
    for args in ({"query_text": "x" * 300_000}, {"query_text": "q", "k": "y" * 300_000}):
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "search", "arguments": args}}
        r = hostile.post("/mcp", json=call, headers=with_session)
        assert len(r.content) < 10_000, len(r.content)
        result = _rpc(r)["result"]
        assert result["isError"] is True


def test_label_image_is_an_mcp_tool(importing):
    from tests.api.test_mcp import _run, _with_session
    from tests.stack import wait_job

    client, folder = importing
    data = (folder / "ok.png").read_bytes()
    body = {"category": "sake", "brand_name": "画像", "image_base64": base64.b64encode(data).decode()}
    r = client.post("/v1/ingest", json=body)
    assert r.status_code in (200, 202), r.text
    if r.status_code == 202:
        job = wait_job(client, r.json()["job_id"], timeout_s=180)
        assert job["status"] == "succeeded", job
        label_id = job["result"]["items"][0]["id"]
    else:
        label_id = r.json()["id"]

    async def calls(session):
        tools = {t.name for t in (await session.list_tools()).tools}
        image = await session.call_tool("label_image", {"label_id": label_id})
        missing = await session.call_tool("label_image", {"label_id": "label_0000000000000000"})
        return tools, image, missing

    tools, image, missing = _run(_with_session(str(client.base_url).rstrip("/"), calls))
    assert "label_image" in tools
    assert not image.isError and image.content[0].type == "image", image
    assert image.content[0].mimeType == "image/png"
    assert base64.b64decode(image.content[0].data) == data
    assert missing.isError and json.loads(missing.content[0].text)["error"]["code"] == "NOT_FOUND"


def _raw(client: httpx.Client, request: bytes) -> bytes:
    parts = urlsplit(str(client.base_url))
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        "GET /v1/ver\u00e9sion HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
        b"GET /v1/version HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
        b"GET /v1/version?" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"BREW /v1/version HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ],
    ids=["non-ASCII URL", "NUL in a header", "100 KB URL", "method BREW", "Transfer-Encoding with Content-Length"],
)
def test_what_the_server_refuses_itself_gets_the_unified_body(hostile, request_bytes):
    answer = _raw(hostile, request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:300]
    data = json.loads(body)
    assert set(data["error"]) == {"code", "message", "retryable"} and data["error"]["retryable"] is False
    assert data["run_id"] and data["trace_id"]
    assert f"x-run-id: {data['run_id']}".encode() in head.lower()
