"""pipelines.think.places: area ⇄ prefecture ⇄ city, from pipelines/think/data/places.tsv."""

from __future__ import annotations

from pipelines.think import places


def test_every_prefecture_is_there_with_cities():
    pl = places.get()
    assert len(pl.pref_cities) == 47
    assert all(cities for cities in pl.pref_cities.values())


def test_the_catalogue_regions_all_resolve():
    from tools.datagen.catalog import REGIONS

    for region, _, en, pref in REGIONS:
        place = places.resolve(region)
        assert place is not None, region
        assert places.prefecture_of(region) == pref, region
        assert places.resolve(en) is not None, en


def test_levels_resolve_both_ways():
    assert places.prefecture_of("松江") == "島根"
    assert "松江" in places.cities_in("島根") and "松江" in places.cities_in("島根県")
    assert set(places.prefectures_in("九州")) >= {"福岡", "佐賀", "長崎", "熊本", "大分", "宮崎", "鹿児島"}
    assert places.prefectures_in("山陰") == ["鳥取", "島根"]
    assert "新潟" in places.prefectures_in("甲信越") and "新潟" in places.prefectures_in("北陸")
    assert places.resolve("Kyushu").name == "九州" and places.resolve("niigata").name == "新潟"
    assert places.resolve("京都府").level == "prefecture" and places.resolve("灘").level == "city"
    # a name that is both a prefecture and a city means the prefecture (the broader reading)
    assert places.resolve("新潟").level == "prefecture"
    assert places.resolve("どこでもない") is None and places.prefecture_of("九州") == ""


def test_within_and_find():
    assert places.within("長岡", "新潟") and places.within("松江", "山陰") and places.within("灘", "関西")
    assert not places.within("新潟", "長岡") and not places.within("高知", "島根")
    found = [(p.name, p.level) for _, _, p in places.find("新潟県長岡市の酒と九州地方")]
    assert found == [("新潟", "prefecture"), ("長岡", "city"), ("九州", "area")]


def test_the_data_is_packaged():
    import tomllib
    from pathlib import Path

    cfg = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "data/*.tsv" in cfg["tool"]["setuptools"]["package-data"]["pipelines.think"]
    assert places.PATH.name == "places.tsv" and places.PATH.parent.name == "data"
