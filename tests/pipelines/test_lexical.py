"""The shared lexical store (pipelines.search.lexical) and the Japanese tokenizer."""

from __future__ import annotations

import uuid

import numpy as np
import orjson
import pytest

from pipelines.search import lexical
from pipelines.search.tokenizer import NO_GLOSSARY, normalize_romaji, romaji_of, tokenize


@pytest.fixture()
def coll():
    return f"test_lex_{uuid.uuid4().hex[:8]}"


def _chunk(id_, text, **md):
    return {"id": id_, "text": text, "metadata": {"id": id_, "doc_id": id_, **md}}


def test_brand_and_place_names_are_exact_terms():
    assert "獺祭" in tokenize("獺祭 純米大吟醸")
    assert "小樽" in tokenize("北海道小樽の酒")
    assert {"北の", "の誉"} <= set(tokenize("北の誉"))


def test_romaji_and_english_spellings_meet_the_japanese_reading():
    # the query side (ASCII) and the document side (reading of the kanji) give the same terms
    # (romaji alone; with the glossary a word it knows gives its concept instead: g:獺祭 on both sides)
    assert "r:dassai" in tokenize("獺祭") and "r:dassai" in tokenize("Dassai", NO_GLOSSARY)
    assert "r:otaru" in tokenize("小樽") and "r:otaru" in tokenize("OTARU", NO_GLOSSARY)
    assert "g:獺祭" in tokenize("獺祭") and tokenize("Dassai") == ["g:獺祭"]
    assert romaji_of("北海道") == normalize_romaji("Hokkaido") == normalize_romaji("hokkaidou")
    assert normalize_romaji("Niigata") == romaji_of("新潟")
    # a romaji typo still shares most trigrams with the right reading
    right = {t for t in tokenize("獺祭") if t.startswith("t:")}
    typo = {t for t in tokenize("dasai") if t.startswith("t:")}
    assert len(right & typo) >= 2


def test_full_width_and_case_are_normalised():
    assert tokenize("ＤＡＳＳＡＩ") == tokenize("dassai")


def test_index_replace_and_remove_keep_keys_consistent(redis_client, coll):
    r = redis_client
    p = lexical.prefix(coll)
    emb = np.ones(8, dtype=np.float32)
    lexical.index_chunks(
        r, coll, [_chunk("a", "獺祭 純米大吟醸", region="山口", ingested_at_ts=1.0) | {"embedding": emb}]
    )
    lexical.index_chunks(r, coll, [_chunk("b", "北の誉 小樽", region="小樽", ingested_at_ts=2.0)])
    assert lexical.count(r, coll) == 2
    seq = lexical.current_seq(r, coll)
    terms_a = orjson.loads(r.hget(p + "doc:a", "terms"))
    assert "獺祭" in terms_a and terms_a["獺祭"] >= 1

    # re-index "a" with new text: old terms gone, count unchanged, seq moved, change log has a
    lexical.index_chunks(r, coll, [_chunk("a", "十四代 山形", region="山形", ingested_at_ts=3.0)])
    terms_a = orjson.loads(r.hget(p + "doc:a", "terms"))
    assert "獺祭" not in terms_a and "十四" in terms_a
    assert r.hget(p + "doc:a", "vec") is None  # the new version came without an embedding
    assert lexical.count(r, coll) == 2
    assert lexical.current_seq(r, coll) > seq
    assert int(r.zscore(p + "changes", "a")) == lexical.current_seq(r, coll)

    lexical.remove_chunks(r, coll, ["a", "missing"])
    assert lexical.count(r, coll) == 1
    assert not r.exists(p + "doc:a")
    assert r.zscore(p + "changes", "a") is not None  # tombstone: processes learn about the delete

    lexical.drop_collection(r, coll)
    assert not list(r.scan_iter(match=p + "*"))


def test_index_text_drops_field_names_and_adds_missing_fields():
    text = lexical.index_text(
        "カテゴリ: 日本酒\n銘柄: 獺祭\n地域: 山口", {"category": "sake", "region": "山口", "brewery": "旭酒造"}
    )
    assert "銘柄" not in text and "獺祭" in text
    assert "sake" in text and "旭酒造" in text
    assert text.count("山口") == 1
