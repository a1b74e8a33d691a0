"""Redis high availability with Sentinel: a master, a replica and three sentinels (real
redis-server processes on loopback), yana's API and worker pointed at the sentinels
(REDIS_URL=sentinel://...), accepting a job waits for the replica (REDIS_WAIT_REPLICAS=1).

kill -9 of the master during a bulk ingest: the sentinels promote the replica, every process
finds the new master through them, the jobs accepted before the kill finish within 30 s of the
promotion, and every job that was accepted (202) succeeds; none is lost. The timings are printed
(pytest -s); bench/failover_recovery.py runs the same scenario several times.

The second test pauses the promoted master while the old master's host, back empty, waits for its
first sync: the sentinels then see the promoted one down and look for a replica to promote. The
only one is empty; promoting it lost every job accepted before the kill (CI did, on a busy
machine). A node is promotable only once it has been in sync (docker-compose.yml)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from cli.processes import Service
from tests.sentinel_stack import run_failover, start_ha_stack
from tests.stack import wait_for

pytestmark = pytest.mark.stack

BAR_S = 30.0  # issue 15: after promotion the jobs finish within 30 s


@pytest.fixture
def ha(tmp_path_factory):
    ha = start_ha_stack(tmp_path_factory.mktemp("sentinel"))
    try:
        yield ha
    finally:
        ha.st.stop()


def test_jobs_accepted_before_a_master_kill_all_finish(ha):
    run = run_failover(ha, labels=60)
    print(f"\nsentinel failover: {run.line()}")
    assert run.unfinished_at_kill >= 1, "the master died with no job in flight: nothing was tested"
    assert not run.missing, f"accepted jobs lost with the master: {run.missing}"
    assert not run.not_succeeded, f"accepted jobs that did not succeed: {run.not_succeeded}"
    assert run.at_kill_done_s <= BAR_S, (
        f"jobs accepted before the kill finished {run.at_kill_done_s:.1f}s after promotion"
    )
    # The old master came back as a replica: accepting (which waits for it) works again.
    assert run.accepting_s <= 60, f"no job accepted until {run.accepting_s:.1f}s after the kill"


def test_a_node_back_empty_is_not_promoted_before_its_first_sync(ha):
    """Sentinel promotes a replica whatever it holds; this one holds nothing yet."""
    seen: dict[str, str] = {}

    def pause_the_promoted_master(promoted: Service) -> None:
        back = redis.Redis(port=ha.master_port, socket_timeout=1)  # the old master's port, its host back

        def answers() -> bool:
            try:
                return bool(back.ping())
            except redis.RedisError:
                return False

        wait_for(answers, 20, interval_s=0.05, what="the old master's host back")
        seen["link"] = back.info("replication").get("master_link_status", "")
        os.kill(promoted.proc.pid, signal.SIGSTOP)  # longer than down-after-milliseconds (1 s)
        try:
            time.sleep(3)
        finally:
            os.kill(promoted.proc.pid, signal.SIGCONT)

    run = run_failover(ha, labels=40, after_restart=pause_the_promoted_master)
    print(f"\nsentinel failover, promoted master paused: {run.line()}")
    # Redis waits 5 s (repl-diskless-sync-delay) before a full sync: the pause falls in it.
    assert seen["link"] == "down", f"the node back had synced before the pause: nothing was tested ({seen})"
    assert run.unfinished_at_kill >= 1, "the master died with no job in flight: nothing was tested"
    assert not run.missing, f"accepted jobs lost with the master: {run.missing}"
    assert not run.not_succeeded, f"accepted jobs that did not succeed: {run.not_succeeded}"
