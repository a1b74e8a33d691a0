"""Checks on user text that the string methods get wrong."""

from __future__ import annotations

import unicodedata

# Whitespace, zero-width and other invisible characters: format (Cf, e.g. U+200B), control,
# and the separators.
_INVISIBLE = frozenset(("Cf", "Cc", "Zs", "Zl", "Zp"))


def is_blank(text: str) -> bool:
    """No visible character (str.strip() leaves "\u200b\u200b" as text)."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE for ch in text)


# Bidirectional controls: embeddings, overrides, isolates and marks (Trojan Source, CVE-2021-42574).
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def unsafe_identifier_char(text: str) -> str | None:
    """The first character an identifier must not hold: a control character (Cc: NUL, CR, LF,
    ESC...) or a bidirectional control (U+202E makes an id display as another). None when clean."""
    for ch in text:
        if unicodedata.category(ch) == "Cc" or ch in _BIDI_CONTROLS:
            return ch
    return None
