"""Photographed sake (and some juice) labels with ground truth, for evaluating label reading and
label identity. Independent of tools/datagen and bench/neardup_eval.py.

API:
    spec = make_spec(rng, split="heldout")            # a random label (fields + design)
    fam = design_family(rng, 5, vary="grade")          # one design, only the grade differs
    r = render(spec)                                   # r.image, r.lines (printed text in order)
    photo, params = photograph(r.image, rng)           # a phone-like photograph
    write_dataset(out_dir, n=100, seed=1, split="heldout")  # images + labels.jsonl

Splits (docs/ocr.md): "tune" and "heldout" use disjoint typefaces (render.FONTS), disjoint brand
parts and real-brand halves, and their random streams are salted by the split name, so a seed
never yields the same label in both. Everything reported is measured on "heldout".
CLI: python -m tools.photolabels OUT --n N --seed S --split heldout
"""

from tools.photolabels.dataset import Sample, generate, write_dataset
from tools.photolabels.photo import photograph
from tools.photolabels.render import (
    FONTS,
    Design,
    LabelSpec,
    Rendered,
    design_family,
    make_spec,
    random_design,
    render,
)

__all__ = [
    "FONTS",
    "Design",
    "LabelSpec",
    "Rendered",
    "Sample",
    "design_family",
    "generate",
    "make_spec",
    "photograph",
    "random_design",
    "render",
    "write_dataset",
]
