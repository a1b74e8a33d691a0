"""The planner on questions as people ask them (issue 27): label words are aspects, context and
hedges are preferences and notes; places resolve at every level; か is either, と is both."""

from __future__ import annotations

from pipelines.think import evaluator, planner
from pipelines.think.models import Aspect

REGIONS = ["小樽", "新潟", "長岡", "松江", "高知", "広島", "西条", "鹿児島", "伏見", "灘", "山口"]
VOCAB = planner.Vocabulary(
    {"brand_name": {"獺祭": "獺祭", "八海山": "八海山"}, "brewery": {}, "region": {r: r for r in REGIONS}},
    {"brand_name": {}, "brewery": {}, "region": {}},
)


def plan(q: str) -> list[Aspect]:
    return planner.plan_aspects(q, VOCAB)


def test_context_words_and_loose_tastes_are_preferences_not_aspects():
    (a,) = plan("冬の鍋に合う、新潟あたりのすっきりした辛口の日本酒を探してる")
    assert a.features == ["辛口"] and a.category == "sake"
    assert set(a.regions) == {"新潟", "長岡"}  # the prefecture: both its label regions
    assert "淡麗" in a.prefer and "燗酒向け" in a.prefer  # すっきり (loose), 冬/鍋 (context)
    assert {"冬", "鍋", "あたり"} <= set(a.context)


def test_hedged_words_only_rank():
    (a,) = plan("新潟の日本酒で、できればフルーティーなやつ")
    assert a.features == [] and a.prefer[0] == "フルーティー"
    (b,) = plan("dry sake from Niigata, maybe something fruity")
    assert b.features == ["辛口"] and "フルーティー" in b.prefer


def test_a_prefecture_resolves_to_its_cities_and_ka_is_one_group():
    aspects = plan("燗で飲みたい。島根か高知の純米で、燗酒向けのものを比べたい")
    assert [a.regions for a in aspects] == [["松江"], ["高知"]]
    assert all(a.grade == "純米" and a.features == ["燗酒向け"] for a in aspects)
    assert aspects[0].one_of and aspects[0].one_of == aspects[1].one_of


def test_to_is_both_and_a_question_particle_is_not_or():
    aspects = plan("伏見と灘の辛口")
    assert [a.regions for a in aspects] == [["伏見"], ["灘"]] and not any(a.one_of for a in aspects)
    aspects = plan("新潟の辛口ってありますか？鹿児島の甘口は？")
    assert len(aspects) == 2 and not any(a.one_of for a in aspects)


def test_areas_and_categories_the_book_does_not_hold():
    (a,) = plan("九州の芋焼酎")
    assert a.category == "焼酎" and a.near_category == "sake" and a.regions == ["鹿児島"]
    (b,) = plan("鹿児島の焼酎じゃなくて日本酒が飲みたい")
    assert b.category == "sake"


def hit(i, region, feats, grade="純米"):
    return {"id": i, "region": region, "category": "sake", "label_features": feats, "product_name": f"x {grade}"}


def test_ka_is_satisfied_by_either_to_needs_both():
    aspects = plan("島根か高知の純米")
    history = [{"results": [hit("m1", "松江", ["辛口"])]}]
    cov = evaluator.evaluate(history, aspects, 8)
    assert cov.missing == [] and cov.covered == ["a1"] and cov.unfound == ["a2"]
    aspects = plan("島根と高知の純米")
    cov = evaluator.evaluate(history, aspects, 8)
    assert cov.missing == ["a2"]
    assert evaluator.nearest([evaluator.Candidate(hit("k1", "高知", [], "吟醸"), 1.0, 0)], aspects[1:])["a2"]


def test_the_evaluator_prefers_what_the_question_leans_to():
    (a,) = plan("新潟あたりのすっきりした辛口")
    history = [
        {
            "results": [
                dict(hit("plain", "新潟", ["辛口"]), score=0.9),
                dict(hit("crisp", "長岡", ["辛口", "淡麗"]), score=0.5),
            ]
        }
    ]
    cov = evaluator.evaluate(history, [a], 8)
    assert [c.doc_id for c in cov.evidence] == ["crisp"]
