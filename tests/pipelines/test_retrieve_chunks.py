"""Chunking, byte spans and lexical ranking of the inline extractor (no stores needed)."""

from __future__ import annotations

import numpy as np

from pipelines.retrieve import rank as R
from pipelines.retrieve.chunks import byte_span, chunk_document, sentences

JA = "日本酒の歴史は古い。小樽の酒蔵は明治に始まった！本当か？\n\n🍣と🍶は合う。北海道の米で造る。"
EN = "The tide rises twice a day. In 1816 the summer never came! Why? Nobody knew.\nA new paragraph starts here."


def test_sentences_end_at_japanese_and_english_terminators():
    got = [JA[s.start : s.end] for s in sentences(JA)]
    assert got == [
        "日本酒の歴史は古い。",
        "小樽の酒蔵は明治に始まった！",
        "本当か？",
        "🍣と🍶は合う。",
        "北海道の米で造る。",
    ]
    got = [EN[s.start : s.end] for s in sentences(EN)]
    assert got[1] == "In 1816 the summer never came!" and got[-1] == "A new paragraph starts here."


def test_chunks_respect_the_limit_and_cover_whole_sentences():
    for text in (JA, EN, "x" * 95):
        for limit in (10, 20, 40, 800):
            chunks = chunk_document(0, text, limit)
            assert chunks and all(len(c.text) <= limit for c in chunks)
            assert all(text[c.start : c.end] == c.text for c in chunks)
    # A paragraph break is preferred over packing across it.
    chunks = chunk_document(0, JA, 40)
    assert chunks[0].text.endswith("本当か？")


def test_byte_spans_are_exact_on_multibyte_text():
    for text in (JA, EN + " 🎉 emoji ✓"):
        for c in chunk_document(0, text, 15):
            span = byte_span(text, c.start, c.end)
            assert text.encode("utf-8")[span["start"] : span["end"]].decode("utf-8") == c.text


def test_lexical_rank_is_deterministic_and_finds_the_document():
    texts = [EN, JA, "Bread riots spread through the city when flour prices doubled."]
    a = R.rank("why did flour prices cause riots", texts, max_chunk_chars=800, mode="hybrid")
    b = R.rank("why did flour prices cause riots", texts, max_chunk_chars=800, mode="hybrid")
    assert [(r.doc_index, r.score) for r in a.ranked] == [(r.doc_index, r.score) for r in b.ranked]
    best = max(a.ranked, key=lambda r: r.score)
    assert best.doc_index == 2 and 0 < best.score <= 1
    ja = R.rank("小樽の酒蔵", texts, max_chunk_chars=800)
    assert max(ja.ranked, key=lambda r: r.score).doc_index == 1


def test_neighbour_pairs_are_within_a_document_or_across_single_chunk_documents():
    paragraphs = ["The tide rises twice a day.", "The moon pulls the sea.", "Bread riots spread fast."]
    texts = R.vector_texts(paragraphs, 800)
    # One chunk per document: documents next to each other in request order are neighbours.
    assert texts == [*paragraphs, paragraphs[0] + "\n" + paragraphs[1], paragraphs[1] + "\n" + paragraphs[2]]
    # Several chunks in a document: only its own chunks pair up, as exact slices of its text.
    docs = [EN, "Bread riots spread through the city when flour prices doubled."]
    chunks = R.chunk_all(docs, 40)
    pairs = R.neighbour_pairs(chunks, len(docs))
    assert pairs and all(chunks[i].doc_index == chunks[j].doc_index for i, j in pairs)
    assert len(pairs) == len(chunks) - len(docs)  # every adjacent pair but the one across the documents
    for i, j in pairs:
        doc = docs[chunks[i].doc_index]
        assert R.pair_text(docs, chunks[i], chunks[j]) == doc[chunks[i].start : chunks[j].end]


def test_missing_context_vectors_fall_back_to_the_chunks_own():
    from pipelines.embedding.backends import get_embedder

    emb = get_embedder(None)
    paragraphs = [
        "Sourdough needs a starter of flour and water.",
        "It rises slowly overnight in a cool kitchen.",
        "The tide rises twice a day.",
        "The moon's pull makes the sea bulge.",
    ]
    query = "why does the sea rise and fall"
    qv = emb.embed_queries([query])[0]
    n = len(paragraphs)

    def all_vectors(texts, share=1.0):
        return emb.embed_passages(texts), np.ones(len(texts), dtype=bool)

    def chunks_only(texts, share=1.0):
        vecs, present = all_vectors(texts)
        present[:] = [t in paragraphs for t in texts]
        return vecs, present

    full = R.rank(query, paragraphs, max_chunk_chars=800, chunk_vectors=all_vectors, query_vector=qv)
    assert not full.context_missing and not full.lexical_only
    part = R.rank(query, paragraphs, max_chunk_chars=800, chunk_vectors=chunks_only, query_vector=qv)
    assert part.context_missing == R.vector_texts(paragraphs, 800)[n:] and not part.lexical_only
    for ranking in (full, part):  # with or without context: every document, a tide paragraph first
        assert {r.doc_index for r in ranking.ranked} == set(range(n))
        assert max(ranking.ranked, key=lambda r: r.score).doc_index in (2, 3)
        assert all(0 <= r.score <= 1 for r in ranking.ranked)


# One paragraph answers in one sentence among unrelated ones; the other is about the topic throughout.
VILLAGE = [
    "The village sits at the foot of a steep valley. Its bakery opens at six and the church bell rings at noon."
    " Visitors come for the cheese, the walking paths and the old mill."
    " In 1882 a rockfall in the new railway tunnel killed forty workers.",
    "Railway tunnels through mountains are long and expensive projects. Engineers survey the rock for years"
    " before digging starts. The finished tunnels shorten journeys between valleys by hours.",
    "Sourdough needs a starter of flour and water, fed every day.",
    "The tide rises twice a day because the moon pulls the sea.",
]
VILLAGE_QUERY = "How many men died in the railway tunnel disaster?"


def test_sentence_units_are_the_sentences_of_multi_sentence_chunks():
    chunks = R.chunk_all(VILLAGE, 800)
    units = R.sentence_units(VILLAGE, chunks)
    assert [i for i, _ in units] == [0, 0, 0, 0, 1, 1, 1]  # one-sentence chunks are their own unit
    assert units[3][1] == "In 1882 a rockfall in the new railway tunnel killed forty workers."
    assert all(t in VILLAGE[chunks[i].doc_index] for i, t in units)
    assert R.sentence_units(VILLAGE, chunks, {1}) == units[4:]
    # Warming a cache covers them: chunks, then neighbour pairs, then sentences.
    assert R.vector_texts(VILLAGE, 800)[-len(units) :] == [t for _, t in units]


def _village_query():
    """The real embedder and VILLAGE_QUERY's vector."""
    from pipelines.embedding.backends import get_embedder

    emb = get_embedder(None)
    return emb, emb.embed_queries([VILLAGE_QUERY])[0]


def test_sentence_evidence_lifts_the_paragraph_whose_sentence_answers(monkeypatch):
    emb, qv = _village_query()
    asked: list[str] = []
    sentences = {t for _, t in R.sentence_units(VILLAGE, R.chunk_all(VILLAGE, 800))}

    def vectors(texts, share=1.0):
        asked.extend(texts)
        return emb.embed_passages(texts), np.ones(len(texts), dtype=bool)

    def top(ranking):
        return max(ranking.ranked, key=lambda r: r.score).doc_index

    with_sentences = R.rank(VILLAGE_QUERY, VILLAGE, max_chunk_chars=800, chunk_vectors=vectors, query_vector=qv)
    assert top(with_sentences) == 0 and not with_sentences.sentences_missing
    assert "In 1882 a rockfall in the new railway tunnel killed forty workers." in asked
    assert len(asked) == len(set(asked))  # each text asked for once in a request
    monkeypatch.setattr(R, "SENTENCE_WEIGHT", 0.0)
    asked.clear()
    R.rank(VILLAGE_QUERY, VILLAGE, max_chunk_chars=800, chunk_vectors=vectors, query_vector=qv)
    assert asked and not sentences & set(asked)  # without the weight no sentence is embedded


def test_sentence_evidence_changes_the_winner_when_chunk_cosines_disagree(monkeypatch):
    """The mechanism on vectors of known cosines (whether a real model already ranks VILLAGE's first
    paragraph first on chunk cosines alone varies with the model build): the whole-topic paragraph
    has the better chunk cosine, the other one sentence that answers; a query with no words in
    common leaves the ranking to the vectors."""
    rng = np.random.default_rng(0)
    dim = 64
    query_vector = np.zeros(dim)
    query_vector[0] = 1.0
    answer = "In 1882 a rockfall in the new railway tunnel killed forty workers."

    def cosine_of(text: str) -> float:
        if text == answer:
            return 0.95
        if text == VILLAGE[1]:
            return 0.8
        if text == VILLAGE[0]:
            return 0.5
        return 0.2

    def vectors(texts, share=1.0):
        out = np.zeros((len(texts), dim))
        for k, t in enumerate(texts):
            noise = rng.normal(size=dim)
            noise[0] = 0.0
            a = cosine_of(t)
            out[k] = a * query_vector + np.sqrt(1 - a * a) * noise / np.linalg.norm(noise)
        return out, np.ones(len(texts), dtype=bool)

    def top(ranking):
        return max(ranking.ranked, key=lambda r: r.score).doc_index

    kw = {"max_chunk_chars": 800, "chunk_vectors": vectors, "query_vector": query_vector}
    # The chunk's own cosine weighted above its neighbour pairs' (with equal weights the two
    # neighbouring paragraphs share the same pair and tie on these made-up cosines).
    monkeypatch.setattr(R, "CONTEXT_SELF_WEIGHT", 3.0)
    assert top(R.rank("zqv xkw", VILLAGE, **kw)) == 0
    monkeypatch.setattr(R, "SENTENCE_WEIGHT", 0.0)
    assert top(R.rank("zqv xkw", VILLAGE, **kw)) == 1


def test_only_shortlisted_chunks_read_sentence_vectors_and_missing_ones_fall_back(monkeypatch):
    emb, qv = _village_query()
    units = R.sentence_units(VILLAGE, R.chunk_all(VILLAGE, 800))
    sentences = {t for _, t in units}
    asked: list[str] = []

    def sentences_missing(texts, share=1.0):
        asked.extend(texts)
        return emb.embed_passages(texts), np.array([t not in sentences for t in texts])

    monkeypatch.setattr(R, "SENTENCE_TOP_N", 1)
    monkeypatch.setattr(R, "COLD_LEADERS", 0)  # the shortlist alone asks for sentences
    got = R.rank(VILLAGE_QUERY, VILLAGE, max_chunk_chars=800, chunk_vectors=sentences_missing, query_vector=qv)
    read = [t for t in asked if t in sentences]
    assert read in ([t for i, t in units if i == 0], [t for i, t in units if i == 1])  # one chunk's
    assert got.sentences_missing == read and not got.context_missing and not got.lexical_only
    assert {r.doc_index for r in got.ranked} == set(range(len(VILLAGE)))
    assert all(0 <= r.score <= 1 for r in got.ranked)


def test_a_cold_budget_embeds_the_chunks_bm25_ranks_best_first():
    """Under a time budget only the first texts asked for get a vector: they are the chunks BM25
    ranks best, not the first paragraphs of the documents; the chunks' ask may use only
    COLD_CHUNK_SHARE of the time, so some is left for the leaders' context."""
    from pipelines.embedding.backends import get_embedder

    emb = get_embedder(None)
    filler = [f"Paragraph {k} is about the weather in a town with {k} bakeries and a market." for k in range(12)]
    docs = [*filler, "The tunnel collapse of 1882 killed forty railway workers.", "Railway tunnels are costly."]
    query = "How many workers died when the railway tunnel collapsed?"
    asked: list[tuple[list[str], float]] = []

    def two_in_time(texts, share=1.0):  # a budget that covers two texts
        asked.append((texts, share))
        present = np.zeros(len(texts), dtype=bool)
        present[:2] = len(asked) == 1
        vecs = np.zeros((len(texts), emb.dim), dtype=np.float32)
        vecs[:2] = emb.embed_passages(texts[:2])
        return vecs, present

    ranking = R.rank(
        query, docs, max_chunk_chars=800, chunk_vectors=two_in_time, query_vector=emb.embed_queries([query])[0]
    )
    n = len(ranking.chunks)
    chunks, share = asked[0]
    assert chunks[:2] == [docs[12], docs[13]] and share == R.COLD_CHUNK_SHARE  # the chunks with the query's terms
    assert sorted(chunks) == sorted(c.text for c in ranking.chunks)  # then every other chunk
    assert set(ranking.lexical_only) == set(range(n)) - {12, 13}


RAILWAY_QUERY = "How many workers died when the railway tunnel collapsed?"
# The answer shares no term with the question; BM25 gives it nothing, a head's vector finds it.
RAILWAY_ANSWER = "Forty labourers lost their lives when the mountain bore caved in during 1882."
RAILWAY_FILLER = [f"Paragraph {k} is about the weather in a town with {k} bakeries and a market." for k in range(12)]
RAILWAY_DOCS = [*RAILWAY_FILLER[:6], RAILWAY_ANSWER, *RAILWAY_FILLER[6:], "Railway timetables change every spring."]


def _glances(emb, qv, calls: list):
    def glance(texts):
        calls.append(texts)
        vecs, seen = emb.glance_passages(texts, 16)
        return vecs @ qv, seen

    return glance


def test_a_cold_request_embeds_first_the_chunks_whose_head_answers():
    """With a glance (each chunk's first tokens, cheap), the chunks without a vector are asked for
    by BM25 promise and glance together: an answer in other words than the question comes before
    the chunks that share nothing with it, where BM25 alone leaves it in document order."""
    from pipelines.embedding.backends import get_embedder

    emb = get_embedder(None)
    qv = emb.embed_queries([RAILWAY_QUERY])[0]
    asked: list[tuple[list[str], float]] = []

    def nothing_cached(texts, share=1.0):
        asked.append((texts, share))
        return np.zeros((len(texts), emb.dim), dtype=np.float32), np.zeros(len(texts), dtype=bool)

    calls: list = []
    R.rank(
        RAILWAY_QUERY,
        RAILWAY_DOCS,
        max_chunk_chars=800,
        chunk_vectors=nothing_cached,
        query_vector=qv,
        glance=_glances(emb, qv, calls),
    )
    assert asked[0] == ([c for c in RAILWAY_DOCS], 0.0)  # the cache only, first
    assert len(calls) == 1 and sorted(calls[0]) == sorted(RAILWAY_DOCS)
    first = asked[1][0]
    assert first.index(RAILWAY_ANSWER) < min(first.index(d) for d in RAILWAY_FILLER)

    asked.clear()
    R.rank(RAILWAY_QUERY, RAILWAY_DOCS, max_chunk_chars=800, chunk_vectors=nothing_cached, query_vector=qv)
    first = asked[0][0]  # without a glance: promise, then document order
    assert first.index(RAILWAY_ANSWER) > first.index(RAILWAY_DOCS[0])


def test_a_warm_request_glances_at_nothing_and_ranks_as_without():
    from pipelines.embedding.backends import get_embedder

    emb = get_embedder(None)
    qv = emb.embed_queries([RAILWAY_QUERY])[0]

    def cached(texts, share=1.0):
        return emb.embed_passages(texts), np.ones(len(texts), dtype=bool)

    calls: list = []
    kw = {"max_chunk_chars": 800, "chunk_vectors": cached, "query_vector": qv}
    glanced = R.rank(RAILWAY_QUERY, RAILWAY_DOCS, glance=_glances(emb, qv, calls), **kw)
    plain = R.rank(RAILWAY_QUERY, RAILWAY_DOCS, **kw)
    assert calls == []
    assert [(r.doc_index, r.score) for r in glanced.ranked] == [(r.doc_index, r.score) for r in plain.ranked]


def test_a_cold_request_embeds_the_leaders_context_before_other_pairs(monkeypatch):
    """After the chunks, a cold request asks for the neighbour pairs and sentences of the chunks a
    first fusion ranks best, leader by leader, before the pairs of chunks that cannot win; a warm
    request (every vector there) ranks exactly as when asked in one go."""
    emb, qv = _village_query()
    filler = [f"Paragraph {k} is about the weather in a town with {k} bakeries." for k in range(8)]
    docs = [*filler, *VILLAGE]
    asked: list[list[str]] = []

    def vectors(texts, share=1.0):
        asked.append(texts)
        return emb.embed_passages(texts), np.ones(len(texts), dtype=bool)

    monkeypatch.setattr(R, "COLD_LEADERS", 1)
    led = R.rank(VILLAGE_QUERY, docs, max_chunk_chars=800, chunk_vectors=vectors, query_vector=qv)
    chunks = led.chunks
    own = emb.embed_passages([c.text for c in chunks]) @ qv
    lexical = R._index(docs, 800)[1].scores(R.T.terms(VILLAGE_QUERY))
    first = R.fuse_linear(lexical, own, np.ones(len(chunks), dtype=bool))
    lead = int(np.argmax(first))
    pairs = R.neighbour_pairs(chunks, len(docs))
    lead_pairs = {R.pair_text(docs, chunks[i], chunks[j]) for i, j in pairs if lead in (i, j)}
    lead_sentences = {t for _, t in R.sentence_units(docs, chunks, {lead})}
    assert set(asked[1]) == lead_pairs | lead_sentences  # the leader's context, nothing else, second
    assert all(t not in asked[1] for t in asked[2])  # the other pairs after, each text asked once

    def one_go(texts, share=1.0):
        return emb.embed_passages(texts), np.ones(len(texts), dtype=bool)

    monkeypatch.setattr(R, "COLD_LEADERS", 0)
    plain = R.rank(VILLAGE_QUERY, docs, max_chunk_chars=800, chunk_vectors=one_go, query_vector=qv)
    assert [(r.doc_index, r.score) for r in plain.ranked] == [(r.doc_index, r.score) for r in led.ranked]
