"""What the deterministic planner knows of words: taste and label features, grades, categories.

Brands, breweries and regions come from the live index (the values the labels carry); features are
free text on labels, so the planner keeps its own vocabulary of them here, each canonical term with
the other ways people say it (English, kana, near-synonyms). Synonyms also feed query rewriting.
"""

from __future__ import annotations

# canonical feature -> other ways to say it (matched in the question, used when rewriting queries)
FEATURES: dict[str, tuple[str, ...]] = {
    "辛口": ("dry", "からくち", "カラクチ", "キレのある"),
    "甘口": ("sweet", "あまくち", "アマクチ"),
    "淡麗": ("light and crisp", "たんれい", "すっきり", "crisp"),
    "芳醇": ("rich", "ほうじゅん", "濃醇", "full-bodied", "full bodied"),
    "フルーティー": ("fruity", "ふるーてぃー", "果実香"),
    "吟醸香": ("ginjo aroma", "華やかな香り"),
    "生酒": ("unpasteurized", "なまざけ", "nama"),
    "生詰": ("single pasteurized", "なまづめ"),
    "ひやおろし": ("autumn release", "秋あがり"),
    "山廃": ("yamahai", "やまはい"),
    "生酛": ("kimoto", "きもと"),
    "無濾過": ("unfiltered", "むろか"),
    "原酒": ("undiluted", "げんしゅ", "genshu"),
    "発泡": ("sparkling sake", "スパークリング", "sparkling", "泡"),
    "熟成": ("aged", "じゅくせい", "古酒"),
    "にごり": ("cloudy", "nigori", "濁り"),
    "山田錦": ("yamada nishiki", "yamadanishiki", "やまだにしき"),
    "雄町": ("omachi", "おまち"),
    "五百万石": ("gohyakumangoku", "ごひゃくまんごく"),
    "美山錦": ("miyama nishiki", "miyamanishiki", "みやまにしき"),
    "冷酒向け": ("best chilled", "chilled", "冷やして", "冷酒"),
    "燗酒向け": ("best warm", "warm", "お燗", "燗酒", "燗"),
    "金箔ラベル": ("gold leaf", "金箔"),
    "筆文字ラベル": ("brush lettering", "筆文字"),
    "鶴の絵": ("crane picture", "crane", "鶴の"),
    "桜の絵": ("cherry blossom", "桜の"),
    "青いラベル": ("blue label", "青ラベル"),
    "赤いラベル": ("red label", "赤ラベル"),
    "黒いラベル": ("black label", "黒ラベル"),
    "限定品": ("limited edition", "limited", "限定"),
    "果汁100%": ("100% juice", "果汁100", "100%果汁"),
    "無添加": ("additive free", "additive-free", "no additives", "むてんか"),
    "ストレート": ("not from concentrate", "straight"),
    "濃縮還元": ("from concentrate", "concentrate"),
    "炭酸": ("carbonated", "fizzy", "たんさん"),
    "無糖": ("no sugar", "sugar free", "sugar-free", "unsweetened"),
    "瓶入り": ("glass bottle", "bottled", "瓶"),
    "紙パック": ("carton", "paper pack"),
    "有機栽培": ("organic", "オーガニック", "有機"),
    "贈答用": ("gift", "ギフト", "贈り物"),
    "果肉入り": ("with pulp", "pulp", "果肉"),
    "緑のラベル": ("green label", "緑ラベル"),
    "オレンジのラベル": ("orange label", "オレンジラベル"),
    "イラストラベル": ("illustrated label", "illustrated", "イラスト"),
    "りんご": ("apple", "リンゴ", "林檎"),
    "みかん": ("mandarin", "orange", "ミカン", "蜜柑"),
    "ぶどう": ("grape", "ブドウ", "葡萄"),
    "もも": ("peach", "モモ", "桃"),
    "梨": ("pear", "なし", "ナシ"),
    "ゆず": ("yuzu", "ユズ", "柚子"),
    "トマト": ("tomato", "とまと"),
    "ブルーベリー": ("blueberry", "blueberries"),
    "いちご": ("strawberry", "strawberries", "イチゴ", "苺"),
    "シークヮーサー": ("shikuwasa", "シークワーサー", "shiikuwaasaa"),
}

# Features whose canonical form is a whole-word match hazard inside others ("燗" in "燗酒向け"):
# matching is longest-first over all surface forms, so these resolve to the longer term.

GRADES: tuple[str, ...] = (
    "純米大吟醸",
    "特別本醸造",
    "大吟醸",
    "純米吟醸",
    "特別純米",
    "本醸造",
    "普通酒",
    "吟醸",
    "純米",
)
GRADE_ALIASES: dict[str, tuple[str, ...]] = {
    "純米大吟醸": ("junmai daiginjo",),
    "大吟醸": ("daiginjo",),
    "純米吟醸": ("junmai ginjo",),
    "吟醸": ("ginjo",),
    "特別純米": ("tokubetsu junmai",),
    "純米": ("junmai",),
    "本醸造": ("honjozo",),
    "特別本醸造": ("tokubetsu honjozo",),
    "普通酒": ("futsushu",),
}

CATEGORIES: dict[str, tuple[str, ...]] = {
    "sake": ("日本酒", "お酒", "酒", "sake", "nihonshu", "地酒"),
    "juice": ("ジュース", "juice", "果汁", "じゅーす"),
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
