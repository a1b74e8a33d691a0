"""Outbound HTTP that cannot be pointed at our own network (SSRF): webhook deliveries and
ingest's URL sources both go through here.

A URL is resolved once, every address it resolves to must be global (or allowed by an explicit
allow-list), and the connection then goes to that checked address, keeping the Host header and
TLS SNI, so a second DNS answer cannot swap in a private address. Redirects are never followed
here; a caller that follows them checks each hop with resolve_target again.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx

from yana.errors import YanaError

@dataclass(frozen=True)
class Target:
    url: str  # as given
    host: str
    port: int
    scheme: str
    address: str  # the checked IP we connect to


def _allowed_by_list(host: str, addr: ipaddress._BaseAddress, allow: list[str]) -> bool:
    for entry in allow:
        entry = entry.strip()
        if not entry:
            continue
        if entry.lower() == host.lower():
            return True
        try:
            if addr in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


def resolve_target(url: str, allow: list[str] | None = None) -> Target:
    """Validate a callback/fetch URL and pin it to one checked address.

    Refuses non-http(s), credentials in the URL, and any resolved address that is not global
    (loopback, private, link-local, CGNAT, multicast, reserved) unless the allow-list names the
    host or a network containing the address. Raises YanaError(BAD_REQUEST).
    """
    allow = allow or []
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise YanaError("BAD_REQUEST", f"invalid URL: {exc}", 400) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise YanaError("BAD_REQUEST", "callback URL must be http(s)://host/...", 400)
    if parts.username or parts.password:
        raise YanaError("BAD_REQUEST", "credentials in the URL are not allowed", 400)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise YanaError("BAD_REQUEST", f"cannot resolve host {host!r}", 400) from exc
    addrs = []
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
            addr = addr.ipv4_mapped
        addrs.append(addr)
    # Every address must pass: a name that resolves to one public and one private address is
    # refused, so DNS tricks cannot pick the private one later.
    for addr in addrs:
        if not addr.is_global and not _allowed_by_list(host, addr, allow):
            raise YanaError(
                "BAD_REQUEST",
                "callback URL resolves to a private, loopback or link-local address; "
                "allow it with WEBHOOK_ALLOW if intended",
                400,
            )
    return Target(url=url, host=host, port=port, scheme=parts.scheme, address=str(addrs[0]))


@contextmanager
def _pinned_client(target: Target, timeout: float) -> Iterator[tuple[httpx.Client, str, dict, dict]]:
    """A client plus (url to the checked address, Host header, TLS SNI extension) for target."""
    parts = urlsplit(target.url)
    ip = target.address
    netloc_ip = f"[{ip}]" if ":" in ip else ip
    pinned = urlunsplit((parts.scheme, f"{netloc_ip}:{target.port}", parts.path or "/", parts.query, ""))
    host = {"Host": target.host if parts.port is None else f"{target.host}:{parts.port}"}
    sni = {"sni_hostname": target.host} if target.scheme == "https" else {}
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        yield client, pinned, host, sni


def post_pinned(target: Target, body: bytes, headers: dict, timeout: float) -> httpx.Response:
    """POST to the checked address (not a fresh DNS lookup)."""
    with _pinned_client(target, timeout) as (client, url, host, sni):
        return client.post(url, content=body, headers={**headers, **host}, extensions=sni)


def get_pinned(target: Target, timeout: float, max_bytes: int, headers: dict | None = None) -> tuple[httpx.Response, bytes]:
    """GET from the checked address with a byte cap (streamed; stops reading past max_bytes).

    Returns the response (headers, status) and its body. Raises YanaError FETCH_TOO_LARGE when
    the body exceeds max_bytes, FETCH_TIMEOUT when the whole transfer exceeds timeout."""
    with _pinned_client(target, timeout) as (client, url, host, sni):
        with client.stream("GET", url, headers={**(headers or {}), **host}, extensions=sni) as resp:
            declared = resp.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise YanaError("FETCH_TOO_LARGE", f"{target.url} is {declared} bytes; the limit is {max_bytes}", 413)
            chunks, size = [], 0
            deadline = time.monotonic() + timeout  # httpx's timeout is per read; a slow drip must end too
            for chunk in resp.iter_bytes():
                if time.monotonic() > deadline:
                    raise YanaError("FETCH_TIMEOUT", f"{target.url} took longer than {timeout}s", 504, retryable=True)
                size += len(chunk)
                if size > max_bytes:
                    raise YanaError("FETCH_TOO_LARGE", f"{target.url} is larger than {max_bytes} bytes", 413)
                chunks.append(chunk)
            return resp, b"".join(chunks)
