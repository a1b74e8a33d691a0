"""A synthetic, deterministic catalogue of sake and juice labels (metadata only).

`generate_labels(n, seed)` returns `Label`s whose `fields()` are exactly what an uploader sends to
ingest (category, brand_name, product_name, brewery, region, label_features). The same seed gives the
same labels on every machine. Each label also carries readings (kana, romaji) and English names, so
evaluation queries can be written in romaji, English or with typos (`tools.datagen.eval_queries`).

Brands are either well-known names (獺祭, 北の誉, 八海山 ...) or composed from parts with known
readings (雪 + の + 鶴 = 雪の鶴, ゆきのつる), so every brand has a reading without a dictionary.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import jaconv

# region (as the seed's filter uses it: a city or a prefecture), kana reading, English name, prefecture
REGIONS: list[tuple[str, str, str, str]] = [
    ("小樽", "おたる", "Otaru", "北海道"),
    ("旭川", "あさひかわ", "Asahikawa", "北海道"),
    ("函館", "はこだて", "Hakodate", "北海道"),
    ("青森", "あおもり", "Aomori", "青森"),
    ("弘前", "ひろさき", "Hirosaki", "青森"),
    ("秋田", "あきた", "Akita", "秋田"),
    ("盛岡", "もりおか", "Morioka", "岩手"),
    ("仙台", "せんだい", "Sendai", "宮城"),
    ("山形", "やまがた", "Yamagata", "山形"),
    ("会津", "あいづ", "Aizu", "福島"),
    ("新潟", "にいがた", "Niigata", "新潟"),
    ("長岡", "ながおか", "Nagaoka", "新潟"),
    ("長野", "ながの", "Nagano", "長野"),
    ("松本", "まつもと", "Matsumoto", "長野"),
    ("金沢", "かなざわ", "Kanazawa", "石川"),
    ("富山", "とやま", "Toyama", "富山"),
    ("福井", "ふくい", "Fukui", "福井"),
    ("飛騨", "ひだ", "Hida", "岐阜"),
    ("静岡", "しずおか", "Shizuoka", "静岡"),
    ("山梨", "やまなし", "Yamanashi", "山梨"),
    ("栃木", "とちぎ", "Tochigi", "栃木"),
    ("千葉", "ちば", "Chiba", "千葉"),
    ("東京", "とうきょう", "Tokyo", "東京"),
    ("伏見", "ふしみ", "Fushimi", "京都"),
    ("灘", "なだ", "Nada", "兵庫"),
    ("奈良", "なら", "Nara", "奈良"),
    ("和歌山", "わかやま", "Wakayama", "和歌山"),
    ("広島", "ひろしま", "Hiroshima", "広島"),
    ("西条", "さいじょう", "Saijo", "広島"),
    ("岡山", "おかやま", "Okayama", "岡山"),
    ("山口", "やまぐち", "Yamaguchi", "山口"),
    ("松江", "まつえ", "Matsue", "島根"),
    ("高知", "こうち", "Kochi", "高知"),
    ("愛媛", "えひめ", "Ehime", "愛媛"),
    ("徳島", "とくしま", "Tokushima", "徳島"),
    ("福岡", "ふくおか", "Fukuoka", "福岡"),
    ("佐賀", "さが", "Saga", "佐賀"),
    ("熊本", "くまもと", "Kumamoto", "熊本"),
    ("鹿児島", "かごしま", "Kagoshima", "鹿児島"),
    ("沖縄", "おきなわ", "Okinawa", "沖縄"),
]

# Well-known sake brands: (brand, reading, brewery, brewery reading, region)
FAMOUS_SAKE: list[tuple[str, str, str, str, str]] = [
    ("獺祭", "だっさい", "旭酒造", "あさひしゅぞう", "山口"),
    ("北の誉", "きたのほまれ", "北の誉酒造", "きたのほまれしゅぞう", "小樽"),
    ("八海山", "はっかいさん", "八海醸造", "はっかいじょうぞう", "新潟"),
    ("久保田", "くぼた", "朝日酒造", "あさひしゅぞう", "長岡"),
    ("十四代", "じゅうよんだい", "高木酒造", "たかぎしゅぞう", "山形"),
    ("田酒", "でんしゅ", "西田酒造店", "にしだしゅぞうてん", "青森"),
    ("黒龍", "こくりゅう", "黒龍酒造", "こくりゅうしゅぞう", "福井"),
    ("男山", "おとこやま", "男山酒造", "おとこやましゅぞう", "旭川"),
    ("月桂冠", "げっけいかん", "月桂冠酒造", "げっけいかんしゅぞう", "伏見"),
    ("白鶴", "はくつる", "白鶴酒造", "はくつるしゅぞう", "灘"),
    ("賀茂鶴", "かもつる", "賀茂鶴酒造", "かもつるしゅぞう", "西条"),
    ("司牡丹", "つかさぼたん", "司牡丹酒造", "つかさぼたんしゅぞう", "高知"),
    ("新政", "あらまさ", "新政酒造", "あらまさしゅぞう", "秋田"),
    ("浦霞", "うらかすみ", "佐浦", "さうら", "仙台"),
    ("醸し人九平次", "かもしびとくへいじ", "萬乗醸造", "ばんじょうじょうぞう", "東京"),
    ("手取川", "てどりがわ", "吉田酒造店", "よしだしゅぞうてん", "金沢"),
]

# Parts that compose brand names, each with its kana reading.
_HEAD = [
    ("雪", "ゆき"),
    ("月", "つき"),
    ("花", "はな"),
    ("北", "きた"),
    ("白", "しろ"),
    ("天", "てん"),
    ("春", "はる"),
    ("秋", "あき"),
    ("星", "ほし"),
    ("朝", "あさ"),
    ("夢", "ゆめ"),
    ("風", "かぜ"),
    ("山", "やま"),
    ("海", "うみ"),
    ("森", "もり"),
    ("桜", "さくら"),
    ("紅", "べに"),
    ("翠", "みどり"),
    ("鷹", "たか"),
    ("龍", "たつ"),
    ("空", "そら"),
    ("霧", "きり"),
    ("浜", "はま"),
    ("峰", "みね"),
    ("蔵", "くら"),
    ("光", "ひかり"),
    ("泉", "いずみ"),
    ("岩", "いわ"),
    ("川", "かわ"),
    ("松", "まつ"),
]
_TAIL = [
    ("誉", "ほまれ"),
    ("鶴", "つる"),
    ("舞", "まい"),
    ("華", "はな"),
    ("泉", "いずみ"),
    ("光", "ひかり"),
    ("雫", "しずく"),
    ("里", "さと"),
    ("灯", "あかり"),
    ("露", "つゆ"),
    ("宴", "うたげ"),
    ("姫", "ひめ"),
    ("翁", "おきな"),
    ("波", "なみ"),
    ("響", "ひびき"),
    ("彩", "いろどり"),
    ("音", "おと"),
    ("寿", "ことぶき"),
    ("錦", "にしき"),
    ("友", "とも"),
    ("守", "まもり"),
    ("峰", "みね"),
    ("詩", "うた"),
    ("心", "こころ"),
]
_BREWERY_SUFFIX = [
    ("酒造", "しゅぞう"),
    ("酒造店", "しゅぞうてん"),
    ("本店", "ほんてん"),
    ("醸造", "じょうぞう"),
    ("酒蔵", "さかぐら"),
]
_FAMILY = [
    ("佐藤", "さとう"),
    ("高橋", "たかはし"),
    ("田中", "たなか"),
    ("渡辺", "わたなべ"),
    ("伊藤", "いとう"),
    ("中村", "なかむら"),
    ("小林", "こばやし"),
    ("加藤", "かとう"),
    ("吉田", "よしだ"),
    ("山田", "やまだ"),
    ("松本", "まつもと"),
    ("井上", "いのうえ"),
    ("木村", "きむら"),
    ("清水", "しみず"),
    ("池田", "いけだ"),
    ("橋本", "はしもと"),
    ("石川", "いしかわ"),
    ("前田", "まえだ"),
    ("藤田", "ふじた"),
    ("岡田", "おかだ"),
]

SAKE_GRADES = ["純米大吟醸", "大吟醸", "純米吟醸", "吟醸", "特別純米", "純米", "本醸造", "特別本醸造", "普通酒"]
# feature, English alias
SAKE_FEATURES: list[tuple[str, str]] = [
    ("辛口", "dry"),
    ("甘口", "sweet"),
    ("淡麗", "light and crisp"),
    ("芳醇", "rich"),
    ("フルーティー", "fruity"),
    ("吟醸香", "ginjo aroma"),
    ("生酒", "unpasteurized"),
    ("生詰", "single pasteurized"),
    ("ひやおろし", "autumn release"),
    ("山廃", "yamahai"),
    ("生酛", "kimoto"),
    ("無濾過", "unfiltered"),
    ("原酒", "undiluted"),
    ("発泡", "sparkling"),
    ("熟成", "aged"),
    ("にごり", "cloudy"),
    ("山田錦", "yamada nishiki rice"),
    ("雄町", "omachi rice"),
    ("五百万石", "gohyakumangoku rice"),
    ("美山錦", "miyama nishiki rice"),
    ("冷酒向け", "best chilled"),
    ("燗酒向け", "best warm"),
    ("金箔ラベル", "gold leaf label"),
    ("筆文字ラベル", "brush lettering label"),
    ("鶴の絵", "crane picture"),
    ("桜の絵", "cherry blossom picture"),
    ("青いラベル", "blue label"),
    ("赤いラベル", "red label"),
    ("黒いラベル", "black label"),
    ("限定品", "limited edition"),
]
JUICE_FRUITS: list[tuple[str, str, str]] = [
    ("りんご", "りんご", "apple"),
    ("みかん", "みかん", "mandarin orange"),
    ("ぶどう", "ぶどう", "grape"),
    ("もも", "もも", "peach"),
    ("梨", "なし", "pear"),
    ("ゆず", "ゆず", "yuzu"),
    ("トマト", "とまと", "tomato"),
    ("ブルーベリー", "ぶるーべりー", "blueberry"),
    ("いちご", "いちご", "strawberry"),
    ("シークヮーサー", "しーくわーさー", "shikuwasa"),
]
JUICE_FEATURES: list[tuple[str, str]] = [
    ("果汁100%", "100% juice"),
    ("無添加", "additive free"),
    ("ストレート", "not from concentrate"),
    ("濃縮還元", "from concentrate"),
    ("炭酸", "sparkling"),
    ("無糖", "no sugar"),
    ("瓶入り", "glass bottle"),
    ("紙パック", "carton"),
    ("有機栽培", "organic"),
    ("贈答用", "gift"),
    ("果肉入り", "with pulp"),
    ("緑のラベル", "green label"),
    ("オレンジのラベル", "orange label"),
    ("イラストラベル", "illustrated label"),
]
_JUICE_MAKER_SUFFIX = [
    ("果樹園", "かじゅえん"),
    ("農園", "のうえん"),
    ("果汁工房", "かじゅうこうぼう"),
    ("ファーム", "ふぁーむ"),
]
_JUICE_BRAND_TAIL = [
    ("の恵み", "のめぐみ"),
    ("しぼり", "しぼり"),
    ("の雫", "のしずく"),
    ("物語", "ものがたり"),
    ("日和", "びより"),
]


def romaji(kana: str) -> str:
    """Hepburn-ish romaji of a kana string, long vowels written as the learner would (ou, uu)."""
    return jaconv.kana2alphabet(jaconv.kata2hira(kana)).replace("-", "")


@dataclass(frozen=True)
class Label:
    category: str
    brand_name: str
    product_name: str
    brewery: str
    region: str
    label_features: tuple[str, ...]
    # not sent to ingest: readings and names used to write evaluation queries
    key: str = ""
    brand_reading: str = ""
    brewery_reading: str = ""
    features_en: tuple[str, ...] = ()
    grade: str = ""  # sake grade or juice fruit
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def fields(self) -> dict:
        """Exactly the uploader's fields for ingest."""
        return {
            "category": self.category,
            "brand_name": self.brand_name,
            "product_name": self.product_name,
            "brewery": self.brewery,
            "region": self.region,
            "label_features": list(self.label_features),
        }

    @property
    def brand_romaji(self) -> str:
        return romaji(self.brand_reading)

    @property
    def brewery_romaji(self) -> str:
        return romaji(self.brewery_reading)

    @property
    def region_en(self) -> str:
        return REGION_EN[self.region]

    @property
    def prefecture(self) -> str:
        return REGION_PREF[self.region]


REGION_EN = {r: en for r, _, en, _ in REGIONS}
REGION_READING = {r: kana for r, kana, _, _ in REGIONS}
REGION_PREF = {r: pref for r, _, _, pref in REGIONS}
FEATURE_EN = dict(SAKE_FEATURES) | dict(JUICE_FEATURES)


@dataclass(frozen=True)
class Brand:
    category: str
    name: str
    reading: str
    brewery: str
    brewery_reading: str
    region: str


def _brands(rng: random.Random, n_sake: int, n_juice: int) -> list[Brand]:
    brands = [Brand("sake", *famous) for famous in FAMOUS_SAKE]
    used = {b.name for b in brands}
    _add_sake_brands(rng, brands, used, n_sake)
    _add_juice_brands(rng, brands, used, n_juice)
    return brands


def _fresh_name(name: str, reading: str, used: set[str], num: int) -> tuple[str, str] | None:
    """The name if unused; numbered (雪の鶴 弐号 ...) once a very large catalogue runs out of parts;
    None: draw again."""
    if name not in used:
        return name, reading
    if len(used) < 0.8 * len(_HEAD) * len(_TAIL) * 2:
        return None
    name, reading = f"{name}{num}", f"{reading}{num}"
    return None if name in used else (name, reading)


def _add_sake_brands(rng: random.Random, brands: list[Brand], used: set[str], n_sake: int) -> None:
    regions = [r for r, *_ in REGIONS]
    breweries: list[tuple[str, str, str]] = []  # (name, reading, region): one brewery makes 1-3 brands
    while len(brands) < n_sake:
        h, t = rng.choice(_HEAD), rng.choice(_TAIL)
        if h[0] == t[0]:
            continue
        with_no = rng.random() < 0.4
        fresh = _fresh_name(
            h[0] + ("の" if with_no else "") + t[0], h[1] + ("の" if with_no else "") + t[1], used, len(brands)
        )
        if fresh is None:
            continue
        name, reading = fresh
        used.add(name)
        brewery = _sake_brewery(rng, name, reading, breweries, regions)
        if brewery is not None:
            brands.append(Brand("sake", name, reading, *brewery))


def _sake_brewery(
    rng: random.Random, name: str, reading: str, breweries: list[tuple[str, str, str]], regions: list[str]
) -> tuple[str, str, str] | None:
    """(brewery, reading, region): often one that already makes a brand; None: a new one that
    collides with a known name (draw again)."""
    if breweries and rng.random() < 0.3:
        return rng.choice(breweries)
    if rng.random() < 0.5:
        fam = rng.choice(_FAMILY)
        suf = rng.choice(_BREWERY_SUFFIX)
        brewery, brewery_reading = fam[0] + suf[0], fam[1] + suf[1]
    else:
        suf = rng.choice(_BREWERY_SUFFIX[:2])
        brewery, brewery_reading = name + suf[0], reading + suf[1]
    region = rng.choice(regions)
    if any(b[0] == brewery for b in breweries):
        return None
    breweries.append((brewery, brewery_reading, region))
    return brewery, brewery_reading, region


def _add_juice_brands(rng: random.Random, brands: list[Brand], used: set[str], n_juice: int) -> None:
    juice_used = 0
    makers: list[tuple[str, str, str]] = []
    while juice_used < n_juice:
        if makers and rng.random() < 0.3:
            maker, maker_reading, region = rng.choice(makers)
            new_maker = False
        else:
            region, rkana, _, _ = rng.choice(REGIONS)
            fam = rng.choice(_FAMILY) if rng.random() < 0.5 else (region, rkana)
            suf = rng.choice(_JUICE_MAKER_SUFFIX)
            maker, maker_reading = fam[0] + suf[0], fam[1] + suf[1]
            new_maker = True
            if any(m[0] == maker for m in makers):
                continue
        tail, h = rng.choice(_JUICE_BRAND_TAIL), rng.choice(_HEAD)
        if rng.random() < 0.5:  # named after its own region
            fresh = _fresh_name(region + tail[0], REGION_READING[region] + tail[1], used, juice_used)
        else:
            fresh = _fresh_name(h[0] + tail[0], h[1] + tail[1], used, juice_used)
        if fresh is None:
            continue
        name, reading = fresh
        used.add(name)
        if new_maker:
            makers.append((maker, maker_reading, region))
        brands.append(Brand("juice", name, reading, maker, maker_reading, region))
        juice_used += 1


def generate_labels(n: int = 2000, seed: int = 0, juice_share: float = 0.3) -> list[Label]:
    """`n` distinct labels, deterministic for a seed. Several products share a brand (as on a
    real shelf), so a brand query has a handful of right answers."""
    rng = random.Random(seed)
    n_juice_labels = int(n * juice_share)
    n_sake_labels = n - n_juice_labels
    brands = _brands(rng, n_sake=max(len(FAMOUS_SAKE), n_sake_labels // 4), n_juice=max(1, n_juice_labels // 4))
    sake = [b for b in brands if b.category == "sake"]
    juice = [b for b in brands if b.category == "juice"]
    labels: list[Label] = []
    seen: set[str] = set()

    def add(brand: Brand, product: str, grade: str, feats: list[tuple[str, str]]) -> None:
        key = f"{brand.category}|{brand.name}|{product}"
        if key in seen:
            return
        seen.add(key)
        labels.append(
            Label(
                category=brand.category,
                brand_name=brand.name,
                product_name=product,
                brewery=brand.brewery,
                region=brand.region,
                label_features=tuple(f for f, _ in feats),
                key=key,
                brand_reading=brand.reading,
                brewery_reading=brand.brewery_reading,
                features_en=tuple(e for _, e in feats),
                grade=grade,
            )
        )

    i = 0
    while len(labels) < n_sake_labels:
        brand = sake[i % len(sake)] if i < len(sake) else rng.choice(sake)
        i += 1
        grade = rng.choice(SAKE_GRADES)
        feats = rng.sample(SAKE_FEATURES, rng.randint(2, 4))
        style = feats[0][0] if rng.random() < 0.5 else ""
        add(brand, f"{brand.name} {grade}" + (f" {style}" if style else ""), grade, feats)
    i = 0
    while len(labels) < n:
        brand = juice[i % len(juice)] if i < len(juice) else rng.choice(juice)
        i += 1
        fruit = rng.choice(JUICE_FRUITS)
        feats = [(fruit[0], fruit[2])] + rng.sample(JUICE_FEATURES, rng.randint(1, 3))
        add(
            brand,
            f"{brand.name} {fruit[0]}ジュース" + (f" {feats[1][0]}" if rng.random() < 0.5 else ""),
            fruit[0],
            feats,
        )
    return labels


def label_dicts(n: int = 2000, seed: int = 0) -> list[dict]:
    """`generate_labels` as plain ingest field dicts."""
    return [label.fields() for label in generate_labels(n, seed)]
