"""Chat turns per session_id in Redis, with a TTL, so a conversation continues across requests and
API processes.

Keys (all refreshed to the TTL on every turn):
  yana:chat:session:{sid}:turns   list of JSON turns (masked), trimmed to the last `max_turns`
  yana:chat:session:{sid}:state   JSON of the DSState keys that carry over (intent, slots, ...)
  yana:chat:session:{sid}:count   turns ever taken (the next turn number)

Everything written here has been PII-masked by the caller; `append_turn` masks again anyway, so a
caller's mistake cannot put a phone number into Redis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import orjson
import redis

from pipelines.chat.keys import SESSION_PREFIX
from pipelines.chat.pii import mask_obj

_SESSION_ID_RE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
# DSState keys that carry over to the next turn of the same session.
CARRIED_KEYS = ("intent", "dialogue_mode", "goal", "slots", "missing_slots", "policy")


def valid_session_id(value: str | None) -> bool:
    return bool(value and _SESSION_ID_RE.match(value))


@dataclass
class SessionSnapshot:
    turns: list[dict] = field(default_factory=list)  # oldest first
    state: dict = field(default_factory=dict)
    turn_count: int = 0

    def messages(self, last_turns: int | None = None) -> list[dict]:
        """The turns as DSState messages (user, assistant, ...), oldest first."""
        turns = self.turns if last_turns is None else self.turns[-last_turns:] if last_turns > 0 else []
        out: list[dict] = []
        for t in turns:
            if t.get("user"):
                out.append(
                    {"role": "user", "content": t["user"], "turn_id": t.get("turn_id", ""), "ts": t.get("ts", "")}
                )
            if t.get("assistant"):
                out.append(
                    {
                        "role": "assistant",
                        "content": t["assistant"],
                        "turn_id": t.get("turn_id", ""),
                        "ts": t.get("ts", ""),
                    }
                )
        return out


class SessionStore:
    def __init__(self, redis_client: redis.Redis, *, ttl_s: int, max_turns: int, prefix: str = SESSION_PREFIX) -> None:
        self.redis = redis_client
        self.ttl_s = ttl_s
        self.max_turns = max_turns
        self.prefix = prefix

    def _keys(self, session_id: str) -> tuple[str, str, str]:
        base = f"{self.prefix}{session_id}"
        return f"{base}:turns", f"{base}:state", f"{base}:count"

    def load(self, session_id: str, last_turns: int | None = None) -> SessionSnapshot:
        turns_key, state_key, count_key = self._keys(session_id)
        start = -last_turns if last_turns else 0
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(turns_key, start, -1)
        pipe.get(state_key)
        pipe.get(count_key)
        raw_turns, raw_state, raw_count = pipe.execute()
        turns = []
        for raw in raw_turns or []:
            try:
                turns.append(orjson.loads(raw))
            except orjson.JSONDecodeError:
                continue
        state = {}
        if raw_state:
            try:
                state = orjson.loads(raw_state)
            except orjson.JSONDecodeError:
                state = {}
        return SessionSnapshot(turns=turns, state=state, turn_count=int(raw_count or 0))

    def append_turn(self, session_id: str, turn: dict, state: dict) -> int:
        """Store one finished turn and the carried state; returns the session's turn count."""
        turns_key, state_key, count_key = self._keys(session_id)
        carried = {k: state[k] for k in CARRIED_KEYS if k in state}
        pipe = self.redis.pipeline(transaction=True)
        pipe.rpush(turns_key, orjson.dumps(mask_obj(turn)))
        pipe.ltrim(turns_key, -self.max_turns, -1)
        pipe.set(state_key, orjson.dumps(mask_obj(carried)), ex=self.ttl_s)
        pipe.incr(count_key)
        pipe.expire(turns_key, self.ttl_s)
        pipe.expire(count_key, self.ttl_s)
        return int(pipe.execute()[3])

    def delete(self, session_id: str) -> None:
        self.redis.delete(*self._keys(session_id))
