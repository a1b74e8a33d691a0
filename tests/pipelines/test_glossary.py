"""THE glossary (pipelines.search.glossary): loading, matching across scripts, and its users' view of it."""

from __future__ import annotations

import pytest

from pipelines.search import glossary
from pipelines.search.tokenizer import NO_GLOSSARY, tokenize
from pipelines.think import lexicon
from tools.datagen.catalog import FEATURE_EN, JUICE_FRUITS, REGION_EN, REGIONS


@pytest.fixture(scope="module")
def g() -> glossary.Glossary:
    return glossary.get()


def test_the_data_file_is_broad(g):
    assert len(g) >= 100
    counts = {k: len(g.of_kinds(k)) for k in glossary.KINDS}
    for kind, least in (("taste", 8), ("style", 12), ("rice", 8), ("region", 47), ("fruit", 10), ("category", 10)):
        assert counts[kind] >= least, (kind, counts)


def test_every_catalogue_feature_fruit_and_region_is_a_concept_its_english_finds(g):
    pairs = list(FEATURE_EN.items()) + [(ja, en) for ja, _, en in JUICE_FRUITS] + list(REGION_EN.items())
    for ja, en in pairs:
        assert ja in g.by_ja, ja
        assert ja in g.concepts(en), (en, g.concepts(en))
        assert ja in g.concepts(en.upper()), en
        assert g.concepts(ja, broader=False)[:1] == [ja], ja


@pytest.mark.parametrize(
    "text, concept",
    [
        ("dry", "辛口"),
        ("DRY sake", "辛口"),
        ("Fruity", "フルーティー"),
        ("sparkling", "発泡"),
        ("Otaru", "小樽"),
        ("yamada nishiki", "山田錦"),
        ("Yamada-Nishiki", "山田錦"),
        ("YamadaNishiki", "山田錦"),
        ("strawberries", "いちご"),
        ("apples", "りんご"),
        ("peaches", "もも"),
        ("tomatoes", "トマト"),
        ("honjouzou", "本醸造"),  # romaji spellings meet (ou = o)
        ("からくち", "辛口"),
        ("カラクチ", "辛口"),
        ("ＤＲＹ", "辛口"),  # full-width
        ("light and crisp", "淡麗"),
        ("awamori", "泡盛"),
        ("Kanagawa", "神奈川"),
    ],
)
def test_english_romaji_and_kana_forms_find_the_concept(g, text, concept):
    assert concept in g.concepts(text)


def test_leftmost_longest_and_several_meanings(g):
    assert g.concepts("山梨のぶどう", broader=False) == ["山梨", "ぶどう"]  # not 梨
    assert g.concepts("泡盛", broader=False) == ["泡盛"]  # not 発泡 (its loose form 泡 is not indexed)
    assert g.concepts("純米大吟醸", broader=False) == ["純米大吟醸"]
    assert g.concepts("junmai daiginjo", broader=False) == ["純米大吟醸"]
    assert set(g.concepts("sparkling", broader=False)) == {"発泡", "炭酸"}
    assert g.concepts("sparkling water", broader=False) == ["炭酸水"]
    assert g.concepts("a dryer", broader=False) == []  # whole words only
    assert g.concepts("", broader=False) == []


def test_nearest_category_for_alternatives(g):
    assert g.near_category(["泡盛"]) == "sake" and g.near_category(["メロン"]) == "juice"
    assert g.near_category(["コーヒー"]) == "juice" and g.near_category(["而今"]) == "sake"
    assert g.near_category(["大阪"]) == ""  # a place says nothing about the category
    assert g.near_category(["泡盛", "メロン"]) == ""  # they disagree: no guess


def test_broader_concepts(g):
    assert g.concepts("小樽") == ["小樽", "北海道"]
    assert g.concepts("小樽", broader=False) == ["小樽"]
    assert g.concepts("超辛口") == ["超辛口", "辛口"]


def test_tokenizer_meets_english_and_japanese_at_index_and_query_time():
    label = "カテゴリ: 日本酒\n地域: 小樽\n特徴: 辛口、フルーティー、発泡"
    terms = set(tokenize(label))
    for q in ("dry", "fruity", "sparkling sake", "Otaru", "Hokkaido"):
        gterms = {t for t in tokenize(q, broader=False) if t.startswith("g:")}
        assert gterms and gterms & terms, q
    # an English word the glossary reads gives its concept only, not romaji that meets unrelated readings
    assert tokenize("Hokkaido", broader=False) == ["g:北海道"]
    assert not any(t.startswith("g:") for t in tokenize(label, NO_GLOSSARY))
    assert "r:hokkaido" in tokenize("Hokkaido", NO_GLOSSARY)


def test_loader_rejects_bad_files(tmp_path):
    head = "ja\tkind\ten\talt\tloose\twithin\tcode\tnear\n"
    ok = tmp_path / "ok.tsv"
    ok.write_text(
        head + "# a comment\n\n辛口\ttaste\tdry|Bone Dry\tからくち\n超辛口\ttaste\textra dry\t\t\t辛口\n", "utf-8"
    )
    loaded = glossary.load(ok)
    assert len(loaded) == 2 and loaded.by_ja["辛口"].en == ("dry", "Bone Dry")
    assert loaded.concepts("bone dry") == ["辛口"] and loaded.concepts("extra dry") == ["超辛口", "辛口"]
    assert loaded.version and loaded.version != glossary.get().version
    for body, why in (
        ("辛口\tflavour\tdry\n", "unknown kind"),
        ("辛口\ttaste\tdry\n辛口\ttaste\tsec\n", "twice"),
        ("超辛口\ttaste\textra dry\t\t\t辛口\n", "not listed"),
        ("\ttaste\tdry\n", "no canonical"),
        ("辛口\ttaste\tdry\t\t\t\t\t\textra\n", "columns"),
    ):
        bad = tmp_path / "bad.tsv"
        bad.write_text(head + body, "utf-8")
        with pytest.raises(ValueError, match=why):
            glossary.load(bad)


def test_the_think_planner_reads_the_same_glossary(g):
    for ja in FEATURE_EN:
        assert ja in lexicon.FEATURES, ja
        assert lexicon.FEATURES[ja] == (*g.by_ja[ja].en, *g.by_ja[ja].alt, *g.by_ja[ja].loose)
    assert lexicon.FEATURES["辛口"][0] == "dry"  # the English form first: the planner rewrites with it
    assert set(lexicon.CATEGORIES) == {"sake", "juice"}
    assert lexicon.GRADES[0] == "純米大吟醸" and set(lexicon.GRADES) == {e.ja for e in g.of_kinds("grade")}
    assert {r for r, *_ in REGIONS} <= set(g.by_ja)
