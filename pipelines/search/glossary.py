"""THE glossary (pipelines/data/glossary.tsv): label words across languages and scripts.

One concept per line: the canonical Japanese form a label writes (辛口, 発泡, 山田錦, 小樽), its English
and romaji forms (dry, sparkling, Yamada Nishiki, Otaru), other Japanese spellings (からくち, 濁り) and,
for the think planner only, loose forms that are too short or too common to index (泡, 燗).

Who uses it:
  - search tokenization (pipelines.search.tokenizer, kind "gloss"): every concept a text names becomes a
    term g:<canonical>, at index time (the label text) and at query time (the question), so "dry"
    and 辛口 meet in the BM25 index.
  - the not-found check of search (`pipelines.search.service`): the concepts a question names that no
    indexed label carries.
  - the think planner (pipelines.think.lexicon): features, grades and categories with their aliases.

Matching: the text is NFKC-normalised and lower-cased. Japanese forms match as substrings, leftmost
and longest first (山梨 is the region, not 梨 the fruit; 泡盛 is not 発泡). English forms match whole
words, several words in a row for a multiword form ("yamada nishiki", "light and crisp"), each word
in its singular ("apples", "strawberries") and normalised as romaji is (honjouzou = honjozo); the
longest form starting at a word wins. A form may mean several concepts ("sparkling": 発泡 for
sake, 炭酸 for juice). A concept `within` another also names the broader one (小樽 → 北海道).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jaconv

PATH = Path(__file__).resolve().parent / "data" / "glossary.tsv"
KINDS = ("category", "grade", "taste", "style", "rice", "serving", "label", "juice", "fruit", "region", "brand")
FEATURE_KINDS = ("taste", "style", "rice", "serving", "label", "juice", "fruit")
_COLUMNS = ("ja", "kind", "en", "alt", "loose", "within", "code", "near")
_WORD = re.compile(r"[a-z0-9]+")
_KANA_ONLY = re.compile(r"^[\u3040-\u30ffー]+$")


@dataclass(frozen=True)
class Entry:
    ja: str
    kind: str
    en: tuple[str, ...]
    alt: tuple[str, ...]
    loose: tuple[str, ...]
    within: str
    code: str
    near: str  # the catalogue category to offer an alternative from when no label has this concept


@dataclass(frozen=True)
class Match:
    """One place a text names a concept: the text as written, and what it may mean."""

    start: int
    end: int
    surface: str
    concepts: tuple[str, ...]


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text or "").lower()


def singular(word: str) -> str:
    """A simple English singular: strawberries -> strawberry, peaches -> peach, apples -> apple."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "xes", "oes", "sses")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@lru_cache(maxsize=65536)
def word_key(word: str) -> str:
    """How an English/romaji word is compared: singular, then romaji-normalised; digits as written."""
    if word.isdigit():
        return word
    from pipelines.search.tokenizer import normalize_romaji  # tokenize_ja imports this module

    return normalize_romaji(singular(word)) or word


def _split(cell: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in cell.split("|") if v.strip())


def _kana_variants(form: str) -> set[str]:
    """A kana-only form in both hiragana and katakana."""
    if not _KANA_ONLY.match(form):
        return {form}
    return {form, jaconv.kata2hira(form), jaconv.hira2kata(form)}


class Glossary:
    def __init__(self, entries: list[Entry], version: str):
        self.entries = entries
        self.version = version
        self.by_ja = {e.ja: e for e in entries}
        ja_forms: dict[str, list[str]] = {}
        en_forms: dict[tuple[str, ...], list[str]] = {}
        for e in entries:
            for form in (e.ja, *e.alt):
                for v in _kana_variants(_norm(form)):
                    ja_forms.setdefault(v, [])
                    if e.ja not in ja_forms[v]:
                        ja_forms[v].append(e.ja)
            for form in e.en:
                key = tuple(word_key(w) for w in _WORD.findall(_norm(form)))
                if key:
                    en_forms.setdefault(key, [])
                    if e.ja not in en_forms[key]:
                        en_forms[key].append(e.ja)
        self.ja_forms = ja_forms
        self.en_forms = en_forms
        self.max_words = max((len(k) for k in en_forms), default=1)
        alternation = "|".join(re.escape(f) for f in sorted(ja_forms, key=lambda f: (-len(f), f)))
        self._ja_re = re.compile(alternation) if alternation else None

    def __len__(self) -> int:
        return len(self.entries)

    def matches(self, text: str) -> list[Match]:
        """Every place `text` names a concept, in text order (positions in the normalised text)."""
        t = _norm(text)
        out: list[Match] = []
        if self._ja_re is not None:
            for m in self._ja_re.finditer(t):
                out.append(Match(m.start(), m.end(), m.group(), tuple(self.ja_forms[m.group()])))
        words = [(m.start(), m.end(), word_key(m.group())) for m in _WORD.finditer(t)]
        i = 0
        while i < len(words):
            for n in range(min(self.max_words, len(words) - i), 0, -1):
                concepts = self.en_forms.get(tuple(w for _, _, w in words[i : i + n]))
                if concepts:
                    start, end = words[i][0], words[i + n - 1][1]
                    out.append(Match(start, end, t[start:end], tuple(concepts)))
                    i += n
                    break
            else:
                i += 1
        out.sort(key=lambda m: m.start)
        return out

    def broader(self, concept: str) -> list[str]:
        """The concepts `concept` lies within (小樽 -> [北海道]), nearest first."""
        out: list[str] = []
        e = self.by_ja.get(concept)
        while e is not None and e.within and e.within not in out and e.within != concept:
            out.append(e.within)
            e = self.by_ja.get(e.within)
        return out

    def concepts(self, text: str, *, broader: bool = True) -> list[str]:
        """The concepts `text` names, once per mention, each followed by the broader ones it implies
        (unless `broader` is False)."""
        out: list[str] = []
        for m in self.matches(text):
            for c in m.concepts:
                out.append(c)
                if broader:
                    out.extend(self.broader(c))
        return out

    def near_category(self, concepts: list[str]) -> str:
        """The one catalogue category to offer alternatives from for these missing concepts ("" when
        they name none, or disagree)."""
        near = {self.by_ja[c].near for c in concepts if c in self.by_ja and self.by_ja[c].near}
        return near.pop() if len(near) == 1 else ""

    def kind_of(self, concept: str) -> str:
        e = self.by_ja.get(concept)
        return e.kind if e else ""

    def of_kinds(self, *kinds: str) -> list[Entry]:
        return [e for e in self.entries if e.kind in kinds]


def parse(text: str) -> list[Entry]:
    """Entries of a glossary TSV (header line `ja<TAB>kind...`, # comments, blank lines skipped)."""
    entries: list[Entry] = []
    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = line.split("\t")
        if [c.strip() for c in cells[:2]] == ["ja", "kind"]:  # the header
            continue
        cells += [""] * (len(_COLUMNS) - len(cells))
        if len(cells) > len(_COLUMNS):
            raise ValueError(f"glossary line {n}: {len(cells)} columns, expected {len(_COLUMNS)}")
        ja, kind, en, alt, loose, within, code, near = (c.strip() for c in cells)
        if not ja:
            raise ValueError(f"glossary line {n}: no canonical form")
        if kind not in KINDS:
            raise ValueError(f"glossary line {n}: unknown kind {kind!r}")
        if ja in seen:
            raise ValueError(f"glossary line {n}: {ja} listed twice")
        seen.add(ja)
        entries.append(Entry(ja, kind, _split(en), _split(alt), _split(loose), within, code, near))
    known = {e.ja for e in entries}
    for e in entries:
        if e.within and e.within not in known:
            raise ValueError(f"glossary: {e.ja} lies within {e.within}, which is not listed")
    return entries


def _version(raw: str) -> str:
    return hashlib.sha1(raw.encode(), usedforsecurity=False).hexdigest()[:8]


def load(path: Path | str = PATH) -> Glossary:
    raw = Path(path).read_text(encoding="utf-8")
    return Glossary(parse(raw), _version(raw))


@lru_cache(maxsize=1)
def file_version() -> str:
    """A digest of the project's glossary file (part of the tokenizer version), without parsing it."""
    return _version(PATH.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def get() -> Glossary:
    """The project's glossary, loaded once per process."""
    return load()
