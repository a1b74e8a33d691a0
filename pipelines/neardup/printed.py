"""The printed-lines check: do two photographs print the same field lines, glyph for glyph?

The read text says what a label prints, but OCR misses and misreads small print; the aligned
picture check (pipelines.neardup.picture) looks at a 320-px picture, where small print is a few
pixels high. Two kinds of distinct labels pass both:

- a product line's labels (one design, another grade or number) whose differing value was read
  off one photograph only (text consistent, not agreeing);
- editions: the same text printed in another typeface (the picture's colour and coarse structure
  alike).

This check compares the lines that carry the read fields (特定名称, 精米歩合, アルコール分,
内容量) as printed: each line's box (where OCR found it, on the photograph that read it) is mapped
onto the other photograph through a homography of the two (ORB + RANSAC at HOMOGRAPHY_SIDE), both
crops are scaled so the line is UNIT px thick and blurred alike, and the line is compared window
by window (one character wide, each window at its best shift of up to SHIFT px): per window
1 - the normalised correlation. Two photographs of one label give a low, even profile (blur and
glare lower every window alike); a differing digit gives one window far above the line's own
level; another typeface or another grade string lifts the whole line. A line both photographs read
is compared both ways; in the print's overall verdict each line counts at its milder way (WAYS_AGREE).

`compare` returns the profile's summary and the verdict under the limits, chosen on
tools/photolabels' tune split only (seeds 7 and 8: bench/identity_eval.py, docs/ocr.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from pipelines.neardup.picture import fit_within, open_original, opencv

# The fields whose lines are compared (the brand is brush lettering, compared by the picture).
FIELDS = ("grade", "seimai", "alcohol", "volume")
NUMBERS = ("seimai", "alcohol", "volume")  # the printed numbers among them
# The brand's line is kept too, but compared only for itself: where two photographs read the brand
# alike but not the same (decision.brands_alike), its line must be printed alike. It never counts
# toward the lines' overall verdict (brush lettering compares less evenly than print).
BRAND = "brand_name"
LINE_FIELDS = (*FIELDS, BRAND)
SIDE = 1600  # longest side of the greys compared (px)
HOMOGRAPHY_SIDE = 900  # longest side the homography is fitted at
ORB_FEATURES = 3000
MIN_INLIERS = 15
UNIT = 40  # a line's thickness after scaling (px): one window is UNIT x UNIT
BLUR = 1.2
SHIFT = 3  # each window's own alignment around the line's (px, after scaling)
PAD = 0.3  # of the line's thickness, around its box
MIN_THICK = 4  # px in the grey: a thinner line is not compared
FLAT_STD = 2.0  # a window this flat (std of grey levels) carries no glyph
MIN_INSIDE = 0.9  # share of a line's crop the other photograph must cover
# The limits (tune seeds 7 + 8, 40 labels photographed twice, 3 product lines of 4 per kind: of
# 80 re-photographed pairs 1 has a line median over 0.15 and none a window ratio over 3.2; of
# 36 grade pairs 36 are over, of 36 number pairs 27, of 30 edition pairs (the same text in
# another design) 25).
MAX_MEDIAN = 0.15  # the median over lines of each line's median window dissimilarity
MAX_RATIO = 3.2  # a line's worst window over its median (a differing glyph)
MAX_LINE_MEDIAN = 0.2  # one line's median (a field read off one photograph only: its line printed otherwise)
# WAYS_AGREE: a field line both photographs read is compared twice (each one's box looked up on the
# other). In the print's overall verdict (`Verdict.differs`) each line counts at its milder way: a
# glyph printed otherwise shows both ways, while a window that only one way finds off (the
# homography a pixel off at a short line's end: tune re-photographs at ratios 3.4-5.7 one way and
# 1.0-2.7 the other) is no differing glyph. A field the text left uncertain is judged either way
# (`field_differs`): there the line is the only evidence. Measured in docs/ocr.md (2026-11-29).
RATIO_FLOOR = 0.005  # the median a ratio divides by, at least (a near-perfect line)
RATIO_MIN_WORST = 0.03  # a worst window under this is no differing glyph, whatever the ratio
# Reading across (`compare(..., across=...)`): a field read off one photograph only is looked up
# on the other and read there (`FieldReader`, pipelines.ingest.readings.field_reader). The crops are the line's
# box widened by each of READ_PADS of its thickness each side (the homography leaves a line a few
# px off, and the recogniser's read of small print changes with the framing: one tune pair read
# 300T, mOOm and 300m at three pads), read only where the whole box lies on the other photograph
# (a crop's edge through it reads part of a number: 7度 off 17度).
READ_PADS = (0.15, 0.35, 0.5)


# (the grey crop of one line, upright as printed; whether it is a column; the field) -> the value
# of that field the line prints, formatted as read values are (decision.read_value), '' for none
FieldReader = Callable[[np.ndarray, bool, str], str]


def grey(image: Image.Image) -> np.ndarray:
    """The photograph as this check sees it: grey, longest side at most SIDE (never enlarged)."""
    return np.asarray(fit_within(image.convert("L"), SIDE))


def grey_of_original(data: bytes) -> np.ndarray:
    """`grey` of a stored original (made upright as ingest decoded it)."""
    return np.asarray(fit_within(open_original(data, "L", SIDE), SIDE))


def field_lines(reading: dict | None) -> dict[str, list[float]]:
    """{field: [x0, y0, x1, y1, vertical]} of the lines the reading took FIELDS from, the box as a
    share of the image read (so it maps onto any size of it). The line is the one whose text is
    the field's evidence."""
    if not reading:
        return {}
    size = reading.get("size") or []
    if len(size) != 2 or not size[0] or not size[1]:
        return {}
    w, h = float(size[0]), float(size[1])
    by_text = {ln.get("text"): ln for ln in reading.get("lines") or []}
    out: dict[str, list[float]] = {}
    for key in LINE_FIELDS:
        f = (reading.get("fields") or {}).get(key) or {}
        ln = by_text.get(f.get("evidence")) if f.get("value") and f.get("source", "ocr") == "ocr" else None
        if not ln or not ln.get("box"):
            continue
        box = np.asarray(ln["box"], np.float64)
        x0, y0 = box.min(axis=0)
        x1, y1 = box.max(axis=0)
        out[key] = [round(float(v), 4) for v in (x0 / w, y0 / h, x1 / w, y1 / h)] + [1.0 if ln.get("vertical") else 0.0]
    return out


@dataclass
class Line:
    field: str
    side: str  # "q": a line the query read, looked up on the candidate; "c": the other way
    median: float  # the median window dissimilarity
    worst: float

    @property
    def ratio(self) -> float:
        return self.worst / max(self.median, RATIO_FLOOR) if self.worst > RATIO_MIN_WORST else 1.0

    @property
    def differs(self) -> bool:
        """This line, printed otherwise (another grade string, another number)."""
        return self.median > MAX_LINE_MEDIAN or self.ratio > MAX_RATIO


@dataclass
class Verdict:
    lines: list[Line]
    inliers: int
    # (field, side that read it, the values read across on the other photograph: one per crop
    # that read one)
    across: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    @property
    def _printed(self) -> list[Line]:
        """The field lines in print (the brand's line is judged only for itself: field_differs)."""
        return [ln for ln in self.lines if ln.field != BRAND]

    @property
    def median(self) -> float:
        """The median over lines of each line's median window dissimilarity (another typeface)."""
        printed = self._printed
        return float(np.median([ln.median for ln in printed])) if printed else 0.0

    @property
    def ratio(self) -> float:
        """The worst field line's worst window over its median, each line at its milder way."""
        return max((min(ln.ratio for ln in self._ways(k)) for k in {ln.field for ln in self._printed}), default=1.0)

    def _ways(self, key: str) -> list[Line]:
        """One field's line compared each way it was (a line both photographs read: twice)."""
        return [ln for ln in self.lines if ln.field == key]

    @property
    def differs(self) -> bool | None:
        """True: another printed text; False: the same; None: nothing could be compared."""
        if not self._printed:
            return None
        return self.median > MAX_MEDIAN or self.ratio > MAX_RATIO

    def field_differs(self, key: str) -> bool | None:
        """Whether the line of one field is printed otherwise (None: that line was not compared),
        either way it was compared: the decision asks this of a field the text left uncertain (read
        off one photograph only, or as values that may be one another), where the line is the
        evidence (WAYS_AGREE is for the print's overall verdict)."""
        found = self._ways(key)
        return any(ln.differs for ln in found) if found else None

    def summary(self) -> dict:
        out: dict = {"lines": len(self._printed), "median": round(self.median, 3), "ratio": round(self.ratio, 2)}
        if self.across:
            out["across"] = {f"{key}@{side}": "/".join(values) for key, side, values in self.across}
        return out


NOTHING = Verdict([], 0)


def _homography(cv2, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray | None, int]:
    """a's pixels -> b's pixels, fitted at HOMOGRAPHY_SIDE."""
    sa = min(1.0, HOMOGRAPHY_SIDE / max(a.shape))
    sb = min(1.0, HOMOGRAPHY_SIDE / max(b.shape))
    small_a = cv2.resize(a, None, fx=sa, fy=sa, interpolation=cv2.INTER_AREA) if sa < 1 else a
    small_b = cv2.resize(b, None, fx=sb, fy=sb, interpolation=cv2.INTER_AREA) if sb < 1 else b
    orb = cv2.ORB_create(nfeatures=ORB_FEATURES, fastThreshold=10, edgeThreshold=15, patchSize=15)
    ka, da = orb.detectAndCompute(small_a, None)
    kb, db = orb.detectAndCompute(small_b, None)
    if da is None or db is None or len(ka) < MIN_INLIERS or len(kb) < MIN_INLIERS:
        return None, 0
    pairs = cv2.BFMatcher(cv2.NORM_HAMMING).knnMatch(da, db, k=2)
    good = [p[0] for p in pairs if len(p) == 2 and p[0].distance < 0.8 * p[1].distance]
    if len(good) < MIN_INLIERS:
        return None, 0
    src = np.array([ka[g.queryIdx].pt for g in good], np.float32) / sa
    dst = np.array([kb[g.trainIdx].pt for g in good], np.float32) / sb
    hom, mask = cv2.findHomography(src, dst, cv2.RANSAC, 4.0 / sb, maxIters=3000, confidence=0.995)
    n_in = int(mask.sum()) if mask is not None else 0
    if hom is None or n_in < MIN_INLIERS:
        return None, n_in
    return hom, n_in


def _profile(cv2, a: np.ndarray, b: np.ndarray, a_to_b: np.ndarray, line: list[float]) -> np.ndarray | None:
    """Window dissimilarities along one of a's lines, against b warped onto a."""
    h_a, w_a = a.shape
    x0, y0, x1, y1 = line[0] * w_a, line[1] * h_a, line[2] * w_a, line[3] * h_a
    vertical = bool(line[4])
    thick = (x1 - x0) if vertical else (y1 - y0)
    if thick < MIN_THICK:
        return None
    pad = PAD * thick
    cx0, cy0 = int(max(0, x0 - pad)), int(max(0, y0 - pad))
    cx1, cy1 = int(min(w_a, x1 + pad)), int(min(h_a, y1 + pad))
    if cx1 - cx0 < MIN_THICK or cy1 - cy0 < MIN_THICK:
        return None
    to_crop = np.array([[1, 0, -cx0], [0, 1, -cy0], [0, 0, 1]], np.float64) @ np.linalg.inv(a_to_b)
    size = (cx1 - cx0, cy1 - cy0)
    # off b, its edge continued (not black, which would pull the line's own shift towards the edge);
    # the windows there are not compared
    warped = cv2.warpPerspective(b, to_crop, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    inside = cv2.warpPerspective(np.full(b.shape, 255, np.uint8), to_crop, size, flags=cv2.INTER_NEAREST, borderValue=0)
    if (inside > 0).mean() < MIN_INSIDE:  # the other photograph's crop cut the line
        return None
    s = UNIT / thick
    interp = cv2.INTER_AREA if s < 1 else cv2.INTER_CUBIC
    ca = cv2.resize(a[cy0:cy1, cx0:cx1].astype(np.float32), None, fx=s, fy=s, interpolation=interp)
    cb = cv2.resize(warped.astype(np.float32), (ca.shape[1], ca.shape[0]), interpolation=interp)
    ins = cv2.resize(inside, (ca.shape[1], ca.shape[0]), interpolation=cv2.INTER_NEAREST) > 0
    ca = cv2.GaussianBlur(ca, (0, 0), BLUR)
    cb = cv2.GaussianBlur(cb, (0, 0), BLUR)
    # the line's own shift first (the homography is fitted on the whole label)
    edge = UNIT // 3
    core = ca[edge:-edge, edge:-edge]
    if core.size == 0 or core.std() < 1e-3:
        return None
    _lo, _hi, _at_lo, at = cv2.minMaxLoc(cv2.matchTemplate(cb, core, cv2.TM_CCOEFF_NORMED))
    dx, dy = at[0] - edge, at[1] - edge
    length = ca.shape[0] if vertical else ca.shape[1]
    margin = int(pad * s)
    # b's crop padded, so every window can move by the line's shift and its own; the padding is
    # on b where the crop's edge is (a window is skipped where its footprint is off b's photograph)
    room = edge + SHIFT
    cb = cv2.copyMakeBorder(cb, room, room, room, room, cv2.BORDER_REPLICATE)
    ins = np.pad(ins, room, mode="edge")
    out = []
    for t in range(margin, length - margin - UNIT + 1, UNIT // 2):
        win = ca[t : t + UNIT, :] if vertical else ca[:, t : t + UNIT]
        if win.std() < FLAT_STD:
            continue
        wy, wx = (t, 0) if vertical else (0, t)
        hh, ww = win.shape
        fy, fx = wy + dy + room, wx + dx + room  # the window's footprint in b at the line's shift
        # every pixel of the window's footprint on b's photograph: off it the warp only continues
        # b's edge, which a window partly off the crop would count as a differing glyph
        if not ins[fy : fy + hh, fx : fx + ww].all():
            continue
        region = cb[fy - SHIFT : fy + hh + SHIFT, fx - SHIFT : fx + ww + SHIFT]
        _lo, best, _at_lo, _at = cv2.minMaxLoc(cv2.matchTemplate(region, win, cv2.TM_CCOEFF_NORMED))
        out.append(1.0 - float(best))
    return np.array(out) if out else None


def _across_crops(
    cv2, a_shape: tuple[int, ...], b: np.ndarray, a_to_b: np.ndarray, line: list[float]
) -> list[np.ndarray]:
    """b's pixels where one of a's lines is, warped upright, one crop per READ_PADS ([]: the line
    is not wholly on b)."""
    h_a, w_a = a_shape[:2]
    x0, y0, x1, y1 = line[0] * w_a, line[1] * h_a, line[2] * w_a, line[3] * h_a
    thick = (x1 - x0) if line[4] else (y1 - y0)
    if thick < MIN_THICK:
        return []
    box = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float32)
    h_b, w_b = b.shape[:2]
    on_b = cv2.perspectiveTransform(box[None], a_to_b)[0]
    if (on_b < 0).any() or (on_b[:, 0] > w_b - 1).any() or (on_b[:, 1] > h_b - 1).any():
        return []
    crops = []
    for pad in READ_PADS:
        p = pad * thick
        padded = np.array([[x0 - p, y0 - p], [x1 + p, y0 - p], [x1 + p, y1 + p], [x0 - p, y1 + p]], np.float32)
        quad = cv2.perspectiveTransform(padded[None], a_to_b)[0]
        cw = max(1, int(max(np.linalg.norm(quad[0] - quad[1]), np.linalg.norm(quad[3] - quad[2]))))
        ch = max(1, int(max(np.linalg.norm(quad[0] - quad[3]), np.linalg.norm(quad[1] - quad[2]))))
        rect = np.array([[0, 0], [cw, 0], [cw, ch], [0, ch]], np.float32)
        to_rect = cv2.getPerspectiveTransform(quad, rect)
        crops.append(cv2.warpPerspective(b, to_rect, (cw, ch), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE))
    return crops


def compare(
    q: np.ndarray,
    q_lines: dict,
    c: np.ndarray,
    c_lines: dict,
    *,
    across: dict[str, tuple[str, ...]] | None = None,
    read_field: FieldReader | None = None,
) -> Verdict:
    """The printed field lines of two photographs (greys from `grey`, lines from `field_lines`),
    each side's lines looked up on the other. `across`: per side ("q", "c"), the fields read off
    that photograph only, whose lines are also read on the other one with `read_field`."""
    if not q_lines and not c_lines:
        return NOTHING
    cv2 = opencv()
    q_to_c, inliers = _homography(cv2, q, c)
    if q_to_c is None:
        return Verdict([], inliers)
    c_to_q = np.linalg.inv(q_to_c)
    lines, read = [], []
    for side, (a, b, a_to_b, mine) in {"q": (q, c, q_to_c, q_lines), "c": (c, q, c_to_q, c_lines)}.items():
        for key, box in mine.items():
            p = _profile(cv2, a, b, a_to_b, box)
            if p is not None:
                lines.append(Line(key, side, float(np.median(p)), float(p.max())))
            if read_field is not None and key in (across or {}).get(side, ()):
                values = (read_field(crop, bool(box[4]), key) for crop in _across_crops(cv2, a.shape, b, a_to_b, box))
                read.append((key, side, tuple(v for v in values if v)))
    return Verdict(lines, inliers, read)
