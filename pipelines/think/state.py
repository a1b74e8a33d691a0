"""The step state that travels through the caller: JSON, signed with HMAC-SHA256.

The think service keeps nothing between calls, so the loop counter rides in the state. Signing makes
it tamper-evident: an edited or foreign state is refused (INVALID_INPUT); an emptied one is allowed,
but the round is then counted from the search history the caller sends (the larger of the two), so
dropping the state never buys extra rounds. The secret is THINK_STATE_SECRET, or one derived from
WEBHOOK_SECRET, so every API process of a deployment verifies every other's states.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson

from yana.settings import Settings

VERSION = 1


class StateError(ValueError):
    """The state is not one this deployment signed (or not for this question)."""


def secret_of(s: Settings) -> bytes:
    if s.think_state_secret:
        return s.think_state_secret.encode()
    return hmac.new(s.webhook_secret.encode(), b"yana-think-state-v1", hashlib.sha256).digest()


def query_digest(user_query: str, subject_id: str) -> str:
    return hashlib.sha256(f"{subject_id}\x00{user_query}".encode()).hexdigest()[:24]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(payload: dict, secret: bytes) -> str:
    body = _b64(orjson.dumps({"v": VERSION, **payload}, option=orjson.OPT_SORT_KEYS))
    mac = _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())
    return f"{body}.{mac}"


def verify(token: str, secret: bytes) -> dict:
    try:
        body, mac = token.strip().split(".")
        want = _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())
        if not hmac.compare_digest(mac, want):
            raise StateError("state signature does not verify (edited, or from another deployment)")
        data = orjson.loads(_unb64(body))
    except StateError:
        raise
    except (ValueError, orjson.JSONDecodeError) as exc:
        raise StateError("state is not a token this service issued") from exc
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise StateError("state has an unknown version")
    return data
