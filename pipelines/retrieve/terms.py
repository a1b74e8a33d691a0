"""Terms for BM25 over a request's chunks, and the query's weighted terms.

Japanese (and any CJK run) goes through pipelines.search.tokenizer (character bigrams + romaji
readings). English words are lower-cased, stop words dropped and Snowball-stemmed, so "founders"
meets "founder" and "watched" meets "watching"; the tokenizer's romaji/trigram terms are not used
for English, where they mostly add noise. Numbers stay as written (a cross-check signal).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import OrderedDict
from functools import lru_cache

import snowballstemmer

from pipelines.search import tokenizer as tokenize_ja

_WORD = re.compile(r"[0-9]+(?:[.,][0-9]+)*|[a-z]+(?:'[a-z]+)?")
_CJK_RUN = re.compile(r"[\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff々〆ヶー]+")
# Only the CJK kinds of the Japanese tokenizer: bigrams and readings.
_JA_SCHEME = ("bi", "romaji")

STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "just",
        "let's",
        "may",
        "me",
        "might",
        "more",
        "most",
        "much",
        "must",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "one",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shall",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "very",
        "was",
        "wasn't",
        "we",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "won't",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "many",
        "according",
        "did",
        "does",
        "say",
        "says",
        "said",
        "tell",
        "told",
        "thing",
        "things",
        "way",
        "ways",
        "get",
        "gets",
        "got",
        "make",
        "makes",
        "made",
    ]
)

_stemmer_local = threading.local()
_CACHE_MAX = 50_000
_cache: OrderedDict[str, tuple[str, ...]] = OrderedDict()
_cache_lock = threading.Lock()


@lru_cache(maxsize=200_000)
def _stem_word(word: str) -> str:
    st = getattr(_stemmer_local, "stemmer", None)
    if st is None:  # snowball stemmers keep state: one per thread
        st = _stemmer_local.stemmer = snowballstemmer.stemmer("english")
    return st.stemWord(word)


def _stem(words: list[str]) -> list[str]:
    return [_stem_word(w) for w in words]


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower().replace("’", "'")


def terms(text: str) -> tuple[str, ...]:
    """The BM25 terms of a text (cached per text: inline documents repeat across requests)."""
    with _cache_lock:
        hit = _cache.get(text)
        if hit is not None:
            _cache.move_to_end(text)
            return hit
    norm = _normalise(text)
    words = [w.removesuffix("'s") for w in _WORD.findall(norm)]
    out = [w.replace(",", "") for w in words if w[0].isdigit()]
    out += _stem([w for w in words if not w[0].isdigit() and w not in STOP_WORDS and len(w) > 1])
    for run in _CJK_RUN.findall(norm):
        out.extend(tokenize_ja.tokenize(run, _JA_SCHEME))
    result = tuple(out)
    with _cache_lock:
        _cache[text] = result
        if len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)
    return result


def numbers(text: str) -> set[str]:
    return {w.replace(",", "") for w in re.findall(r"[0-9]+(?:[.,][0-9]+)*", unicodedata.normalize("NFKC", text))}


_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z'’-]+")


def names(text: str) -> set[str]:
    """Capitalised words not at a sentence start, lower-cased: a cheap named-entity signal."""
    return {m.group(0).lower().removesuffix("'s").removesuffix("’s") for m in _NAME.finditer(text.strip())}
