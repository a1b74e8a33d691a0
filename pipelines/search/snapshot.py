"""On-disk snapshots of a search process's in-memory index (pipelines.search.index.LiveIndex).

Why: a new API process used to load every chunk from Redis before it could answer (~5.5 s at 100k
chunks, 408 until then). It now maps the newest snapshot from its host's data folder (well under a
second at 100k: bench/search_scale.py) and then catches up with the ordinary `sync()`, which reads
only the changes recorded after the snapshot's position in the change log (pipelines.search.lexical).

Layout: <SEARCH_SNAPSHOT_DIR or DATA_DIR/search-snapshots>/<collection>/snap-<seq>-<token>/
  manifest.json      the stamp (collection, epoch, seq, tokenizer version, model, dimension), the
                     index's scalars and sizes, sha256 of the JSON files; written last
  <name>.npy         per-row arrays (alive, has_vec, doclen, ts, one code array per filter field,
                     vecs), postings row -> terms (post.*) and term -> rows (cols.*), df
  ids.json, terms.json, values.json   chunk id per row, term per id, filter value -> code (+ romaji)
  meta.bin + meta.off.npy, text.bin + text.off.npy   each row's stored metadata JSON / text, packed

Atomic: a writer fills a `.tmp-*` folder beside the snapshots, fsyncs it, and renames it to its
`snap-*` name; readers open only `snap-*` folders, so none ever sees a partial one. The API
processes of a host share the folder: one writes at a time (flock on `.write.lock`), the newest
KEEP snapshots stay (a process still mapping an older one keeps its files open until it exits).

Mapping: np.load(mmap_mode=...). The postings are mapped read-only (never written in place). The
per-row arrays and the vectors are mapped copy-on-write ('c') and carry spare rows past n (zeros
in a sparse file: no disk), so appending or deleting a chunk writes a few private pages rather
than copying a matrix; growing past the spare copies, as LiveIndex._grow always did. Pages no
process writes stay shared between every process that maps the same snapshot.

Used only when it matches (else logged and skipped, and the process loads from Redis): the same
collection and epoch (a dropped and re-created index, or a Redis that lost its data, has a new
one), a position not past the change counter (a Redis rolled back to an older dump), the current
tokenizer version, the collection's model and dimension, and files that read back with the sizes
the manifest states. The change log keeps every id's last change (tombstones included) and is
never trimmed, so a snapshot of any age can catch up; an old one just costs a longer catch-up.
Not detected: bytes flipped inside a large array (checking them would read the whole file).

Pre-touched: a mapped page costs a page fault the first time the process reads it, and at 1M rows
the first query of each region used to pay ~40 MB of them (~120 ms). Once mapped, a helper thread
asks the kernel to read the arrays queries use ahead (madvise WILLNEED) and then reads one byte per
page of them (filter codes, per-row arrays, term -> rows postings, vectors), so a few seconds
after a start every query finds its pages mapped (`pretouch`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import mmap
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import compress
from pathlib import Path
from typing import Literal

import numpy as np
import orjson

from pipelines.search.index import CODE_FIELDS, Blobs, LiveIndex, _Block, _Columns, _concat_blocks, _csc, _TermIds
from pipelines.search.tokenizer import TOKENIZER_VERSION

log = logging.getLogger("yana.search_snapshot")

FORMAT = 1
KEEP = 2
_LOCK = ".write.lock"
_NAME = re.compile(r"^snap-(\d{12})-[0-9a-f]+$")
_SAFE_COLLECTION = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_ROW_ARRAYS = ("alive", "has_vec", "doclen", "ts")
_JSON_FILES = ("ids.json", "terms.json", "values.json")


@dataclass(frozen=True)
class Expect:
    """What a snapshot must match to be used: the store's state now, the collection's model."""

    epoch: str | None
    seq: int
    model: str
    dim: int | None


def collection_dir(root: Path, collection: str) -> Path:
    if not _SAFE_COLLECTION.match(collection) or collection.startswith("."):
        raise ValueError(f"collection name {collection!r} cannot name a folder")
    return Path(root) / collection


def snapshots(folder: Path) -> list[tuple[int, Path]]:
    """(seq, path) of the complete snapshots in a collection's folder, newest first."""
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return []
    found = [(int(m.group(1)), p) for p in entries if (m := _NAME.match(p.name))]
    return sorted(found, reverse=True)


# ------------------------------------------------------------------ writing
@dataclass
class _View:
    """A consistent copy of what a snapshot holds, taken under the index lock in milliseconds:
    arrays whose rows [0, n) never change in place are referenced, the others copied."""

    collection: str
    seq: int
    epoch: str
    last_id: str | None
    n: int
    dim: int | None
    n_alive: int
    clustered: int
    total_len: float
    dead: int
    alive: np.ndarray
    has_vec: np.ndarray
    doclen: np.ndarray
    ts: np.ndarray
    codes: dict[str, np.ndarray]
    vecs: np.ndarray
    df: np.ndarray
    blocks: list[_Block]
    base_csc: _Columns | None
    ids: list[str]
    terms: list[str]
    value_code: dict[str, dict[str, int]]
    value_romaji: dict[str, dict[str, list[int]]]
    metas: tuple
    texts: tuple


def _freeze(idx: LiveIndex) -> _View | None:
    with idx.lock:
        n = idx.n
        if not n or not idx.epoch:
            return None
        return _View(
            collection=idx.collection,
            seq=idx.seq,
            epoch=idx.epoch,
            last_id=idx.last_id,
            n=n,
            dim=idx.dim,
            n_alive=idx.n_alive,
            clustered=min(idx.clustered, idx.base.rows),
            total_len=idx.total_len,
            dead=idx.dead,
            alive=idx.alive[:n].copy(),  # deletes write it in place
            has_vec=idx.has_vec[:n].copy(),
            doclen=idx.doclen,  # rows < n are written once, when appended
            ts=idx.ts,
            codes=dict(idx.codes),
            vecs=idx.vecs,
            df=idx.df[: len(idx.term_id)].copy(),
            blocks=[idx.base, *idx.delta],  # blocks are replaced, never changed
            base_csc=idx.base_csc if not idx.delta else None,
            ids=list(idx.ids),
            terms=list(idx.term_id),  # insertion order is id order
            value_code={f: dict(c) for f, c in idx.value_code.items()},
            value_romaji={f: {rom: sorted(cs) for rom, cs in m.items()} for f, m in idx.value_romaji.items()},
            metas=(idx.metas.buf, idx.metas.off, idx.metas.frozen, list(idx.metas.tail)),
            texts=(idx.texts.buf, idx.texts.off, idx.texts.frozen, list(idx.texts.tail)),
        )


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save(path: Path, a: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.lib.format.write_array(f, np.ascontiguousarray(a), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def _save_rows(path: Path, a: np.ndarray, n: int, cap: int, fill=0) -> None:
    """Rows [0, n) of a, in a file of cap rows: the spare rows are a hole (zeros) or `fill`."""
    m = np.lib.format.open_memmap(path, mode="w+", dtype=a.dtype, shape=(cap, *a.shape[1:]))
    m[:n] = a[:n]
    if fill:
        m[n:] = fill
    m.flush()
    del m
    _fsync_file(path)


def _save_blobs(folder: Path, name: str, packed: tuple, n: int) -> None:
    buf, off, frozen, tail = packed
    if frozen + len(tail) != n:
        raise ValueError(f"{name}: {frozen + len(tail)} rows, the index has {n}")
    with open(folder / f"{name}.bin", "wb") as f:
        end = int(off[frozen])
        if end:
            f.write(memoryview(buf)[:end])
        f.writelines(tail)
        f.flush()
        os.fsync(f.fileno())
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[: frozen + 1] = off[: frozen + 1]
    np.cumsum(np.fromiter(map(len, tail), dtype=np.int64, count=len(tail)), out=offsets[frozen + 1 :])
    offsets[frozen + 1 :] += offsets[frozen]
    _save(folder / f"{name}.off.npy", offsets)


def _save_json(folder: Path, name: str, obj) -> str:
    data = orjson.dumps(obj)
    with open(folder / name, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return hashlib.sha256(data).hexdigest()


def _write_files(folder: Path, v: _View, model: str) -> None:
    n = v.n
    cap = n + max(1024, n // 8)  # spare rows: appends write private pages instead of copying
    for name in _ROW_ARRAYS:
        _save_rows(folder / f"{name}.npy", getattr(v, name), n, cap)
    for f in CODE_FIELDS:
        _save_rows(folder / f"code.{f}.npy", v.codes[f], n, cap, fill=-1)
    if v.dim is not None:
        _save_rows(folder / "vecs.npy", v.vecs, n, cap)
    post = _concat_blocks(v.blocks, 0)
    cols = v.base_csc
    if cols is None or cols.n_terms != max(1, len(v.terms)):
        cols = _csc(post, len(v.terms))
    for name, a in (
        ("post.indptr", post.indptr),
        ("post.tids", post.tids),
        ("post.tfs", post.tfs),
        ("cols.indptr", cols.indptr),
        ("cols.rows", cols.rows),
        ("cols.tfs", cols.tfs),
        ("df", v.df),
    ):
        _save(folder / f"{name}.npy", a)
    _save_blobs(folder, "meta", v.metas, n)
    _save_blobs(folder, "text", v.texts, n)
    sums = {
        "ids.json": _save_json(folder, "ids.json", v.ids),
        "terms.json": _save_json(folder, "terms.json", v.terms),
        "values.json": _save_json(folder, "values.json", {"code": v.value_code, "romaji": v.value_romaji}),
    }
    manifest = {
        "format": FORMAT,
        "collection": v.collection,
        "epoch": v.epoch,
        "seq": v.seq,
        "last_id": v.last_id,
        "tokenizer": TOKENIZER_VERSION,
        "model": model,
        "dim": v.dim,
        "n": n,
        "cap": cap,
        "n_terms": len(v.terms),
        "nnz": int(post.tids.shape[0]),
        "n_alive": v.n_alive,
        "clustered": v.clustered,
        "total_len": v.total_len,
        "dead": v.dead,
        "sha256": sums,
        "written_at": time.time(),
    }
    _save_json(folder, "manifest.json", manifest)  # last: a folder with a manifest is complete
    _fsync_file(folder)


@contextlib.contextmanager
def _write_lock(folder: Path) -> Iterator[bool]:
    """The host-wide right to write this collection's snapshots; False when another process (or
    thread) is writing one now."""
    fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing drops the lock


def _prune(folder: Path, keep: int) -> None:
    """Under the write lock: drop all but the newest `keep` snapshots, and any `.tmp-*` folder
    (a writer that died; no writer is running, we hold the lock)."""
    for _, path in snapshots(folder)[keep:]:
        shutil.rmtree(path, ignore_errors=True)
    for path in folder.glob(".tmp-*"):
        shutil.rmtree(path, ignore_errors=True)


def write(idx: LiveIndex, root: Path, model: str, keep: int = KEEP) -> Path | None:
    """Write a snapshot of idx now; returns its folder, or None when there was nothing to write
    (empty index, another writer busy, a snapshot at least as new already there)."""
    folder = collection_dir(root, idx.collection)
    folder.mkdir(parents=True, exist_ok=True)
    with _write_lock(folder) as mine:
        if not mine:
            return None
        newest = snapshots(folder)
        view = _freeze(idx)
        if view is None:
            return None
        if newest and newest[0][0] >= view.seq:
            with idx.lock:
                idx.snapshot_seq = max(idx.snapshot_seq, newest[0][0])
            return None
        t = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder))
        try:
            _write_files(tmp, view, model)
            final = folder / f"snap-{view.seq:012d}-{secrets.token_hex(4)}"
            os.rename(tmp, final)
            _fsync_file(folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _prune(folder, keep)
    with idx.lock:
        idx.snapshot_seq = max(idx.snapshot_seq, view.seq)
    log.info(
        "search snapshot written",
        extra={"collection": idx.collection, "seq": view.seq, "rows": view.n, "s": round(time.perf_counter() - t, 3)},
    )
    return final


_writing: set[str] = set()
_last_try: dict[str, float] = {}
_writing_lock = threading.Lock()


def maybe_write(
    idx: LiveIndex, root: Path, model: str, *, min_changes: int, min_interval_s: float
) -> threading.Thread | None:
    """Start writing a snapshot in a background thread when idx is at least `min_changes` changes
    past the newest snapshot it knows of and this process tried no write in `min_interval_s`.
    Cheap when there is nothing to do (called after every sync)."""
    if idx.seq - idx.snapshot_seq < min_changes or not idx.n:
        return None
    if idx.compacting is not None:  # written once the new layout is in place (after_compaction)
        return None
    now = time.monotonic()
    with _writing_lock:
        if idx.collection in _writing or now - _last_try.get(idx.collection, -1e18) < min_interval_s:
            return None
        _writing.add(idx.collection)
        _last_try[idx.collection] = now

    def run() -> None:
        try:
            write(idx, root, model)
        except Exception:  # a full disk must not fail searches: the next load reads Redis instead
            log.warning("cannot write a search snapshot", exc_info=True, extra={"collection": idx.collection})
        finally:
            with _writing_lock:
                _writing.discard(idx.collection)

    thread = threading.Thread(target=run, name="search-snapshot", daemon=True)
    thread.start()
    return thread


# ------------------------------------------------------------------ reading
def _mismatch(man: dict, collection: str, expect: Expect) -> str | None:
    """Why a snapshot cannot be used, or None."""
    if man.get("format") != FORMAT:
        return f"format {man.get('format')} (this code reads {FORMAT})"
    if man.get("collection") != collection:
        return f"collection {man.get('collection')!r}"
    if not expect.epoch or man.get("epoch") != expect.epoch:
        return "another epoch of the change log (the index was re-created or Redis lost its data)"
    if int(man.get("seq", -1)) > expect.seq or int(man.get("seq", -1)) < 0:
        return f"position {man.get('seq')} is past the change counter {expect.seq} (Redis rolled back)"
    if man.get("tokenizer") != TOKENIZER_VERSION:
        return f"tokenizer {man.get('tokenizer')!r} (now {TOKENIZER_VERSION!r})"
    if man.get("model") != expect.model:
        return f"model {man.get('model')!r} (the collection's is {expect.model!r})"
    if man.get("dim") is not None and expect.dim is not None and man.get("dim") != expect.dim:
        return f"dimension {man.get('dim')} (the collection's is {expect.dim})"
    return None


def _array(folder: Path, name: str, mode: Literal["r", "c"], shape: tuple, dtype) -> np.ndarray:
    path = folder / f"{name}.npy"
    a = np.load(path, mmap_mode=mode, allow_pickle=False) if int(np.prod(shape)) else np.load(path)  # none to map
    if a.dtype != np.dtype(dtype) or tuple(a.shape) != shape:
        raise ValueError(f"{name}: {a.dtype}{a.shape}, the manifest says {np.dtype(dtype)}{shape}")
    return np.asarray(a)  # a plain ndarray over the mapping


def _blobs(folder: Path, name: str, n: int) -> Blobs:
    off = _array(folder, f"{name}.off", "r", (n + 1,), np.int64)
    size = os.path.getsize(folder / f"{name}.bin")
    if int(off[-1]) != size or int(off[0]) != 0:
        raise ValueError(f"{name}.bin holds {size} bytes, its offsets end at {int(off[-1])}")
    if not size:
        return Blobs(b"", off)
    with open(folder / f"{name}.bin", "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return Blobs(buf, off)


def _json(folder: Path, name: str, man: dict):
    data = (folder / name).read_bytes()
    if hashlib.sha256(data).hexdigest() != man["sha256"][name]:
        raise ValueError(f"{name} does not match its checksum")
    return orjson.loads(data)


def _restore(folder: Path, man: dict) -> LiveIndex:
    n, cap, n_terms, nnz = int(man["n"]), int(man["cap"]), int(man["n_terms"]), int(man["nnz"])
    dim = man["dim"]
    idx = LiveIndex(man["collection"])
    idx.alive = _array(folder, "alive", "c", (cap,), np.bool_)
    idx.has_vec = _array(folder, "has_vec", "c", (cap,), np.bool_)
    idx.doclen = _array(folder, "doclen", "c", (cap,), np.float32)
    idx.ts = _array(folder, "ts", "c", (cap,), np.float64)
    idx.codes = {f: _array(folder, f"code.{f}", "c", (cap,), np.int32) for f in CODE_FIELDS}
    if dim is not None:
        idx.vecs = _array(folder, "vecs", "c", (cap, int(dim)), np.float32)
    idx.df = _array(folder, "df", "c", (n_terms,), np.int64)
    idx.base = _Block(
        0,
        _array(folder, "post.indptr", "r", (n + 1,), np.int64),
        _array(folder, "post.tids", "r", (nnz,), np.int32),
        _array(folder, "post.tfs", "r", (nnz,), np.float32),
    )
    idx.base_csc = _Columns(
        _array(folder, "cols.indptr", "r", (max(1, n_terms) + 1,), np.int64),
        _array(folder, "cols.rows", "r", (nnz,), np.int32),
        _array(folder, "cols.tfs", "r", (nnz,), np.float32),
    )
    if int(idx.base.indptr[-1]) != nnz or int(idx.base_csc.indptr[-1]) != nnz:
        raise ValueError("postings end past their arrays")
    idx.metas = _blobs(folder, "meta", n)
    idx.texts = _blobs(folder, "text", n)
    ids = _json(folder, "ids.json", man)
    terms = _json(folder, "terms.json", man)
    values = _json(folder, "values.json", man)
    if len(ids) != n or len(terms) != n_terms:
        raise ValueError(f"{len(ids)} ids and {len(terms)} terms, the manifest says {n} and {n_terms}")
    idx.ids = ids
    live = np.flatnonzero(idx.alive[:n])
    idx.row_of = dict(zip(compress(ids, idx.alive[:n]), live.tolist(), strict=True))
    idx.term_id = _TermIds(zip(terms, range(n_terms), strict=True))
    idx.value_code = {f: dict(values["code"].get(f, {})) for f in CODE_FIELDS}
    idx.value_romaji = {f: {rom: set(cs) for rom, cs in values["romaji"].get(f, {}).items()} for f in CODE_FIELDS}
    idx.seq = idx.snapshot_seq = int(man["seq"])
    idx.epoch = str(man["epoch"])
    idx.last_id = man.get("last_id")  # the first sync checks the log still holds it (a rolled-back Redis)
    idx.n, idx.cap, idx.dim = n, cap, (int(dim) if dim is not None else None)
    idx.n_alive, idx.total_len, idx.dead = int(man["n_alive"]), float(man["total_len"]), int(man["dead"])
    idx.clustered = min(int(man["clustered"]), n)
    if idx.n_alive != live.shape[0]:
        raise ValueError(f"{live.shape[0]} live rows, the manifest says {idx.n_alive}")
    return idx


_TOUCH_STEP = 32 << 20  # bytes touched per numpy call: the GIL is free between them


def _mapping(a: np.ndarray) -> mmap.mmap | None:
    base: object = a
    while base is not None:
        m = getattr(base, "_mmap", None)
        if isinstance(m, mmap.mmap):
            return m
        base = getattr(base, "base", None)
    return None


def _touched_arrays(idx: LiveIndex) -> list[np.ndarray]:
    """The mapped arrays a query reads, small ones first."""
    arrays: list[np.ndarray] = [*idx.codes.values(), idx.alive, idx.has_vec, idx.doclen, idx.ts]
    if idx.base_csc is not None:
        arrays += [idx.base_csc.indptr, idx.base_csc.rows, idx.base_csc.tfs]
    arrays.append(idx.vecs)
    return [a for a in arrays if _mapping(a) is not None]


def pretouch(idx: LiveIndex) -> threading.Thread:
    """Fault in the pages of a mapped index's arrays in a helper thread (see the module's doc)."""
    arrays = _touched_arrays(idx)

    def run() -> None:
        t = time.perf_counter()
        total = 0
        try:
            for a in arrays:
                m = _mapping(a)
                if m is not None:
                    m.madvise(mmap.MADV_WILLNEED)
            for a in arrays:
                flat = a.reshape(-1).view(np.uint8)
                for start in range(0, flat.shape[0], _TOUCH_STEP):
                    flat[start : start + _TOUCH_STEP : mmap.PAGESIZE].max()
                total += flat.shape[0]
        except (OSError, ValueError):  # only a slower first query
            log.warning("search snapshot pre-touch stopped", exc_info=True, extra={"collection": idx.collection})
            return
        log.info(
            "search snapshot pages touched",
            extra={"collection": idx.collection, "mib": total >> 20, "s": round(time.perf_counter() - t, 3)},
        )

    thread = threading.Thread(target=run, name="search-pretouch", daemon=True)
    thread.start()
    return thread


def load(root: Path, collection: str, expect: Expect, *, touch: bool = True) -> LiveIndex | None:
    """The index mapped from the newest usable snapshot of `collection`, at the snapshot's position
    (sync() then applies the changes after it); None when there is none (each one skipped is
    logged with the reason). With `touch`, its pages are faulted in by a helper thread (pretouch)."""
    folder = collection_dir(root, collection)
    for seq, path in snapshots(folder):
        t = time.perf_counter()
        try:
            man = orjson.loads((path / "manifest.json").read_bytes())
            why = _mismatch(man, collection, expect)
            if why:
                log.info("search snapshot %s not used: %s", path.name, why, extra={"collection": collection})
                continue
            idx = _restore(path, man)
            if touch:
                pretouch(idx)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # removed meanwhile, truncated, garbled
            log.warning("search snapshot %s unreadable, skipped: %s", path.name, exc, extra={"collection": collection})
            continue
        log.info(
            "search snapshot %s mapped",
            path.name,
            extra={"collection": collection, "seq": seq, "rows": idx.n, "s": round(time.perf_counter() - t, 3)},
        )
        return idx
    return None
