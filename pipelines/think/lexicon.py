"""What the deterministic planner knows of words: taste and label features, grades, categories.

Brands, breweries and regions come from the live index (the values the labels carry); features,
grades and categories come from THE glossary (pipelines.search.glossary), each canonical term with the
other ways people say it (English, kana, near-synonyms). Synonyms also feed query rewriting.
"""

from __future__ import annotations

from pipelines.search import glossary

_G = glossary.get()

# canonical feature -> other ways to say it (matched in the question, used when rewriting queries:
# the first is the English form). From THE glossary (pipelines/data/glossary.tsv), loose forms included.
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
