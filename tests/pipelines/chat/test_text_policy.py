"""PII masking, the persona policy and the template replies: pure functions, no stack."""

from __future__ import annotations

import pytest

from pipelines.chat.persona import (
    apply_persona,
    count_interjections,
    policy_self_check,
    provenance_suffix,
    split_sentences,
)
from pipelines.chat.pii import mask, mask_obj
from pipelines.chat.templates import classify_intent, grounded_reply

HITS = [
    {
        "id": "label_1",
        "brand_name": "北の誉",
        "product_name": "純米吟醸",
        "brewery": "北の誉酒造",
        "region": "小樽",
        "label_features": ["辛口", "フルーティー"],
        "file_path": "data/images/a.png",
    },
    {
        "id": "label_2",
        "brand_name": "田酒",
        "product_name": "特別純米",
        "brewery": "西田酒造店",
        "region": "青森",
        "label_features": ["旨口"],
        "file_path": "data/images/b.png",
    },
]


# --- PII ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, secret, token",
    [
        ("電話は090-1234-5678です", "090-1234-5678", "[PHONE]"),
        ("03-1234-5678に電話して", "03-1234-5678", "[PHONE]"),
        ("０９０ー１２３４ー５６７８まで", "１２３４", "[PHONE]"),
        ("番号は09012345678", "09012345678", "[PHONE]"),
        ("+81 90 1234 5678 に", "1234 5678", "[PHONE]"),
        ("(03)1234-5678", "1234-5678", "[PHONE]"),
        ("メールは taro.yamada@example.co.jp まで", "taro.yamada", "[EMAIL]"),
        ("ｔａｒｏ＠ｅｘａｍｐｌｅ．ｃｏｍ", "ｔａｒｏ", "[EMAIL]"),
        ("住所は東京都千代田区千代田1-1-1です", "千代田1-1-1", "[ADDRESS]"),
        ("北海道小樽市色内1丁目2番3号に住んでる", "色内1丁目", "[ADDRESS]"),
        ("〒047-0031 小樽市色内1-2-3", "047-0031", "[ADDRESS]"),
        ("大阪市北区梅田三丁目1番", "梅田三丁目", "[ADDRESS]"),
        ("I live at 123 Main Street, Springfield", "123 Main Street", "[ADDRESS]"),
    ],
)
def test_pii_is_masked(text, secret, token):
    masked, kinds = mask(text)
    assert secret not in masked
    assert token in masked
    assert kinds


@pytest.mark.parametrize(
    "text",
    [
        "小樽のお酒ある？",
        "北海道小樽市の蔵のおすすめ",
        "2025-09-23に飲んだ",
        "720mlで1500円",
        "精米歩合50%の純米大吟醸",
        "label_0901234567 の画像",
        "田酒 2024年 3月",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert mask(text) == (text, [])


def test_mask_obj_masks_nested_strings_only():
    obj = {"a": ["call 090-1234-5678", 3], "b": {"c": "x@example.com"}, "n": 5}
    assert mask_obj(obj) == {"a": ["call [PHONE]", 3], "b": {"c": "[EMAIL]"}, "n": 5}


# --- persona --------------------------------------------------------------------------------------


def test_split_sentences_japanese_and_english():
    assert split_sentences("一つ目。二つ目！三つ目？「四つ目。」五つ目") == [
        "一つ目。",
        "二つ目！",
        "三つ目？",
        "「四つ目。」",
        "五つ目",
    ]
    assert len(split_sentences("Hello there. It is 3.5 percent. Bye!")) == 3


def test_interjection_exactly_once_at_start():
    r = apply_persona("せやなー！ええ酒やね。せやせや、辛口やで。せやなぁ、また飲もな。")
    assert r.text.startswith("せやなー、")
    assert count_interjections(r.text) == 1


def test_interjection_added_when_missing_and_sesese_for_agreement():
    assert apply_persona("ええ酒やね。").text == "せやなー、ええ酒やね。"
    assert apply_persona("ええ酒やね。", user_text="これ辛口やんな？").text.startswith("せやせや、")


def test_disable_sayana_removes_every_interjection():
    r = apply_persona("せやなー！ええ酒やね。せやせや。", disable_sayana=True)
    assert count_interjections(r.text) == 0
    assert r.text == "ええ酒やね。"


def test_trim_to_five_sentences_with_warning():
    text = "一。二。三。四。五。六。七。"
    r = apply_persona(text, disable_sayana=True)
    assert r.text == "一。二。三。四。五。"
    assert "trimmed_to_5_sentences" in r.warnings
    r_on = apply_persona(text)
    assert len(split_sentences(r_on.text)) == 5  # the interjection does not add a sentence
    assert apply_persona("一。二。", disable_sayana=True).warnings == []


def test_run_on_reply_is_capped():
    r = apply_persona("あ" * 2000, max_chars=300, disable_sayana=True)
    assert len(r.text) <= 300 and r.text.endswith("…")
    assert "reply_truncated" in r.warnings


def test_urls_removed_and_provenance_has_no_urls():
    r = apply_persona("詳しくは https://example.com/x を見てな。", hits=HITS, provenance=True)
    assert "http" not in r.text and "urls_removed" in r.warnings
    assert r.text.endswith("（参考：北の誉/北の誉酒造/小樽、田酒/西田酒造店/青森）")
    assert provenance_suffix([{"brand_name": "x https://evil.example/y"}]) == "（参考：x）"
    assert apply_persona("ええね。", hits=HITS, provenance=False).text == "せやなー、ええね。"


def test_policy_self_check_passes():
    ok, detail = policy_self_check()
    assert ok, detail


# --- templates ------------------------------------------------------------------------------------


def test_template_is_grounded_on_the_hits():
    for variant in range(3):
        text = grounded_reply("小樽のおすすめある？", HITS, rag_status="ok", variant=variant)
        for needle in ("北の誉", "小樽", "北の誉酒造", "田酒"):
            assert needle in text
        assert "辛口" in text
        assert len(split_sentences(text)) <= 4


def test_template_is_honest_without_hits():
    none = grounded_reply("火星の酒ある？", [], rag_status="no_hits")
    down = grounded_reply("火星の酒ある？", [], rag_status="unavailable")
    off = grounded_reply("火星の酒ある？", [], rag_status="off")
    assert "見つからへん" in none
    assert "ラベル帳" in down and "調べられへん" in down
    assert "ラベル帳を見んと" in off
    for text in (none, down, off):
        assert text and len(split_sentences(text)) <= 4 and "北の誉" not in text


def test_template_says_what_the_label_book_lacks_then_offers_an_alternative_as_one():
    for variant in range(4):
        text = grounded_reply("泡盛ある？", HITS[:1], rag_status="ok", variant=variant, not_found=["泡盛"])
        first = split_sentences(text)[0]
        assert "泡盛" in first and "見つからへん" in first  # said first, before any label is named
        assert "北の誉" in text and "北の誉" not in first
        assert any(w in text for w in ("代わりに", "やないけど"))  # marked as an alternative
        assert len(split_sentences(text)) <= 4
    none = grounded_reply("泡盛ある？", [], rag_status="no_hits", not_found=["泡盛", "大阪"])
    assert "泡盛・大阪" in none and "見つからへん" in none
    greeting = grounded_reply("こんにちは", [], rag_status="ok", intent="greeting", not_found=["泡盛"])
    assert "泡盛" not in greeting


def test_an_llm_reply_that_does_not_say_it_gets_the_not_found_sentence():
    from pipelines.chat.templates import ensure_not_found

    said = "泡盛はラベル帳にないねん。代わりに北の誉はどうやろ。"
    assert ensure_not_found(said, ["泡盛"]) == said
    fixed = ensure_not_found("北の誉がおすすめやで。", ["泡盛"])
    assert fixed.endswith("北の誉がおすすめやで。") and "泡盛" in split_sentences(fixed)[0]
    assert ensure_not_found("北の誉がおすすめやで。", []) == "北の誉がおすすめやで。"


def test_template_handles_sparse_hits():
    text = grounded_reply("何かある？", [{"id": "x", "brand_name": "", "product_name": "謎の一本"}], rag_status="ok")
    assert "謎の一本" in text and text.strip()


def test_intent_rules():
    assert classify_intent("こんにちは")[0] == "greeting"
    assert classify_intent("ありがとう！")[0] == "thanks"
    assert classify_intent("小樽のおすすめ教えて")[0] == "recommend"
