"""Speaker A (やな) for the talk app: one SpeakerProvider protocol, three ways to reach it.

    from clients.speaker import make_speaker
    speaker = make_speaker()                           # SPEAKER_A_* variables
    reply, meta = speaker.generate("小樽のお酒ある？", run_id="run-1", top_k=5, filters={}, timeout_ms=12000)

Modes (SPEAKER_A_MODE):
  * ``http`` (default): JSON POST /v1/chat; a server that answers 404 there gets the legacy form
    POST /chat. Standard library only.
  * ``mcp``: the `chat` tool over MCP, either a stdio subprocess (SPEAKER_A_MCP_COMMAND, default
    ``yana mcp --api <SPEAKER_A_HTTP_BASE>``) or streamable HTTP (SPEAKER_A_MCP_URL, e.g.
    http://127.0.0.1:8000/mcp). Standard library plus httpx.
  * ``local``: the chat pipeline in this process. That provider is part of the server package
    (pipelines.chat.speaker_local), which registers it under the entry-point group
    ``yana.speakers``: this module imports no server code and finds it only when it is installed.

`meta`: {hits, elapsed_ms, trace_id, run_id, warnings, llm, source} (+ error, fallback, skip,
retried_after). Behaviour, the same for every mode: the request is checked against the contract's
limits before it is sent (user_text 1..4000 characters, top_k 1..10, filter keys category /
region / brewery); the server is told the caller's ceiling (timeout_ms minus a network margin) so
it answers with its own fallback before the caller gives up; an error with retryable=true is
retried once after a short backoff; a server error while use_rag was on is retried once with
use_rag=false; when all fails, either a fixed short text (SPEAKER_A_ON_FAILURE=fixed, the default)
or an empty reply with meta["skip"]=True (SPEAKER_A_ON_FAILURE=skip) so the caller skips the turn.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from importlib.metadata import entry_points
from typing import Any, Protocol

# Providers other packages add (the server package adds `local`): name -> provider class.
SPEAKER_ENTRY_POINTS = "yana.speakers"
FALLBACK_TEXT = "ごめんな、いまちょっと答えられへんねん。また後で聞いてな。"
_NETWORK_MARGIN_MS = 500
USER_TEXT_MAX = 4000
TOP_K_RANGE = (1, 10)
FILTER_KEYS = frozenset({"category", "region", "brewery"})
REPLY_MAX_CHARS = 400  # a run-on reply is cut at the last sentence end within this
_SENTENCE_END = "。！？!?.\n"
# HTTP status of an error code, for transports that carry only the code (MCP tool errors).
_STATUS_OF_CODE = {
    "BAD_REQUEST": 400,
    "UNAUTHORIZED": 401,
    "NOT_FOUND": 404,
    "REQUEST_TIMEOUT": 408,
    "CONFLICT": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "UNPROCESSABLE": 422,
    "RATE_LIMITED": 429,
    "INTERNAL": 500,
    "UPSTREAM_UNAVAILABLE": 503,
    "UPSTREAM_TIMEOUT": 504,
}


class SpeakerProvider(Protocol):
    def generate(
        self, user_text: str, *, run_id: str, top_k: int, filters: dict, timeout_ms: int
    ) -> tuple[str, dict]: ...


class SpeakerError(Exception):
    def __init__(self, code: str, message: str, retryable: bool, status: int | None = None):
        super().__init__(message)
        self.code, self.message, self.retryable, self.status = code, message, retryable, status


def _env_bool(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def _error_from_body(body: Any, status: int | None) -> SpeakerError:
    err = body.get("error") if isinstance(body, dict) else None
    err = err if isinstance(err, dict) else {}
    code = err.get("code") or (f"HTTP_{status}" if status else "UNKNOWN")
    status = status or _STATUS_OF_CODE.get(code)
    retryable = err.get("retryable")
    if retryable is None:
        retryable = status is not None and (status >= 500 or status in (408, 429))
    return SpeakerError(code, err.get("message") or code, bool(retryable), status)


def check_request(user_text: str, top_k: int, filters: dict) -> None:
    """The contract's limits, checked before anything is sent (a refused request costs no call)."""
    if not isinstance(user_text, str) or not user_text.strip():
        raise SpeakerError("BAD_REQUEST", "user_text must not be blank", False, 400)
    if len(user_text) > USER_TEXT_MAX:
        raise SpeakerError("BAD_REQUEST", f"user_text is longer than {USER_TEXT_MAX} characters", False, 400)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not TOP_K_RANGE[0] <= top_k <= TOP_K_RANGE[1]:
        raise SpeakerError("BAD_REQUEST", f"top_k must be an integer in {TOP_K_RANGE[0]}..{TOP_K_RANGE[1]}", False, 400)
    unknown = set(filters or {}) - FILTER_KEYS
    if unknown:
        raise SpeakerError("BAD_REQUEST", f"unknown filter keys: {sorted(unknown)}", False, 400)


def trim_reply(reply: str, max_chars: int) -> str:
    """Cut at the last sentence end within max_chars (hard cut when there is none)."""
    head = reply[:max_chars]
    cut = max(head.rfind(ch) for ch in _SENTENCE_END)
    return head[: cut + 1].strip() if cut >= max_chars // 3 else head.strip()


class _ResilientSpeaker:
    """The retry / RAG-off / fallback behaviour every mode shares; subclasses make one call."""

    source = "speaker"

    def __init__(
        self,
        *,
        use_rag: bool = True,
        top_k: int = 5,
        filters: dict | None = None,
        timeout_ms: int = 12000,
        auth_token: str | None = None,
        on_failure: str = "fixed",
        session_id: str | None = None,
        disable_sayana: bool = False,
        backoff_s: float = 0.3,
        max_reply_chars: int = REPLY_MAX_CHARS,
    ) -> None:
        self.max_reply_chars = max_reply_chars
        self.use_rag = use_rag
        self.top_k = top_k
        self.filters = dict(filters or {})
        self.timeout_ms = timeout_ms
        self.auth_token = auth_token
        self.on_failure = on_failure
        self.session_id = session_id
        self.disable_sayana = disable_sayana
        self.backoff_s = backoff_s

    @staticmethod
    def _options_from_env(e) -> dict:
        return {
            "use_rag": _env_bool(e.get("SPEAKER_A_USE_RAG"), True),
            "top_k": int(e.get("SPEAKER_A_TOP_K") or 5),
            "filters": json.loads(e.get("SPEAKER_A_FILTERS_JSON") or "{}"),
            "timeout_ms": int(e.get("SPEAKER_A_TIMEOUT_MS") or 12000),
            "auth_token": e.get("SPEAKER_A_AUTH_TOKEN") or None,
            "on_failure": e.get("SPEAKER_A_ON_FAILURE") or "fixed",
            "session_id": e.get("SPEAKER_A_SESSION_ID") or None,
            "max_reply_chars": int(e.get("SPEAKER_A_MAX_REPLY_CHARS") or REPLY_MAX_CHARS),
        }

    def _call(self, body: dict, *, run_id: str, timeout_s: float) -> tuple[dict, dict]:
        """One chat call: (response body, response headers) or SpeakerError."""
        raise NotImplementedError

    def _body(
        self, user_text: str, run_id: str, top_k: int, filters: dict, turn: int | None, topic: str | None
    ) -> dict:
        context: dict[str, Any] = {"run_id": run_id, "disable_sayana": self.disable_sayana}
        if self.session_id:
            context["session_id"] = self.session_id
        if turn is not None:
            context["turn"] = turn
        if topic:
            context["topic"] = topic
        return {"user_text": user_text, "use_rag": self.use_rag, "top_k": top_k, "filters": filters, "context": context}

    def generate(
        self,
        user_text: str,
        *,
        run_id: str,
        top_k: int | None = None,
        filters: dict | None = None,
        timeout_ms: int | None = None,
        turn: int | None = None,
        topic: str | None = None,
    ) -> tuple[str, dict]:
        timeout_ms = timeout_ms or self.timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        top_k = top_k or self.top_k
        filters = self.filters if filters is None else filters
        attempts: list[str] = []
        try:
            check_request(user_text, top_k, filters)
        except SpeakerError as exc:
            return self._failed(timeout_ms, deadline, [exc.code])
        body = self._body(user_text, run_id, top_k, filters, turn, topic)
        retried = rag_dropped = False
        while True:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms < 200:
                break
            # The server answers with its own fallback before our deadline.
            body["timeout_ms"] = int(max(100, min(120_000, left_ms - _NETWORK_MARGIN_MS)))
            t = time.monotonic()
            try:
                data, headers = self._call(body, run_id=run_id, timeout_s=left_ms / 1000)
            except SpeakerError as exc:
                attempts.append(exc.code)
                if body["use_rag"] and not rag_dropped and exc.status is not None and exc.status >= 500:
                    body["use_rag"], rag_dropped = False, True  # RAG down: ask again without it, once
                    continue
                if exc.retryable and not retried:
                    retried = True
                    time.sleep(min(self.backoff_s, max(0.0, deadline - time.monotonic() - 0.2)))
                    continue
                break
            reply = str(data.get("reply") or "").strip()
            if not reply:  # an empty answer is a failed turn, asked once more like a retryable error
                attempts.append("EMPTY_REPLY")
                if retried:
                    break
                retried = True
                continue
            headers = {k.lower(): v for k, v in headers.items()}
            meta = {
                "hits": data.get("hits", []),
                "elapsed_ms": data.get("elapsed_ms", int((time.monotonic() - t) * 1000)),
                "trace_id": data.get("trace_id") or headers.get("x-trace-id"),
                "run_id": data.get("run_id") or headers.get("x-run-id"),
                "warnings": list(data.get("warnings", [])),
                "llm": data.get("llm"),
                "source": self.source,
            }
            if attempts:
                meta["retried_after"] = attempts
            if len(reply) > self.max_reply_chars:
                reply = trim_reply(reply, self.max_reply_chars)
                meta["warnings"].append("reply_trimmed_by_speaker")
            return reply, meta
        return self._failed(timeout_ms, deadline, attempts)

    def _failed(self, timeout_ms: int, deadline: float, attempts: list[str]) -> tuple[str, dict]:
        meta = {
            "hits": [],
            "elapsed_ms": int(timeout_ms - (deadline - time.monotonic()) * 1000),
            "trace_id": None,
            "warnings": ["speaker_failed"],
            "error": attempts[-1] if attempts else "CLIENT_TIMEOUT",
            "source": self.source,
            "fallback": True,
        }
        if self.on_failure == "skip":
            meta["skip"] = True
            return "", meta
        return FALLBACK_TEXT, meta


class SpeakerAHttpProvider(_ResilientSpeaker):
    """JSON POST /v1/chat (standard library only); the legacy form POST /chat when /v1/chat is 404."""

    source = "http_v1"

    def __init__(self, base_url: str = "http://127.0.0.1:8000", **options: Any) -> None:
        super().__init__(**options)
        if not base_url.lower().startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._legacy = False

    @classmethod
    def from_env(cls, env: dict | None = None) -> SpeakerAHttpProvider:
        e = os.environ if env is None else env
        return cls(e.get("SPEAKER_A_HTTP_BASE", "http://127.0.0.1:8000"), **cls._options_from_env(e))

    def _call(self, body: dict, *, run_id: str, timeout_s: float) -> tuple[dict, dict]:
        if not self._legacy:
            try:
                return self._post(body, run_id=run_id, timeout_s=timeout_s)
            except SpeakerError as exc:
                if exc.status != 404:
                    raise
                self._legacy = True  # an older server: the form endpoint from now on
        return self._post_form(body, run_id=run_id, timeout_s=timeout_s)

    def _headers(self, run_id: str, content_type: str) -> dict:
        headers = {"Content-Type": content_type, "Accept": "application/json", "X-Run-Id": run_id}
        if self.auth_token:
            headers["Authorization"] = f"Bearer {self.auth_token}"
        return headers

    def _post(self, body: dict, *, run_id: str, timeout_s: float) -> tuple[dict, dict]:
        data = json.dumps(body).encode()
        return self._send(f"{self.base_url}/v1/chat", data, self._headers(run_id, "application/json"), timeout_s)

    def _post_form(self, body: dict, *, run_id: str, timeout_s: float) -> tuple[dict, dict]:
        form = {
            "user_text": body["user_text"],
            "use_rag": str(body["use_rag"]).lower(),
            "top_k": str(body["top_k"]),
            "filters": json.dumps(body.get("filters") or {}, ensure_ascii=False),
            "context": json.dumps(body.get("context") or {}, ensure_ascii=False),
        }
        data = urllib.parse.urlencode(form).encode()
        headers = self._headers(run_id, "application/x-www-form-urlencoded")
        return self._send(f"{self.base_url}/chat", data, headers, timeout_s)

    @staticmethod
    def _send(url: str, data: bytes, headers: dict, timeout_s: float) -> tuple[dict, dict]:
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            # base_url is http(s), checked in __init__ (bandit B310).
            with urllib.request.urlopen(req, timeout=max(0.1, timeout_s)) as resp:  # nosec B310
                return json.loads(resp.read() or b"{}"), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            try:
                payload = json.loads(exc.read() or b"{}")
            except ValueError:
                payload = {}
            raise _error_from_body(payload, exc.code) from None
        except TimeoutError:
            raise SpeakerError("CLIENT_TIMEOUT", "no answer within the caller's timeout", True) from None
        except (urllib.error.URLError, ConnectionError, ValueError) as exc:
            raise SpeakerError("UNREACHABLE", str(exc), True) from None


class _StdioRpc:
    """A newline-delimited JSON-RPC connection to a subprocess (`yana mcp`), started on first use
    and started again if it died."""

    def __init__(self, command: list[str], env: dict | None = None):
        self.command = command
        self.env = env
        self.proc: subprocess.Popen | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _ensure(self, timeout_s: float) -> subprocess.Popen:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        self.proc = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self.env
        )
        self._request_locked(
            "initialize",
            {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "speaker-a", "version": "1"}},
            timeout_s,
        )
        self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self.proc

    def _write(self, message: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message, ensure_ascii=False).encode() + b"\n")
        self.proc.stdin.flush()

    def _request_locked(self, method: str, params: dict, timeout_s: float) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        rid = next(self._ids)
        self._write({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        result: dict = {}

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            while True:
                line = self.proc.stdout.readline()
                if not line:
                    return
                msg = json.loads(line)
                if msg.get("id") == rid:
                    result["msg"] = msg
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        if reader.is_alive() or "msg" not in result:
            self.close()  # a stuck or dead subprocess: start a fresh one next time
            raise SpeakerError("CLIENT_TIMEOUT", f"no MCP answer to {method} within {timeout_s:.1f}s", True)
        return result["msg"]

    def request(self, method: str, params: dict, timeout_s: float) -> dict:
        with self._lock:
            try:
                self._ensure(timeout_s)
                return self._request_locked(method, params, timeout_s)
            except (OSError, ValueError) as exc:
                self.close()
                raise SpeakerError("UNREACHABLE", f"MCP subprocess: {exc}", True) from None

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.proc = None


class _HttpRpc:
    """JSON-RPC over MCP streamable HTTP (httpx): one session, JSON or SSE answers."""

    def __init__(self, url: str, token: str | None):
        import httpx  # the only dependency beyond the standard library, for this mode alone

        self.httpx = httpx
        self.url = url
        self.headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.session_id: str | None = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _post(self, message: dict, timeout_s: float) -> dict | None:
        headers = dict(self.headers)
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        try:
            r = self.httpx.post(self.url, json=message, headers=headers, timeout=max(0.1, timeout_s))
        except self.httpx.TimeoutException:
            raise SpeakerError("CLIENT_TIMEOUT", "no MCP answer within the caller's timeout", True) from None
        except self.httpx.HTTPError as exc:
            raise SpeakerError("UNREACHABLE", str(exc), True) from None
        if r.status_code >= 400:
            try:
                payload = r.json()
            except ValueError:
                payload = {}
            if r.status_code == 404 and self.session_id:
                self.session_id = None  # the server forgot the session: start a new one
            raise _error_from_body(payload, r.status_code)
        self.session_id = r.headers.get("mcp-session-id") or self.session_id
        if "id" not in message:
            return None
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            for line in r.text.splitlines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:])
                    if msg.get("id") == message["id"]:
                        return msg
            raise SpeakerError("BAD_RESPONSE", "no answer in the MCP event stream", True)
        return r.json()

    def request(self, method: str, params: dict, timeout_s: float) -> dict:
        with self._lock:
            if self.session_id is None:
                init = {
                    "protocolVersion": "2025-03-26",
                    "capabilities": {},
                    "clientInfo": {"name": "speaker-a", "version": "1"},
                }
                self._post({"jsonrpc": "2.0", "id": next(self._ids), "method": "initialize", "params": init}, timeout_s)
                self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout_s)
            answer = self._post(
                {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}, timeout_s
            )
            assert answer is not None
            return answer

    def close(self) -> None:
        self.session_id = None


class SpeakerAMcpProvider(_ResilientSpeaker):
    """The `chat` tool over MCP: a stdio subprocess (`command`) or streamable HTTP (`url`)."""

    source = "mcp"

    def __init__(
        self, *, command: list[str] | None = None, url: str | None = None, env: dict | None = None, **options: Any
    ):
        super().__init__(**options)
        if bool(command) == bool(url):
            raise ValueError("give exactly one of command (stdio) or url (streamable HTTP)")
        self.rpc: _StdioRpc | _HttpRpc = _StdioRpc(command, env) if command else _HttpRpc(url or "", self.auth_token)

    @classmethod
    def from_env(cls, env: dict | None = None) -> SpeakerAMcpProvider:
        e = os.environ if env is None else env
        options = cls._options_from_env(e)
        if e.get("SPEAKER_A_MCP_URL"):
            return cls(url=e["SPEAKER_A_MCP_URL"], **options)
        base = e.get("SPEAKER_A_HTTP_BASE", "http://127.0.0.1:8000")
        command = shlex.split(e.get("SPEAKER_A_MCP_COMMAND") or f"yana mcp --api {shlex.quote(base)}")
        child_env = dict(e)
        if options["auth_token"]:
            child_env["YANA_API_TOKEN"] = options["auth_token"]
        return cls(command=command, env=child_env, **options)

    def _call(self, body: dict, *, run_id: str, timeout_s: float) -> tuple[dict, dict]:
        answer = self.rpc.request("tools/call", {"name": "chat", "arguments": body}, timeout_s)
        if "error" in answer:
            raise SpeakerError("MCP_ERROR", str(answer["error"].get("message")), True)
        result = answer.get("result") or {}
        try:
            payload = result.get("structuredContent") or json.loads(result["content"][0]["text"])
        except (KeyError, IndexError, ValueError, TypeError):
            raise SpeakerError("BAD_RESPONSE", "the chat tool answered no JSON", True) from None
        if result.get("isError"):
            raise _error_from_body(payload, None)
        return payload, {}

    def close(self) -> None:
        self.rpc.close()


def make_speaker(env: dict | None = None) -> _ResilientSpeaker:
    """The provider SPEAKER_A_MODE names (http, mcp or local), configured from SPEAKER_A_*."""
    e = os.environ if env is None else env
    mode = (e.get("SPEAKER_A_MODE") or "http").strip().lower()
    providers: dict[str, Any] = {"http": SpeakerAHttpProvider, "mcp": SpeakerAMcpProvider}
    if mode not in providers:
        installed = {ep.name: ep for ep in entry_points(group=SPEAKER_ENTRY_POINTS)}
        if mode in installed:
            providers[mode] = installed[mode].load()
        else:
            known = sorted({*providers, *installed})
            raise ValueError(f"SPEAKER_A_MODE must be one of {known}, not {mode!r}")
    return providers[mode].from_env(e)
