"""Label reading, measured: OCR character accuracy, per-field accuracy and labels/s, for both
OCR engines side by side, on the held-out photographed label set (tools/photolabels).

    python bench/ocr_eval.py                      # 120 held-out photos, both engines, 1 and 2 workers
    python bench/ocr_eval.py --quick              # CI: 3 photos, 1 worker
    python bench/ocr_eval.py --split tune         # what the reader was tuned on (never reported)

Per image (one worker process each, engine loaded once in the worker, one thread per session):
decode the JPEG, read it (pipelines.read.ocr.read_image), extract fields (pipelines.read.fields).
labels/s is that for the whole set, wall clock, warm workers; images only, no ingest stages.

Scores: character accuracy = 1 - CER of the read text against the printed text (NFKC, spaces
removed), both joined in reading order ("order"), and with each printed line scored against its
best read line ("lines", order-free). A field is exact when normalize(read) == normalize(truth)
(NFKC, spaces ignored), over the images that print it.

Hooks: other evaluations (identity, search by photo) register `SECTIONS.append(fn)`, where
fn(ctx) -> list of printed lines; ctx has "samples" (tools.photolabels.Sample list), "images"
(JPEG bytes), "results" ({engine: [per-image dict with reading, fields]}) and "args".
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipelines.text.distance import edit_distance  # noqa: E402

FIELDS = ("brand_name", "brewery", "prefecture", "grade", "seimai", "alcohol", "volume", "city")
BARS = {"brand_name": 0.9, "brewery": 0.85, "prefecture": 0.9, "grade": 0.95}
SECTIONS: list[Callable[[dict], list[str]]] = []

_reader_opts: dict = {}


def _norm(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).split())


def _init(engine: str, opts: dict) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from pipelines.read import ocr

    if engine == "ppocr" and opts:
        reader = ocr.PPOCRReader(**opts)
        ocr.get_reader.cache_clear()
        _reader_opts["reader"] = reader
    else:
        _reader_opts["reader"] = ocr.get_reader(engine)
    # warm up outside the timed run
    from PIL import Image

    _reader_opts["reader"].read(Image.new("RGB", (64, 64), "white"))


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (tesseract runs as a child)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _work(item: tuple[int, bytes]) -> dict:
    from PIL import Image

    from pipelines.read.fields import extract_fields
    from pipelines.read.ocr import OcrError

    i, data = item
    t0 = time.perf_counter()
    c0 = _cpu()
    img = Image.open(io.BytesIO(data))
    try:
        reading = _reader_opts["reader"].read(img, time.monotonic() + 60)
    except OcrError as exc:
        return {"i": i, "error": str(exc), "text": "", "lines": [], "fields": {}, "s": time.perf_counter() - t0}
    ex = extract_fields(reading)
    return {
        "i": i,
        "text": reading.text,
        "lines": [ln.text for ln in reading.lines],
        "fields": ex.values(),
        "s": time.perf_counter() - t0,
        "cpu": _cpu() - c0,
    }


def run_engine(engine: str, images: list[bytes], workers: int, opts: dict) -> tuple[list[dict], float]:
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(engine, opts)) as pool:
        # start every worker (and load its models) before the clock starts
        list(pool.map(_noop, range(workers * 2)))
        t0 = time.perf_counter()
        out = list(pool.map(_work, list(enumerate(images)), chunksize=1))
        wall = time.perf_counter() - t0
    return out, wall


def _noop(_: int) -> int:
    time.sleep(0.2)
    return 0


def score(samples, results: list[dict]) -> dict:
    chars_o = errs_o = 0
    chars_l = errs_l = 0
    field_hits: dict[str, list[int]] = defaultdict(list)
    groups: dict[str, list[int]] = defaultdict(list)
    for s, r in zip(samples, results, strict=True):
        gt = _norm("".join(s.lines))
        got = _norm(r["text"].replace("\n", ""))
        chars_o += len(gt)
        errs_o += min(len(gt), edit_distance(gt, got))
        read_lines = [_norm(x) for x in r["lines"]] or [""]
        for line in s.lines:
            g = _norm(line)
            chars_l += len(g)
            errs_l += min(len(g), min(edit_distance(g, x) for x in read_lines))
        truth = s.spec.fields()
        for f in FIELDS:
            if f in truth:
                ok = int(_norm(r["fields"].get(f, "")) == _norm(truth[f]))
                field_hits[f].append(ok)
        b = int(_norm(r["fields"].get("brand_name", "")) == _norm(truth["brand_name"]))
        sc = s.photo.get("scale", 1.0)
        groups[f"brand {s.spec.side}/{s.spec.design.layout}"].append(b)
        groups["brand scale<0.5" if sc < 0.5 else "brand scale 0.5-1" if sc < 1 else "brand scale>=1"].append(b)
    return {
        "char_acc_order": 1 - errs_o / max(1, chars_o),
        "char_acc_lines": 1 - errs_l / max(1, chars_l),
        "fields": {f: (sum(v) / len(v), len(v)) for f, v in field_hits.items()},
        "groups": {g: (sum(v) / len(v), len(v)) for g, v in sorted(groups.items())},
        "errors": sum(1 for r in results if r.get("error")),
        "cpu_s": sum(r.get("cpu", 0.0) for r in results) / max(1, len(results)),
    }


def print_table(scores: dict, speed: dict, workers: list[int]) -> None:
    cols = list(scores)
    print()
    print(f"{'metric':<28}" + "".join(f"{c:>14}" for c in cols))
    print(f"{'char accuracy (order)':<28}" + "".join(f"{scores[c]['char_acc_order']:>14.3f}" for c in cols))
    print(f"{'char accuracy (lines)':<28}" + "".join(f"{scores[c]['char_acc_lines']:>14.3f}" for c in cols))
    rows = [(f + (f" (bar {BARS[f]})" if f in BARS else ""), "fields", f) for f in FIELDS]
    rows += [(g, "groups", g) for g in (scores[cols[0]]["groups"] if cols else [])]
    for title, kind, key in rows:
        row = f"{title:<28}"
        for c in cols:
            acc, n = scores[c][kind].get(key, (0.0, 0))
            row += f"{acc:>9.3f} /{n:<3}"
        print(row)
    for w in sorted(workers):
        row = f"{f'labels/s, {w} worker(s)':<28}"
        for c in cols:
            v = speed[c].get(w)
            row += f"{v[0]:>14.2f}" if v else f"{'-':>14}"
        print(row)
    print(f"{'CPU s per label':<28}" + "".join(f"{scores[c]['cpu_s']:>14.2f}" for c in cols))
    print(f"{'read errors/timeouts':<28}" + "".join(f"{scores[c]['errors']:>14}" for c in cols))
    print(f"load average after: {os.getloadavg()} on {os.cpu_count()} cores")


def show_misses(samples, results: dict, limit: int) -> None:
    for c, res in results.items():
        n = 0
        for s, r in zip(samples, res, strict=True):
            truth = s.spec.fields()
            miss = {
                f: (truth[f], r["fields"].get(f))
                for f in FIELDS
                if f in truth and _norm(r["fields"].get(f, "")) != _norm(truth[f])
            }
            if miss and n < limit:
                n += 1
                print(f"[{c}] {s.key} {s.spec.side}/{s.spec.design.layout} scale={s.photo.get('scale')}: {miss}")
                print("    read:", " | ".join(r["lines"])[:300])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--split", default="heldout", choices=("tune", "heldout"))
    ap.add_argument("--engines", default="ppocr,tesseract")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--speed-n", type=int, default=0, help="images for the 1-worker timing (0: all)")
    ap.add_argument("--det-side", type=int, default=0, help="ppocr detection input side (0: default)")
    ap.add_argument(
        "--det-upscale", type=float, default=0, help="ppocr: enlarge small photos for detection up to this (0: default)"
    )
    ap.add_argument("--quick", action="store_true", help="3 images, 1 worker (CI)")
    ap.add_argument("--data", default="", help="read a set written by tools.photolabels instead of generating one")
    ap.add_argument("--json", default="", help="write the per-image results here")
    ap.add_argument("--show", type=int, default=0, help="print this many field misses per engine")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.workers = 3, "1"

    from tools.photolabels import generate
    from tools.photolabels.dataset import load_dataset

    t0 = time.perf_counter()
    samples = load_dataset(args.data)[: args.n] if args.data else list(generate(args.n, args.seed, args.split))
    images = []
    for s in samples:
        buf = io.BytesIO()
        s.image.save(buf, "JPEG", quality=97)  # already a decoded phone JPEG: keep it as is
        images.append(buf.getvalue())
    print(
        f"set: {len(samples)} photos "
        + (f"read from {args.data}" if args.data else f"{args.split} (seed {args.seed}), generated")
        + f" in {time.perf_counter() - t0:.1f}s; "
        f"sides {sum(s.spec.side == 'front' for s in samples)} front / {sum(s.spec.side == 'back' for s in samples)} back, "
        f"{sum(s.spec.design.layout == 'vertical' for s in samples)} vertical"
    )
    engines = [e for e in args.engines.split(",") if e]
    workers = [int(w) for w in args.workers.split(",") if w]
    opts = {"det_limit_side": args.det_side} if args.det_side else {}
    if args.det_upscale:
        opts["det_upscale"] = args.det_upscale
    results: dict[str, list[dict]] = {}
    speed: dict[str, dict[int, tuple[float, float, int]]] = defaultdict(dict)
    for eng in engines:
        for w in sorted(workers, reverse=True):
            # the 1-worker timing on a subset only where another worker count reads the whole set
            sub = images if (w != 1 or not args.speed_n or len(workers) == 1) else images[: args.speed_n]
            load0 = os.getloadavg()[0]
            out, wall = run_engine(eng, sub, w, opts)
            speed[eng][w] = (len(sub) / wall, load0, len(sub))
            if len(sub) == len(images) and eng not in results:
                results[eng] = out
            print(
                f"  {eng} x{w}: {len(sub)} images in {wall:.1f}s = {len(sub) / wall:.2f} labels/s (load {load0:.2f})",
                flush=True,
            )
    scores = {e: score(samples, results[e]) for e in results}
    print_table(scores, speed, workers)
    if args.show:
        show_misses(samples, results, args.show)
    ctx = {"samples": samples, "images": images, "results": results, "args": args}
    for section in SECTIONS:
        for line in section(ctx):
            print(line)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"scores": scores, "speed": speed, "results": results}, ensure_ascii=False)
        )
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory():
        sys.exit(main())
