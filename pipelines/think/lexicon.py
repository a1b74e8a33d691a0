"""What the deterministic planner knows of words: taste and label features, grades, categories.

Brands, breweries and regions come from the live index (the values the labels carry); features,
grades and categories come from THE glossary (pipelines.search.glossary), each canonical term with the
other ways people say it (English, kana, near-synonyms). Synonyms also feed query rewriting.
"""

from __future__ import annotations

from pipelines.search import glossary

_G = glossary.get()

# canonical feature -> other ways to say it (matched in the question, used when rewriting queries:
# the first is the English form). From THE glossary (pipelines/search/data/glossary.tsv), loose forms included.
FEATURES: dict[str, tuple[str, ...]] = {e.ja: (*e.en, *e.alt, *e.loose) for e in _G.of_kinds(*glossary.FEATURE_KINDS)}

# Features whose canonical form is a whole-word match hazard inside others ("燗" in "燗酒向け"):
# matching is longest-first over all surface forms, so these resolve to the longer term.

# Grades, longest first (純米大吟醸 before 大吟醸 before 吟醸).
GRADES: tuple[str, ...] = tuple(sorted((e.ja for e in _G.of_kinds("grade")), key=lambda g: -len(g)))
GRADE_ALIASES: dict[str, tuple[str, ...]] = {e.ja: (*e.en, *e.alt) for e in _G.of_kinds("grade")}

# The catalogue's category codes and the ways to say them.
CATEGORIES: dict[str, tuple[str, ...]] = {
    e.code: (e.ja, *e.alt, *e.loose, *e.en) for e in _G.of_kinds("category") if e.code
}

# Words that separate the parts of a question: aspects live in different parts.
SEPARATORS: tuple[str, ...] = (
    "と",
    "や",
    "および",
    "及び",
    "それから",
    "あと",
    "、",
    "，",
    ",",
    "・",
    "/",
    " and ",
    " vs ",
    " vs. ",
    " versus ",
    " or ",
    " with ",
    " plus ",
    "か",
    "に加えて",
    "もしくは",
    "または",
    "対",
)


def feature_surfaces() -> dict[str, str]:
    """surface form (lower case) -> canonical feature."""
    out: dict[str, str] = {}
    for canon, aliases in FEATURES.items():
        for form in (canon, *aliases):
            out.setdefault(form.lower(), canon)
    return out


def grade_surfaces() -> dict[str, str]:
    out: dict[str, str] = {}
    for g in GRADES:
        out[g] = g
        for a in GRADE_ALIASES.get(g, ()):
            out[a] = g
    return out


def category_surfaces() -> dict[str, str]:
    return {form.lower(): cat for cat, forms in CATEGORIES.items() for form in forms}


# Forms that only the think planner matches (the glossary's `loose` column: すっきり, 燗, 華やかな香り):
# a taste said loosely is a preference to rank by, not a constraint.
LOOSE_FORMS: frozenset[str] = frozenset(form.lower() for e in _G.of_kinds(*glossary.FEATURE_KINDS) for form in e.loose)

# Categories the catalogue does not hold (焼酎, ワイン ...): asked for, they are honest "not found",
# with alternatives from the `near` category.
OTHER_CATEGORIES: dict[str, tuple[str, str]] = {
    form.lower(): (e.ja, e.near) for e in _G.of_kinds("category") if not e.code for form in (e.ja, *e.alt, *e.en)
}

# "A か B": either satisfies the question; "A と B": both are needed.
OR_WORDS: tuple[str, ...] = ("とか", "か", "もしくは", "または", "又は", "それとも", "ないし", " or ", " either ")

# After a word, these rule it out ("焼酎じゃなくて日本酒"): it is not asked for.
NEGATIONS: tuple[str, ...] = (
    "じゃなくて",
    "じゃなく",
    "ではなく",
    "ではない",
    "じゃない",
    "以外",
    "抜き",
    "は苦手",
    "は嫌",
    "はいらない",
)

# Hedges: the word next to them is a preference. Before the word / after the word.
HEDGES_BEFORE: tuple[str, ...] = (
    "できれば",
    "出来れば",
    "なるべく",
    "なんとなく",
    "ちょっと",
    "maybe",
    "perhaps",
    "ideally",
    "preferably",
    "if possible",
    "something",
    "kind of",
    "somewhat",
    "a bit",
    "probably",
)
HEDGES_AFTER: tuple[str, ...] = (
    "っぽい",
    "ぽい",
    "みたいな",
    "みたい",
    "系",
    "寄り",
    "めの",
    "め",
    "とか",
    "くらい",
    "ぐらい",
    "気味",
    "-ish",
    "ish",
    " if possible",
    " ideally",
    " maybe",
    " preferably",
    " or so",
)
# hedges listed in the coverage notes when the question has them (not "みたい": 飲みたい)
CONTEXT_HEDGES: tuple[str, ...] = ("っぽい", "とか", "寄り", "くらい", "ぐらい", "気味", "-ish", "or so")
# place hedges (新潟あたり, around Niigata): the place stays a constraint; the hedge is noted
PLACE_HEDGES: tuple[str, ...] = ("あたり", "辺り", "周辺", "近辺", "方面", "近く", "around", "near", "-ish")

# Context a label cannot show (occasion, food, season, mood, recipients): kept in the coverage notes and
# used to rank, as preferences for the label features that usually go with them; never a constraint.
CONTEXT: dict[str, tuple[str, ...]] = {
    "冬": ("燗酒向け", "芳醇"),
    "寒い": ("燗酒向け",),
    "鍋": ("燗酒向け", "辛口"),
    "おでん": ("燗酒向け",),
    "熱燗": ("燗酒向け",),
    "夏": ("冷酒向け", "淡麗"),
    "暑い": ("冷酒向け",),
    "冷やして": ("冷酒向け",),
    "キンキン": ("冷酒向け",),
    "春": ("桜の絵",),
    "花見": ("桜の絵",),
    "お花見": ("桜の絵",),
    "秋": ("ひやおろし",),
    "刺身": ("辛口", "淡麗"),
    "寿司": ("辛口", "淡麗"),
    "魚": ("辛口",),
    "和食": ("淡麗",),
    "肉": ("芳醇",),
    "焼肉": ("芳醇",),
    "揚げ物": ("辛口",),
    "チーズ": ("熟成",),
    "デザート": ("甘口",),
    "甘いもの": ("甘口",),
    "食前": ("発泡",),
    "乾杯": ("発泡",),
    "お祝い": ("金箔ラベル", "限定品"),
    "祝い": ("金箔ラベル", "限定品"),
    "プレゼント": ("贈答用", "限定品"),
    "贈り物": ("贈答用", "限定品"),
    "ギフト": ("贈答用", "限定品"),
    "お土産": ("贈答用",),
    "手土産": ("贈答用",),
    "父": (),
    "母": (),
    "上司": (),
    "友達": (),
    "誕生日": ("限定品",),
    "晩酌": (),
    "家飲み": (),
    "初心者": ("甘口", "フルーティー"),
    "女子会": ("フルーティー", "発泡"),
    "子供": (),
    "朝食": (),
    "朝ごはん": (),
    "winter": ("燗酒向け",),
    "hot pot": ("燗酒向け",),
    "summer": ("冷酒向け",),
    "sushi": ("辛口",),
    "sashimi": ("辛口",),
    "fish": ("辛口",),
    "dessert": ("甘口",),
    "gift": ("贈答用", "限定品"),
    "present": ("贈答用",),
    "party": ("発泡",),
    "dinner": (),
    "beginner": ("甘口",),
    "breakfast": (),
    "kids": (),
    "my dad": (),
    "friend": (),
}
