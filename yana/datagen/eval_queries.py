"""Labelled evaluation queries over a generated catalogue (yana.datagen.catalog).

Each query has graded relevance computed from the labels' attributes, never from a search system:
grade 2 = what the query asks for, grade 1 = a partial match (same brand, another product; same
region, without the asked feature). Kinds cover the ways people search a shelf: brand names in
kanji, romaji and English, typos, breweries, regions, features, whole product names, paraphrases,
juices, and queries with filters.

Metrics (used by bench/search_eval.py and the regression test):
  nDCG@10 with gain 2^grade - 1 over the ideal ordering of all graded labels;
  recall@5 = |top 5 ∩ grade-2 labels| / min(5, |grade-2 labels|).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field

from yana.datagen.catalog import FEATURE_EN, JUICE_FRUITS, Label, generate_labels

EN_FRUIT = {ja: en for ja, _, en in JUICE_FRUITS}


@dataclass
class EvalQuery:
    kind: str
    text: str
    relevance: dict[str, int]  # label key -> grade (1 or 2)
    filters: dict = field(default_factory=dict)


def _typo_romaji(rng: random.Random, word: str) -> str:
    if len(word) < 5:
        return word + word[-1]
    i = rng.randrange(1, len(word) - 1)
    op = rng.choice(("drop", "double", "swap"))
    if op == "drop":
        return word[:i] + word[i + 1 :]
    if op == "double":
        return word[:i] + word[i] + word[i:]
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


_KANA_SWAP = {"の": "乃", "乃": "の"}


def _typo_ja(rng: random.Random, brand: str) -> str:
    """A plausible Japanese slip: の↔乃, a dropped の, or one extra kana."""
    if "の" in brand and rng.random() < 0.6:
        return brand.replace("の", rng.choice(["乃", ""]), 1)
    return brand + rng.choice(["れ", "い", "の"])


def _by(labels: list[Label], pred) -> list[Label]:
    return [lab for lab in labels if pred(lab)]


def build_queries(labels: list[Label], seed: int = 0, n_per_kind: int = 20) -> list[EvalQuery]:
    rng = random.Random(seed)
    by_brand: dict[str, list[Label]] = defaultdict(list)
    by_brewery: dict[str, list[Label]] = defaultdict(list)
    for lab in labels:
        by_brand[lab.brand_name].append(lab)
        by_brewery[lab.brewery].append(lab)
    sake_brands = sorted({lab.brand_name for lab in labels if lab.category == "sake"})
    juice_brands = sorted({lab.brand_name for lab in labels if lab.category == "juice"})
    breweries = sorted({lab.brewery for lab in labels})
    regions = sorted({lab.region for lab in labels})
    famous = [b for b in ("獺祭", "北の誉", "八海山", "久保田", "十四代", "田酒", "黒龍", "新政") if b in by_brand]
    out: list[EvalQuery] = []

    def add(kind: str, text: str, rel: dict[str, int], filters: dict | None = None) -> None:
        if any(g == 2 for g in rel.values()):
            out.append(EvalQuery(kind, text, rel, filters or {}))

    def pick(pool, n):
        pool = list(pool)
        return rng.sample(pool, min(n, len(pool)))

    brand_pool = famous + pick([b for b in sake_brands if b not in famous], n_per_kind) + pick(juice_brands, 6)
    for b in brand_pool:  # brand in kanji
        add("brand", b, {lab.key: 2 for lab in by_brand[b]})
    for b in pick(brand_pool, n_per_kind):  # brand in romaji / English
        lab0 = by_brand[b][0]
        rom = lab0.brand_romaji
        text = rng.choice([rom, rom.capitalize(), f"{rom.capitalize()} {'sake' if lab0.category == 'sake' else 'juice'}"])
        add("brand_romaji", text, {lab.key: 2 for lab in by_brand[b]})
    for b in pick(brand_pool, n_per_kind):  # typos
        lab0 = by_brand[b][0]
        text = _typo_ja(rng, b) if rng.random() < 0.5 else _typo_romaji(rng, lab0.brand_romaji)
        add("brand_typo", text, {lab.key: 2 for lab in by_brand[b]})
    for w in pick(breweries, n_per_kind):  # brewery
        labs = by_brewery[w]
        suffix = "のお酒" if labs[0].category == "sake" else "の商品"
        add("brewery", rng.choice([w, w + suffix]), {lab.key: 2 for lab in labs})
    for w in pick(breweries, n_per_kind // 2):
        labs = by_brewery[w]
        add("brewery_romaji", labs[0].brewery_romaji, {lab.key: 2 for lab in labs})
    for r in pick(regions, n_per_kind):  # region, Japanese and English
        for cat, ja, en in (("sake", "日本酒", "sake"), ("juice", "ジュース", "juice")):
            labs = _by(labels, lambda lab: lab.region == r and lab.category == cat)
            if not labs:
                continue
            if rng.random() < 0.5:
                add("region", f"{r}の{ja}", {lab.key: 2 for lab in labs})
            else:
                add("region_en", f"{en} from {labs[0].region_en}", {lab.key: 2 for lab in labs})
    sake_labels = [lab for lab in labels if lab.category == "sake"]
    for lab in pick(sake_labels, n_per_kind):  # region + feature
        feat = rng.choice(lab.label_features)
        rel = {x.key: 1 for x in labels if x.region == lab.region and x.category == "sake"}
        rel.update({x.key: 2 for x in labels if x.region == lab.region and x.category == "sake" and feat in x.label_features})
        add("region_feature", f"{lab.region}の{feat}の日本酒", rel)
    for lab in pick(sake_labels, n_per_kind):  # the same in English
        i = rng.randrange(len(lab.label_features))
        feat, feat_en = lab.label_features[i], lab.features_en[i]
        rel = {x.key: 1 for x in labels if x.region == lab.region and x.category == "sake"}
        rel.update({x.key: 2 for x in labels if x.region == lab.region and x.category == "sake" and feat in x.label_features})
        add("feature_en", f"{feat_en} sake from {lab.region_en}", rel)
    for lab in pick(labels, n_per_kind + 5):  # whole product name
        rel = {x.key: 1 for x in by_brand[lab.brand_name]}
        rel[lab.key] = 2
        add("product", lab.product_name, rel)
    for lab in pick(sake_labels, n_per_kind):  # paraphrases
        feat = rng.choice(lab.label_features)
        templates = [
            (f"{lab.brewery}が造る{lab.grade}", lambda x, lab=lab: x.brewery == lab.brewery and x.grade == lab.grade,
             lambda x, lab=lab: x.brewery == lab.brewery),
            (f"{lab.brand_name}の{feat}なもの", lambda x, lab=lab, f=feat: x.brand_name == lab.brand_name and f in x.label_features,
             lambda x, lab=lab: x.brand_name == lab.brand_name),
            (f"{lab.prefecture}の{lab.region}で造られた{feat}のお酒",
             lambda x, lab=lab, f=feat: x.region == lab.region and x.category == "sake" and f in x.label_features,
             lambda x, lab=lab: x.region == lab.region and x.category == "sake"),
        ]
        text, strong, weak = rng.choice(templates)
        rel = {x.key: 1 for x in labels if weak(x)}
        rel.update({x.key: 2 for x in labels if strong(x)})
        add("paraphrase", text, rel)
    juice_labels = [lab for lab in labels if lab.category == "juice"]
    for lab in pick(juice_labels, n_per_kind):  # juice by fruit and region, Japanese or English
        fruit = lab.grade
        rel = {x.key: 1 for x in juice_labels if x.grade == fruit}
        rel.update({x.key: 2 for x in juice_labels if x.grade == fruit and x.region == lab.region})
        if rng.random() < 0.5:
            add("juice", f"{lab.region}産の{fruit}ジュース", rel)
        else:
            add("juice_en", f"{EN_FRUIT[fruit]} juice from {lab.region_en}", rel)
    for lab in pick(sake_labels, n_per_kind):  # a feature query inside a region filter
        feat = rng.choice(lab.label_features)
        inside = [x for x in labels if x.region == lab.region]
        rel = {x.key: 2 for x in inside if feat in x.label_features}
        add("filter_region", rng.choice([feat, FEATURE_EN[feat]]), rel, {"region": lab.region})
    for b in pick(sake_brands, n_per_kind // 2):  # a brand with a category filter
        rel = {x.key: 2 for x in by_brand[b]}
        add("filter_category", by_brand[b][0].brand_romaji, rel, {"category": "sake"})
    return out


def eval_set(n_labels: int = 2000, seed: int = 0) -> tuple[list[Label], list[EvalQuery]]:
    labels = generate_labels(n_labels, seed)
    return labels, build_queries(labels, seed)


def ndcg_at(ranked: list[str], relevance: dict[str, int], k: int = 10) -> float:
    dcg = sum((2 ** relevance.get(key, 0) - 1) / math.log2(i + 2) for i, key in enumerate(ranked[:k]))
    ideal = sorted(relevance.values(), reverse=True)[:k]
    idcg = sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], relevance: dict[str, int], k: int = 5) -> float:
    wanted = {key for key, g in relevance.items() if g == 2}
    if not wanted:
        return 0.0
    return len(wanted & set(ranked[:k])) / min(k, len(wanted))
