"""Places of Japan at three levels: area (九州, 東北, 北陸 ...) ⇄ prefecture (新潟) ⇄ city (長岡, 灘).

Data: pipelines/think/data/places.tsv (all 47 prefectures with their main sake cities and towns, the
catalogue's regions included). Labels carry a region that is a city or a prefecture (松江, 新潟); a
question or an address line may name any level ("島根", "九州あたり", "新潟県長岡市", "Niigata").

    resolve("島根県")        -> Place(name="島根", level="prefecture", prefectures=("島根",), ...)
    prefecture_of("松江")    -> "島根"
    cities_in("新潟")        -> ["新潟", "長岡", ...]
    prefectures_in("九州")   -> ["福岡", "佐賀", ...]
    within("長岡", "新潟")   -> True   (a label region lies inside a place the question names)
    find("新潟県長岡市の酒")  -> [(0, 3, Place(新潟)), (3, 6, Place(長岡))]

A name that is both a prefecture and a city (新潟, 山形, 広島) resolves to the prefecture, the
broader reading: asked "新潟の酒", labels from 長岡 count. Names are NFKC-normalised; the
suffixes 都/道/府/県 (prefectures), 市/町/村 (cities) and 地方/地域/エリア (areas) are accepted; romaji
and English forms (Niigata, Kyushu, Kansai) come from the readings.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).resolve().parent / "data" / "places.tsv"

# area -> reading (the areas' members come from the prefectures' lines)
AREA_READINGS = {
    "北海道": "ほっかいどう",
    "東北": "とうほく",
    "関東": "かんとう",
    "甲信越": "こうしんえつ",
    "北陸": "ほくりく",
    "中部": "ちゅうぶ",
    "東海": "とうかい",
    "近畿": "きんき",
    "関西": "かんさい",
    "中国": "ちゅうごく",
    "山陰": "さんいん",
    "山陽": "さんよう",
    "四国": "しこく",
    "九州": "きゅうしゅう",
    "沖縄": "おきなわ",
}
# the grouping a prefecture's areas say nothing of: 北海道 and 沖縄 are areas of their own too
_PREF_SUFFIX = ("都", "道", "府", "県")
_CITY_SUFFIX = ("市", "町", "村", "区")
_AREA_SUFFIX = ("地方", "地域", "エリア", "方面")


@dataclass(frozen=True)
class Place:
    name: str  # canonical, without suffix: 九州, 新潟, 松江
    level: str  # area | prefecture | city
    reading: str  # kana
    prefectures: tuple[str, ...]  # the prefectures it covers (a city: its own)
    cities: tuple[str, ...]  # the listed cities it covers (a city: itself)

    @property
    def romaji(self) -> str:
        from pipelines.search.tokenizer import kana_to_romaji, normalize_romaji

        return normalize_romaji(kana_to_romaji(self.reading))


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text or "").strip().lower()


class Places:
    def __init__(self, rows: list[tuple[str, str, str, str, str]]):  # noqa: C901 - the indexes, built in one pass
        self.pref_reading: dict[str, str] = {}
        self.pref_areas: dict[str, list[str]] = {}
        self.pref_cities: dict[str, list[str]] = {}
        self.city_pref: dict[str, str] = {}
        self.city_reading: dict[str, str] = {}
        self.area_prefs: dict[str, list[str]] = {a: [] for a in AREA_READINGS}
        for areas, pref, pref_reading, city, city_reading in rows:
            self.pref_reading.setdefault(pref, pref_reading)
            self.pref_cities.setdefault(pref, [])
            for area in (a.strip() for a in areas.split("|") if a.strip()):
                self.pref_areas.setdefault(pref, [])
                if area not in self.pref_areas[pref]:
                    self.pref_areas[pref].append(area)
                prefs = self.area_prefs.setdefault(area, [])
                if pref not in prefs:
                    prefs.append(pref)
            if city and city not in self.pref_cities[pref]:
                self.pref_cities[pref].append(city)
                self.city_pref.setdefault(city, pref)
                self.city_reading.setdefault(city, city_reading)
        self.by_name: dict[str, Place] = {}
        # cities first, then prefectures, then areas: a name at several levels keeps the broader one
        for city, pref in self.city_pref.items():
            self.by_name[city] = Place(city, "city", self.city_reading[city], (pref,), (city,))
        for pref, cities in self.pref_cities.items():
            self.by_name[pref] = Place(pref, "prefecture", self.pref_reading[pref], (pref,), tuple(cities))
        for area, prefs in self.area_prefs.items():
            if not prefs or (area in self.pref_cities and prefs == [area]):
                continue  # 北海道: the prefecture is the area
            in_area = tuple(c for p in prefs for c in self.pref_cities[p])
            self.by_name[area] = Place(area, "area", AREA_READINGS.get(area, ""), tuple(prefs), in_area)
        # every written form -> canonical name (suffixed forms and romaji)
        self.forms: dict[str, str] = {}
        for name, place in self.by_name.items():
            self.forms.setdefault(name, name)
            suffixes = {"prefecture": _PREF_SUFFIX, "city": _CITY_SUFFIX, "area": _AREA_SUFFIX}[place.level]
            for suf in suffixes:
                self.forms.setdefault(name + suf, name)
        for name, place in self.by_name.items():  # a city's suffixed form must not shadow a prefecture
            if place.level == "city":
                for suf in _CITY_SUFFIX:
                    self.forms.setdefault(name + suf, name)
        self.romaji: dict[str, str] = {}
        for name, place in sorted(
            self.by_name.items(), key=lambda kv: ("area", "prefecture", "city").index(kv[1].level)
        ):
            if place.reading:
                self.romaji.setdefault(place.romaji, name)
        self.longest = max(len(f) for f in self.forms)

    def resolve(self, name: str) -> Place | None:
        """The place a name means (新潟県, 新潟, にいがた? no: kana readings are not names; Niigata yes)."""
        n = _norm(name)
        canon = self.forms.get(n)
        if canon is None and n.isascii():
            from pipelines.search.tokenizer import normalize_romaji

            canon = self.romaji.get(normalize_romaji(n.replace(" ", "").replace("-", "").replace("'", "")))
        return self.by_name.get(canon) if canon else None

    def find(self, text: str) -> list[tuple[int, int, Place]]:
        """Places named in a Japanese text, longest first, left to right, not overlapping
        (positions in the NFKC-normalised, lower-cased text)."""
        t = _norm(text)
        out: list[tuple[int, int, Place]] = []
        i = 0
        while i < len(t):
            for j in range(min(len(t), i + self.longest), i, -1):
                canon = self.forms.get(t[i:j])
                if canon is not None:
                    out.append((i, j, self.by_name[canon]))
                    i = j
                    break
            else:
                i += 1
        return out


@lru_cache(maxsize=1)
def get() -> Places:
    rows = []
    for line in PATH.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if cells[:2] == ["area", "prefecture"]:
            continue
        cells += [""] * (5 - len(cells))
        rows.append((cells[0], cells[1], cells[2], cells[3], cells[4]))
    return Places(rows)


def resolve(name: str) -> Place | None:
    return get().resolve(name)


def prefecture_of(city: str) -> str:
    """The prefecture a city (or a prefecture) lies in; "" when unknown or an area."""
    p = resolve(city)
    return p.prefectures[0] if p is not None and p.level != "area" else ""


def cities_in(prefecture: str) -> list[str]:
    p = resolve(prefecture)
    return list(p.cities) if p is not None and p.level != "city" else []


def prefectures_in(area: str) -> list[str]:
    p = resolve(area)
    return list(p.prefectures) if p is not None else []


def areas_of(prefecture: str) -> list[str]:
    pref = prefecture_of(prefecture)
    return list(get().pref_areas.get(pref, [])) + ([pref] if pref in get().area_prefs else [])


def within(region: str, place: Place | str) -> bool:
    """Whether a label's region (a city or a prefecture name) lies inside `place`."""
    target = resolve(place) if isinstance(place, str) else place
    here = resolve(region)
    if target is None or here is None:
        return target is not None and _norm(region) == _norm(target.name)
    if target.level == "city":
        return here.name == target.name
    if here.level == "area":
        return set(here.prefectures) <= set(target.prefectures)
    return here.prefectures[0] in target.prefectures


def find(text: str) -> list[tuple[int, int, Place]]:
    return get().find(text)
