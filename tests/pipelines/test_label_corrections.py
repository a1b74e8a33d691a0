"""Corrections stick: a corrected field is re-indexed at once (text, metadata, lexical postings),
clears with "", keeps the uploader's free text, and outranks the uploader's and the read values
when the same image is ingested again (a redelivered job). Real Redis and Chroma."""

from __future__ import annotations

import orjson
import pytest

from pipelines.ingest import pipeline as ingest
from pipelines.ingest import records
from pipelines.labels.schema import chunk_id
from pipelines.search import collections as vector_index
from pipelines.search import lexical
from tests.pipelines.ingest_support import FakeJob, build_tiny_st_model, make_env
from tools.datagen import images
from yana.errors import YanaError

META = images.label_set(1, seed=77)[0]


@pytest.fixture()
def env(redis_url, tmp_path):
    model = build_tiny_st_model(tmp_path / "models")
    return make_env(redis_url, tmp_path, embed_model=model)


def _item(env, job_id: str) -> dict:
    p = env.data_dir / "incoming" / job_id / "0.bin"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(images.encode(images.render_label(META, seed=7700), "PNG"))
    fields = {
        "category": "sake",
        "brand_name": "誤読山",
        "product_name": "純米吟醸",
        "brewery": "試験酒造",
        "text": "冷やでも燗でも。",
    }
    return {
        "index": 0,
        "name": "a.png",
        "source": {"kind": "stored", "path": f"incoming/{job_id}/0.bin"},
        "fields": fields,
    }


def _chunk(env, label_id: str) -> tuple[str, dict]:
    col, _model = vector_index.active_collection(env.chroma, env.r)
    got = col.get(where={"doc_id": label_id}, include=["documents", "metadatas"])
    assert len(got["ids"]) == 1
    return got["documents"][0], got["metadatas"][0]


def test_a_correction_is_reindexed_at_once_and_keeps_the_free_text(env, monkeypatch):
    monkeypatch.setattr("pipelines.ingest.records.get_settings", lambda: env.s)
    job = FakeJob("job-fix")
    res = ingest.run_ingest(job, items=[_item(env, job.job_id)], r=env.r, chroma=env.chroma, s=env.s)
    label_id = res["items"][0]["id"]
    before = records.get_record(env.r, env.chroma, label_id)
    assert before["brand_name"] == "誤読山" and before["fields"]["brand_name"]["source"] == "uploader"
    assert before["read"] is None and before["corrections"] == {}

    after = records.correct(env.r, env.chroma, label_id, {"brand_name": "正宗山", "product_name": ""})
    assert after["brand_name"] == "正宗山" and after["fields"]["brand_name"]["source"] == "corrected"
    assert after["product_name"] == "" and "product_name" not in after["fields"], '"" clears a field'
    doc, meta = _chunk(env, label_id)
    assert "銘柄: 正宗山" in doc and "誤読山" not in doc and "純米吟醸" not in doc
    assert "冷やでも燗でも。" in doc, "the uploader's free text survives the rewrite"
    assert meta["brand_name"] == "正宗山" and meta["corrected_at"] > 0
    assert orjson.loads(meta["field_sources"])["brand_name"]["source"] == "corrected"
    assert records.get_record(env.r, env.chroma, label_id)["brand_name"] == "正宗山"

    # The same image ingested again (a redelivered job writes the record from the upload's fields):
    # the correction still wins.
    again = FakeJob("job-fix-again")
    ingest.run_ingest(again, items=[_item(env, again.job_id)], r=env.r, chroma=env.chroma, s=env.s)
    doc, meta = _chunk(env, label_id)
    assert meta["brand_name"] == "正宗山" and "誤読山" not in doc


def test_lexical_postings_follow_the_correction(env, monkeypatch):
    monkeypatch.setattr("pipelines.ingest.records.get_settings", lambda: env.s)
    job = FakeJob("job-fix-lex")
    res = ingest.run_ingest(job, items=[_item(env, job.job_id)], r=env.r, chroma=env.chroma, s=env.s)
    label_id = res["items"][0]["id"]
    records.correct(env.r, env.chroma, label_id, {"brand_name": "正宗山", "label_features": ["辛口", "生酛"]})
    _doc, meta = _chunk(env, label_id)
    col = vector_index.active_name(env.r)
    lex = lexical.chunk_meta(env.r, col, chunk_id(label_id, 0))
    assert lex is not None and lex["brand_name"] == "正宗山" and lex["label_features"] == "辛口、生酛"
    assert meta["label_features"] == "辛口、生酛"


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"nope": "x"},
        {"brand_name": 3},
        {"brand_name": "x" * 201},
        "brand_name",
        {"label_features": [f"特徴{i}" for i in range(40)]},
    ],
)
def test_bad_corrections_are_refused_before_anything_is_kept(env, changes):
    label_id = "label_00000000000000aa"
    with pytest.raises(YanaError) as err:
        records.correct(env.r, env.chroma, label_id, changes)
    assert err.value.code == "BAD_REQUEST"
    assert records.corrections(env.r, label_id) == {}


def test_an_unknown_label_is_not_found(env):
    assert records.get_record(env.r, env.chroma, "label_0000000000000000") is None
    with pytest.raises(YanaError) as err:
        records.correct(env.r, env.chroma, "label_0000000000000000", {"brand_name": "x"})
    assert err.value.code == "NOT_FOUND"
