"""Imitate a phone photograph of a label: each call draws its own perspective, rotation (≤ 5°),
glare, blur, scale (0.3–2× the rendered label), JPEG quality (≥ 40) and an optional crop of
2–8 % off one side or corner. Two calls on one label give two independent photographs."""

from __future__ import annotations

import io
import math
import random

import numpy as np
from PIL import Image, ImageFilter

BACKGROUNDS = [(92, 70, 52), (180, 172, 160), (40, 42, 46), (210, 205, 195), (120, 100, 80), (60, 80, 70)]


def _perspective_coeffs(src: list[tuple[float, float]], dst: list[tuple[float, float]]) -> list[float]:
    """Coefficients for PIL's PERSPECTIVE transform mapping output `dst` points to input `src`."""
    a = []
    b = []
    for (x, y), (u, v) in zip(dst, src, strict=True):
        a.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        a.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        b += [u, v]
    return list(np.linalg.solve(np.array(a, float), np.array(b, float)))


def photograph(
    img: Image.Image,
    rng: random.Random,
    *,
    scale: tuple[float, float] = (0.3, 2.0),
    max_rotation: float = 5.0,
    crop: float | None = 0.5,
    quality: tuple[int, int] = (40, 95),
) -> tuple[Image.Image, dict]:
    """A photo of `img`: returns the decoded JPEG and the parameters drawn.

    crop: probability of cutting 2–8 % off one side or corner (None/0: never).
    """
    w, h = img.size
    s = math.exp(rng.uniform(math.log(scale[0]), math.log(scale[1])))
    margin = rng.uniform(0.03, 0.09)
    cw, ch = int(w * (1 + 2 * margin) * s), int(h * (1 + 2 * margin) * s)
    bg = BACKGROUNDS[rng.randrange(len(BACKGROUNDS))]
    # where the label's corners land (perspective: each corner moved on its own, then rotated)
    jit = rng.uniform(0.0, 0.06)
    corners = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)]
    ang = math.radians(rng.uniform(-max_rotation, max_rotation))
    cx, cy = cw / 2, ch / 2
    dst = []
    for u, v in corners:
        x = (margin + u + rng.uniform(-jit, jit) * 0.5) / (1 + 2 * margin) * cw
        y = (margin + v + rng.uniform(-jit, jit) * 0.5) / (1 + 2 * margin) * ch
        dx, dy = x - cx, y - cy
        dst.append((cx + dx * math.cos(ang) - dy * math.sin(ang), cy + dx * math.sin(ang) + dy * math.cos(ang)))
    src = [(0, 0), (w, 0), (w, h), (0, h)]
    coeffs = _perspective_coeffs(src, dst)
    warped = img.convert("RGB").transform((cw, ch), Image.Transform.PERSPECTIVE, coeffs, Image.Resampling.BICUBIC)
    mask = Image.new("L", img.size, 255).transform(
        (cw, ch), Image.Transform.PERSPECTIVE, coeffs, Image.Resampling.BILINEAR
    )
    canvas = Image.new("RGB", (cw, ch), bg)
    noise = np.asarray(canvas, np.int16) + np.random.default_rng(rng.getrandbits(32)).integers(-12, 13, (ch, cw, 1))
    canvas = Image.fromarray(np.clip(noise, 0, 255).astype(np.uint8))
    canvas.paste(warped, (0, 0), mask)
    # lighting: a soft gradient and a glare spot
    arr = np.asarray(canvas, np.float32)
    yy, xx = np.mgrid[0:ch, 0:cw].astype(np.float32)
    shade = 1.0 - rng.uniform(0.0, 0.25) * (xx / cw if rng.random() < 0.5 else yy / ch)
    arr *= shade[..., None]
    glare = rng.uniform(0.0, 0.55)
    if glare > 0.05:
        gx, gy = rng.uniform(0.1, 0.9) * cw, rng.uniform(0.1, 0.9) * ch
        rad = rng.uniform(0.08, 0.25) * max(cw, ch)
        spot = np.exp(-(((xx - gx) ** 2 + (yy - gy) ** 2) / (2 * rad * rad)))
        arr = arr + (255 - arr) * (glare * spot)[..., None]
    canvas = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    blur = rng.uniform(0.0, 1.6) * max(0.5, min(1.5, s))
    if blur > 0.2:
        canvas = canvas.filter(ImageFilter.GaussianBlur(blur))
    cut = None
    if crop and rng.random() < crop:
        frac = rng.uniform(0.02, 0.08)
        where = rng.choice(["left", "right", "top", "bottom", "tl", "tr", "bl", "br"])
        x0, t, r, b = 0, 0, cw, ch
        if where in ("left", "tl", "bl"):
            x0 = int(cw * frac)
        if where in ("right", "tr", "br"):
            r = cw - int(cw * frac)
        if where in ("top", "tl", "tr"):
            t = int(ch * frac)
        if where in ("bottom", "bl", "br"):
            b = ch - int(ch * frac)
        canvas = canvas.crop((x0, t, r, b))
        cut = {"side": where, "fraction": round(frac, 3)}
    q = rng.randint(*quality)
    buf = io.BytesIO()
    canvas.save(buf, "JPEG", quality=q)
    buf.seek(0)
    out = Image.open(buf)
    out.load()
    params = {
        "scale": round(s, 3),
        "rotation_deg": round(math.degrees(ang), 2),
        "perspective": round(jit, 3),
        "glare": round(glare, 3),
        "blur": round(blur, 2),
        "jpeg_quality": q,
        "crop": cut,
        "size": list(out.size),
    }
    return out, params
