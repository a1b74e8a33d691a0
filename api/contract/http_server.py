"""The HTTP server's own rejections in the contract's error body.

Some requests never reach the app: uvicorn's parser (httptools, or h11) refuses them and answers a
plain `400 Invalid HTTP request received.` A raw non-ASCII or control byte in the URL, a NUL or
other invalid byte in a header, a request line or header block over the parser's limit (a 100 KB
URL), an unknown method (httptools knows only the registered ones: BREW), Transfer-Encoding
together with Content-Length (request smuggling), a malformed chunked body. These protocol
classes answer them with the unified body instead, with a fresh run_id / trace_id echoed in
X-Run-Id / X-Trace-Id, status 400, retryable false, and the connection closed as before.

What still cannot be reached: a client that closes before sending a whole request line gets no
answer at all; a TLS handshake or an HTTP/2 preface on the plain port is not HTTP/1 and gets the
same JSON 400 (or nothing when the peer already closed). The JSON-lines access log records none
of them (the app never saw them); uvicorn logs a warning line for each.

Used by `yana api` / `yana up` (cli.processes.api_argv runs api.uvicorn_server, which selects these).
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.h11_impl import H11Protocol

from yana import ids
from yana.errors import ErrorCode, YanaError

MESSAGE = "invalid HTTP request: the server could not parse it (request line, headers or framing)"


def unified_400() -> tuple[bytes, list[tuple[bytes, bytes]]]:
    run_id, trace_id = ids.new_run_id(), ids.new_trace_id()
    body = json.dumps(
        {
            "error": YanaError.of(ErrorCode.BAD_REQUEST, MESSAGE).body(),
            "run_id": run_id,
            "trace_id": trace_id,
        }
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-run-id", run_id.encode()),
        (b"x-trace-id", trace_id.encode()),
        (b"connection", b"close"),
    ]
    return body, headers


class UnifiedH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:  # noqa: ARG002 - the parser's text is not shown
        body, headers = unified_400()
        head = b"HTTP/1.1 400 Bad Request\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
        # Written raw: h11's state machine is in an error state after a parse failure.
        self.transport.write(head + body)
        self.transport.close()


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools not installed: h11 serves
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

if HttpToolsProtocol is not None:

    class UnifiedHttpToolsProtocol(HttpToolsProtocol):  # type: ignore[valid-type,misc]
        def send_400_response(self, msg: str) -> None:  # noqa: ARG002
            body, headers = unified_400()
            head = b"HTTP/1.1 400 Bad Request\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
            self.transport.write(head + body)
            self.transport.close()


def protocol_path() -> str:
    """The import string uvicorn's `http=` takes (it imports an unknown name as a class path)."""
    name = "UnifiedHttpToolsProtocol" if HttpToolsProtocol is not None else "UnifiedH11Protocol"
    return f"{__name__}:{name}"
