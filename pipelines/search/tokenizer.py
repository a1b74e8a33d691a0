"""Terms for the lexical index: Japanese-aware, robust to romaji, English spellings and typos.

A text becomes terms of several kinds (each kind is a namespace, so they never collide):

  (none) character bigrams of every CJK/kana run, or the run itself when it is one character:
         brand names (獺祭, 北の誉) and places (小樽) match exactly as substrings, with no
         dictionary that might split or misread a rare brand name.
  u:     single kanji of a run, a weak signal that still matches a one-character slip (北乃誉).
  r:     romaji words: ASCII words as written, and the reading of every morpheme (fugashi +
         unidic-lite) in romaji, so "dassai" finds 獺祭 and "Otaru" finds 小樽.
  t:     character trigrams of romaji per run ("kitanohomare"), so a romaji typo ("dasai",
         "kitanohomre") or a different word split ("kita no homare") still shares most terms.
  g:     the glossary's concepts the text names (pipelines.search.glossary): g:辛口 for 辛口, からくち and
         "dry" alike, so an English question meets a Japanese label (and the other way round).

Romaji is normalised so Hepburn, Kunrei and English spellings meet: long vowels collapse
(hokkaidou/hokkaido, niigata/nigata), si/shi, tu/tsu, zi/ji ... become one spelling.

Which kinds are used is the scheme (DEFAULT_SCHEME); bench/search_eval.py measures each scheme's
retrieval quality on the evaluation set, and the chosen one is recorded per indexed document
(TOKENIZER_VERSION) so a change of scheme re-tokenizes stored text instead of mixing two.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

import jaconv

from pipelines.search import glossary

ALL_KINDS = ("bi", "uni", "romaji", "tri", "gloss")
DEFAULT_SCHEME: tuple[str, ...] = ("bi", "romaji", "tri", "gloss")
NO_GLOSSARY: tuple[str, ...] = tuple(k for k in DEFAULT_SCHEME if k != "gloss")
# A change of scheme or of the glossary file re-tokenizes stored text (pipelines.search.index).
TOKENIZER_VERSION = "ja1:" + "+".join(DEFAULT_SCHEME) + ":" + glossary.file_version()

_CJK = r"\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff々〆ヶ"
_RUN = re.compile(rf"[0-9a-z]+|[{_CJK}]+")
_KANJI = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff々]")

# Kunrei/Nihon-shiki and English spellings -> one form; then long vowels collapse.
_ROMAJI_RULES = [
    ("sya", "sha"),
    ("syu", "shu"),
    ("syo", "sho"),
    ("tya", "cha"),
    ("tyu", "chu"),
    ("tyo", "cho"),
    ("zya", "ja"),
    ("zyu", "ju"),
    ("zyo", "jo"),
    ("jya", "ja"),
    ("jyu", "ju"),
    ("jyo", "jo"),
    ("si", "shi"),
    ("ti", "chi"),
    ("tu", "tsu"),
    ("hu", "fu"),
    ("zi", "ji"),
    ("di", "ji"),
    ("du", "zu"),
    ("wo", "o"),
    ("nm", "mm"),
    ("nb", "mb"),
    ("np", "mp"),
]
_LONG = re.compile(r"([aiueo])\1+|ou|oh(?![aiueo])")


def normalize(text: str) -> str:
    """NFKC + lower case: full-width letters and digits, half-width kana become one form."""
    return unicodedata.normalize("NFKC", text or "").lower()


def normalize_romaji(word: str) -> str:
    w = re.sub(r"[^a-z]", "", word.lower())
    for a, b in _ROMAJI_RULES:
        w = w.replace(a, b)
    w = w.replace("shhi", "shi").replace("chhi", "chi").replace("tsuu", "tsu")
    return _LONG.sub(lambda m: m.group(1) or "o", w)


def kana_to_romaji(kana: str) -> str:
    return normalize_romaji(jaconv.kana2alphabet(jaconv.kata2hira(kana)))


_tagger_local = threading.local()


def _tagger():
    tagger = getattr(_tagger_local, "tagger", None)
    if tagger is None:  # fugashi taggers are not thread-safe: one per thread
        import fugashi

        tagger = _tagger_local.tagger = fugashi.Tagger()
    return tagger


@lru_cache(maxsize=65536)
def run_readings(run: str) -> tuple[str, ...]:
    """Romaji readings of the morphemes of one Japanese run (unknown words: the kana as written)."""
    out = []
    for word in _tagger()(run):
        kana = getattr(word.feature, "kana", None) or word.surface
        r = kana_to_romaji(kana)
        if r:
            out.append(r)
    return tuple(out)


def romaji_of(text: str) -> str:
    """The whole text in normalised romaji without spaces (readings for CJK, ASCII as is)."""
    parts = []
    for run in _RUN.findall(normalize(text)):
        parts.append(normalize_romaji(run) if run.isascii() else "".join(run_readings(run)))
    return "".join(parts)


def _trigrams(word: str) -> list[str]:
    if len(word) <= 3:
        return [word] if word else []
    return [word[i : i + 3] for i in range(len(word) - 2)]


def tokenize(text: str, scheme: tuple[str, ...] = DEFAULT_SCHEME, *, broader: bool = True) -> list[str]:
    """The terms of a text. With "gloss": an English/romaji word the glossary reads as a concept
    ("dry", "Hokkaido") gives only its g: term, not its romaji and trigrams, which would only match
    unrelated readings ("hokkaido" shares "kai" with akai). `broader`: also the broader concepts a
    concept implies (a label from 小樽 is also from 北海道); a query leaves them out (asking for 小樽
    is not asking for 北海道)."""
    out: list[str] = []
    norm = normalize(text)
    gloss = glossary.get() if "gloss" in scheme else None
    matches = gloss.matches(norm) if gloss is not None else []
    covered = [(m.start, m.end) for m in matches if m.surface.isascii()]
    for run in _RUN.finditer(norm):
        word = run.group()
        if word.isascii():
            if not any(a <= run.start() and run.end() <= b for a, b in covered):
                out.extend(_ascii_terms(word, scheme))
        else:
            out.extend(_cjk_terms(word, scheme))
    if gloss is not None:
        for m in matches:
            for c in m.concepts:
                out.append(GLOSS_PREFIX + c)
                if broader:
                    out.extend(GLOSS_PREFIX + b for b in gloss.broader(c))
    return out


GLOSS_PREFIX = "g:"


def _ascii_terms(run: str, scheme: tuple[str, ...]) -> list[str]:
    if run.isdigit():
        return [run]
    out: list[str] = []
    word = normalize_romaji(run) if ("romaji" in scheme or "tri" in scheme) else run
    if "romaji" in scheme:
        if word:
            out.append("r:" + word)
    elif "tri" not in scheme:
        out.append(word)
    if "tri" in scheme:
        out.extend("t:" + g for g in _trigrams(word))
    return out


def _cjk_terms(run: str, scheme: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    if "bi" in scheme:
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    if "uni" in scheme:
        out.extend("u:" + c for c in run if _KANJI.match(c))
    if "romaji" in scheme or "tri" in scheme:
        readings = run_readings(run)
        if "romaji" in scheme:
            out.extend("r:" + r for r in readings)
        if "tri" in scheme:
            out.extend("t:" + g for g in _trigrams("".join(readings)))
    return out
