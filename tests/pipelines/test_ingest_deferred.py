"""Deferred reads (pipelines.ingest.deferred): with OCR_MODE=auto an image sent with full uploader
fields is read after its ingest, unless the near-duplicate decision needs its text (then it and
any candidate not read yet are read before it is judged). Real Redis, Chroma (PersistentClient)
and the real reader (PP-OCRv5) where an image is read."""

from __future__ import annotations

import io
import random
import time

import pytest

from pipelines.ingest import deferred, readings, records
from pipelines.ingest.keys import DEFERRED_FAILURES_KEY, DEFERRED_READS_KEY, INGEST_ACTIVE_KEY
from pipelines.neardup import decision, hashing
from pipelines.neardup.index import SIG_KEY, TEXT_KEY, shared_index
from tests.pipelines.ingest_support import build_tiny_st_model, ingest_bytes, make_env
from tools.photolabels import design_family, render

FULL = {"brand_name": "試験正宗", "product_name": "試験の純米", "brewery": "試験酒造"}


def _jpeg(img) -> bytes:
    buf = io.BytesIO()
    img.convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _grade_pair() -> tuple[bytes, bytes, str, str]:
    """Two labels of one product line (one design, another grade) whose pixels the fields-agree
    check passes: without what they say they are merged. Their images and grades."""
    for seed in range(40):
        a, b = design_family(random.Random(seed), 2, split="tune", vary="grade")
        if a.grade == b.grade:
            continue
        ia, ib = render(a).image.convert("RGB"), render(b).image.convert("RGB")
        entry, _d, _v = decision.verifier_for(ia, {"category": "sake", **FULL}, 10)
        _e, _d2, verify = decision.verifier_for(ib, {"category": "sake", **FULL}, 10)
        verify([("label_x", 0, entry)])
        if verify.judged[0]["same"]:
            return _jpeg(ia), _jpeg(ib), a.grade, b.grade
    pytest.fail("no product-line pair in 40 that the fields-agree check merges")


@pytest.fixture()
def env(redis_url, tmp_path):
    model = build_tiny_st_model(tmp_path / "models")
    return make_env(redis_url, tmp_path, ocr_mode="auto", ocr_timeout_s=120, embed_model=model)


def _reading(values: dict) -> dict:
    fields = {k: {"value": v, "source": "ocr", "confidence": 0.95} for k, v in values.items()}
    return {"engine": "test", "text": " ".join(values.values()), "lines": [], "fields": fields}


def test_full_fields_defer_the_read_and_the_background_pass_applies_it(env):
    first, _second, grade, _g = _grade_pair()
    sha1 = hashing.sha1_hex(first)
    out = ingest_bytes(env, [first], "job-deferred", FULL)["items"][0]
    assert out["read"] == "deferred" and out["read_text"] is None, out
    assert readings.cached(env.r, sha1) is None, "nothing was read during the ingest"
    label_id = out["id"]
    assert env.r.zscore(DEFERRED_READS_KEY, label_id) is not None
    rec = records.get_record(env.r, env.chroma, label_id)
    assert rec is not None and rec["read"] is None and rec["read_pending"], rec
    assert rec["brand_name"] == FULL["brand_name"]
    _sig, entry = decision.parse_entry(env.r.hget(SIG_KEY, sha1[:16]))
    assert entry.get("d") == 1, "the entry says it was not read"

    # Ingest was active a moment ago: the pass waits, unless the oldest read has waited too long.
    assert env.r.exists(INGEST_ACTIVE_KEY)
    assert deferred.claim_due(env.r, env.s) == []
    late = env.s.model_copy(update={"ocr_defer_max_wait_s": 0.001})
    assert deferred.claim_due(env.r, late) == [label_id]
    assert deferred.claim_due(env.r, late) == [], "claimed: not again within the lease"
    env.r.delete(INGEST_ACTIVE_KEY)  # idle: due again once the lease lapses (its worker died)
    assert deferred.claim_due(env.r, env.s, now=10**10) == [label_id]

    index = shared_index(env.r, env.s.phash_threshold, env.s.phash_candidate_radius)
    counts = deferred.read_deferred([label_id], r=env.r, chroma=env.chroma, blobs=_blobs(env), s=env.s, index=index)
    assert counts == {"read": 1, "gone": 0, "retry": 0, "failed": 0}
    assert env.r.zcard(DEFERRED_READS_KEY) == 0
    rec = records.get_record(env.r, env.chroma, label_id)
    assert rec["read"] and rec["read"]["text"] and not rec["read_pending"], rec
    assert rec["fields"]["brand_name"]["source"] == "uploader", "the uploader's brand still wins"
    assert rec["fields"]["grade"] == {
        "value": grade,
        "source": "ocr",
        "confidence": rec["fields"]["grade"]["confidence"],
    }
    _sig, entry = decision.parse_entry(env.r.hget(SIG_KEY, sha1[:16]))
    assert "d" not in entry and decision.stored_said(entry).get("grade") == grade, entry
    for digest in decision.text_digests({"brand_name": FULL["brand_name"]}):
        assert env.r.sismember(TEXT_KEY.format(digest=digest), sha1[:16]), "joined the read-the-same sets"
    again = deferred.read_deferred([label_id], r=env.r, chroma=env.chroma, blobs=_blobs(env), s=env.s, index=index)
    assert again["read"] == 1 and records.get_record(env.r, env.chroma, label_id)["read"] == rec["read"]


def test_a_failed_read_is_tried_again_later_then_marked_failed(env):
    """The real reader past a time limit it cannot meet (as on a busy machine): the read is due
    again OCR_DEFER_RETRY_S later, and after OCR_DEFER_ATTEMPTS the record says read_failed
    instead of a read pending for ever, keeping the uploader's fields."""
    first, _second, _g, _g2 = _grade_pair()
    label_id = ingest_bytes(env, [first], "job-fails", FULL)["items"][0]["id"]
    slow = env.s.model_copy(update={"ocr_timeout_s": 0.001, "ocr_defer_attempts": 2, "ocr_defer_retry_s": 300})
    index = shared_index(env.r, env.s.phash_threshold, env.s.phash_candidate_radius)

    def one_pass() -> dict:
        return deferred.read_deferred([label_id], r=env.r, chroma=env.chroma, blobs=_blobs(env), s=slow, index=index)

    before = time.time()
    assert one_pass() == {"read": 0, "gone": 0, "retry": 1, "failed": 0}
    assert env.r.zscore(DEFERRED_READS_KEY, label_id) >= before + 300, "due again after the retry delay"
    assert deferred.claim_due(env.r, env.s, now=before + 10) == [], "not before"
    assert records.get_record(env.r, env.chroma, label_id)["read_pending"]
    assert one_pass() == {"read": 0, "gone": 0, "retry": 0, "failed": 1}
    assert env.r.zcard(DEFERRED_READS_KEY) == 0 and not env.r.hexists(DEFERRED_FAILURES_KEY, label_id)
    rec = records.get_record(env.r, env.chroma, label_id)
    assert rec["read_failed"] and not rec["read_pending"] and rec["read"] is None, rec
    assert rec["brand_name"] == FULL["brand_name"] and rec["fields"]["brand_name"]["source"] == "uploader"


def _blobs(env):
    from yana.blobs import LocalBlobStore

    return LocalBlobStore(env.data_dir)


@pytest.mark.parametrize("guard", ["read the candidate", "read across", "neither"])
def test_a_candidate_whose_read_was_deferred_is_read_before_the_decision(env, monkeypatch, guard):
    """A product-line label sent with the same full fields as a deferred one is read (it has a
    candidate), and so is the deferred candidate: their grades differ, two labels. Without reading
    the candidate, the query's grade read across on the candidate's photograph keeps them apart
    too (pipelines.neardup.printed); with neither, the fields-agree check merges them, which is
    how this test can fail."""
    first, second, grade_a, grade_b = _grade_pair()
    a = ingest_bytes(env, [first], "job-a", FULL)["items"][0]
    assert a["read"] == "deferred"
    # What the reader would read off the first (put in the reading cache, as a read leaves it).
    readings.store(env.r, hashing.sha1_hex(first), _reading({"brand_name": FULL["brand_name"], "grade": grade_a}))
    if guard != "read the candidate":
        monkeypatch.setattr(deferred, "stored_readings", lambda *_a: None)
    if guard == "neither":
        monkeypatch.setattr(readings, "field_reader", lambda _s: None)
    b = ingest_bytes(env, [second], "job-b", FULL)["items"][0]
    assert "read" not in b and b["read_text"], "it had a candidate: read during its ingest"
    if guard == "read the candidate":
        assert not b["dedup"] and b["id"] != a["id"], b
        _sig, entry = decision.parse_entry(env.r.hget(SIG_KEY, hashing.sha1_hex(second)[:16]))
        assert "d" not in entry and decision.stored_said(entry).get("grade") == grade_b, entry
    elif guard == "read across":
        assert not b["dedup"] and b["id"] != a["id"], b
    else:
        assert b["dedup_of"] == a["id"], b


def test_always_and_partial_fields_read_during_the_ingest(env):
    first, second, _ga, _gb = _grade_pair()
    always = env.s.model_copy(update={"ocr_mode": "always"})
    out = ingest_bytes(env.__class__(env.r, env.chroma, always, env.data_dir, env.import_dir), [first], "job-1", FULL)
    assert "read" not in out["items"][0] and out["items"][0]["read_text"]
    partial = {"brand_name": "別の銘柄", "product_name": "別の商品"}  # no brewery
    out = ingest_bytes(env, [second], "job-2", partial)
    assert "read" not in out["items"][0] and out["items"][0]["read_text"]
    assert env.r.zcard(DEFERRED_READS_KEY) == 0


def test_candidates_the_uploaders_fields_rule_out_need_no_read(env):
    """A product line sent with full fields: one design, so each label is a pHash candidate of the
    others, but another product name already makes it another label, so nothing is read."""
    first, second, _ga, _gb = _grade_pair()
    a = ingest_bytes(env, [first], "job-a", FULL)["items"][0]
    b = ingest_bytes(env, [second], "job-b", {**FULL, "product_name": "試験の吟醸"})["items"][0]
    assert a["read"] == "deferred" and b["read"] == "deferred" and not b["dedup"], b
    assert readings.cached(env.r, hashing.sha1_hex(second)) is None
    assert env.r.zcard(DEFERRED_READS_KEY) == 2
