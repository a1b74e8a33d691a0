"""Identifiers: job ids, correlation ids and W3C trace context."""

from __future__ import annotations

import re
import secrets
import uuid

_JOB_ID_RE = re.compile(r"^[0-9a-f]{32}$")
_CORRELATION_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_TRACEPARENT_RE = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def new_job_id() -> str:
    return uuid.uuid4().hex


def valid_job_id(value: str) -> bool:
    """A job id as new_job_id makes it (32 lowercase hex digits); anything else names no job."""
    return bool(_JOB_ID_RE.match(value))


def new_run_id() -> str:
    return uuid.uuid4().hex


def valid_correlation_id(value: str | None) -> bool:
    return bool(value and _CORRELATION_RE.match(value))


def parse_traceparent(value: str | None) -> tuple[str, str, str] | None:
    """(trace_id, parent_id, flags) of a valid W3C traceparent, else None."""
    if not value:
        return None
    m = _TRACEPARENT_RE.match(value.strip())
    if not m:
        return None
    version, trace_id, parent_id, flags, rest = m.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    if version == "00" and rest:
        return None
    return trace_id, parent_id, flags


def new_span_id() -> str:
    return secrets.token_hex(8)


def new_trace_id() -> str:
    return secrets.token_hex(16)


def make_traceparent(trace_id: str, span_id: str | None = None, flags: str = "01") -> str:
    return f"00-{trace_id}-{span_id or new_span_id()}-{flags}"
