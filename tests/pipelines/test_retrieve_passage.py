"""Passages around the evidence (options.passage) and the evidence's byte spans inside `text`
(issue 25): the extractor and the LLM loop's host, without stores or models."""

from __future__ import annotations

import pytest

from pipelines.retrieve import passage as PS
from pipelines.retrieve import rank as R
from pipelines.retrieve.chunks import chunk_document, sentences
from pipelines.retrieve.rlm import blend

# Three sentences full of the query's words, then the sentence that answers it (1947), then more.
HARBOUR = (
    "The harbour of Otaru froze over in a hard winter. The frozen harbour stopped the herring boats of Otaru. "
    "Otaru's harbour master wrote about the frozen harbour every day. That winter was the winter of 1947. "
    "Spring came late. 🌊 港は凍った。"
)
ANSWER = "That winter was the winter of 1947."
OTHER = "Bread riots spread in 1789 when flour prices doubled. Crowds marched on the town hall."


def _check_spans(text: str, spans: list[dict]) -> list[str]:
    """Every span is a non-empty UTF-8 byte range inside `text` on character boundaries: its pieces."""
    raw = text.encode("utf-8")
    assert spans
    out = []
    for s in spans:
        assert 0 <= s["start"] < s["end"] <= len(raw), (s, len(raw))
        out.append(raw[s["start"] : s["end"]].decode("utf-8"))  # raises when a span cuts a character
    return out


def _top(passage: str, query: str = "when did the harbour of Otaru freeze", texts=None, max_chunk_chars: int = 800):
    texts = texts or [OTHER, HARBOUR]
    ranking = R.rank(query, texts, max_chunk_chars=max_chunk_chars, mode="lexical", windows=3, passage=passage)
    best = max(ranking.ranked, key=lambda r: r.score)
    doc = texts[best.doc_index]
    p = PS.Passage(best.window[0], best.window[1], best.evidence)
    return doc, p.text(doc), p.spans(doc)


def test_chunk_passage_holds_the_sentence_that_answers_and_spans_point_inside_it():
    doc, text, spans = _top("chunk")
    assert doc == HARBOUR and ANSWER in text  # the short window stops before it
    assert text == HARBOUR  # the whole chunk: one paragraph under max_chunk_chars
    pieces = _check_spans(text, spans)
    assert all(p in text and p.strip() == p for p in pieces)
    assert any("harbour" in p for p in pieces)


def test_window_passage_is_todays_short_window_with_spans_inside_it():
    _, text, spans = _top("window")
    assert ANSWER not in text and len([s for s in sentences(text)]) <= R.WINDOW_SENTENCES
    assert text in HARBOUR
    _check_spans(text, spans)


def test_document_passage_is_the_whole_document():
    doc, text, spans = _top("document")
    assert text == doc == HARBOUR
    pieces = _check_spans(text, spans)
    # the spans are the evidence, not the whole document
    assert all(len(p) < len(doc) for p in pieces)


def test_evidence_apart_gives_several_spans():
    doc = "Alpha sentence about tides. Filler words here. More filler now. The moon pulls tides. End."
    # two evidence windows with text between them: two spans, in order, each exactly its words
    p = PS.around(doc, [(doc.index("The moon"), doc.index(" End")), (0, doc.index(" Filler"))], 800)
    pieces = _check_spans(p.text(doc), p.spans(doc))
    assert pieces == ["Alpha sentence about tides.", "The moon pulls tides."]
    # touching windows merge into one
    a = doc.index("Filler")
    p = PS.around(doc, [(a, doc.index(" More")), (doc.index("More"), doc.index(" The moon"))], 800)
    assert _check_spans(p.text(doc), p.spans(doc)) == ["Filler words here. More filler now."]


@pytest.mark.parametrize("limit", [40, 60, 90, 800])
def test_chunk_passage_grows_by_whole_sentences_within_the_limit(limit):
    doc = "One short. Two is here. Three comes next. Four is the answer. Five follows it. Six ends."
    ev = (doc.index("Four"), doc.index(" Five"))
    p = PS.around(doc, [ev], limit)
    text = p.text(doc)
    assert "Four is the answer." in text and len(text) <= max(limit, ev[1] - ev[0])
    starts = {s.start for s in sentences(doc)}
    ends = {s.end for s in sentences(doc)}
    assert p.start in starts and p.end in ends  # whole sentences
    home = next(c for c in chunk_document(0, doc, limit) if c.start <= ev[0] < c.end)
    assert p.start <= home.start and p.end >= home.end  # at least the chunk that holds the evidence
    assert _check_spans(text, p.spans(doc)) == ["Four is the answer."]


def test_evidence_at_a_chunk_edge_brings_the_next_sentence_when_it_fits():
    # the chunker closes a chunk at a paragraph break; the evidence's follow-up is grown into
    doc = "The key fact is this.\nIts reason comes next. A much longer closing sentence follows it here."
    chunks = chunk_document(0, doc, 60)
    assert chunks[0].text == "The key fact is this."
    p = PS.around(doc, [(0, chunks[0].end)], 60)
    assert p.text(doc) == "The key fact is this.\nIts reason comes next."  # the third does not fit
    assert _check_spans(p.text(doc), p.spans(doc)) == ["The key fact is this."]


def test_multibyte_spans():
    doc = "日本酒の歴史は古い。小樽の酒蔵は明治に始まった！本当か？\n\n🍣と🍶は合う。北海道の米で造る。"
    for mode in PS.MODES:
        ranking = R.rank("小樽の酒蔵", [doc], max_chunk_chars=20, mode="lexical", passage=mode)
        r = ranking.ranked[0]
        p = PS.Passage(r.window[0], r.window[1], r.evidence)
        assert "小樽の酒蔵" in "".join(_check_spans(p.text(doc), p.spans(doc)))


def test_llm_host_returns_the_chunk_around_the_models_verified_passage():
    docs = [{"id": "h", "text": HARBOUR}, {"id": "o", "text": OTHER}]
    a = HARBOUR.index(ANSWER)
    picked = {"h": ((a, a + len(ANSWER)), 0.9)}
    baseline = [{"doc_id": "o", "score": 0.5, "text": OTHER, "spans": [{"start": 0, "end": 5}]}]
    for mode, whole in (("chunk", HARBOUR), ("document", HARBOUR), ("window", ANSWER)):
        out = blend(
            picked,
            baseline,
            docs,
            weight=0.5,
            top_k=5,
            min_score=0,
            include_spans=True,
            passage=mode,
            max_chunk_chars=800,
        )
        top = out[0]
        assert top["doc_id"] == "h" and top["text"] == whole
        assert _check_spans(top["text"], top["spans"]) == [ANSWER]
        assert out[1]["text"] == OTHER and out[1]["spans"] == [{"start": 0, "end": 5}]  # the extractor's, as given
