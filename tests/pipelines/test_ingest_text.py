"""Label text, chunking and the chunk metadata schema that search and chat read."""

from __future__ import annotations

import random

import pytest

from pipelines.labels import schema as labels
from pipelines.text import chunking


@pytest.mark.parametrize("max_chars", [1, 7, 50, 2000])
def test_chunks_respect_the_limit_and_keep_the_text(max_chars):
    rng = random.Random(max_chars)
    sentences = [
        "".join(rng.choice("あいうえお酒米水麹") for _ in range(rng.randint(1, 90))) + rng.choice("。！？\n")
        for _ in range(60)
    ]
    text = "".join(sentences)
    chunks = chunking.chunk_text(text, max_chars)
    assert chunks and all(0 < len(c) <= max_chars for c in chunks)
    squash = lambda s: "".join(s.split())  # noqa: E731 - chunk edges may drop whitespace only
    assert squash("".join(chunks)) == squash(text)
    assert chunking.chunk_text(text, max_chars) == chunks  # deterministic: stable chunk ids


def test_short_text_is_one_chunk_and_empty_text_none():
    assert chunking.chunk_text("  獺祭 純米大吟醸  ", 2000) == ["獺祭 純米大吟醸"]
    assert chunking.chunk_text("   ", 10) == []


def test_label_text_uses_every_field():
    rec = {
        "category": "juice",
        "brand_name": "みかん畑",
        "product_name": "ストレート",
        "brewery": "青空農園",
        "region": "愛媛",
        "label_features": ["無添加", "濃厚"],
        "text": "冷やしてどうぞ",
    }
    text = labels.label_text(rec)
    for part in ("ジュース", "みかん畑", "ストレート", "メーカー: 青空農園", "愛媛", "無添加、濃厚", "冷やしてどうぞ"):
        assert part in text


def test_metadata_round_trip_keeps_features_as_a_list():
    rec = {
        "id": "label_0123456789abcdef",
        "source": "label",
        "category": "sake",
        "brand_name": "獺祭",
        "label_features": ["フルーティ", "華やか、甘口", " "],
        "ingested_at_ts": 12.5,
        "extra": {"no": "dicts"},
    }
    md = labels.to_metadata(rec)
    assert all(isinstance(v, (str, int, float, bool)) for v in md.values()), md
    assert set(labels.SCHEMA_KEYS) <= set(md)
    assert md["doc_id"] == rec["id"] and md["region"] == "" and "extra" not in md
    back = labels.from_metadata(md)
    assert back["label_features"] == ["フルーティ", "華やか 甘口"]
    assert labels.to_metadata(back) == md  # idempotent


def test_ids_are_content_derived():
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert labels.label_id(sha) == "label_0123456789abcdef"
    assert labels.text_doc_key("doc-1") == labels.text_doc_key("doc-1") != labels.text_doc_key("doc-2")
    assert labels.chunk_id("label_x", 2) == "label_x#2"
