"""Label specs and their rendering (front and back labels, vertical and horizontal).

Independent of tools/datagen and bench/neardup_eval.py: its own name pools, addresses, designs
and drawing code. Nothing here imports pipelines/ (the reader under test).
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

FONT_DIRS = (Path("/usr/share/fonts"),)

# Typefaces by split. Brush faces draw the brand; print faces the small text. The split is by
# typeface, so the held-out set is read in faces the reader was never tuned on.
FONTS: dict[str, dict[str, list[str]]] = {
    "tune": {
        "brush": ["truetype/aoyagi-kouzan-t/AoyagiKouzanT.ttf"],
        "print": ["opentype/ipaexfont-mincho/ipaexm.ttf", "opentype/noto/NotoSansCJK-Regular.ttc"],
    },
    "heldout": {
        "brush": [
            "truetype/aoyagi-soseki/aoyagi-soseki.ttf",
            "truetype/kouzan-mouhitsu/kouzan-mouhitsu.ttf",
        ],
        "print": ["opentype/ipaexfont-gothic/ipaexg.ttf", "opentype/noto/NotoSerifCJK-Regular.ttc"],
    },
}
FALLBACK_FONT = "opentype/ipaexfont-mincho/ipaexm.ttf"

GRADES = ["純米大吟醸", "大吟醸", "純米吟醸", "吟醸", "特別純米", "純米", "特別本醸造", "本醸造"]
RICE = ["山田錦", "雄町", "五百万石", "美山錦", "八反錦", "出羽燦々", "愛山", "亀の尾", "秋田酒こまち", "吟風"]
STYLES = ["生酒", "生詰", "山廃", "生酛", "無濾過", "原酒", "ひやおろし", "にごり", "しぼりたて", "熟成"]
VOLUMES = ["720ml", "1800ml", "300ml", "500ml"]
JUICE_VOLUMES = ["1000ml", "720ml", "500ml", "180ml"]

# Brand parts by split: a held-out brand is made of parts never drawn for tuning.
_HEADS = {
    "tune": ["雪", "月", "花", "北", "白", "天", "春", "星", "朝", "夢", "風", "山"],
    "heldout": ["海", "森", "桜", "紅", "鷹", "龍", "空", "霧", "浜", "峰", "松", "泉", "岩", "宝", "金"],
}
_TAILS = {
    "tune": ["誉", "鶴", "舞", "華", "光", "雫", "里", "灯"],
    "heldout": ["露", "宴", "姫", "翁", "波", "響", "錦", "寿", "正宗", "川", "乃井", "冠"],
}
_MIDS = ["の", "乃", ""]
# Real brands (public knowledge) used alongside the composed ones, split in halves.
_REAL = {
    "tune": ["獺祭", "八海山", "久保田", "十四代", "田酒", "黒龍", "月桂冠", "白鶴", "新政", "浦霞"],
    "heldout": [
        "賀茂鶴",
        "司牡丹",
        "手取川",
        "而今",
        "鍋島",
        "出羽桜",
        "菊正宗",
        "大七",
        "磯自慢",
        "真澄",
        "天狗舞",
        "菊姫",
        "南部美人",
        "一ノ蔵",
        "上喜元",
        "末廣",
        "澤乃井",
        "立山",
        "梵",
        "七本鎗",
    ],
}
_FAMILY = [
    "佐藤",
    "高橋",
    "田中",
    "渡辺",
    "伊藤",
    "中村",
    "小林",
    "加藤",
    "吉田",
    "山田",
    "井上",
    "木村",
    "清水",
    "池田",
    "橋本",
    "石川",
    "前田",
    "藤田",
    "岡田",
    "長谷川",
    "村上",
    "近藤",
    "坂本",
    "遠藤",
]
_BREWERY_SUFFIX = ["酒造", "酒造店", "醸造", "本店", "酒造場"]
# (prefecture, city, town part of the address)
PLACES = [
    ("北海道", "小樽市", "色内"),
    ("北海道", "旭川市", "永山"),
    ("青森県", "弘前市", "大字石渡"),
    ("岩手県", "盛岡市", "材木町"),
    ("宮城県", "大崎市", "松山"),
    ("秋田県", "湯沢市", "田町"),
    ("山形県", "天童市", "一日町"),
    ("山形県", "鶴岡市", "大山"),
    ("福島県", "会津若松市", "大町"),
    ("福島県", "喜多方市", "字寺町"),
    ("茨城県", "笠間市", "石井"),
    ("栃木県", "小山市", "卒島"),
    ("群馬県", "川場村", "門前"),
    ("埼玉県", "羽生市", "西"),
    ("千葉県", "香取市", "佐原"),
    ("東京都", "青梅市", "沢井"),
    ("神奈川県", "海老名市", "本郷"),
    ("新潟県", "南魚沼市", "長森"),
    ("新潟県", "長岡市", "朝日"),
    ("新潟県", "村上市", "上片町"),
    ("富山県", "砺波市", "中野"),
    ("石川県", "白山市", "坊丸町"),
    ("福井県", "鯖江市", "舟津町"),
    ("山梨県", "北杜市", "台ヶ原"),
    ("長野県", "諏訪市", "元町"),
    ("長野県", "佐久市", "根々井"),
    ("岐阜県", "高山市", "上三之町"),
    ("静岡県", "焼津市", "鰯ケ島"),
    ("愛知県", "半田市", "東本町"),
    ("三重県", "名張市", "本町"),
    ("滋賀県", "長浜市", "木之本町"),
    ("京都府", "京都市", "伏見区"),
    ("兵庫県", "神戸市", "東灘区"),
    ("兵庫県", "姫路市", "網干区"),
    ("奈良県", "御所市", "中本町"),
    ("和歌山県", "海南市", "溝ノ口"),
    ("島根県", "松江市", "石橋町"),
    ("岡山県", "倉敷市", "玉島"),
    ("広島県", "東広島市", "西条本町"),
    ("山口県", "岩国市", "周東町"),
    ("徳島県", "三好市", "池田町"),
    ("香川県", "琴平町", "榎井"),
    ("愛媛県", "西条市", "朔日市"),
    ("高知県", "高知市", "菜園場町"),
    ("福岡県", "久留米市", "城島町"),
    ("佐賀県", "鹿島市", "浜町"),
    ("熊本県", "熊本市", "島崎"),
    ("大分県", "宇佐市", "安心院町"),
    ("宮崎県", "延岡市", "北方町"),
    ("鹿児島県", "霧島市", "国分"),
]
_FRUITS = ["りんご", "みかん", "ぶどう", "もも", "ゆず", "梨", "トマト", "いちご"]
_JUICE_MAKERS = ["果樹園", "農園", "ファーム", "果汁工房"]

PALETTES = [  # (paper, ink, accent)
    ((246, 241, 228), (20, 20, 20), (170, 30, 30)),
    ((255, 255, 255), (10, 10, 10), (30, 60, 140)),
    ((236, 226, 200), (40, 25, 15), (120, 20, 20)),
    ((20, 24, 30), (240, 236, 220), (200, 170, 80)),
    ((250, 236, 236), (30, 20, 20), (160, 20, 60)),
    ((228, 238, 230), (15, 35, 25), (40, 100, 60)),
]


@dataclass(frozen=True)
class Design:
    """What two labels of one product line share: colours, layout, faces, frame, ornaments."""

    layout: str  # vertical | horizontal
    brand_font: str
    text_font: str
    palette: int
    frame: int  # 0 none, 1 single, 2 double
    ornament: int  # 0 none, 1 disc, 2 band
    width: int = 1000
    height: int = 1300


@dataclass(frozen=True)
class LabelSpec:
    """One label: what is printed on it (ground truth) and how it is drawn."""

    key: str
    kind: str  # sake | juice
    side: str  # front | back
    brand: str
    product_name: str
    brewery: str  # as printed (company name without 株式会社)
    prefecture: str
    city: str
    address: str  # town part, with the number
    grade: str  # 特定名称 ('' for juice)
    rice: str
    seimai: int | None  # 精米歩合 %
    alcohol: str  # e.g. 15度 ('' for juice)
    volume: str
    styles: tuple[str, ...]
    design: Design
    family: str = ""  # design family id (labels sharing a design)

    def fields(self) -> dict[str, str]:
        """Ground-truth fields, as printed on this side of the label (absent fields omitted)."""
        out = {
            "brand_name": self.brand,
            "brewery": self.brewery,
            "prefecture": self.prefecture,
            "city": self.city,
        }
        if self.grade:
            out["grade"] = self.grade
        if self.seimai is not None and (self.side == "back" or self.kind == "sake"):
            out["seimai"] = f"{self.seimai}%"
        if self.alcohol:
            out["alcohol"] = self.alcohol
        if self.volume:
            out["volume"] = self.volume
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["styles"] = list(self.styles)
        return d


def font_path(rel: str) -> str:
    for root in FONT_DIRS:
        p = root / rel
        if p.exists():
            return str(p)
    raise FileNotFoundError(
        f"font {rel} missing: apt-get install fonts-aoyagi-kouzan-t fonts-aoyagi-soseki "
        "fonts-kouzan-mouhitsu fonts-ipaexfont fonts-noto-cjk"
    )


@lru_cache(maxsize=256)
def _font(rel: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(font_path(rel), size)


@lru_cache(maxsize=8192)
def _has_glyph(rel: str, ch: str) -> bool:
    """Whether face `rel` draws `ch` (not the .notdef box)."""
    f = _font(rel, 48)
    try:
        return f.getmask(ch).getbbox() is not None and (bytes(f.getmask(ch)) != bytes(f.getmask("\U000f0000")))
    except (OSError, ValueError):
        return False


def _face(rel: str, ch: str) -> str:
    return rel if ch.isspace() or _has_glyph(rel, ch) else FALLBACK_FONT


_ROTATE_IN_VERTICAL = set("ー―-~〜()（）「」・:：")


def draw_text(
    img: Image.Image,
    xy: tuple[float, float],
    text: str,
    rel: str,
    size: int,
    fill: tuple[int, int, int],
    vertical: bool,
    spacing: float = 1.05,
) -> tuple[float, float, float, float]:
    """Draw `text` from its top-left (horizontal) or top-right (vertical) corner; per-character
    faces fall back to a print face where a brush face lacks the glyph. Returns the bbox."""
    d = ImageDraw.Draw(img)
    x, y = xy
    if not vertical:
        cx = x
        for ch in text:
            f = _font(_face(rel, ch), size)
            d.text((cx, y), ch, font=f, fill=fill)
            cx += f.getlength(ch) * (1.0 if ch.isascii() else spacing * 0.97)
        return (x, y, cx, y + size * 1.15)
    cy = y
    for ch in text:
        f = _font(_face(rel, ch), size)
        if ch in _ROTATE_IN_VERTICAL:
            tile = Image.new("L", (size * 2, size * 2), 0)
            ImageDraw.Draw(tile).text((size // 2, size // 2), ch, font=f, fill=255)
            tile = tile.rotate(-90)
            bb = tile.getbbox()
            if bb:
                tile = tile.crop(bb)
                ox = x - size + (size - tile.width) / 2
                img.paste(Image.new("RGB", tile.size, fill), (int(ox), int(cy + (size - tile.height) / 2)), tile)
        elif ch.isascii() and not ch.isspace():
            w = f.getlength(ch)
            d.text((x - size + (size - w) / 2, cy), ch, font=f, fill=fill)
            cy += size * 0.72 * spacing
            continue
        else:
            d.text((x - size, cy), ch, font=f, fill=fill)
        cy += size * spacing
    return (x - size, y, x, cy)


# --- specs ---------------------------------------------------------------------------------


def _brand(rng: random.Random, split: str) -> str:
    if rng.random() < 0.25:
        return rng.choice(_REAL[split])
    return rng.choice(_HEADS[split]) + rng.choice(_MIDS) + rng.choice(_TAILS[split])


def _brewery(rng: random.Random, brand: str) -> str:
    if rng.random() < 0.4:
        return brand.replace("の", "").replace("乃", "") + rng.choice(["酒造", "醸造"])
    return rng.choice(_FAMILY) + rng.choice(_BREWERY_SUFFIX)


def random_design(rng: random.Random, split: str = "heldout") -> Design:
    fonts = FONTS[split]
    return Design(
        layout=rng.choice(["vertical", "horizontal"]),
        brand_font=rng.choice(fonts["brush"]),
        text_font=rng.choice(fonts["print"]),
        palette=rng.randrange(len(PALETTES)),
        frame=rng.randrange(3),
        ornament=rng.randrange(3),
    )


def make_spec(
    rng: random.Random,
    *,
    split: str = "heldout",
    key: str = "",
    side: str | None = None,
    kind: str | None = None,
    design: Design | None = None,
    **overrides,
) -> LabelSpec:
    """A random label (sake, sometimes juice) for `split`; `overrides` fix any field."""
    kind = kind or ("juice" if rng.random() < 0.1 else "sake")
    side = side or rng.choice(["front", "back"])
    pref, city, town = rng.choice(PLACES)
    address = f"{town}{rng.randint(1, 3999)}" + (f"-{rng.randint(1, 30)}" if rng.random() < 0.4 else "")
    if kind == "juice":
        fruit = rng.choice(_FRUITS)
        brand = rng.choice(_HEADS[split]) + "の" + rng.choice(["恵み", "雫", "しぼり", "日和"])
        spec = LabelSpec(
            key=key,
            kind="juice",
            side=side,
            brand=brand,
            product_name=f"{fruit}ジュース",
            brewery=rng.choice(_FAMILY) + rng.choice(_JUICE_MAKERS),
            prefecture=pref,
            city=city,
            address=address,
            grade="",
            rice="",
            seimai=None,
            alcohol="",
            volume=rng.choice(JUICE_VOLUMES),
            styles=(rng.choice(["果汁100%", "無添加", "ストレート"]),),
            design=design or random_design(rng, split),
        )
    else:
        brand = _brand(rng, split)
        grade = rng.choice(GRADES)
        seimai = {
            "純米大吟醸": [35, 40, 45, 50],
            "大吟醸": [35, 40, 45, 50],
            "純米吟醸": [50, 55, 60],
            "吟醸": [55, 60],
            "特別純米": [55, 60],
            "特別本醸造": [55, 60],
            "純米": [60, 65, 70],
            "本醸造": [65, 70],
        }[grade]
        spec = LabelSpec(
            key=key,
            kind="sake",
            side=side,
            brand=brand,
            product_name=rng.choice(["", "", "辛口", "限定", "蔵出し", "秘蔵", "山廃仕込"]),
            brewery=_brewery(rng, brand),
            prefecture=pref,
            city=city,
            address=address,
            grade=grade,
            rice=rng.choice(RICE),
            seimai=rng.choice(seimai),
            alcohol=f"{rng.choice([14, 15, 15, 16, 16, 17, 18])}度",
            volume=rng.choice(VOLUMES),
            styles=tuple(rng.sample(STYLES, rng.randint(0, 2))),
            design=design or random_design(rng, split),
        )
    return replace(spec, **overrides) if overrides else spec


def design_family(
    rng: random.Random,
    n: int,
    *,
    split: str = "heldout",
    vary: str = "brand",
    side: str = "front",
    prefix: str = "fam",
) -> list[LabelSpec]:
    """`n` labels of one product line: one design, where only `vary` differs
    (brand | grade | number: the 精米歩合, アルコール分 or 内容量 printed), or with vary="design"
    the same text printed in `n` designs (a product's editions: the same words, other labels)."""
    base = make_spec(rng, split=split, side=side, kind="sake", key=f"{prefix}-0")
    fam = f"{prefix}:{vary}"
    out = [replace(base, family=fam)]
    seen = {(base.brand, base.grade, base.seimai, base.alcohol, base.volume)}
    tries = 0
    while len(out) < n and tries < 200 * n:
        tries += 1
        if vary == "design":
            s = replace(base, design=random_design(rng, split))
            if s.design in {o.design for o in out}:
                continue
            out.append(replace(s, key=f"{prefix}-{len(out)}", family=fam))
            continue
        if vary == "brand":
            s = replace(base, brand=_brand(rng, split))
        elif vary == "grade":
            s = replace(base, grade=rng.choice(GRADES))
        else:
            which = rng.choice(["seimai", "alcohol", "volume"])
            if which == "seimai":
                s = replace(base, seimai=rng.choice([35, 40, 45, 50, 55, 58, 60, 65, 70]))
            elif which == "alcohol":
                s = replace(base, alcohol=f"{rng.randint(13, 19)}度")
            else:
                s = replace(base, volume=rng.choice(VOLUMES))
        sig = (s.brand, s.grade, s.seimai, s.alcohol, s.volume)
        if sig in seen:
            continue
        seen.add(sig)
        out.append(replace(s, key=f"{prefix}-{len(out)}", family=fam))
    return out


# --- rendering -----------------------------------------------------------------------------


@dataclass
class Rendered:
    image: Image.Image
    lines: list[str] = field(default_factory=list)  # printed text, in reading order


def _frame(img: Image.Image, design: Design, accent: tuple[int, int, int]) -> None:
    d = ImageDraw.Draw(img)
    w, h = img.size
    if design.frame >= 1:
        d.rectangle((24, 24, w - 25, h - 25), outline=accent, width=6)
    if design.frame == 2:
        d.rectangle((40, 40, w - 41, h - 41), outline=accent, width=2)
    if design.ornament == 1:
        d.ellipse((w * 0.06, h * 0.045, w * 0.15, h * 0.045 + w * 0.09), fill=accent)  # a seal
    elif design.ornament == 2:
        d.rectangle((48, h - 64, w - 49, h - 50), fill=accent)  # a band under the text


def _numbers(spec: LabelSpec, kanji: bool = False) -> list[str]:
    out = []
    if spec.kind == "sake":
        out.append(f"精米歩合 {spec.seimai}%")
        out.append(f"アルコール分 {spec.alcohol}")
    out.append(f"内容量 {spec.volume}")
    return out


def render(spec: LabelSpec) -> Rendered:
    """Draw `spec`: returns the image and its printed lines in reading order."""
    des = spec.design
    paper, ink, accent = PALETTES[des.palette]
    img = Image.new("RGB", (des.width, des.height), paper)
    _frame(img, des, accent)
    if spec.side == "front":
        return _front(img, spec, ink, accent)
    return _back(img, spec, ink, accent)


def _front(img: Image.Image, spec: LabelSpec, ink, accent) -> Rendered:
    des = spec.design
    w, h = img.size
    lines: list[str] = []
    brand = spec.brand
    small = 40
    maker = f"{spec.brewery}"
    place = f"{spec.prefecture}{spec.city}"
    if des.layout == "vertical":
        size = min(260, int((h - 260) / max(1, len(brand)) / 1.05))
        bx = w / 2 + size / 2 + 40
        draw_text(img, (bx, 90), brand, des.brand_font, size, ink, True)
        lines.append(brand)
        col = bx + 40 + 56
        if spec.grade:
            draw_text(img, (min(w - 60, col), 110), spec.grade, des.text_font, 56, accent, True)
            lines.insert(0, spec.grade)
        x = bx - size - 60
        if spec.product_name:
            draw_text(img, (x, 140), spec.product_name, des.text_font, 48, ink, True)
            lines.append(spec.product_name)
            x -= 70
        sake_nums = [f"精米歩合{spec.seimai}%", f"アルコール分{spec.alcohol}"]
        nums = sake_nums if spec.kind == "sake" else list(spec.styles)
        for t in nums:
            draw_text(img, (x, 140), t, des.text_font, small, ink, True)
            lines.append(t)
            x -= small + 18
        x = max(x, 120)
        draw_text(img, (x, h - 120 - small * 1.05 * len(maker)), maker, des.text_font, small, ink, True)
        lines.append(maker)
        draw_text(img, (x - small - 18, h - 120 - small * 1.05 * len(place)), place, des.text_font, small, ink, True)
        lines.append(place)
        draw_text(img, (w - 70, h - 120 - small * 0.8 * len(spec.volume)), spec.volume, des.text_font, small, ink, True)
        # the volume column stands at the right edge: read first
        lines.insert(0, spec.volume)
    else:
        if spec.grade:
            draw_text(img, (w / 2 - 56 * len(spec.grade) / 2, 80), spec.grade, des.text_font, 56, accent, False)
            lines.append(spec.grade)
        size = min(300, int((w - 140) / max(1, len(brand)) / 1.0))
        draw_text(img, (w / 2 - size * len(brand) / 2, 190), brand, des.brand_font, size, ink, False)
        lines.append(brand)
        y = 190 + size * 1.2 + 40
        if spec.product_name:
            draw_text(
                img, (w / 2 - 48 * len(spec.product_name) / 2, y), spec.product_name, des.text_font, 48, ink, False
            )
            lines.append(spec.product_name)
            y += 80
        nums = _numbers(spec) if spec.kind == "sake" else [*spec.styles, f"内容量 {spec.volume}"]
        y = max(y, h - 200 - 60 * (len(nums) + 2))
        for t in nums:
            draw_text(img, (90, y), t, des.text_font, small, ink, False)
            lines.append(t)
            y += 60
        draw_text(img, (90, y), maker, des.text_font, small, ink, False)
        lines.append(maker)
        y += 60
        draw_text(img, (90, y), place, des.text_font, small, ink, False)
        lines.append(place)
    return Rendered(img, lines)


def _back(img: Image.Image, spec: LabelSpec, ink, accent) -> Rendered:
    des = spec.design
    w, h = img.size
    small = 34
    if spec.kind == "sake":
        body = [
            "品目 日本酒",
            f"特定名称 {spec.grade}",
            "原材料名 米(国産)・米麹(国産米)",
            f"使用米 {spec.rice}",
            f"精米歩合 {spec.seimai}%",
            f"アルコール分 {spec.alcohol}",
            f"内容量 {spec.volume}",
        ]
    else:
        body = [
            "名称 果実ジュース",
            f"原材料名 {spec.product_name.replace('ジュース', '')}(国産)",
            f"内容量 {spec.volume}",
        ]
    body += [f"製造者 {spec.brewery}株式会社", f"{spec.prefecture}{spec.city}{spec.address}"]
    lines = [spec.brand, *body]
    if des.layout == "vertical":
        bsize = 120
        x = w - 90
        draw_text(img, (x, 90), spec.brand, des.brand_font, bsize, ink, True)
        x -= bsize + 40
        for t in body:
            draw_text(img, (x, 100), t.replace(" ", "　"), des.text_font, small, ink, True)
            x -= small + 22
    else:
        bsize = 130
        draw_text(img, (w / 2 - bsize * len(spec.brand) / 2, 80), spec.brand, des.brand_font, bsize, ink, False)
        y = 80 + bsize * 1.3 + 30
        for t in body:
            draw_text(img, (80, y), t, des.text_font, small, ink, False)
            y += small * 1.7
    return Rendered(img, lines)
