"""The Redis layout of review decisions: the only module that spells its keys.

yana:review:decisions  list: decision JSON, newest first (DECISIONS_MAX kept)
yana:review:apart      set: "label_a|label_b" (sorted) that a person said are different labels

The merge records a decision reads and writes are the near-duplicate index's
(pipelines.neardup.index: record_merges, iter_merges, merge_of, forget_merge).
"""

DECISIONS_KEY = "yana:review:decisions"
APART_KEY = "yana:review:apart"
DECISIONS_MAX = 10000
