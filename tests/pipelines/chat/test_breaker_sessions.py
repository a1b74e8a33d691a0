"""The Redis-shared circuit breaker and the session store, on the stack's real Redis."""

from __future__ import annotations

import os
import socket
import time
import uuid

import orjson

from cli.processes import free_port, start_redis
from pipelines.chat.breaker import CircuitBreaker
from pipelines.chat.sessions import SessionStore
from tests.stack import wait_for
from yana.clients import get_fast_redis
from yana.settings import Settings


def _breaker(redis_client, name=None, **kw) -> CircuitBreaker:
    kw.setdefault("failure_threshold", 3)
    kw.setdefault("open_s", 1.5)  # long enough that "open" is seen before it lapses, even under load
    kw.setdefault("probe_ttl_s", 5.0)
    return CircuitBreaker(name or uuid.uuid4().hex[:12], redis_client=redis_client, **kw)


def test_opens_after_consecutive_failures_and_success_resets(redis_client):
    b = _breaker(redis_client)
    assert b.allow()[:2] == (True, "closed")
    b.record_failure("llm_upstream_error")
    b.record_failure("llm_upstream_error")
    assert b.allow() == (True, "closed", 2)  # still closed, but a success now has something to reset
    b.record_success()  # not consecutive any more
    assert b.allow() == (True, "closed", 0)
    assert b.record_failure("llm_timeout") == "closed"
    assert b.record_failure("llm_timeout") == "closed"
    assert b.record_failure("llm_timeout") == "open"
    assert b.allow()[:2] == (False, "open")
    st = b.status()
    assert st.state == "open" and st.failures == 3 and st.last_error == "llm_timeout" and st.shared
    assert 0 < st.open_for_s <= 1.5


def test_half_open_gives_one_probe_across_processes_and_recovers(redis_client):
    name = uuid.uuid4().hex[:12]
    a, b = _breaker(redis_client, name), _breaker(redis_client, name)  # two API processes
    for _ in range(3):
        a.record_failure("llm_upstream_error")
    assert b.allow()[:2] == (False, "open")  # b learned it from Redis
    wait_for(lambda: b.status().state == "half_open", timeout_s=5, interval_s=0.05, what="half-open")
    first, second = a.allow(), b.allow()
    assert sorted([first[0], second[0]]) == [False, True]  # exactly one probe
    a.record_success()
    assert b.allow()[:2] == (True, "closed") and b.status().failures == 0


def test_failed_probe_reopens(redis_client):
    b = _breaker(redis_client, failure_threshold=1, open_s=1.0)
    assert b.record_failure("llm_rate_limited") == "open"
    wait_for(lambda: b.status().state == "half_open", timeout_s=5, interval_s=0.05, what="half-open")
    assert b.allow()[:2] == (True, "half_open")
    assert b.record_failure("llm_rate_limited") == "open"
    assert b.allow()[:2] == (False, "open")


def test_works_in_process_when_redis_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = get_fast_redis(Settings(redis_url=f"redis://127.0.0.1:{port}/0"))
    # open_s is far longer than the calls below take even on a loaded machine, so "open" is
    # observed before the breaker can turn half-open; the wait below is on the state itself.
    b = _breaker(dead, failure_threshold=2, open_s=1.5)
    t = time.monotonic()
    assert b.allow()[:2] == (True, "closed")
    b.record_failure("llm_timeout")
    assert b.record_failure("llm_timeout") == "open"
    assert b.allow()[:2] == (False, "open")
    assert b.status().shared is False
    # An unreachable Redis costs milliseconds, not a connect retry with backoff (which takes seconds).
    assert time.monotonic() - t < 1.0
    wait_for(lambda: b.status().state == "half_open", timeout_s=5, interval_s=0.05, what="half-open")
    assert b.allow()[:2] == (True, "half_open")
    assert b.allow()[:2] == (False, "half_open")
    b.record_success()
    assert b.allow()[:2] == (True, "closed")


def test_a_redis_outage_falls_back_on_the_fleets_last_state(tmp_path):
    """The in-process fallback is the shared state as last seen, not a private tally: this process
    saw the circuit open, another one's probe closed it, then Redis stopped answering. Before, the
    fallback still held this process's own two failures and refused the LLM for the open period
    (seen as llm_circuit_open under load, when one 300 ms Redis call timed out)."""
    server = start_redis(tmp_path, free_port(), tmp_path / "logs", os.environ.copy())
    try:
        wait_for(server.healthy, timeout_s=10, interval_s=0.05, what="redis-server")
        r = get_fast_redis(Settings(redis_url=server.url))
        name = uuid.uuid4().hex[:12]
        here, there = _breaker(r, name, failure_threshold=2, open_s=60), _breaker(r, name, failure_threshold=2)
        here.record_failure("llm_timeout")
        assert here.record_failure("llm_timeout") == "open"
        there.record_success()  # another API process's probe succeeded
        assert here.allow() == (True, "closed", 0)
        here.record_failure("llm_timeout")  # one failure since: still closed with a threshold of 2
    finally:
        server.proc.kill()
        server.proc.wait(10)
    assert here.allow()[:2] == (True, "closed")
    assert here.status().shared is False and here.status().failures == 1
    assert here.record_failure("llm_timeout") == "open"  # and it goes on counting from there


def test_sessions_keep_turns_with_ttl_and_cap(redis_client):
    store = SessionStore(redis_client, ttl_s=120, max_turns=3)
    sid = "sess-" + uuid.uuid4().hex[:8]
    for i in range(5):
        n = store.append_turn(
            sid,
            {"turn_id": f"t{i}", "user": f"質問{i}", "assistant": f"答え{i}"},
            {"intent": {"intent_type": "recommend"}, "missing_slots": ["region"], "deadline": 1},
        )
        assert n == i + 1
    snap = store.load(sid)
    assert [t["turn_id"] for t in snap.turns] == ["t2", "t3", "t4"]
    assert snap.turn_count == 5
    assert snap.state == {"intent": {"intent_type": "recommend"}, "missing_slots": ["region"]}
    assert [m["role"] for m in snap.messages()] == ["user", "assistant"] * 3
    assert [m["content"] for m in snap.messages(last_turns=1)] == ["質問4", "答え4"]
    assert [t["turn_id"] for t in store.load(sid, last_turns=2).turns] == ["t3", "t4"]
    for suffix in ("turns", "state", "count"):
        ttl = redis_client.ttl(f"yana:chat:session:{sid}:{suffix}")
        assert 0 < ttl <= 120


def test_sessions_mask_what_they_store(redis_client):
    store = SessionStore(redis_client, ttl_s=60, max_turns=5)
    sid = "sess-" + uuid.uuid4().hex[:8]
    store.append_turn(
        sid, {"user": "電話は090-1234-5678、mail a@b.example.com"}, {"slots": {"values": {"topic": "03-1111-2222"}}}
    )
    raw = " ".join(redis_client.lrange(f"yana:chat:session:{sid}:turns", 0, -1)) + redis_client.get(
        f"yana:chat:session:{sid}:state"
    )
    assert "090-1234-5678" not in raw and "a@b.example.com" not in raw and "03-1111-2222" not in raw
    assert "[PHONE]" in orjson.loads(redis_client.lindex(f"yana:chat:session:{sid}:turns", 0))["user"]
