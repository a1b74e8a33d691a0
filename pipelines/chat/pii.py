"""PII masking: phone numbers, e-mail addresses and postal addresses, before anything is logged or stored.

Detection runs on a width-folded copy of the text (full-width digits, letters and symbols mapped one to
one onto ASCII, so every index is the same) and the spans are replaced in the original, so the user's
own characters survive everywhere else.

Place names alone (「小樽」「北海道小樽市」) are not personal data and are kept: an address is masked
when it carries a postal code or a house number (丁目/番地/号 or 1-2-3 style blocks).
"""

from __future__ import annotations

import re
from typing import Any

PHONE = "[PHONE]"
EMAIL = "[EMAIL]"
ADDRESS = "[ADDRESS]"

_FULL = "０１２３４５６７８９＋（）＠．＿％"
_HALF = "0123456789+()@._%"
_FOLD = {ord(f): h for f, h in zip(_FULL, _HALF, strict=True)}
_FOLD.update({0xFF21 + i: chr(0x41 + i) for i in range(26)})  # Ａ-Ｚ
_FOLD.update({0xFF41 + i: chr(0x61 + i) for i in range(26)})  # ａ-ｚ
# Hyphen look-alikes people type in numbers and addresses (ー is common in IME input: 1ー2ー3).
for _h in "‐‑‒–—―−－ーｰ":
    _FOLD[ord(_h)] = "-"
_FOLD[ord("\u3000")] = " "

_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
# Candidate phone spans; the digit count decides (JP: 10-11 digits from 0, +81 / +NN international).
_PHONE_RE = re.compile(
    r"(?<![0-9A-Za-z_.+\-])(?:\+\d{1,3}[\s\-]?|\(?0)(?:\(?\d{1,4}\)?[\s\-]?){2,4}\d{2,4}(?![0-9A-Za-z_])"
)
_POSTAL_RE = re.compile(r"〒\s*\d{3}-?\d{4}|(?<![\d\-])\d{3}-\d{4}(?![\d\-])")

_KANJI = r"\u3005\u4e00-\u9fff"
_KANA = r"ぁ-んァ-ヶ"
_NUM = r"(?:\d+|[一二三四五六七八九十百〇]+)"
_PREF = rf"(?:東京都|北海道|(?:京都|大阪)府|[{_KANJI}]{{2,3}}県)"
_MUNI = rf"[{_KANJI}{_KANA}]{{1,10}}?[市区町村郡]"
_PLACE = rf"[{_KANJI}{_KANA}]{{0,12}}?"
# House number: 3丁目4番5号 / 3丁目4-5 / 1-2-3 / 12番地 ...
_HOUSE = rf"{_NUM}(?:丁目|番地|番|号|-|の)(?:\s?{_NUM}(?:丁目|番地|番|号|-|の)?)*"
_JP_ADDRESS_RE = re.compile(
    rf"(?:〒\s*\d{{3}}-?\d{{4}}\s*)?(?:{_PREF}\s*)?{_MUNI}\s*{_PLACE}{_HOUSE}"
    rf"(?:[{_KANJI}{_KANA}A-Za-z]{{0,12}}?\s?\d+(?:号室|階|F))?"
)
_EN_ADDRESS_RE = re.compile(
    r"\b\d{1,6}\s+(?:[A-Z][a-z]+\s+){1,3}(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Way)\b\.?"
)


def _fold(text: str) -> str:
    return text.translate(_FOLD)


def _phone_ok(span: str) -> bool:
    digits = sum(c.isdigit() for c in span)
    if span.startswith("+"):
        return 9 <= digits <= 15
    return 10 <= digits <= 11


def find_pii(text: str) -> list[tuple[int, int, str]]:
    """Non-overlapping (start, end, kind) spans, kinds: phone, email, address."""
    folded = _fold(text)
    spans: list[tuple[int, int, str]] = []
    for m in _EMAIL_RE.finditer(folded):
        spans.append((m.start(), m.end(), "email"))
    for rx in (_JP_ADDRESS_RE, _POSTAL_RE, _EN_ADDRESS_RE):
        for m in rx.finditer(folded):
            spans.append((m.start(), m.end(), "address"))
    for m in _PHONE_RE.finditer(folded):
        if _phone_ok(m.group(0).strip()):
            spans.append((m.start(), m.end(), "phone"))
    # Longest first wins an overlap (an address swallows its postal code; an e-mail its digits).
    spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    kept: list[tuple[int, int, str]] = []
    for s in spans:
        if kept and s[0] < kept[-1][1]:
            if s[1] - s[0] > kept[-1][1] - kept[-1][0]:
                kept[-1] = s
            continue
        kept.append(s)
    return kept


_TOKEN = {"phone": PHONE, "email": EMAIL, "address": ADDRESS}


def mask(text: str) -> tuple[str, list[str]]:
    """(masked text, sorted kinds found)."""
    if not text:
        return text, []
    spans = find_pii(text)
    if not spans:
        return text, []
    out, pos = [], 0
    for start, end, kind in spans:
        out.append(text[pos:start])
        out.append(_TOKEN[kind])
        pos = end
    out.append(text[pos:])
    return "".join(out), sorted({k for _, _, k in spans})


def mask_text(text: str) -> str:
    return mask(text)[0]


def mask_obj(obj: Any) -> Any:
    """Every string inside dicts / lists / tuples masked (for log records and stored turns)."""
    if isinstance(obj, str):
        return mask_text(obj)
    if isinstance(obj, dict):
        return {k: mask_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [mask_obj(v) for v in obj]
    return obj
