"""The label-photo generator (tools/photolabels): splits, design families, photographs, files."""

from __future__ import annotations

import json
import random
from dataclasses import fields as dc_fields

from tools.photolabels import FONTS, design_family, generate, make_spec, photograph, render, write_dataset


def test_splits_share_no_typeface_and_differ_per_seed():
    tune = {f for fs in FONTS["tune"].values() for f in fs}
    held = {f for fs in FONTS["heldout"].values() for f in fs}
    assert not tune & held
    a = next(generate(1, 3, "tune", photographed=False))
    b = next(generate(1, 3, "heldout", photographed=False))
    assert a.spec.design.brand_font in tune and b.spec.design.brand_font in held
    assert (a.spec.brand, a.spec.brewery) != (b.spec.brand, b.spec.brewery)


def test_design_family_varies_only_the_named_thing():
    for vary, allowed in (
        ("brand", {"brand"}),
        ("grade", {"grade"}),
        ("number", {"seimai", "alcohol", "volume"}),
        ("design", {"design"}),  # editions: the same text in other designs
    ):
        fam = design_family(random.Random(4), 4, vary=vary)
        assert len(fam) == 4 and len({s.family for s in fam}) == 1
        base = fam[0]
        for other in fam[1:]:
            diff = {f.name for f in dc_fields(base) if getattr(base, f.name) != getattr(other, f.name)} - {"key"}
            assert diff and diff <= allowed, (vary, diff)
        assert len({(s.brand, s.grade, s.seimai, s.alcohol, s.volume, s.design) for s in fam}) == 4


def test_two_photographs_of_one_label_are_independent_and_bounded():
    spec = make_spec(random.Random(2), side="front")
    r = render(spec)
    rng = random.Random(9)
    p1, a = photograph(r.image, rng)
    p2, b = photograph(r.image, rng)
    assert a != b
    for p in (a, b):
        assert 0.3 <= p["scale"] <= 2.0 and abs(p["rotation_deg"]) <= 5 and p["jpeg_quality"] >= 40
        if p["crop"]:
            assert 0.02 <= p["crop"]["fraction"] <= 0.08


def test_write_dataset_emits_images_and_ground_truth(tmp_path):
    path = write_dataset(tmp_path, n=2, seed=1, split="heldout")
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert (tmp_path / row["file"]).exists()
        assert row["fields"]["brand_name"] and row["lines"] and row["split"] == "heldout"
        assert row["fields"]["brand_name"] in row["lines"]
