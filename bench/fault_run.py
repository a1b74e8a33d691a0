"""Fault run: one bulk ingest through `yana up` while faults come in turn, then an account of
every accepted job and every label against ground truth.

    .venv/bin/python bench/fault_run.py [--labels 500] [--batch 10] [--inflight 4] [--chroma-pause 20] [--receiver-down 60]

`yana up` runs the real system (Redis with AOF, Chroma, one worker with a pool of 2, Flower, the
API) in a temporary folder; its supervisor restarts what dies, as it would for an operator. The
run submits --labels distinct generated labels as ingest jobs of --batch images each (every job
with an Idempotency-Key and a webhook to a receiver here; a submit that hits a dead API is sent
again with the same key), keeping at most --inflight of them unfinished: the worker's pool of 2
busy and as many waiting, so a fault always falls on running and queued work but the probe below
does not wait out a backlog the run itself piled up (with label reading on, a burst of 7 batches
between two faults was 30-40 s of queue on 2 cores: a probe's time was that queue, not the
fault). Meanwhile, one after another:

  pool-child   kill -9 of a worker pool process (the one running a job, if any)
  worker-main  kill -9 of the Celery worker's main process
  redis        kill -9 of redis-server (append-only file: accepted jobs must survive)
  api          kill -9 of the API process
  chroma       SIGSTOP of the Chroma server for --chroma-pause s, then SIGCONT
  receiver     the webhook receiver down for --receiver-down s
  redis-after-delivery  kill -9 of redis-server the moment a webhook reached the receiver (its
               delivery record is being written: it must not be sent again)

Webhook lateness (receipt minus the job's finished_at) is reported per job, worst outside the
receiver's outage (there backoff is expected), beside deliveries per webhook-id (must be 1).

Recovery of a fault is the time from the fault (or its end) until a probe job (one small text
document: API, Redis, worker, embedding and Chroma all involved) succeeds; the probe queues behind
the (at most --inflight) jobs accepted before it, as any job would. At the end it prints
a table and the verdict (RESULT PASS or FAIL); with --strict it exits 1 when an accepted job was
lost, an item was indexed twice or lost, a webhook was never delivered or a recovery took over
--recovery-goal s.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402

from cli import processes  # noqa: E402
from cli.api_link import read_up_env  # noqa: E402
from tests.webhook_receiver import Receiver  # noqa: E402
from tools.datagen import images  # noqa: E402

SECRET = "whsec_" + base64.b64encode(b"fault-run-secret-0123456789abcd").decode()
FAST_RECOVERY = {"HEARTBEAT_INTERVAL_S": "0.5", "HEARTBEAT_TTL_S": "3", "RECONCILE_INTERVAL_S": "0.5"}


class System:
    """`yana up` in a temporary folder, and the processes under it."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        env = processes.child_env(
            WEBHOOK_SECRET=SECRET,
            WEBHOOK_ALLOW="127.0.0.0/8",
            WEBHOOK_BACKOFF_BASE_S="1",
            WEBHOOK_BACKOFF_MAX_S="4",
            RATE_LIMIT="10000/second",
            RATE_BURST="10000",
            **FAST_RECOVERY,
        )
        for key in ("REDIS_URL", "CHROMA_URL"):
            env.pop(key, None)
        self.log = open(data_dir / "up.out", "ab")  # noqa: SIM115 - lives as long as the run
        self.proc = subprocess.Popen(
            # The default ports, which move when another process holds them: a port chosen free here
            # and passed explicitly could be taken by anyone before the server binds it (CI failed
            # once that way). Where the API is comes from up.env (`api`).
            [sys.executable, "-m", "cli.main", "up", "--data-dir", str(data_dir)],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 240
        while not (data_dir / "up.env").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("yana up did not start:\n" + (data_dir / "up.out").read_text()[-3000:])
            time.sleep(0.5)

    @property
    def api(self) -> str:
        """The API's URL as `yana up` last wrote it (a restart may move it to another port)."""
        return read_up_env(self.data_dir)["YANA_API_URL"]

    def child(self, needle: str) -> psutil.Process | None:
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if needle in " ".join(p.cmdline()):
                    return p
            except psutil.NoSuchProcess:
                continue
        return None

    def worker_main(self) -> psutil.Process | None:
        for p in psutil.Process(self.proc.pid).children():
            try:
                if "celery" in " ".join(p.cmdline()) and " worker" in " ".join(p.cmdline()):
                    return p
            except psutil.NoSuchProcess:
                continue
        return None

    def pool_child(self) -> psutil.Process | None:
        main = self.worker_main()
        children = main.children() if main else []
        return children[0] if children else None

    def tails(self, lines: int = 12) -> str:
        """The last lines of `yana up`'s own output (restarts, backoff) and of each child's log:
        printed when the run fails, so a failure in CI says what the system was doing."""
        out = []
        # yana up's own output last: a test shows the end of what a bench printed
        for path in [*sorted((self.data_dir / "logs").glob("*.log")), self.data_dir / "up.out"]:
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {path.name} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


def label_items(n: int, run: str) -> list[dict]:
    items = []
    for i, meta in enumerate(images.label_set(n, seed=4242)):
        brand = f"{meta['brand_name']}・{run}{i:04d}"  # unique: the ground truth key
        data = images.encode(images.render_label({**meta, "brand_name": brand}, seed=4242 + i), "JPEG", 88)
        items.append(
            {
                "category": meta["category"],
                "brand_name": brand,
                "product_name": meta["product_name"],
                "brewery": meta["brewery"],
                "region": meta["region"],
                "image_base64": base64.b64encode(data).decode(),
            }
        )
    return items


class UpClient(httpx.Client):
    """A client of the system's API that follows it when a restart moved it (up.env names it)."""

    def __init__(self, system: System, **kwargs):
        self.system = system
        super().__init__(base_url=system.api, **kwargs)

    def follow(self) -> None:
        """After a failed connection: the API's URL again, from up.env."""
        url = read_up_env(self.system.data_dir).get("YANA_API_URL")
        if url and url != str(self.base_url).rstrip("/"):
            print(f"the API moved to {url}", flush=True)
            self.base_url = httpx.URL(url)


def post_retrying(client: UpClient, path: str, body: dict, key: str, deadline_s: float = 120) -> httpx.Response:
    """Submit until the API answers (it may be restarting), always with the same Idempotency-Key."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            r = client.post(path, json=body, headers={"Idempotency-Key": key})
            if r.status_code < 500 and r.status_code not in (408, 409, 429):
                return r
        except httpx.TransportError:
            client.follow()
        except httpx.HTTPError:
            pass
        if time.monotonic() > end:
            raise RuntimeError(f"{path}: no answer within {deadline_s}s")
        time.sleep(0.3)


def get_retrying(client: UpClient, path: str, deadline_s: float = 120) -> dict:
    end = time.monotonic() + deadline_s
    while True:
        try:
            r = client.get(path)
            if r.status_code == 200:
                return r.json()
        except httpx.TransportError:
            client.follow()
        except httpx.HTTPError:
            pass
        if time.monotonic() > end:
            raise RuntimeError(f"{path}: no answer within {deadline_s}s")
        time.sleep(0.3)


def probe(client: UpClient, limit_s: float = 180) -> float:
    """Seconds until a small end-to-end job succeeds."""
    t0 = time.monotonic()
    doc = {"documents": [{"id": f"probe-{uuid.uuid4().hex[:8]}", "text": "復旧確認の文書です。", "metadata": {}}]}
    accepted = post_retrying(client, "/v1/ingest", doc, key=uuid.uuid4().hex, deadline_s=limit_s)
    job_id = accepted.json()["job_id"]
    while time.monotonic() - t0 < limit_s:
        job = get_retrying(client, f"/v1/jobs/{job_id}", deadline_s=limit_s)
        if job["status"] == "succeeded":
            return time.monotonic() - t0
        if job["status"] in ("failed", "cancelled"):
            doc["documents"][0]["id"] += "x"  # a failed probe: try again with a new one
            accepted = post_retrying(client, "/v1/ingest", doc, key=uuid.uuid4().hex, deadline_s=limit_s)
            job_id = accepted.json()["job_id"]
        time.sleep(0.2)
    return float("inf")


TERMINAL = ("succeeded", "failed", "cancelled")


def wait_inflight(client: UpClient, accepted: dict[str, str], done: set[str], limit: int, deadline_s: float) -> None:
    """Block until fewer than `limit` accepted jobs are unfinished (or deadline_s has passed)."""
    end = time.monotonic() + deadline_s
    while True:
        for job_id in [j for j in accepted if j not in done]:
            if get_retrying(client, f"/v1/jobs/{job_id}")["status"] in TERMINAL:
                done.add(job_id)
        if len(accepted) - len(done) < limit or time.monotonic() > end:
            return
        time.sleep(0.2)


def kill(proc: psutil.Process | None) -> str:
    if proc is None:
        return "not found"
    proc.send_signal(signal.SIGKILL)
    return f"pid {proc.pid}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", type=int, default=500)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--inflight", type=int, default=4, help="at most this many submitted jobs unfinished")
    ap.add_argument("--chroma-pause", type=float, default=20)
    ap.add_argument("--receiver-down", type=float, default=60)
    ap.add_argument("--gap", type=float, default=6, help="seconds between faults")
    ap.add_argument("--recovery-goal", type=float, default=30)
    ap.add_argument("--settle", type=float, default=600, help="seconds to wait for every job to end")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the run fails its goals (default: report only)")
    ap.add_argument("--keep", type=Path, help="run in this folder and keep it (logs) instead of a temporary one")
    args = ap.parse_args()

    run = uuid.uuid4().hex[:6]
    t_start = time.monotonic()
    items = label_items(args.labels, run)
    print(
        f"{len(items)} labels rendered in {time.monotonic() - t_start:.0f}s; "
        f"batches of {args.batch}, at most {args.inflight} unfinished",
        flush=True,
    )
    receiver = Receiver(SECRET)
    recv_port = receiver.port
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        system = System(folder)
        rows: list[tuple[str, str, float]] = []
        accepted: dict[str, str] = {}  # job id -> idempotency key
        outage = [0.0, 0.0]  # the receiver's outage (wall clock)
        try:
            client = UpClient(system, timeout=30)
            print(f"warm-up probe (models loaded before the faults) {probe(client):.1f}s", flush=True)
            faults_n = 7
            # at least two batches per fault, so faults never fall on the same batch
            batch = max(1, min(args.batch, len(items) // (2 * faults_n)))
            batches = [items[i : i + batch] for i in range(0, len(items), batch)]
            faults = [
                ("pool-child", lambda: kill(system.pool_child())),
                ("worker-main", lambda: kill(system.worker_main())),
                ("redis", lambda: kill(system.child("redis-server"))),
                ("api", lambda: kill(system.child("uvicorn"))),
                ("chroma", None),
                ("receiver", None),
                ("redis-after-delivery", lambda: kill_after_delivery(system, receiver)),
            ]
            assert len(faults) == faults_n
            fault_at = {round(len(batches) * (k + 1) / (len(faults) + 1)): f for k, f in enumerate(faults)}
            assert len(fault_at) == len(faults), "two faults on one batch"
            done: set[str] = set()  # accepted jobs seen terminal
            for b, batch in enumerate(batches):
                wait_inflight(client, accepted, done, args.inflight, args.settle)
                key = f"{run}-batch-{b}"
                r = post_retrying(client, "/v1/ingest", {"items": batch, "callback_url": receiver.url}, key)
                if r.status_code != 202:
                    raise RuntimeError(f"batch {b}: {r.status_code} {r.text[:300]}")
                accepted[r.json()["job_id"]] = key
                if b not in fault_at:
                    continue
                name, action = fault_at.pop(b)
                if name == "chroma":
                    chroma = system.child("chroma")
                    chroma.send_signal(signal.SIGSTOP)
                    time.sleep(args.chroma_pause)
                    chroma.send_signal(signal.SIGCONT)
                    what = f"paused {args.chroma_pause:.0f}s"
                elif name == "receiver":
                    receiver.close()
                    outage[0] = time.time()
                    time.sleep(args.receiver_down)
                    receiver = _reopen(receiver, recv_port)
                    outage[1] = time.time()
                    what = f"down {args.receiver_down:.0f}s"
                else:
                    what = action()
                rows.append((name, what, probe(client, limit_s=min(180, args.settle))))
                print(f"fault {name:<12} {what:<16} recovered in {rows[-1][2]:.1f}s", flush=True)
                time.sleep(args.gap)

            # every accepted job to a terminal state
            end = time.monotonic() + args.settle
            jobs: dict[str, dict] = {}
            while time.monotonic() < end:
                jobs = {j: get_retrying(client, f"/v1/jobs/{j}") for j in accepted}
                if all(j["status"] in TERMINAL for j in jobs.values()):
                    break
                time.sleep(2)
            # deliveries still in their retry schedule get time to land
            end = time.monotonic() + min(120, args.settle)
            while time.monotonic() < end and {d["payload"]["data"]["id"] for d in receiver.deliveries} < set(accepted):
                time.sleep(1)
            report(args, rows, accepted, jobs, items, receiver, system, run, outage)
        except RuntimeError:
            print(f"load average {os.getloadavg()}\n{system.tails()}", file=sys.stderr, flush=True)
            raise
        finally:
            system.stop()
            receiver.close()


def kill_after_delivery(system: System, receiver: Receiver, wait_s: float = 120) -> str:
    """kill -9 of Redis right after the next webhook reaches the receiver: the dispatcher is
    writing that delivery's record."""
    seen = len(receiver.deliveries)
    end = time.monotonic() + wait_s
    while len(receiver.deliveries) == seen and time.monotonic() < end:
        time.sleep(0.005)
    if len(receiver.deliveries) == seen:
        return "no delivery"
    return kill(system.child("redis-server"))


def _finished(job: dict) -> float | None:
    from datetime import datetime

    at = job.get("finished_at")
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() if at else None


def _reopen(old: Receiver, port: int) -> Receiver:
    new = Receiver(SECRET, port=port)
    new.deliveries = old.deliveries  # one record of every delivery, before and after the outage
    return new


def indexed_counts(system: System, run: str) -> Counter:
    import chromadb
    import redis

    env = read_up_env(system.data_dir)
    r = redis.Redis.from_url(env["REDIS_URL"], decode_responses=True, socket_timeout=10)
    host, port = env["CHROMA_URL"].removeprefix("http://").split(":")
    col = chromadb.HttpClient(host=host, port=int(port)).get_collection(r.get("yana:collection:active"))
    counts: Counter = Counter()
    offset = 0
    while True:
        page = col.get(include=["metadatas"], limit=2000, offset=offset)
        if not page["ids"]:
            return counts
        for md in page["metadatas"]:
            if run in (md.get("brand_name") or ""):
                counts[md["brand_name"]] += 1
        offset += len(page["ids"])


def report(args, rows, accepted, jobs, items, receiver, system, run, outage) -> None:
    statuses = Counter(j["status"] for j in jobs.values())
    counts = indexed_counts(system, run)
    merged = {
        o.get("brand_name") or ""
        for j in jobs.values()
        for o in ((j.get("result") or {}).get("items") or [])
        if o.get("dedup")
    }
    brands = [it["brand_name"] for it in items]
    once = sum(1 for b in brands if counts[b] == 1)
    twice = sum(1 for b in brands if counts[b] > 1)
    lost = [b for b in brands if counts[b] == 0 and b not in merged]
    per_id = Counter(d["headers"].get("webhook-id") for d in receiver.deliveries)
    delivered_jobs = {d["payload"]["data"]["id"] for d in receiver.deliveries}
    undelivered = set(accepted) - delivered_jobs
    worst = max((r[2] for r in rows), default=0.0)
    first_at: dict[str, float] = {}
    for d in receiver.deliveries:
        jid = d["payload"]["data"]["id"]
        first_at[jid] = min(first_at.get(jid, d["at"]), d["at"])
    late = []  # (seconds, job id) outside the receiver's outage
    for jid, at in first_at.items():
        fin = _finished(jobs.get(jid) or {})
        if fin is not None and not (outage[0] - 1 <= fin <= outage[1] + 1):
            late.append((at - fin, jid))
    worst_late = max(late, default=(0.0, ""))

    print("\nfault         what              recovery")
    for name, what, secs in rows:
        print(f"  {name:<12} {what:<16} {secs:6.1f} s")
    print(f"\naccepted jobs        {len(accepted)}")
    print(f"terminal             {sum(statuses.values())} {dict(statuses)}")
    print(f"labels               {len(brands)}")
    print(f"indexed exactly once {once}")
    print(f"indexed twice or more {twice}")
    print(f"merged as near-dup   {len(merged)}")
    print(f"lost                 {len(lost)}")
    print(
        f"webhooks delivered   {len(delivered_jobs)} of {len(accepted)} jobs; deliveries per webhook-id max {max(per_id.values(), default=0)}"
    )
    print(f"worst recovery       {worst:.1f} s (goal {args.recovery_goal:.0f} s)")
    print(
        f"webhook lateness     worst {worst_late[0]:.1f} s (job {worst_late[1] or '-'}), "
        f"p50 {sorted(x for x, _ in late)[len(late) // 2] if late else 0.0:.1f} s over {len(late)} jobs "
        "finished outside the receiver outage (goal: within the recovery goal)"
    )
    print(f"load average         {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    dup = max(per_id.values(), default=0) > 1
    failed = (
        len(accepted) != sum(statuses.values())
        or twice
        or lost
        or undelivered
        or dup
        or worst > args.recovery_goal
        or worst_late[0] > args.recovery_goal
    )
    print("RESULT", "FAIL" if failed else "PASS")
    print(json.dumps({"lost": lost[:10], "undelivered": sorted(undelivered)[:10]}, ensure_ascii=False))
    if failed and args.strict:
        sys.exit(1)


if __name__ == "__main__":
    main()
