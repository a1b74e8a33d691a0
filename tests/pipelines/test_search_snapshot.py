"""Snapshots of the in-memory search index (pipelines.search.snapshot): a process that maps one and
catches up from the change log answers exactly as one that loaded everything from Redis; a
snapshot that does not fit is skipped with a log line; a write is atomic, even when the writer is
killed half-way."""

from __future__ import annotations

import hashlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from pipelines.search import collections as vector_index
from pipelines.search import lexical
from pipelines.search import service as search_mod
from pipelines.search import snapshot as search_snapshot
from pipelines.search.index import LiveIndex
from pipelines.search.tokenizer import tokenize
from tests.pipelines.search_support import MODEL, build_corpus, new_chunk

ROOT = Path(__file__).resolve().parents[2]
QUERIES = ("獺祭 純米大吟醸", "辛口", "Otaru", "fruity", "北の誉", "スパークリング 日本酒")


@pytest.fixture(scope="module")
def corpus(redis_url, tmp_path_factory):
    c = build_corpus(redis_url, tmp_path_factory.mktemp("snapshot_chroma"), n=120, seed=5)
    yield c
    lexical.drop_collection(c.r, c.name)


def _expect(corpus, **override) -> search_snapshot.Expect:
    epoch, seq = lexical.position(corpus.r, corpus.name)
    args = {"epoch": epoch, "seq": seq, "model": MODEL, "dim": corpus.embeddings.shape[1], **override}
    return search_snapshot.Expect(**args)


def _from_redis(corpus) -> LiveIndex:
    idx = LiveIndex(corpus.name)
    idx.sync(corpus.r)
    return idx


def _mapped(corpus, root) -> LiveIndex:
    idx = search_snapshot.load(root, corpus.name, _expect(corpus))
    assert idx is not None
    return idx


def _rows(idx: LiveIndex) -> dict[str, dict]:
    """Everything a live row answers with, by chunk id (row numbers may differ between processes)."""
    q = np.asarray(search_mod._query_vector(MODEL, "辛口の日本酒"), dtype=np.float32)
    cos = idx.cosine(q)
    bm25 = {query: idx.bm25(tokenize(query)) for query in QUERIES}
    out = {}
    for id_, row in idx.row_of.items():
        assert idx.alive[row]
        out[id_] = {
            "hit": idx.hit(row),
            "text": idx.text(row),
            "ts": float(idx.ts[row]),
            "codes": {f: [v for v, c in idx.value_code[f].items() if c == idx.codes[f][row]] for f in idx.codes},
            "cos": round(float(cos[row]), 5),
            "bm25": {query: round(float(s[row]), 4) for query, s in bm25.items()},
        }
    return out


@contextmanager
def _serving(corpus, idx: LiveIndex):
    """search() of this process answering from idx."""
    saved = search_mod._indexes.pop(corpus.name, None)
    search_mod._indexes[corpus.name] = idx
    try:
        yield
    finally:
        search_mod._indexes.pop(corpus.name, None)
        if saved is not None:
            search_mod._indexes[corpus.name] = saved


def _answers(corpus, idx: LiveIndex) -> list:
    """The hits (id, text, score) of a set of searches. Scores compare to 1e-5: BM25's average
    length is a float sum, and the sums of two processes that applied the same changes in another
    order differ in the last bits."""
    cases = [(q, None, "hybrid") for q in QUERIES]
    region = corpus.labels[0].region
    cases += [("純米", {"region": region}, "hybrid"), ("dry", {"category": "sake"}, "dense"), (None, None, "hybrid")]
    cases += [("辛口", None, "lexical"), ("試験", {"region": "試験町"}, "hybrid")]
    with _serving(corpus, idx):
        out = []
        for q, flt, mode in cases:
            res = corpus.search(q, flt, k=10, mode=mode)
            hits = [(h["id"], pytest.approx(h["score"], abs=1e-5), h["text"]) for h in res["hits"]]
            out.append((hits, res["next_page"], res["not_found"]))
        return out


def _files(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def test_a_mapped_snapshot_answers_as_a_load_from_redis(corpus, tmp_path):
    written = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    assert written is not None and written.parent == tmp_path / corpus.name
    mapped = _mapped(corpus, tmp_path)
    assert mapped.seq == mapped.snapshot_seq == lexical.current_seq(corpus.r, corpus.name)
    assert mapped.sync(corpus.r) == 0  # nothing changed since: no chunk read from Redis
    fresh = _from_redis(corpus)
    assert _rows(mapped) == _rows(fresh)
    assert _answers(corpus, mapped) == _answers(corpus, fresh)


def test_changes_after_the_snapshot_are_caught_up_and_the_files_stay_untouched(corpus, tmp_path):
    a, b, c = (new_chunk(corpus, f"label_snap{i}00000000", f"写像試験{i}", region="写像町") for i in range(3))
    vector_index.upsert_chunks(corpus.col, [a, b, c], r=corpus.r)
    try:
        folder = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
        assert folder is not None
        before = _files(folder)
        other = _mapped(corpus, tmp_path)  # a second process mapping the same snapshot
        snap_rows = _rows(other)

        b2 = new_chunk(corpus, b["id"], "写像試験改", region="写像町")  # an update
        d = new_chunk(corpus, "label_snap300000000", "写像試験3", region="写像町")  # an add
        vector_index.upsert_chunks(corpus.col, [b2, d], r=corpus.r)
        vector_index.delete_chunks(corpus.col, [c["id"]], r=corpus.r)  # a delete

        mapped = _mapped(corpus, tmp_path)
        assert mapped.sync(corpus.r) == 3  # only the changes after the snapshot
        fresh = _from_redis(corpus)
        assert _rows(mapped) == _rows(fresh)
        assert _answers(corpus, mapped) == _answers(corpus, fresh)
        with _serving(corpus, mapped):
            hits = corpus.search("写像試験", {"region": "写像町"}, k=10)["hits"]
        assert sorted(h["id"] for h in hits) == sorted([a["id"], b["id"], d["id"]])
        assert next(h for h in hits if h["id"] == b["id"])["brand_name"] == "写像試験改"

        assert _files(folder) == before  # appends and deletes wrote private pages, not the files
        assert _rows(other) == snap_rows  # ... so the other process still sees the snapshot as written
    finally:
        vector_index.delete_chunks(corpus.col, [a["id"], b["id"], c["id"], "label_snap300000000"], r=corpus.r)


def test_a_mapped_index_compacts_and_grows_past_its_spare_rows(corpus, tmp_path):
    search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    mapped = _mapped(corpus, tmp_path)
    cap = mapped.cap
    stored = [c["id"] for c in corpus.chunks[:60]]
    from tests.pipelines.test_search import _stored_docs

    docs = _stored_docs(corpus, stored)
    while mapped.n <= cap:  # re-apply stored chunks until the mapped arrays must grow
        mapped.apply(stored, docs)
    assert mapped.cap > cap and mapped.dead > 0
    mapped._compact()
    assert mapped.dead == 0
    assert _rows(mapped) == _rows(_from_redis(corpus))


def test_an_older_snapshot_still_catches_up(corpus, tmp_path):
    old = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    chunk = new_chunk(corpus, "label_snapold0000001", "旧写像")
    vector_index.upsert_chunks(corpus.col, [chunk], r=corpus.r)
    try:
        new = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
        assert old is not None and new is not None and new.name > old.name
        assert [p for _, p in search_snapshot.snapshots(tmp_path / corpus.name)] == [new, old]
        import shutil

        shutil.rmtree(new)
        mapped = _mapped(corpus, tmp_path)
        assert "label_snapold0000001" not in mapped.row_of
        mapped.sync(corpus.r)
        assert _rows(mapped) == _rows(_from_redis(corpus))
    finally:
        vector_index.delete_chunks(corpus.col, ["label_snapold0000001"], r=corpus.r)


@pytest.mark.parametrize(
    "override, reason",
    [
        ({"epoch": "another"}, "another epoch"),
        ({"epoch": None}, "another epoch"),
        ({"model": "other/model"}, "model"),
        ({"dim": 768}, "dimension"),
        ({"seq": 1}, "past the change counter"),
    ],
)
def test_a_snapshot_that_does_not_match_is_skipped_with_a_log_line(corpus, tmp_path, caplog, override, reason):
    search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    with caplog.at_level(logging.INFO, logger="yana.search_snapshot"):
        assert search_snapshot.load(tmp_path, corpus.name, _expect(corpus, **override)) is None
    assert any(reason in rec.getMessage() for rec in caplog.records), caplog.text
    assert search_snapshot.load(tmp_path, corpus.name, _expect(corpus)) is not None


def test_a_snapshot_of_another_tokenizer_version_is_skipped(corpus, tmp_path, monkeypatch, caplog):
    search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    monkeypatch.setattr(search_snapshot, "TOKENIZER_VERSION", "a-later-version")
    with caplog.at_level(logging.INFO, logger="yana.search_snapshot"):
        assert search_snapshot.load(tmp_path, corpus.name, _expect(corpus)) is None
    assert "tokenizer" in caplog.text


def _truncate(folder: Path) -> None:
    path = folder / "vecs.npy"
    os.truncate(path, path.stat().st_size // 2)


def _garble_ids(folder: Path) -> None:
    (folder / "ids.json").write_bytes(b'["label_x"]')


def _drop_postings(folder: Path) -> None:
    (folder / "cols.rows.npy").unlink()


def _garble_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_bytes(b"{not json")


def _shrink_array(folder: Path) -> None:
    np.save(folder / "alive.npy", np.ones(3, dtype=bool))


@pytest.mark.parametrize("damage", [_truncate, _garble_ids, _drop_postings, _garble_manifest, _shrink_array])
def test_a_damaged_snapshot_is_skipped_for_the_previous_one_or_redis(corpus, tmp_path, caplog, damage):
    good = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    chunk = new_chunk(corpus, "label_snapbad0000001", "壊写像")
    vector_index.upsert_chunks(corpus.col, [chunk], r=corpus.r)
    try:
        bad = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
        assert good is not None and bad is not None
        damage(bad)
        with caplog.at_level(logging.INFO, logger="yana.search_snapshot"):
            mapped = _mapped(corpus, tmp_path)
        assert "unreadable" in caplog.text and bad.name in caplog.text
        assert mapped.snapshot_seq < lexical.current_seq(corpus.r, corpus.name)  # the older, good one
        mapped.sync(corpus.r)
        assert _rows(mapped) == _rows(_from_redis(corpus))
        damage(good)
        assert search_snapshot.load(tmp_path, corpus.name, _expect(corpus)) is None  # none left: Redis
    finally:
        vector_index.delete_chunks(corpus.col, ["label_snapbad0000001"], r=corpus.r)


def test_a_writer_killed_half_way_leaves_no_snapshot_a_reader_would_open(corpus, tmp_path, redis_url):
    first = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    chunk = new_chunk(corpus, "label_snapkill000001", "中断写像")
    vector_index.upsert_chunks(corpus.col, [chunk], r=corpus.r)
    # another process writes a snapshot and stalls (a slow disk) after its arrays, before its
    # manifest; it is killed there
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import redis
        from pipelines.search import snapshot as search_snapshot
        from pipelines.search.index import LiveIndex
        idx = LiveIndex({corpus.name!r})
        idx.sync(redis.Redis.from_url({redis_url!r}, decode_responses=True))
        save_json = search_snapshot._save_json
        def stalling(folder, name, obj):
            if name == "manifest.json":
                print("stalled", flush=True)
                time.sleep(120)
            return save_json(folder, name, obj)
        search_snapshot._save_json = stalling
        search_snapshot.write(idx, {str(tmp_path)!r}, {MODEL!r})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "stalled"
        folder = tmp_path / corpus.name
        partial = list(folder.glob(".tmp-*"))
        assert len(partial) == 1 and (partial[0] / "vecs.npy").exists()
        # while it holds the host's write lock, no other writer starts
        assert search_snapshot.write(_from_redis(corpus), tmp_path, MODEL) is None
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert [p for _, p in search_snapshot.snapshots(folder)] == [first]
        mapped = _mapped(corpus, tmp_path)  # the complete, older one
        assert "label_snapkill000001" not in mapped.row_of
        mapped.sync(corpus.r)
        assert "label_snapkill000001" in mapped.row_of
        newer = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)  # the lock died with it
        assert newer is not None and not list(folder.glob(".tmp-*"))  # the partial one is cleaned up
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        vector_index.delete_chunks(corpus.col, ["label_snapkill000001"], r=corpus.r)


@pytest.fixture()
def snapshot_settings(monkeypatch, tmp_path):
    from yana.settings import get_settings

    monkeypatch.setenv("SEARCH_SNAPSHOT_DIR", str(tmp_path / "snaps"))
    monkeypatch.setenv("SEARCH_SNAPSHOT_MIN_CHANGES", "50")
    monkeypatch.setenv("SEARCH_SNAPSHOT_INTERVAL_S", "0")
    get_settings.cache_clear()
    yield tmp_path / "snaps"
    get_settings.cache_clear()


def test_search_writes_a_snapshot_and_a_new_process_maps_it(corpus, snapshot_settings):
    saved = search_mod._indexes.pop(corpus.name, None)
    try:
        corpus.search("辛口", k=3)  # loads from Redis (no snapshot yet), then writes one in the background
        idx = search_mod._indexes[corpus.name]
        for t in [t for t in threading.enumerate() if t.name == "search-snapshot"]:
            t.join(timeout=60)
        snaps = search_snapshot.snapshots(snapshot_settings / corpus.name)
        assert [seq for seq, _ in snaps] == [idx.seq] and idx.snapshot_seq == idx.seq
        want = corpus.search("純米 辛口", k=10)

        search_mod._indexes.pop(corpus.name)  # a new process: maps the snapshot instead of reading Redis
        mapped = search_mod.live_index(corpus.name, corpus.r, corpus.chroma)
        assert mapped is not idx and mapped.n == idx.n and mapped.snapshot_seq == idx.seq
        got = corpus.search("純米 辛口", k=10)
        assert [(h["id"], h["score"]) for h in got["hits"]] == [(h["id"], h["score"]) for h in want["hits"]]
        assert search_snapshot.maybe_write(mapped, snapshot_settings, MODEL, min_changes=50, min_interval_s=0) is None
    finally:
        search_mod._indexes.pop(corpus.name, None)
        if saved is not None:
            search_mod._indexes[corpus.name] = saved


def test_a_recreated_index_is_reloaded_not_mixed(redis_client, tmp_path):
    """The change log restarts when an index is dropped and written again (or Redis loses its
    data): a process that followed the old log reloads, and the old log's snapshot is not used."""
    import uuid

    name = f"test_epoch_{uuid.uuid4().hex[:8]}"
    r = redis_client
    old = [{"id": f"old{i}", "text": f"古い酒{i}", "metadata": {"id": f"old{i}"}} for i in range(5)]
    lexical.index_chunks(r, name, old)
    idx = LiveIndex(name)
    idx.sync(r)
    epoch = idx.epoch
    assert epoch and search_snapshot.write(idx, tmp_path, "m") is not None
    lexical.drop_collection(r, name)
    new = [{"id": f"new{i}", "text": f"新しい酒{i}", "metadata": {"id": f"new{i}"}} for i in range(8)]
    lexical.index_chunks(r, name, new)  # the counter passes the old position, under a new epoch
    try:
        now_epoch, seq = lexical.position(r, name)
        assert now_epoch != epoch and seq > 5
        idx.sync(r)
        assert sorted(idx.row_of) == sorted(c["id"] for c in new) and idx.n_alive == 8
        assert search_snapshot.load(tmp_path, name, search_snapshot.Expect(now_epoch, seq, "m", None)) is None
    finally:
        lexical.drop_collection(r, name)


def test_a_redis_restored_from_an_older_backup_is_not_mixed_with_a_newer_snapshot(redis_client, tmp_path):
    """Restored from a backup older than the snapshot and then written past the snapshot's
    position, the log has the same epoch and a larger counter, yet lacks changes the snapshot
    holds: the first sync sees that the last change it applied is gone, and loads from Redis."""
    import uuid

    from pipelines.search.index import raw_client

    name = f"test_restore_{uuid.uuid4().hex[:8]}"
    r, raw = redis_client, raw_client(redis_client)

    def chunk(id_):
        return {"id": id_, "text": f"復元試験 {id_}", "metadata": {"id": id_, "region": "復元町"}}

    lexical.index_chunks(r, name, [chunk("a"), chunk("b")])
    backup = {key: raw.dump(key) for key in raw.scan_iter(match=lexical.prefix(name).encode() + b"*")}
    lexical.index_chunks(r, name, [chunk("x")])  # after the backup
    running = LiveIndex(name)
    running.sync(r)
    assert search_snapshot.write(running, tmp_path, "m") is not None
    try:
        lexical.drop_collection(r, name)  # restore the backup
        for key, value in backup.items():
            raw.restore(key, 0, value)
        lexical.index_chunks(r, name, [chunk("y"), chunk("z")])  # and write past the snapshot's position
        epoch, seq = lexical.position(r, name)
        assert epoch == running.epoch and seq > running.seq
        mapped = search_snapshot.load(tmp_path, name, search_snapshot.Expect(epoch, seq, "m", None))
        assert mapped is not None and "x" in mapped.row_of  # the snapshot itself fits the stamp ...
        for idx in (mapped, running):
            idx.sync(r)  # ... but its last change is not in the log: reloaded from Redis
            assert sorted(idx.row_of) == ["a", "b", "y", "z"]
    finally:
        lexical.drop_collection(r, name)


def _resident_kib(path: Path) -> int:
    """Kilobytes of this process's mappings of `path` that are in its page tables (Rss in smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
                inside = len(head) >= 6 and head[-1] == str(path)
            elif inside and head and head[0] == "Rss:":
                total += int(head[1])
    return total


def test_pretouch_maps_the_pages_queries_read_and_changes_no_answer(corpus, tmp_path):
    snap = search_snapshot.write(_from_redis(corpus), tmp_path, MODEL)
    assert snap is not None
    idx = search_snapshot.load(tmp_path, corpus.name, _expect(corpus), touch=False)
    assert idx is not None
    vecs = snap / "vecs.npy"
    size_kib = vecs.stat().st_size // 1024
    assert size_kib > 256  # spare rows included: more pages than one fault maps around itself
    before = _resident_kib(vecs)
    search_snapshot.pretouch(idx).join(30)
    after = _resident_kib(vecs)
    assert before < size_kib / 2 and after >= size_kib - 8, (before, after, size_kib)
    assert _rows(idx) == _rows(_from_redis(corpus))
