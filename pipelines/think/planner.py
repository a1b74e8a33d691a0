"""Deterministic planner: a question → its aspects → the searches of each round.

An aspect is one thing the answer needs a label for: an anchor (a brand, a brewery, a region) with
the features, grade or category asked of it ("小樽と山形の辛口" → 小樽×辛口, 山形×辛口), or, with no
anchor, a set of features ("辛口と甘口" → 辛口, 甘口). Words are found longest-first: brand, brewery
and region names from the live index's values (in their script, or in romaji for Latin-script
questions), features, grades and categories from pipelines.think.lexicon. The question is cut into
parts at separators (と, や, and, vs, 、 ...) found *between* recognised words; a part with several
anchors of different kinds is one aspect when some label carries them all (小樽の北の誉), otherwise,
or when they are of the same kind, one aspect each. Features of the
first part before its anchor, or of the last part after it, are shared by anchors that have none
("dry sake from Otaru and Yamagata", "小樽と山形の辛口").

Rounds rewrite the query of an aspect still uncovered: round 1 exact filters and the canonical words;
round 2 synonyms and readings with the region/brewery filter loosened into the text; round 3 the
anchor's filter alone, browsed deeper.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipelines.search.tokenizer import normalize, normalize_romaji, romaji_of
from pipelines.think import lexicon
from pipelines.think.models import Aspect, PlannedSearch

ANCHORS = ("brand_name", "brewery", "region")
FIELD_JA = {"brand_name": "銘柄", "brewery": "蔵", "region": "地域", "category": "種別", "grade": "等級"}
CATEGORY_JA = {"sake": "日本酒", "juice": "ジュース"}
_FEATURES = lexicon.feature_surfaces()
_GRADES = lexicon.grade_surfaces()
_CATEGORIES = lexicon.category_surfaces()
_ASCII_WORD = re.compile(r"[a-z0-9%]+(?:[-'][a-z0-9]+)*")
_KIND_RANK = {"brand_name": 0, "brewery": 0, "region": 0, "grade": 1, "feature": 2, "category": 3}


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str  # brand_name | brewery | region | feature | grade | category
    value: str


class Vocabulary:
    """Brand, brewery and region names the labels carry: normalised value -> value as stored, and
    romaji of the value -> values."""

    def __init__(
        self,
        values: dict[str, dict[str, str]],
        romaji: dict[str, dict[str, set[str]]],
        together: set[frozenset[tuple[str, str]]] | None = None,
    ):
        self.values = values
        self.romaji = romaji
        # pairs of (field, value) some label carries both of; None: unknown (every pair allowed)
        self.together = together

    def can_combine(self, anchors: dict[str, str]) -> bool:
        """Whether some label carries all these anchors at once (小樽の北の誉: yes; a brand and a
        brewery that does not brew it: no, so they are two aspects to compare)."""
        if self.together is None:
            return True
        items = sorted(anchors.items())
        return all(frozenset((a, b)) in self.together for i, a in enumerate(items) for b in items[i + 1 :])

    @classmethod
    def empty(cls) -> Vocabulary:
        return cls({f: {} for f in ANCHORS}, {f: {} for f in ANCHORS})

    @classmethod
    def from_index(cls, idx) -> Vocabulary:
        values: dict[str, dict[str, str]] = {}
        romaji: dict[str, dict[str, set[str]]] = {}
        for field in ANCHORS:
            codes = idx.value_code[field]
            values[field] = {v: v for v in codes}
            names = {code: v for v, code in codes.items()}
            romaji[field] = {rom: {names[c] for c in cs if c in names} for rom, cs in idx.value_romaji[field].items()}
        together: set[frozenset[tuple[str, str]]] = set()
        alive = np.flatnonzero(idx.alive[: idx.n])
        names_of = {f: {code: v for v, code in idx.value_code[f].items()} for f in ANCHORS}
        for fa, fb in (("brand_name", "brewery"), ("brand_name", "region"), ("brewery", "region")):
            pairs = np.unique(np.stack([idx.codes[fa][alive], idx.codes[fb][alive]], axis=1), axis=0)
            for ca, cb in pairs.tolist():
                if ca >= 0 and cb >= 0:
                    together.add(frozenset(((fa, names_of[fa][ca]), (fb, names_of[fb][cb]))))
        return cls(values, romaji, together)


_vocab_cache: dict[tuple[str, int], Vocabulary] = {}
_vocab_lock = threading.Lock()


def index_vocabulary(r=None, chroma=None) -> Vocabulary:
    """The vocabulary of the active collection, as this process's live index holds it (synced)."""
    from pipelines.search import service as search_mod
    from pipelines.search.collections import active_name
    from yana.clients import get_chroma, get_redis

    r = r or get_redis()
    name = active_name(r)
    if not name:
        return Vocabulary.empty()
    chroma = chroma or get_chroma()
    idx = search_mod.live_index(name, r, chroma)
    with idx.lock:
        idx.sync(r, search_mod._fetcher(chroma, name))
        key = (name, idx.seq)
        with _vocab_lock:
            vocab = _vocab_cache.get(key)
            if vocab is None:
                _vocab_cache.clear()
                vocab = _vocab_cache[key] = Vocabulary.from_index(idx)
    return vocab


# ------------------------------------------------------------------ finding words
def _is_ascii_word_at(q: str, start: int, end: int) -> bool:
    before = q[start - 1] if start > 0 else " "
    after = q[end] if end < len(q) else " "
    return not (before.isascii() and before.isalnum()) and not (after.isascii() and after.isalnum())


def _find_surface(q: str, surface: str) -> list[tuple[int, int]]:
    out, i = [], q.find(surface)
    while i >= 0:
        j = i + len(surface)
        if not surface.isascii() or _is_ascii_word_at(q, i, j):
            out.append((i, j))
        i = q.find(surface, i + 1)
    return out


def find_spans(  # noqa: C901 - one pass per kind of word
    question: str, vocab: Vocabulary
) -> tuple[str, list[Span]]:
    q = normalize(question)
    cands: list[Span] = []
    n = len(q)
    for field in ANCHORS:
        values = vocab.values.get(field) or {}
        if not values:
            continue
        for i in range(n):
            if q[i].isascii():
                continue
            # one-character names only for regions (灘): a lone character elsewhere is too ambiguous
            for j in range(i + (1 if field == "region" else 2), min(n, i + 32) + 1):
                v = values.get(q[i:j])
                if v is not None:
                    cands.append(Span(i, j, field, v))
    # Latin-script names: word n-grams in romaji against the values' romaji
    words = [(m.start(), m.end(), m.group()) for m in _ASCII_WORD.finditer(q)]
    for a in range(len(words)):
        for b in range(a, min(len(words), a + 4)):
            rom = normalize_romaji("".join(w for _, _, w in words[a : b + 1]))
            if len(rom) < 4:
                continue
            for field in ANCHORS:
                for v in sorted((vocab.romaji.get(field) or {}).get(rom, ())):
                    cands.append(Span(words[a][0], words[b][1], field, v))
    for table, kind in ((_FEATURES, "feature"), (_GRADES, "grade"), (_CATEGORIES, "category")):
        for surface, canon in table.items():
            for i, j in _find_surface(q, surface.lower()):
                cands.append(Span(i, j, kind, canon))
    cands.sort(key=lambda s: (-(s.end - s.start), _KIND_RANK[s.kind], s.start))
    taken = [False] * n
    chosen: list[Span] = []
    for s in cands:
        if any(taken[s.start : s.end]):
            continue
        for k in range(s.start, s.end):
            taken[k] = True
        chosen.append(s)
    chosen.sort(key=lambda s: s.start)
    return q, chosen


def _has_separator(gap: str) -> bool:
    padded = f" {gap} "
    return any(sep in padded for sep in lexicon.SEPARATORS)


# ------------------------------------------------------------------ aspects
def _aspect_label(a: dict) -> str:
    parts = [a[f] for f in ("region", "brewery", "brand_name") if a.get(f)]
    if a.get("grade"):
        parts.append(a["grade"])
    parts += a.get("features") or []
    if a.get("category"):
        parts.append(CATEGORY_JA.get(a["category"], a["category"]))
    return "×".join(parts) if parts else "質問全体"


def plan_aspects(  # noqa: C901 - the grouping rules in one place
    question: str, vocab: Vocabulary, subject_category: str = ""
) -> list[Aspect]:
    q, spans = find_spans(question, vocab)
    segments: list[list[Span]] = []
    for s in spans:
        if segments and not _has_separator(q[segments[-1][-1].end : s.start]):
            segments[-1].append(s)
        else:
            segments.append([s])
    categories = {s.value for s in spans if s.kind == "category"}
    category = subject_category or (next(iter(categories)) if len(categories) == 1 else "")
    if not category and any(s.kind == "grade" for s in spans):
        category = "sake"

    def mods(seg: list[Span]) -> tuple[list[str], str]:
        feats = []
        for s in seg:
            if s.kind == "feature" and s.value not in feats:
                feats.append(s.value)
        grades = [s.value for s in seg if s.kind == "grade"]
        return feats, grades[0] if grades else ""

    # features a part shares with anchors that have none of their own
    shared_feats: list[str] = []
    shared_grade = ""
    anchored = [seg for seg in segments if any(s.kind in ANCHORS for s in seg)]
    if anchored:
        first, last = anchored[0], anchored[-1]
        first_anchor = min(s.start for s in first if s.kind in ANCHORS)
        lead = [s for s in first if s.start < first_anchor]
        last_anchor = max(s.start for s in last if s.kind in ANCHORS)
        trail = [s for s in last if s.start > last_anchor]
        shared_feats, shared_grade = mods(trail or lead)
        # trailing/leading modifiers in parts with no anchor count as shared too ("…、辛口で")
        for seg in segments:
            if seg not in anchored:
                f, g = mods(seg)
                shared_feats += [x for x in f if x not in shared_feats]
                shared_grade = shared_grade or g

    raw: list[dict[str, Any]] = []
    for seg in segments:
        anchors = [s for s in seg if s.kind in ANCHORS]
        feats, grade = mods(seg)
        if not anchors:
            if anchored or not (feats or grade):
                continue
            raw.append({"features": feats, "grade": grade})
            continue
        if not feats and not grade:
            feats, grade = list(shared_feats), shared_grade
        kinds = [s.kind for s in anchors]
        combined = len(set(kinds)) == len(kinds) and vocab.can_combine({s.kind: s.value for s in anchors})
        groups = [anchors] if combined else [[s] for s in anchors]
        for group in groups:
            a: dict[str, Any] = {s.kind: s.value for s in group}
            a.update(features=feats, grade=grade)
            raw.append(a)
    if not raw:  # nothing recognised: the question itself is the one aspect
        raw.append({"features": [], "grade": "", "free_text": question.strip()})
    out: list[Aspect] = []
    seen: set[tuple] = set()
    for a in raw:
        a.setdefault("category", category)
        key = (a.get("brand_name", ""), a.get("brewery", ""), a.get("region", ""), tuple(a["features"]), a["grade"])
        if key in seen:
            continue
        seen.add(key)
        label = a.pop("free_text", None) or _aspect_label(a)
        out.append(Aspect(id=f"a{len(out) + 1}", label=label, **a))
    return out


# ------------------------------------------------------------------ searches per round
def _alias(feature: str) -> str:
    aliases = lexicon.FEATURES.get(feature) or ()
    return aliases[0] if aliases else ""


def _vector_phrase(a: Aspect) -> str:
    head = "".join(f"{x}の" for x in (a.region, a.brewery, a.brand_name) if x)
    feats = "で".join(a.features)
    noun = a.grade or CATEGORY_JA.get(a.category, "")
    text = head + (feats + "の" if feats else "") + noun
    return text.rstrip("の") or a.label


def searches_for(aspect: Aspect, round_no: int, subject_category: str = "", free_text: str = "") -> list[PlannedSearch]:
    """The searches for one uncovered aspect in round `round_no` (0-based)."""
    hard: dict[str, list[str]] = {}
    cat = subject_category or aspect.category
    if cat:
        hard["category"] = [cat]
    words = [x for x in (aspect.brand_name, aspect.brewery, aspect.region, aspect.grade) if x] + list(aspect.features)
    if not words:
        text = free_text or aspect.label
        return [
            PlannedSearch(
                aspect=aspect.id, query_text=text, query_vector=text, filters=hard, k=[5, 10, 20][min(round_no, 2)]
            )
        ]
    exact = dict(hard)
    if aspect.region:
        exact["region"] = [aspect.region]
    if aspect.brewery:
        exact["brewery"] = [aspect.brewery]
    vec = _vector_phrase(aspect)
    if round_no == 0:
        return [PlannedSearch(aspect=aspect.id, query_text=" ".join(words), query_vector=vec, filters=exact, k=5)]
    if round_no == 1:
        syn = [x for f in aspect.features for x in (f, _alias(f)) if x]
        names = [x for x in (aspect.brand_name, aspect.brewery, aspect.region) if x]
        readings = [romaji_of(x) for x in names if romaji_of(x) and not x.isascii()]
        terms = " ".join([*names, *readings, aspect.grade, *syn]).split()
        return [PlannedSearch(aspect=aspect.id, query_text=" ".join(terms), query_vector=vec, filters=hard, k=10)]
    # last round: the anchor's own filter browsed deeper, the features as the query
    q = " ".join([aspect.brand_name, aspect.grade, *aspect.features]).strip() or " ".join(words)
    return [PlannedSearch(aspect=aspect.id, query_text=q, query_vector=vec, filters=exact, k=20)]
