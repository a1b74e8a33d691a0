"""Chunking, byte spans and lexical ranking of the inline extractor (no stores needed)."""

from __future__ import annotations

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
