"""docker-compose.yml is the scale-out layout: no Docker engine runs here, so its structure is
checked (services, variables, volumes), its yana environment is parsed by the real Settings and
client factory, and its sentinel start-up script is run for real against a loopback redis-server."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import redis
import yaml

from cli.processes import free_port, redis_server_binary, start_redis
from tests.sentinel_stack import MASTER, compose_node_script, node_env
from tests.stack import wait_for
from yana.blobs import parse_s3_url
from yana.clients import celery_redis_config, parse_sentinel
from yana.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
YANA = ("api", "worker", "flower")


def _env(name: str) -> dict[str, str]:
    """A service's environment with ${VAR:-default} / ${VAR:?msg} as compose would resolve them
    (an example value for the required ones)."""

    def resolve(v: str) -> str:
        v = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", str(v))
        return re.sub(r"\$\{([A-Z_]+):\?[^}]*\}", lambda m: "whsec_" + "eA==" if "WEBHOOK" in m[1] else "pw", v)

    return {k: resolve(v) for k, v in (SERVICES[name].get("environment") or {}).items()}


def test_services():
    assert {"redis-master", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3", "chroma", "minio"} <= set(
        SERVICES
    )
    assert set(YANA) <= set(SERVICES) and "minio-init" in SERVICES
    assert SERVICES["redis-replica"]["environment"]["FIRST_MASTER"] == "redis-master 6379"
    assert SERVICES["redis-master"]["environment"]["FIRST_MASTER"] == ""
    assert SERVICES["redis-master"]["command"] == SERVICES["redis-replica"]["command"]
    for name in ("redis-master", "redis-replica"):
        env = SERVICES[name]["environment"]
        assert env["NODE_NAME"] == name and env["SENTINELS"].split() == [f"sentinel-{k}:26379" for k in (1, 2, 3)]


def test_api_and_workers_share_no_volume():
    for name in YANA:
        assert not SERVICES[name].get("volumes"), f"{name} mounts a volume: hosts must not share a disk"
    used = {v.split(":")[0] for svc in SERVICES.values() for v in svc.get("volumes") or []}
    assert used == set(COMPOSE["volumes"]), "every named volume belongs to a store, and is declared"


@pytest.mark.parametrize("name", YANA)
def test_yana_environment_names_sentinel_minio_and_chroma(name):
    env = _env(name)
    target = parse_sentinel(env["REDIS_URL"])
    assert target is not None and target.service == "mymaster"
    assert {h for h, _p in target.hosts} == {"sentinel-1", "sentinel-2", "sentinel-3"}
    assert all(p == 26379 for _h, p in target.hosts)
    assert celery_redis_config(env["REDIS_URL"])[1] == {"master_name": "mymaster"}
    bucket, prefix = parse_s3_url(env["BLOB_URL"])
    assert env["AWS_ENDPOINT_URL"] == "http://minio:9000" and env["AWS_DEFAULT_REGION"]
    assert env["AWS_ACCESS_KEY_ID"] == _env("minio")["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == _env("minio")["MINIO_ROOT_PASSWORD"]
    assert f"local/{bucket}" in SERVICES["minio-init"]["entrypoint"][-1], "minio-init creates the BLOB_URL bucket"
    assert env["CHROMA_URL"] == "http://chroma:8000" and int(env["REDIS_WAIT_REPLICAS"]) >= 1
    s = Settings(**{k.lower(): v for k, v in env.items() if k.lower() in Settings.model_fields})
    assert s.blob_url == env["BLOB_URL"] and s.redis_wait_replicas == 1 and prefix == "blobs"
    assert "sentinel-1" in SERVICES[name]["depends_on"] and "minio-init" in SERVICES[name]["depends_on"]


@pytest.mark.stack  # starts redis-server processes of its own
def test_the_sentinel_script_starts_a_sentinel_that_monitors_the_master(tmp_path):
    """The sentinels' command, with the service name and port mapped to loopback, run for real."""
    script = SERVICES["sentinel-1"]["command"][-1]
    assert SERVICES["sentinel-1"]["command"] == SERVICES["sentinel-3"]["command"]
    master_port, sentinel_port = free_port(), free_port()
    script = script.replace("redis-master 6379", f"127.0.0.1 {master_port}").replace(
        "'port 26379'", f"'port {sentinel_port}'"
    )
    script = script.replace("/tmp/sentinel.conf", str(tmp_path / "sentinel.conf")).replace(
        "redis-server", redis_server_binary()
    )
    script = script.replace("'sentinel announce-hostnames yes'", "'bind 127.0.0.1'")
    master = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(master_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    sentinel = subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL, cwd=tmp_path)
    try:
        s = redis.Redis(port=sentinel_port, socket_timeout=1, decode_responses=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                info = s.sentinel_master("mymaster")
                break
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert int(info["port"]) == master_port and int(info["quorum"]) == 2
        assert int(info["down-after-milliseconds"]) == 5000
    finally:
        for p in (sentinel, master):
            p.kill()
            p.wait(10)


@pytest.mark.stack  # starts redis-server processes of its own
def test_a_node_starts_as_the_replica_of_the_master_the_sentinels_name(tmp_path):
    """The Redis nodes' command, run for real on loopback. With no sentinel answering, a node takes
    its first role (the first start). With the sentinels naming another node as master (after a
    failover), the old master's host comes back as its replica, not as a second master."""
    other_port, node_port, sentinel_port = free_port(), free_port(), free_port()
    procs = [_redis(other_port, tmp_path / "other")]
    try:
        # No sentinel yet: the node's first role (FIRST_MASTER empty: a master).
        procs.append(_node(tmp_path / "first", node_env({}, node_port, [sentinel_port], None)))
        assert _role(node_port) == "master"
        _stop(procs.pop())
        procs.append(_sentinel(tmp_path, "sentinel", sentinel_port, other_port))
        # The same node again, first role still "master": the sentinels name another one.
        procs.append(_node(tmp_path / "again", node_env({}, node_port, [sentinel_port], None)))
        info = redis.Redis(port=node_port, socket_timeout=2, decode_responses=True).info("replication")
        assert info["role"] == "slave" and int(info["master_port"]) == other_port
        # Promotable (replica-priority above 0) only once its first sync is done.
        wait_for(lambda: _priority(node_port) == 100, timeout_s=30, what="replica-priority 100 after the sync")
    finally:
        for p in procs:
            _stop(p)


@pytest.mark.stack  # starts redis-server processes of its own
def test_a_replica_that_never_synced_cannot_be_promoted(tmp_path):
    """Sentinel promotes a replica whatever it holds: one waiting for its first sync holds nothing
    (tests/workers/test_sentinel_failover.py lost every accepted job to that)."""
    node_port, sentinel_port = free_port(), free_port()
    unreachable = free_port()  # the master the sentinel names: nothing listens there
    procs = [_sentinel(tmp_path, "sentinel", sentinel_port, unreachable)]
    try:
        procs.append(_node(tmp_path / "node", node_env({}, node_port, [sentinel_port], None)))
        assert _role(node_port) == "slave"
        time.sleep(3)  # the watcher polls every second: it has had its chances to raise it
        assert _priority(node_port) == 0
    finally:
        for p in procs:
            _stop(p)


@pytest.mark.stack  # starts redis-server processes of its own
def test_a_node_follows_the_newest_failover_not_the_first_sentinel_to_answer(tmp_path):
    """After a failover a sentinel can lag: one that has not yet heard of it (stopped by a slow
    fsync of its config, say) still names the old master. The old master's host, back empty, must
    follow the sentinel with the newer config epoch; asking the lagging one first made it a second
    master, and the lagging sentinel then turned the promoted one into its replica (CI lost every
    job accepted before the kill in tests/workers/test_sentinel_failover.py)."""
    other_port, node_port = free_port(), free_port()
    stale_port, fresh_port = free_port(), free_port()
    procs = [_redis(other_port, tmp_path / "other")]
    try:
        procs.append(_sentinel(tmp_path, "stale", stale_port, node_port, epoch=0))
        procs.append(_sentinel(tmp_path, "fresh", fresh_port, other_port, epoch=1))
        procs.append(_node(tmp_path / "again", node_env({}, node_port, [stale_port, fresh_port], None)))
        info = redis.Redis(port=node_port, socket_timeout=2, decode_responses=True).info("replication")
        assert info["role"] == "slave" and int(info["master_port"]) == other_port
    finally:
        for p in procs:
            _stop(p)


def _sentinel(folder: Path, name: str, port: int, master_port: int, *, epoch: int = 0) -> subprocess.Popen:
    """A real sentinel naming the master on `master_port`, at config epoch `epoch` (what a
    failover raises), once it answers."""
    conf = folder / f"{name}.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\nsentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n"
        f"sentinel config-epoch {MASTER} {epoch}\n"
    )
    p = _start([redis_server_binary(), str(conf), "--sentinel"], folder)
    try:
        wait_for(lambda: _master_named(port, MASTER), timeout_s=20, what=f"the {name} sentinel")
    except BaseException:
        _stop(p)
        raise
    return p


def _redis(port: int, folder: Path) -> subprocess.Popen:
    server = start_redis(folder, port, folder / "logs", os.environ.copy())
    wait_for(server.healthy, timeout_s=20, what="redis-server")
    return server.proc


def _node(folder: Path, env: dict) -> subprocess.Popen:
    folder.mkdir()
    p = _start(["sh", "-c", compose_node_script()], folder, env={**os.environ, **env})
    wait_for(lambda: _role(int(env["PORT"])), timeout_s=20, what="the node")
    return p


def _start(argv: list[str], cwd: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _master_named(sentinel_port: int, name: str):
    try:
        return redis.Redis(port=sentinel_port, socket_timeout=1).sentinel_get_master_addr_by_name(name)
    except redis.RedisError:
        return None


def _role(port: int) -> str | None:
    try:
        return redis.Redis(port=port, socket_timeout=1, decode_responses=True).role()[0]
    except redis.RedisError:
        return None


def _priority(port: int) -> int | None:
    try:
        return int(redis.Redis(port=port, socket_timeout=1).config_get("replica-priority")["replica-priority"])
    except redis.RedisError:
        return None


def _stop(p: subprocess.Popen) -> None:
    p.kill()
    p.wait(10)
