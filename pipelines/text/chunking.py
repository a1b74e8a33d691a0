"""Split text into chunks of at most MAX_CHUNK_CHARS characters.

Greedy packing of sentence-like units (split after 。！？!?. and newlines) so chunks end at natural
boundaries; a unit longer than the limit is cut hard. Deterministic: the same text and limit give
the same chunks, which keeps content-derived chunk ids stable across retries.
"""

from __future__ import annotations

import re

_UNIT_RE = re.compile(r"[^。！？!?\n]*(?:[。！？!?]+|\n+|$)")


def _units(text: str) -> list[str]:
    return [u for u in _UNIT_RE.findall(text) if u]


def chunk_text(text: str, max_chars: int) -> list[str]:
    if max_chars < 1:
        raise ValueError("max_chars must be >= 1")
    text = text.strip()
    if not text:
        return []
    if len(text) <= max_chars:
        return [text]
    chunks: list[str] = []
    cur = ""
    for unit in _units(text):
        while len(unit) > max_chars:  # one unit alone is too long: flush, then cut it
            if cur.strip():
                chunks.append(cur.strip())
            cur = ""
            chunks.append(unit[:max_chars].strip())
            unit = unit[max_chars:]
        if len(cur) + len(unit) > max_chars:
            if cur.strip():
                chunks.append(cur.strip())
            cur = unit
        else:
            cur += unit
    if cur.strip():
        chunks.append(cur.strip())
    return [c for c in chunks if c]
