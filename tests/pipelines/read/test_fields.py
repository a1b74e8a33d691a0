"""Fields from read label text: OCR confusions, layout (the brand is the largest lettering),
glossary words. No model: the readings are built by hand, as the OCR engines return them."""

from __future__ import annotations

from pipelines.read.fields import bare_value, extract_fields, fuzzy_key, normalize
from pipelines.read.ocr import Line, Reading


def _line(text, x0, y0, x1, y1, vertical=False, conf=0.95):
    return Line(text, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)), conf, vertical)


def test_back_label_with_ocr_confusions():
    ex = extract_fields(
        [
            "八海山",
            "品目 日本洒",
            "特定名称 純米大吟釀",
            "原材料名 米(国産)・米麹(国産米)",
            "使用米 山田錦",
            "精米步合 4O%",
            "アルコ一ル分 16度",
            "内容量 720ML",
            "裂造者 八海醸造株式会社",
            "新潟県南魚沼市長森1051",
        ]
    )
    v = ex.values()
    assert v["grade"] == "純米大吟醸"
    assert v["seimai"] == "40%"
    assert v["alcohol"] == "16度"
    assert v["volume"] == "720ml"
    assert v["brewery"] == "八海醸造"
    assert v["prefecture"] == "新潟県"
    assert v["city"] == "南魚沼市"
    assert v["brand_name"] == "八海山"  # no boxes: a gazetteer brand named in the text
    assert "山田錦" in ex.label_features
    assert v["rice"] == "山田錦"
    assert all(f.source == "ocr" and 0 < f.confidence <= 1 for f in ex.fields.values())


def test_brand_is_the_largest_lettering_and_grade_line_is_not_a_brewery():
    reading = Reading(
        (
            _line("特別本醸造", 300, 80, 700, 140),
            _line("風の里", 200, 190, 800, 480),  # not in the gazetteer: taken from the layout
            _line("限定", 450, 520, 550, 570),
            _line("石川酒造", 90, 1000, 300, 1040),
            _line("愛媛県西条市", 90, 1060, 360, 1100),
        ),
        "test",
    )
    v = extract_fields(reading).values()
    assert v["brand_name"] == "風の里"
    assert v["grade"] == "特別本醸造"
    assert v["brewery"] == "石川酒造"
    assert (v["prefecture"], v["city"]) == ("愛媛県", "西条市")


def test_a_bracketed_line_is_not_the_brand_even_when_its_lettering_is_larger():
    # a back label in columns: the ingredients line, its label word 原材料 garbled, read a little
    # larger than the brand (check set Gyousyo seed 38, tune-38-00088)
    reading = Reading(
        (
            _line("名米（国）・米(米）", 100, 100, 138, 500, vertical=True, conf=0.55),
            _line("星里", 200, 100, 236, 180, vertical=True, conf=1.0),
        ),
        "test",
    )
    assert extract_fields(reading).values()["brand_name"] == "星里"


def test_confused_brewery_suffix_is_restored_and_known_brand_snapped():
    reading = Reading(
        (
            _line("黒龍", 400, 100, 600, 700, vertical=True),
            _line("吟醸", 650, 100, 700, 220, vertical=True),
            _line("黒龍洒造", 200, 700, 240, 900, vertical=True),
            _line("福井県永平寺町", 150, 600, 190, 900, vertical=True),
        ),
        "test",
    )
    v = extract_fields(reading).values()
    assert v["brand_name"] == "黒龍"
    assert v["brewery"] == "黒龍酒造"
    assert v["grade"] == "吟醸"
    assert v["city"] == "永平寺町"


def test_one_slip_in_a_grade_line_is_tolerated_but_not_in_a_brewery_name():
    v = extract_fields(["特定名称 純米吟磁", "製造者 本田酒造株式会社"]).values()
    assert v["grade"] == "純米吟醸"
    assert v["brewery"] == "本田酒造"


def test_a_maker_suffix_read_with_one_slip_is_restored():
    # three characters or more: one slip (ー lost, 工 read as T) is still the suffix
    assert extract_fields(["製造者 山田ファム株式会社"]).values()["brewery"] == "山田ファーム"
    assert extract_fields(["製造者 前田果汁T房株式会社"]).values()["brewery"] == "前田果汁工房"
    # a maker line with no key at all, its suffix misread, is still a maker
    assert extract_fields(["トマトジュース", "前田ファム"]).values()["brewery"] == "前田ファーム"
    # a company word read with a slip is no part of the name
    assert extract_fields(["造者木村本店称式会社"]).values()["brewery"] == "木村本店"


def test_a_two_character_suffix_is_restored_only_with_the_recognisers_alternative():
    def maker(alternatives):
        text = "製造者花灯酸造株式会社"
        return Line(text, (), 0.9, False, 0, alternatives)

    sure = ("",) * 11
    offered = ("",) * 5 + ("醸酉",) + ("",) * 5  # the recogniser also saw 醸 where it read 酸
    assert extract_fields(Reading((maker(offered),), "test")).values()["brewery"] == "花灯醸造"
    assert extract_fields(Reading((maker(sure),), "test")).values()["brewery"] == "花灯酸造"
    # with no maker key and no alternative, one slip in two characters is no maker: any 〜造 would be
    assert "brewery" not in extract_fields(["花灯酸造"]).values()
    assert "brewery" not in extract_fields(["山田商事", "無添加"]).values()


def test_fuzzy_key_folds_confusions_only():
    assert fuzzy_key("洒造") == fuzzy_key("酒造")
    assert fuzzy_key("アルコ一ル") == fuzzy_key("アルコール")
    assert fuzzy_key("ロ") == fuzzy_key("口")
    assert fuzzy_key("カ") == fuzzy_key("力")
    assert fuzzy_key("ニ") == fuzzy_key("二")
    assert fuzzy_key("純米") != fuzzy_key("吟醸")
    assert normalize("７２０ ｍｌ") == "720ml"


def test_empty_reading_gives_no_fields():
    assert extract_fields([]).values() == {}
    assert extract_fields("").values() == {}


def test_a_known_city_names_the_prefecture_when_it_was_not_read():
    v = extract_fields(["製造者 村上酒造株式会社", "|岩国市周東町1047"]).values()
    assert (v["prefecture"], v["city"]) == ("山口県", "岩国市")
    reading = Reading((_line("•風の里", 200, 190, 800, 480), _line("限定", 450, 520, 550, 570)), "test")
    assert extract_fields(reading).values()["brand_name"] == "風の里"


def test_a_maker_whose_name_ends_like_a_grade_is_still_the_brewery():
    v = extract_fields(["純米", "坂本醸造", "福井県鯖江市", "300m"]).values()
    assert v["brewery"] == "坂本醸造"
    assert v["grade"] == "純米"
    assert v["volume"] == "300ml"  # the l lost at the edge of a column
    assert "brewery" not in extract_fields(["特別本醸造", "本醸造"]).values()


def test_a_doubted_kanji_between_kanji_is_the_name_particle_the_recogniser_offered():
    def reading(text, alts):
        big = Line(text, ((0, 0), (300, 0), (300, 100), (0, 100)), 0.9, False, 0, alts)
        return Reading((big, _line("精米歩合 60%", 0, 150, 200, 170)), "ppocr")

    # brush の read as 門, の among the recogniser's alternatives at that position
    assert extract_fields(reading("春門雫", ("", "の円八", ""))).values()["brand_name"] == "春の雫"
    # a sure read, or no particle among the alternatives, is kept as read
    assert extract_fields(reading("八海山", ("", "", ""))).values()["brand_name"] == "八海山"
    assert extract_fields(reading("月四雫", ("", "円口", ""))).values()["brand_name"] == "月四雫"
    # without alternatives (tesseract, plain text) nothing changes
    assert extract_fields(reading("風八光", ())).values()["brand_name"] == "風八光"


def test_sentence_punctuation_inside_the_brand_line_is_no_part_of_the_brand():
    def brand(text):
        big = Line(text, ((0, 0), (300, 0), (300, 100), (0, 100)), 0.9, False)
        return extract_fields(Reading((big, _line("精米歩合 60%", 0, 150, 200, 170)), "ppocr")).values()["brand_name"]

    assert brand("白。鶴") == "白鶴"  # a brush stroke's end read as a full stop
    assert brand("風、の里") == "風の里"
    assert brand("ゆき・ひかり") == "ゆき・ひかり"  # a name's own middle dot stays
    assert brand("。") == "。"  # nothing but punctuation: kept as read, not emptied


def test_punctuation_after_the_grade_label_is_no_part_of_the_grade():
    assert extract_fields(["特定名称•吟醸"]).values()["grade"] == "吟醸"
    assert extract_fields(["【純米大吟醸】"]).values()["grade"] == "純米大吟醸"


def test_a_grade_is_matched_on_the_recognisers_alternatives_and_a_slipped_label():
    # 特定名称 read with a slip (特名称); 吟 and 醸 doubted (read 吃, 酸) and offered as alternatives
    alts = ("", "", "", "", "吟今", "醸酪")
    line = Line("特名称大吃酸", ((0, 0), (300, 0), (300, 20), (0, 20)), 0.9, False, 0, alts)
    assert extract_fields(Reading((line,), "ppocr")).values()["grade"] == "大吟醸"
    # without the alternative, two slips in three characters are too many
    assert "grade" not in extract_fields(["特名称大吃酸"]).values()


def test_alcohol_read_through_a_misread_key_and_unit():
    """アルコール分 as the reader misreads it on small or blurred print (lines seen on the tune
    photographs): the strength is still read, at a lower confidence; a number that is not two
    digits is not taken for one (a misread "17" as "1て")."""
    for text, want in [
        ("アルコール分16ル", "16度"),
        ("アルイル分15度", "15度"),
        ("ゾルコール分16照", "16度"),
        ("アール分13度", "13度"),
        ("アルコ一ル分 16%", "16%"),
    ]:
        f = extract_fields([text]).fields["alcohol"]
        assert f.value == want, text
    assert extract_fields(["アルコ一ル分 16度"]).fields["alcohol"].confidence > 0.8, "the plain key: sure"
    assert extract_fields(["アール分13度"]).fields["alcohol"].confidence < 0.8, "a misread key: not sure"
    assert "alcohol" not in extract_fields(["アルコイル分1て度"]).fields
    assert "alcohol" not in extract_fields(["日本酒度+3"]).fields


def test_volume_read_through_a_misread_key_and_unit():
    """内容量 as the reader misreads it on small print (lines seen on the tune photographs): a
    bottle size after the key's first characters is read in ml, at a lower confidence; a litre
    count no bottle holds (720l: the m lost) is ml; any other number after a misread key is not
    taken for a volume."""
    for text, want in [
        ("内容300n", "300ml"),
        ("内容城720甲", "720ml"),
        ("内容量 720l", "720ml"),
        ("内容量1.8l", "1.8l"),
    ]:
        assert extract_fields([text]).fields["volume"].value == want, text
    assert extract_fields(["内容城720甲"]).fields["volume"].confidence < 0.8, "a misread key: not sure"
    assert extract_fields(["内容量 720ml"]).fields["volume"].confidence > 0.8
    assert "volume" not in extract_fields(["内容城721甲"]).fields


def test_only_values_a_label_can_print_count_for_identity():
    from pipelines.ingest.readings import identity_fields, said_fields
    from pipelines.read.fields import plausible

    assert plausible("volume", "720ml") and plausible("volume", "1.8l") and plausible("volume", "1800ml")
    assert not plausible("volume", "5002ml") and not plausible("volume", "730ml")  # a stray or lost digit
    assert plausible("alcohol", "15度") and plausible("alcohol", "15.5%") and not plausible("alcohol", "1度")
    reading = {
        "fields": {
            "volume": {"value": "5002ml", "confidence": 0.9},
            "alcohol": {"value": "16度", "confidence": 0.9},
        }
    }
    # a misread number neither vetoes nor agrees: it is left out of what identity compares
    assert identity_fields(reading) == {"alcohol": "16度"}
    assert said_fields(reading) == {"alcohol": "16度"}


def test_a_printed_number_keeps_the_values_its_digits_may_be():
    """Where the recogniser was unsure of a digit and offered another there (Line.alternatives), the
    number keeps the values it may be (`maybe`, for identity only); identity_fields carries them
    after the value."""
    from pipelines.ingest.readings import identity_fields

    # 精米歩合56%: at the 6 the recogniser also saw a 5 (a line seen on the tune photographs)
    alts = ("", "", "", "", "", "5", "")
    line = Line("精米歩合56%", ((0, 0), (300, 0), (300, 20), (0, 20)), 0.9, False, 0, alts)
    ex = extract_fields(Reading((line,), "ppocr"))
    assert ex.fields["seimai"].value == "56%" and "55%" in ex.maybe["seimai"]
    sure_digit = extract_fields(Reading((Line("精米歩合5%", line.box, 0.9, False, 0, ("",) * 6),), "ppocr"))
    assert not sure_digit.maybe.get("seimai"), "no digit offered: nothing else it may be"
    sure = extract_fields(Reading((Line("内容量720ml", line.box, 0.95, False, 0, ("",) * 8),), "ppocr"))
    assert sure.fields["volume"].value == "720ml"
    said = identity_fields(sure.to_dict(), min_confidence=0.0)
    assert said["volume"] == "720ml"
    assert identity_fields(ex.to_dict(), min_confidence=0.0)["seimai"].split("|")[:1] == ["56%"]
    assert "55%" in identity_fields(ex.to_dict(), min_confidence=0.0)["seimai"].split("|")


def test_a_brand_keeps_the_names_a_doubted_character_may_make():
    """Where the recogniser doubted a character of the brand and offered others (a brush 雫 read
    率), the brand keeps the names one swap makes (`maybe`, for identity only): name characters
    only, the likeliest swap at each position first, at most BRAND_MAYBES; a brand read as a
    gazetteer brand, a sure read or a read without alternatives keeps none. A swap that makes a
    gazetteer brand is read as that brand, the name as read and the other swaps kept as its maybe
    names."""
    from pipelines.ingest.readings import identity_fields
    from pipelines.read.fields import BRAND_MAYBES

    def brand(text, alts):
        big = Line(text, ((0, 0), (300, 0), (300, 100), (0, 100)), 0.9, False, 0, alts)
        return extract_fields(Reading((big, _line("精米歩合 60%", 0, 150, 200, 170)), "ppocr"))

    ex = brand("率の里", ("雫需。", "", ""))
    assert ex.fields["brand_name"].value == "率の里"
    assert ex.maybe["brand_name"] == ("雫の里", "需の里"), "。 is no name character"
    assert identity_fields(ex.to_dict(), min_confidence=0.0)["brand_name"] == "率の里|雫の里|需の里"
    # the first guess at every doubted position comes before the second anywhere
    assert brand("白の率", ("自目", "", "雫零")).maybe["brand_name"][:2] == ("自の率", "白の雫")
    assert len(brand("率の里", ("雫需零霊雲", "乃之ノ", "理星")).maybe["brand_name"]) == BRAND_MAYBES
    assert not brand("率の里", ("", "", "")).maybe.get("brand_name"), "a sure read may be nothing else"
    assert not brand("率の里", ()).maybe.get("brand_name"), "no alternatives (tesseract): nothing else"
    assert not brand("八海山", ("入", "", "")).maybe.get("brand_name"), "a gazetteer brand is that brand"
    # a swap the recogniser offered that makes a gazetteer brand: read as that brand
    snapped = brand("鍋鳥", ("", "烏島"))
    assert snapped.fields["brand_name"].value == "鍋島"
    assert snapped.maybe["brand_name"] == ("鍋鳥", "鍋烏"), "for identity it may still be what was read"
    assert brand("鍋鳥", ("", "烏")).fields["brand_name"].value == "鍋鳥", "only what the recogniser offered"


def test_a_line_known_to_print_a_number_is_read_by_its_number_and_unit():
    # as read across (pipelines.ingest.readings.field_reader): the line is known to be the field's
    assert bare_value("volume", "300T") == "300ml"  # ml read as T
    assert bare_value("volume", "内容用500m1") == "500ml"
    assert bare_value("alcohol", "分17度") == "17度"
    assert bare_value("seimai", "55%") == "55%"
    # no bottle size, two numbers, or no unit that makes it the field's value: nothing
    assert bare_value("volume", "mOOm") == "" and bare_value("volume", "720 1800") == ""
    assert bare_value("alcohol", "アルコール分ー度") == "" and bare_value("seimai", "米東3") == ""
    assert bare_value("grade", "純米") == ""
