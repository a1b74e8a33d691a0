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


def covers(hit: dict, a: Aspect) -> bool:
    text = _norm(hit.get("text") or hit.get("snippet") or "")
    has_meta = any(hit.get(f) for f in ("brand_name", "brewery", "region", "label_features"))
    for f in ("brand_name", "brewery", "region"):
        want = getattr(a, f)
        if want:
            got = _norm(hit.get(f))
            if got != _norm(want) and not (not has_meta and _norm(want) in text):
                return False
    if a.category and hit.get("category") and _norm(hit["category"]) != a.category:
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
    if not any((a.brand_name, a.brewery, a.region, a.features, a.grade)):
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


def select(cands: list[Candidate], aspects: list[Aspect], max_evidence: int) -> list[Candidate]:
    """Greedy set cover, in aspect order, at most max_evidence items."""
    uncovered = [a.id for a in aspects if any(a.id in c.covers for c in cands)]
    chosen: list[Candidate] = []
    while uncovered and len(chosen) < max_evidence:
        target = uncovered[0]
        pool = [c for c in cands if target in c.covers and c not in chosen]
        best = max(pool, key=lambda c: (len(c.covers & set(uncovered)), c.score, c.doc_id))
        chosen.append(best)
        uncovered = [x for x in uncovered if x not in best.covers]
    return chosen


@dataclass
class Coverage:
    covered: list[str]
    missing: list[str]
    evidence: list[Candidate]
    duplicates_dropped: int
    n_candidates: int


def evaluate(history: list[dict], aspects: list[Aspect], max_evidence: int, phash_bits: int = 8) -> Coverage:
    cands = candidates(history, aspects)
    kept, dropped = dedup(cands, phash_bits)
    chosen = select(kept, aspects, max_evidence)
    got = set().union(*(c.covers for c in chosen)) if chosen else set()
    covered = [a.id for a in aspects if a.id in got]
    missing = [a.id for a in aspects if a.id not in got]
    return Coverage(covered, missing, chosen, dropped, len(cands))


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
    covered = [a.id for a in aspects if a.id in judged]
    missing = [a.id for a in aspects if a.id not in judged]
    return Coverage(covered, missing, chosen, dropped, len(cands))


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


def coverage_notes(cov: Coverage, aspects: list[Aspect], rounds: int, final: bool) -> str:
    by_id = {a.id: a for a in aspects}
    parts = []
    if cov.covered:
        parts.append("充足: " + "、".join(by_id[i].label for i in cov.covered))
    if cov.missing:
        tail = f"（{rounds} 回検索しても該当なし）" if final else "（再検索中）"
        parts.append("不足: " + "、".join(by_id[i].label for i in cov.missing) + tail)
    if cov.duplicates_dropped:
        parts.append(f"重複 {cov.duplicates_dropped} 件を除外")
    return "。".join(parts) or "根拠なし"
