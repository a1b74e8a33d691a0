"""GET and PATCH /v1/labels/{id} over HTTP on the shared stack: a label ingested through the API
shows its fields with their sources and what was read off it; a correction answers with the
corrected record and the next search finds the label by the corrected words."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.stack import wait_job
from tools.datagen import images

META = images.label_set(1, seed=91)[0]


@pytest.fixture(scope="module")
def client(stack):
    with httpx.Client(base_url=stack.api_url, timeout=60) as c:
        yield c


def _ingest_one(client, seed: int, fields: dict) -> dict:
    """One sample label image through POST /v1/ingest; the job's item outcome."""
    data = images.encode(images.render_label(META, seed=seed), "JPEG", 90)
    r = client.post("/v1/ingest", files={"file": (f"{seed}.jpg", data, "image/jpeg")}, data=fields)
    assert r.status_code == 202, r.text
    job = wait_job(client, r.json()["job_id"], timeout_s=180)
    assert job["status"] == "succeeded", job
    return job["result"]["items"][0]


@pytest.fixture(scope="module")
def label_id(client):
    fields = {"category": "sake", "brand_name": "誤記銘柄", "brewery": "試験酒造", "region": "新潟"}
    return _ingest_one(client, 9100, fields)["id"]


def test_the_record_shows_fields_with_their_sources_and_the_reading(client, label_id):
    r = client.get(f"/v1/labels/{label_id}")
    assert r.status_code == 200, r.text
    rec = r.json()
    assert rec["id"] == label_id and rec["image_url"] == f"/v1/labels/{label_id}/image"
    assert rec["fields"]["brand_name"] == {"value": "誤記銘柄", "source": "uploader", "confidence": 1.0}
    assert rec["read"] is not None and rec["read"]["engine"], "the stack reads labels (OCR_MODE=auto)"
    assert all(len(line["box"]) == 4 for line in rec["read"]["lines"] if line["box"])
    assert rec["server_version"]


def test_a_correction_is_searchable_at_once(client, label_id):
    brand = f"正銘柄{uuid.uuid4().hex[:4]}"
    r = client.patch(f"/v1/labels/{label_id}", json={"fields": {"brand_name": brand}})
    assert r.status_code == 200, r.text
    rec = r.json()
    assert rec["brand_name"] == brand and rec["fields"]["brand_name"]["source"] == "corrected"
    assert rec["corrections"]["brand_name"]["value"] == brand
    hits = client.post("/v1/search", json={"query_text": brand, "k": 3}).json()["hits"]
    assert hits and hits[0]["id"] == label_id and hits[0]["brand_name"] == brand
    assert client.get(f"/v1/labels/{label_id}").json()["brand_name"] == brand


def test_a_label_sent_with_full_fields_is_read_after_its_ingest(client):
    """OCR_MODE=auto: the read waits for the ingest (pipelines.ingest.deferred); the workers'
    maintenance loop sends it to the ocr queue once ingest is idle, and the record then shows it."""
    fields = {"category": "sake", "brand_name": "後読銘柄", "product_name": "後読純米", "brewery": "試験酒造"}
    item = _ingest_one(client, 9101, fields)
    assert item["read"] == "deferred" and item["read_text"] is None, item
    deadline = time.monotonic() + 120
    while True:
        rec = client.get(f"/v1/labels/{item['id']}").json()
        if not rec["read_pending"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert rec["read"] and rec["read"]["engine"] and not rec["read_pending"], rec
    assert rec["fields"]["product_name"] == {"value": "後読純米", "source": "uploader", "confidence": 1.0}


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/v1/labels/label_0000000000000000", {"fields": {"brand_name": "x"}}, 404, "NOT_FOUND"),
        ("/v1/labels/{id}", {"fields": {}}, 400, "BAD_REQUEST"),
        ("/v1/labels/{id}", {"fields": {"nope": "x"}}, 400, "BAD_REQUEST"),
        ("/v1/labels/{id}", {"brand_name": "x"}, 400, "BAD_REQUEST"),
        ("/v1/labels/{id}", {"fields": {"brand_name": "x" * 201}}, 400, "BAD_REQUEST"),
    ],
)
def test_bad_corrections_get_the_error_body(client, label_id, path, body, status, code):
    r = client.patch(path.format(id=label_id), json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert client.get("/v1/labels/label_0000000000000000").status_code == 404
