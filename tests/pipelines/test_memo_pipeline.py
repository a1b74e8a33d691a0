"""pipelines.memo.service against real Redis and a Chroma folder: memos follow a re-embed to a new model
(their own collection is rebuilt and its alias swapped), and stay apart from the labels."""

from __future__ import annotations

from pipelines.embedding.backends import get_embedder
from pipelines.memo import service as memo
from pipelines.reembed import job as reembed
from pipelines.search import collections as vector_index
from tests.pipelines.ingest_support import FakeJob, build_tiny_st_model, make_env

CFG = memo.MemoConfig(ttl_s=3600, max_chunk_chars=40)


def test_memos_follow_a_reembed_to_the_new_model(redis_url, tmp_path):
    env = make_env(redis_url, tmp_path, db=8)
    saved = [
        memo.save_memo(env.r, env.chroma, CFG, session_id="s", text="小樽の運河沿いで飲んだ純米吟醸のこと。" * 3),
        memo.save_memo(env.r, env.chroma, CFG, session_id="s", text="長い話", summary="山形の酒蔵をまわった要約"),
    ]
    before, before_model = memo.memo_collection(env.chroma, env.r)
    ids_before = sorted(before.get(include=[])["ids"])
    assert len(ids_before) == len(saved[0]["chroma_ids"]) + 1

    tiny = build_tiny_st_model(tmp_path / "tiny")
    res = reembed.run_reembed(FakeJob("re-memo"), model=tiny, r=env.r, chroma=env.chroma, s=env.s)
    assert res["memos"]["swapped"] is True and res["memos"]["copied"] == len(ids_before)

    after, after_model = memo.memo_collection(env.chroma, env.r)
    assert after.name != before.name and after_model == tiny != before_model
    assert vector_index.collection_model(after) == (tiny, get_embedder(tiny).dim)
    assert sorted(after.get(include=[])["ids"]) == ids_before
    labels, _ = vector_index.active_collection(env.chroma, env.r)
    assert labels.name != after.name and labels.get(ids=ids_before)["ids"] == []
    hits = memo.query_memo(env.r, env.chroma, query="小樽の運河", n_results=5)["results"]
    assert {h["metadata"]["memo_id"] for h in hits} == {s["memo_id"] for s in saved}
    assert all(h["raw"] is not None for h in hits)

    # a second re-embed to the same model leaves the memos where they are
    again = memo.reembed_memos(env.r, env.chroma, tiny)
    assert again["swapped"] is False and memo.memo_collection(env.chroma, env.r)[0].name == after.name
