"""Correlation context (run_id, trace_id, traceparent) for the current request or task.

Set by the API middleware for a request and by the Task base class for a task; read by the
JSON log formatter, the job store and the webhook sender, so the same ids travel everywhere.
"""

from __future__ import annotations

import contextvars
from dataclasses import asdict, dataclass

from yana import ids


@dataclass(frozen=True)
class Correlation:
    run_id: str
    trace_id: str
    traceparent: str

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def new(cls) -> Correlation:
        trace = ids.new_trace_id()
        return cls(run_id=ids.new_run_id(), trace_id=trace, traceparent=ids.make_traceparent(trace))

    @classmethod
    def from_dict(cls, d: dict | None) -> Correlation:
        if not d:
            return cls.new()
        fresh = cls.new()
        return cls(
            run_id=d.get("run_id") or fresh.run_id,
            trace_id=d.get("trace_id") or fresh.trace_id,
            traceparent=d.get("traceparent") or fresh.traceparent,
        )


_current: contextvars.ContextVar[Correlation | None] = contextvars.ContextVar("yana_corr", default=None)


def current() -> Correlation | None:
    return _current.get()


def set_current(corr: Correlation | None) -> contextvars.Token:
    return _current.set(corr)


def reset(token: contextvars.Token) -> None:
    _current.reset(token)


def body_ids() -> dict:
    """run_id / trace_id of the current request, for the bodies the seed says carry them."""
    corr = _current.get()
    return {"run_id": corr.run_id if corr else None, "trace_id": corr.trace_id if corr else None}


# Where the jobs of the current request's Idempotency-Key are bound (a Redis hash, set by the API
# middleware): job creation binds each job to it, so a retry after a crash finds that job instead
# of making another.
_idempotency: contextvars.ContextVar[str | None] = contextvars.ContextVar("yana_idem", default=None)


def idempotency_record() -> str | None:
    return _idempotency.get()


def set_idempotency_record(key: str | None) -> contextvars.Token:
    return _idempotency.set(key)


def reset_idempotency_record(token: contextvars.Token) -> None:
    _idempotency.reset(token)
