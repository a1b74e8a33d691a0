"""Checks on user text that the string methods get wrong."""

from __future__ import annotations

import unicodedata

# Whitespace, zero-width and other invisible characters: format (Cf, e.g. U+200B), control,
# and the separators.
_INVISIBLE = frozenset(("Cf", "Cc", "Zs", "Zl", "Zp"))


def is_blank(text: str) -> bool:
    """No visible character (str.strip() leaves "\u200b\u200b" as text)."""
    return all(ch.isspace() or unicodedata.category(ch) in _INVISIBLE for ch in text)
