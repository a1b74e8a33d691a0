"""The aligned picture check's parts on pairs of photographs (no OCR, no Redis): re-photographs of
one label (as bench/identity_eval.py draws them: the second cropped), editions (one text in other
designs: same palette or another) and shared designs (one design, another brand, grade or number).

    .venv/bin/python bench/picture_pairs.py --split tune --seed 7 --labels 40 --families 4 --per-family 4

Choose the limits of pipelines.neardup.picture on split "tune" only.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image  # noqa: E402


def _jpeg(img: Image.Image) -> Image.Image:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality="keep")
    buf.seek(0)
    return Image.open(buf).convert("RGB")


def pairs(split: str, seed: int, n_labels: int, families: int, per_family: int):
    from tools.photolabels import design_family, make_spec, photograph, render

    rng = random.Random(f"picture:{split}:{seed}")
    for i in range(n_labels):
        spec = make_spec(rng, split=split, key=f"re-{i}")
        img = render(spec).image
        a, _ = photograph(img, random.Random(rng.getrandbits(64)), crop=0)
        b, _ = photograph(img, random.Random(rng.getrandbits(64)), crop=1.0)
        yield "rephoto", "", _jpeg(a), _jpeg(b)
    for vary in ("design", "brand", "grade", "number"):
        for f in range(families):
            specs = design_family(rng, per_family, split=split, vary=vary, prefix=f"{vary}{f}")
            photos = [_jpeg(photograph(render(s).image, random.Random(rng.getrandbits(64)))[0]) for s in specs]
            for i in range(len(specs)):
                for j in range(i + 1, len(specs)):
                    yield _kind(vary, specs[i], specs[j]), "", photos[i], photos[j]


def _kind(vary: str, a, b) -> str:
    """A product line's pair by what differs: the brand, grade or number, or the design (an
    edition, in the same palette or another, and in another layout)."""
    if vary != "design":
        return vary
    kind = "edition-same-palette" if a.design.palette == b.design.palette else "edition-other-palette"
    return kind + ("-layout" if a.design.layout != b.design.layout else "")


def identity_pairs(split: str, seed: int, n_labels: int, families: int, per_family: int):
    """The pairs bench/identity_eval.py decides on (its own draws): each label's two photographs,
    and every pair within a product line or a set of editions."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import identity_eval

    data = identity_eval.build(split, seed, n_labels, families, per_family)
    first = {x["key"]: x for x in data["distinct"]}

    def pic(raw: bytes) -> Image.Image:
        return Image.open(io.BytesIO(raw)).convert("RGB")

    for x in data["seconds"]:
        yield "rephoto", "", pic(first[x["key"]]["data"]), pic(x["data"])
    lines: dict[str, list[dict]] = {}
    for x in data["distinct"]:
        if "vary" in x:
            lines.setdefault(x["key"].split("-")[0], []).append(x)
    for xs in lines.values():
        for i in range(len(xs)):
            for j in range(i + 1, len(xs)):
                yield _kind(xs[i]["vary"], xs[i]["spec"], xs[j]["spec"]), "", pic(xs[i]["data"]), pic(xs[j]["data"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--split", default="tune", choices=("tune", "heldout"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--labels", type=int, default=40)
    ap.add_argument("--families", type=int, default=4)
    ap.add_argument("--per-family", type=int, default=4)
    ap.add_argument("--rule", action="store_true", help="count the pairs picture.same_picture passes")
    ap.add_argument(
        "--identity",
        action="store_true",
        help="the pairs bench/identity_eval.py draws for this seed (its --labels, --families, --per-family)",
    )
    args = ap.parse_args()
    from pipelines.neardup import picture

    rows: dict[str, list] = {}
    times = []
    drawn = identity_pairs if args.identity else pairs
    for kind, _note, a, b in drawn(args.split, args.seed, args.labels, args.families, args.per_family):
        pa, pb = picture.decode(picture.encode(a)), picture.decode(picture.encode(b))
        t0 = time.perf_counter()
        p1 = picture.compare(pb, pa)  # the second photograph is the query
        times.append(time.perf_counter() - t0)
        rows.setdefault(kind, []).append(p1)
    if args.rule:
        for kind, ps in rows.items():
            n = sum(picture.same_picture(p) for p in ps)
            print(f"  same under the rule: {kind} {n} of {len(ps)}")
    for kind, ps in rows.items():
        print(f"{kind}: {len(ps)}")
        for name in ("inliers", "box", "colour", "structure", "worst", "marks"):
            vals = sorted(round(getattr(p, name), 2) for p in ps)
            print(f"  {name}: {vals}")
        # what the marks test decides: the pairs every other part lets through
        rest = sorted(round(p.marks, 2) for p in ps if picture.same_picture(replace(p, marks=0.0)))
        print(f"  marks of the pairs the other parts pass: {rest}")
    t = sorted(times)
    print(f"ms per check: median {1000 * t[len(t) // 2]:.1f}, p90 {1000 * t[int(len(t) * 0.9)]:.1f}, n {len(t)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
