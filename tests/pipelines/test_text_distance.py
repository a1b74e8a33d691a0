"""pipelines.text.distance: the edit distance identity (brands read alike) and the OCR bench (character
accuracy) share."""

from __future__ import annotations

from pipelines.text.distance import edit_distance


def test_edit_distance_counts_insertions_deletions_and_substitutions():
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("", "酒造") == edit_distance("酒造", "") == 2
    assert edit_distance("花の里", "花里") == 1 and edit_distance("天刀雫", "天乃雫") == 1
    assert edit_distance("同じ", "同じ") == 0


def test_a_cap_stops_counting_past_it():
    assert edit_distance("朝里", "朝和口里", cap=2) == 2
    assert edit_distance("八海山", "八海山山山山", cap=2) == 3  # lengths alone differ by 3
    assert edit_distance("abc", "xyz", cap=1) == 2
