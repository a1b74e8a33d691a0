"""Labelled evaluation queries over a generated catalogue (tools.datagen.catalog).

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

from tools.datagen.catalog import FEATURE_EN, JUICE_FRUITS, Label, generate_labels

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


class _Builder:
    """The queries of one evaluation set; each method adds one family of query kinds. The methods
    draw from one random generator in a fixed order, so a seed always gives the same set."""

    def __init__(self, labels: list[Label], seed: int, n_per_kind: int):
        self.rng = random.Random(seed)
        self.labels, self.n = labels, n_per_kind
        self.by_brand: dict[str, list[Label]] = defaultdict(list)
        self.by_brewery: dict[str, list[Label]] = defaultdict(list)
        for lab in labels:
            self.by_brand[lab.brand_name].append(lab)
            self.by_brewery[lab.brewery].append(lab)
        self.sake_brands = sorted({lab.brand_name for lab in labels if lab.category == "sake"})
        self.sake_labels = [lab for lab in labels if lab.category == "sake"]
        self.out: list[EvalQuery] = []

    def add(self, kind: str, text: str, rel: dict[str, int], filters: dict | None = None) -> None:
        if any(g == 2 for g in rel.values()):
            self.out.append(EvalQuery(kind, text, rel, filters or {}))

    def pick(self, pool, n):
        pool = list(pool)
        return self.rng.sample(pool, min(n, len(pool)))

    def brands(self) -> None:
        rng, n_per_kind, by_brand, add, pick = self.rng, self.n, self.by_brand, self.add, self.pick
        juice_brands = sorted({lab.brand_name for lab in self.labels if lab.category == "juice"})
        famous = [b for b in ("獺祭", "北の誉", "八海山", "久保田", "十四代", "田酒", "黒龍", "新政") if b in by_brand]
        brand_pool = famous + pick([b for b in self.sake_brands if b not in famous], n_per_kind) + pick(juice_brands, 6)
        for b in brand_pool:  # brand in kanji
            add("brand", b, {lab.key: 2 for lab in by_brand[b]})
        for b in pick(brand_pool, n_per_kind):  # brand in romaji / English
            lab0 = by_brand[b][0]
            rom = lab0.brand_romaji
            text = rng.choice(
                [rom, rom.capitalize(), f"{rom.capitalize()} {'sake' if lab0.category == 'sake' else 'juice'}"]
            )
            add("brand_romaji", text, {lab.key: 2 for lab in by_brand[b]})
        for b in pick(brand_pool, n_per_kind):  # typos
            lab0 = by_brand[b][0]
            text = _typo_ja(rng, b) if rng.random() < 0.5 else _typo_romaji(rng, lab0.brand_romaji)
            add("brand_typo", text, {lab.key: 2 for lab in by_brand[b]})

    def breweries_and_regions(self) -> None:
        rng, n_per_kind, labels, add, pick = self.rng, self.n, self.labels, self.add, self.pick
        breweries = sorted({lab.brewery for lab in labels})
        for w in pick(breweries, n_per_kind):  # brewery
            labs = self.by_brewery[w]
            suffix = "のお酒" if labs[0].category == "sake" else "の商品"
            add("brewery", rng.choice([w, w + suffix]), {lab.key: 2 for lab in labs})
        for w in pick(breweries, n_per_kind // 2):
            labs = self.by_brewery[w]
            add("brewery_romaji", labs[0].brewery_romaji, {lab.key: 2 for lab in labs})
        for r in pick(sorted({lab.region for lab in labels}), n_per_kind):  # region, Japanese and English
            for cat, ja, en in (("sake", "日本酒", "sake"), ("juice", "ジュース", "juice")):
                labs = [lab for lab in labels if lab.region == r and lab.category == cat]
                if not labs:
                    continue
                if rng.random() < 0.5:
                    add("region", f"{r}の{ja}", {lab.key: 2 for lab in labs})
                else:
                    add("region_en", f"{en} from {labs[0].region_en}", {lab.key: 2 for lab in labs})

    def features_and_products(self) -> None:
        rng, n_per_kind, labels, add, pick = self.rng, self.n, self.labels, self.add, self.pick
        for lab in pick(self.sake_labels, n_per_kind):  # region + feature
            feat = rng.choice(lab.label_features)
            add("region_feature", f"{lab.region}の{feat}の日本酒", _region_feature_relevance(labels, lab, feat))
        for lab in pick(self.sake_labels, n_per_kind):  # the same in English
            i = rng.randrange(len(lab.label_features))
            feat, feat_en = lab.label_features[i], lab.features_en[i]
            add("feature_en", f"{feat_en} sake from {lab.region_en}", _region_feature_relevance(labels, lab, feat))
        for lab in pick(labels, n_per_kind + 5):  # whole product name
            rel = {x.key: 1 for x in self.by_brand[lab.brand_name]}
            rel[lab.key] = 2
            add("product", lab.product_name, rel)

    def paraphrases(self) -> None:
        rng, labels = self.rng, self.labels
        for lab in self.pick(self.sake_labels, self.n):
            feat = rng.choice(lab.label_features)
            text, strong, weak = rng.choice(_paraphrase_templates(lab, feat))
            rel = {x.key: 1 for x in labels if weak(x)}
            rel.update({x.key: 2 for x in labels if strong(x)})
            self.add("paraphrase", text, rel)

    def juice_and_filters(self) -> None:
        rng, n_per_kind, labels, add, pick = self.rng, self.n, self.labels, self.add, self.pick
        juice_labels = [lab for lab in labels if lab.category == "juice"]
        for lab in pick(juice_labels, n_per_kind):  # juice by fruit and region, Japanese or English
            fruit = lab.grade
            rel = {x.key: 1 for x in juice_labels if x.grade == fruit}
            rel.update({x.key: 2 for x in juice_labels if x.grade == fruit and x.region == lab.region})
            if rng.random() < 0.5:
                add("juice", f"{lab.region}産の{fruit}ジュース", rel)
            else:
                add("juice_en", f"{EN_FRUIT[fruit]} juice from {lab.region_en}", rel)
        for lab in pick(self.sake_labels, n_per_kind):  # a feature query inside a region filter
            feat = rng.choice(lab.label_features)
            inside = [x for x in labels if x.region == lab.region]
            rel = {x.key: 2 for x in inside if feat in x.label_features}
            add("filter_region", rng.choice([feat, FEATURE_EN[feat]]), rel, {"region": lab.region})
        for b in pick(self.sake_brands, n_per_kind // 2):  # a brand with a category filter
            rel = {x.key: 2 for x in self.by_brand[b]}
            add("filter_category", self.by_brand[b][0].brand_romaji, rel, {"category": "sake"})


def _region_feature_relevance(labels: list[Label], lab: Label, feat: str) -> dict[str, int]:
    """2: sake of the label's region with the feature; 1: other sake of that region."""
    rel = {x.key: 1 for x in labels if x.region == lab.region and x.category == "sake"}
    rel.update(
        {x.key: 2 for x in labels if x.region == lab.region and x.category == "sake" and feat in x.label_features}
    )
    return rel


def _paraphrase_templates(lab: Label, feat: str) -> list:
    """(text, strongly relevant, weakly relevant) for a paraphrased question about `lab`."""
    return [
        (
            f"{lab.brewery}が造る{lab.grade}",
            lambda x, lab=lab: x.brewery == lab.brewery and x.grade == lab.grade,
            lambda x, lab=lab: x.brewery == lab.brewery,
        ),
        (
            f"{lab.brand_name}の{feat}なもの",
            lambda x, lab=lab, f=feat: x.brand_name == lab.brand_name and f in x.label_features,
            lambda x, lab=lab: x.brand_name == lab.brand_name,
        ),
        (
            f"{lab.prefecture}の{lab.region}で造られた{feat}のお酒",
            lambda x, lab=lab, f=feat: x.region == lab.region and x.category == "sake" and f in x.label_features,
            lambda x, lab=lab: x.region == lab.region and x.category == "sake",
        ),
    ]


def build_queries(labels: list[Label], seed: int = 0, n_per_kind: int = 20) -> list[EvalQuery]:
    b = _Builder(labels, seed, n_per_kind)
    b.brands()
    b.breweries_and_regions()
    b.features_and_products()
    b.paraphrases()
    b.juice_and_filters()
    return b.out


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
