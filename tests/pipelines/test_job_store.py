"""The job store's guards against double work, on a real Redis: one job per Idempotency-Key
binding, the release of a queued job whose message a dead worker main had reserved, and the
taking of a queued job whose message was lost for one re-send."""

from __future__ import annotations

import threading
import time

from pipelines.runtime.jobs import JobStore, job_key


def test_one_job_per_binding_even_when_creators_race(redis_client):
    store = JobStore(redis_client)
    once = ("test:idem:race:jobs", "ingest")
    redis_client.delete(once[0])
    made: list[dict] = []
    barrier = threading.Barrier(8)

    def create():
        barrier.wait()
        made.append(store.create("ingest", {"n": 1}, once=once))

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({j["id"] for j in made}) == 1
    assert sum(not j.get("existing") for j in made) == 1  # exactly one creator wrote it
    assert redis_client.hget(*once) == made[0]["id"]
    # Another kind under the same key is another job (a route that creates two kinds of job).
    other = store.create("retrieve.embed", {}, once=(once[0], "retrieve.embed"))
    assert other["id"] != made[0]["id"] and not other.get("existing")


def test_a_binding_whose_job_expired_gets_a_new_job(redis_client):
    store = JobStore(redis_client)
    once = ("test:idem:expired:jobs", "ingest")
    first = store.create("ingest", {}, once=once)
    redis_client.delete(job_key(first["id"]))  # retention ran out
    second = store.create("ingest", {}, once=once)
    assert second["id"] != first["id"] and not second.get("existing")


def test_release_orphaned_only_for_a_dead_reserver_after_the_grace(redis_client):
    store = JobStore(redis_client)
    job = store.create("ingest", {})
    alive, dead = "yana:workers:test-host:1", "yana:workers:test-host:2"
    redis_client.set(alive, "test-host", ex=60)
    redis_client.delete(dead)

    assert store.mark_reserved(job["id"], alive)
    assert not store.release_orphaned(job["id"], alive, grace_ms=0), "its worker is alive"

    assert store.mark_reserved(job["id"], dead)
    assert not store.release_orphaned(job["id"], dead, grace_ms=60_000), "reserved just now: within the grace"
    assert not store.release_orphaned(job["id"], alive, grace_ms=0), "not the reservation it saw"
    assert store.release_orphaned(job["id"], dead, grace_ms=0)
    assert store.reserved_states([job["id"]])[job["id"]] == ("queued", "", 0)
    assert not store.release_orphaned(job["id"], dead, grace_ms=0), "released once"

    # A running job is never released this way (its heartbeat decides), nor reserved.
    redis_client.hset(job_key(job["id"]), "status", "running")
    assert not store.mark_reserved(job["id"], dead)
    assert not store.release_orphaned(job["id"], dead, grace_ms=0)


def test_a_queued_job_idle_for_the_period_is_taken_for_a_resend_once(redis_client):
    """The reconciler's rule for a message lost in a Redis failover: a queued job unchanged for
    the period is a candidate; taking it for a re-send is a compare-and-set on its updated_at, so
    of several reconcilers one sends, and the next candidacy starts a new period."""
    store = JobStore(redis_client)
    job = store.create("ingest", {})
    later = time.time() + 60
    assert store.idle_queued([job["id"]], idle_s=30) == {}, "just created: not idle"
    seen = store.idle_queued([job["id"]], idle_s=30, now=later)
    assert seen == {job["id"]: job["updated_at"]}
    assert store.take_unsent(job["id"], seen[job["id"]])
    assert not store.take_unsent(job["id"], seen[job["id"]]), "taken once: its updated_at moved"
    assert store.idle_queued([job["id"]], idle_s=30, now=time.time() + 1) == {}, "a new period starts"
    assert store.idle_queued([job["id"]], idle_s=30, now=later + 60) != {}
    # Running or finished jobs are never candidates, nor taken.
    for status in ("running", "succeeded"):
        redis_client.hset(job_key(job["id"]), "status", status)
        assert store.idle_queued([job["id"]], idle_s=30, now=later + 60) == {}
        assert not store.take_unsent(job["id"], store.get(job["id"])["updated_at"])
    redis_client.delete(job_key(job["id"]))
    assert store.idle_queued([job["id"]], idle_s=30, now=later + 60) == {}, "gone: not a candidate"
