"""The OCR stage of ingest with the real reader (PP-OCRv5 ONNX): images sent without fields become
searchable by what the label says, a read is cached by the image's sha1, a failed read is a warning
and never a lost label. Real Redis and Chroma (PersistentClient); two small generated labels."""

from __future__ import annotations

import io
import random

import orjson
import pytest

from pipelines.ingest import pipeline as ingest
from pipelines.ingest import readings
from pipelines.search import collections as vector_index
from tests.pipelines.ingest_support import FakeJob, build_tiny_st_model, make_env
from tools.photolabels import Design, make_spec, render

BRUSH = "truetype/aoyagi-kouzan-t/AoyagiKouzanT.ttf"
PRINT = "opentype/ipaexfont-mincho/ipaexm.ttf"


def _png(brand: str, seed: int) -> bytes:
    design = Design(layout="vertical", brand_font=BRUSH, text_font=PRINT, palette=0, frame=1, ornament=0)
    spec = make_spec(
        random.Random(seed), split="tune", side="front", kind="sake", design=design, brand=brand, product_name=""
    )
    buf = io.BytesIO()
    render(spec).image.save(buf, "PNG")
    return buf.getvalue()


def _stage(env, job_id: str, i: int, data: bytes) -> dict:
    p = env.data_dir / "incoming" / job_id / f"{i}.bin"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"kind": "stored", "path": f"incoming/{job_id}/{i}.bin"}


@pytest.fixture()
def env(redis_url, tmp_path):
    model = build_tiny_st_model(tmp_path / "models")
    return make_env(redis_url, tmp_path, ocr_mode="auto", ocr_timeout_s=120, embed_model=model)


def _chunks(env) -> dict[str, tuple[str, dict]]:
    """label id -> (text, metadata) of its first chunk."""
    col, _model = vector_index.active_collection(env.chroma, env.r)
    got = col.get(include=["metadatas", "documents"])
    return {m["id"]: (d, m) for d, m in zip(got["documents"], got["metadatas"], strict=True) if m["chunk_index"] == 0}


def test_images_only_ingest_is_searchable_by_the_printed_brand(env):
    job = FakeJob("job-read")
    item = {
        "index": 0,
        "name": "a.png",
        "source": _stage(env, job.job_id, 0, _png("八海山", 3)),
        "fields": {"category": "sake"},
    }
    res = ingest.run_ingest(job, items=[item], r=env.r, chroma=env.chroma, s=env.s)
    out = res["items"][0]
    assert res["indexed"] == 1 and not out["warnings"], out
    assert "八海山" in out["read_text"], "the job item outcome shows the read text"
    doc, meta = _chunks(env)[out["id"]]
    assert "八海山" in doc, "the read brand is in the text the label is searched and embedded by"
    assert doc.startswith("カテゴリ: 日本酒"), "uploader fields first"
    assert meta["brand_name"] == "八海山" and "八海山" in meta["ocr_text"]
    sources = orjson.loads(meta["field_sources"])
    assert sources["brand_name"]["source"] == "ocr" and sources["category"]["source"] == "uploader"
    # Content-addressed: the reading is cached under the image's sha1.
    assert readings.cached(env.r, out["hash_sha1"])["text"] == out["read_text"]


def test_uploader_fields_win_and_a_cached_reading_is_not_read_again(env, monkeypatch):
    job = FakeJob("job-read-2")
    data = _png("八海山", 3)
    fields = {"category": "sake", "brand_name": "別名"}
    item = {"index": 0, "name": "a.png", "source": _stage(env, job.job_id, 0, data), "fields": fields}
    res = ingest.run_ingest(job, items=[item], r=env.r, chroma=env.chroma, s=env.s)
    out = res["items"][0]
    doc, meta = _chunks(env)[out["id"]]
    assert meta["brand_name"] == "別名", "the uploader's brand wins over the read one"
    assert doc.index("銘柄: 別名") < doc.index("八海山"), "uploader fields first, then the read text"

    # A re-run of the same bytes uses the cached reading: the reader is not called again.
    import pipelines.read.ocr as ocr

    def boom(*a, **k):
        raise AssertionError("read twice")

    monkeypatch.setattr(ocr, "read_image", boom)
    got, warning = readings.read_label(env.r, out["hash_sha1"], None, env.s)
    assert warning is None and got["text"] == out["read_text"]


def test_a_failed_read_is_a_warning_not_a_lost_label(env):
    s = env.s.model_copy(update={"ocr_timeout_s": 1e-6})
    job = FakeJob("job-read-3")
    item = {
        "index": 0,
        "name": "b.png",
        "source": _stage(env, job.job_id, 0, _png("月桂冠", 9)),
        "fields": {"category": "sake"},
    }
    res = ingest.run_ingest(job, items=[item], r=env.r, chroma=env.chroma, s=s)
    out = res["items"][0]
    assert res["indexed"] == 1 and out["error"] is None, "the label is kept"
    assert [w["code"] for w in out["warnings"]] == ["OCR_TIMEOUT"] and out["read_text"] is None
    assert readings.cached(env.r, out["hash_sha1"]) is None, "a failure is not cached"
    assert out["id"] in _chunks(env)


def test_the_ocr_queue_reads_ahead_and_ingest_does_not_read_again(env, monkeypatch):
    from pipelines.ingest.readings import read_ahead
    from yana.clients import get_blobs

    job = FakeJob("job-read-4")
    items = [
        {
            "index": 0,
            "name": "c.png",
            "source": _stage(env, job.job_id, 0, _png("八海山", 3)),
            "fields": {"category": "sake"},
        }
    ]
    items.append({"index": 1, "name": "u", "source": {"kind": "url", "url": "http://127.0.0.1:9/x.png"}, "fields": {}})
    assert read_ahead(items, r=env.r, s=env.s, blobs=get_blobs(env.s)) == 1, "a URL is not fetched ahead"
    assert read_ahead(items, r=env.r, s=env.s, blobs=get_blobs(env.s)) == 0, "read once per image bytes"

    import pipelines.read.ocr as ocr

    def boom(*a, **k):
        raise AssertionError("read twice")

    monkeypatch.setattr(ocr, "read_image", boom)
    res = ingest.run_ingest(job, items=items[:1], r=env.r, chroma=env.chroma, s=env.s)
    out = res["items"][0]
    assert not out["warnings"] and "八海山" in out["read_text"]
