"""The aligned picture check (pipelines.neardup.picture) and its place in the identity decision:
two photographs of one printed label are the same picture; editions (the same text printed in
another design: other palette, layout, typefaces) are not, and where the read text agrees the
picture decides (an edition is vetoed whatever the grey-only score says, a re-photograph whose
grey-only score fails is accepted). Pairs from tools.photolabels' tune split, small sizes."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from pipelines.ingest import pictures
from pipelines.neardup import decision, picture
from tests.pipelines.ingest_support import store_original
from yana.blobs import LocalBlobStore

READ = {"brand_name": "八海山", "grade": "純米吟醸", "alcohol": "15度"}


def _rephotos(seed: int) -> tuple[Image.Image, Image.Image]:
    from tools.photolabels import make_spec, photograph, render

    rng = random.Random(seed)
    img = render(make_spec(rng, split="tune", side="front", kind="sake")).image
    a, _ = photograph(img, random.Random(rng.getrandbits(64)), crop=0)
    b, _ = photograph(img, random.Random(rng.getrandbits(64)), crop=1.0)
    return a, b


def _edition(seed: int, *, same_palette: bool) -> tuple[Image.Image, Image.Image]:
    """One label and its edition: the same text in another design (same palette or another)."""
    from tools.photolabels import make_spec, photograph, random_design, render

    rng = random.Random(seed)
    base = make_spec(rng, split="tune", side="front", kind="sake")
    while True:
        design = random_design(rng, "tune")
        if design != base.design and (design.palette == base.design.palette) == same_palette:
            break
    other = replace(base, design=design)
    a, _ = photograph(render(base).image, random.Random(rng.getrandbits(64)), crop=0)
    b, _ = photograph(render(other).image, random.Random(rng.getrandbits(64)), crop=0)
    return a, b


def _parts(query: Image.Image, stored: Image.Image) -> picture.Parts:
    return picture.compare(picture.decode(picture.encode(query)), picture.decode(picture.encode(stored)))


def _store(blobs: LocalBlobStore, image: Image.Image) -> str:
    return store_original(blobs, image, quality=90)


def _verifier(query: Image.Image, blobs: LocalBlobStore, read: dict | None = None):
    _e, _d, verify = decision.verifier_for(
        query, None, 10, read=dict(read or READ), pictures=pictures.StoredPictures(None, blobs)
    )
    return verify


def _judge(query: Image.Image, stored: Image.Image, blobs: LocalBlobStore) -> dict:
    entry, _digest, _v = decision.verifier_for(stored, None, 10, read=dict(READ), blob_key=_store(blobs, stored))
    verify = _verifier(query, blobs)
    verify([("label_x", 30, entry)])
    return verify.judged[0]


@pytest.fixture
def blobs(tmp_path) -> LocalBlobStore:
    return LocalBlobStore(tmp_path)


def test_picture_is_small_and_deterministic():
    a, b = _rephotos(1)
    pic = picture.encode(a)
    assert max(Image.open(__import__("io").BytesIO(pic)).size) == picture.PICTURE_SIDE
    assert len(pic) < 24_000
    assert _parts(b, a) == _parts(b, a)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_two_photographs_of_one_label_are_one_picture(seed):
    a, b = _rephotos(seed)
    parts = _parts(b, a)
    assert picture.same_picture(parts), parts


@pytest.mark.parametrize("seed", [111, 133])
def test_a_label_photographed_on_another_table_is_one_picture(seed):
    """The grid compares the label only: its box, widened past the text, reached over the label's
    edge onto the table, light in one photograph and dark in the other (before: structure 0.506 and
    0.496, over the 0.45 limit, so these re-photographs were two pictures)."""
    a, b = _rephotos(seed)
    parts = _parts(b, a)
    assert picture.same_picture(parts), parts


@pytest.mark.parametrize("seed", [317, 401])
def test_a_label_under_a_glare_spot_is_one_picture(seed):
    """The colour is the cells' 60th percentile: a glare spot (0.48 and 0.54 of the way to white
    here) whitens part of the paper in one photograph, another palette changes all of it (at the
    80th percentile before: colour 4.24 and 5.01, over the 4.0 limit, so two pictures)."""
    a, b = _rephotos(seed)
    parts = _parts(b, a)
    assert picture.same_picture(parts), parts


@pytest.mark.parametrize(("seed", "before"), [(61, 0.554), (142, 0.619)])
def test_the_table_does_not_light_the_labels_edge(seed, before):
    """The slow light taken out of each photograph is estimated over the label's paper only: a blur
    over everything mixed the table (dark in one photograph, light in the other) into a band along
    the label's edge, and that band read as structure (before: `before`, over the 0.45 limit, so
    these re-photographs were two pictures)."""
    a, b = _rephotos(seed)
    parts = _parts(b, a)
    assert parts.structure < picture.MAX_STRUCTURE < before and picture.same_picture(parts), parts


def test_the_slow_light_is_the_papers_own():
    """On a flat paper beside a dark table, the light estimated over the paper stays the paper's up
    to its edge, where a plain blur falls towards the table's."""
    cv2 = picture.opencv()
    grey = np.full((60, 60), 20.0, np.float32)
    grey[:, 30:] = 90.0  # the paper, right of a dark table
    paper = np.zeros((60, 60), bool)
    paper[:, 30:] = True
    own = picture._slow_light(cv2, grey, paper)
    plain = picture._slow_light(cv2, grey, None)
    assert abs(float(own[30, 31]) - 90.0) < 0.5  # the paper's edge keeps the paper's level
    assert float(plain[30, 31]) < 75.0  # a plain blur is pulled towards the table


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_edition_in_another_palette_is_another_picture(seed):
    a, b = _edition(seed, same_palette=False)
    parts = _parts(b, a)
    assert not picture.same_picture(parts), parts


def test_an_edition_in_the_same_palette_is_another_picture():
    a, b = _edition(2, same_palette=True)
    parts = _parts(b, a)
    assert not picture.same_picture(parts), parts


@pytest.mark.parametrize(("frame", "ornament"), [(1, 0), (0, 2), (2, 1)])
def test_an_edition_that_differs_only_in_its_frame_or_ornament_is_another_picture(frame, ornament):
    """Same palette, layout and typefaces; a frame line, a band or a seal on one only. Outside the
    text's box and on flat paper, the structure test does not see them; the marks test does."""
    from tools.photolabels import make_spec, photograph, render

    rng = random.Random(5)
    base = make_spec(rng, split="tune", side="front", kind="sake")
    base = replace(base, design=replace(base.design, frame=0, ornament=0))
    other = replace(base, design=replace(base.design, frame=frame, ornament=ornament))
    a, _ = photograph(render(base).image, random.Random(rng.getrandbits(64)), crop=0)
    b, _ = photograph(render(other).image, random.Random(rng.getrandbits(64)), crop=0)
    parts = _parts(b, a)
    assert parts.marks > picture.MAX_MARKS and not picture.same_picture(parts), parts
    rephoto, _ = photograph(render(base).image, random.Random(rng.getrandbits(64)), crop=1.0)
    again = _parts(rephoto, a)  # the label itself, photographed again: no mark of its own
    assert again.marks <= picture.MAX_MARKS and picture.same_picture(again), again


def test_a_picture_that_cannot_be_aligned_is_not_the_same():
    a, _b = _rephotos(1)
    flat = Image.new("RGB", a.size, (200, 190, 180))
    assert not picture.same_picture(_parts(flat, a))


def test_agreeing_text_does_not_merge_an_edition_the_grey_score_passes(blobs):
    """The editions the text path merged: the read text agrees, the grey-only score passes; the
    picture vetoes."""
    for seed in range(30):
        a, b = _edition(seed, same_palette=False)
        verdict = _judge(b, a, blobs)
        if verdict["score"] <= decision.TEXT_AGREE_MAX_SCORE:
            assert verdict["same"] is False
            assert verdict["reason"] == "verifier (text agrees), picture differs"
            return
    pytest.fail("no edition in 30 whose grey-only score passed")


def test_agreeing_text_and_the_same_picture_merge_what_the_grey_score_keeps_apart(blobs):
    for seed in range(40):
        a, b = _rephotos(seed)
        verdict = _judge(b, a, blobs)
        if verdict["score"] > decision.TEXT_AGREE_MAX_SCORE:
            assert verdict["same"] is True, verdict
            assert verdict["reason"] == "verifier (text agrees), picture agrees"
            return
    pytest.fail("no re-photographed pair in 40 whose grey-only score failed and picture passed")


def test_a_sure_read_conflict_still_vetoes_the_same_picture(blobs):
    """A product line's labels share their picture: the text read surely decides."""
    a, b = _rephotos(1)
    entry, _digest, _v = decision.verifier_for(a, None, 10, read=dict(READ), blob_key=_store(blobs, a))
    verify = _verifier(b, blobs, {**READ, "grade": "本醸造"})
    assert verify([("label_x", 30, entry)]) is None
    assert verify.judged[0]["reason"] == "read grade differs"


def test_a_stored_label_whose_original_cannot_be_read_keeps_the_signature_verdict(blobs):
    """Entries indexed before they kept the blob key (and no label-image map to ask), or whose
    original is gone: no picture, the grey-only verdict stands, said in the reason."""
    a, b = _rephotos(1)
    key = _store(blobs, a)
    entry, _digest, _v = decision.verifier_for(a, None, 10, read=dict(READ), blob_key=key)
    sig, doc = decision.parse_entry(entry)
    assert doc["b"] == key
    old = decision.make_entry(sig, None, READ)  # stored before entries kept the blob key
    verify = _verifier(b, blobs)
    verify([("label_x", 30, old)])
    assert "picture" not in verify.judged[0]
    assert verify.judged[0]["reason"].endswith(", no picture")
    blobs.delete(key)
    verify = _verifier(b, blobs)
    verify([("label_x", 30, entry)])
    assert verify.judged[0]["reason"].endswith(", no picture")


def test_on_by_default_and_redis_keeps_no_picture(blobs):
    """NEARDUP_PICTURE_CHECK is on by default; the signature entry in Redis keeps the blob key of
    the original, not a picture (1-3 KB, read for every pHash candidate)."""
    from yana.settings import Settings

    assert Settings().neardup_picture_check is True
    a, b = _rephotos(1)
    entry, _digest, _v = decision.verifier_for(a, None, 10, read=dict(READ), blob_key=_store(blobs, a))
    assert len(entry) < 4_000, len(entry)
    assert "p" not in decision.parse_entry(entry)[1]
    _e, _d, verify = decision.verifier_for(b, None, 10, read=dict(READ))  # the check off: no pictures
    verify([("label_x", 30, entry)])
    assert "picture" not in verify.judged[0]


def test_pictures_are_read_only_where_the_text_agrees(blobs):
    """The blob store is not touched for candidates whose text does not agree (most of them)."""
    a, b = _rephotos(1)
    entry, _digest, _v = decision.verifier_for(a, None, 10, said={"brand_name": "月桂冠"}, blob_key=_store(blobs, a))
    asked: list = []
    real = pictures.StoredPictures(None, blobs)
    _e, _d, verify = decision.verifier_for(
        b, None, 10, read=dict(READ), pictures=lambda refs: asked.append(refs) or real(refs)
    )
    verify([("label_x", 30, entry)])
    assert asked == [], "another brand (read unsurely: no veto): no picture read"
    entry2, _digest, _v = decision.verifier_for(a, None, 10, read=dict(READ), blob_key="images/x.jpg")
    verify([("label_y", 30, entry2)])
    assert asked == [[("label_y", "images/x.jpg")]]


def test_consistent_text_and_the_same_picture_need_the_printed_lines_to_merge(blobs):
    """PICTURE_ACCEPTS_UNAGREED (on): one side's OCR missed the alcohol, the text does not agree
    (another set of values) but is consistent (the brand alike, nothing read off both differs);
    the same picture joins them only with the printed-lines check confirming (tested with real
    readings in test_neardup_printed.py): without it, no merge. A product line sharing the
    picture is kept apart by its differing grade or number read off both."""
    assert decision.PICTURE_ACCEPTS_UNAGREED
    partial = {k: v for k, v in READ.items() if k != "alcohol"}
    for seed in range(40):
        a, b = _rephotos(seed)
        entry, _digest, _v = decision.verifier_for(a, None, 10, read=dict(partial), blob_key=_store(blobs, a))
        verify = _verifier(b, blobs)
        verify([("label_x", 30, entry)])
        verdict = verify.judged[0]
        if verdict["reason"].startswith("verifier, picture agrees"):
            assert verdict["same"] is False and verdict["reason"].endswith("printed lines not compared"), verdict
            line = {**partial, "grade": "本醸造"}
            other, _digest, _v = decision.verifier_for(a, None, 10, said=line, blob_key=_store(blobs, a))
            verify = _verifier(b, blobs)
            verify([("label_y", 30, other)])
            assert verify.judged[0] == {**verify.judged[0], "same": False, "reason": "read grade differs"}
            return
    pytest.fail("no re-photographed pair in 40 that only the picture joined")


def test_the_picture_parts_an_edition_the_uploaders_fields_joined_on_consistent_text(blobs):
    """Full uploader fields agree (the same brand, product and brewery), the read text is only
    consistent (a value read off one photograph only; the stored one read nothing surely, so the
    fields-agree limit stays 4.0), the grey-only score passes it: an edition in another palette,
    aligned, is another picture and is kept apart; a re-photograph still merges."""
    fields = {"category": "sake", "brand_name": "八海山", "product_name": "八海山 純米吟醸"}
    stored_read = {k: v for k, v in READ.items() if k != "alcohol"}

    def judge(query: Image.Image, stored: Image.Image) -> dict:
        entry, _d, _v = decision.verifier_for(stored, fields, 10, said=stored_read, blob_key=_store(blobs, stored))
        _e, _d2, verify = decision.verifier_for(
            query, fields, 10, read=dict(READ), pictures=pictures.StoredPictures(None, blobs)
        )
        verify([("label_x", 30, entry)])
        return verify.judged[0]

    for seed in range(30):
        a, b = _edition(seed, same_palette=False)
        parts = _parts(b, a)
        aligned = parts.inliers >= picture.MIN_INLIERS and parts.box >= picture.MIN_AREA
        verdict = judge(b, a)
        if verdict["score"] <= decision.FIELDS_AGREE_MAX_SCORE and aligned:
            assert verdict["same"] is False and verdict["reason"] == "verifier (fields agree), picture differs"
            break
    else:
        pytest.fail("no aligned edition in 30 whose grey-only score passed the fields-agree limit")
    for seed in range(20):
        a, b = _rephotos(seed)
        verdict = judge(b, a)
        if verdict["score"] <= decision.FIELDS_AGREE_MAX_SCORE:
            assert verdict["same"] is True, verdict
            return
    pytest.fail("no re-photographed pair in 20 whose grey-only score passed the fields-agree limit")
