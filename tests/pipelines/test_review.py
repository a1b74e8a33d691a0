"""A person's review decisions (pipelines.review.service): a split restores exactly what was sent and the
same bytes never go back into the label they were wrongly merged into; a merge takes a label out
of search without losing it (splitting it again restores it); every decision is recorded."""

from __future__ import annotations

import random

import pytest

from pipelines.ingest import pipeline as ingest
from pipelines.neardup import index as phash_index
from pipelines.review import service as review
from pipelines.search import collections as vector_index
from tests.pipelines.ingest_support import FakeJob, make_env
from tools.datagen import images
from yana.blobs import LocalBlobStore
from yana.errors import YanaError

METAS = images.label_set(6, seed=31)


def _stage(env, job_id: str, i: int, data: bytes) -> dict:
    p = env.data_dir / "incoming" / job_id / f"{i}.bin"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"kind": "stored", "path": f"incoming/{job_id}/{i}.bin"}


def _ingest(env, job_id: str, rows: list[tuple[bytes, dict]]) -> dict:
    items = [
        {"index": i, "name": f"{job_id}-{i}.jpg", "source": _stage(env, job_id, i, data), "fields": {**f, "text": None}}
        for i, (data, f) in enumerate(rows)
    ]
    return ingest.run_ingest(FakeJob(job_id), items=items, r=env.r, chroma=env.chroma, s=env.s)


def _meta(env, label_id: str) -> list[dict]:
    col, _ = vector_index.active_collection(env.chroma, env.r)
    return col.get(where={"doc_id": label_id}, include=["metadatas"])["metadatas"]


@pytest.fixture()
def env(redis_url, tmp_path):
    return make_env(redis_url, tmp_path, phash_threshold=8, phash_candidate_radius=12, ingest_batch_size=16)


def test_split_restores_the_upload_and_merge_round_trips(env):
    blobs = LocalBlobStore(env.data_dir)
    base = images.render_label(METAS[0], seed=300)
    copy = images.encode(images.variant(base, "resize", random.Random(2)).image, "JPEG", 85)
    sent_copy = {**METAS[0], "region": "分割町", "label_features": ["生酛"]}  # same brand and product: merged
    res = _ingest(env, "one", [(images.encode(base, "JPEG", 90), METAS[0]), (copy, sent_copy)])
    kept, merged = res["items"]
    assert merged["dedup_of"] == kept["id"], merged
    with pytest.raises(YanaError) as missing:
        review.split(env.r, env.chroma, blobs, env.s, "0" * 40, who="t:x")
    assert missing.value.status == 404

    dec = review.split(env.r, env.chroma, blobs, env.s, merged["hash_sha1"], who="t:abc")
    new_id = "label_" + merged["hash_sha1"][:16]
    assert (dec["action"], dec["label_id"], dec["from"], dec["who"]) == ("split", new_id, kept["id"], "t:abc")
    (meta,) = _meta(env, new_id)
    assert (meta["brand_name"], meta["region"], meta["hash_sha1"]) == (
        METAS[0]["brand_name"],
        "分割町",
        merged["hash_sha1"],
    )
    assert "生酛" in meta["label_features"]
    assert not env.r.hexists(phash_index.DUPS_KEY, merged["hash_sha1"])
    assert env.r.hget(ingest.LABEL_IMAGES_KEY, new_id), "the split label's image is served"
    # the same bytes again: the split label, not the one it was merged into
    again = _ingest(env, "again", [(copy, sent_copy)])
    assert again["items"][0]["dedup_of"] == new_id

    # merge the split label back by hand: out of search, recorded with its fields and image
    dec = review.merge(env.r, env.chroma, blobs, env.s, kept["id"], new_id, who="anonymous")
    assert (dec["action"], dec["label_id"], dec["duplicate"]) == ("merge", kept["id"], new_id)
    assert _meta(env, new_id) == []
    assert dec["repointed"] == [again["items"][0]["hash_sha1"]], "uploads merged into it now point to the kept one"
    # ... and split again: exactly what was sent comes back
    review.split(env.r, env.chroma, blobs, env.s, merged["hash_sha1"], who="anonymous")
    (meta,) = _meta(env, new_id)
    assert (meta["brand_name"], meta["region"]) == (METAS[0]["brand_name"], "分割町")
    assert [d["action"] for d in review.decisions(env.r)] == ["split", "merge", "split"]


def test_merge_refuses_unknown_and_identical_labels(env):
    blobs = LocalBlobStore(env.data_dir)
    res = _ingest(
        env,
        "two",
        [(images.encode(images.render_label(m, seed=400 + i), "JPEG", 90), m) for i, m in enumerate(METAS[1:3])],
    )
    a, b = (o["id"] for o in res["items"])
    with pytest.raises(YanaError) as same:
        review.merge(env.r, env.chroma, blobs, env.s, a, a, who="anonymous")
    assert same.value.status == 400
    with pytest.raises(YanaError) as unknown:
        review.merge(env.r, env.chroma, blobs, env.s, a, "label_0000000000000000", who="anonymous")
    assert unknown.value.status == 404
    review.merge(env.r, env.chroma, blobs, env.s, a, b, who="anonymous")
    assert _meta(env, b) == [] and len(_meta(env, a)) >= 1
    assert env.r.hget(phash_index.DUPS_KEY, res["items"][1]["hash_sha1"])
