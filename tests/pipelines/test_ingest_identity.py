"""Label identity inside ingest: the aligned picture check (pipelines.ingest.pictures: a candidate's
picture is made from its original in the blob store, found by the blob key its signature entry
keeps or the label-image map for entries indexed before, only where the text agrees) and what a
label says when its uploader sent some fields (pipelines.ingest.readings.said_fields). Real Redis
and Chroma (PersistentClient); the readings are put in the reading cache as OCR would have left
them, so which text agrees is fixed (the reader itself is tested in tests/pipelines/read/)."""

from __future__ import annotations

import io
import random
from dataclasses import replace

import pytest
from PIL import Image

from pipelines.ingest import pictures, readings
from pipelines.labels import schema as labels
from pipelines.neardup import decision, hashing, picture
from pipelines.neardup.index import SIG_KEY
from tests.pipelines.ingest_support import build_tiny_st_model, ingest_bytes, make_env
from yana.blobs import LocalBlobStore

READ = {"brand_name": "八海山", "grade": "純米吟醸", "alcohol": "15度"}


def _jpeg(img) -> bytes:
    buf = io.BytesIO()
    img.convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _edition_the_grey_score_passes() -> tuple[bytes, bytes]:
    """A label and its edition (the same text in another palette) whose grey-only score passes
    where text agrees: only the picture tells them apart."""
    from tools.photolabels import make_spec, photograph, random_design, render

    for seed in range(40):
        rng = random.Random(seed)
        base = make_spec(rng, split="tune", side="front", kind="sake")
        design = random_design(rng, "tune")
        if design == base.design or design.palette == base.design.palette:
            continue
        a, _ = photograph(render(base).image, random.Random(rng.getrandbits(64)), crop=0)
        b, _ = photograph(render(replace(base, design=design)).image, random.Random(rng.getrandbits(64)), crop=0)
        entry, _d, _v = decision.verifier_for(a, None, 10, read=dict(READ))
        _e, _d2, verify = decision.verifier_for(b, None, 10, read=dict(READ))
        verify([("label_x", 30, entry)])
        if verify.judged[0]["same"]:
            return _jpeg(a), _jpeg(b)
    pytest.fail("no edition in 40 whose grey-only score passed")


def _rephotos_only_the_picture_joins() -> tuple[bytes, bytes]:
    """Two photographs of one label that the strict check keeps apart and the picture joins."""
    from tools.photolabels import make_spec, photograph, render

    for seed in range(40):
        rng = random.Random(seed)
        img = render(make_spec(rng, split="tune", side="front", kind="sake")).image
        first, second = (_jpeg(photograph(img, random.Random(rng.getrandbits(64)), crop=c)[0]) for c in (0, 1.0))
        a, b = (Image.open(io.BytesIO(x)).convert("RGB") for x in (first, second))  # as ingest decodes them
        entry, _d, _v = decision.verifier_for(a, None, 10)
        _e, _d2, strict = decision.verifier_for(b, None, 10)
        strict([("label_x", 30, entry)])
        parts = picture.compare(picture.of_image(b), picture.decode(picture.encode_original(first)))
        if not strict.judged[0]["same"] and picture.same_picture(parts):
            return first, second
    pytest.fail("no re-photographed pair in 40 that only the picture joins")


def _reading(values: dict) -> dict:
    fields = {k: {"value": v, "source": "ocr", "confidence": 0.95} for k, v in values.items()}
    return {"engine": "test", "text": " ".join(values.values()), "lines": [], "fields": fields}


def _ingest(env, images: list[bytes], job_id: str, fields: dict | None = None, read: dict | None = None) -> dict:
    for data in images:  # what OCR read off each
        readings.store(env.r, hashing.sha1_hex(data), _reading(READ if read is None else read))
    return ingest_bytes(env, images, job_id, fields)


@pytest.fixture()
def model(tmp_path_factory):
    return build_tiny_st_model(tmp_path_factory.mktemp("models"))


@pytest.mark.parametrize("check", [True, False])
def test_an_edition_whose_text_agrees_is_kept_apart_by_its_picture(redis_url, tmp_path, model, check):
    """With the check (the default) the edition is its own label; without it, the grey-only score
    merges it (which is what makes this test able to fail)."""
    env = make_env(redis_url, tmp_path, ocr_mode="auto", embed_model=model, neardup_picture_check=check)
    label, edition = _edition_the_grey_score_passes()
    first = _ingest(env, [label], "job-label")
    assert first["indexed"] == 1, first
    key = first["items"][0]["id"].removeprefix("label_")
    _sig, entry = decision.parse_entry(env.r.hget(SIG_KEY, key))
    assert entry["b"] == first["items"][0]["file_path"], "the entry keeps where the original is"
    second = _ingest(env, [edition], "job-edition")
    if check:
        assert second["indexed"] == 1 and not second["items"][0].get("dedup"), second["items"][0]
    else:
        assert second["items"][0].get("dedup_of") == first["items"][0]["id"], second["items"][0]


def test_stored_pictures_come_from_the_original_by_entry_key_or_label_image_map(redis_url, tmp_path):
    from tools.photolabels import make_spec, render

    env = make_env(redis_url, tmp_path)
    blobs = LocalBlobStore(env.data_dir)
    img = render(make_spec(random.Random(1), split="tune", side="front", kind="sake")).image
    blobs.put("images/aa/a.jpg", _jpeg(img))
    env.r.hset(labels.LABEL_IMAGES_KEY, "label_old", "images/aa/a.jpg")
    stored = pictures.StoredPictures(env.r, blobs)
    by_entry, by_map, gone = stored([("label_new", "images/aa/a.jpg"), ("label_old", ""), ("label_gone", "")])
    assert by_entry is not None and by_map is not None and gone is None
    assert max(by_entry.shape[:2]) == 320 and (by_entry == by_map).all()
    blobs.delete("images/aa/a.jpg")
    (again,) = stored([("label_new", "images/aa/a.jpg")])
    assert again is not None and (again == by_entry).all(), "served from the process's cache"
    (missing,) = pictures.StoredPictures(env.r, blobs)([("label_new", "images/aa/a.jpg")])
    assert missing is None, "an original that is gone: no picture, no error"


def test_what_a_label_says_counts_the_uploaders_fields():
    reading = _reading({"brand_name": "八海山", "grade": "純米吟醸"})
    given = {"category": "sake", "brand_name": "八海山 "}
    assert readings.said_fields(reading, given)["brand_name"] == "八海山 ", "the uploader's value, not the read one"
    assert readings.said_fields(reading, given)["grade"] == "純米吟醸"
    assert "brand_name" not in readings.identity_fields(reading, given), "a veto compares it as the uploader's field"
    assert readings.said_fields(None, given) == {}, "nothing read: nothing said (OCR off keeps the pixel path)"


@pytest.mark.parametrize("brand", ["八海山", None])
def test_brand_only_ingest_keeps_the_text_path(redis_url, tmp_path, model, brand):
    """Sent with its brand (and the OCR not reading it), a re-photograph that only the picture
    joins is still found: the uploader's brand is what the label says. Sent without, it is not
    (the text agrees on grade and alcohol only, no brand): which makes this test able to fail."""
    env = make_env(redis_url, tmp_path, ocr_mode="auto", embed_model=model)
    first_photo, second_photo = _rephotos_only_the_picture_joins()
    fields = {"brand_name": brand} if brand else {}
    read = {"grade": "純米吟醸", "alcohol": "15度"}
    first = _ingest(env, [first_photo], "job-first", fields, read)
    second = _ingest(env, [second_photo], "job-second", fields, read)
    if brand:
        assert second["items"][0].get("dedup_of") == first["items"][0]["id"], second["items"][0]
    else:
        assert second["indexed"] == 1, second["items"][0]
