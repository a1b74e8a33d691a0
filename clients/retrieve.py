"""Stdlib-only client for yana's retrieval API: /v1/retrieve (inline documents), /v1/search (the
stored corpus), jobs, health and version. No dependency beyond Python itself.

    client = RetrieveClient("http://127.0.0.1:8000", timeout=30, token=None)
    client.health()
    client.retrieve("query", [{"id": "d1", "text": "...", "metadata": {}}], {"top_k": 3})
    client.retrieve("query", docs, passage="window")  # text: chunk (default), window or document
    client.search("query", k=5)

Every failure is a RetrieveError with the server's `code`, `retryable` and `trace_id`. A 429 is
sent again after the server's Retry-After (for up to `rate_limit_wait` seconds per call), so the
LangChain and LlamaIndex retrievers built on this client honour it too.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

TERMINAL = ("succeeded", "failed", "cancelled")


class RetrieveError(Exception):
    """An error answer of the API (or a transport failure: code UNAVAILABLE, retryable)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        trace_id=None,
        retry_after: float | None = None,
    ):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.status = code, message, status
        self.retryable, self.trace_id = retryable, trace_id
        self.retry_after = retry_after  # seconds, from the answer's Retry-After


RETRY_AFTER_MAX_S = 60.0  # one wait is never longer, whatever the server says


class RetrieveClient:
    """`rate_limit_wait`: seconds one call may spend in all waiting out 429 answers (each wait as
    long as the server's Retry-After) before the 429 is raised as a RetrieveError; 0 raises at
    once."""

    def __init__(self, base_url: str, timeout: float = 30.0, token: str | None = None, rate_limit_wait: float = 60.0):
        if not base_url.lower().startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token = token
        self.rate_limit_wait = rate_limit_wait

    # --- transport ------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, headers: dict | None = None) -> tuple[int, Any]:
        """One call; a 429 is sent again after its Retry-After while rate_limit_wait lasts (a
        rate-limited request was not run, so sending it again is safe)."""
        waited = 0.0
        while True:
            try:
                return self._request_once(method, path, body, headers)
            except RetrieveError as exc:
                pause = exc.retry_after
                if exc.status != 429 or pause is None or waited + pause > self.rate_limit_wait:
                    raise
            time.sleep(pause)
            waited += pause

    def _request_once(self, method: str, path: str, body: Any, headers: dict | None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        h = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.base_url + path, data=data, headers=h, method=method)
        try:
            # base_url is http(s), checked in __init__ (bandit B310).
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # nosec B310
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _error_of(exc) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise RetrieveError("UNAVAILABLE", f"cannot reach {self.base_url}: {exc}", retryable=True) from None

    # --- API ------------------------------------------------------------------------------
    def health(self) -> dict:
        return self._request("GET", "/v1/health")[1]

    def version(self) -> dict:
        return self._request("GET", "/v1/version")[1]

    def retrieve(
        self,
        query: str,
        documents: list[dict],
        options: dict | None = None,
        *,
        wait: bool = True,
        passage: str | None = None,
    ) -> dict:
        """The response body ({trace_id, results, warnings, path, ...}). A request the server runs as
        a job (too large) is polled to its end when `wait`, else its 202 body is returned.
        `passage` (options.passage): what each result's `text` is — "chunk" (the server's default:
        the chunk holding the evidence, grown to whole sentences), "window" (up to three sentences)
        or "document"; `spans` are the evidence's byte ranges inside it."""
        body: dict = {"query": query, "documents": documents}
        options = with_passage(options, passage)
        if options:
            body["options"] = options
        status, out = self._request("POST", "/v1/retrieve", body)
        if status == 202 and wait:
            return self.job_result(self.wait_job(out["job_id"]))
        return out

    def retrieve_async(
        self,
        query: str,
        documents: list[dict],
        options: dict | None = None,
        callback_url=None,
        *,
        passage: str | None = None,
    ) -> dict:
        """Run the retrieve as a job (`Prefer: respond-async`): the 202 body with `job_id`."""
        body: dict = {"query": query, "documents": documents, "options": with_passage(options, passage) or {}}
        if callback_url:
            body["callback_url"] = callback_url
        return self._request("POST", "/v1/retrieve", body, {"Prefer": "respond-async"})[1]

    def search(self, query: str, k: int = 5, filters: dict | None = None, **params: Any) -> dict:
        body: dict = {"query_text": query, "k": k, **params}
        if filters:
            body["filters"] = filters
        return self._request("POST", "/v1/search", body)[1]

    def job(self, job_id: str) -> dict:
        return self._request("GET", f"/v1/jobs/{job_id}")[1]

    def wait_job(self, job_id: str, timeout: float = 300.0) -> dict:
        """Poll a job (long-polling with `Prefer: wait`) until it ends or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RetrieveError("TIMEOUT", f"job {job_id} did not end within {timeout}s", retryable=True)
            wait = max(1, min(int(left), int(self.timeout) - 1, 20))
            job = self._request("GET", f"/v1/jobs/{job_id}", headers={"Prefer": f"wait={wait}"})[1]
            if job.get("status") in TERMINAL:
                return job

    @staticmethod
    def job_result(job: dict) -> dict:
        if job.get("status") != "succeeded":
            err = job.get("error") or {}
            raise RetrieveError(
                err.get("code", "JOB_FAILED"),
                err.get("message", f"job ended {job.get('status')}"),
                retryable=bool(err.get("retryable")),
                trace_id=job.get("trace_id"),
            )
        return job.get("result") or {}


def with_passage(options: dict | None, passage: str | None) -> dict | None:
    """`options` with options.passage set when `passage` is given (the argument wins)."""
    if passage is None:
        return options
    return {**(options or {}), "passage": passage}


def _error_of(exc: urllib.error.HTTPError) -> RetrieveError:
    try:
        body = json.loads(exc.read() or b"{}")
    except ValueError:
        body = {}
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        err = {}
    retry_after = None
    header = exc.headers.get("Retry-After") if exc.headers is not None else None
    if exc.code == 429:
        try:
            retry_after = float(header) if header is not None else 1.0
        except ValueError:
            retry_after = 1.0
        retry_after = min(max(retry_after, 0.1), RETRY_AFTER_MAX_S)
    return RetrieveError(
        err.get("code") or f"HTTP_{exc.code}",
        err.get("message") or str(exc.reason),
        status=exc.code,
        retryable=bool(err.get("retryable", exc.code in (408, 429, 500, 502, 503, 504))),
        trace_id=body.get("trace_id") if isinstance(body, dict) else None,
        retry_after=retry_after,
    )
