"""The cap on follow-up embedding jobs (pipelines/retrieve/vectors.py `claim_embed_job`) on the
stack's real Redis: queued, in flight for the same set, skipped at the cap, stale members pruned.
Each test claims under its own in-flight key, so the stack's own follow-up jobs do not count."""

from __future__ import annotations

import time
import uuid

import pytest

from pipelines.retrieve import vectors as V


@pytest.fixture
def in_flight_key(redis_client, monkeypatch):
    key = f"yana:test:embedjobs:{uuid.uuid4().hex}"
    monkeypatch.setattr(V, "EMBED_JOBS_IN_FLIGHT_KEY", key)
    yield key
    redis_client.delete(key)


def _texts() -> list[str]:
    tag = uuid.uuid4().hex
    return [f"chunk one {tag}", f"chunk two {tag}"]


class FakeStart:
    """The `start` callable: counts the jobs it was asked to start."""

    def __init__(self):
        self.started: list[str] = []

    def __call__(self) -> str:
        self.started.append(f"job-{len(self.started) + 1}")
        return self.started[-1]


def _guard(texts: list[str]) -> str:
    return V.EMBED_JOB_KEY.format(digest=V.texts_digest(texts))


def test_queued_then_in_flight_for_the_same_set_then_skipped_at_the_cap(redis_client, in_flight_key):
    start = FakeStart()
    first, other = _texts(), _texts()
    got = V.claim_embed_job(redis_client, first, start, cap=1)
    assert (got.status, got.job_id, got.running) == (V.QUEUED, "job-1", 1)
    assert redis_client.zscore(in_flight_key, V.texts_digest(first)) == pytest.approx(time.time(), abs=60)
    assert 0 < redis_client.ttl(_guard(first)) <= V.EMBED_JOB_GUARD_S

    again = V.claim_embed_job(redis_client, first, start, cap=1)
    assert (again.status, again.job_id) == (V.IN_FLIGHT, "job-1") and start.started == ["job-1"]

    skipped = V.claim_embed_job(redis_client, other, start, cap=1)
    assert (skipped.status, skipped.job_id, skipped.running) == (V.SKIPPED, None, 1)
    assert start.started == ["job-1"]
    assert not redis_client.exists(_guard(other)) and redis_client.zscore(in_flight_key, V.texts_digest(other)) is None

    # The first job ends: its place is free, and the other set's job starts.
    V.release_embed_job(redis_client, first)
    assert redis_client.zcard(in_flight_key) == 0
    now = V.claim_embed_job(redis_client, other, start, cap=1)
    assert (now.status, now.job_id) == (V.QUEUED, "job-2")


def test_a_member_older_than_the_guard_window_is_pruned(redis_client, in_flight_key):
    start = FakeStart()
    redis_client.zadd(in_flight_key, {"killed-worker": time.time() - V.EMBED_JOB_GUARD_S - 5})
    redis_client.zadd(in_flight_key, {"running": time.time()})
    got = V.claim_embed_job(redis_client, _texts(), start, cap=2)
    assert got.status == V.QUEUED and got.running == 2 and start.started == ["job-1"]
    assert redis_client.zscore(in_flight_key, "killed-worker") is None
    assert redis_client.zscore(in_flight_key, "running") is not None


def test_cap_zero_starts_no_job(redis_client, in_flight_key):
    start = FakeStart()
    texts = _texts()
    got = V.claim_embed_job(redis_client, texts, start, cap=0)
    assert (got.status, got.job_id, got.running) == (V.SKIPPED, None, 0) and not start.started
    assert not redis_client.exists(_guard(texts))


def test_a_start_that_fails_frees_its_place_and_its_guard(redis_client, in_flight_key):
    texts = _texts()

    def broken_start() -> str:
        raise RuntimeError("broker down")

    with pytest.raises(RuntimeError):
        V.claim_embed_job(redis_client, texts, broken_start, cap=1)
    assert redis_client.zcard(in_flight_key) == 0 and not redis_client.exists(_guard(texts))
    assert V.claim_embed_job(redis_client, texts, FakeStart(), cap=1).status == V.QUEUED


@pytest.mark.parametrize("threads", [1, 2])
def test_a_follow_up_job_embeds_from_its_own_number_of_threads(redis_client, in_flight_key, monkeypatch, threads):
    """RETRIEVE_EMBED_JOB_PARALLEL (default 1): a follow-up job runs the encoder from that many
    threads at once, so on two cores a cold request beside it keeps one (2: the instrument sees
    two runs at once, so the default's one is a real limit, not the encoder's)."""
    import threading

    from pipelines.embedding import backends as embedding
    from pipelines.retrieve import embed_chunk_texts
    from yana.settings import get_settings

    monkeypatch.setenv("RETRIEVE_EMBED_MODEL", embedding.INT8_DEFAULT_MODEL)
    if threads != 1:
        monkeypatch.setenv("RETRIEVE_EMBED_JOB_PARALLEL", str(threads))
    get_settings.cache_clear()
    try:
        assert get_settings().retrieve_embed_job_parallel == threads
        emb = V.embedder()
        assert emb.concurrent_runs >= 2, "one encoder run at a time on this machine: nothing to limit"
        live, peak, lock = [0], [0], threading.Lock()
        real = emb.embed_passages

        def counted(texts, *args, **kwargs):
            with lock:
                live[0] += 1
                peak[0] = max(peak[0], live[0])
            try:
                return real(texts, *args, **kwargs)
            finally:
                with lock:
                    live[0] -= 1

        monkeypatch.setattr(emb, "embed_passages", counted)
        tag = uuid.uuid4().hex
        texts = [f"後続の埋め込み {tag} その{i} " + "純米吟醸の香り。" * (1 + i % 4) for i in range(48)]
        assert embed_chunk_texts(texts) == {"embedded": len(texts)}
        assert peak[0] == threads
    finally:
        get_settings.cache_clear()
