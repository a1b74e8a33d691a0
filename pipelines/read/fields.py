"""Fields from what a label says: brand, brewery, region, grade, 精米歩合, アルコール分, 内容量 ...

`extract_fields(reading)` takes a `pipelines.read.ocr.Reading` (or plain text) and returns
`{name: Field}`; each `Field` carries its value, `source` ("ocr" here, "llm" from
pipelines.read.llm) and a `confidence` in [0, 1].

Matching tolerates the usual OCR confusions (酒/洒, 一/ー, ロ/口, 力/カ, 二/ニ, 釀/醸 ...): text is
compared under `fuzzy_key`, which folds every member of a confusion set to one character, against
the glossary (pipelines/data/glossary.tsv: grades, rice, styles) and the gazetteer
(pipelines/read/data/gazetteer.tsv: prefectures, cities, brands, breweries with readings).

The brand is the largest lettering on the label (line height from the boxes), snapped to a
gazetteer brand when it is within one confusion-tolerant edit or one character the recogniser
offered there; without boxes only a gazetteer brand found in the text is taken.
"""

from __future__ import annotations

import csv
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from pipelines.read.ocr import KANJI, NAME_PARTICLES, Line, Reading
from pipelines.search import glossary

DATA = Path(__file__).resolve().parent / "data"
GAZETTEER = DATA / "gazetteer.tsv"

GRADES = ("純米大吟醸", "特別本醸造", "純米吟醸", "特別純米", "大吟醸", "本醸造", "吟醸", "純米", "普通酒")

# Characters OCR confuses on labels; every set folds to its first member under fuzzy_key.
CONFUSIONS: tuple[str, ...] = (
    "酒洒沺",
    "ー一―‐－-~〜",
    "口ロ□",
    "力カ",
    "二ニ",
    "八ハ",
    "工エ",
    "夕タ",
    "卜ト",
    "醸釀譲讓酶",
    "会會",
    "社礼杜",
    "歩步",
    "県縣",
    "吟呤",
    "大太犬",
    "米来",
    "造告",
    "蔵藏",
    "鶴鸖",
    "龍竜",
    "澤沢",
    "ノ丿",
    "％%",
    "0oOＯ〇",
    "1lI|",
)
_FOLD = {ch: group[0] for group in CONFUSIONS for ch in group[1:]}

_LABEL_WORDS = (
    "品目",
    "特定名称",
    "原材料",
    "使用米",
    "精米歩合",
    "アルコール",
    "内容量",
    "製造者",
    "製造元",
    "名称",
    "販売者",
    "保存",
    "製造年月",
    "お酒は",
    "日本酒",
    "清酒",
    "株式会社",
)
_BREWERY_SUFFIX = (
    "酒造店",
    "酒造場",
    "酒造",
    "醸造店",
    "醸造場",
    "醸造",
    "本店",
    "酒蔵",
    "銘醸",
    "商店",
    "酒類製造",
    "果樹園",
    "農園",
    "ファーム",
    "果汁工房",
)
_COMPANY_WORDS = ("株式会社", "有限会社", "合資会社", "合名会社")
# A company word as written, or read with one slip (称式会社, 株式公社): OCR slips in small print
# are as common there as anywhere, and a maker named with the slip left in is a wrong maker.
_COMPANY = re.compile(
    "("
    + "|".join(_COMPANY_WORDS)
    + "|"
    + "|".join(w[:i] + "." + w[i + 1 :] for w in _COMPANY_WORDS for i in range(len(w)))
    + r"|\(株\)|\(有\)|㈱|㈲)"
)


def normalize(text: str) -> str:
    """NFKC with spaces removed: how values are compared (and how the bench scores them)."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def fuzzy_key(text: str) -> str:
    """`normalize(text)` with every OCR confusion set folded to one character."""
    return "".join(_FOLD.get(ch, ch) for ch in normalize(text))


@dataclass(frozen=True)
class Field:
    value: str
    source: str = "ocr"
    confidence: float = 0.0
    evidence: str = ""  # the read text the value came from

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Place:
    kind: str
    name: str
    reading: str
    prefecture: str
    city: str
    brewery: str


@dataclass(frozen=True)
class Gazetteer:
    entries: tuple[Place, ...]

    def of(self, kind: str) -> list[Place]:
        return [e for e in self.entries if e.kind == kind]


@lru_cache(maxsize=1)
def gazetteer() -> Gazetteer:
    rows = []
    with open(GAZETTEER, encoding="utf-8") as fh:
        lines = [ln for ln in fh if ln.strip() and not ln.startswith("#")]
    for row in csv.DictReader(lines, delimiter="\t"):
        rows.append(
            Place(row["kind"], row["name"], row["reading"], row["prefecture"], row["city"], row["brewery"] or "")
        )
    return Gazetteer(tuple(rows))


def _edit(a: str, b: str, limit: int, alts: list[str] | None = None) -> int:
    """Levenshtein distance, stopping early past `limit`. With `alts` (fuzzy keys per position of
    `b`), a character of `a` the recogniser offered at that position substitutes for free:
    matching a closed list (grades) on the recogniser's candidates, not only its first choice."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            same = ca == cb or (alts is not None and ca in alts[j - 1])
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (not same))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return prev[-1]


def _find_fuzzy(term: str, text: str, max_edits: int) -> tuple[int, int] | None:
    """(position, edits) of the best occurrence of `term` in `text` (both fuzzy keys)."""
    pos = text.find(term)
    if pos >= 0:
        return pos, 0
    if max_edits <= 0 or len(term) < 3:
        return None
    best = None
    n = len(term)
    for size in (n, n - 1, n + 1):
        for i in range(0, max(1, len(text) - size + 1)):
            d = _edit(term, text[i : i + size], max_edits)
            if d <= max_edits and (best is None or d < best[1]):
                best = (i, d)
    return best


def _lines(source: Reading | str | list[str]) -> list[Line]:
    if isinstance(source, Reading):
        return list(source.lines)
    texts = source.splitlines() if isinstance(source, str) else list(source)
    return [Line(t, (), 1.0, False, i) for i, t in enumerate(texts) if t.strip()]


def _char_size(line: Line) -> float:
    return line.height if line.box else 0.0


_NUM = r"(\d{1,3}(?:\.\d)?)"
_SEIMAI = re.compile(r"(?:精米歩合|精米步合|精米|歩合)[^0-9]{0,3}" + r"(\d{1,2}(?:\.\d)?)\s*[%]")
_ALCOHOL = re.compile(r"(?:アルコ.?ル分?|アルコ.?ル度数|度数)[^0-9]{0,3}" + _NUM + r"\s*(度|%)")
# アルコール分 as OCR misreads it on small or blurred print, two characters lost or confused
# (アール分, アルイル分, ゾルコール分) and its unit too (16ル, 16廣): a key ending in ル分 with at
# most two characters misread before it, then two digits (a sake's strength, 5-22; one digit
# would take a misread like "1て度" for 1度) and whatever the unit reads as, 度 unless it is %.
_ALCOHOL_MISREAD = re.compile(r"(?:[アァゾ].{0,3}ル分|ルコ.?ル分)[^0-9]{0,2}(\d{2}(?:\.\d)?)(?![\d.])\s*(%)?")
_VOLUME = re.compile(
    r"(?:内容量|容量)?[^0-9]{0,3}(\d{1,4}(?:\.\d{1,2})?)\s*(ml|m[I1]|m(?![a-z])|l|リットル|ミリリットル)", re.IGNORECASE
)
_VOLUME_LABELED = re.compile(
    r"(?:内容量|容量)[^0-9]{0,3}(\d{1,4}(?:\.\d{1,2})?)\s*(ml|l|リットル|ミリリットル)?", re.IGNORECASE
)
# 内容量 as OCR misreads it on small print, its unit lost or confused (内容300n, 内容城720甲): the
# key's first two characters, at most two misread after them, then a bottle size (a sake or juice
# bottle's standard volumes; any other number there is more likely a misread one) in ml.
_BOTTLE_ML = "180|200|250|300|330|360|500|720|900|1000|1800"
_VOLUME_MISREAD = re.compile(r"内容.{0,2}?(" + _BOTTLE_ML + r")(?![\d.])")


def _clean_digits(text: str) -> str:
    """Digits as OCR reads them: NFKC, letter-for-digit slips inside numbers (O/o→0, l/I→1)."""
    t = normalize(text)
    return re.sub(r"(?<=\d)[oOＯ〇](?=\d|%|度|ml|m)|(?<=[^a-zA-Z])[oO](?=\d)", "0", t)


def _digit_maybes(ln: Line, t: str, m: re.Match, fmt) -> tuple[str, ...]:
    """The other values the number in m.group(1) (a match in `t`, the line's text with its digits
    cleaned) may be: one digit swapped for the digit the recogniser found likeliest after it there
    (`Line.alternatives`: 56% read where it also saw a 5). Formatted by `fmt`, which gives "" for
    a number that is no value. () when the line's characters cannot be mapped. Not offered: a
    repeated digit CTC read once (55% as 5%); on tune seed 8 that let an edition through whose
    one-digit misread had kept it apart (the picture passes it)."""
    s, e = m.span(1)
    raw = m.group(1)
    alts = ln.alternatives if len(ln.alternatives) == len(ln.text) == len(t) else ()
    out: list[str] = []
    for i in range(s, e):
        if not (t[i].isdigit() and alts and alts[i]):
            continue
        d = unicodedata.normalize("NFKC", alts[i][0])
        value = fmt(raw[: i - s] + d + raw[i - s + 1 :]) if d.isdigit() and d != t[i] else ""
        if value and value not in out:
            out.append(value)
    return tuple(out)


def _seimai_value(v: str) -> str:
    return f"{int(float(v))}%"  # _SEIMAI reads at most two digits: always a ratio


def _alcohol_value(v: str, unit: str) -> str:
    return f"{v[:-2] if v.endswith('.0') else v}{unit}"


def _numbers(lines: list[Line], out: dict[str, Field], maybe: dict[str, tuple[str, ...]]) -> None:
    for ln in lines:
        t = _clean_digits(ln.text)
        tk = t.replace("ー", "ー").replace("一", "ー")
        if "seimai" not in out:
            m = _SEIMAI.search(t)
            if m:
                out["seimai"] = Field(_seimai_value(m.group(1)), "ocr", 0.9 * ln.confidence, ln.text)
                maybe["seimai"] = _digit_maybes(ln, t, m, _seimai_value)
        if "alcohol" not in out:
            m = _ALCOHOL.search(tk) or _ALCOHOL.search(t.replace("-", "ー"))
            conf, unit = 0.9, m.group(2) if m else ""
            if not m and (m := _ALCOHOL_MISREAD.search(tk)):
                conf, unit = 0.6, m.group(2) or "度"
            if m:
                out["alcohol"] = Field(_alcohol_value(m.group(1), unit), "ocr", conf * ln.confidence, ln.text)
                maybe["alcohol"] = _digit_maybes(ln, tk, m, lambda v, u=unit: _alcohol_value(v, u))
        if "volume" not in out:
            _volume(ln, t, out, maybe)


# What a label can print, for identity: a bottle's volume (the standard sizes above, and the wine
# sizes some sake uses) and a drink's strength. A read value outside them is a misread (5002ml,
# 1度 for 14度), which must neither veto two photographs of one label nor agree with anything.
_PLAUSIBLE_ML = frozenset(int(v) for v in _BOTTLE_ML.split("|")) | {375, 750, 1500}
_PLAUSIBLE_ALCOHOL = (3.0, 60.0)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def plausible(key: str, value: str | None) -> bool:
    """Whether a read value of `key` is one a label can print (volume and alcohol checked)."""
    if not value:
        return False
    m = _NUMBER.search(str(value))
    if key == "volume":
        if not m:
            return False
        ml = float(m.group()) * (
            1000 if str(value).lower().endswith("l") and not str(value).lower().endswith("ml") else 1
        )
        return round(ml) in _PLAUSIBLE_ML
    if key == "alcohol":
        return m is not None and _PLAUSIBLE_ALCOHOL[0] <= float(m.group()) <= _PLAUSIBLE_ALCOHOL[1]
    return True


def _volume_value(v: str, unit: str) -> str:
    """A read number and unit as 内容量 ("" when it is none)."""
    v = v[:-2] if v.endswith(".0") else v
    if unit == "l" and float(v) >= 10:  # 720l: no bottle holds that, the m was lost
        unit = "ml"
    if unit == "ml" and float(v) < 50:  # 1.8ml, 5ml: a litre count, or not a volume
        unit = "l" if "." in v else ""
    return f"{v}{unit}" if unit else ""


# A printed number as it reads on its own, where the line is already known to be that field's
# (pipelines.ingest.readings.field_reader: the line of a field read off another photograph): the
# key words are often lost on small print (300T for 300ml, 分17度), so only the number and the
# unit that make it a value of that field are asked for. A volume is a bottle size, alone.
_BARE = {
    "volume": (re.compile(r"(?<![\d.])(" + _BOTTLE_ML + r")(?![\d.])"), lambda m: f"{m.group(1)}ml"),
    "alcohol": (re.compile(r"(?<![\d.])(\d{1,2}(?:\.\d)?)\s*(度|%)"), lambda m: _alcohol_value(m.group(1), m.group(2))),
    "seimai": (re.compile(r"(?<![\d.])(\d{2}(?:\.\d)?)\s*%"), lambda m: _seimai_value(m.group(1))),
}


def bare_value(key: str, text: str) -> str:
    """The value of `key` that a line known to print it reads as, by its number and unit alone
    ("" when the line has none, or more than one such number)."""
    pattern, fmt = _BARE.get(key, (None, None))
    if pattern is None or fmt is None:
        return ""
    found = list(pattern.finditer(_clean_digits(text)))
    return fmt(found[0]) if len(found) == 1 else ""


def _volume(ln: Line, t: str, out: dict[str, Field], maybe: dict[str, tuple[str, ...]]) -> None:
    """内容量 on line `ln` (its digits cleaned: `t`), when one is there."""
    m = _VOLUME_LABELED.search(t)
    conf = 0.9
    if not m:
        m = _VOLUME.search(t)
        conf = 0.7
    if not m and (m := _VOLUME_MISREAD.search(t)):
        conf = 0.6
    if not m:
        return
    unit = ((m.group(2) if m.re.groups > 1 else None) or "ml").lower()
    unit = {"リットル": "l", "ミリリットル": "ml", "m": "ml", "mi": "ml", "m1": "ml"}.get(unit, unit)
    value = _volume_value(m.group(1), unit)
    if value:
        out["volume"] = Field(value, "ocr", conf * ln.confidence, ln.text)
        maybe["volume"] = _digit_maybes(ln, t, m, lambda v: _volume_value(v, unit))


def _keyed(ln: Line) -> tuple[str, list[str]]:
    """The line's fuzzy key and, per key character, the fuzzy keys of the recogniser's
    alternatives there ("" where none, or where normalising changed the length)."""
    k = fuzzy_key(ln.text)
    if len(ln.alternatives) == len(ln.text) == len(k):
        return k, [fuzzy_key(a) for a in ln.alternatives]
    return k, [""] * len(k)


_GRADE_LABEL = "特定名称"


def _grade_label_end(k: str) -> int:
    """Where the text after 特定名称 starts in fuzzy line `k` (the label read with at most one
    slip at the line's start: 特名称, 特定名杯), or -1."""
    pos = k.find(_GRADE_LABEL)
    if pos >= 0:
        return pos + len(_GRADE_LABEL)
    best = (2, -1)
    for size in (4, 3, 5):
        if len(k) > size:
            d = _edit(_GRADE_LABEL, k[:size], 1)
            if d < best[0]:
                best = (d, size)
    return best[1]


def _grade(lines: list[Line], out: dict[str, Field]) -> None:
    """特定名称: a line that is a grade (a front label's grade line, or 特定名称 ... on a back
    label) is matched whole, allowing about one OCR slip in three characters (a character the
    recogniser offered as an alternative is no slip); otherwise a grade written inside a longer
    line is taken when found exactly (the longest one)."""
    best: tuple[float, str, str, float] | None = None
    keys = [(fuzzy_key(g), g) for g in GRADES]
    for ln in lines:
        k, alts = _keyed(ln)
        labelled = False
        end = _grade_label_end(k)
        if end >= 0:
            k, alts, labelled = k[end:], alts[end:], True
        # brackets, dots and colons around a grade (【純米吟醸】, 特定名称・吟醸) are no part of it
        kept = [i for i, ch in enumerate(k) if re.match(r"\w", ch) and ch != "_"]
        k, alts = "".join(k[i] for i in kept), [alts[i] for i in kept]
        cands: list[tuple[float, str, float]] = []
        if 0 < len(k) <= 7:
            for gk, g in keys:
                d = _edit(gk, k, 2, alts)
                allowed = max(1, len(gk) // 3) if (labelled or len(gk) >= 3) else 0
                if d <= allowed:
                    cands.append((100 - 30 * d + (50 if labelled else 0), g, 0.95 if d == 0 else 0.7))
        for gk, g in keys:
            if gk in k:
                cands.append((60 + len(gk) + (50 if labelled else 0), g, 0.85))
                break
        for score, g, conf in cands:
            if best is None or score > best[0]:
                best = (score, g, ln.text, conf * ln.confidence)
    if best is not None:
        out["grade"] = Field(best[1], "ocr", best[3], best[2])


def _after_prefecture(k: str, p: Place) -> tuple[int, bool] | None:
    """Where the address goes on after prefecture `p` in fuzzy line `k`, and whether the full
    name was read (a stem alone must be followed by a city part: 秋田酒こまち is no address)."""
    full = fuzzy_key(p.name)
    pos = k.find(full)
    if pos >= 0:
        return pos + len(full), True
    stem = full[:-1] if full[-1] in "県府都" and p.name != "北海道" else full
    pos = k.find(stem)
    if pos < 0 or not re.match(r".{0,2}.{1,6}?[市町村区郡]", k[pos + len(stem) :]):
        return None
    end = pos + len(stem)
    return end + (1 if k[end : end + 1] in ("県", "府", "都") else 0), False


def _city(rest: str, pref: str, cities: list[Place]) -> str:
    rest_k = fuzzy_key(rest)
    for c in cities:
        if c.prefecture == pref and rest_k.startswith(fuzzy_key(c.name)):
            return c.name
    m = re.match(r"(?:.{1,4}?郡)?(.{1,5}?[市町村])", rest)
    return m.group(1) if m else ""


def _places(lines: list[Line], out: dict[str, Field]) -> None:
    gz = gazetteer()
    prefs = gz.of("prefecture")
    cities = sorted(gz.of("city"), key=lambda c: -len(c.name))
    candidates: list[tuple[float, str, str, Line]] = []
    for ln in lines:
        k = fuzzy_key(ln.text)
        for p in prefs:
            hit = _after_prefecture(k, p)
            if hit is None:
                continue
            end, exact = hit
            rest = normalize(ln.text)[end:]
            city = _city(rest, p.name, cities)
            score = (2.0 if exact else 1.0) + (1.0 if city else 0.0) + (0.5 if re.search(r"\d", rest) else 0.0)
            candidates.append((score, p.name, city, ln))
    if not candidates:
        # no prefecture read: a known city (岩国市) names it
        for ln in lines:
            k = fuzzy_key(ln.text)
            for c in cities:
                if len(c.name) >= 3 and fuzzy_key(c.name) in k:
                    candidates.append((0.5, c.prefecture, c.name, ln))
                    break
    if not candidates:
        return
    score, pref, city, ln = max(candidates, key=lambda c: c[0])
    conf = min(1.0, 0.35 + 0.2 * score) * ln.confidence
    out["prefecture"] = Field(pref, "ocr", conf, ln.text)
    if city:
        out["city"] = Field(city, "ocr", conf * 0.9, ln.text)
    out["region"] = Field(pref + city, "ocr", conf * (0.9 if city else 1.0), ln.text)


def _snap_suffix(name: str, alts: list[str] | None) -> tuple[str, bool]:
    """`name` with its maker suffix (酒造, 醸造場, ファーム ...) in its written form, and whether it
    ends in one at all. A suffix of three or more characters is taken with one OCR slip (ファム,
    果汁T房); a two-character one (酒造, 醸造) only with the slip's right character among the
    recogniser's alternatives there (`alts`, per character of `name`): one slip in two characters
    would make any 〜造 or 酒〜 a maker."""
    nk = fuzzy_key(name)
    for suf in _BREWERY_SUFFIX:
        if nk.endswith(fuzzy_key(suf)) and len(nk) > len(suf):
            return name[: len(name) - len(suf)] + suf, True
    best: tuple[tuple[int, bool, int], str] | None = None  # the fewest slips, then no lost or extra character
    for suf in _BREWERY_SUFFIX:
        sk = fuzzy_key(suf)
        n = len(sk)
        allowed = 1 if n >= 3 else 0
        for size in (n, n - 1, n + 1) if n >= 3 else (n,):
            if len(nk) - size < 2:  # a maker's own name before the suffix: two characters at least
                continue
            tail_alts = alts[len(alts) - size :] if alts else None
            d = _edit(sk, nk[len(nk) - size :], allowed, tail_alts)
            key = (d, size != n, -n)
            if d <= allowed and (best is None or key < best[0]):
                best = (key, name[: len(name) - size] + suf)
    return (best[1], True) if best else (name, False)


def _brewery_name(ln: Line) -> tuple[str, float]:
    """The maker named on a line (製造者 X / a name ending in 酒造, 醸造 ...) and how sure."""
    t = normalize(ln.text)
    k, line_alts = _keyed(ln)
    m = re.search(r"(?:製造者|製.者|.?造者|製造元|醸造元|蔵元)[:：]?(.+)", t)
    if m:
        name, score = m.group(1), 3.0
    else:
        name, score = "", 0.0
        for suf in _BREWERY_SUFFIX:
            pos = k.rfind(fuzzy_key(suf))
            if pos > 0:
                name, score = t[: pos + len(suf)], 2.0
                break
        else:
            name, score = t, 1.5  # no suffix as read: one read with a slip, if the line ends in it
    # a grade line (本醸造, 特別本醸造) ends in 醸造 too; a maker named 坂本醸造 is not a grade
    if not name or fuzzy_key(name) in {fuzzy_key(g) for g in GRADES} or fuzzy_key(name).startswith("特別"):
        return "", 0.0
    name = _COMPANY.sub("", name).strip(" 　:：・")
    # an address run on after the name (製造者 X酒造 新潟県...) is cut at the prefecture
    for p in gazetteer().of("prefecture"):
        pos = name.find(p.name)
        if pos > 0:
            name = name[:pos]
    name = normalize(name)
    at = t.rfind(name) if name else -1
    alts = line_alts[at : at + len(name)] if at >= 0 and any(line_alts) else None
    name, suffixed = _snap_suffix(name, alts)
    if score < 2.0 and not suffixed:
        return "", 0.0
    return (name, score) if 1 < len(name) <= 14 else ("", 0.0)


def _brewery(lines: list[Line], out: dict[str, Field]) -> None:
    known = {fuzzy_key(b.name): b.name for b in gazetteer().of("brewery")}
    best = 0.0
    for ln in lines:
        name, score = _brewery_name(ln)
        if not name:
            continue
        nk = fuzzy_key(name)
        if nk in known:
            name, score = known[nk], score + 1.0
        if score > best:
            best = score
            out["brewery"] = Field(name, "ocr", min(1.0, 0.3 + 0.2 * score) * ln.confidence, ln.text)


def _is_label_text(text: str) -> bool:
    """Text a label prints besides its name: a labelled item, a number, a grade, a maker, or a
    bracket (米(国産), the ingredients line read with its label word garbled: no name has one)."""
    t = normalize(text)
    k = fuzzy_key(text)
    return bool(
        any(w in t for w in _LABEL_WORDS)
        or re.search(r"\d|[()\[\]]", t)
        or any(fuzzy_key(g) == k for g in GRADES)
        or any(k.endswith(fuzzy_key(s)) for s in _BREWERY_SUFFIX)
    )


def _brand_particle(ln: Line) -> str:
    """The brand line's text with a name particle restored where the recogniser doubted.

    Names are often two kanji joined by the particle の (乃, ノ, 之): 天の戸, 菊の司, 澤乃井.
    In brush lettering the particle is a cursive stroke that the recogniser, which reads each
    position on its own, tends to take for a simple kanji (八, 門, 円, 四, 刀). A kanji between
    two kanji that the recogniser was unsure of (`Line.alternatives`), with a particle among its
    own alternatives, is read as that particle; a sure read is never changed."""
    text, alts = ln.text, ln.alternatives
    if len(alts) != len(text) or len(text) < 3:
        return text
    chars = list(text)
    for i in range(1, len(chars) - 1):
        if not alts[i] or not all(KANJI.match(c) for c in (chars[i - 1], chars[i], chars[i + 1])):
            continue
        particle = next((a for a in alts[i] if a in NAME_PARTICLES), "")
        if particle:
            chars[i] = particle
    return "".join(chars)


# Sentence punctuation inside a brand line is the recogniser's, not the name's: a brush stroke's
# end read as 。 or 、 between two kanji (白。鶴, tune split identity seed 20), which kept two
# photographs of one label out of each other's read-the-same set. Names keep ・ and ー.
_STRAY_IN_NAME = re.compile(r"[。、,.，．｡､]")


# A brush brand is misread from one photograph to the next (雫 read 率, 需 or 零; 惠 for 恵), and
# the right character is often the recogniser's next guess there (`Line.alternatives`). The brand
# may be read as each name made by one such swap; two photographs whose brands may be one another
# are candidates of each other (decision.text_digests) and merge only with the brand's printed
# line compared alike (decision: "maybe"). At most BRAND_MAYBES names, the likeliest swap at each
# doubted position first. A swap that makes a gazetteer brand is read as that brand (鍋鳥 with 島
# offered: 鍋島), as a confusable character is (fuzzy_key).
BRAND_MAYBES = 6
_NAME_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff々]")


def _brand_maybes(value: str, text: str, alts: tuple[str, ...]) -> tuple[str, ...]:
    """The other names the brand `value` (read as `text`, whose characters `alts` align with) may
    be: one doubted character swapped for an alternative. () when they cannot be aligned."""
    if not alts or len(alts) != len(text) or normalize(text) != value or len(value) != len(text):
        return ()
    out: list[str] = []
    for rank in range(max((len(a) for a in alts), default=0)):
        for i, a in enumerate(alts):
            c = unicodedata.normalize("NFKC", a[rank]) if rank < len(a) else ""
            if len(c) != 1 or c == value[i] or not _NAME_CHAR.match(c):
                continue
            name = value[:i] + c + value[i + 1 :]
            if name not in out:
                out.append(name)
            if len(out) >= BRAND_MAYBES:
                return tuple(out)
    return tuple(out)


def _brand(lines: list[Line], out: dict[str, Field], maybe: dict[str, tuple[str, ...]] | None = None) -> None:
    gz = gazetteer()
    brands = {fuzzy_key(b.name): b for b in gz.of("brand")}
    sized = [(ln, _char_size(ln)) for ln in lines if not _is_label_text(ln.text)]
    sized = [(ln, s) for ln, s in sized if len(normalize(ln.text)) <= 12]
    if sized and any(s > 0 for _, s in sized):
        sizes = sorted((s for _, s in sized), reverse=True)
        ln, size = max(sized, key=lambda x: x[1])
        second = sizes[1] if len(sizes) > 1 else 0.0
        text = _brand_particle(ln)
        value = re.sub(r"^[\W_]+|[\W_]+$", "", normalize(text)) or normalize(text)
        value = _STRAY_IN_NAME.sub("", value) or value
        k = fuzzy_key(value)
        conf = (0.6 + 0.3 * min(1.0, (size - second) / max(size, 1e-6) * 2)) * ln.confidence
        others = _brand_maybes(value, text, ln.alternatives)
        known = next((brands[fuzzy_key(m)] for m in others if fuzzy_key(m) in brands), None)
        if k in brands:  # a known brand read with a confusable character (洒/酒 ...)
            value, conf = brands[k].name, max(conf, 0.9 * ln.confidence)
        elif known is not None:  # a known brand the recogniser offered at the one doubted place
            # for identity it may still be what was read, or another swap (the snap can be wrong:
            # a name not in the gazetteer one swap from one that is)
            if maybe is not None:
                maybe["brand_name"] = tuple(n for n in dict.fromkeys([value, *others]) if n != known.name)[
                    :BRAND_MAYBES
                ]
            value = known.name
        elif maybe is not None:
            maybe["brand_name"] = others
        out["brand_name"] = Field(value, "ocr", conf, ln.text)
        return
    # no boxes: only a gazetteer brand named in the text
    text = fuzzy_key("\n".join(ln.text for ln in lines))
    for bk in sorted(brands, key=len, reverse=True):
        if len(bk) >= 2 and bk in text:
            out["brand_name"] = Field(brands[bk].name, "ocr", 0.6, brands[bk].name)
            return


def _features(lines: list[Line], out: dict[str, Field], features: list[str]) -> None:
    g = glossary.get()
    text = "\n".join(ln.text for ln in lines)
    k = fuzzy_key(text)
    rice: list[str] = []
    for e in g.of_kinds("rice", "style", "taste"):
        forms = [e.ja, *e.alt]
        if any(len(f) >= 2 and fuzzy_key(f) in k for f in forms):
            if e.kind == "rice" and e.ja != "酒米":
                rice.append(e.ja)
            if e.ja not in features and e.ja != "酒米":
                features.append(e.ja)
    if rice:
        out["rice"] = Field(rice[0], "ocr", 0.8, rice[0])
    if any(w in k for w in ("日本酒", fuzzy_key("清酒"), fuzzy_key("純米"), fuzzy_key("吟醸"), "精米", "アルコ")):
        out["category"] = Field("日本酒", "ocr", 0.8, "")
    elif any(w in k for w in ("ジュース", "果汁", "ジユース")):
        out["category"] = Field("ジュース", "ocr", 0.8, "")


def _product(lines: list[Line], out: dict[str, Field]) -> None:
    brand = out.get("brand_name")
    grade = out.get("grade")
    parts = [p.value for p in (brand, grade) if p is not None]
    if parts:
        out["product_name"] = Field(" ".join(parts), "ocr", min(f.confidence for f in (brand, grade) if f) * 0.8, "")


@dataclass(frozen=True)
class Extraction:
    fields: dict[str, Field]
    label_features: tuple[str, ...]
    # per printed number (seimai, alcohol, volume): the other values its digits may be read as
    # (`_digit_maybes`), and the other names the brand may be (`_brand_maybes`), for identity
    # only: two photographs whose values differ only there are not told apart by the read text
    # (pipelines.neardup.decision)
    maybe: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def values(self) -> dict[str, str]:
        return {k: f.value for k, f in self.fields.items()}

    def to_dict(self) -> dict:
        out = {
            "fields": {k: f.to_dict() for k, f in self.fields.items()},
            "label_features": list(self.label_features),
        }
        maybe = {k: list(v) for k, v in self.maybe.items() if v and k in self.fields}
        if maybe:
            out["maybe"] = maybe
        return out


def extract_fields(source: Reading | str | list[str]) -> Extraction:
    """Fields read from a label (a Reading with boxes, or text lines)."""
    lines = _lines(source)
    out: dict[str, Field] = {}
    features: list[str] = []
    maybe: dict[str, tuple[str, ...]] = {}
    if not lines:
        return Extraction({}, ())
    _numbers(lines, out, maybe)
    _grade(lines, out)
    _places(lines, out)
    _brewery(lines, out)
    _brand(lines, out, maybe)
    _features(lines, out, features)
    _product(lines, out)
    return Extraction(out, tuple(features), maybe)
