"""Edit distance of short strings (read brands against each other, read text against printed)."""

from __future__ import annotations


def edit_distance(a: str, b: str, cap: int | None = None) -> int:
    """Levenshtein distance (insertions, deletions, substitutions, each 1). With `cap`, any distance
    over it is returned as cap + 1, and strings whose lengths alone differ by more are not compared."""
    if cap is not None and abs(len(a) - len(b)) > cap:
        return cap + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1] if cap is None else min(prev[-1], cap + 1)
