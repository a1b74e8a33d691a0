"""The one error type. Every HTTP error body and every failed job carries its `body()`."""

from __future__ import annotations


class YanaError(Exception):
    def __init__(self, code: str, message: str, status: int = 400, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.retryable = retryable

    def body(self) -> dict:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"YanaError({self.code!r}, {self.message!r}, status={self.status})"


def bad_request(message: str) -> YanaError:
    return YanaError("BAD_REQUEST", message, 400)


def not_found(message: str) -> YanaError:
    return YanaError("NOT_FOUND", message, 404)


def conflict(message: str) -> YanaError:
    return YanaError("CONFLICT", message, 409)


def internal(message: str = "internal error") -> YanaError:
    return YanaError("INTERNAL", message, 500, retryable=True)
