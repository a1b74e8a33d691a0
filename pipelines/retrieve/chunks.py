"""Sentences and chunks of a document, as character offsets into its text.

Sentences end at . ! ? (followed by a space or the end) and at Japanese 。！？, and at every
paragraph break (a blank line or a newline). A chunk is a run of whole sentences of one
paragraph-ish block up to `max_chars`; a single sentence longer than that is cut at `max_chars`.
Offsets are characters; `byte_span` turns them into UTF-8 byte offsets for the response.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache

# Where a sentence ends: . ! ? followed by whitespace or the end (so "3.5" does not), optional closing
# quotes/brackets; Japanese 。！？ anywhere; and every line break.
_BOUNDARY = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)|[。！？]+[」』）)]*|\n")


@dataclass(frozen=True)
class Sentence:
    start: int
    end: int
    paragraph_end: bool  # a line break follows: a chunk should not run across it when it can avoid it


@dataclass(frozen=True)
class Chunk:
    doc_index: int
    ordinal: int  # position of the chunk in its document
    start: int
    end: int
    text: str
    sentences: tuple[tuple[int, int], ...]  # (start, end) character offsets into the document


def sentences(text: str) -> list[Sentence]:
    out: list[Sentence] = []
    pos = 0
    for m in _BOUNDARY.finditer(text):
        _add(out, text, pos, m.end())
        pos = m.end()
    _add(out, text, pos, len(text))
    return out


def _add(out: list[Sentence], text: str, a: int, b: int) -> None:
    raw = text[a:b]
    s, e = a + (len(raw) - len(raw.lstrip())), a + len(raw.rstrip())
    if e > s:
        out.append(Sentence(s, e, False))
    elif out and "\n" in raw:  # whitespace with a line break: the previous sentence closed a paragraph
        out[-1] = Sentence(out[-1].start, out[-1].end, True)
    if e > s and "\n" in text[e:b]:
        out[-1] = Sentence(s, e, True)


def chunk_document(doc_index: int, text: str, max_chars: int) -> list[Chunk]:
    """Whole sentences packed into chunks of at most `max_chars`, preferring paragraph breaks."""
    cached = _chunk_cache(text, max_chars)
    if doc_index == 0:
        return list(cached)
    return [dataclasses.replace(c, doc_index=doc_index) for c in cached]


@lru_cache(maxsize=20_000)  # inline documents repeat across requests
def _chunk_cache(text: str, max_chars: int) -> tuple[Chunk, ...]:
    return tuple(_chunk(0, text, max_chars))


def pieces(text: str, max_chars: int) -> list[tuple[int, int, bool]]:
    """The document's sentences as (start, end, paragraph_end), a sentence longer than `max_chars`
    cut into pieces (at a space when there is one): the units chunks and passages are made of."""
    pieces: list[tuple[int, int, bool]] = []
    for s in sentences(text):
        start = s.start
        while s.end - start > max_chars:  # an overlong sentence: cut it, at a space when there is one
            cut = text.rfind(" ", start + max_chars // 2, start + max_chars)
            cut = cut if cut > start else start + max_chars
            pieces.append((start, cut, False))
            start = cut
            while start < s.end and text[start].isspace():
                start += 1
        if s.end > start:
            pieces.append((start, s.end, s.paragraph_end))
    return pieces


@lru_cache(maxsize=2_000)
def pieces_cached(text: str, max_chars: int) -> tuple[tuple[int, int, bool], ...]:
    return tuple(pieces(text, max_chars))


def _chunk(doc_index: int, text: str, max_chars: int) -> list[Chunk]:
    pieces = pieces_cached(text, max_chars)
    chunks: list[Chunk] = []
    current: list[tuple[int, int, bool]] = []

    def flush() -> None:
        if current:
            a, b = current[0][0], current[-1][1]
            chunks.append(Chunk(doc_index, len(chunks), a, b, text[a:b], tuple((x, y) for x, y, _ in current)))
            current.clear()

    for piece in pieces:
        if current and piece[1] - current[0][0] > max_chars:
            # Too long with this sentence: close at the last paragraph break inside, if any.
            breaks = [i for i, p in enumerate(current) if p[2]]
            if breaks and breaks[-1] < len(current) - 1:
                rest = current[breaks[-1] + 1 :]
                del current[breaks[-1] + 1 :]
                flush()
                current.extend(rest)
                if piece[1] - current[0][0] > max_chars:
                    flush()
            else:
                flush()
        current.append(piece)
    flush()
    return chunks


def byte_span(text: str, start: int, end: int) -> dict:
    """UTF-8 byte offsets of text[start:end]: text.encode()[b0:b1] is that passage."""
    b0 = len(text[:start].encode("utf-8"))
    return {"start": b0, "end": b0 + len(text[start:end].encode("utf-8"))}
