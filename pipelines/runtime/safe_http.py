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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from yana.errors import ErrorCode, YanaError


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


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 prefixes whose last 32 bits are an IPv4 address that the packet ends up at.
_EMBEDS_IPV4_LAST_32 = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64 well-known prefix (RFC 6052)
    ipaddress.ip_network("::ffff:0:0/96"),  # IPv4-mapped
    ipaddress.ip_network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT)
    ipaddress.ip_network("::/96"),  # IPv4-compatible (deprecated, still routed by some stacks)
)
# Never a public destination, whatever they embed: local-use NAT64 (RFC 8215) and Teredo
# (the client address inside is obfuscated and the relay is someone else's).
_REFUSED_V6 = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("2001::/32"))


def effective_address(addr: IPAddress) -> IPAddress:
    """The address a connection to addr really reaches: IPv4 unwrapped from IPv6 forms that embed
    it (mapped, translated, compatible, NAT64 64:ff9b::/96, 6to4 2002::/16)."""
    if isinstance(addr, ipaddress.IPv4Address):
        return addr
    if addr.sixtofour is not None:
        return addr.sixtofour
    for net in _EMBEDS_IPV4_LAST_32:
        if addr in net:
            return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return addr


def is_public_unicast(addr: IPAddress) -> bool:
    """Global unicast only: not private, loopback, link-local, CGNAT, reserved, unspecified,
    multicast, or an IPv6 form that carries (or hides) one of those."""
    if isinstance(addr, ipaddress.IPv6Address) and any(addr in net for net in _REFUSED_V6):
        return False
    real = effective_address(addr)
    return real.is_global and not real.is_multicast and not real.is_unspecified and not real.is_reserved


def resolve_target(url: str, allow: list[str] | None = None, *, allow_setting: str = "WEBHOOK_ALLOW") -> Target:
    """Validate a callback/fetch URL and pin it to one checked address.

    Refuses non-http(s), credentials in the URL, and any resolved address that is not global
    unicast (see is_public_unicast; IPv4 embedded in IPv6 is judged as that IPv4) unless the
    allow-list names the host or a network containing the address (or the IPv4 it embeds).
    allow_setting names the setting that holds the list, for the error message.
    Raises YanaError(BAD_REQUEST).
    """
    allow = allow or []
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"invalid URL: {exc}") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise YanaError.of(ErrorCode.BAD_REQUEST, "URL must be http(s)://host/...")
    if parts.username or parts.password:
        raise YanaError.of(ErrorCode.BAD_REQUEST, "credentials in the URL are not allowed")
    host = parts.hostname
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise YanaError.of(ErrorCode.BAD_REQUEST, f"cannot resolve host {host!r}") from exc
    addrs = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    # Every address must pass: a name that resolves to one public and one private address is
    # refused, so DNS tricks cannot pick the private one later.
    for addr in addrs:
        if is_public_unicast(addr):
            continue
        if _allowed_by_list(host, addr, allow) or _allowed_by_list(host, effective_address(addr), allow):
            continue
        raise YanaError.of(
            ErrorCode.BAD_REQUEST,
            f"URL host {host!r} resolves to {addr}, which is not a public unicast address "
            f"(private, loopback, link-local, multicast or reserved); allow it with {allow_setting} if intended",
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


def get_pinned(
    target: Target, timeout: float, max_bytes: int, headers: dict | None = None
) -> tuple[httpx.Response, bytes]:
    """GET from the checked address with a byte cap (streamed; stops reading past max_bytes).

    Returns the response (headers, status) and its body. Raises YanaError FETCH_TOO_LARGE when
    the body exceeds max_bytes, FETCH_TIMEOUT when the whole transfer exceeds timeout."""
    with (
        _pinned_client(target, timeout) as (client, url, host, sni),
        client.stream("GET", url, headers={**(headers or {}), **host}, extensions=sni) as resp,
    ):
        declared = resp.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise YanaError.of(ErrorCode.FETCH_TOO_LARGE, f"{target.url} is {declared} bytes; the limit is {max_bytes}")
        chunks, size = [], 0
        deadline = time.monotonic() + timeout  # httpx's timeout is per read; a slow drip must end too
        for chunk in resp.iter_bytes():
            if time.monotonic() > deadline:
                raise YanaError.of(ErrorCode.FETCH_TIMEOUT, f"{target.url} took longer than {timeout}s")
            size += len(chunk)
            if size > max_bytes:
                raise YanaError.of(ErrorCode.FETCH_TOO_LARGE, f"{target.url} is larger than {max_bytes} bytes")
            chunks.append(chunk)
        return resp, b"".join(chunks)
