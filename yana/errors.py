"""The one error type and the one table of error codes.

Every HTTP error body and every failed job carries a `YanaError.body()`. Each code has one HTTP
status and says whether retrying the same request may succeed (ERRORS); raise with
`YanaError.of(ErrorCode.X, message)` or a helper such as `bad_request(message)`, so the status is
never written twice. `YanaError(code, message, status, retryable)` still works for codes built at
run time (a failed item's code carried into its job's error).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple


class ErrorCode(StrEnum):
    # generic: what an HTTP status means when nothing more specific is known
    BAD_REQUEST = "BAD_REQUEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    NOT_FOUND = "NOT_FOUND"
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    CONFLICT = "CONFLICT"
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE"
    UNPROCESSABLE = "UNPROCESSABLE"
    RATE_LIMITED = "RATE_LIMITED"
    INTERNAL = "INTERNAL"
    UPSTREAM_UNAVAILABLE = "UPSTREAM_UNAVAILABLE"
    UPSTREAM_TIMEOUT = "UPSTREAM_TIMEOUT"
    # specific
    BAD_CATEGORY = "BAD_CATEGORY"
    BAD_DOCUMENT = "BAD_DOCUMENT"
    CORRUPT_IMAGE = "CORRUPT_IMAGE"
    EMPTY_IMAGE = "EMPTY_IMAGE"
    IMAGE_TOO_LARGE = "IMAGE_TOO_LARGE"
    IMAGE_TOO_MANY_PIXELS = "IMAGE_TOO_MANY_PIXELS"
    UNSUPPORTED_IMAGE_TYPE = "UNSUPPORTED_IMAGE_TYPE"
    FETCH_FAILED = "FETCH_FAILED"
    FETCH_TIMEOUT = "FETCH_TIMEOUT"
    FETCH_TOO_LARGE = "FETCH_TOO_LARGE"
    FILE_NOT_FOUND = "FILE_NOT_FOUND"
    PATH_NOT_ALLOWED = "PATH_NOT_ALLOWED"
    URL_NOT_ALLOWED = "URL_NOT_ALLOWED"
    IMPORT_DISABLED = "IMPORT_DISABLED"
    SOURCE_MISSING = "SOURCE_MISSING"
    MODEL_MISMATCH = "MODEL_MISMATCH"
    MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
    MODEL_NOT_ALLOWED = "MODEL_NOT_ALLOWED"
    EMBED_TIMEOUT = "EMBED_TIMEOUT"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    DEMO_FAILURE = "DEMO_FAILURE"
    # jobs: how a job ended other than by its own result
    TIMEOUT = "TIMEOUT"  # a job ran past its time limit
    WORKER_LOST = "WORKER_LOST"  # its worker stopped heartbeating more times than it may be retried
    ATTEMPTS_EXHAUSTED = "ATTEMPTS_EXHAUSTED"  # started max_attempts times, never finished
    CANCELLED = "CANCELLED"  # cancelled by request


class ErrorSpec(NamedTuple):
    status: int
    retryable: bool


C = ErrorCode
ERRORS: dict[ErrorCode, ErrorSpec] = {
    C.BAD_REQUEST: ErrorSpec(400, False),
    C.UNAUTHORIZED: ErrorSpec(401, False),
    C.FORBIDDEN: ErrorSpec(403, False),
    C.NOT_FOUND: ErrorSpec(404, False),
    C.METHOD_NOT_ALLOWED: ErrorSpec(405, False),
    C.REQUEST_TIMEOUT: ErrorSpec(408, True),
    C.CONFLICT: ErrorSpec(409, False),
    C.PAYLOAD_TOO_LARGE: ErrorSpec(413, False),
    C.UNSUPPORTED_MEDIA_TYPE: ErrorSpec(415, False),
    C.UNPROCESSABLE: ErrorSpec(422, False),
    C.RATE_LIMITED: ErrorSpec(429, True),
    C.INTERNAL: ErrorSpec(500, True),
    C.UPSTREAM_UNAVAILABLE: ErrorSpec(503, True),
    C.UPSTREAM_TIMEOUT: ErrorSpec(504, True),
    C.BAD_CATEGORY: ErrorSpec(400, False),
    C.BAD_DOCUMENT: ErrorSpec(400, False),
    C.CORRUPT_IMAGE: ErrorSpec(422, False),
    C.EMPTY_IMAGE: ErrorSpec(400, False),
    C.IMAGE_TOO_LARGE: ErrorSpec(413, False),
    C.IMAGE_TOO_MANY_PIXELS: ErrorSpec(413, False),
    C.UNSUPPORTED_IMAGE_TYPE: ErrorSpec(415, False),
    C.FETCH_FAILED: ErrorSpec(502, False),
    C.FETCH_TIMEOUT: ErrorSpec(504, True),
    C.FETCH_TOO_LARGE: ErrorSpec(413, False),
    C.FILE_NOT_FOUND: ErrorSpec(400, False),
    C.PATH_NOT_ALLOWED: ErrorSpec(400, False),
    C.URL_NOT_ALLOWED: ErrorSpec(400, False),
    C.IMPORT_DISABLED: ErrorSpec(400, False),
    C.SOURCE_MISSING: ErrorSpec(500, False),
    C.MODEL_MISMATCH: ErrorSpec(409, False),
    C.MODEL_UNAVAILABLE: ErrorSpec(503, False),
    C.MODEL_NOT_ALLOWED: ErrorSpec(422, False),
    C.EMBED_TIMEOUT: ErrorSpec(503, True),
    C.STORE_UNAVAILABLE: ErrorSpec(503, True),
    C.DEMO_FAILURE: ErrorSpec(500, False),
    C.TIMEOUT: ErrorSpec(500, True),
    C.WORKER_LOST: ErrorSpec(500, False),
    C.ATTEMPTS_EXHAUSTED: ErrorSpec(500, False),
    C.CANCELLED: ErrorSpec(409, False),
}

# The code of an HTTP status raised without one (framework errors: unknown route, wrong method...).
CODE_OF_STATUS: dict[int, ErrorCode] = {
    ERRORS[c].status: c
    for c in (
        C.BAD_REQUEST,
        C.UNAUTHORIZED,
        C.FORBIDDEN,
        C.NOT_FOUND,
        C.METHOD_NOT_ALLOWED,
        C.REQUEST_TIMEOUT,
        C.CONFLICT,
        C.PAYLOAD_TOO_LARGE,
        C.UNSUPPORTED_MEDIA_TYPE,
        C.UNPROCESSABLE,
        C.RATE_LIMITED,
        C.INTERNAL,
        C.UPSTREAM_UNAVAILABLE,
        C.UPSTREAM_TIMEOUT,
    )
} | {502: C.UPSTREAM_UNAVAILABLE}


class YanaError(Exception):
    def __init__(self, code: str, message: str, status: int = 400, retryable: bool = False):
        super().__init__(message)
        self.code = str(code)
        self.message = message
        self.status = status
        self.retryable = retryable

    @classmethod
    def of(
        cls, code: ErrorCode, message: str, *, retryable: bool | None = None, status: int | None = None
    ) -> YanaError:
        """The error for `code` with its table status and retryability (either may be overridden
        where one call site knows better, e.g. a 5xx upstream answer is worth retrying)."""
        spec = ERRORS[code]
        return cls(
            code,
            message,
            spec.status if status is None else status,
            spec.retryable if retryable is None else retryable,
        )

    def body(self) -> dict:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"YanaError({self.code!r}, {self.message!r}, status={self.status})"


def bad_request(message: str) -> YanaError:
    return YanaError.of(C.BAD_REQUEST, message)


def not_found(message: str) -> YanaError:
    return YanaError.of(C.NOT_FOUND, message)


def conflict(message: str, *, retryable: bool | None = None) -> YanaError:
    return YanaError.of(C.CONFLICT, message, retryable=retryable)


def internal(message: str = "internal error") -> YanaError:
    return YanaError.of(C.INTERNAL, message)


_OBJECT_REPR = re.compile(r"\s*<(?!\s)[^\n]*?\bat 0x[0-9a-fA-F]+>")
_ADDRESS = re.compile(r"\s*\b0x[0-9a-fA-F]{6,}\b")


def describe(exc: BaseException, limit: int = 200) -> str:
    """What failed, for an error message a caller reads: the exception's class and message
    without object reprs or memory addresses (`<_io.BytesIO object at 0x…>` says nothing to a
    caller and differs per process)."""
    text = _ADDRESS.sub("", _OBJECT_REPR.sub("", str(exc))).strip(" :;,")
    text = " ".join(text.split())[:limit]
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
