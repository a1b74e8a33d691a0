"""Correlation ids in (X-Run-Id, X-Trace-Id, W3C traceparent/tracestate), effective ids out.

- X-Run-Id / X-Trace-Id: kept when they are 1-128 chars of [A-Za-z0-9._:-], else replaced by
  generated ids (a bad value never reaches logs or job records).
- traceparent: validated per W3C Trace Context level 1 (yana.ids.parse_traceparent); a missing or
  invalid one, or several of them, starts a new trace. The echoed traceparent keeps the caller's
  trace-id and flags and names this server's span as parent, which is what a downstream hop
  (task, webhook) continues from.
- tracestate: validated (keys, values, at most 32 unique members); an invalid one is dropped
  whole, as is any tracestate that comes without a valid traceparent.
"""

from __future__ import annotations

import re

from yana import context, ids

_TS_KEY = re.compile(r"^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})$")
_TS_VALUE = re.compile(r"^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$")
TRACESTATE_MAX_MEMBERS = 32


def parse_tracestate(values: list[str]) -> str | None:
    """The normalised tracestate of one or more header values, or None when invalid or empty."""
    members: list[str] = []
    seen: set[str] = set()
    for value in values:
        for raw in value.split(","):
            member = raw.strip(" \t")
            if not member:
                continue  # empty list members are allowed and ignored
            key, sep, val = member.partition("=")
            if not sep or not _TS_KEY.match(key) or not _TS_VALUE.match(val) or key in seen:
                return None
            seen.add(key)
            members.append(f"{key}={val}")
    if not members or len(members) > TRACESTATE_MAX_MEMBERS:
        return None
    return ",".join(members)


def from_headers(headers: list[tuple[bytes, bytes]]) -> tuple[context.Correlation, str | None]:
    """(effective correlation, tracestate to propagate) for raw ASGI request headers."""
    run_id = trace_id = None
    parents: list[str] = []
    states: list[str] = []
    for k, v in headers:
        name = k.decode("latin-1").lower()
        if name == "x-run-id":
            run_id = v.decode("latin-1")
        elif name == "x-trace-id":
            trace_id = v.decode("latin-1")
        elif name == "traceparent":
            parents.append(v.decode("latin-1"))
        elif name == "tracestate":
            states.append(v.decode("latin-1"))
    parsed = ids.parse_traceparent(parents[0]) if len(parents) == 1 else None
    w3c_trace = parsed[0] if parsed else ids.new_trace_id()
    corr = context.Correlation(
        run_id=run_id if ids.valid_correlation_id(run_id) else ids.new_run_id(),
        trace_id=trace_id if ids.valid_correlation_id(trace_id) else w3c_trace,
        traceparent=ids.make_traceparent(w3c_trace, flags=parsed[2] if parsed else "01"),
    )
    return corr, parse_tracestate(states) if parsed else None


def response_headers(corr: context.Correlation, tracestate: str | None) -> list[tuple[bytes, bytes]]:
    out = [
        (b"x-run-id", corr.run_id.encode()),
        (b"x-trace-id", corr.trace_id.encode()),
        (b"traceparent", corr.traceparent.encode()),
    ]
    if tracestate:
        out.append((b"tracestate", tracestate.encode()))
    return out


_CORRELATION_HEADERS = {b"x-run-id", b"x-trace-id", b"traceparent", b"tracestate"}


def rewrite_request_headers(
    headers: list[tuple[bytes, bytes]], corr: context.Correlation, tracestate: str | None
) -> list[tuple[bytes, bytes]]:
    """The request headers the app sees carry the effective ids, so anything that forwards them
    (the MCP tool bridge, a handler calling another service) continues the same run and trace."""
    kept = [(k, v) for k, v in headers if k.lower() not in _CORRELATION_HEADERS]
    return kept + response_headers(corr, tracestate)
