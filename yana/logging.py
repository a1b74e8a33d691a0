"""JSON-lines logging. Every record carries run_id / trace_id from the correlation context."""

from __future__ import annotations

import logging
import sys
import time

import orjson

from yana import context

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonLinesFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        corr = context.current()
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if corr is not None:
            out.setdefault("run_id", corr.run_id)
            out.setdefault("trace_id", corr.trace_id)
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure(level: str = "INFO", stream=None) -> None:
    """Route the root logger to JSON lines on stderr (idempotent)."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_yana", False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLinesFormatter())
    handler._yana = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
