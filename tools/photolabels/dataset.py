"""A photographed label set on disk: OUT/<key>.jpg plus OUT/labels.jsonl (one line per image:
key, file, split, spec, fields, lines, photo parameters)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from tools.photolabels.photo import photograph
from tools.photolabels.render import Design, LabelSpec, make_spec, render

SPLITS = ("tune", "heldout")


@dataclass
class Sample:
    key: str
    spec: LabelSpec
    image: Image.Image  # the photograph (or the clean render when photographed=False)
    lines: list[str]
    photo: dict

    def record(self, file: str = "") -> dict:
        return {
            "key": self.key,
            "file": file,
            "split": self.spec.key.split(":")[0] if ":" in self.spec.key else "",
            "fields": self.spec.fields(),
            "lines": self.lines,
            "text": "\n".join(self.lines),
            "spec": self.spec.to_dict(),
            "photo": self.photo,
        }


def rng_for(split: str, seed: int) -> random.Random:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}")
    return random.Random(f"photolabels:{split}:{seed}")


def generate(n: int, seed: int = 0, split: str = "heldout", *, photographed: bool = True) -> Iterator[Sample]:
    """`n` labels of `split`: front and back sides, vertical and horizontal, about one in ten a juice."""
    rng = rng_for(split, seed)
    for i in range(n):
        key = f"{split}:{seed}:{i:05d}"
        spec = make_spec(rng, split=split, key=key)
        r = render(spec)
        if photographed:
            img, params = photograph(r.image, rng)
        else:
            img, params = r.image, {}
        yield Sample(f"{split}-{seed}-{i:05d}", spec, img, r.lines, params)


def write_dataset(
    out: Path | str, n: int, seed: int = 0, split: str = "heldout", *, photographed: bool = True, quality: int = 95
) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "labels.jsonl", "w", encoding="utf-8") as fh:
        for s in generate(n, seed, split, photographed=photographed):
            name = f"{s.key}.jpg"
            s.image.convert("RGB").save(out / name, "JPEG", quality=quality)
            fh.write(json.dumps(s.record(name), ensure_ascii=False) + "\n")
    return out / "labels.jsonl"


def load_dataset(folder: Path | str) -> list[Sample]:
    """The samples `write_dataset` wrote (images decoded from the files, specs from labels.jsonl)."""
    folder = Path(folder)
    out = []
    with open(folder / "labels.jsonl", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            d = dict(rec["spec"])
            d["design"] = Design(**d["design"])
            d["styles"] = tuple(d["styles"])
            img = Image.open(folder / rec["file"])
            img.load()
            out.append(Sample(rec["key"], LabelSpec(**d), img, rec["lines"], rec["photo"]))
    return out
