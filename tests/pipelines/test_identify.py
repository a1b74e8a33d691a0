"""Search by photo (pipelines.ingest.identify) with the real reader and index: the same bytes, a
new photograph of an ingested label, and a label that is not in the book. Nothing is indexed by a
search. Real Redis and Chroma (PersistentClient), PP-OCRv5."""

from __future__ import annotations

import io
import random

import pytest

from pipelines.ingest import identify
from pipelines.neardup.index import SHA1_KEY
from tests.pipelines.ingest_support import build_tiny_st_model, ingest_bytes, make_env
from tools.photolabels import Design, make_spec, photograph, render

BRUSH = "truetype/aoyagi-kouzan-t/AoyagiKouzanT.ttf"
PRINT = "opentype/ipaexfont-mincho/ipaexm.ttf"


def _label(brand: str, seed: int):
    design = Design(layout="vertical", brand_font=BRUSH, text_font=PRINT, palette=0, frame=1, ornament=0)
    spec = make_spec(random.Random(seed), split="tune", side="front", kind="sake", design=design, brand=brand)
    return render(spec).image


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _jpeg(img) -> bytes:
    buf = io.BytesIO()
    img.convert("RGB").save(buf, "JPEG", quality=85)
    return buf.getvalue()


@pytest.fixture()
def env(redis_url, tmp_path):
    model = build_tiny_st_model(tmp_path / "models")
    return make_env(redis_url, tmp_path, ocr_mode="auto", ocr_timeout_s=120, embed_model=model)


def _ingest(env, images: list[bytes]) -> list[str]:
    res = ingest_bytes(env, images, "job-identify")
    assert res["indexed"] == len(images), res
    return [o["id"] for o in res["items"]]


def test_a_photo_finds_the_label_it_shows_and_says_when_it_is_not_in_the_book(env):
    a, b = _label("八海山", 3), _label("月桂冠", 9)
    ids = _ingest(env, [_png(a), _png(b)])
    indexed = env.r.hlen(SHA1_KEY)

    same = identify.identify(_png(a), r=env.r, s=env.s, k=3, chroma=env.chroma)
    assert same["match"]["kind"] == "same_image" and same["match"]["id"] == ids[0]
    assert same["hits"][0]["id"] == ids[0] and same["not_found"] == []

    photo, _params = photograph(b, random.Random(5), scale=(0.8, 1.2), max_rotation=3.0, crop=None)
    found = identify.identify(_jpeg(photo), r=env.r, s=env.s, k=3, chroma=env.chroma)
    assert found["match"] is not None and found["match"]["id"] == ids[1], found["match"]
    assert found["hits"][0]["id"] == ids[1] and "月桂冠" in (found["read_text"] or "")

    other = identify.identify(_png(_label("菊正宗", 21)), r=env.r, s=env.s, k=3, chroma=env.chroma)
    assert other["match"] is None and other["not_found"] == ["photo"]
    assert "菊正宗" in (other["read_text"] or "")
    assert env.r.hlen(SHA1_KEY) == indexed, "a search indexes nothing"
