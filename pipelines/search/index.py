"""A search process's in-memory view of one collection, kept in step with the shared store.

Why in memory: at 100k chunks a filtered query must answer in a few milliseconds, which neither
Chroma's own `where` filter nor Redis postings (tens of thousands of entries per common Japanese
bigram) do; bench/search_latency.py compares them. Here a filter is a comparison on an int array, BM25 reads the postings of
the query's terms and keeps only the rows the filter allows, and dense similarity is one
matrix-vector product over the rows that pass the filter (exact, so a filtered query never misses
a matching item the way a post-filtered ANN result can).

Why it never goes stale: `sync()` runs before every query. It reads the collection's change
counter in Redis (pipelines.search.lexical) and, when it moved, applies exactly the chunks changed since
the last sync. A search that starts after an ingest or delete returned sees it, in every process
on every host.

Layout: rows are append-only; an updated chunk gets a new row and its old row is marked dead, so
readers never see a half-written row. Postings are kept row-major (CSR: row -> term ids, tfs) for
the rows present at the last merge ("base"), with a column-major copy (CSC: term -> rows) for
queries; rows added since then sit in small CSR blocks ("delta") whose own CSC is rebuilt lazily.
The delta is merged into the base when it grows, and dead rows are compacted away when they pile
up (amortised, in the syncing process only), and when most rows (a cold load, or many ingested
since) are not yet laid out by region. A compaction (~20 s at 1M rows) runs in a helper thread:
searches keep answering from the current arrays, and the new ones are swapped in under the lock,
with the rows appended and deleted meanwhile carried over. It lays the rows out by region, then
brewery: a region filter then reads its regions' runs of rows (select(), not a scan of every
row), one range of each posting list (bm25's span; plus the rows merged since) and consecutive
vectors (one matrix-vector product; a region filter at 1M rows, bench/search_scale.py). Document frequencies are kept per term over the live
rows, so BM25's idf needs no scan. Each row's stored metadata and text are kept as the bytes Redis
holds (parsed only for the rows a query shows): at 1M chunks a dict per row would cost gigabytes.

Warm start: pipelines.search.snapshot writes this state to disk and maps it into a new process
(the arrays copy-on-write), which then syncs only the changes after the snapshot's position.

Loading is vectorised: a cold process applies a batch of chunks with a handful of numpy calls per
batch (term ids through one C-level dict map, vectors through one frombuffer, filter codes through
one map per field) instead of per-chunk Python. About half of a cold load is reading and parsing
the stored chunks from Redis with redis-py's pure-Python parser (hiredis halves that part). Hit fields are built only for the rows a query shows, from the parsed
metadata.
"""

from __future__ import annotations

import bisect
import gc
import logging
import math
import mmap
import threading
from collections.abc import Callable
from itertools import chain
from operator import methodcaller

import numpy as np
import orjson
import redis
from scipy import sparse

from pipelines.labels.schema import normalise_features
from pipelines.search import lexical
from pipelines.search.tokenizer import TOKENIZER_VERSION, normalize, romaji_of

log = logging.getLogger("yana.search_index")

CODE_FIELDS = ("category", "region", "brewery", "brand_name")
BM25_K1, BM25_B = 1.2, 0.75
_DELTA_MAX_ROWS = 2048  # rows held outside the base postings before they are merged in
_FETCH_BATCH = 2000
_CLUSTER_MIN_ROWS = 10_000  # from this size, an index with > 30% of its rows not laid out by region is compacted
_GATHER_ROWS = 512  # rows gathered per block for a filtered cosine (~0.8 MB at 384-d: stays in cache)
_DOC_FIELDS = ("text", "terms", "tok", "meta", "vec")
_TOK = TOKENIZER_VERSION.encode()

VectorFetcher = Callable[[list[str]], dict[str, list[float]]]


def _raw_client(r: redis.Redis) -> redis.Redis:
    """A client on the same server that returns bytes (vectors are binary)."""
    pool = r.connection_pool
    manager = getattr(pool, "sentinel_manager", None)
    if manager is not None:  # REDIS_URL names Sentinel: a bytes client of the same master
        kw = pool.connection_kwargs
        return manager.master_for(
            pool.service_name,
            decode_responses=False,
            db=kw.get("db", 0),
            password=kw.get("password"),
            socket_timeout=kw.get("socket_timeout"),
            socket_connect_timeout=kw.get("socket_connect_timeout"),
        )
    kwargs = dict(pool.connection_kwargs)
    kwargs["decode_responses"] = False
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs))


_raw_clients: dict[int, redis.Redis] = {}


def raw_client(r: redis.Redis) -> redis.Redis:
    key = id(r.connection_pool)
    client = _raw_clients.get(key)
    if client is None:
        client = _raw_clients[key] = _raw_client(r)
    return client


def hit_fields(chunk_id: str, md: dict) -> dict:
    """The fields a hit shows (search and /v1/chat hits), from a chunk's metadata."""
    feats = md.get("label_features")
    if isinstance(feats, str):
        feats = normalise_features(feats)
    return {
        "id": str(md.get("id") or md.get("doc_id") or chunk_id),
        "chunk_id": chunk_id,
        "doc_id": str(md.get("doc_id") or md.get("id") or chunk_id),
        "category": str(md.get("category") or ""),
        "brand_name": str(md.get("brand_name") or ""),
        "product_name": str(md.get("product_name") or ""),
        "brewery": str(md.get("brewery") or ""),
        "region": str(md.get("region") or ""),
        "label_features": tuple(str(f) for f in feats or ()),
        "file_path": str(md.get("file_path") or ""),
        "source": str(md.get("source") or ""),
        "phash": str(md.get("phash") or ""),
        "ingested_at": str(md.get("ingested_at") or ""),
    }


class _TermIds(dict):
    """term -> id; an unseen term gets the next id on lookup (so a C-level map() assigns ids)."""

    def __missing__(self, term: str) -> int:
        tid = self[term] = len(self)
        return tid


class _ValueCodes(dict):
    """A metadata value as stored -> its filter code; an unseen value is coded on lookup."""

    def __init__(self, index: LiveIndex, field: str):
        super().__init__()
        self.index, self.field = index, field

    def __missing__(self, raw) -> int:
        code = self[raw] = self.index._code(self.field, raw)
        return code


def _number(v) -> float:
    try:
        return float(v or 0.0)
    except (TypeError, ValueError):
        return 0.0


class Blobs:
    """One byte string per row (a chunk's stored metadata JSON, its indexed text). Rows [0, frozen)
    sit in one buffer with offsets (packed at a compaction, or mapped from a snapshot and then
    shared by every process that maps it); rows appended since are a list. Read a row at a time."""

    __slots__ = ("buf", "off", "frozen", "tail")

    def __init__(self, buf: bytes | mmap.mmap = b"", off: np.ndarray | None = None):
        self.buf = buf
        self.off = np.zeros(1, dtype=np.int64) if off is None else off
        self.frozen = int(self.off.shape[0]) - 1
        self.tail: list[bytes] = []

    def __len__(self) -> int:
        return self.frozen + len(self.tail)

    def __getitem__(self, row: int) -> bytes:
        if row < self.frozen:
            return bytes(self.buf[int(self.off[row]) : int(self.off[row + 1])])
        return self.tail[row - self.frozen]

    def extend(self, items: list[bytes]) -> None:
        self.tail.extend(items)

    def drop(self, row: int) -> None:
        """Forget a dead row's bytes (frozen rows cost nothing: they go at the next compaction)."""
        if row >= self.frozen:
            self.tail[row - self.frozen] = b""

    def take(self, rows) -> Blobs:
        """The given rows, packed into one buffer."""
        parts = [self[int(i)] for i in rows]
        off = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=off[1:])
        return Blobs(b"".join(parts), off)


class _Columns:
    """Term -> rows postings (CSC) of the rows of a block: rows[indptr[t]:indptr[t + 1]] hold term
    t with the tfs beside them. Plain arrays, so they can be mapped read-only from a snapshot."""

    __slots__ = ("indptr", "rows", "tfs")

    def __init__(self, indptr: np.ndarray, rows: np.ndarray, tfs: np.ndarray):
        self.indptr, self.rows, self.tfs = indptr, rows, tfs

    @property
    def n_terms(self) -> int:
        return int(self.indptr.shape[0]) - 1


class _Block:
    """Postings of consecutive rows [start, start + len(indptr) - 1), row-major."""

    __slots__ = ("start", "indptr", "tids", "tfs")

    def __init__(self, start: int, indptr: np.ndarray, tids: np.ndarray, tfs: np.ndarray):
        self.start, self.indptr, self.tids, self.tfs = start, indptr, tids, tfs

    @property
    def rows(self) -> int:
        return self.indptr.shape[0] - 1

    def terms_of(self, row: int) -> np.ndarray:
        i = row - self.start
        return self.tids[self.indptr[i] : self.indptr[i + 1]]


def _concat_blocks(blocks: list[_Block], start: int) -> _Block:
    if not blocks:
        return _Block(start, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32))
    if len(blocks) == 1:
        return blocks[0]
    offsets = np.cumsum([0] + [b.tids.shape[0] for b in blocks[:-1]])
    indptr = np.concatenate(
        [blocks[0].indptr[:1]] + [b.indptr[1:] + off for b, off in zip(blocks, offsets, strict=True)]
    )
    return _Block(
        blocks[0].start, indptr, np.concatenate([b.tids for b in blocks]), np.concatenate([b.tfs for b in blocks])
    )


def _csc(block: _Block, n_terms: int) -> _Columns:
    csr = sparse.csr_matrix((block.tfs, block.tids, block.indptr), shape=(block.rows, max(1, n_terms)))
    csc = csr.tocsc()
    return _Columns(csc.indptr.astype(np.int64), csc.indices.astype(np.int32), csc.data.astype(np.float32))


class LiveIndex:
    """All chunks of one collection: vectors, BM25 postings, filter codes, hit fields."""

    def __init__(self, collection: str):
        self.collection = collection
        self.lock = threading.RLock()
        self.seq = 0
        self.epoch: str | None = None  # the change log's epoch seq was read under (pipelines.search.lexical)
        self.snapshot_seq = 0  # position of the newest snapshot this process mapped or wrote
        self.last_id: str | None = None  # the id whose change is at position seq
        self.n = 0
        self.cap = 0
        self.dim: int | None = None
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        # stored metadata JSON and indexed text per row (dead rows: b""), parsed for shown rows only
        self.metas = Blobs()
        self.texts = Blobs()
        self.alive = np.zeros(0, dtype=bool)
        self.has_vec = np.zeros(0, dtype=bool)
        self.vecs = np.zeros((0, 0), dtype=np.float32)
        self.doclen = np.zeros(0, dtype=np.float32)
        self.ts = np.zeros(0, dtype=np.float64)
        self.codes = {f: np.zeros(0, dtype=np.int32) for f in CODE_FIELDS}
        self.value_code: dict[str, dict[str, int]] = {f: {} for f in CODE_FIELDS}
        self.value_romaji: dict[str, dict[str, set[int]]] = {f: {} for f in CODE_FIELDS}
        self._raw_code = {f: _ValueCodes(self, f) for f in CODE_FIELDS}
        self.term_id: _TermIds = _TermIds()
        self.df = np.zeros(0, dtype=np.int64)  # live rows holding each term
        self.base = _concat_blocks([], 0)  # rows [0, base.rows)
        self.clustered = 0  # base rows [0, clustered) are laid out by region (the last compaction)
        self.base_csc: _Columns | None = None
        self.delta: list[_Block] = []  # rows [base.rows, n)
        self._delta_starts: list[int] = []
        self._delta_csc: _Columns | None = None
        self.n_alive = 0
        self.total_len = 0.0
        self.dead = 0
        # compaction: run in a helper thread by sync() (compact_in_background), one at a time;
        # after_compaction(index) is called once one has been swapped in (search: a snapshot)
        self.compact_in_background = True
        self.compacting: threading.Thread | None = None
        self.after_compaction: Callable[[LiveIndex], None] | None = None
        self._generation = 0  # bumped by _reset(): a compaction of the old rows is dropped
        self.layout = 0  # bumped when rows are renumbered (a compaction)
        self._runs: dict[int, tuple[int, int]] | None = None
        self._runs_key: tuple[int, int] | None = None
        self._scratch = np.zeros(0, dtype=np.float32)  # bm25_rows: zero outside a call

    # ---------------------------------------------------------------- sync with Redis
    def sync(self, r: redis.Redis, fetch_vectors: VectorFetcher | None = None) -> int:
        """Apply every change recorded since the last sync; returns the number of ids applied."""
        with self.lock:
            p = lexical.prefix(self.collection)
            if not self._log_moved(r):
                return 0
            changed = r.zrangebyscore(p + "changes", f"({self.seq}", "+inf", withscores=True)
            if not changed:
                return 0
            # Every doc fetched below is at least as new as its change entry, so taking the
            # highest score seen as the new position loses no change (a later one shows up again).
            new_seq = int(changed[-1][1])  # in score order
            ids = [i for i, _ in changed]
            self._grow(self.n + len(ids))  # once, not by doubling while a cold load streams in
            raw = raw_client(r)
            missing_vec: list[str] = []
            # A bulk load creates ~2 dicts per chunk that outlive a young collection, so the
            # cyclic GC would rescan them over and over (~12% of a cold load); it holds no cycles,
            # so the GC waits until the load is done.
            gc_was_on = len(ids) > _FETCH_BATCH and gc.isenabled()
            if gc_was_on:
                gc.disable()
            try:
                for start in range(0, len(ids), _FETCH_BATCH):
                    part = ids[start : start + _FETCH_BATCH]
                    pipe = raw.pipeline(transaction=False)
                    for id_ in part:
                        pipe.hmget(p + "doc:" + id_, *_DOC_FIELDS)
                    missing_vec += self.apply(part, pipe.execute())
            finally:
                if gc_was_on:
                    gc.enable()
            if missing_vec and fetch_vectors is not None:
                self._fill_vectors(missing_vec, fetch_vectors)
            self.seq, self.last_id = new_seq, changed[-1][0]
            if self.compacting is not None:
                pass  # the delta is merged by the compaction under way (no merge may run beside it)
            elif self._compact_needed():  # many dead rows, or many rows not laid out by region (a cold load)
                if self.compact_in_background:
                    self._compact_in_background()
                else:
                    self._compact()
            elif len(ids) > _DELTA_MAX_ROWS // 4 or self.n - self.base.rows > _DELTA_MAX_ROWS:
                self._merge_delta()
            return len(ids)

    def _log_moved(self, r: redis.Redis) -> bool:
        """Whether the change log holds changes this index has not applied (one Redis call when
        nothing changed). A log that restarted resets the index first."""
        epoch, seq = lexical.position(r, self.collection)
        if seq == self.seq and (epoch == self.epoch or epoch is None):
            return False
        if seq and epoch is None:  # an index written before epochs: give it one
            epoch = lexical.ensure_epoch(r, self.collection)
        if self.seq and self._log_diverged(r, epoch, seq):
            # the index was dropped and re-created, or Redis lost its data or was restored from an
            # older backup: positions in the old log mean nothing now, so load everything again
            log.warning(
                "change log restarted: reloading the index",
                extra={"collection": self.collection, "seq": seq, "was": self.seq},
            )
            self._reset()
        self.epoch = epoch
        return seq != self.seq

    def _log_diverged(self, r: redis.Redis, epoch: str | None, seq: int) -> bool:
        """Whether the log is no longer the one this index followed: another epoch, a counter
        behind ours, or (a Redis restored from an older backup, then written past our position)
        the last change we applied missing from it."""
        if seq < self.seq or (self.epoch is not None and epoch != self.epoch):
            return True
        if seq > self.seq and self.last_id is not None:
            score = r.zscore(lexical.prefix(self.collection) + "changes", self.last_id)
            return score is None or int(score) < self.seq
        return False

    def _reset(self) -> None:
        lock, gen, bg, hook = self.lock, self._generation, self.compact_in_background, self.after_compaction
        self.__init__(self.collection)  # type: ignore[misc]
        self.lock, self._generation = lock, gen + 1
        self.compact_in_background, self.after_compaction = bg, hook

    def apply(self, ids: list[str], docs: list) -> list[str]:
        """Apply changed chunks: docs[i] = [text, terms, tok, meta, vec] (bytes; meta None = deleted).
        Every id's old row dies; the present ones get new rows. Returns the ids with no vector."""
        with self.lock:
            for id_ in ids:
                self._remove(id_)
            present = [(id_, d) for id_, d in zip(ids, docs, strict=True) if d[3] is not None]
            return self._append(present) if present else []

    def _grow(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(1024, self.cap * 2, need)

        def grown(a, fill=0):
            out = np.zeros((cap,) + a.shape[1:], dtype=a.dtype) if fill == 0 else np.full(cap, fill, dtype=a.dtype)
            out[: self.n] = a[: self.n]
            return out

        self.alive, self.has_vec = grown(self.alive), grown(self.has_vec)
        self.doclen, self.ts = grown(self.doclen), grown(self.ts)
        self.codes = {f: grown(c, -1) for f, c in self.codes.items()}
        if self.dim is not None:
            self.vecs = grown(self.vecs)
        self.cap = cap

    def _code(self, field: str, raw) -> int:
        v = lexical.filter_value(raw) if raw else ""
        if not v:
            return -1
        codes = self.value_code[field]
        code = codes.get(v)
        if code is None:
            code = codes[v] = len(codes)
            if field != "category":
                rom = romaji_of(v)
                if len(rom) >= 4:
                    self.value_romaji[field].setdefault(rom, set()).add(code)
        return code

    def _row_terms(self, row: int) -> np.ndarray:
        if row < self.base.rows:
            return self.base.terms_of(row)
        return self.delta[bisect.bisect_right(self._delta_starts, row) - 1].terms_of(row)

    def _remove(self, id_: str) -> None:
        row = self.row_of.pop(id_, None)
        if row is None or not self.alive[row]:
            return
        self.alive[row] = False
        self.n_alive -= 1
        self.total_len -= float(self.doclen[row])
        self.dead += 1
        self.df[self._row_terms(row)] -= 1  # a row's term ids are distinct
        self.metas.drop(row)
        self.texts.drop(row)

    def _append(self, present: list[tuple[str, list]]) -> list[str]:
        m, start = len(present), self.n
        self._grow(start + m)
        ids = [id_ for id_, _ in present]
        texts = [d[0] or b"" for _, d in present]
        tf_maps = [
            orjson.loads(d[1]) if d[2] == _TOK and d[1] else lexical.terms_of(text.decode())  # other tokenizer
            for (_, d), text in zip(present, texts, strict=True)
        ]
        raw_metas = [d[3] for _, d in present]
        metas = [orjson.loads(m) for m in raw_metas]

        lens = np.fromiter(map(len, tf_maps), dtype=np.int64, count=m)
        indptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(lens, out=indptr[1:])
        nnz = int(indptr[-1])
        tids = np.fromiter(map(self.term_id.__getitem__, chain.from_iterable(tf_maps)), dtype=np.int32, count=nnz)
        tfs = np.fromiter(chain.from_iterable(map(dict.values, tf_maps)), dtype=np.float32, count=nnz)
        if self.df.shape[0] < len(self.term_id):
            df = np.zeros(max(len(self.term_id), 2 * self.df.shape[0]), dtype=np.int64)
            df[: self.df.shape[0]] = self.df
            self.df = df
        self.df[: len(self.term_id)] += np.bincount(tids, minlength=len(self.term_id))
        doclen = np.bincount(np.repeat(np.arange(m), lens), weights=tfs, minlength=m).astype(np.float32)
        self.delta.append(_Block(start, indptr, tids, tfs))
        self._delta_starts.append(start)
        self._delta_csc = None

        sl = slice(start, start + m)
        self.doclen[sl] = doclen
        self.total_len += float(doclen.sum(dtype=np.float64))
        try:
            self.ts[sl] = np.fromiter(map(methodcaller("get", "ingested_at_ts", 0.0), metas), dtype=np.float64, count=m)
        except (TypeError, ValueError):  # a missing (None) or non-numeric timestamp somewhere
            self.ts[sl] = [_number(md.get("ingested_at_ts")) for md in metas]
        for f in CODE_FIELDS:  # one C-level map per field; only unseen values reach Python
            values = map(methodcaller("get", f, ""), metas)
            try:
                self.codes[f][sl] = np.fromiter(map(self._raw_code[f].__getitem__, values), dtype=np.int32, count=m)
            except TypeError:  # an unhashable value (a list) somewhere
                self.codes[f][sl] = [self._code(f, md.get(f)) for md in metas]
        self.alive[sl] = True
        self.has_vec[sl] = False
        self.ids += ids
        self.metas.extend(raw_metas)
        self.texts.extend(texts)
        self.row_of.update(zip(ids, range(start, start + m), strict=True))
        self.n += m
        self.n_alive += m

        vecs = [d[4] for _, d in present]
        if self.dim is None:
            first = next((v for v in vecs if v), None)
            if first:
                self.dim = len(first) // 2
                self.vecs = np.zeros((self.cap, self.dim), dtype=np.float32)
        have = [i for i, v in enumerate(vecs) if v and len(v) == 2 * (self.dim or 0)]
        if len(have) < sum(1 for v in vecs if v):
            log.warning("vector of another dimension ignored", extra={"collection": self.collection})
        if have and self.dim:
            block = np.frombuffer(b"".join(vecs[i] for i in have), dtype=np.float16).reshape(len(have), self.dim)
            self._set_vecs(start + np.asarray(have, dtype=np.int64), block.astype(np.float32))
        got = set(have)
        return [ids[i] for i in range(m) if i not in got]

    def _set_vecs(self, rows: np.ndarray, v: np.ndarray) -> None:
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self.vecs[rows] = v / norms
        self.has_vec[rows] = True

    def _fill_vectors(self, ids: list[str], fetch: VectorFetcher) -> None:
        try:
            got = fetch(ids)
        except Exception:  # Chroma unreachable: rows stay without a dense score until re-indexed
            log.warning("cannot fetch vectors from the vector store", exc_info=True)
            return
        rows, vecs = [], []
        for id_, emb in got.items():
            row = self.row_of.get(id_)
            if row is None or emb is None:
                continue
            vec = np.asarray(emb, dtype=np.float32)
            if self.dim is None:
                self.dim = int(vec.shape[0])
                self.vecs = np.zeros((self.cap, self.dim), dtype=np.float32)
            if vec.shape[0] != self.dim:
                log.warning("vector of another dimension ignored", extra={"collection": self.collection})
                continue
            rows.append(row)
            vecs.append(vec)
        if rows:
            self._set_vecs(np.asarray(rows, dtype=np.int64), np.stack(vecs))

    def _merge_delta(self) -> None:
        """Fold the delta blocks into the base postings and rebuild the base's term -> rows copy."""
        if not self.delta:
            return
        self.base = _concat_blocks([self.base] + self.delta, 0)
        self.base_csc = _csc(self.base, len(self.term_id))
        self.delta, self._delta_starts, self._delta_csc = [], [], None

    def _compact(self) -> None:
        """Drop dead rows (renumbering the live ones) and rebuild the postings, now (tests, and
        a process that was asked to wait); sync() runs it in the background instead."""
        with self.lock:
            frozen = self._compact_freeze()
        self._compact_swap(frozen, self._compact_build(frozen))

    def _compact_needed(self) -> bool:
        unclustered = self.n - self.clustered if self.n >= _CLUSTER_MIN_ROWS else 0
        return self.dead > max(1000, 0.3 * self.n) or unclustered > 0.3 * self.n

    def _compact_in_background(self) -> None:
        """Start a compaction in a helper thread (under self.lock). Searches go on answering from
        the current arrays while it builds the new ones (~20 s at 1M rows); it swaps them in under
        the lock in a few milliseconds, with the changes applied meanwhile moved past them."""
        if self.compacting is not None:
            return
        frozen = self._compact_freeze()

        def run() -> None:
            try:
                built = self._compact_build(frozen)
                self._compact_swap(frozen, built)
            except Exception:  # the old layout keeps serving; the next sync tries again
                log.warning("search index compaction failed", exc_info=True, extra={"collection": self.collection})
            finally:
                with self.lock:
                    if self.compacting is thread:
                        self.compacting = None
            if self.after_compaction is not None:
                self.after_compaction(self)

        thread = threading.Thread(target=run, name="search-compact", daemon=True)
        self.compacting = thread
        thread.start()

    def wait_compaction(self, timeout: float | None = None) -> None:
        """Wait for a background compaction (benches, tests)."""
        thread = self.compacting
        if thread is not None:
            thread.join(timeout)

    def _compact_freeze(self) -> dict:
        """What a compaction reads (under self.lock): references to the arrays and blocks as
        they are now. Rows [0, n) of them are never written in place after this (appends go past
        n, _grow copies; deletes write `alive`, re-read at the swap), and no delta is merged into
        the base while a compaction runs, so the builder reads them without the lock."""
        return {
            "gen": self._generation,
            "n": self.n,
            "alive": self.alive[: self.n].copy(),
            "region": self.codes["region"],
            "brewery": self.codes["brewery"],
            "blocks": [self.base, *self.delta],  # blocks are replaced, never changed
            "n_terms": len(self.term_id),
            "ids": self.ids,
            "metas": self.metas,
            "texts": self.texts,
            "arrays": {name: getattr(self, name) for name in ("has_vec", "doclen", "ts")},
            "codes": dict(self.codes),
            "vecs": self.vecs,
        }

    def _compact_build(self, f: dict) -> dict:
        """The compacted layout of the frozen rows, built without the lock."""
        n0 = f["n"]
        keep = np.flatnonzero(f["alive"])
        # the rows of one region (within it, one brewery) side by side: a filter on them then reads
        # one contiguous range of vectors and of each posting list (bm25's span)
        keep = keep[np.lexsort((keep, f["brewery"][keep], f["region"][keep]))]
        base = _concat_blocks(f["blocks"], 0)
        csr = sparse.csr_matrix((base.tfs, base.tids, base.indptr), shape=(n0, max(1, f["n_terms"])))
        csr = csr[keep]
        new_base = _Block(0, csr.indptr.astype(np.int64), csr.indices.astype(np.int32), csr.data.astype(np.float32))
        ids = f["ids"]
        kept_ids = [ids[i] for i in keep]
        return {
            "keep": keep,
            "base": new_base,
            "base_csc": _csc(new_base, f["n_terms"]),
            "ids": kept_ids,
            "row_of": dict(zip(kept_ids, range(len(kept_ids)), strict=True)),
            "metas": f["metas"].take(keep),
            "texts": f["texts"].take(keep),
            "arrays": {name: a[keep] for name, a in f["arrays"].items()},
            "codes": {name: c[keep] for name, c in f["codes"].items()},
            "vecs": f["vecs"][keep] if self.dim is not None and f["vecs"].shape[0] >= n0 else None,
        }

    def _compact_swap(self, f: dict, b: dict) -> None:
        """Put the compacted rows in place (under self.lock, milliseconds): rows appended since
        the freeze follow them (their delta blocks renumbered), rows deleted since stay dead."""
        with self.lock:
            if f["gen"] != self._generation:  # the index was reset meanwhile (the log restarted)
                return
            n0, keep = f["n"], b["keep"]
            m, tail = keep.shape[0], self.n - n0
            n = m + tail
            cap = max(self.cap, n)

            def placed(front: np.ndarray, cur: np.ndarray, fill=0) -> np.ndarray:
                out = np.zeros((cap,) + cur.shape[1:], dtype=cur.dtype) if fill == 0 else np.full(cap, fill, cur.dtype)
                out[:m] = front
                out[m:n] = cur[n0 : self.n]
                return out

            alive_now = self.alive[keep]  # rows deleted since the freeze stay dead
            self.alive = placed(alive_now, self.alive)
            for name, front in b["arrays"].items():
                setattr(self, name, placed(front, getattr(self, name)))
            self.codes = {name: placed(front, self.codes[name], -1) for name, front in b["codes"].items()}
            if self.dim is not None:
                if b["vecs"] is not None:
                    self.vecs = placed(b["vecs"], self.vecs)
                else:  # the first vectors arrived after the freeze (rows past it)
                    self.vecs = placed(np.zeros((m, self.dim), dtype=np.float32), self.vecs)
            row_of = b["row_of"]
            ids = b["ids"]
            for i in np.flatnonzero(~alive_now).tolist():
                if row_of.get(ids[i]) == i:
                    del row_of[ids[i]]
            tail_ids = self.ids[n0 : self.n]
            for k, id_ in enumerate(tail_ids):
                if self.alive[m + k]:
                    row_of[id_] = m + k
            metas, texts = b["metas"], b["texts"]
            metas.extend([self.metas[r] for r in range(n0, self.n)])
            texts.extend([self.texts[r] for r in range(n0, self.n)])
            self.ids = ids + tail_ids
            self.metas, self.texts = metas, texts
            self.row_of = row_of
            self.base, self.base_csc = b["base"], b["base_csc"]
            shift = m - n0
            later = self.delta[len(f["blocks"]) - 1 :]  # blocks appended since the freeze
            self.delta = [_Block(blk.start + shift, blk.indptr, blk.tids, blk.tfs) for blk in later]
            self._delta_starts = [blk.start for blk in self.delta]
            self._delta_csc = None
            self.n, self.cap = n, cap
            self.dead = n - self.n_alive
            self.clustered = m
            self.layout += 1

    # ---------------------------------------------------------------- queries (hold self.lock)
    def meta(self, row: int) -> dict:
        """A live row's stored metadata."""
        raw = self.metas[row]
        return orjson.loads(raw) if raw else {}

    def text(self, row: int) -> str:
        """A live row's indexed text."""
        return self.texts[row].decode()

    def hit(self, row: int) -> dict:
        """The hit fields of a live row."""
        return hit_fields(self.ids[row], self.meta(row))

    def vectors(self, rows) -> np.ndarray:
        """The (unit) vectors of the given rows."""
        return self.vecs[rows]

    def cosine(self, q: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """q's cosine with every row [0, n) (rows=None) or with the given rows. A selection is
        gathered in cache-sized blocks: one big gather would write and re-read the selected
        rows through memory, the main cost at 1M rows."""
        q = np.asarray(q, dtype=self.vecs.dtype)
        if rows is None:
            return self.vecs[: self.n] @ q
        if rows.shape[0] and int(rows[-1]) - int(rows[0]) + 1 == rows.shape[0]:  # one run (a region's rows)
            return self.vecs[int(rows[0]) : int(rows[-1]) + 1] @ q
        out = np.empty(rows.shape[0], dtype=np.float32)
        buf = np.empty((min(_GATHER_ROWS, rows.shape[0]), self.vecs.shape[1]), dtype=self.vecs.dtype)
        for s in range(0, rows.shape[0], _GATHER_ROWS):
            part = rows[s : s + _GATHER_ROWS]
            first, last = int(part[0]), int(part[-1])
            if last - first + 1 == part.shape[0]:  # consecutive rows (a region's, after a compaction): no copy
                block = self.vecs[first : last + 1]
            else:
                block = buf[: part.shape[0]]
                np.take(self.vecs, part, axis=0, out=block)
            np.dot(block, q, out=out[s : s + part.shape[0]])
        return out

    def filter_mask(self, filters: dict[str, list[str]]) -> np.ndarray:
        """Rows alive and matching every filter (values of one field are OR-ed), as a mask over n."""
        mask = self.alive[: self.n].copy()
        for field, values in filters.items():
            found = (self.value_code[field].get(lexical.filter_value(v)) for v in values)
            codes = [c for c in found if c is not None]
            if not codes:
                return np.zeros(self.n, dtype=bool)
            col = self.codes[field][: self.n]
            mask &= col == codes[0] if len(codes) == 1 else np.isin(col, codes)
        return mask

    def _region_runs(self) -> dict[int, tuple[int, int]] | None:
        """Region code -> [lo, hi) of the clustered rows (a compaction lays them out by region), or
        None when there are none. Computed once per layout (~2 ms at 1M rows)."""
        c = min(self.clustered, self.n)
        key = (self.layout, c)
        if self._runs_key != key:
            runs: dict[int, tuple[int, int]] | None = None
            if c:
                col = self.codes["region"][:c]
                starts = np.concatenate(([0], np.flatnonzero(col[1:] != col[:-1]) + 1))
                ends = np.append(starts[1:], c)
                codes = col[starts].tolist()
                if len(set(codes)) == len(codes):  # one run per region, as laid out
                    runs = dict(zip(codes, zip(starts.tolist(), ends.tolist(), strict=True), strict=True))
            self._runs, self._runs_key = runs, key
        return self._runs

    def select(self, filters: dict[str, list[str]]) -> tuple[np.ndarray, np.ndarray]:
        """(filter_mask(filters), its rows in order). A region filter reads only its regions' runs
        of the clustered rows and the rows past them, not every row (~25k instead of 1M)."""
        runs = self._region_runs() if filters.get("region") else None
        if runs is None:
            mask = self.filter_mask(filters)
            return mask, np.flatnonzero(mask)
        c = min(self.clustered, self.n)
        found = (self.value_code["region"].get(lexical.filter_value(v)) for v in filters["region"])
        spans = sorted(runs[code] for code in {f for f in found if f is not None} if code in runs)
        cand = np.concatenate([np.arange(lo, hi) for lo, hi in spans] + [np.arange(c, self.n)])
        keep = self.alive[cand]
        for field, values in filters.items():
            found = (self.value_code[field].get(lexical.filter_value(v)) for v in values)
            codes = [f for f in found if f is not None]
            if not codes:
                keep[:] = False
                break
            col = self.codes[field][cand]
            keep &= col == codes[0] if len(codes) == 1 else np.isin(col, codes)
        rows = cand[keep]
        mask = np.zeros(self.n, dtype=bool)
        mask[rows] = True
        return mask, rows

    def _postings(self, tid: int, span: tuple[int, int] | None = None):
        """(rows, tfs, in_span) parts of one term: the base column and the delta column. Given a
        span of the base's clustered rows, only the base rows in it (in_span True) and those past
        the clustered ones (a column's rows are sorted, so both are slices)."""
        if self.base_csc is not None and tid < self.base_csc.n_terms:
            lo, hi = int(self.base_csc.indptr[tid]), int(self.base_csc.indptr[tid + 1])
            if span is None:
                if hi > lo:
                    yield self.base_csc.rows[lo:hi], self.base_csc.tfs[lo:hi], False
            elif hi > lo:
                col = self.base_csc.rows[lo:hi]
                # keys of the column's own dtype: mixed dtypes make numpy cast (copy) the whole column
                keys = np.array((span[0], span[1], self.clustered), dtype=col.dtype)
                cuts = lo + np.searchsorted(col, keys)
                for a, b, in_span in ((int(cuts[0]), int(cuts[1]), True), (int(cuts[2]), hi, False)):
                    if b > a:
                        yield self.base_csc.rows[a:b], self.base_csc.tfs[a:b], in_span
        if self.delta:
            if self._delta_csc is None:
                self._delta_csc = _csc(_concat_blocks(self.delta, self.base.rows), len(self.term_id))
            d = self._delta_csc
            if tid < d.n_terms:
                lo, hi = d.indptr[tid], d.indptr[tid + 1]
                if hi > lo:
                    yield d.rows[lo:hi] + self.base.rows, d.tfs[lo:hi], False

    def carries(self, term: str, mask: np.ndarray | None = None, rows: np.ndarray | None = None) -> bool:
        """Whether any live row (in `mask`, when given; `rows`: its rows in order) holds `term`."""
        tid = self.term_id.get(term)
        if tid is None or tid >= self.df.shape[0] or self.df[tid] <= 0:
            return False
        allowed = self.alive[: self.n] if mask is None else mask
        if mask is not None and rows is not None and self.clustered:
            span: tuple[int, int] | None = self._rows_span(rows)[0]
        else:
            span = self._base_span(mask) if mask is not None else None
        return any(bool(allowed[rows].any()) for rows, _, _ in self._postings(tid, span))

    def _base_span(self, mask: np.ndarray | None) -> tuple[int, int] | None:
        """[first, last + 1) of the clustered base rows a mask allows: rows are laid out by region
        (then brewery) at each compaction, so a filter on them allows one narrow range of them, and
        a posting list is cut to it (plus the rows merged since) before its rows are looked up in
        the mask."""
        b = min(self.clustered, self.base.rows)
        if mask is None or not b:
            return None
        part = mask[:b]
        first = int(part.argmax())
        if not part[first]:
            return (0, 0)
        return first, b - int(part[::-1].argmax())

    def _rows_span(self, rows: np.ndarray) -> tuple[tuple[int, int], bool]:
        """_base_span of the mask whose rows (sorted) are given, read from them in O(log n); and
        whether every row of that span is in them (then a posting list cut to it needs no mask)."""
        b = min(self.clustered, self.base.rows)
        k = int(np.searchsorted(rows, b))
        if not k:
            return (0, 0), True
        lo, hi = int(rows[0]), int(rows[k - 1]) + 1
        return (lo, hi), hi - lo == k

    def bm25(self, terms: list[str], mask: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
        """BM25 for the query's distinct terms, over all n rows; only rows in `mask` (default: the
        live ones) are scored, the rest are 0. Statistics (df, average length) are over live rows,
        so a filter changes which rows are scored, never their score. `rows`, when given, are the
        mask's rows in order (np.flatnonzero(mask)): they say which posting lists' parts need no
        look-up in the mask."""
        scores = np.zeros(self.n, dtype=np.float32)
        self._bm25_into(scores, terms, mask, rows)
        return scores

    def bm25_rows(self, terms: list[str], mask: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """bm25(terms, mask, rows)[rows], without a fresh array over all n rows per query (at 1M
        rows, zeroing 4 MB cost more than scoring a region): the scores go into a scratch array
        that only rows in `rows` are written to, and that is zeroed back at them."""
        with self.lock:
            if self._scratch.shape[0] < self.n:
                self._scratch = np.zeros(self.cap, dtype=np.float32)
            scratch = self._scratch[: self.n]
            try:
                self._bm25_into(scratch, terms, mask, rows)
                return scratch[rows]
            finally:
                scratch[rows] = 0.0

    def _bm25_into(
        self, scores: np.ndarray, terms: list[str], mask: np.ndarray | None, rows: np.ndarray | None
    ) -> None:
        if not self.n_alive:
            return
        allowed = self.alive[: self.n] if mask is None else mask
        every_row = mask is None and self.n_alive == self.n  # nothing to drop from a posting list
        pure = False  # every clustered row in the span passes the mask
        span: tuple[int, int] | None
        if mask is not None and rows is not None and self.clustered:
            span, pure = self._rows_span(rows)
        else:
            span = self._base_span(mask)
        avgdl = max(self.total_len / self.n_alive, 1e-6)
        for term in dict.fromkeys(terms):
            tid = self.term_id.get(term)
            if tid is None or self.df[tid] <= 0:
                continue
            df = int(self.df[tid])
            idf = math.log(1.0 + (self.n_alive - df + 0.5) / (df + 0.5))
            for part, tf, in_span in self._postings(tid, span):
                if not (every_row or (pure and in_span)):
                    keep = allowed[part]
                    part, tf = part[keep], tf[keep]
                if part.shape[0]:
                    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * self.doclen[part] / avgdl)
                    scores[part] += idf * tf * (BM25_K1 + 1.0) / (tf + norm)  # rows are distinct per part

    def matched_values(self, query: str) -> dict[str, set[int]]:
        """Codes of brand/brewery/region values the query names, in its script or in romaji."""
        q = normalize(query)
        q_rom = romaji_of(q)
        out: dict[str, set[int]] = {}
        subs = {q[i:j] for i in range(len(q)) for j in range(i + 2, min(len(q), i + 32) + 1)}
        subs.add(q.strip())
        rom_subs = {q_rom[i:j] for i in range(len(q_rom)) for j in range(i + 4, min(len(q_rom), i + 40) + 1)}
        for field in ("brand_name", "brewery", "region"):
            codes = self.value_code[field]
            found = {codes[s] for s in subs if s in codes}
            rom = self.value_romaji[field]
            for s in rom_subs:
                hit = rom.get(s)
                if hit:
                    found |= hit
            if found:
                out[field] = found
        return out
