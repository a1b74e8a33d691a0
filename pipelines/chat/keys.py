"""The Redis layout of chat: the only module that spells its keys.

yana:chat:session:{sid}:turns   list of JSON turns (masked), trimmed to the last `max_turns`
yana:chat:session:{sid}:state   JSON of the dialogue-state keys that carry over
yana:chat:session:{sid}:count   turns ever taken (the next turn number)
yana:chat:breaker:{name}        hash: a circuit breaker's shared state (the LLM's, think's)
"""

SESSION_PREFIX = "yana:chat:session:"


def breaker_key(name: str) -> str:
    return f"yana:chat:breaker:{name}"
