"""How the data commands (ingest, dedup-report, reembed, collections) reach a yana API.

The URL comes from `--api`, else YANA_API_URL, else the DATA_DIR/up.env that `yana up` writes
(cli.main loads it into the environment), else http://API_HOST:API_PORT. Every command says on
its first stderr line which instance it talks to. An unreachable API is one clear line naming the
URL and exit code 3, never a traceback; while a command runs, a lost connection is retried for
`reconnect_s` seconds (jobs keep running on the workers meanwhile), and a URL that came from
up.env follows it when `yana up` rewrites it (its API restarted on another port).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Annotated, Optional

import httpx
import typer
from rich.console import Console
from rich.markup import escape

console = Console(stderr=True)

EXIT_UNREACHABLE = 3
UP_ENV = "up.env"  # where `yana up` tells other yana commands (ingest, dedup-report...) its URLs


def read_up_env(data_dir: Path) -> dict[str, str]:
    """The service addresses `yana up` wrote to DATA_DIR/up.env (empty when it has not run there)."""
    path = data_dir / UP_ENV
    try:
        text = path.read_text()
    except OSError:  # not there (yana up has not run, or stopped)
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


ApiOpt = Annotated[
    Optional[str],
    typer.Option(
        "--api",
        help="Base URL of the yana API. Default: YANA_API_URL, else the URL `yana up` wrote to "
        "DATA_DIR/up.env, else http://API_HOST:API_PORT.",
        show_default=False,
    ),
]
TokenOpt = Annotated[
    Optional[str], typer.Option("--token", envvar="YANA_API_TOKEN", help="Bearer token, when the API has auth on.")
]


# How long one request may wait in all on 429 / in-flight 409 answers before it gives up.
RATE_WAIT_S = 600.0
RETRY_AFTER_MAX_S = 60.0  # one wait is never longer, whatever the server says


def retry_after_s(resp: httpx.Response) -> float | None:
    """Seconds to wait before sending the request again, when the answer says to: 429, or 409
    with Retry-After (an Idempotency-Key still being processed), or a 503 with Retry-After. None
    for every other answer. A missing or unreadable Retry-After on a 429 counts as 1 s."""
    status = resp.status_code
    header = resp.headers.get("retry-after")
    if status != 429 and not (status in (409, 503) and header):
        return None
    try:
        value = float(header) if header is not None else 1.0
    except ValueError:
        value = 1.0  # an HTTP-date: this API never sends one; wait a little
    return min(max(value, 0.1), RETRY_AFTER_MAX_S)


class ApiUnreachable(Exception):
    """The API did not answer within the reconnect window."""

    def __init__(self, url: str, cause: Exception, waited_s: float):
        self.url, self.cause, self.waited_s = url, cause, waited_s
        waited = f" for {waited_s:.0f} s" if waited_s >= 1 else ""
        super().__init__(f"cannot reach the yana API at {url}{waited} ({type(cause).__name__}: {cause})")


def _safe_to_resend(method: str, headers) -> bool:
    """A resend cannot act twice: a read, or a write the server deduplicates by its key."""
    if method.upper() in ("GET", "HEAD", "OPTIONS"):
        return True
    return any(k.lower() == "idempotency-key" for k in (headers or {}))


FROM_UP_ENV = "(written by `yana up`)"


def _data_dir() -> Path:
    return Path(os.environ.get("DATA_DIR", "./data"))


def resolve_api(api: str | None) -> tuple[str, str]:
    """(base URL, where it came from)."""
    if api:
        return api.rstrip("/"), "--api"
    env_url = os.environ.get("YANA_API_URL")
    if env_url:
        if read_up_env(_data_dir()).get("YANA_API_URL") == env_url:
            return env_url.rstrip("/"), f"{_data_dir() / UP_ENV} {FROM_UP_ENV}"
        return env_url.rstrip("/"), "YANA_API_URL"
    from yana.settings import get_settings

    s = get_settings()
    return f"http://{s.api_host}:{s.api_port}", "API_HOST:API_PORT (no --api, YANA_API_URL or up.env)"


class ApiLink:
    """An httpx client plus the retry-while-unreachable rule, shared by a command's threads."""

    def __init__(
        self,
        api: str | None,
        token: str | None,
        *,
        timeout_s: float = 120.0,
        reconnect_s: float = 0.0,
        rate_wait_s: float = RATE_WAIT_S,
    ):
        self.url, self.source = resolve_api(api)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s, trust_env=False)
        self.reconnect_s = reconnect_s
        self.rate_wait_s = rate_wait_s
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self.outages = 0
        self.slow_answers = 0  # 408s sent again
        self._local = threading.local()  # per thread: did its last request need a retry?
        self.say = console.print  # a progress bar replaces it so lines print above the bar

    def announce(self) -> None:
        console.print(f"yana API {self.url}  (from {self.source})", markup=False, highlight=False, soft_wrap=True)

    def check(self) -> dict:
        """GET /v1/version once; raises ApiUnreachable (no reconnect window at start)."""
        try:
            r = self.client.get("/v1/version", timeout=10)
        except httpx.TransportError as exc:
            raise ApiUnreachable(self.url, exc, 0) from exc
        return r.json() if r.status_code == 200 else {}

    def _follow_up_env(self) -> bool:
        """With the URL from up.env: when `yana up` has rewritten it (its API restarted on another
        port, because another server took the default one), switch to the new URL."""
        if not self.source.endswith(FROM_UP_ENV):
            return False
        url = read_up_env(_data_dir()).get("YANA_API_URL", "").rstrip("/")
        with self._lock:
            if not url or url == self.url:
                return False
            self.say(f"[yellow]API {escape(self.url)} moved to {escape(url)} (up.env, rewritten by `yana up`)[/]")
            self.url = url
            self.client.base_url = httpx.URL(url)
        return True

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        """One request; a transport error or a 502/503/504 is retried until reconnect_s has passed
        since the API was first seen down, then ApiUnreachable. A 429 (rate limited) or a 409
        with Retry-After (the same Idempotency-Key still in flight) is sent again after the
        server's Retry-After, for up to rate_wait_s in all; then it is returned as it is. A 408
        (the API's own time limit, on a starved machine) is sent again within reconnect_s when a
        resend cannot do anything twice: a GET, or a request with an Idempotency-Key."""
        first_fail: float | None = None
        delay = 0.5
        waited = 0.0
        slow_since: float | None = None
        self._local.retried = False
        while True:
            try:
                r = self.client.request(method, path, **kw)
            except httpx.TransportError as exc:
                err: Exception = exc
            else:
                pause = retry_after_s(r)
                if pause is not None and waited + pause <= self.rate_wait_s:
                    self._mark_up()
                    self._local.retried = True
                    time.sleep(pause)
                    waited += pause
                    continue
                if r.status_code == 408 and self.reconnect_s > 0 and _safe_to_resend(method, kw.get("headers")):
                    self._mark_up()  # it answered: up, only slow
                    now = time.monotonic()
                    slow_since = slow_since or now
                    if now - slow_since < self.reconnect_s:
                        self._local.retried = True
                        self._say_slow(method, path)
                        time.sleep(delay)
                        delay = min(delay * 2, 5.0)
                        continue
                if r.status_code not in (502, 503, 504) or self.reconnect_s <= 0:
                    self._mark_up()
                    return r
                err = RuntimeError(f"HTTP {r.status_code}")
            now = time.monotonic()
            first_fail = first_fail or now
            self._local.retried = True
            if self._follow_up_env():
                continue
            self._mark_down(err)
            if now - first_fail >= self.reconnect_s:
                raise ApiUnreachable(self.url, err, now - first_fail) from err
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _say_slow(self, method: str, path: str) -> None:
        with self._lock:
            self.slow_answers += 1
            if self.slow_answers == 1:  # once per command: a starved machine says it on every request
                self.say(
                    f"[yellow]API {escape(self.url)} ran past its time limit on {method} {escape(path)} (408); "
                    f"sending again (safe: a read, or the same Idempotency-Key) for up to {self.reconnect_s:.0f} s[/]"
                )

    def last_retried(self) -> bool:
        """Whether this thread's last request was sent again after a failure."""
        return getattr(self._local, "retried", False)

    def _mark_down(self, err: Exception) -> None:
        with self._lock:
            if self._down_since is None:
                self._down_since = time.monotonic()
                self.outages += 1
                self.say(
                    f"[yellow]API {escape(self.url)} unreachable ({type(err).__name__}); retrying for up to "
                    f"{self.reconnect_s:.0f} s, jobs keep running on the workers[/]"
                )

    def _mark_up(self) -> None:
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is not None:
                self.say(f"[green]API {escape(self.url)} back after {time.monotonic() - self._down_since:.1f} s[/]")
                self._down_since = None

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ApiLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_link(api: str | None, token: str | None, **kw) -> ApiLink:
    """The link, announced and checked: exits 3 with one line when nothing answers."""
    link = ApiLink(api, token, **kw)
    link.announce()
    try:
        link.check()
    except ApiUnreachable as exc:
        link.close()
        unreachable(exc)
    return link


def unreachable(exc: ApiUnreachable) -> None:
    console.print(
        f"[red]{escape(str(exc))}[/]; start it with `yana up` or point --api / YANA_API_URL at a running one",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_UNREACHABLE)


def fail(resp: httpx.Response, code: int = 2) -> None:
    """Print the contract's error body of a failed response in one line and exit."""
    try:
        err = resp.json()["error"]
        msg = f"{err['code']}: {err['message']}"
    except (ValueError, KeyError, TypeError):
        msg = resp.text[:300]
    console.print(f"[red]HTTP {resp.status_code}[/red] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)
