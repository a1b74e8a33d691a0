"""The ingest and re-embed pipelines against a real Redis and a Chroma PersistentClient."""

from __future__ import annotations

import http.server
import threading

import numpy as np
import pytest

from pipelines.embedding.backends import get_embedder
from pipelines.ingest import pipeline as ingest
from pipelines.neardup import hashing
from pipelines.neardup import index as phash_index
from pipelines.reembed import job as reembed
from pipelines.search import collections as vector_index
from pipelines.search import lexical
from tests.pipelines.ingest_support import FakeJob, build_tiny_st_model, make_env
from tools.datagen import images
from yana.errors import YanaError

METAS = images.label_set(12, seed=5)


def _label_bytes(i: int) -> bytes:
    return images.encode(images.render_label(METAS[i], seed=500 + i), "JPEG", 90)


def _stage(env, job_id: str, i: int, data: bytes) -> dict:
    p = env.data_dir / "incoming" / job_id / f"{i}.bin"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"kind": "stored", "path": f"incoming/{job_id}/{i}.bin"}


def _item(i: int, source: dict, meta: dict) -> dict:
    return {"index": i, "name": f"f{i}", "source": source, "fields": {**meta, "text": None}}


@pytest.fixture()
def env(redis_url, tmp_path):
    return make_env(redis_url, tmp_path)


def test_ingest_mixed_batch(env):
    job = FakeJob("job-mixed")
    base = images.render_label(METAS[0], seed=500)
    near = images.variant(base, "brightness", __import__("random").Random(1)).image
    (env.import_dir / "sub").mkdir()
    (env.import_dir / "sub" / "two.png").write_bytes(images.encode(images.render_label(METAS[2], seed=502), "PNG"))
    sources = [
        _stage(env, job.job_id, 0, images.encode(base, "JPEG", 90)),
        _stage(env, job.job_id, 1, _label_bytes(1)),
        {"kind": "file", "path": f"file://{env.import_dir}/sub/two.png"},
        _stage(env, job.job_id, 3, images.encode(near, "JPEG", 85)),  # near duplicate of 0
        _stage(env, job.job_id, 4, _label_bytes(1)),  # exact duplicate of 1
        _stage(env, job.job_id, 5, b"\xff\xd8\xff\xe0" + b"\x00" * 100),  # corrupt
        {"kind": "file", "path": "file:///etc/passwd"},  # outside the import folder
    ]
    # the near duplicate (3) is sent with its original's fields: other fields would make it a
    # different label whatever the image (the fields rule of the second stage)
    fields_of = [0, 1, 2, 0, 1, 2, 2]
    items = [_item(i, src, METAS[fields_of[i]]) for i, src in enumerate(sources)]
    docs = [{"id": "memo-1", "text": "蔵見学の記録。" * 5, "metadata": {"category": "sake", "author": "x"}}]
    res = ingest.run_ingest(job, items=items, documents=docs, r=env.r, chroma=env.chroma, s=env.s)

    assert (res["indexed"], res["dedup"], res["failed"], res["documents"]) == (3, 2, 2, 1)
    by = {o["index"]: o for o in res["items"]}
    assert by[3]["dedup"] and by[3]["dedup_of"] == by[0]["id"] and 0 < by[3]["distance"] <= 10
    assert 0 <= by[3]["verifier_score"] <= 1.0, "a near duplicate goes through the verifier"
    assert by[4]["dedup"] and by[4]["dedup_of"] == by[1]["id"] and by[4]["distance"] == 0
    assert by[5]["error"]["code"] == "CORRUPT_IMAGE" and by[5]["id"] is None
    assert by[6]["error"]["code"] == "PATH_NOT_ALLOWED"
    for o in (by[0], by[1], by[2]):
        assert o["id"] == f"label_{o['hash_sha1'][:16]}" and len(o["phash"]) == 16
        assert (env.data_dir / o["file_path"]).is_file() and not o["file_path"].startswith("/")

    col, model = vector_index.active_collection(env.chroma, env.r)
    got = col.get(include=["metadatas", "documents"])
    label_chunks = [m for m in got["metadatas"] if m["source"] == "label"]
    assert sorted(m["id"] for m in label_chunks) == sorted(by[i]["id"] for i in (0, 1, 2))
    m0 = next(m for m in label_chunks if m["id"] == by[0]["id"])
    assert m0["brand_name"] == METAS[0]["brand_name"] and m0["category"] == METAS[0]["category"]
    assert m0["file_path"] == by[0]["file_path"] and m0["phash"] == by[0]["phash"] and m0["ingested_at_ts"] > 0
    assert "、" in m0["label_features"] or len(METAS[0]["label_features"]) == 1
    doc_chunks = [m for m in got["metadatas"] if m["source"] == "text"]
    assert doc_chunks and all(m["id"] == "memo-1" and m["author"] == "x" for m in doc_chunks)
    assert lexical.count(env.r, col.name) == col.count(), "mirrored into the lexical index"
    # staging copies removed, but the failed upload's (POST /v1/jobs/{id}/retry-failed sends it again)
    staged = env.data_dir / "incoming" / job.job_id
    assert sorted(p.name for p in staged.iterdir()) == ["5.bin"]
    assert env.r.hexists(phash_index.DUPS_KEY, by[3]["hash_sha1"]), "near duplicate recorded for the report"


def test_resume_after_a_kill_indexes_each_image_once(env):
    n = 10
    items = [_item(i, _stage(env, "job-crash", i, _label_bytes(i)), METAS[i]) for i in range(n)]
    job = FakeJob("job-crash", crash_after_saves=1)  # dies after batch 2 wrote its outcomes, before its cursor
    with pytest.raises(SystemExit):
        ingest.run_ingest(job, items=items, r=env.r, chroma=env.chroma, s=env.s)
    assert job.meta["cursor"] == 4
    job.crash_after_saves = None
    res = ingest.run_ingest(job, items=items, r=env.r, chroma=env.chroma, s=env.s)
    assert (res["indexed"], res["dedup"], res["failed"]) == (n, 0, 0), res["items"]
    col, _ = vector_index.active_collection(env.chroma, env.r)
    ids = col.get(include=[])["ids"]
    assert len(ids) == len(set(ids)) == n
    assert phash_index.PHashIndex(env.r, 10).count() == n


def test_a_failed_write_takes_its_phash_entries_back(env, monkeypatch):
    items = [_item(i, _stage(env, "job-w", i, _label_bytes(i)), METAS[i]) for i in range(3)]
    real = vector_index.upsert_chunks

    def broken(*a, **k):
        raise ConnectionError("chroma is down")

    monkeypatch.setattr(vector_index, "upsert_chunks", broken)
    with pytest.raises(ConnectionError):
        ingest.run_ingest(FakeJob("job-w"), items=items, r=env.r, chroma=env.chroma, s=env.s)
    assert phash_index.PHashIndex(env.r, 10).count() == 0
    monkeypatch.setattr(vector_index, "upsert_chunks", real)
    res = ingest.run_ingest(FakeJob("job-w2"), items=items, r=env.r, chroma=env.chroma, s=env.s)
    assert res["indexed"] == 3, "not reported as duplicates of labels that never made it"


def test_document_update_removes_stale_chunks(env):
    s = env.s.model_copy(update={"max_chunk_chars": 20})
    long = "".join(f"第{i}段落の文章です。" for i in range(20))
    ingest.run_ingest(FakeJob("d1"), documents=[{"id": "doc", "text": long}], r=env.r, chroma=env.chroma, s=s)
    col, _ = vector_index.active_collection(env.chroma, env.r)
    assert len(col.get(where={"doc_id": "doc"})["ids"]) > 5
    res = ingest.run_ingest(
        FakeJob("d2"),
        documents=[{"id": "doc", "text": "短い本文。"}, {"id": "", "text": "x"}],
        r=env.r,
        chroma=env.chroma,
        s=s,
    )
    assert res["documents"] == 1 and res["failed"] == 1
    assert col.get(where={"doc_id": "doc"}, include=["documents"])["documents"] == ["短い本文。"]


class _Images(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/label.jpg")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/jpeg")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


@pytest.fixture()
def image_server():
    _Images.body = _label_bytes(7)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_url_sources_are_fetched_only_where_allowed(redis_url, tmp_path, image_server):
    allowed = make_env(redis_url, tmp_path, fetch_allow=["127.0.0.1"], fetch_max_bytes=1_000_000)
    items = [_item(0, {"kind": "url", "url": f"{image_server}/redirect"}, METAS[7])]
    res = ingest.run_ingest(FakeJob("u1"), items=items, r=allowed.r, chroma=allowed.chroma, s=allowed.s)
    assert res["indexed"] == 1 and res["items"][0]["hash_sha1"] == hashing.sha1_hex(_label_bytes(7))

    # a one-image job fails with the item's error code
    small = allowed.s.model_copy(update={"fetch_max_bytes": 100})
    with pytest.raises(YanaError) as e:
        ingest.run_ingest(FakeJob("u2"), items=items, r=allowed.r, chroma=allowed.chroma, s=small)
    assert e.value.code == "FETCH_TOO_LARGE"

    private = allowed.s.model_copy(update={"fetch_allow": []})
    res = ingest.run_ingest(
        FakeJob("u3"),
        items=items + [_item(1, {"kind": "url", "url": f"{image_server}/label.jpg"}, METAS[7])],
        r=allowed.r,
        chroma=allowed.chroma,
        s=private,
    )
    assert [o["error"]["code"] for o in res["items"]] == ["URL_NOT_ALLOWED", "URL_NOT_ALLOWED"]


def test_vectors_of_another_model_are_refused(env):
    col, _ = vector_index.active_collection(env.chroma, env.r)
    chunk = {"id": "x#0", "text": "x", "metadata": {"id": "x"}, "embedding": np.ones(32, dtype=np.float32)}
    with pytest.raises(YanaError) as e:
        vector_index.upsert_chunks(col, [chunk])
    assert e.value.code == "MODEL_MISMATCH"
    with pytest.raises(YanaError):
        vector_index.upsert_chunks(col, [{**chunk, "embedding": np.ones(384, dtype=np.float32)}], model="other/model")


def test_reembed_builds_resumes_and_swaps(env, tmp_path):
    tiny = build_tiny_st_model(tmp_path / "tiny")
    items = [_item(i, _stage(env, "job-re", i, _label_bytes(i)), METAS[i]) for i in range(9)]
    ingest.run_ingest(FakeJob("job-re"), items=items, r=env.r, chroma=env.chroma, s=env.s)
    old, old_model = vector_index.active_collection(env.chroma, env.r)
    n = old.count()

    job = FakeJob("re-1", crash_after_saves=2)  # meta(source/target) + one page, then killed
    with pytest.raises(SystemExit):
        reembed.run_reembed(job, model=tiny, r=env.r, chroma=env.chroma, s=env.s)
    assert vector_index.active_name(env.r) == old.name, "search still reads the old collection"
    assert env.r.get(vector_index.BUILDING_KEY) == job.meta["target"]
    # an image ingested while the build runs lands in both collections
    extra = [_item(0, _stage(env, "job-mid", 0, _label_bytes(10)), METAS[10])]
    ingest.run_ingest(FakeJob("job-mid"), items=extra, r=env.r, chroma=env.chroma, s=env.s)

    job.crash_after_saves = None
    res = reembed.run_reembed(job, model=tiny, r=env.r, chroma=env.chroma, s=env.s)
    new, new_model = vector_index.active_collection(env.chroma, env.r)
    assert new.name == res["target"] != old.name and new_model == tiny
    assert vector_index.collection_model(new) == (tiny, 32)
    assert new.count() == old.count() == n + 1
    assert sorted(new.get(include=[])["ids"]) == sorted(old.get(include=[])["ids"])
    assert env.r.get(vector_index.BUILDING_KEY) is None
    q = get_embedder(tiny).embed_queries(["酒"])
    assert len(new.query(query_embeddings=q, n_results=3)["ids"][0]) == 3
    assert {c["name"] for c in vector_index.list_collections(env.chroma, env.r)} == {old.name, new.name}
    with pytest.raises(YanaError):
        vector_index.drop_collection(env.chroma, env.r, new.name)  # the active one
    vector_index.drop_collection(env.chroma, env.r, old.name)
    assert not env.r.keys(f"yana:lex:{old.name}:*")
