"""The pHash near-duplicate index: exact recall against brute force, the Redis log and its Lua
check-and-insert (tail scan, self-recognition, removal), and a race between processes."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import uuid

import numpy as np
import pytest
import redis

from pipelines.neardup.index import MultiIndex, PHashIndex, _Synced, probe_radii


def _sha(x) -> str:
    return hashlib.sha1(str(x).encode()).hexdigest()


def _flip(code: int, n: int, rng) -> int:
    for b in rng.choice(64, n, replace=False):
        code ^= 1 << int(b)
    return code


@pytest.fixture()
def keys():
    tag = uuid.uuid4().hex[:8]
    return {
        "log_key": f"test:phash:{tag}:log",
        "sha1_key": f"test:phash:{tag}:sha1",
        "sig_key": f"test:phash:{tag}:sig",
    }


@pytest.mark.parametrize("threshold", [0, 3, 8, 10, 12])
def test_multi_index_recall_equals_brute_force(threshold):
    rng = np.random.default_rng(threshold)
    n = 20_000
    codes = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    mi = MultiIndex(threshold)
    mi.add_many(codes[: n // 2], np.arange(n // 2, dtype=np.uint64))
    mi.add_many(codes[n // 2 :], np.arange(n // 2, n, dtype=np.uint64))  # second half: the unsorted tail path
    found = 0
    for _ in range(300):
        base = int(codes[rng.integers(n)])
        q = _flip(base, int(rng.integers(0, threshold + 3)), rng)  # some inside, some just outside
        got = mi.search(q)
        d = np.bitwise_count(codes ^ np.uint64(q))
        expected = {(int(i), int(d[i])) for i in np.nonzero(d <= threshold)[0]}
        assert set(got) == expected
        assert [x[1] for x in got] == sorted(x[1] for x in got), "nearest first"
        found += len(got)
    assert found > 0


def test_probe_radii_follow_the_pigeonhole_bound():
    # with t = q*m + a, blocks 0..a get radius q, the others q-1: their sum + m - 1 >= t
    for t in range(0, 21):
        radii = probe_radii(t)
        assert sum(r + 1 for r in radii) == t + 1


def test_check_and_insert_dedups_and_recognises_itself(redis_client, keys):
    idx = PHashIndex(redis_client, 10, **keys)
    first = idx.check_and_insert("ffff0000ffff0000", _sha(1), "job:0", "images/a.jpg")
    assert first.status == "indexed" and first.label_id == f"label_{_sha(1)[:16]}"
    near = idx.check_and_insert("ffff0000ffff0007", _sha(2), "job:1")
    assert (near.status, near.label_id, near.distance) == ("dedup", first.label_id, 3)
    far = idx.check_and_insert("0123456789abcdef", _sha(3), "job:2")
    assert far.status == "indexed"
    # the same item again (a redelivered job): itself, not a duplicate of itself
    again = idx.check_and_insert("ffff0000ffff0000", _sha(1), "job:0")
    assert again.status == "self" and again.label_id == first.label_id
    # the same bytes from another upload: an exact duplicate
    other = idx.check_and_insert("ffff0000ffff0000", _sha(1), "job2:5")
    assert (other.status, other.distance) == ("dedup", 0)
    assert idx.lookup_sha1(_sha(1))["file_path"] == "images/a.jpg"
    assert idx.count() == 2


def test_lua_tail_scan_sees_inserts_the_process_has_not_synced(redis_client, keys):
    a = PHashIndex(redis_client, 8, **keys)
    b = PHashIndex(redis_client, 8, **keys)
    b.sync()
    a.check_and_insert("00000000000000ff", _sha("a"), "x:0")
    b.sync = lambda: 0  # b's copy is behind: only the script's scan of the log tail can see a's insert
    out = b.check_and_insert("00000000000000fe", _sha("b"), "x:1")
    assert (out.status, out.label_id, out.distance) == ("dedup", f"label_{_sha('a')[:16]}", 1)


class _Recorder:
    """A second stage that records what it was asked and answers from a fixed set of labels."""

    def __init__(self, same: set[str]):
        self.same, self.calls = same, []

    def __call__(self, candidates):
        self.calls.append(candidates)
        for label_id, distance, _entry in candidates:
            if label_id in self.same:
                return type("M", (), {"label_id": label_id, "distance": distance, "score": 0.5})()
        return None


def test_candidates_within_the_radius_go_to_the_verifier(redis_client, keys):
    idx = PHashIndex(redis_client, 4, radius=12, **keys)
    a = idx.check_and_insert("ffff0000ffff0000", _sha("a"), "x:0", entry="sig-a")
    rec = _Recorder(set())
    far = idx.check_and_insert("ffff0000ffff03ff", _sha("b"), "x:1", entry="sig-b", verify=rec)  # distance 10
    assert far.status == "indexed" and far.candidates == 1
    assert rec.calls == [[(a.label_id, 10, "sig-a")]], "beyond the threshold, within the radius: judged"
    rec = _Recorder({a.label_id})
    near = idx.check_and_insert("ffff0000ffff0001", _sha("c"), "x:2", verify=rec)
    assert (near.status, near.label_id, near.distance, near.score) == ("dedup", a.label_id, 1, 0.5)
    assert idx.remove(_sha("b")) and redis_client.hget(keys["sig_key"], _sha("b")[:16]) is None


def test_a_candidate_appended_after_the_callers_copy_is_judged_before_inserting(redis_client, keys):
    """The atomic step: b's copy is behind; the script finds a's record in the log tail and hands
    it to b's verifier instead of inserting; rejected, the next call inserts."""
    a = PHashIndex(redis_client, 4, radius=12, **keys)
    b = PHashIndex(redis_client, 4, radius=12, **keys)
    b.sync()
    first = a.check_and_insert("00000000000000ff", _sha("a"), "x:0", entry="sig-a")
    b._sync = lambda *_args, **_kw: _Synced()  # b reads nothing more of the log
    rec = _Recorder(set())
    out = b.check_and_insert("0000000000000fff", _sha("b"), "x:1", entry="sig-b", verify=rec)
    assert out.status == "indexed"
    assert rec.calls == [[(first.label_id, 4, "sig-a")]], "only the script saw it: judged, then inserted"
    rec = _Recorder({first.label_id})
    out = b.check_and_insert("00000000000000fe", _sha("c"), "x:2", verify=rec)
    assert (out.status, out.label_id) == ("dedup", first.label_id)


def test_one_round_trip_brings_the_log_tail_and_the_signatures_of_local_candidates(redis_client, keys):
    """b's copy holds a's label but not c's (appended by another process since): both are
    candidates; a's signature comes with the sync's round trip, c's is read for it."""
    a = PHashIndex(redis_client, 4, radius=12, **keys)
    b = PHashIndex(redis_client, 4, radius=12, **keys)
    la = a.check_and_insert("00000000000000ff", _sha("a"), "x:0", entry="sig-a")
    b.sync()
    lc = a.check_and_insert("000000000000ffff", _sha("c"), "x:1", entry="sig-c")
    direct: list[list[str]] = []
    hmget = b.r.hmget
    b.r.hmget = lambda key, fields: direct.append(list(fields)) or hmget(key, fields)
    rec = _Recorder(set())
    out = b.check_and_insert("0000000000000fff", _sha("b"), "x:2", entry="sig-b", verify=rec)
    assert out.status == "indexed"
    assert sorted(rec.calls[0]) == sorted([(la.label_id, 4, "sig-a"), (lc.label_id, 4, "sig-c")])
    assert direct == [[_sha("c")[:16]]], "only the candidate the sync brought is read on its own"


def test_a_sync_by_another_thread_after_the_candidates_does_not_hide_a_record(redis_client, keys):
    """Between b's candidate search and its insert, another process appends a near duplicate and
    another thread of b's process syncs it: the script must still scan from where b's candidates
    end, not from the shared offset the other thread moved."""
    a = PHashIndex(redis_client, 4, radius=12, **keys)
    b = PHashIndex(redis_client, 4, radius=12, **keys)
    b.sync()
    found = {}
    candidates = b._candidates

    def then_another_thread_syncs(*args, **kw):
        synced = candidates(*args, **kw)
        found["a"] = a.check_and_insert("00000000000000ff", _sha("a"), "x:0", entry="sig-a")
        b.sync()
        return synced

    b._candidates = then_another_thread_syncs
    rec = _Recorder(set())
    out = b.check_and_insert("0000000000000fff", _sha("b"), "x:1", entry="sig-b", verify=rec)
    assert out.status == "indexed"
    assert rec.calls == [[(found["a"].label_id, 4, "sig-a")]], "the script handed a's record to the verifier"


def test_removal_is_seen_by_other_processes(redis_client, keys):
    a = PHashIndex(redis_client, 10, **keys)
    b = PHashIndex(redis_client, 10, **keys)
    a.check_and_insert("aaaaaaaaaaaaaaaa", _sha("r"), "x:0")
    assert b.search("aaaaaaaaaaaaaaab")[0][1] == 1
    assert a.remove(_sha("r"))
    assert b.search("aaaaaaaaaaaaaaab") == []
    assert b.check_and_insert("aaaaaaaaaaaaaaab", _sha("s"), "x:1").status == "indexed"


def _racer(url, keys, codes, barrier, out):
    r = redis.Redis.from_url(url, decode_responses=True)
    idx = PHashIndex(r, 10, **keys)
    idx.sync()
    barrier.wait()
    res = []
    for code, sha in codes:
        o = idx.check_and_insert(code, sha, f"p:{sha[:6]}")
        res.append((sha, o.status, o.label_id, o.distance))
    out.put(res)


def test_concurrent_near_duplicates_index_exactly_one_per_group(redis_client, redis_url, keys):
    """Processes insert near-duplicates of the same 25 originals at the same moment: per group
    exactly one is indexed and every other one names it, with the true distance."""
    rng = np.random.default_rng(7)
    groups = []
    for g in range(25):
        base = int(rng.integers(0, 2**63)) | (g << 58)
        groups.append([_flip(base, int(rng.integers(0, 4)), rng) for _ in range(4)])
    n_proc = 4
    work = [[] for _ in range(n_proc)]
    truth = {}
    for g, members in enumerate(groups):
        for p, code in enumerate(members):  # each process gets one member of every group
            sha = _sha(f"{g}:{p}")
            truth[sha] = (g, code)
            work[p].append((f"{code:016x}", sha))
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(n_proc), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(redis_url, keys, work[p], barrier, out)) for p in range(n_proc)]
    for p in procs:
        p.start()
    results = [row for _ in procs for row in out.get(timeout=60)]
    for p in procs:
        p.join(10)
    codes_by_label = {f"label_{sha[:16]}": truth[sha][1] for sha in truth}
    # groups are far apart (distinct top bits), so a duplicate must point inside its own group
    for g in range(len(groups)):
        rows = [r for r in results if truth[r[0]][0] == g]
        indexed = [r for r in rows if r[1] == "indexed"]
        assert len(indexed) == 1, rows
        winner = indexed[0][2]
        for sha, status, label, dist in rows:
            if status == "dedup":
                assert label == winner
                assert dist == (truth[sha][1] ^ codes_by_label[winner]).bit_count()
    assert PHashIndex(redis_client, 10, **keys).count() == len(groups)
