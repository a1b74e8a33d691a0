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
from pipelines.think import lexicon, places
from pipelines.think.models import Aspect, PlannedSearch

ANCHORS = ("brand_name", "brewery", "region")
FIELD_JA = {"brand_name": "銘柄", "brewery": "蔵", "region": "地域", "category": "種別", "grade": "等級"}
CATEGORY_JA = {"sake": "日本酒", "juice": "ジュース"}
_FEATURES = lexicon.feature_surfaces()
_GRADES = lexicon.grade_surfaces()
_CATEGORIES = lexicon.category_surfaces()
_OTHER = lexicon.OTHER_CATEGORIES
_ASCII_WORD = re.compile(r"[a-z0-9%]+(?:[-'][a-z0-9]+)*")
_KIND_RANK = {"brand_name": 0, "brewery": 0, "region": 0, "grade": 1, "feature": 2, "category": 3}


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str  # brand_name | brewery | region | feature | grade | category
    value: str
    soft: bool = False  # a preference (said loosely or hedged), not a constraint


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


def _place_spans(q: str, words: list[tuple[int, int, str]]) -> list[Span]:
    """Places at every level (九州, 島根県, 松江, Niigata): kind "region", value the place's name."""
    pl = places.get()
    out: list[Span] = []
    n = len(q)
    for i in range(n):
        if q[i].isascii():
            continue
        for j in range(i + 1, min(n, i + pl.longest) + 1):
            canon = pl.forms.get(q[i:j])
            if canon is not None:
                out.append(Span(i, j, "region", canon))
    for a in range(len(words)):
        for b in range(a, min(len(words), a + 3)):
            rom = normalize_romaji("".join(w for _, _, w in words[a : b + 1]))
            canon = pl.romaji.get(rom) if len(rom) >= 3 else None
            if canon is not None:
                out.append(Span(words[a][0], words[b][1], "region", canon))
    return out


def _hedged(q: str, s: Span) -> bool:
    before, after = q[max(0, s.start - 12) : s.start], q[s.end : s.end + 12]
    return any(before.rstrip().endswith(h) or f"{h} " in before[-len(h) - 3 :] for h in lexicon.HEDGES_BEFORE) or any(
        after.startswith(h) for h in lexicon.HEDGES_AFTER
    )


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
    cands += _place_spans(q, words)
    for table, kind in ((_FEATURES, "feature"), (_GRADES, "grade"), (_CATEGORIES, "category"), (_OTHER, "category")):
        for surface, canon in table.items():
            for i, j in _find_surface(q, surface.lower()):
                value = canon[0] if isinstance(canon, tuple) else canon
                cands.append(Span(i, j, kind, value, soft=kind == "feature" and surface.lower() in lexicon.LOOSE_FORMS))
    cands.sort(key=lambda s: (-(s.end - s.start), _KIND_RANK[s.kind], s.start))
    taken = [False] * n
    chosen: list[Span] = []
    for s in cands:
        if any(taken[s.start : s.end]):
            continue
        for k in range(s.start, s.end):
            taken[k] = True
        if any(q[s.end : s.end + 8].startswith(w) for w in lexicon.NEGATIONS):
            continue  # 焼酎じゃなくて日本酒: what is ruled out is no aspect
        if s.kind in ("feature", "grade") and not s.soft and _hedged(q, s):
            s = Span(s.start, s.end, s.kind, s.value, soft=True)
        chosen.append(s)
    chosen.sort(key=lambda s: s.start)
    return q, chosen


def _boundary(gap: str) -> str:
    """How two neighbouring words relate: "or" (島根か高知), "and" (島根と高知, 、), "" (same part)."""
    padded = f" {gap} "
    g = gap.strip()
    # "か" alone between the words (島根か高知, 獺祭か、八海山); in a longer gap it is a question particle
    if (g.startswith("か") and len(g) <= 3 and not any(c in g for c in "？?。")) or any(
        w in padded for w in lexicon.OR_WORDS if w != "か"
    ):
        return "or"
    if any(sep in padded for sep in (*lexicon.SEPARATORS, "。", "！", "？", "!", "?", "\n", ". ")):
        return "and"
    return ""


def context_of(question: str) -> tuple[list[str], list[str], list[str]]:
    """(context words, hedges, features they suggest) a question carries: words no label shows."""
    q = normalize(question)
    words: list[str] = []
    hedges: list[str] = []
    prefer: list[str] = []
    for w, feats in lexicon.CONTEXT.items():
        if (w.isascii() and _find_surface(q, w)) or (not w.isascii() and w in q):
            words.append(w)
            prefer += [f for f in feats if f not in prefer]
    for h in (*lexicon.PLACE_HEDGES, *lexicon.HEDGES_BEFORE, *lexicon.CONTEXT_HEDGES):
        hs = h.strip()
        named = (hs.isascii() and _find_surface(q, hs)) or (not hs.isascii() and hs in q)
        if len(hs) >= 2 and named and hs not in hedges and not any(hs in x for x in hedges):
            hedges.append(hs)
    return words, hedges, prefer


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
    soft = [s.value for s in spans if s.soft]
    hard = [s for s in spans if not s.soft]
    segments: list[list[Span]] = []
    links: list[str] = []  # how segment i relates to segment i+1
    for s in hard:
        rel = _boundary(q[segments[-1][-1].end : s.start]) if segments else "and"
        if segments and not rel:
            segments[-1].append(s)
        else:
            if segments:
                links.append(rel)
            segments.append([s])
    categories = {s.value for s in hard if s.kind == "category"}
    category = subject_category or (next(iter(categories)) if len(categories) == 1 else "")
    if not category and any(s.kind == "grade" for s in hard):
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
    # modifiers in parts with no anchor apply to every anchor ("島根か高知の純米で、燗酒向けのもの")
    extra_feats: list[str] = []
    extra_grade = ""
    if anchored:
        for seg in segments:
            if seg not in anchored:
                f, g = mods(seg)
                extra_feats += [x for x in f if x not in extra_feats]
                extra_grade = extra_grade or g

    # segments joined by "か" / "or" are alternatives: one group, any member satisfies it
    group_of: list[int] = []
    for i in range(len(segments)):
        group_of.append(group_of[-1] if i and links[i - 1] == "or" else i)
    raw: list[dict[str, Any]] = []
    for si, seg in enumerate(segments):
        anchors = [s for s in seg if s.kind in ANCHORS]
        feats, grade = mods(seg)
        members = sum(1 for gi in group_of if gi == group_of[si])
        one_of = f"g{group_of[si] + 1}" if members > 1 else ""
        if not anchors:
            if anchored or not (feats or grade):
                continue
            raw.append({"features": feats, "grade": grade, "one_of": one_of})
            continue
        if not feats and not grade:
            feats, grade = list(shared_feats), shared_grade
        feats = [*feats, *(x for x in extra_feats if x not in feats)]
        grade = grade or extra_grade
        kinds = [s.kind for s in anchors]
        combined = len(set(kinds)) == len(kinds) and vocab.can_combine({s.kind: s.value for s in anchors})
        groups = [anchors] if combined else [[s] for s in anchors]
        for group in groups:
            a: dict[str, Any] = {s.kind: s.value for s in group}
            a.update(features=feats, grade=grade, one_of=one_of)
            raw.append(a)
    if not raw and categories:  # only a category ("焼酎ある？"): the category is the aspect
        raw.append({"features": [], "grade": "", "one_of": ""})
    if not raw:  # nothing recognised: the question itself is the one aspect
        raw.append({"features": [], "grade": "", "one_of": "", "free_text": question.strip()})
    words, hedges, suggested = context_of(question)
    out: list[Aspect] = []
    seen: set[tuple] = set()
    for a in raw:
        a.setdefault("category", category)
        key = (a.get("brand_name", ""), a.get("brewery", ""), a.get("region", ""), tuple(a["features"]), a["grade"])
        if key in seen:
            continue
        seen.add(key)
        label = a.pop("free_text", None) or _aspect_label(a)
        prefer = [x for x in [*soft, *suggested] if x not in a["features"] and x != a["grade"]]
        a["prefer"] = list(dict.fromkeys(prefer))
        a["context"] = [*words, *hedges]
        out.append(Aspect(id=f"a{len(out) + 1}", label=label, **a))
    groups_seen = {a.one_of for a in out if a.one_of}
    for g in groups_seen:  # a group left with one member (duplicates dropped) is a plain aspect
        alone = [x for x in out if x.one_of == g]
        if len(alone) == 1:
            alone[0].one_of = ""
    return finalize(out, vocab)


def unknown_places(aspects: list[Aspect], vocab: Vocabulary) -> list[str]:
    """Regions a model named that are neither a label's region nor a place (its plan is not used)."""
    regions = vocab.values.get("region") or {}
    return [a.region for a in aspects if a.region and a.region not in regions and places.resolve(a.region) is None]


def finalize(aspects: list[Aspect], vocab: Vocabulary) -> list[Aspect]:
    """Every aspect, the planner's or a model's, resolved against the catalogue: a place at any level
    (九州, 島根県, 松江, Niigata) becomes the label regions inside it (`regions`, any of them) and the
    regions nearby (`near_regions`, same area) for alternatives; a category the catalogue does not
    hold keeps its name (no label matches it) and gets the nearest category to offer instead."""
    vocab_regions = list((vocab.values.get("region") or {}).values())
    out = []
    for a in aspects:
        upd: dict[str, Any] = {}
        if a.region:
            place = places.resolve(a.region)
            if a.region in vocab_regions and (place is None or place.level == "city"):
                upd["regions"] = [a.region]
            elif place is not None:
                upd["region"] = place.name
                upd["regions"] = [v for v in vocab_regions if places.within(v, place)]
            else:
                upd["regions"] = [a.region] if a.region in vocab_regions else []
            if place is not None:
                prefs = set(place.prefectures)
                areas = {x for p in place.prefectures for x in places.get().pref_areas.get(p, [])}
                near_prefs = prefs | {p for x in areas for p in places.get().area_prefs.get(x, [])}
                upd["near_regions"] = [
                    v
                    for v in vocab_regions
                    if v not in upd["regions"] and any(places.within(v, p) for p in sorted(near_prefs))
                ]
        if a.category and a.category not in CATEGORY_JA:
            other = lexicon.OTHER_CATEGORIES.get(a.category.lower())
            upd["near_category"] = other[1] if other else ""
        out.append(a.model_copy(update=upd) if upd else a)
    return out


# ------------------------------------------------------------------ searches per round
def _alias(feature: str) -> str:
    aliases = lexicon.FEATURES.get(feature) or ()
    return aliases[0] if aliases else ""


def _vector_phrase(a: Aspect) -> str:
    head = "".join(f"{x}の" for x in (a.region, a.brewery, a.brand_name) if x)
    feats = "で".join([*a.features, *a.prefer[:2]])
    noun = a.grade or CATEGORY_JA.get(a.category, a.category)
    text = head + (feats + "の" if feats else "") + noun
    return text.rstrip("の") or a.label


def searches_for(aspect: Aspect, round_no: int, subject_category: str = "", free_text: str = "") -> list[PlannedSearch]:
    """The searches for one uncovered aspect in round `round_no` (0-based)."""
    hard: dict[str, list[str]] = {}
    cat = subject_category or aspect.category
    if cat and cat not in CATEGORY_JA:  # a category no label has: search the nearest one (alternatives)
        cat = aspect.near_category
    if cat:
        hard["category"] = [cat]
    words = [x for x in (aspect.brand_name, aspect.brewery, aspect.region, aspect.grade) if x] + list(aspect.features)
    prefer = list(aspect.prefer[:3])
    if not words:
        text = free_text or " ".join(prefer) or aspect.label
        return [
            PlannedSearch(
                aspect=aspect.id, query_text=text, query_vector=text, filters=hard, k=[5, 10, 20][min(round_no, 2)]
            )
        ]
    exact = dict(hard)
    regions = aspect.regions or ([aspect.region] if aspect.region else [])
    if regions:
        exact["region"] = regions
    elif aspect.region:
        exact["region"] = [aspect.region]
    if aspect.brewery:
        exact["brewery"] = [aspect.brewery]
    vec = _vector_phrase(aspect)
    if aspect.region and not regions:
        # the place holds no label at all: look nearby (alternatives), the question's words as the query
        near = dict(hard, region=aspect.near_regions) if aspect.near_regions else dict(hard)
        q = " ".join([aspect.brand_name, aspect.grade, *aspect.features, *prefer]).strip() or " ".join(words)
        return [
            PlannedSearch(
                aspect=aspect.id, query_text=q, query_vector=vec, filters=near, k=[5, 10, 20][min(round_no, 2)]
            )
        ]
    if round_no == 0:
        text = " ".join([*[w for w in words if w != aspect.region], *prefer]) or " ".join(words)
        return [PlannedSearch(aspect=aspect.id, query_text=text, query_vector=vec, filters=exact, k=10)]
    if round_no == 1:
        syn = [x for f in aspect.features for x in (f, _alias(f)) if x]
        names = [x for x in (aspect.brand_name, aspect.brewery) if x]
        readings = [romaji_of(x) for x in names if romaji_of(x) and not x.isascii()]
        terms = " ".join([*names, *readings, aspect.grade, *syn, *prefer]).split()
        return [PlannedSearch(aspect=aspect.id, query_text=" ".join(terms), query_vector=vec, filters=exact, k=20)]
    # last round: the anchor's own filter browsed deeper, the features as the query; and nearby
    # (same area, or the anchor without the taste) for alternatives when nothing matches
    q = " ".join([aspect.brand_name, aspect.grade, *aspect.features]).strip() or " ".join(words)
    out = [PlannedSearch(aspect=aspect.id, query_text=q, query_vector=vec, filters=exact, k=20)]
    if aspect.near_regions:
        out.append(
            PlannedSearch(
                aspect=aspect.id, query_text=q, query_vector=vec, filters=dict(hard, region=aspect.near_regions), k=10
            )
        )
    return out
