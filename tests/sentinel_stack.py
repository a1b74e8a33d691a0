"""Redis Sentinel on loopback for the failover test and bench: a master, a replica and three
sentinels (real redis-server processes), Chroma, one worker and the API pointed at the sentinels
(REDIS_URL=sentinel://...), accepting a job waiting for the replica (REDIS_WAIT_REPLICAS=1).

`run_failover` is the scenario both use: a bulk ingest, kill -9 of the master while it runs, the
old master's host brought back empty, and the account of every accepted job; it returns the
timings instead of judging them. Every Redis node is started by docker-compose.yml's node command,
which asks every sentinel for the master first: the host that comes back is a replica at once."""

from __future__ import annotations

import base64
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import redis
import yaml

from cli import processes
from cli.processes import Service, _spawn, free_port, redis_pings, redis_server_binary
from pipelines.runtime.jobs import job_key
from tests import stack as test_stack
from tests.stack import TEST_ENV, wait_for, wait_job
from tools.datagen import images

MASTER = "yanamaster"
COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"


def compose_node_script() -> str:
    """docker-compose.yml's Redis node command as sh runs it (compose turns $$ into $)."""
    return yaml.safe_load(COMPOSE.read_text())["x-redis-node"]["command"][-1].replace("$$", "$")


def node_env(env: dict, port: int, sentinel_ports: list[int], first_master: int | None) -> dict:
    """The node command's environment for a node on loopback (compose sets it per service)."""
    return {
        **env,
        "PATH": os.path.dirname(redis_server_binary()) + os.pathsep + env.get("PATH", os.defpath),
        "PORT": str(port),
        "MASTER_NAME": MASTER,
        "NODE_NAME": "127.0.0.1",
        "SENTINELS": " ".join(f"127.0.0.1:{p}" for p in sentinel_ports),
        "FIRST_MASTER": f"127.0.0.1 {first_master}" if first_master else "",
    }


def redis_node(
    st: test_stack.TestStack, name: str, port: int, sentinel_ports: list[int], first_master: int | None = None
) -> Service:
    """A Redis node started as docker-compose.yml starts one, in its own folder."""
    folder = st.data_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    env = node_env(st.env, port, sentinel_ports, first_master)
    proc, log = _spawn(name, ["sh", "-c", compose_node_script()], env, st.log_dir, cwd=str(folder))
    url = f"redis://127.0.0.1:{port}/0"
    return st.add(Service(name, proc, url, log, redis_pings(url), tier=1))


def sentinel(st: test_stack.TestStack, name: str, port: int, master_port: int) -> Service:
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


def master_port(sentinel_ports: list[int]) -> int | None:
    """The master's port as the first sentinel that answers names it."""
    for port in sentinel_ports:
        try:
            addr = redis.Redis(port=port, socket_timeout=1).sentinel_get_master_addr_by_name(MASTER)
            if addr:
                return int(addr[1])
        except redis.RedisError:
            continue
    return None


@dataclass
class HAStack:
    st: test_stack.TestStack
    master: Service
    sentinel_ports: list[int]
    master_port: int


def start_ha_stack(root: Path) -> HAStack:
    """Everything running and healthy; the caller stops it (`.st.stop()`), also on failure."""
    st = test_stack.TestStack(data_dir=root, env=processes.child_env(DATA_DIR=str(root / "data"), **TEST_ENV))
    try:
        m_port, r_port = free_port(), free_port()
        s_ports = [free_port() for _ in range(3)]
        # No sentinel answers yet: each node takes its first role.
        master = redis_node(st, "redis-master", m_port, s_ports)
        redis_node(st, "redis-replica", r_port, s_ports, first_master=m_port)
        for k, port in enumerate(s_ports):
            sentinel(st, f"sentinel-{k}", port, m_port)
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
            # One client submits and polls every job: not a rate-limit test.
            RATE_LIMIT="1000/second",
            RATE_BURST="10000",
        )
        st.start_worker(concurrency=1)
        st.api_url = st.start_api().url
    except BaseException:
        st.stop()
        raise
    return HAStack(st, master, s_ports, m_port)


def _body(metas: list[dict], i: int, seed: int) -> dict:
    m = metas[i]
    data = images.encode(images.render_label(m, seed=seed * 100 + i), "JPEG", 90)
    return {
        **{k: m[k] for k in ("category", "brand_name", "product_name", "brewery", "region")},
        "image_base64": base64.b64encode(data).decode(),
    }


def _wall(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@dataclass
class FailoverRun:
    accepted: int  # jobs accepted (202) in all
    at_kill: int  # of them, accepted before the kill
    unfinished_at_kill: int  # of those, still queued or running when the master died
    refused: int  # answers other than 202 (503 while no replica confirms, 409, no answer)
    promotion_s: float  # kill -9 -> the sentinels name the replica as master
    first_done_s: float  # promotion -> the first job finishing after it (the worker is back)
    at_kill_done_s: float  # promotion -> the last job accepted before the kill finished
    accepting_s: float  # kill -9 -> a job accepted again (the old master back as a replica)
    all_done_s: float  # kill -9 -> every accepted job finished
    not_succeeded: list[str]  # accepted jobs that did not succeed (failed, or not terminal in time)
    missing: list[str]  # accepted jobs whose record is not on the new master

    def line(self) -> str:
        return (
            f"{self.accepted} jobs accepted ({self.at_kill} before the kill, {self.unfinished_at_kill} of them "
            f"unfinished), {self.refused} refused while no replica confirmed; promotion {self.promotion_s:.1f}s "
            f"after kill -9; after promotion the first job finished in {self.first_done_s:.1f}s and every job "
            f"accepted before the kill in {self.at_kill_done_s:.1f}s; accepting again {self.accepting_s:.1f}s "
            f"after the kill; all jobs done {self.all_done_s:.1f}s after it; "
            f"{len(self.not_succeeded)} not succeeded, {len(self.missing)} missing"
        )


def run_failover(
    ha: HAStack,
    labels: int,
    *,
    seed: int = 77,
    kill_after: int = 10,
    after_restart: Callable[[Service], None] | None = None,
) -> FailoverRun:
    """Ingest `labels` labels one job each; kill -9 the master once `kill_after` are accepted.
    `after_restart(promoted)` runs once the old master's host is back (to pause the promoted one)."""
    st, s_ports = ha.st, ha.sentinel_ports
    metas = images.label_set(labels + 1, seed=seed)
    accepted: list[str] = []
    refused: list[int] = []
    stop = threading.Event()
    with httpx.Client(base_url=st.api_url, timeout=30) as c:
        # The worker at work before the kill: its first job loads the embedding model (tens of
        # seconds on two busy cores), which is start-up, not recovery.
        r = c.post("/v1/ingest", json=_body(metas, labels, seed), headers={"Idempotency-Key": f"warm-{seed}"})
        assert r.status_code == 202, r.text
        assert wait_job(c, r.json()["job_id"], timeout_s=180)["status"] == "succeeded"

    def submit() -> None:
        # As a client would: a refused label is sent again (same Idempotency-Key) until accepted.
        with httpx.Client(base_url=st.api_url, timeout=15) as c:
            i = 0
            while i < labels and not stop.is_set():
                try:
                    r = c.post(
                        "/v1/ingest", json=_body(metas, i, seed), headers={"Idempotency-Key": f"failover-{seed}-{i}"}
                    )
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

    t = threading.Thread(target=submit, daemon=True)
    t.start()
    try:
        wait_for(lambda: len(accepted) >= kill_after, 120, what=f"{kill_after} accepted jobs")
        old_port = master_port(s_ports)
        assert old_port == ha.master_port, (old_port, ha.master_port)
        before = redis.Redis(port=old_port, decode_responses=True, socket_timeout=2)
        at_kill = list(accepted)
        unfinished = sum(before.hget(job_key(j), "status") in ("queued", "running") for j in at_kill)
        os.kill(ha.master.proc.pid, signal.SIGKILL)
        killed_at = time.time()
        ha.master.proc.wait(timeout=10)
        new_port = wait_for(
            lambda: (p := master_port(s_ports)) != old_port and p, 60, interval_s=0.05, what="promotion"
        )
        promoted_at = time.time()
        # The old master's host comes back, empty, and starts as the node command starts it: a
        # replica of the master the sentinels name. Accepting (which waits for one replica) works
        # again once it has synced.
        st.services.remove(ha.master)
        ha.master = redis_node(st, f"redis-{old_port}-again", old_port, s_ports, first_master=None)
        if after_restart is not None:
            after_restart(next(s for s in st.services if s.url == f"redis://127.0.0.1:{new_port}/0"))
        n_before = len(accepted)
        wait_for(lambda: len(accepted) > n_before or not t.is_alive(), 90, what="a job accepted again")
        accepting_at = time.time()
        t.join(300)
    finally:
        stop.set()
        t.join(30)

    new = redis.Redis(port=new_port, decode_responses=True, socket_timeout=5)
    not_succeeded: list[str] = []
    finished: dict[str, float] = {}
    with httpx.Client(base_url=st.api_url, timeout=30) as c:
        deadline = time.monotonic() + 180
        for job_id in accepted:
            try:
                job = wait_job(c, job_id, timeout_s=max(1.0, deadline - time.monotonic()))
            except AssertionError:
                not_succeeded.append(job_id)
                continue
            if job["status"] != "succeeded":
                not_succeeded.append(job_id)
            elif job.get("finished_at"):
                finished[job_id] = _wall(job["finished_at"])
    missing = [j for j in accepted if not new.exists(job_key(j))]
    after_kill = [f for f in finished.values() if f > killed_at]
    at_kill_finished = [finished[j] for j in at_kill if j in finished]
    at_kill_done = max(at_kill_finished, default=promoted_at) if len(at_kill_finished) == len(at_kill) else float("inf")
    return FailoverRun(
        accepted=len(accepted),
        at_kill=len(at_kill),
        unfinished_at_kill=unfinished,
        refused=len(refused),
        promotion_s=promoted_at - killed_at,
        first_done_s=(min(after_kill) - promoted_at) if after_kill else float("nan"),
        at_kill_done_s=max(0.0, at_kill_done - promoted_at),
        accepting_s=accepting_at - killed_at,
        all_done_s=max(finished.values(), default=killed_at) - killed_at,
        not_succeeded=not_succeeded,
        missing=missing,
    )
