"""Regression guard on retrieval quality: a 400-label slice of the evaluation set.

The full set (>= 200 queries over 2,000 labels) is measured by bench/search_eval.py; this slice
keeps the test fast. Floors sit a little under what the current hybrid measures, so a change
that breaks the tokenizer, the fusion or the bonus fails here.
"""

from __future__ import annotations

import pytest

from pipelines.search import lexical
from tests.pipelines.search_support import build_corpus
from tools import search_eval
from tools.datagen.eval_queries import build_queries

# nDCG@10, recall@5; measured when set: lexical 0.873/0.896, dense 0.639/0.695, hybrid 0.885/0.905
FLOORS = {"lexical": (0.84, 0.86), "dense": (0.60, 0.65), "hybrid": (0.86, 0.88)}


@pytest.fixture(scope="module")
def corpus(redis_url, tmp_path_factory):
    c = build_corpus(redis_url, tmp_path_factory.mktemp("eval_chroma"), n=400, seed=5)
    yield c
    lexical.drop_collection(c.r, c.name)


def test_quality_floors_and_hybrid_beats_both(corpus):
    queries = build_queries(corpus.labels, seed=5, n_per_kind=12)
    assert len(queries) >= 100
    got = {
        m: search_eval.evaluate(queries, corpus.labels, m, collection=corpus.name, r=corpus.r, chroma=corpus.chroma)
        for m in FLOORS
    }
    summary = {m: (round(v["ndcg@10"], 4), round(v["recall@5"], 4)) for m, v in got.items()}
    for mode, (ndcg_floor, recall_floor) in FLOORS.items():
        assert got[mode]["ndcg@10"] >= ndcg_floor, summary
        assert got[mode]["recall@5"] >= recall_floor, summary
    for other in ("lexical", "dense"):
        assert got["hybrid"]["ndcg@10"] > got[other]["ndcg@10"], summary
        assert got["hybrid"]["recall@5"] > got[other]["recall@5"], summary
