"""The blob store's one interface, the same test body over both backends: the local folder and a
real S3 HTTP server on loopback (moto's standalone server, reached by AWS_ENDPOINT_URL)."""

from __future__ import annotations

import io
import os
import time

import pytest

from tests.s3server import start_s3
from yana.blobs import BlobMissing, LocalBlobStore, S3BlobStore, open_store
from yana.errors import YanaError

pytestmark = pytest.mark.stack  # starts an S3 server process of its own


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = start_s3(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, monkeypatch):
    if request.param == "local":
        return open_store(None, tmp_path)
    server = request.getfixturevalue("s3")
    bucket = server.create_bucket(f"t{time.monotonic_ns()}")
    # As an operator configures it: the standard AWS variables, read by boto3.
    for k, v in server.env(bucket, prefix="pre/fix").items():
        monkeypatch.setenv(k, v)
    return open_store(os.environ["BLOB_URL"], tmp_path, timeout_s=5, max_attempts=2)


def test_put_get_stat_delete(store):
    assert not store.exists("images/ab/x.jpg") and store.stat("images/ab/x.jpg") is None
    with pytest.raises(BlobMissing):
        store.get("images/ab/x.jpg")
    store.put("images/ab/x.jpg", b"\xff\xd8 bytes")
    assert store.get("images/ab/x.jpg") == b"\xff\xd8 bytes"
    info = store.stat("images/ab/x.jpg")
    assert info is not None and info.size == 8 and abs(info.mtime - time.time()) < 120
    store.put("images/ab/x.jpg", b"other")  # overwrite
    assert store.get("images/ab/x.jpg") == b"other"
    store.delete("images/ab/x.jpg")
    store.delete("images/ab/x.jpg")  # again: harmless
    assert not store.exists("images/ab/x.jpg")


def test_streaming_put_and_get(store):
    data = os.urandom(3 * 1024 * 1024 + 17)  # several stream chunks
    store.put("incoming/j/0.bin", io.BytesIO(data))
    assert b"".join(store.stream("incoming/j/0.bin")) == data
    with pytest.raises(BlobMissing):
        store.stream("incoming/j/none.bin")


def test_size_limit(store):
    store.put("incoming/j/big.bin", b"x" * 1000)
    with pytest.raises(YanaError) as err:
        store.get("incoming/j/big.bin", max_bytes=999)
    assert err.value.code == "IMAGE_TOO_LARGE"
    assert store.get("incoming/j/big.bin", max_bytes=1000) == b"x" * 1000


def test_list_and_delete_prefix(store):
    for key in ("incoming/a/0.bin", "incoming/a/1.bin", "incoming/b/0.bin", "images/00/z.png"):
        store.put(key, key.encode())
    assert sorted(b.key for b in store.list("incoming/")) == [
        "incoming/a/0.bin",
        "incoming/a/1.bin",
        "incoming/b/0.bin",
    ]
    assert store.delete_prefix("incoming/a/") == 2
    assert sorted(b.key for b in store.list("incoming/")) == ["incoming/b/0.bin"]
    assert store.get("images/00/z.png") == b"images/00/z.png"
    assert store.delete_prefix("incoming/none/") == 0


@pytest.mark.parametrize("key", ["", "/abs", "../up", "a/../../b", "a//b", "a\\b"])
def test_keys_stay_inside_the_store(store, key):
    with pytest.raises(ValueError):
        store.put(key, b"x")


def test_local_path_only_for_the_folder(store, tmp_path):
    store.put("images/ab/y.jpg", b"y")
    if isinstance(store, LocalBlobStore):
        assert store.local_path("images/ab/y.jpg") == tmp_path / "images/ab/y.jpg"
        assert (tmp_path / "images/ab/y.jpg").read_bytes() == b"y"
    else:
        assert isinstance(store, S3BlobStore) and store.local_path("images/ab/y.jpg") is None
        assert not (tmp_path / "images").exists()


def test_s3_keys_live_under_the_prefix(s3, monkeypatch, tmp_path):
    bucket = s3.create_bucket("prefixed")
    for k, v in s3.env(bucket, prefix="deploy1").items():
        monkeypatch.setenv(k, v)
    store = open_store(os.environ["BLOB_URL"], tmp_path)
    store.put("incoming/j/0.bin", b"a")
    assert s3.keys(bucket) == ["deploy1/incoming/j/0.bin"]
    assert [b.key for b in store.list("incoming/")] == ["incoming/j/0.bin"]


def test_unreachable_s3_fails_within_its_timeout(tmp_path, monkeypatch):
    from cli.processes import free_port

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    store = open_store(
        "s3://nobucket/p", tmp_path, endpoint_url=f"http://127.0.0.1:{free_port()}", timeout_s=1, max_attempts=1
    )
    t0 = time.monotonic()
    with pytest.raises(YanaError) as err:
        store.put("incoming/j/0.bin", b"x")
    assert err.value.code == "STORE_UNAVAILABLE" and err.value.retryable
    assert time.monotonic() - t0 < 10


def test_settings_override_the_aws_variables(s3, monkeypatch, tmp_path):
    """BLOB_ENDPOINT_URL / BLOB_ACCESS_KEY_ID ... win over AWS_*, which here point nowhere."""
    from cli.processes import free_port
    from yana import clients
    from yana.settings import Settings

    bucket = s3.create_bucket("overrides")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    s = Settings(
        data_dir=tmp_path,
        blob_url=f"s3://{bucket}/p",
        blob_endpoint_url=s3.url,
        blob_access_key_id="yana-test",
        blob_secret_access_key="yana-test-secret",
        blob_region="us-east-1",
        blob_timeout_s=5,
    )
    store = clients.get_blobs(s)
    store.put("images/00/a.png", b"png")
    assert s3.keys(bucket) == ["p/images/00/a.png"]
