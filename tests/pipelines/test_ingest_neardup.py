"""The two-stage near-duplicate check in the ingest pipeline (real Redis and Chroma): a product
line printed from shared designs keeps every label, crops / rotations / phone photos are caught,
a near duplicate never crosses category, and a match at the edge of the pHash threshold is
decided by the verifier, not by the distance."""

from __future__ import annotations

import random
import uuid

import pytest

from pipelines.ingest import pipeline as ingest
from pipelines.neardup import decision as neardup
from pipelines.neardup import hashing, verifier
from pipelines.neardup import index as phash_index
from pipelines.neardup.index import PHashIndex
from pipelines.search import collections as vector_index
from tests.pipelines.ingest_support import FakeJob, make_env
from tools.datagen import images
from tools.datagen.catalog import generate_labels

SIZE = (240, 360)


def _distinct_brands(n: int, seed: int) -> list[dict]:
    out, seen = [], set()
    for lab in generate_labels(4 * n, seed):
        f = lab.fields()
        if f["brand_name"] not in seen:
            seen.add(f["brand_name"])
            out.append(f)
    assert len(out) >= n
    return out[:n]


def _stage(env, job_id: str, i: int, data: bytes) -> dict:
    p = env.data_dir / "incoming" / job_id / f"{i}.bin"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return {"kind": "stored", "path": f"incoming/{job_id}/{i}.bin"}


def _ingest(env, job_id: str, rows: list[tuple[bytes, dict]]) -> dict:
    items = [
        {"index": i, "name": f"f{i}", "source": _stage(env, job_id, i, data), "fields": {**fields, "text": None}}
        for i, (data, fields) in enumerate(rows)
    ]
    return ingest.run_ingest(FakeJob(job_id), items=items, r=env.r, chroma=env.chroma, s=env.s)


@pytest.fixture()
def env(redis_url, tmp_path):
    return make_env(redis_url, tmp_path, phash_threshold=8, phash_candidate_radius=12, ingest_batch_size=16)


def test_sixty_labels_from_three_designs_lose_none(env):
    """A brewery's product line: 3 designs, 20 labels each, only brand and product text differ;
    each sent with its own brand_name. pHash alone merged 47 of 60."""
    metas = _distinct_brands(60, seed=21)
    rows, hashes = [], []
    for d in range(3):
        for img in images.template_labels(metas[d * 20 : (d + 1) * 20], design_seed=101 + d, size=SIZE):
            rows.append((images.encode(img, "JPEG", 90), metas[len(rows)]))
            hashes.append(hashing.phash_hex(img))
    close = sum(hashing.hamming(a, b) <= 8 for i, a in enumerate(hashes) for b in hashes[i + 1 :])
    assert close > 100, "the designs really do collide in pHash (else this test proves nothing)"

    res = _ingest(env, "line", rows)
    assert (res["indexed"], res["dedup"], res["failed"]) == (60, 0, 0), [o for o in res["items"] if o["dedup"]]
    col, _ = vector_index.active_collection(env.chroma, env.r)
    ids = {m["id"] for m in col.get(include=["metadatas"])["metadatas"]}
    assert ids == {o["id"] for o in res["items"]}
    assert {m["brand_name"] for m in col.get(include=["metadatas"])["metadatas"]} == {m["brand_name"] for m in metas}


@pytest.mark.parametrize("with_fields", [True, False], ids=["fields", "images-only"])
def test_crops_rotations_and_phone_photos_are_caught(env, with_fields):
    metas = _distinct_brands(4, seed=33)
    originals = [images.render_label(m, size=SIZE, seed=700 + i) for i, m in enumerate(metas)]
    sent = [m if with_fields else {"category": m["category"]} for m in metas]
    first = _ingest(env, "orig", [(images.encode(im, "JPEG", 90), f) for im, f in zip(originals, sent, strict=True)])
    assert first["indexed"] == 4
    # Images only, the verifier is set for precision (labels of one design differ only in their
    # text): re-encodes, resizes and exposure changes are caught, geometric edits mostly (about
    # 0.9, bench/neardup_eval.py). With the fields, every kind is.
    kinds = ("crop", "rotate", "perspective", "resize") if with_fields else ("jpeg", "resize", "brightness", "contrast")
    rows, truth = [], []
    for i, im in enumerate(originals):
        rng = random.Random(i)
        for kind in kinds:
            v = images.variant(im, kind, rng)
            rows.append((images.encode(v.image, "JPEG", 88), sent[i]))
            truth.append((first["items"][i], kind, v.params))
    res = _ingest(env, "variants", rows)
    for out, (orig, kind, params) in zip(res["items"], truth, strict=True):
        assert out["dedup"] and out["dedup_of"] == orig["id"], (kind, params, out)
        assert out["distance"] == hashing.hamming(out["phash"], orig["phash"])
        assert out["verifier_score"] is not None
        limit = neardup.FIELDS_AGREE_MAX_SCORE if with_fields else 1.0
        assert 0 <= out["verifier_score"] <= limit
    assert env.r.hlen(phash_index.DUPS_KEY) == len(rows), "every merge is listed for the report"


def test_a_near_duplicate_never_crosses_category(env):
    meta = _distinct_brands(1, seed=5)[0]
    img = images.render_label(meta, size=SIZE, seed=9)
    sake = {**meta, "category": "sake"}
    juice = {**meta, "category": "juice"}
    res = _ingest(env, "cat", [(images.encode(img, "JPEG", 90), sake), (images.encode(img, "JPEG", 70), juice)])
    assert hashing.hamming(res["items"][0]["phash"], res["items"][1]["phash"]) <= 2
    assert (res["indexed"], res["dedup"]) == (2, 0), res["items"]


@pytest.fixture()
def keys():
    tag = uuid.uuid4().hex[:8]
    return {"log_key": f"test:nd:{tag}:log", "sha1_key": f"test:nd:{tag}:sha1", "sig_key": f"test:nd:{tag}:sig"}


def _edge_pair(distance: int):
    """Two labels of one design (different text) at exactly `distance` bits of pHash."""
    metas = _distinct_brands(40, seed=8)
    for d in range(20):
        imgs = images.template_labels(metas[d * 2 : d * 2 + 2], design_seed=300 + d, size=SIZE)
        if hashing.hamming(hashing.phash_hex(imgs[0]), hashing.phash_hex(imgs[1])) == distance:
            return metas[d * 2 : d * 2 + 2], imgs
    for a in range(40):  # no adjacent pair: any pair of one design
        for b in range(a + 1, 40):
            imgs = images.template_labels([metas[a], metas[b]], design_seed=400 + a, size=SIZE)
            if hashing.hamming(hashing.phash_hex(imgs[0]), hashing.phash_hex(imgs[1])) == distance:
                return [metas[a], metas[b]], imgs
    raise AssertionError(f"no pair at distance {distance}")


def test_a_match_at_the_edge_of_the_threshold_goes_through_the_verifier(redis_client, keys):
    """At distance 8 (the old threshold: merged by pHash alone) a different label from the same
    design is judged by the verifier, images only, and kept; a true crop further away than the
    threshold is still caught."""
    idx = PHashIndex(redis_client, 8, radius=12, **keys)
    (ma, mb), (a, b) = _edge_pair(8)
    only_category = {"category": ma["category"]}
    entry, digest, verify = neardup.verifier_for(a, only_category, 8)
    sha_a = hashing.sha1_hex(images.encode(a))
    assert idx.check_and_insert(hashing.phash_hex(a), sha_a, "t:0", entry=entry, verify=verify).status == "indexed"

    entry, digest, verify = neardup.verifier_for(b, {"category": mb["category"]}, 8)
    out = idx.check_and_insert(
        hashing.phash_hex(b), hashing.sha1_hex(images.encode(b)), "t:1", entry=entry, verify=verify
    )
    assert out.status == "indexed" and out.candidates == 1
    (judged,) = verify.judged
    assert judged["distance"] == 8 and judged["reason"] == "verifier" and judged["score"] > 1.0

    # with the fields the same pair is rejected before any image comparison
    _e, _d, by_fields = neardup.verifier_for(b, mb, 8)
    assert by_fields([(f"label_{sha_a[:16]}", 8, neardup.make_entry(verifier.signature(a), ma))]) is None
    assert by_fields.judged[0]["reason"] == "different brand_name"

    # a true duplicate beyond the old threshold: found within the radius, confirmed by the verifier
    for seed in range(50):
        v = images.variant(a, "crop", random.Random(seed)).image
        d = hashing.hamming(hashing.phash_hex(v), hashing.phash_hex(a))
        if 8 < d <= 12:
            break
    else:
        raise AssertionError("no crop lands between the threshold and the radius")
    entry, digest, verify = neardup.verifier_for(v, only_category, 8)
    out = idx.check_and_insert(
        hashing.phash_hex(v), hashing.sha1_hex(images.encode(v)), "t:2", entry=entry, verify=verify
    )
    assert (out.status, out.label_id, out.distance) == ("dedup", f"label_{sha_a[:16]}", d)
    assert out.score is not None and out.score <= 1.0
