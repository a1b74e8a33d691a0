"""POST /v1/search/photo over HTTP on the shared stack: multipart and base64 photos, the label
shown first, and bad photos answered with the error body."""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.stack import wait_job
from tools.datagen import images

META = images.label_set(1, seed=93)[0]
PHOTO = images.encode(images.render_label(META, seed=9300), "JPEG", 90)


@pytest.fixture(scope="module")
def client(stack):
    with httpx.Client(base_url=stack.api_url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def label_id(client):
    fields = {"category": "sake", "brand_name": "写真検索山", "brewery": "試験酒造"}
    r = client.post("/v1/ingest", files={"file": ("p.jpg", PHOTO, "image/jpeg")}, data=fields)
    assert r.status_code == 202, r.text
    job = wait_job(client, r.json()["job_id"], timeout_s=180)
    assert job["status"] == "succeeded", job
    return job["result"]["id"]


def test_multipart_photo_answers_the_label_it_shows_first(client, label_id):
    r = client.post("/v1/search/photo", files={"file": ("q.jpg", PHOTO, "image/jpeg")}, data={"k": "3"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["match"] == {"id": label_id, "kind": "same_image", "distance": 0, "score": None}
    assert body["hits"][0]["id"] == label_id and body["hits"][0]["brand_name"] == "写真検索山"
    assert body["not_found"] == [] and body["server_version"]


def test_base64_photo_gives_the_same_answer(client, label_id):
    r = client.post("/v1/search/photo", json={"image_base64": base64.b64encode(PHOTO).decode(), "k": 2})
    assert r.status_code == 200, r.text
    assert r.json()["match"]["id"] == label_id and len(r.json()["hits"]) <= 2


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"json": {}}, 400, "BAD_REQUEST"),
        ({"json": {"image_base64": "***"}}, 400, "BAD_REQUEST"),
        ({"json": {"image_base64": base64.b64encode(b"not an image").decode()}}, 415, "UNSUPPORTED_IMAGE_TYPE"),
        ({"json": {"image_base64": base64.b64encode(PHOTO[:200]).decode()}}, 422, "CORRUPT_IMAGE"),
        ({"json": {"image_base64": "aGk=", "image_url": "http://example.invalid/a.jpg"}}, 400, "BAD_REQUEST"),
        ({"json": {"image_base64": "aGk=", "k": 0}}, 400, "BAD_REQUEST"),
        ({"files": {"nofile": ("a.txt", b"x", "text/plain")}}, 400, "BAD_REQUEST"),
        ({"content": b"x", "headers": {"content-type": "text/plain"}}, 415, "UNSUPPORTED_MEDIA_TYPE"),
    ],
)
def test_bad_photos_get_the_error_body(client, kwargs, status, code):
    r = client.post("/v1/search/photo", **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
