"""Scale-out across hosts, on one machine: an API and workers with different DATA_DIRs (nothing on
disk in common) sharing Redis, Chroma and an S3 server (moto's standalone server speaking the S3
HTTP API on loopback). Uploads are staged in the bucket, images are kept there, and any API host
serves them back at /v1/labels/{id}/image.

The control shows what the blob store fixes: an API host on its own local folder stages uploads
where the workers cannot see them, and the job fails with SOURCE_MISSING."""

from __future__ import annotations

import base64
import http.server
import threading
from pathlib import Path

import httpx
import pytest
import redis

from pipelines.runtime.jobs import job_key
from tests.s3server import start_s3
from tests.stack import start_stack, wait_for, wait_job
from tools.datagen import images

pytestmark = pytest.mark.stack

METAS = images.label_set(48, seed=15)
BUCKET = "yana-scaleout"


def _jpeg(i: int) -> bytes:
    return images.encode(images.render_label(METAS[i], seed=1500 + i), "JPEG", 90)


def _fields(i: int) -> dict:
    return {k: METAS[i][k] for k in ("category", "brand_name", "product_name", "brewery", "region")}


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    root = tmp_path_factory.mktemp("scaleout")
    s3 = start_s3(root / "s3")
    s3.create_bucket(BUCKET)
    # Redis and Chroma are the shared services; every yana process gets BLOB_URL and the AWS_*.
    st = start_stack(root / "shared", worker=False, api=False, FETCH_ALLOW="127.0.0.0/8", **s3.env(BUCKET))
    try:
        st.start_worker(name="worker-b", DATA_DIR=str(root / "host-b"))
        st.api_url = st.start_api(name="api-a", DATA_DIR=str(root / "host-a")).url
        yield st, s3, root
    finally:
        st.stop()
        s3.stop()


@pytest.fixture(scope="module")
def image_server():
    """An HTTP origin for URL ingest (the worker fetches it; FETCH_ALLOW admits loopback)."""
    body = {f"/{i}.jpg": _jpeg(i) for i in range(24)}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            data = body.get(self.path)
            self.send_response(200 if data else 404)
            self.send_header("content-type", "image/jpeg")
            self.send_header("content-length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _files(folder: Path, sub: str) -> list[Path]:
    return [p for p in (folder / sub).rglob("*") if p.is_file()] if (folder / sub).is_dir() else []


def test_multipart_base64_and_url_ingest_across_hosts(hosts, image_server):
    st, s3, root = hosts
    sent = {0: _jpeg(0), 1: _jpeg(1), 2: _jpeg(2)}
    with httpx.Client(base_url=st.api_url, timeout=60) as c:
        jobs = {
            0: c.post("/v1/ingest", files={"file": ("a.jpg", sent[0], "image/jpeg")}, data=_fields(0)),
            1: c.post("/v1/ingest", json={**_fields(1), "image_base64": base64.b64encode(sent[1]).decode()}),
            2: c.post("/v1/ingest", json={**_fields(2), "image_url": f"{image_server}/2.jpg"}),
        }
        for i, resp in jobs.items():
            assert resp.status_code == 202, resp.text
            job = wait_job(c, resp.json()["job_id"], timeout_s=180)
            assert job["status"] == "succeeded", job
            res = job["result"]
            assert res["indexed"] == 1 and res["id"], res
            # No local path exists on a shared store; the API serves the image instead.
            assert res["file_path"] is None and res["image_url"] == f"/v1/labels/{res['id']}/image"
            assert res["items"][0]["image_url"] == res["image_url"]
            img = c.get(res["image_url"])
            assert img.status_code == 200 and img.content == sent[i], (img.status_code, img.text[:200])
            assert img.headers["content-type"] == "image/jpeg"
            assert "immutable" in img.headers["cache-control"] and img.headers["etag"].strip('"') == res["hash_sha1"]
            again = c.get(res["image_url"], headers={"If-None-Match": img.headers["etag"]})
            assert again.status_code == 304 and not again.content

        hits = c.post("/v1/search", json={"query_text": METAS[0]["brand_name"], "k": 5}).json()["hits"]
        hit = next(h for h in hits if h["brand_name"] == METAS[0]["brand_name"])
        assert hit["image_url"] == f"/v1/labels/{hit['id']}/image" and hit["file_path"] == ""
        assert c.get(hit["image_url"]).content == sent[0]
        assert c.get("/v1/labels/label_0123456789abcdef/image").status_code == 404

    keys = s3.keys(BUCKET)
    assert sum(k.startswith("yana/images/") for k in keys) == 3, keys
    assert not [k for k in keys if k.startswith("yana/incoming/")], "staged uploads left after their jobs"
    for host in ("host-a", "host-b"):
        assert not _files(root / host, "images") and not _files(root / host, "incoming"), host


def test_an_exact_duplicate_answers_with_the_kept_image(hosts):
    st, _s3, _root = hosts
    with httpx.Client(base_url=st.api_url, timeout=60) as c:
        r = c.post("/v1/ingest", json={**_fields(1), "image_base64": base64.b64encode(_jpeg(1)).decode()})
        assert r.status_code == 200 and r.json()["dedup"], r.text
        body = r.json()
        assert body["file_path"] is None and c.get(body["image_url"]).content == _jpeg(1)


def _ingest_one(c: httpx.Client, i: int) -> str:
    resp = c.post("/v1/ingest", files={"file": (f"{i}.jpg", _jpeg(i), "image/jpeg")}, data=_fields(i))
    assert resp.status_code == 202, resp.text
    return resp.json()["job_id"]


def _ran_on(c: httpx.Client, r, job_id: str) -> str:
    job = wait_job(c, job_id, timeout_s=180)
    assert job["status"] == "succeeded", job
    token = r.hget(job_key(job_id), "token") or ""  # "<attempt uuid>:<worker hostname>"
    return "b" if "worker-b" in token else "c" if "worker-c" in token else token


def test_a_second_worker_with_its_own_folder_takes_half_the_jobs(hosts):
    st, _s3, root = hosts
    # Its first job loads the embedding model (seconds on a loaded 2-core machine): a longer
    # heartbeat TTL than the tests' 3 s keeps that job from being reclaimed meanwhile.
    st.start_worker(name="worker-c", DATA_DIR=str(root / "host-c"), HEARTBEAT_TTL_S="30")
    r = redis.Redis.from_url(st.redis_url, decode_responses=True)
    with httpx.Client(base_url=st.api_url, timeout=60) as c:
        # Warm-up, one job at a time, until worker c has run one (its model is loaded).
        warm = iter(range(28, 48))
        wait_for(lambda: _ran_on(c, r, _ingest_one(c, next(warm))) == "c", timeout_s=300, what="worker c warm")
        ids = [_ingest_one(c, i) for i in range(4, 28)]
        ran = [_ran_on(c, r, job_id) for job_id in ids]
    on_b, on_c = ran.count("b"), ran.count("c")
    print(f"jobs per worker: b={on_b} c={on_c}")
    assert on_b + on_c == len(ids), ran
    # Each worker has one process and prefetches one message: the queue is shared about evenly.
    assert min(on_b, on_c) >= len(ids) // 4, f"b={on_b} c={on_c}"


def test_control_an_api_on_its_own_folder_strands_its_uploads(hosts):
    """Without the shared store (BLOB_URL empty on the API host only) the worker cannot read the
    upload: the failure the blob store exists to prevent."""
    st, _s3, root = hosts
    api = st.start_api(name="api-local", DATA_DIR=str(root / "host-d"), BLOB_URL="")
    with httpx.Client(base_url=api.url, timeout=60) as c:
        resp = c.post("/v1/ingest", files={"file": ("x.jpg", _jpeg(40), "image/jpeg")}, data=_fields(40))
        assert resp.status_code == 202, resp.text
        job = wait_job(c, resp.json()["job_id"], timeout_s=180)
    assert job["status"] == "failed" and job["error"]["code"] == "SOURCE_MISSING", job
    assert _files(root / "host-d", "incoming"), "the upload stranded on host d's disk"
