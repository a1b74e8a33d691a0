"""Grounded template replies in やな's voice (Kansai-flavoured, friendly) for when no LLM answers.

Built only from the hits (銘柄/商品/蔵/地域/特徴) and honest about what is missing: nothing found, the
asked thing not in the label book (泡盛, 大阪 ...: then the nearest hit is offered as an alternative,
said to be one), label book unavailable, or retrieval switched off. Never empty. At most 4 sentences, so the persona's
interjection still fits in 5. The phrasing varies by turn (deterministically) so a conversation does
not repeat itself word for word.
"""

from __future__ import annotations

import re

_GREETING_RE = re.compile(r"^(?:こんにちは|こんばんは|おはよう|はじめまして|やあ|どうも|もしもし|hello|hi|hey)", re.I)
_THANKS_RE = re.compile(r"(?:ありがと|サンキュー|thanks|thank you|おおきに)", re.I)
_RECOMMEND_RE = re.compile(
    r"(?:おすすめ|オススメ|お勧め|お薦め|教えて|探して|ある[？?]|ない[？?]|知って|どれ|何が|なにが)"
)


def classify_intent(text: str) -> tuple[str, float]:
    """A light rule-based intent for the template and the log (no model on the fast path)."""
    t = (text or "").strip()
    if _GREETING_RE.search(t) and len(t) <= 20:
        return "greeting", 0.9
    if _THANKS_RE.search(t):
        return "thanks", 0.8
    if _RECOMMEND_RE.search(t):
        return "recommend", 0.7
    if t.endswith(("?", "？", "か", "の")):
        return "question", 0.5
    return "chitchat", 0.3


def _clean(value) -> str:
    return re.sub(r"\s+", " ", str(value or "")).strip()


def _name(hit: dict) -> str:
    brand, product = _clean(hit.get("brand_name")), _clean(hit.get("product_name"))
    if brand and product and product != brand:
        return f"『{brand}』の{product}"
    return f"『{brand or product}』" if (brand or product) else "ラベルの一本"


def _maker(hit: dict) -> str:
    region, brewery = _clean(hit.get("region")), _clean(hit.get("brewery"))
    if region and brewery:
        return f"{region}の{brewery}"
    return region or brewery


def _features(hit: dict, limit: int = 2) -> list[str]:
    feats = hit.get("label_features") or []
    if isinstance(feats, str):
        feats = [f for f in re.split(r"[、,／/]", feats)]
    return [_clean(f) for f in feats if _clean(f)][:limit]


def hits_for_reply(intent: str, hits: list[dict], limit: int = 2) -> list[dict]:
    """The hits a template reply names: none for a greeting or thanks, else the top `limit`."""
    return [] if intent in ("greeting", "thanks") else list(hits[:limit])


_LEADS = [
    "{maker}が造ってる{name}がぴったりやと思うで。",
    "それやったら、{maker}の{name}はどうやろ。",
    "{maker}の{name}が近いんちゃうかな。",
]
_LEADS_NO_MAKER = [
    "{name}がぴったりやと思うで。",
    "それやったら、{name}はどうやろ。",
    "{name}が近いんちゃうかな。",
]
_FEATURE = [
    "ラベルを見ると{feats}が特徴なんよ。",
    "{feats}っていうのがええとこやね。",
]
_SECOND = [
    "ほかにも{maker}の{name}もあるで。",
    "{name}も候補に入れといてな。",
]
_CLOSE = [
    "気になったら、もうちょい詳しく話そか。",
    "どっちが好みか、また聞かせてな。",
    "ほかの地域のも探せるから、遠慮なく言うてな。",
]


_NOT_FOUND = [
    "ごめんな、{missing}のラベルは手元のラベル帳には見つからへんかったわ。",
    "{missing}のラベルも探してみたけど、手元のラベル帳には見つからへんかったわ。",
]
_ALTERNATIVE = [
    "代わりに近いのやと、{maker}の{name}があるで（{missing}とはちゃうけどな）。",
    "{missing}やないけど、近いとこで{maker}の{name}はどうやろ。",
]
_ALTERNATIVE_NO_MAKER = [
    "代わりに近いのやと、{name}があるで（{missing}とはちゃうけどな）。",
    "{missing}やないけど、近いとこで{name}はどうやろ。",
]
_NOT_FOUND_CLOSE = "{missing}が入ったら、また教えるな。"
_NOT_FOUND_NO_HITS = "銘柄の名前とか蔵、地域で聞いてくれたら、もう一回探してみるで。"


def missing_words(not_found: list[str]) -> str:
    """The asked things the label book lacks, as a reply names them (at most three)."""
    return "・".join(_clean(x) for x in not_found[:3] if _clean(x))


def not_found_sentence(not_found: list[str], variant: int = 0) -> str:
    return _NOT_FOUND[abs(variant) % 2].format(missing=missing_words(not_found))


def ensure_not_found(text: str, not_found: list[str]) -> str:
    """A reply (the LLM's) that does not say which asked things are missing gets the sentence first."""
    words = [_clean(x) for x in not_found[:3] if _clean(x)]
    if not words or all(w in text for w in words):
        return text
    return not_found_sentence(words) + text


def _not_found_reply(hits: list[dict], not_found: list[str], v: int) -> str:
    missing = missing_words(not_found)
    out = [not_found_sentence(not_found, v)]
    if not hits:
        out.append(_NOT_FOUND_NO_HITS)
        return "".join(out)
    top = hits[0]
    maker = _maker(top)
    alt = (_ALTERNATIVE if maker else _ALTERNATIVE_NO_MAKER)[v % 2]
    out.append(alt.format(maker=maker, name=_name(top), missing=missing))
    feats = _features(top)
    if feats:
        out.append(_FEATURE[v % 2].format(feats="「" + "」と「".join(feats) + "」"))
    out.append(_NOT_FOUND_CLOSE.format(missing=missing))
    return "".join(out)


def grounded_reply(
    user_text: str,
    hits: list[dict],
    *,
    rag_status: str,
    intent: str = "",
    variant: int = 0,
    topic: str = "",
    not_found: list[str] | None = None,
) -> str:
    """The template reply. rag_status: ok | no_hits | unavailable | off. `not_found`: what the
    question names that no label has (the reply says so first, and offers hits only as alternatives)."""
    intent = intent or classify_intent(user_text)[0]
    v = abs(variant)
    if not_found and rag_status in ("ok", "no_hits") and intent not in ("greeting", "thanks"):
        return _not_found_reply(hits, not_found, v)
    if hits:
        top = hits[0]
        maker = _maker(top)
        lead = (_LEADS if maker else _LEADS_NO_MAKER)[v % 3].format(maker=maker, name=_name(top))
        out = [lead]
        feats = _features(top)
        if feats:
            out.append(_FEATURE[v % 2].format(feats="「" + "」と「".join(feats) + "」"))
        if len(hits) > 1:
            second = hits[1]
            m2 = _maker(second)
            out.append((_SECOND[0] if m2 else _SECOND[1]).format(maker=m2, name=_name(second)))
        out.append(_CLOSE[v % 3])
        return "".join(out)
    if intent == "greeting":
        return "こんにちは、やなやで！日本酒やジュースのラベルのことやったら、なんでも聞いてな。"
    if intent == "thanks":
        return "どういたしまして！また気になる銘柄があったら声かけてな。"
    if rag_status == "unavailable":
        return (
            "ごめんな、いまラベル帳がうまく開かれへんくて、調べられへんかってん。"
            "ちょっと時間おいて、もう一回聞いてくれる？"
        )
    if rag_status == "no_hits":
        return (
            "ごめんな、手元のラベル帳にはぴったり合うもんが見つからへんかったわ。"
            "銘柄の名前とか蔵、地域で聞いてくれたら、もう一回探してみるで。"
        )
    about = f"「{_clean(topic)[:30]}」の話やね。" if _clean(topic) else ""
    return (
        f"{about}いまはラベル帳を見んと話してるから、銘柄のはっきりしたことは言われへんねん。"
        "好きな味とか地域を教えてくれたら、一緒に考えよか。"
    )
