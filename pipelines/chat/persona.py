"""yana's output policy, applied to every reply before it leaves.

Order: drop URLs → the character's interjection 「せやなー」/「せやせや」 exactly once at the start (none
when the caller sets context.disable_sayana) → at most 5 sentences → a character cap for run-on text →
the optional provenance suffix （参考：銘柄/蔵/地域）. The duo side trims again on its own, after
this policy; this side must already be within its limits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from yana import POLICY_VERSION

MAX_SENTENCES = 5
SAYANA = "せやなー"
SESESE = "せやせや"

# The interjection in the spellings a model (or a template) writes it, with trailing punctuation.
_INTERJECTION_RE = re.compile(r"(?:せや(?:せや|な(?:ぁ|あ)?)|セヤナ)[ーｰ〜～ぁあっ]*[、，,！!。．…]*[ \u3000]*")
_URL_RE = re.compile(r"(?:https?://|www\.)[^\s「」『』（）()<>、。]+", re.I)
_SENTENCE_END = "。！？!?"
_CLOSERS = "。！？!?」』）)]】…〜～ー"
# Asking for agreement: answer 「せやせや」 rather than 「せやなー」.
_AGREE_RE = re.compile(r"(?:よね|よな|やんな|やろ|でしょ|だろ|じゃない|ちゃう)[?？]?\s*$")


@dataclass(frozen=True)
class PersonaResult:
    text: str
    warnings: list[str]


def split_sentences(text: str) -> list[str]:
    """Sentences as substrings of `text` (delimiters kept). Ends: 。！？!?, a newline, or an ASCII
    period after a letter followed by a space (English), so 3.5 or 1.8L stay whole."""
    out: list[str] = []
    start, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        end = None
        if ch in _SENTENCE_END:
            j = i + 1
            while j < n and text[j] in _CLOSERS:
                j += 1
            end = j
        elif ch == "\n" or (
            ch == "."
            and i > 0
            and text[i - 1].isascii()
            and text[i - 1].isalpha()
            and (i + 1 == n or text[i + 1] == " ")
        ):
            end = i + 1
        if end is not None:
            piece = text[start:end]
            if piece.strip():
                out.append(piece)
            start = i = end
            continue
        i += 1
    if text[start:].strip():
        out.append(text[start:])
    return out


def count_interjections(text: str) -> int:
    return len(_INTERJECTION_RE.findall(text))


def _strip_interjections(text: str) -> str:
    return _INTERJECTION_RE.sub("", text)


def _interjection_for(user_text: str) -> str:
    return SESESE if _AGREE_RE.search(user_text or "") else SAYANA


def _cap_chars(text: str, max_chars: int) -> str:
    """Cut run-on text at the last comma or space before the cap, and say so with …"""
    if len(text) <= max_chars:
        return text
    head = text[: max_chars - 1]
    cut = max(head.rfind("、"), head.rfind("，"), head.rfind(","), head.rfind(" "))
    if cut >= max_chars // 2:
        head = head[:cut]
    return head.rstrip("、，, ") + "…"


def provenance_suffix(hits: list[dict], limit: int = 3) -> str:
    """（参考：銘柄/蔵/地域、…） from the hits the reply used; names only, never URLs or paths."""
    parts = []
    for hit in hits[:limit]:
        fields = [_URL_RE.sub("", str(hit.get(k) or "")).strip() for k in ("brand_name", "brewery", "region")]
        fields = [f for f in fields if f]
        if fields:
            parts.append("/".join(fields))
    return f"（参考：{'、'.join(parts)}）" if parts else ""


def apply_persona(
    text: str,
    *,
    user_text: str = "",
    disable_sayana: bool = False,
    hits: list[dict] | None = None,
    provenance: bool = False,
    max_sentences: int = MAX_SENTENCES,
    max_chars: int = 400,
) -> PersonaResult:
    warnings: list[str] = []
    out = text or ""
    if _URL_RE.search(out):
        out = _URL_RE.sub("", out)
        warnings.append("urls_removed")
    out = re.sub(r"[ \t\u3000]+\n", "\n", out).strip()

    # Interjection: removed everywhere, then (unless disabled) once at the very start.
    out = _strip_interjections(out).strip()

    sentences = split_sentences(out)
    if len(sentences) > max_sentences:
        out = "".join(sentences[:max_sentences]).strip()
        warnings.append(f"trimmed_to_{max_sentences}_sentences")
    if len(out) > max_chars:
        out = _cap_chars(out, max_chars)
        warnings.append("reply_truncated")

    if not disable_sayana:
        out = f"{_interjection_for(user_text)}、{out}" if out else f"{_interjection_for(user_text)}。"
    if provenance and hits:
        out += provenance_suffix(hits)
    return PersonaResult(out, warnings)


def policy_self_check() -> tuple[bool, str]:
    """Run the policy on a fixed hostile sample and verify its invariants (for /v1/healthz)."""
    sample = (
        "せやなー！一つ目。せやせや、二つ目。三つ目！四つ目？五つ目。六つ目。"
        "詳しくは https://example.com を見てな。せやなー。"
    )
    try:
        on = apply_persona(sample, hits=[{"brand_name": "北の誉", "region": "小樽"}], provenance=True)
        off = apply_persona(sample, disable_sayana=True)
    except Exception as exc:  # noqa: BLE001 - a broken policy must show as policy_ok=false, not crash healthz
        return False, f"policy error: {exc.__class__.__name__}"
    body = on.text.split("（参考：")[0]
    checks = [
        count_interjections(on.text) == 1 and on.text.startswith(SAYANA),
        count_interjections(off.text) == 0,
        len(split_sentences(body)) <= MAX_SENTENCES and len(split_sentences(off.text)) <= MAX_SENTENCES,
        "http" not in on.text and "http" not in off.text,
        on.text.endswith("（参考：北の誉/小樽）"),
        bool(POLICY_VERSION),
    ]
    return (all(checks), POLICY_VERSION if all(checks) else f"{POLICY_VERSION}: self-check failed")
