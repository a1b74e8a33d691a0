"""Kanji written in an old or variant form, folded to the common one (惠 → 恵, 櫻 → 桜, 龍 → 竜).

A recogniser reading brush lettering gives the old form of a kanji for the common one and back
(恵み read 惠み on a check set in the Kouzan Gyousyo face, docs/ocr.md 2026-11-29); two reads of one
name must still meet. The table is kyujipy's (464 old forms, one character each), loaded once.
"""

from __future__ import annotations

from functools import cache


@cache
def _table() -> dict[int, str]:
    from kyujipy import BasicConverter

    return str.maketrans(BasicConverter().kyujitai_to_shinjitai_database)


def warm_up() -> None:
    """Load the table now (kyujipy parses its data files: about 0.65 s) rather than in a first job."""
    _table()


def common_forms(text: str) -> str:
    """`text` with every old or variant kanji form replaced by its common form."""
    return text.translate(_table())
