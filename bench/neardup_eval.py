"""Near-duplicate quality: the two-stage check (pHash candidates + pipelines.neardup.decision verifier)
against imagehash's methods used alone, on generated labels with ground truth.

    .venv/bin/python bench/neardup_eval.py [--n 5000] [--variants 2] [--quick]

Data (tools.datagen): `n` distinct labels; `--template-share` of them are printed from shared
designs, `--per-design` labels per design with distinct brand names (same ground and layout, only
the text differs: the hard negatives), the rest each from their own design. Every label gets
`--variants` near duplicates, the kinds taken in turn from images.VARIANT_KINDS (crop 2-8 %,
brightness/contrast +-30 %, JPEG q40, resize 0.3-2x, rotation +-3 deg, perspective <= 3 %).

Protocol, as ingest sees it: the distinct labels are checked-and-inserted in order (each one that
is merged into another label is a false merge: a label lost to search); then every variant is
checked against the full index (recall: it names its own label; naming another is a false merge
too). Two tracks: with the uploader's fields (variants carry their label's fields), and images
only. The decision code is the pipeline's (MultiIndex candidates, neardup.fields_conflict,
verifier.verify); the Redis round trips and atomicity are measured in bench/phash_lookup.py.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import imagehash
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.neardup import decision as neardup  # noqa: E402
from pipelines.neardup import hashing, verifier
from pipelines.neardup.index import MultiIndex  # noqa: E402
from tools.datagen import images  # noqa: E402
from tools.datagen.catalog import generate_labels  # noqa: E402
from yana.settings import get_settings  # noqa: E402

SIZE = (240, 360)


def build_designs(n: int, share: float, per_design: int, seed: int) -> tuple[list[dict], list[int]]:
    """Label field dicts and, per label, the seed of its design (shared within a template group)."""
    labels = [lab.fields() for lab in generate_labels(n, seed)]
    rng = random.Random(seed)
    order = list(range(n))
    rng.shuffle(order)
    design = [0] * n
    n_template = int(n * share)
    groups: list[list[int]] = []
    for i in order[:n_template]:  # fill groups with distinct brand names
        for g in groups:
            if len(g) < per_design and all(labels[j]["brand_name"] != labels[i]["brand_name"] for j in g):
                g.append(i)
                break
        else:
            groups.append([i])
    for gi, g in enumerate(groups):
        for i in g:
            design[i] = 1_000_000 + seed * 10_000 + gi
    for i in order[n_template:]:
        design[i] = 5_000_000 + seed * 1_000_000 + i
    return labels, design


def render(labels, design, i):
    return images.render_label(labels[i], size=SIZE, seed=design[i])


class TwoStage:
    """The pipeline's decision (pipelines.neardup.decision.Verifier, pipelines.neardup.index) on an in-memory
    index: candidates within the radius plus, in the fields track, every label with the same
    fields; a conflicting field rejects; the image verifier decides (limit 1.0, or
    FIELDS_AGREE_MAX_SCORE when all three fields agree); the best verified match wins."""

    def __init__(self, radius: int):
        self.mi = MultiIndex(radius)
        self.sigs: list[bytes] = []
        self.fields: list[dict] = []
        self.by_fields: dict[str, list[int]] = defaultdict(list)
        self.verify_s: list[float] = []

    def judge(self, view, code, fields) -> dict[str, tuple[int, int, float] | None]:
        """Per track ('fields', 'images'): (label index, distance, score) of the match, or None."""
        near = {int(k): d for k, d in self.mi.search(code)}
        same = [k for k in self.by_fields.get(neardup.fields_digest(fields), []) if k not in near]
        cands = list(near.items()) + [(k, hashing.hamming(self.mi.code_of(k), code)) for k in same]
        if not cands:
            return {"fields": None, "images": None}
        t0 = time.perf_counter()
        agrees = [neardup.fields_agree(fields, self.fields[k]) for k, _d in cands]
        parts = verifier.compare(view, [self.sigs[k] for k, _d in cands], loose=agrees)
        self.verify_s.append((time.perf_counter() - t0) / len(cands))
        best: dict[str, tuple[int, int, float] | None] = {"fields": None, "images": None}
        for (k, d), part, agree in zip(cands, parts, agrees, strict=True):
            for track in ("fields", "images"):
                score = verifier.score_of(part, self.sigs[k], fields_agree=agree and track == "fields")
                if track == "images":
                    if k not in near or score > 1.0:
                        continue
                else:
                    if neardup.fields_conflict(fields, self.fields[k]):
                        continue
                    if score > (neardup.FIELDS_AGREE_MAX_SCORE if agree else 1.0):
                        continue
                if best[track] is None or score < best[track][2]:
                    best[track] = (k, d, score)
        return best

    def add(self, code, sig, fields) -> None:
        k = len(self.sigs)
        self.mi.add_many(np.array([code], dtype=np.uint64), np.array([k], dtype=np.uint64))
        self.sigs.append(sig)
        self.fields.append(fields)
        digest = neardup.fields_digest(fields)
        if digest:
            self.by_fields[digest].append(k)


def baselines() -> dict:
    """imagehash's methods alone, at the thresholds users take: phash/dhash/whash Hamming <= 10
    (imagededup's default max_distance_threshold), colorhash <= 6, crop_resistant_hash.matches()
    with its defaults (a region pair within 25 % bit errors)."""
    return {
        "phash<=10": (lambda im: imagehash.phash(im), 10),
        "dhash<=10": (lambda im: imagehash.dhash(im), 10),
        "whash<=10": (lambda im: imagehash.whash(im), 10),
        "colorhash<=6": (lambda im: imagehash.colorhash(im), 6),
    }


def hash_bits(h) -> np.ndarray:
    return np.asarray(h.hash, dtype=bool).ravel()


@dataclass
class Tally:
    merged: dict = field(default_factory=lambda: {"fields": [], "images": []})  # (label, into, distance)
    found: dict = field(default_factory=lambda: {"fields": defaultdict(int), "images": defaultdict(int)})
    wrong: dict = field(default_factory=lambda: {"fields": [], "images": []})
    per_kind: dict = field(default_factory=lambda: defaultdict(int))
    cand_recall: dict = field(default_factory=lambda: defaultdict(int))
    base_codes: dict = field(default_factory=lambda: defaultdict(list))
    base_var: dict = field(default_factory=lambda: defaultdict(list))


def insert_labels(labels, design, two: TwoStage, base: dict, t: Tally) -> None:
    """Pass 1: every distinct label is checked, then indexed (even when merged, so later queries
    see every label); a merge is a false merge."""
    for i in range(len(labels)):
        img = render(labels, design, i)
        code = hashing.phash_int(hashing.phash_hex(img))
        view = verifier.query_view(img)
        for track, m in two.judge(view, code, labels[i]).items():
            if m is not None:
                t.merged[track].append((i, m[0], m[1]))
        two.add(code, view.sig, labels[i])
        for name, (fn, _t) in base.items():
            t.base_codes[name].append(hash_bits(fn(img)))


def check_variants(labels, design, two: TwoStage, base: dict, t: Tally, per_label: int, seed: int) -> None:
    """Pass 2: each variant must name its own label."""
    kinds = images.VARIANT_KINDS
    k_next = 0
    for i in range(len(labels)):
        img = render(labels, design, i)
        rng = random.Random(seed * 7919 + i)
        for _ in range(per_label):
            kind = kinds[k_next % len(kinds)]
            k_next += 1
            v = images.variant(img, kind, rng).image
            t.per_kind[kind] += 1
            code = hashing.phash_int(hashing.phash_hex(v))
            t.cand_recall[kind] += any(int(k) == i for k, _d in two.mi.search(code))
            for track, m in two.judge(verifier.query_view(v), code, labels[i]).items():
                if m is not None and m[0] == i:
                    t.found[track][kind] += 1
                elif m is not None:
                    t.wrong[track].append((i, m[0], m[1], kind))
            for name, (fn, _t) in base.items():
                t.base_var[name].append((hash_bits(fn(v)), i))


def report(args, labels, design, radius: int, two: TwoStage, base: dict, t: Tally, seconds: float) -> None:
    n, n_var = len(labels), sum(t.per_kind.values())
    n_template = sum(1 for d in design if d < 5_000_000)
    print(
        f"# near-duplicate evaluation: {n} distinct labels ({n_template} from shared designs, "
        f"{args.per_design} per design), {n_var} variants; candidate radius {radius} ({seconds:.0f} s)\n"
    )
    print("| method | track | recall | distinct labels merged | variants matched to a wrong label | false merge rate |")
    print("|---|---|---:|---:|---:|---:|")
    for track, title in (("fields", "with fields"), ("images", "images only")):
        rec = sum(t.found[track].values()) / max(1, n_var)
        fm = len(t.merged[track]) + len(t.wrong[track])
        print(
            f"| two-stage (pHash r<={radius} + verifier) | {title} | {rec:.4f} | {len(t.merged[track])} | "
            f"{len(t.wrong[track])} | {fm / (n + n_var):.4%} |"
        )
    for name, (_fn, thr) in base.items():
        rec, fm_l, fm_v = evaluate_baseline(t.base_codes[name], t.base_var[name], thr)
        print(
            f"| imagehash {name} alone | images only | {rec:.4f} | {fm_l} | {fm_v} | {(fm_l + fm_v) / (n + n_var):.4%} |"
        )
    if args.crh_n:
        rec, fm_l, fm_v, total = crop_resistant(labels, design, args.crh_n, args.seed)
        print(
            f"| imagehash crop_resistant_hash alone (first {args.crh_n} labels) | images only | {rec:.4f} | "
            f"{fm_l} | {fm_v} | {(fm_l + fm_v) / max(1, total):.4%} |"
        )
    print("\n| variant | n | candidates within radius | recall with fields | recall images only |")
    print("|---|---:|---:|---:|---:|")
    for kind in images.VARIANT_KINDS:
        m = max(1, t.per_kind[kind])
        print(
            f"| {kind} | {t.per_kind[kind]} | {t.cand_recall[kind] / m:.3f} | {t.found['fields'][kind] / m:.3f} | "
            f"{t.found['images'][kind] / m:.3f} |"
        )
    vs = np.asarray(two.verify_s) * 1e3
    if len(vs):
        print(
            f"\nverifier time per candidate (wall, batched per query; {len(vs)} queries with candidates): "
            f"p50 {np.percentile(vs, 50):.2f} ms, p99 {np.percentile(vs, 99):.2f} ms"
        )
    for track in ("fields", "images"):
        same_design = sum(design[i] == design[j] for i, j, _d in t.merged[track])
        if t.merged[track]:
            print(
                f"\n{track}: {len(t.merged[track])} distinct labels merged, {same_design} of them into a label "
                "of the same design (hard negatives)"
            )
        for i, j, d in t.merged[track][:5]:
            print(
                f"merged ({track}): {labels[i]['brand_name']} / {labels[i]['product_name']} -> "
                f"{labels[j]['brand_name']} / {labels[j]['product_name']} at distance {d}"
            )


def run(args) -> None:
    radius = args.radius if args.radius is not None else get_settings().phash_candidate_radius
    t0 = time.perf_counter()
    labels, design = build_designs(args.n, args.template_share, args.per_design, args.seed)
    two, base, tally = TwoStage(radius), baselines(), Tally()
    insert_labels(labels, design, two, base, tally)
    check_variants(labels, design, two, base, tally, args.variants, args.seed)
    report(args, labels, design, radius, two, base, tally, time.perf_counter() - t0)


def evaluate_baseline(codes: list[np.ndarray], var: list[tuple[np.ndarray, int]], t: int) -> tuple[float, int, int]:
    """Greedy insert in order (a label within t of an earlier one is merged), then each variant
    matches its nearest label within t."""
    a = np.packbits(np.array(codes), axis=1)
    merged = 0
    for i in range(1, len(a)):
        d = np.unpackbits(a[:i] ^ a[i], axis=1).sum(axis=1)
        merged += int((d <= t).any())
    ok = wrong = 0
    for bits, i in var:
        d = np.unpackbits(a ^ np.packbits(bits), axis=1).sum(axis=1)
        j = int(np.argmin(d))
        if d[j] <= t:
            ok += j == i
            wrong += j != i
    return ok / max(1, len(var)), merged, wrong


def crop_resistant(labels, design, n: int, seed: int) -> tuple[float, int, int, int]:
    """crop_resistant_hash on the first n labels (segmenting is slow and matching is pairwise)."""
    n = min(n, len(labels))
    hashes = []
    merged = 0
    for i in range(n):
        h = imagehash.crop_resistant_hash(render(labels, design, i))
        merged += int(any(h.matches(o) for o in hashes))
        hashes.append(h)
    ok = wrong = total = 0
    kinds = images.VARIANT_KINDS
    for i in range(n):
        img = render(labels, design, i)
        v = images.variant(img, kinds[i % len(kinds)], random.Random(seed + i)).image
        h = imagehash.crop_resistant_hash(v)
        # the best match: most matching segments, then the smallest summed distance
        scored = [((-h.hash_diff(o)[0], h.hash_diff(o)[1]), j) for j, o in enumerate(hashes) if h.matches(o)]
        total += 1
        if scored:
            j = min(scored)[1]
            ok += j == i
            wrong += j != i
    return ok / max(1, total), merged, wrong, n + total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000, help="distinct labels")
    ap.add_argument("--variants", type=int, default=2, help="near duplicates per label")
    ap.add_argument("--template-share", type=float, default=0.3)
    ap.add_argument("--per-design", type=int, default=20)
    ap.add_argument("--radius", type=int, default=None, help="pHash candidate radius (default: settings)")
    ap.add_argument("--crh-n", type=int, default=200, help="labels for crop_resistant_hash (0: skip)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-residual", type=float, default=verifier.MAX_RESIDUAL, help="verifier limit (tuning)")
    ap.add_argument("--max-block", type=float, default=verifier.MAX_BLOCK_DECORRELATION, help="verifier limit (tuning)")
    ap.add_argument("--quick", action="store_true", help="tiny run (CI): 120 labels, 40 for crop_resistant")
    args = ap.parse_args()
    verifier.MAX_RESIDUAL, verifier.MAX_BLOCK_DECORRELATION = args.max_residual, args.max_block
    if args.quick:
        args.n, args.crh_n = 120, 40
    run(args)


if __name__ == "__main__":
    main()
