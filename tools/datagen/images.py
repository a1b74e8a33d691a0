"""Synthetic sake / juice label images with Japanese text, near-duplicate variants with ground
truth, and real photographs (scikit-image's bundled data) for tests and benchmarks.

Everything is deterministic in its seed. The CJK font comes from the `noto-cjk-sans-jp-regular`
wheel (dev extra), else from Debian's fonts-noto-cjk / other system paths.

    img = render_label({"category": "sake", "brand_name": "獺祭", ...}, seed=1)
    for v in variants(img, seed=1): v.kind, v.image, v.params       # near duplicates of img
"""

from __future__ import annotations

import colorsys
import hashlib
import io
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageEnhance, ImageFont

SYSTEM_FONT_PATHS = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/opentype/noto/NotoSerifCJK-Regular.ttc",
    "/usr/share/fonts/truetype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/opentype/ipaexfont-gothic/ipaexg.ttf",
    "/usr/share/fonts/truetype/fonts-japanese-gothic.ttf",
    "/System/Library/Fonts/ヒラギノ角ゴシック W3.ttc",
)

# Edits of the same label an uploader produces (a near duplicate must be found for each of them).
VARIANT_KINDS = ("jpeg", "resize", "brightness", "contrast", "crop", "rotate", "perspective")
# A local occlusion: not in the default set, since a sticker is exactly what a different label
# from the same template looks like to a comparison of where the text sits.
EXTRA_KINDS = ("sticker",)


@lru_cache(maxsize=1)
def font_path() -> str:
    try:
        import noto_cjk_sans_jp_regular as noto

        p = Path(str(noto.FONT_PATH))
        if p.is_file():
            return str(p)
    except ImportError:
        pass
    for p in SYSTEM_FONT_PATHS:
        if Path(p).is_file():
            return p
    raise RuntimeError(
        "no CJK font: pip install noto-cjk-sans-jp-regular (dev extra) or apt-get install fonts-noto-cjk"
    )


@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(font_path(), size)


def _seed_of(meta: dict, seed: int | None) -> int:
    if seed is not None:
        return seed
    key = "|".join(str(meta.get(k, "")) for k in ("category", "brand_name", "product_name", "brewery", "region"))
    return int(hashlib.sha1(key.encode(), usedforsecurity=False).hexdigest()[:8], 16)


def _colour(rng: random.Random, light: bool) -> tuple[int, int, int]:
    h = rng.random()
    s = rng.uniform(0.25, 0.9)
    v = rng.uniform(0.8, 1.0) if light else rng.uniform(0.1, 0.45)
    r, g, b = colorsys.hsv_to_rgb(h, s, v)
    return int(r * 255), int(g * 255), int(b * 255)


def _vertical_text(draw: ImageDraw.ImageDraw, x: int, y: int, text: str, size: int, fill, max_h: int) -> None:
    """Japanese labels set the brand name top to bottom, one character per line; the size shrinks
    until every character fits in max_h (a brand name is never cut)."""
    size = max(6, min(size, int(max_h / (1.05 * max(1, len(text))))))
    font = _font(size)
    step = int(size * 1.05)
    for i, ch in enumerate(text):
        draw.text((x, y + i * step), ch, font=font, fill=fill, anchor="mt")


def _draw_band(d: ImageDraw.ImageDraw, rng: random.Random, w: int, h: int, accent) -> None:
    """A gradient band on one side (or a diagonal, or none) covering a seeded fraction."""
    band = rng.choice(("top", "bottom", "left", "right", "diag", "none"))
    if band == "none":
        return
    frac = rng.uniform(0.2, 0.45)
    if band == "top":
        d.rectangle((0, 0, w, int(h * frac)), fill=accent)
    elif band == "bottom":
        d.rectangle((0, int(h * (1 - frac)), w, h), fill=accent)
    elif band == "left":
        d.rectangle((0, 0, int(w * frac), h), fill=accent)
    elif band == "right":
        d.rectangle((int(w * (1 - frac)), 0, w, h), fill=accent)
    else:
        d.polygon([(0, h), (w, int(h * frac)), (w, h)], fill=accent)


def _fitted_font(text: str, size: int, max_w: int) -> ImageFont.FreeTypeFont:
    """The largest font <= size whose rendering of `text` is at most max_w wide."""
    font = _font(size)
    while size > 6 and font.getlength(text) > max_w:
        size = max(6, int(size * max_w / max(1.0, font.getlength(text))))
        font = _font(size)
        if font.getlength(text) > max_w:
            size -= 1
            font = _font(size)
    return font


def _draw_text(d: ImageDraw.ImageDraw, meta: dict, rng: random.Random, size: tuple[int, int], ink) -> None:
    """The brand name large (vertical for sake), then product, maker/region and features small;
    every line fitted to the label's width."""
    w, h = size
    brand = str(meta.get("brand_name") or "無銘")
    product = str(meta.get("product_name") or "")
    maker = str(meta.get("brewery") or "")
    region = str(meta.get("region") or "")
    features = meta.get("label_features") or []
    if isinstance(features, str):
        features = [f for f in features.replace(",", "、").split("、") if f]
    big = int(min(w / 3.2, h * 0.6 / max(2, len(brand))))
    if meta.get("category", "sake") == "sake":
        bx = int(w * rng.uniform(0.35, 0.65))
        _vertical_text(d, bx, int(h * 0.08), brand, big, ink, int(h * 0.62))
    else:
        d.text(
            (w // 2, int(h * rng.uniform(0.25, 0.4))),
            brand,
            font=_fitted_font(brand, max(10, int(w / max(4, len(brand) + 1))), int(w * 0.9)),
            fill=ink,
            anchor="mm",
        )
    small = max(9, w // 18)
    y = int(h * 0.74)
    for line in (product, f"{maker}　{region}".strip("　"), "・".join(features[:3])):
        if line:
            d.text((w // 2, y), line, font=_fitted_font(line, small, int(w * 0.92)), fill=ink, anchor="mt")
            y += int(small * 1.3)


def render_label(meta: dict, size: tuple[int, int] = (240, 360), seed: int | None = None) -> Image.Image:
    """A label-like image: coloured ground, a layout drawn from the seed, the brand name large
    (vertical for sake), product, brewery/maker, region and features as smaller text."""
    rng = random.Random(_seed_of(meta, seed))
    w, h = size
    dark_ground = rng.random() < 0.4
    bg, ink = _colour(rng, not dark_ground), _colour(rng, dark_ground)
    accent = _colour(rng, rng.random() < 0.5)
    img = Image.new("RGB", size, bg)
    d = ImageDraw.Draw(img)
    # Low-frequency structure differs per label (this is what a pHash sees): a gradient band,
    # big shapes at seeded places, a frame of seeded width.
    _draw_band(d, rng, w, h, accent)
    for _ in range(rng.randint(2, 5)):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        rad = rng.uniform(0.12, 0.35) * w
        shape_col = _colour(rng, rng.random() < 0.5)
        if rng.random() < 0.5:
            d.ellipse((cx - rad, cy - rad, cx + rad, cy + rad), fill=shape_col)
        else:
            d.polygon([(cx - rad, cy + rad), (cx, cy - rad), (cx + rad, cy + rad)], fill=shape_col)
    frame = rng.randint(0, max(1, w // 30))
    if frame:
        d.rectangle((frame, frame, w - frame - 1, h - frame - 1), outline=ink, width=max(1, frame // 2))

    _draw_text(d, meta, rng, size, ink)
    return img


def encode(img: Image.Image, fmt: str = "JPEG", quality: int = 90) -> bytes:
    buf = io.BytesIO()
    kw = {"quality": quality} if fmt in ("JPEG", "WEBP") else {}
    img.convert("RGB").save(buf, format=fmt, **kw)
    return buf.getvalue()


@dataclass
class Variant:
    kind: str
    image: Image.Image
    params: dict = field(default_factory=dict)


def variant(img: Image.Image, kind: str, rng: random.Random) -> Variant:
    """One near-duplicate of `img` of the given kind (parameters drawn from rng, kept as truth).

    Ranges: JPEG quality 40, resize 0.3-2x, brightness and contrast +-30 %, crop 2-8 % of each
    side in total (off-centre), rotation +-3 degrees, perspective warp moving each corner up to
    3 % of the side (a phone photo of the label)."""
    w, h = img.size
    if kind == "jpeg":
        q = 40
        return Variant(kind, Image.open(io.BytesIO(encode(img, "JPEG", q))).convert("RGB"), {"quality": q})
    if kind == "resize":
        f = rng.choice((rng.uniform(0.3, 0.8), rng.uniform(1.2, 2.0)))
        return Variant(
            kind, img.resize((max(8, int(w * f)), max(8, int(h * f))), Image.LANCZOS), {"factor": round(f, 3)}
        )
    if kind in ("brightness", "contrast"):
        f = rng.choice((rng.uniform(0.7, 0.9), rng.uniform(1.1, 1.3)))
        enhancer = ImageEnhance.Brightness if kind == "brightness" else ImageEnhance.Contrast
        return Variant(kind, enhancer(img).enhance(f), {"factor": round(f, 3)})
    if kind == "crop":
        fx, fy = rng.uniform(0.02, 0.08), rng.uniform(0.02, 0.08)  # share of the side removed
        left, top = int(w * fx * rng.random()), int(h * fy * rng.random())
        box = (left, top, left + w - int(w * fx), top + h - int(h * fy))
        return Variant(kind, img.crop(box), {"fraction": [round(fx, 3), round(fy, 3)], "box": list(box)})
    if kind == "rotate":
        a = rng.choice((-1, 1)) * rng.uniform(0.5, 3.0)
        fill = img.getpixel((0, 0))
        return Variant(kind, img.rotate(a, resample=Image.BICUBIC, fillcolor=fill), {"degrees": round(a, 2)})
    if kind == "perspective":
        # Each corner of the output takes its pixel from a point moved up to 3 % of the side.
        src = [(0, 0), (w, 0), (w, h), (0, h)]
        moved = [(x + rng.uniform(-0.03, 0.03) * w, y + rng.uniform(-0.03, 0.03) * h) for x, y in src]
        coeffs = _perspective_coeffs(src, moved)
        out = img.transform((w, h), Image.PERSPECTIVE, coeffs, Image.BICUBIC, fillcolor=img.getpixel((0, 0)))
        return Variant(kind, out, {"corners": [[round(x, 1), round(y, 1)] for x, y in moved]})
    if kind == "sticker":
        out = img.copy()
        d = ImageDraw.Draw(out)
        r = int(min(w, h) * rng.uniform(0.07, 0.1))
        cx, cy = int(w * rng.uniform(0.2, 0.8)), int(h * rng.uniform(0.2, 0.8))
        col = rng.choice(((220, 30, 30), (250, 200, 0), (255, 255, 255)))
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=col, outline=(0, 0, 0))
        d.text(
            (cx, cy),
            rng.choice(("限定", "新酒", "SALE", "金賞")),
            font=_font(max(8, r // 2)),
            fill=(0, 0, 0),
            anchor="mm",
        )
        return Variant(kind, out, {"center": [cx, cy], "radius": r})
    raise ValueError(f"unknown variant kind {kind!r}")


def _perspective_coeffs(dst: list[tuple[float, float]], src: list[tuple[float, float]]) -> list[float]:
    """PIL's 8 perspective coefficients mapping output points `dst` to input points `src`."""
    import numpy as np

    rows, rhs = [], []
    for (x, y), (u, v) in zip(dst, src, strict=True):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        rhs += [u, v]
    return np.linalg.solve(np.array(rows, dtype=float), np.array(rhs, dtype=float)).tolist()


def variants(img: Image.Image, seed: int = 0, kinds: tuple[str, ...] = VARIANT_KINDS) -> list[Variant]:
    rng = random.Random(seed)
    return [variant(img, k, rng) for k in kinds]


def template_labels(metas: list[dict], design_seed: int, size: tuple[int, int] = (240, 360)) -> list[Image.Image]:
    """Distinct labels printed from one design: the same ground, shapes and layout (one seed), only
    the brand and product text differ, as a brewery's product line looks. These are the hard
    negatives of near-duplicate detection: different labels that a global hash sees as one."""
    return [render_label(m, size=size, seed=design_seed) for m in metas]


def real_photos() -> list[tuple[str, Image.Image]]:
    """Real photographs bundled with scikit-image (no download): for real-image dedup checks."""
    from skimage import data

    out = []
    for name in (
        "astronaut",
        "coffee",
        "chelsea",
        "rocket",
        "camera",
        "coins",
        "moon",
        "page",
        "text",
        "horse",
        "hubble_deep_field",
        "immunohistochemistry",
        "retina",
        "motorcycle_left",
        "logo",
    ):  # cat() is chelsea()
        fn = getattr(data, name, None)
        if fn is None:
            continue
        try:
            arr = fn()
        except Exception:  # noqa: BLE001 - a data file that needs pooch (a download) fails variously: skip it
            continue
        if isinstance(arr, tuple):
            arr = arr[0]
        img = Image.fromarray(arr)
        if img.mode not in ("RGB", "L"):
            img = img.convert("RGB")
        out.append((name, img.convert("RGB")))
    return out


def label_set(n: int, seed: int = 0) -> list[dict]:
    """n label metadata dicts from the shared synthetic catalogue."""
    from tools.datagen.catalog import label_dicts

    return label_dicts(n, seed)


def write_dataset(
    out_dir: Path, n: int, *, seed: int = 0, size: tuple[int, int] = (240, 360), n_variants: int = 0, quality: int = 90
) -> list[dict]:
    """Render n labels (plus variants) as JPEG files; returns the manifest rows
    {file, original, kind, params, **label fields} (original = file of the base image)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, meta in enumerate(label_set(n, seed)):
        img = render_label(meta, size=size, seed=seed * 1_000_003 + i)
        name = f"label_{i:05d}.jpg"
        (out_dir / name).write_bytes(encode(img, "JPEG", quality))
        rows.append({"file": name, "original": name, "kind": "original", "params": {}, **meta})
        for v in variants(img, seed=seed * 7919 + i, kinds=VARIANT_KINDS[:n_variants] if n_variants else ()):
            vname = f"label_{i:05d}_{v.kind}.jpg"
            (out_dir / vname).write_bytes(encode(v.image, "JPEG", 92))
            rows.append({"file": vname, "original": name, "kind": v.kind, "params": v.params, **meta})
    return rows
