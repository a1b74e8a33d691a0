"""The printed-lines check (pipelines.neardup.printed) and its place in the identity decision: two
photographs of one label print their field lines alike; two labels of one product line (one
design, another number) do not, on the line of the number; a merge on consistent text only (a
field read off one photograph) needs that confirmed. Real photographs (tools.photolabels' tune
split) read by the real reader (PP-OCR)."""

from __future__ import annotations

import random

import pytest
from PIL import Image

from pipelines.ingest import pictures
from pipelines.neardup import decision, printed
from pipelines.read.fields import extract_fields
from pipelines.read.ocr import read_image
from tests.pipelines.ingest_support import store_original
from yana.blobs import LocalBlobStore


def _reading(image: Image.Image) -> dict:
    got = read_image(image, engine="ppocr", timeout_s=120)
    out = got.to_dict()
    out.update(extract_fields(got).to_dict())
    return out


def _said(reading: dict) -> dict:
    return {k: f["value"] for k, f in reading["fields"].items() if k in decision.READ_KEYS and f.get("value")}


@pytest.fixture(scope="module")
def photos() -> dict:
    """{name: (image, reading)}: one label photographed twice (the second cropped), and two labels
    of one product line that differ in 精米歩合 (seeds where the tune split's margins are wide)."""
    from tools.photolabels import design_family, make_spec, photograph, render

    rng = random.Random(3)
    label = render(make_spec(rng, split="tune", side="back", kind="sake")).image
    first, _ = photograph(label, random.Random(rng.getrandbits(64)), crop=0)
    second, _ = photograph(label, random.Random(rng.getrandbits(64)), crop=1.0)
    rng = random.Random(1)
    line_a, line_b = design_family(rng, 2, split="tune", vary="number")
    assert line_a.seimai != line_b.seimai and line_a.alcohol == line_b.alcohol
    one, _ = photograph(render(line_a).image, random.Random(rng.getrandbits(64)))
    other, _ = photograph(render(line_b).image, random.Random(rng.getrandbits(64)))
    out = {"first": first, "second": second, "line_a": one, "line_b": other}
    return {name: (img, _reading(img)) for name, img in out.items()}


def _compare(photos: dict, a: str, b: str) -> printed.Verdict:
    (ia, ra), (ib, rb) = photos[a], photos[b]
    return printed.compare(printed.grey(ia), printed.field_lines(ra), printed.grey(ib), printed.field_lines(rb))


def test_field_lines_are_where_the_fields_were_read(photos):
    _img, reading = photos["first"]
    lines = printed.field_lines(reading)
    assert set(lines) <= set(printed.LINE_FIELDS) and "alcohol" in lines
    x0, y0, x1, y1, _vertical = lines["alcohol"]
    assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
    assert printed.field_lines(None) == {} and printed.field_lines({"size": [0, 0]}) == {}


def test_two_photographs_of_one_label_print_the_same_lines(photos):
    found = _compare(photos, "second", "first")
    assert found.differs is False, found.summary()
    assert len(found.lines) >= 4


def test_a_product_line_differs_where_its_number_is_printed(photos):
    found = _compare(photos, "line_b", "line_a")
    assert found.differs is True, found.summary()
    # the differing digit is in 精米歩合's line or next to it (a window's margin reaches the
    # neighbouring line of this layout: アルコール分)
    assert found.field_differs("seimai") or found.field_differs("alcohol"), found.lines
    assert found.field_differs("grade") is False  # the same grade, printed alike


def test_nothing_to_compare_is_no_verdict(photos):
    img, _reading = photos["first"]
    assert printed.compare(printed.grey(img), {}, printed.grey(img), {}).differs is None


@pytest.mark.parametrize("field", ["alcohol", "grade"])
def test_a_line_cut_by_the_crop_is_compared_where_both_photographs_show_it(photos, field):
    """A re-photograph cropped through a field line: the windows past the crop's edge are not
    compared (before, a window partly off it was compared with the warp's black and read as a
    differing glyph, ratio over MAX_RATIO: "printed lines differ" for one label)."""
    img, reading = photos["first"]
    box = printed.field_lines(reading)[field]
    x0, y0, x1, y1, vertical = box
    w, h = img.size
    # cut 5 % of the line's length off its far end: the line is still compared (MIN_INSIDE)
    if vertical:
        cropped = img.crop((0, 0, w, int(h * (y1 - 0.05 * (y1 - y0)))))
    else:
        cropped = img.crop((0, 0, int(w * (x1 - 0.05 * (x1 - x0))), h))
    found = printed.compare(printed.grey(cropped), {}, printed.grey(img), {field: box})
    assert found.field_differs(field) is False, found.lines
    assert found.differs is False, found.summary()


def _store(blobs: LocalBlobStore, image: Image.Image) -> str:
    return store_original(blobs, image, quality=92)


def _decide(
    image_q, reading_q, image_s, reading_s, blobs, *, drop: str, greys: bool = True, read_field=None, misread=None
) -> dict:
    """The decision on the query against a stored label whose read missed `drop` (and the query's
    read with `misread`'s values instead of its own)."""
    said_s = {k: v for k, v in _said(reading_s).items() if k != drop}
    lines_s = {k: v for k, v in printed.field_lines(reading_s).items() if k != drop}
    entry, _digest, _v = decision.verifier_for(
        image_s, None, 10, said=said_s, blob_key=_store(blobs, image_s), lines=lines_s
    )
    store = pictures.StoredPictures(None, blobs)
    _e, _d, verify = decision.verifier_for(
        image_q,
        None,
        10,
        said={**_said(reading_q), **(misread or {})},
        pictures=store,
        lines=printed.field_lines(reading_q),
        greys=store.greys if greys else None,
        read_field=read_field,
    )
    verify([("label_x", 30, entry)])
    return verify.judged[0]


def _judge(photos, blobs, query: str, stored: str, *, drop: str, greys: bool = True) -> dict:
    """The decision on `query` against `stored` whose read missed `drop` (read off the query only:
    the text is consistent, not agreeing)."""
    (iq, rq), (ist, rs) = photos[query], photos[stored]
    assert drop in _said(rq) and decision.text_consistent(_said(rq), {k: v for k, v in _said(rs).items() if k != drop})
    return _decide(iq, rq, ist, rs, blobs, drop=drop, greys=greys)


def test_consistent_text_merges_when_the_missing_fields_line_is_printed_alike(photos, tmp_path):
    verdict = _judge(photos, LocalBlobStore(tmp_path), "second", "first", drop="alcohol")
    assert verdict["same"] is True, verdict
    assert "picture agrees" in verdict["reason"] and verdict["printed"]["lines"] >= 4


def test_consistent_text_without_the_printed_check_does_not_merge(photos, tmp_path):
    verdict = _judge(photos, LocalBlobStore(tmp_path), "second", "first", drop="alcohol", greys=False)
    assert verdict["same"] is False and "printed lines not compared" in verdict["reason"], verdict


def test_a_number_read_off_one_side_only_is_looked_up_on_the_other(photos, tmp_path):
    # one design, another 精米歩合 read off the query only: the pixels pass (one design), the
    # picture is the same; without the printed-lines check this was a false merge
    before = _judge(photos, LocalBlobStore(tmp_path / "a"), "line_b", "line_a", drop="seimai", greys=False)
    assert before["same"] is True, before
    verdict = _judge(photos, LocalBlobStore(tmp_path / "b"), "line_b", "line_a", drop="seimai")
    assert verdict["same"] is False and "printed lines differ" in verdict["reason"], verdict


def _judge_brands(photos, blobs, query: str, stored: str, brand_q: str | None = None) -> dict:
    """The decision on `query` against `stored`, the query's brand taken as read `brand_q` (None:
    as read)."""
    (iq, rq), (ist, rs) = photos[query], photos[stored]
    said_q = {**_said(rq), **({"brand_name": brand_q} if brand_q else {})}
    entry, _digest, _v = decision.verifier_for(
        ist, None, 10, said=_said(rs), blob_key=_store(blobs, ist), lines=printed.field_lines(rs)
    )
    store = pictures.StoredPictures(None, blobs)
    _e, _d, verify = decision.verifier_for(
        iq, None, 10, said=said_q, pictures=store, lines=printed.field_lines(rq), greys=store.greys
    )
    theirs = decision.stored_said(decision.parse_entry(entry)[1])
    assert decision.maybe_differs(verify.said, theirs) == {"brand_name"}, (verify.said, theirs)
    verify([("label_x", 30, entry)])
    return verify.judged[0]


def test_a_brand_read_alike_merges_when_its_line_is_printed_alike(photos, tmp_path):
    # the second photograph's brand read with a stroke taken for another kanji inside it
    brand = _said(photos["first"][1])["brand_name"]
    verdict = _judge_brands(photos, LocalBlobStore(tmp_path), "second", "first", brand[0] + "八" + brand[1:])
    assert verdict["same"] is True, verdict
    assert "brand_name" in printed.field_lines(photos["second"][1])


@pytest.fixture(scope="module")
def brand_line() -> dict:
    """Two labels of one design whose brands begin and end alike (雪月華 / 雪風華): read alike,
    they are two labels, and only the brand's printed line tells them apart."""
    from dataclasses import replace

    from tools.photolabels import make_spec, photograph, render

    rng = random.Random(5)
    base = make_spec(rng, split="tune", side="front", kind="sake")
    out = {}
    for name, brand in (("a", "雪月華"), ("b", "雪風華")):
        img, _ = photograph(render(replace(base, brand=brand)).image, random.Random(rng.getrandbits(64)))
        out[name] = (img, _reading(img))
    return out


def test_a_product_line_whose_brands_read_alike_is_kept_apart_by_the_brand_line(brand_line, tmp_path):
    assert {_said(r)["brand_name"] for _i, r in brand_line.values()} == {"雪月華", "雪風華"}
    verdict = _judge_brands(brand_line, LocalBlobStore(tmp_path), "b", "a")
    assert verdict["same"] is False, verdict
    # the picture already sees the brush lettering differ here; the brand's own line is the guard
    # where it does not (a smaller brand, a blurred photograph)
    found = _compare(brand_line, "b", "a")
    assert found.field_differs("brand_name") is True, found.lines
    # and it never counts toward the print's verdict: the field lines in print are the same
    assert found.differs is False, found.summary()
    assert {ln.side for ln in found.lines if ln.field == "brand_name"} == {"q", "c"}, found.lines


# Reading across: a printed field read off one photograph only is read on the other, where its line
# maps to (printed.compare(across=...), pipelines.ingest.readings.field_reader); another value there vetoes.


def _read_field():
    from pipelines.ingest.readings import field_reader
    from yana.settings import get_settings

    return field_reader(get_settings().model_copy(update={"ocr_mode": "auto", "ocr_engine": "ppocr"}))


@pytest.fixture(scope="module")
def volume_line() -> dict:
    """Two labels of one design, 720ml and 1800ml (tune family seed 12, where the pixels and the
    picture merge them once the 1800ml label's volume is not read: strict score under 1.0)."""
    from tools.photolabels import design_family, photograph, render

    rng = random.Random(12)
    small, big = design_family(rng, 2, split="tune", vary="number")
    assert (small.volume, big.volume) == ("1800ml", "720ml") or (big.volume, small.volume) == ("1800ml", "720ml")
    out = {}
    for spec in (small, big):
        img, _ = photograph(render(spec).image, random.Random(rng.getrandbits(64)))
        out[spec.volume] = (img, _reading(img))
    return out


def test_a_number_read_off_one_photograph_is_read_across_on_the_other(volume_line, tmp_path):
    (i_q, r_q), (i_s, r_s) = volume_line["720ml"], volume_line["1800ml"]
    assert _said(r_q).get("volume") == "720ml" and "volume" in printed.field_lines(r_q)
    # what the decision did before: the 1800ml label's volume unread, one design, one picture
    before = _decide(i_q, r_q, i_s, r_s, LocalBlobStore(tmp_path / "a"), drop="volume", read_field=None)
    assert before["same"] is True, before
    verdict = _decide(i_q, r_q, i_s, r_s, LocalBlobStore(tmp_path / "b"), drop="volume", read_field=_read_field())
    assert verdict["same"] is False and "volume read across differs" in verdict["reason"], verdict
    across = verdict["printed"]["across"]["volume@q"]
    assert across.split("/").count("1800ml") >= decision.ACROSS_READS, verdict["printed"]


def test_a_number_read_with_a_digit_lost_is_read_across_where_it_was_lost(volume_line, tmp_path):
    """1800ml read off one label, 180ml (the 1800ml with a digit lost, to the decision) off the other:
    no veto, only "maybe"; the 1800ml line is read across on the photograph that read 180ml, and
    that is the 720ml label: kept apart by what it prints there."""
    (i_q, r_q), (i_s, r_s) = volume_line["720ml"], volume_line["1800ml"]
    said_s = _said(r_s)
    assert said_s.get("volume") == "1800ml" and "volume" in printed.field_lines(r_s)
    assert decision.maybe_differs({"volume": "180ml"}, said_s) == {"volume"}
    verdict = _decide(
        i_q, r_q, i_s, r_s, LocalBlobStore(tmp_path), drop="", read_field=_read_field(), misread={"volume": "180ml"}
    )
    assert verdict["same"] is False and "volume read across differs" in verdict["reason"], verdict
    assert verdict["printed"]["across"]["volume@c"].split("/").count("720ml") >= decision.ACROSS_READS, verdict


def test_a_rephotograph_reads_its_own_number_across(photos, tmp_path):
    (i_q, r_q), (i_s, r_s) = photos["second"], photos["first"]
    field = next(k for k in ("volume", "alcohol", "seimai") if k in _said(r_q) and k in printed.field_lines(r_q))
    verdict = _decide(i_q, r_q, i_s, r_s, LocalBlobStore(tmp_path), drop=field, read_field=_read_field())
    assert verdict["same"] is True, verdict
    read = verdict["printed"]["across"][f"{field}@q"].split("/")
    assert decision.read_value(_said(r_q)[field]) in [decision.read_value(v) for v in read], (field, read)


def test_a_digit_lost_across_is_no_other_value():
    assert decision._read_across_differs("720ml", "1800ml", "volume")
    assert decision._read_across_differs("16度", "18度", "alcohol")
    # a digit dropped by the crop (45% read 4%, 1800ml read 180ml) is a misread, not another label
    assert not decision._read_across_differs("45%", "4%", "seimai")
    assert not decision._read_across_differs("1800ml", "180ml", "volume")
    assert not decision._read_across_differs("17度", "7度", "alcohol")
    # digits the recogniser offered (MAYBE_SEP) are not a difference either
    assert not decision._read_across_differs("56%|55%", "55%", "seimai")
    # characters lost off a grade (特別純米 read 純米) are no other grade either
    assert not decision._read_across_differs("特別純米", "純米", "grade")
    assert decision._read_across_differs("純米吟醸", "純米大吟醸", "grade")


def test_the_print_differs_only_where_a_line_differs_both_ways():
    """A line both photographs read is compared each way; in the print's verdict a window off one
    way only (the homography a pixel off at a short line's end) is no differing glyph, a glyph
    printed otherwise shows both ways. A field the text left uncertain is judged either way."""
    noisy = [printed.Line("volume", "q", 0.034, 0.178), printed.Line("volume", "c", 0.022, 0.026)]
    found = printed.Verdict([*noisy, printed.Line("grade", "q", 0.03, 0.04)], 100)
    assert noisy[0].differs and not noisy[1].differs
    assert found.differs is False and found.ratio < printed.MAX_RATIO, found.summary()
    assert found.field_differs("volume") is True, "uncertain: either way"
    glyph = [printed.Line("volume", "q", 0.034, 0.178), printed.Line("volume", "c", 0.03, 0.2)]
    assert printed.Verdict(glyph, 100).differs is True
    one_way = printed.Verdict([printed.Line("volume", "q", 0.034, 0.178)], 100)
    assert one_way.differs is True, "read off one photograph only: its one way"
