"""The OCR engines on generated labels (real models: PP-OCRv5 ONNX from the wheel, Debian's
tesseract jpn/jpn_vert). A handful of images: vertical brush lettering, horizontal small print,
a phone-like photograph, and the failure paths (timeout, broken image, unknown engine)."""

from __future__ import annotations

import io
import random
import shutil

import numpy as np
import pytest
from PIL import Image

from pipelines.read import ocr
from pipelines.read.fields import extract_fields
from tools.photolabels import Design, make_spec, photograph, render

BRUSH = "truetype/aoyagi-kouzan-t/AoyagiKouzanT.ttf"
PRINT = "opentype/ipaexfont-mincho/ipaexm.ttf"


def _label(side: str, layout: str, seed: int = 3, **over):
    design = Design(layout=layout, brand_font=BRUSH, text_font=PRINT, palette=0, frame=1, ornament=0)
    spec = make_spec(random.Random(seed), split="tune", side=side, kind="sake", design=design, **over)
    return spec, render(spec)


@pytest.fixture(scope="module")
def vertical_front():
    return _label("front", "vertical", brand="八海山", brewery="八海醸造", grade="純米吟醸", product_name="")


def test_ppocr_reads_vertical_brush_brand_in_column_order(vertical_front):
    spec, r = vertical_front
    reading = ocr.read_image(r.image, engine="ppocr", timeout_s=120)
    brand = [ln for ln in reading.lines if ln.text == "八海山"]
    assert brand and brand[0].vertical, reading.text
    verticals = [ln for ln in reading.lines if ln.vertical]
    xs = [ln.center[0] for ln in verticals]
    assert xs == sorted(xs, reverse=True), "tategaki columns are read right to left"
    assert [ln.order for ln in reading.lines] == list(range(len(reading.lines)))
    v = extract_fields(reading).values()
    assert v["brand_name"] == "八海山"
    assert v["grade"] == "純米吟醸"
    assert v["prefecture"] == spec.prefecture


def test_ppocr_reads_small_print_of_a_photographed_back_label():
    spec, r = _label("back", "horizontal", seed=5)
    photo, _ = photograph(r.image, random.Random(11), scale=(0.8, 0.8), crop=None, quality=(70, 70))
    reading = ocr.read_image(photo, engine="ppocr", timeout_s=120)
    assert all(len(ln.box) == 4 and 0 < ln.confidence <= 1 for ln in reading.lines)
    v = extract_fields(reading).values()
    truth = spec.fields()
    for f in ("brand_name", "brewery", "prefecture", "grade", "seimai", "alcohol", "volume"):
        assert v.get(f) == truth[f], (f, reading.text)


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="apt-get install tesseract-ocr-jpn")
def test_tesseract_reads_horizontal_and_vertical_blocks():
    spec, r = _label("back", "horizontal", seed=5)
    reading = ocr.read_image(r.image, engine="tesseract", timeout_s=120)
    v = extract_fields(reading).values()
    assert v.get("volume") == spec.volume, reading.text
    assert v.get("prefecture") == spec.prefecture, reading.text
    spec, r = _label("back", "vertical", seed=6)
    reading = ocr.read_image(r.image, engine="tesseract", timeout_s=120)
    assert any(ln.vertical for ln in reading.lines), reading.text
    assert extract_fields(reading).values().get("volume") == spec.volume, reading.text


@pytest.mark.parametrize("engine", ["ppocr", "tesseract"])
def test_a_read_past_its_deadline_raises_ocr_timeout(vertical_front, engine):
    if engine == "tesseract" and shutil.which("tesseract") is None:
        pytest.skip("tesseract not installed")
    with pytest.raises(ocr.OcrTimeout):
        ocr.read_image(vertical_front[1].image, engine=engine, timeout_s=1e-6)


def test_a_broken_image_raises_ocr_error():
    buf = io.BytesIO()
    Image.effect_noise((400, 400), 64).convert("RGB").save(buf, "JPEG")
    data = buf.getvalue()
    img = Image.open(io.BytesIO(data[: len(data) // 2]))  # the header opens, the pixels are cut off
    with pytest.raises(ocr.OcrError) as err:
        ocr.read_image(img, engine="ppocr", timeout_s=30)
    assert err.value.code == "OCR_FAILED"


def test_unknown_engine_is_refused():
    with pytest.raises(ocr.OcrError):
        ocr.get_reader("nonesuch")


def test_blank_image_reads_nothing():
    reading = ocr.read_image(Image.new("RGB", (320, 240), (200, 30, 30)), engine="ppocr", timeout_s=30)
    assert reading.lines == () and reading.text == ""


def test_a_column_laid_side_by_side_keeps_each_character_whole():
    # three dark marks of unequal height in a column, the gaps not at the even thirds: each cell
    # of the row holds one whole mark (the cuts move to the rows without ink)
    column = np.full((300, 60, 3), 255, np.uint8)
    marks = [(5, 110), (125, 180), (205, 295)]
    for a, b in marks:
        column[a:b, 10:50] = 0
    row = ocr._side_by_side(column, 3)
    dark_cols = (row.min(axis=(0, 2)) < 128).astype(int)
    runs = int(dark_cols[0]) + int(((dark_cols[1:] == 1) & (dark_cols[:-1] == 0)).sum())
    assert runs == 3, "three marks, side by side"
    ink = (row < 128).any(axis=2).sum()
    assert ink == sum((b - a) * 40 for a, b in marks), "no mark was cut through"


GYOSHO = "truetype/kouzan-mouhitsu/kouzan-mouhitsu-gyosho.ttf"  # a brush face in neither split


@pytest.mark.parametrize(
    ("layout", "brand", "photo_seed"),
    [
        # the tight crop alone read these 春心光 and 春門光 (the cursive の taken for a kanji) ...
        ("vertical", "春の光", 0),
        ("vertical", "春の光", 2),
        # ... and this one right, where a margin's read alone (more confident) is 月八光: what the
        # other views saw stays among the kept read's alternatives
        ("horizontal", "月の光", 0),
    ],
)
def test_display_lettering_is_read_again_from_other_views(layout, brand, photo_seed):
    design = Design(layout=layout, brand_font=GYOSHO, text_font=PRINT, palette=0, frame=1, ornament=0)
    spec = make_spec(
        random.Random(3), split="tune", side="front", kind="sake", design=design, brand=brand, product_name=""
    )
    photo, _ = photograph(render(spec).image, random.Random(photo_seed), scale=(0.6, 0.6), crop=None, quality=(80, 80))
    reading = ocr.read_image(photo, engine="ppocr", timeout_s=120)
    assert extract_fields(reading).values()["brand_name"] == brand, reading.text


def test_a_name_particle_one_view_saw_outweighs_a_more_confident_read_without_it():
    # the most confident view reads this column 風華, the cursive の skipped (the read before
    # this rule); another view saw it
    design = Design(layout="vertical", brand_font=GYOSHO, text_font=PRINT, palette=3, frame=0, ornament=2)
    spec = make_spec(
        random.Random(3), split="tune", side="front", kind="sake", design=design, brand="風の華", product_name=""
    )
    photo, _ = photograph(render(spec).image, random.Random(7), scale=(0.6, 0.6), crop=None, quality=(80, 80))
    reading = ocr.read_image(photo, engine="ppocr", timeout_s=120)
    assert extract_fields(reading).values()["brand_name"] == "風の華", reading.text


@pytest.mark.parametrize(
    ("reads", "kept"),
    [
        ([("夢里", 0.98, ("", "")), ("夢の里", 0.90, ("", "", ""))], "夢の里"),
        # a doubted kanji offered as the particle counts (fields restores it)
        ([("夢華", 1.0, ("", "")), ("夢門華", 0.90, ("", "八の乃", ""))], "夢門華"),
        ([("夢華", 1.0, ("", "")), ("夢門華", 0.90, ("", "八円", ""))], "夢華"),  # no particle offered
        ([("夢里", 0.98, ("", "")), ("夢山里", 0.95, ("", "", ""))], "夢里"),  # not a particle
        ([("月乃里", 0.99, ("", "", "")), ("月乃乃里", 0.80, ())], "月乃里"),  # next to a particle
        ([("りんご", 0.99, ("", "", "")), ("りのんご", 0.90, ())], "りんご"),  # not between kanji
        ([("春光", 0.7, ("", "")), ("春の光", 0.5, ()), ("春乃光", 0.6, ())], "春乃光"),  # the likelier
    ],
)
def test_the_kept_read_is_the_most_confident_unless_another_saw_a_particle_it_lacks(reads, kept):
    assert ocr._kept_read(reads)[0] == kept


def test_a_deadline_passed_while_reading_display_lettering_again_keeps_the_first_read(vertical_front, monkeypatch):
    reader = ocr.get_reader("ppocr")
    monkeypatch.setattr(reader, "display_views", False)
    first = reader.read(vertical_front[1].image)  # the read before the second look
    monkeypatch.setattr(reader, "display_views", True)
    calls = []
    real = reader._recognise

    def recognise(crops, deadline):
        calls.append(len(crops))
        if len(calls) > 1:  # the deadline passes after the first read, during the second look
            raise ocr.OcrTimeout("OCR timed out during recognition")
        return real(crops, deadline)

    monkeypatch.setattr(reader, "_recognise", recognise)
    again = reader.read(vertical_front[1].image)  # no OcrTimeout: the first read stands
    assert len(calls) == 2, "the display lettering was looked at again"
    assert [(ln.text, ln.confidence) for ln in again.lines] == [(ln.text, ln.confidence) for ln in first.lines]
    assert extract_fields(again).values()["brand_name"] == "八海山"
