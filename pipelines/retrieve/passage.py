"""The passage a result returns around its evidence, and the evidence's byte spans inside it.

Three modes (`options.passage`):
  * "chunk" (default): the chunk that holds the evidence — whole sentences, at most `max_chars` —
    grown by whole sentences of the document on the side(s) where the evidence touches the chunk's
    edge, while the passage still fits in `max_chars` (so an answer at the end of a chunk comes
    with what follows it); evidence that runs past the chunk widens the passage when that fits;
  * "window": the short window of up to three sentences (the extractor's best window);
  * "document": the whole document.
`spans` are UTF-8 byte ranges of the evidence *inside the returned text*, one per run of
consecutive evidence sentences (several when the evidence is split); text.encode()[s:e] is the
evidence. Pure functions of their input: the same input gives the same passage.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from pipelines.retrieve.chunks import byte_span, chunk_document, pieces_cached

MODES = ("chunk", "window", "document")


@dataclass(frozen=True)
class Passage:
    start: int  # character offsets of the passage in the document
    end: int
    evidence: tuple[tuple[int, int], ...]  # character windows of the evidence in the document

    def text(self, doc: str) -> str:
        return doc[self.start : self.end]

    def spans(self, doc: str) -> list[dict]:
        """Byte ranges of the evidence inside the passage's text."""
        base = len(doc[: self.start].encode("utf-8"))
        out = []
        for a, b in self.evidence:
            s = byte_span(doc, a, b)
            out.append({"start": s["start"] - base, "end": s["end"] - base})
        return out


def merge(windows: list[tuple[int, int]], doc: str) -> list[tuple[int, int]]:
    """Windows sorted and joined where they touch or only whitespace separates them."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(w for w in windows if w[1] > w[0]):
        if out and (a <= out[-1][1] or not doc[out[-1][1] : a].strip()):
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _clip(evidence: list[tuple[int, int]], start: int, end: int, doc: str) -> tuple[tuple[int, int], ...]:
    inside = [(max(a, start), min(b, end)) for a, b in evidence if min(b, end) > max(a, start)]
    out = []
    for a, b in merge(inside, doc):  # no span of bare whitespace at a cut edge
        raw = doc[a:b]
        a2, b2 = a + len(raw) - len(raw.lstrip()), a + len(raw.rstrip())
        if b2 > a2:
            out.append((a2, b2))
    return tuple(out) or ((start, end),)


def around(doc: str, evidence: list[tuple[int, int]], max_chars: int, mode: str = "chunk", window=None) -> Passage:
    """The passage of `mode` for `evidence` (character windows in `doc`, at least one).
    `window`: the short window for mode "window" (default: the evidence's own extent)."""
    ev = merge(evidence, doc) or [(0, len(doc))]
    if mode == "document":
        return Passage(0, len(doc), _clip(ev, 0, len(doc), doc))
    if mode == "window":
        a, b = window if window is not None else (ev[0][0], ev[-1][1])
        return Passage(a, b, _clip(ev, a, b, doc))
    units = pieces_cached(doc, max_chars)
    if not units:
        return Passage(0, len(doc), _clip(ev, 0, len(doc), doc))
    chunks = chunk_document(0, doc, max_chars)
    starts = [c.start for c in chunks]
    home = chunks[max(0, bisect_right(starts, ev[0][0]) - 1)]
    ustarts = [u[0] for u in units]
    lo = max(0, bisect_right(ustarts, home.start) - 1)  # the chunk's first and last sentence pieces
    hi = max(lo, bisect_right(ustarts, home.end - 1) - 1)
    # Evidence that runs past the chunk: widen to its sentences while that fits.
    ev_end = ev[-1][1]
    while hi + 1 < len(units) and units[hi][1] < ev_end and units[hi + 1][1] - units[lo][0] <= max_chars:
        hi += 1
    # Grow on the side(s) where the evidence touches the passage's edge, one sentence a side at a time.
    grow_before = ev[0][0] < units[lo][1]
    grow_after = ev_end > units[hi][0]
    while grow_before or grow_after:
        grew = False
        if grow_before and lo > 0 and units[hi][1] - units[lo - 1][0] <= max_chars:
            lo -= 1
            grew = True
        else:
            grow_before = False
        if grow_after and hi + 1 < len(units) and units[hi + 1][1] - units[lo][0] <= max_chars:
            hi += 1
            grew = True
        else:
            grow_after = False
        if not grew:
            break
    a, b = units[lo][0], units[hi][1]
    return Passage(a, b, _clip(ev, a, b, doc))
