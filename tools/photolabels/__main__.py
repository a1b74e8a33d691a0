"""python -m tools.photolabels OUT --n N --seed S --split heldout [--clean]"""

from __future__ import annotations

import argparse

from tools.photolabels.dataset import SPLITS, write_dataset


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.photolabels", description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=SPLITS, default="heldout")
    ap.add_argument("--clean", action="store_true", help="write the renders, not photographs")
    a = ap.parse_args(argv)
    path = write_dataset(a.out, a.n, a.seed, a.split, photographed=not a.clean)
    print(path)


if __name__ == "__main__":
    main()
