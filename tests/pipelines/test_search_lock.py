"""A search waiting for its query embedding does not hold the index lock: other searches of the
process go on, and the wait itself is bounded (EMBED_TIMEOUT)."""

from __future__ import annotations

import threading
import time

import pytest

from pipelines.search import lexical
from pipelines.search import service as search_mod
from tests.pipelines.search_support import build_corpus
from yana.errors import YanaError
from yana.settings import get_settings


@pytest.fixture(scope="module")
def corpus(redis_url, tmp_path_factory):
    c = build_corpus(redis_url, tmp_path_factory.mktemp("search_lock_chroma"), n=30, seed=5)
    yield c
    lexical.drop_collection(c.r, c.name)


@pytest.fixture()
def stuck_model(monkeypatch):
    """The query model hangs (as one being loaded, or starved of CPU) until released."""
    entered, release = threading.Event(), threading.Event()
    real = search_mod._timed_query_vector

    def stuck(model, text):
        entered.set()
        release.wait(30)
        return real(model, text)

    monkeypatch.setattr(search_mod, "_timed_query_vector", stuck)
    yield entered, release
    release.set()


def test_a_stuck_embedding_does_not_block_other_searches(corpus, stuck_model):
    entered, release = stuck_model
    corpus.search(None, k=1)  # the index is loaded
    slow = threading.Thread(target=lambda: corpus.search("純米吟醸", k=3, debug=False), daemon=True)
    slow.start()
    assert entered.wait(10)
    time.sleep(0.5)  # let the slow search get as far as it can while its embedding hangs
    done = threading.Event()
    other = threading.Thread(target=lambda: (corpus.search("純米吟醸", k=3, mode="lexical"), done.set()), daemon=True)
    other.start()
    assert done.wait(10), "a lexical search waited behind a search stuck on its embedding"
    release.set()
    slow.join(30)
    assert not slow.is_alive()


def test_the_embedding_wait_is_bounded(corpus, stuck_model, monkeypatch):
    monkeypatch.setenv("SEARCH_EMBED_TIMEOUT_S", "0.5")
    get_settings.cache_clear()
    try:
        t = time.monotonic()
        with pytest.raises(YanaError) as exc:
            corpus.search("田酒", k=3)
        assert exc.value.code == "EMBED_TIMEOUT" and exc.value.status == 503 and exc.value.retryable
        assert time.monotonic() - t < 5
    finally:
        monkeypatch.delenv("SEARCH_EMBED_TIMEOUT_S")
        get_settings.cache_clear()
