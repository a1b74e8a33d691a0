"""Bearer-token auth (AUTH_ENABLED, AUTH_TOKENS) for the API, the MCP endpoint and Flower.

Tokens are compared in constant time against every configured token (no early exit, so timing
tells nothing about which token or prefix matched). Auth on with no token configured locks
everything but health and version: a misconfiguration fails closed.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets

from yana.errors import YanaError
from yana.settings import Settings

log = logging.getLogger("yana.auth")

FLOWER_USER = "yana"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class BearerAuth:
    def __init__(self, settings: Settings):
        self.enabled = settings.auth_enabled
        self._tokens = [t.encode() for t in settings.auth_tokens]
        if self.enabled and not self._tokens:
            log.warning("AUTH_ENABLED with no AUTH_TOKENS: every protected route answers 401")

    def valid(self, token: str | None) -> bool:
        if token is None:
            return False
        given = token.encode("utf-8", "surrogateescape")
        ok = False
        for known in self._tokens:
            ok |= hmac.compare_digest(given, known)
        return ok

    def authenticate(self, authorization: str | None) -> str | None:
        """The caller's token when auth is on (raises 401 when missing or wrong); None when off."""
        if not self.enabled:
            return None
        token = bearer_token(authorization)
        if self.valid(token):
            return token
        challenge = 'Bearer realm="yana"' + (', error="invalid_token"' if token else "")
        err = YanaError(
            "UNAUTHORIZED", "missing or invalid bearer token" if token is None else "invalid bearer token", 401
        )
        err.headers = {"WWW-Authenticate": challenge}  # type: ignore[attr-defined]
        raise err


def caller_identity(token: str | None, client_host: str | None) -> str:
    """Whose budget and idempotency keys a request uses: the token (hashed, never stored in
    clear), or the client address when auth is off."""
    if token is not None:
        return "t:" + hashlib.sha256(token.encode()).hexdigest()[:24]
    return "a:" + (client_host or "unknown")


FLOWER_AUTH_ENV = "FLOWER_BASIC_AUTH"


def flower_auth_env(settings: Settings) -> dict[str, str]:
    """Environment that makes Flower answer 401 without a valid token when auth is on.

    Flower has no bearer scheme; its HTTP Basic auth takes a list of user:password pairs, so
    every API token becomes a password of user `yana`: `curl -u yana:$TOKEN http://flower/...`.
    Passed as FLOWER_BASIC_AUTH (Flower reads FLOWER_<OPTION> variables), not `--basic-auth=` on
    the command line, where `ps` shows it to every user of the host. Basic auth also covers
    Flower's /api (FLOWER_UNAUTHENTICATED_API is then irrelevant); cli/flower_main.py extends it
    to /metrics and /healthcheck. With auth on and no token, a random password nobody knows keeps
    Flower closed.
    """
    if not settings.auth_enabled:
        return {}
    tokens = [t for t in settings.auth_tokens if t] or [secrets.token_urlsafe(32)]
    return {FLOWER_AUTH_ENV: ",".join(f"{FLOWER_USER}:{t}" for t in tokens)}
