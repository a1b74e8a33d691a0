"""Old and variant kanji forms folded to the common one (pipelines.text.variants)."""

from __future__ import annotations

from pipelines.text.variants import common_forms


def test_old_forms_fold_to_the_common_form():
    assert common_forms("天の惠み") == "天の恵み"
    assert common_forms("櫻正宗") == "桜正宗"
    assert common_forms("黒龍 澤乃井") == "黒竜 沢乃井"


def test_common_forms_and_kana_are_kept():
    text = "白の恵み しぼりたて ヤマ 720ml"
    assert common_forms(text) == text
