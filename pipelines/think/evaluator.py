"""Deterministic evaluator: which aspects the evidence so far covers, and the smallest set of
documents that covers them all.

A hit covers an aspect when its metadata says so (same brand / brewery / region / category, every
asked feature among its label features, the grade in its product name); a hit without metadata (a
text document) covers it when its snippet names every part. Candidates are de-duplicated first
(same document; pHash within PHASH_THRESHOLD bits; near-identical text), keeping the best-scored
copy, then a greedy set cover picks, aspect by aspect, the hit covering the most still-uncovered
aspects (ties: higher score, then id), so the set is as small as the coverage allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.labels.schema import normalise_features
from pipelines.search.tokenizer import normalize
from pipelines.think import lexicon
from pipelines.think.models import Aspect, Evidence

NEAR_TEXT = 0.92  # Jaccard of character bigrams at or above which two snippets are one text


def _norm(v) -> str:
    return normalize(str(v or "")).strip()


def _bigrams(text: str) -> set[str]:
    t = "".join(_norm(text).split())
    return {t[i : i + 2] for i in range(len(t) - 1)} or {t}


def _hamming(a: str, b: str) -> int:
    try:
        return (int(a, 16) ^ int(b, 16)).bit_count()
    except ValueError:
        return 64


@dataclass
class Candidate:
    hit: dict
    score: float
    round: int
    covers: set[str] = field(default_factory=set)
    why: str = ""  # the model's reason, when a model judged

    @property
    def doc_id(self) -> str:
        return str(self.hit.get("doc_id") or self.hit.get("document_id") or self.hit["id"]).split("#")[0]


def _feature_forms(feature: str) -> list[str]:
    return [_norm(x) for x in (feature, *lexicon.FEATURES.get(feature, ()))]


def covers(hit: dict, a: Aspect) -> bool:  # noqa: C901 - one check per kind of constraint
    text = _norm(hit.get("text") or hit.get("snippet") or "")
    has_meta = any(hit.get(f) for f in ("brand_name", "brewery", "region", "label_features"))
    if a.region:
        got = _norm(hit.get("region"))
        wanted = [_norm(x) for x in (a.regions or [a.region])]
        if has_meta and got not in wanted:
            return False
        if not has_meta and not any(w and w in text for w in wanted):
            return False
    for f in ("brand_name", "brewery"):
        want = getattr(a, f)
        if want:
            got = _norm(hit.get(f))
            if got != _norm(want) and not (not has_meta and _norm(want) in text):
                return False
    other_kind = a.category not in ("sake", "juice")  # 焼酎: no label of ours is one
    if a.category and (hit.get("category") or other_kind) and _norm(hit.get("category")) != a.category:
        return False
    feats = {_norm(x) for x in normalise_features(hit.get("label_features"))}
    for feat in a.features:
        forms = _feature_forms(feat)
        if not (feats & set(forms)) and not (not has_meta and any(x in text for x in forms)):
            return False
    if a.grade:
        product = _norm(hit.get("product_name")) or text
        if _norm(a.grade) not in product:
            return False
        # 純米 must not be satisfied by 純米大吟醸 when the grade asked is the shorter one
        longer = [g for g in lexicon.GRADES if g != a.grade and a.grade in g and _norm(g) in product]
        if longer and _norm(a.grade) not in product.replace(_norm(longer[0]), ""):
            return False
    if not any((a.brand_name, a.brewery, a.region, a.features, a.grade, a.category)):
        words = [w for w in _norm(a.label).split() if len(w) > 1]
        return bool(words) and any(w in text for w in words)
    return True


def candidates(history: list[dict], aspects: list[Aspect]) -> list[Candidate]:
    """Every hit of the history once (best score kept), with the aspects it covers."""
    best: dict[str, Candidate] = {}
    for rnd, entry in enumerate(history):
        for hit in entry.get("results") or []:
            cand = Candidate(hit, float(hit.get("score") or 0.0), rnd)
            cur = best.get(cand.doc_id)
            if cur is None or cand.score > cur.score:
                best[cand.doc_id] = cand
    out = list(best.values())
    for c in out:
        c.covers = {a.id for a in aspects if covers(c.hit, a)}
    return out


def dedup(cands: list[Candidate], phash_bits: int) -> tuple[list[Candidate], int]:
    """Near-duplicates collapsed onto the best-scored copy; returns (kept, how many were dropped)."""
    kept: list[Candidate] = []
    grams: list[set[str]] = []
    dropped = 0
    for c in sorted(cands, key=lambda c: (-c.score, c.doc_id)):
        ph = str(c.hit.get("phash") or "")
        g = _bigrams(c.hit.get("text") or "") if c.hit.get("text") else set()
        dup = None
        for i, k in enumerate(kept):
            kph = str(k.hit.get("phash") or "")
            if (
                ph
                and kph
                and _hamming(ph, kph) <= phash_bits
                or g
                and grams[i]
                and len(g & grams[i]) / len(g | grams[i]) >= NEAR_TEXT
            ):
                dup = k
            if dup is not None:
                break
        if dup is not None:
            dup.covers |= c.covers
            dropped += 1
            continue
        kept.append(c)
        grams.append(g)
    return kept, dropped


def preferred(hit: dict, aspects: list[Aspect]) -> int:
    """How many of the aspects' preferences (said loosely, hedged, suggested by the context) a hit has."""
    feats = {_norm(x) for x in normalise_features(hit.get("label_features"))}
    product = _norm(hit.get("product_name"))
    prefs = {p for a in aspects for p in a.prefer}
    return sum(1 for p in prefs if set(_feature_forms(p)) & feats or (p in lexicon.GRADES and _norm(p) in product))


def select(cands: list[Candidate], aspects: list[Aspect], max_evidence: int) -> list[Candidate]:
    """Greedy set cover, in aspect order, at most max_evidence items; among equals, the hit with
    more of the preferences first. An alternative (A か B) whose group another member satisfies
    still gets its own label when one was found (the caller may want to compare)."""
    uncovered = [a.id for a in aspects if any(a.id in c.covers for c in cands)]
    by_id = {a.id: a for a in aspects}
    chosen: list[Candidate] = []
    while uncovered and len(chosen) < max_evidence:
        target = uncovered[0]
        pool = [c for c in cands if target in c.covers and c not in chosen]
        want = [by_id[target]]
        best = max(pool, key=lambda c: (len(c.covers & set(uncovered)), preferred(c.hit, want), c.score, c.doc_id))
        chosen.append(best)
        uncovered = [x for x in uncovered if x not in best.covers]
    return chosen


@dataclass
class Coverage:
    covered: list[str]
    missing: list[str]  # aspects the answer still needs (an alternative whose group is satisfied is not)
    evidence: list[Candidate]
    duplicates_dropped: int
    n_candidates: int
    unfound: list[str] = field(default_factory=list)  # alternatives not found, their group satisfied by another
    nearest: dict[str, list[tuple[Candidate, list[str]]]] = field(default_factory=dict)  # aspect -> (hit, lacks)


def split_missing(aspects: list[Aspect], got: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(covered, missing, unfound): "A か B" is satisfied by either; "A と B" needs both."""
    satisfied_groups = {a.one_of for a in aspects if a.one_of and a.id in got}
    covered = [a.id for a in aspects if a.id in got]
    missing = [a.id for a in aspects if a.id not in got and not (a.one_of and a.one_of in satisfied_groups)]
    unfound = [a.id for a in aspects if a.id not in got and a.one_of and a.one_of in satisfied_groups]
    return covered, missing, unfound


def evaluate(history: list[dict], aspects: list[Aspect], max_evidence: int, phash_bits: int = 8) -> Coverage:
    cands = candidates(history, aspects)
    kept, dropped = dedup(cands, phash_bits)
    chosen = select(kept, aspects, max_evidence)
    got = set().union(*(c.covers for c in chosen)) if chosen else set()
    covered, missing, unfound = split_missing(aspects, got)
    cov = Coverage(covered, missing, chosen, dropped, len(cands), unfound)
    cov.nearest = nearest(kept, [a for a in aspects if a.id in missing or a.id in unfound])
    return cov


def _lacks(hit: dict, a: Aspect) -> list[str]:
    """What of the aspect a hit does not have (its constraints, one by one)."""
    out = []
    if a.region and _norm(hit.get("region")) not in {_norm(x) for x in (a.regions or [a.region])}:
        out.append(a.region)
    for f in ("brand_name", "brewery"):
        if getattr(a, f) and _norm(hit.get(f)) != _norm(getattr(a, f)):
            out.append(getattr(a, f))
    if a.category and _norm(hit.get("category")) != a.category:
        out.append(CATEGORY_NAMES.get(a.category, a.category))
    feats = {_norm(x) for x in normalise_features(hit.get("label_features"))}
    out += [f for f in a.features if not (feats & set(_feature_forms(f)))]
    if a.grade and _norm(a.grade) not in _norm(hit.get("product_name")):
        out.append(a.grade)
    return out


CATEGORY_NAMES = {"sake": "日本酒", "juice": "ジュース"}


def nearest(cands: list[Candidate], aspects: list[Aspect], k: int = 3) -> dict[str, list[tuple[Candidate, list[str]]]]:
    """Per aspect not found: the hits that come closest (fewest of its constraints missing; the
    place kept over the taste), with what each lacks. Only hits that share something with it."""
    out: dict[str, list[tuple[Candidate, list[str]]]] = {}
    for a in aspects:
        n_parts = sum(bool(x) for x in (a.region, a.brand_name, a.brewery, a.category, a.grade)) + len(a.features)
        scored = []
        for c in cands:
            lacks = _lacks(c.hit, a)
            if not lacks or len(lacks) >= n_parts:
                continue
            place_kept = 0 if a.region and a.region in lacks else 1
            scored.append(((len(lacks), -place_kept, -preferred(c.hit, [a]), -c.score, c.doc_id), c, lacks))
        scored.sort(key=lambda x: x[0])
        out[a.id] = [(c, lacks) for _, c, lacks in scored[:k]]
    return out


def from_judgement(
    history: list[dict], aspects: list[Aspect], judged: dict[str, tuple[list[str], str]], phash_bits: int = 8
) -> Coverage:
    """A model's judgement as a Coverage: the documents it named (near-duplicates collapsed), each
    covering the aspects it was named for."""
    cands = candidates(history, [])
    kept, dropped = dedup(cands, phash_bits)
    by_id = {c.doc_id: c for c in cands}
    rep = {}
    for c in cands:  # a dropped copy stands for the kept one it duplicates
        rep[c.doc_id] = next((k for k in kept if k.doc_id == c.doc_id), None)
    chosen: list[Candidate] = []
    for aid, (doc_ids, why) in judged.items():
        for d in doc_ids:
            c = rep.get(d) or by_id[d]
            c.covers.add(aid)
            c.why = why or c.why
            if c not in chosen:
                chosen.append(c)
    covered, missing, unfound = split_missing(aspects, set(judged))
    cov = Coverage(covered, missing, chosen, dropped, len(cands), unfound)
    cov.nearest = nearest(kept, [a for a in aspects if a.id in missing or a.id in unfound])
    return cov


def _why(c: Candidate, aspects: list[Aspect]) -> str:
    h = c.hit
    names = [a.label for a in aspects if a.id in c.covers]
    facts = [str(h.get(f)) for f in ("brand_name", "product_name", "brewery", "region") if h.get(f)]
    feats = normalise_features(h.get("label_features"))
    desc = " / ".join(facts) + (f"（特徴: {'、'.join(feats[:6])}）" if feats else "")
    return f"{'・'.join(names)} を満たす: {desc}".strip() if desc else f"{'・'.join(names)} を満たす"


def to_evidence(chosen: list[Candidate], aspects: list[Aspect]) -> list[Evidence]:
    out = []
    for c in chosen:
        h = c.hit
        page = h.get("page")
        snippet = str(h.get("text") or h.get("snippet") or "")[:1000]
        out.append(
            Evidence(
                document_id=c.doc_id,
                pages=[int(page)] if isinstance(page, int) else [],
                snippets=[snippet] if snippet else [],
                score=round(c.score, 6),
                why_relevant=c.why or _why(c, aspects),
                aspects=sorted(c.covers, key=lambda x: int(x[1:]) if x[1:].isdigit() else 0),
            )
        )
    return out


def _hit_name(h: dict) -> str:
    name = " ".join(str(h.get(f)) for f in ("product_name",) if h.get(f)) or str(h.get("brand_name") or h.get("id"))
    where = "・".join(str(h.get(f)) for f in ("region", "brewery") if h.get(f))
    return f"{name}（{where}）" if where else name


def alternatives_text(cov: Coverage, aspects: list[Aspect]) -> str:
    """The nearest labels for what was not found, each with what it lacks ("" when none)."""
    by_id = {a.id: a for a in aspects}
    parts = []
    for aid, near in cov.nearest.items():
        if not near:
            continue
        items = "、".join(f"{_hit_name(c.hit)}: {'・'.join(lacks)} ではない" for c, lacks in near)
        parts.append(f"{by_id[aid].label} の代わりに近いもの: {items}")
    return "。".join(parts)


def searched_text(history: list[dict]) -> str:
    queries = []
    for h in history:
        for q in h.get("queries") or []:
            text = q.get("query_text") if isinstance(q, dict) else str(q)
            flt = q.get("filters") if isinstance(q, dict) else None
            region = "・".join((flt or {}).get("region") or [])
            item = f"{text}［{region}］" if region else str(text)
            if item not in queries:
                queries.append(item)
    return "検索した語: " + " / ".join(queries[:8]) if queries else ""


def coverage_notes(
    cov: Coverage, aspects: list[Aspect], rounds: int, final: bool, history: list[dict] | None = None
) -> str:
    by_id = {a.id: a for a in aspects}
    parts = []
    if cov.covered:
        parts.append("充足: " + "、".join(by_id[i].label for i in cov.covered))
    if cov.unfound:
        parts.append(
            "どちらか一方で可のため他方で充足: " + "、".join(by_id[i].label for i in cov.unfound) + " は該当なし"
        )
    if cov.missing:
        tail = f"（{rounds} 回検索しても該当なし）" if final else "（再検索中）"
        parts.append("不足: " + "、".join(by_id[i].label for i in cov.missing) + tail)
    places = [
        f"{a.region} → {'・'.join(a.regions) or 'ラベルなし'}" for a in aspects if a.region and a.regions != [a.region]
    ]
    if places:
        parts.append("地名の解決: " + "、".join(dict.fromkeys(places)))
    prefer = list(dict.fromkeys(p for a in aspects for p in a.prefer))
    if prefer:
        one = [Aspect.model_validate({"id": "x", "label": "", "prefer": [p]}) for p in prefer]
        hit = [p for p, a in zip(prefer, one, strict=True) if any(preferred(c.hit, [a]) for c in cov.evidence)]
        note = "希望（順位付けのみ）: " + "、".join(prefer)
        parts.append(note + (f"（満たす根拠あり: {'、'.join(hit)}）" if hit else "（満たす根拠なし）"))
    context = list(dict.fromkeys(w for a in aspects for w in a.context))
    if context:
        parts.append("文脈（ラベルに表示されない語、絞り込みには使わない）: " + "、".join(context))
    if final and (cov.missing or cov.unfound):
        alt = alternatives_text(cov, aspects)
        if alt:
            parts.append(alt)
        searched = searched_text(history or [])
        if searched:
            parts.append(searched)
    if cov.duplicates_dropped:
        parts.append(f"重複 {cov.duplicates_dropped} 件を除外")
    return "。".join(parts) or "根拠なし"
