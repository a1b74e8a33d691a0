"""THE search: hybrid Japanese-aware retrieval over the active collection (behind /v1/search).

The HTTP route, the chat fast path, the think loop and MCP all call `search()`.

Ranking (mode="hybrid"), over the rows that pass the filters:
  score = W_LEX * minmax(BM25) + (1 - W_LEX) * minmax(cosine) + meta_bonus
  - BM25 over the terms of pipelines.search.tokenizer (CJK bigrams + romaji words + romaji trigrams),
    from the shared index (pipelines.search.lexical) mirrored in memory (pipelines.search.index).
  - cosine of the query embedding (the collection's own model) with every filtered row: exact.
  - min-max is taken over the whole filtered set, so a row's score does not depend on which page
    is asked for: pages are slices of one total order (score desc, then id), with no overlap or gap.
  - meta_bonus (metadata matches are weighted, but capped so they cannot run away): the query names the hit's brand (+0.15),
    brewery (+0.10) or region (+0.05), in its script or in romaji; capped at META_BONUS_CAP so
    metadata cannot outvote the text.
  W_LEX and the bonus weights were chosen on the evaluation set (bench/search_eval.py, seed 0) and
  checked on a held-out one (seed 1).

Near-duplicates are suppressed while walking the ranking from the top: another chunk of a
document already shown, a pHash within PHASH_THRESHOLD bits of one already shown, or a vector with
cosine >= 0.99 to one already shown *for the same brand and product* (distinct products of a brand
can be 0.998 apart, so vectors alone would hide real labels).

Not found: the glossary concepts the query names (pipelines.search.glossary: 泡盛, 沖縄, dry, Otaru ...)
that no row passing the filters carries are listed in `not_found` (canonical forms), so a caller
can say "there is none" instead of presenting the nearest hits as if they matched. A form with
several meanings ("sparkling": 発泡 or 炭酸) counts as found when any of them is.

sort_by="recency" with a query orders the RECENCY_POOL most relevant rows newest first; without a
query both sorts browse the filtered rows newest first. `k` is the page size when `page_size` is
not given (the chat/think top-k); `page_size` (<= 50) pages through the same order.

Cost: the query embedding runs in a helper thread while the index syncs, the filter is applied
and BM25 scores the filtered rows (into a scratch array, not a fresh one over every row); what is
left after it is one matrix-vector product over the filtered rows (memory-bound; BLAS stays at OMP/OPENBLAS_NUM_THREADS=1, a second thread made the
tail latency worse on a shared machine) and the fusion. bench/search_latency.py measures it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from pipelines.embedding.backends import get_embedder, resolve_default_model
from pipelines.labels import schema as labels
from pipelines.neardup import hashing
from pipelines.search import collections as vector_index
from pipelines.search import glossary as glossary_mod
from pipelines.search import lexical
from pipelines.search import snapshot as search_snapshot
from pipelines.search.index import LiveIndex
from pipelines.search.tokenizer import DEFAULT_SCHEME, GLOSS_PREFIX, NO_GLOSSARY, normalize, tokenize
from yana.clients import get_chroma, get_redis
from yana.errors import ErrorCode, YanaError, bad_request, internal
from yana.settings import get_settings

log = logging.getLogger("yana.search")

SORTS = ("relevance", "recency")
MODES = ("hybrid", "lexical", "dense")
FILTER_FIELDS = lexical.FILTER_FIELDS
K_MAX, PAGE_SIZE_MAX, MAX_DEPTH, QUERY_MAX_CHARS = 20, 50, 1000, 1000
META_BONUS = {"brand_name": 0.15, "brewery": 0.10, "region": 0.05}
META_BONUS_CAP = 0.25
RECENCY_POOL = 100
DUP_COSINE = 0.99
_MAX_LIVE_INDEXES = 3
_BACKFILL_CHECK_S = 10.0


# ------------------------------------------------------------------ process-wide state
_indexes: OrderedDict[str, LiveIndex] = OrderedDict()
_indexes_lock = threading.Lock()
_collection_model: dict[str, tuple[str, int]] = {}
_backfill_checked: dict[str, float] = {}


def live_index(collection: str, r=None, chroma=None) -> LiveIndex:
    """This process's index of `collection`; a new one is mapped from the newest usable snapshot
    on this host (given r and chroma to check it against), else starts empty (the next sync
    loads it from Redis)."""
    idx = _indexes.get(collection)
    if idx is None:
        with _indexes_lock:  # one snapshot mapping per collection, not one per waiting request
            idx = _indexes.get(collection)
            if idx is None:
                idx = _indexes[collection] = _mapped(collection, r, chroma) or LiveIndex(collection)
                idx.after_compaction = _snapshot_after_compaction
                while len(_indexes) > _MAX_LIVE_INDEXES:  # an old collection after a re-embed
                    _indexes.popitem(last=False)
    _indexes.move_to_end(collection)
    return idx


def _snapshot_root() -> Path | None:
    s = get_settings()
    if not s.search_snapshots:
        return None
    return s.search_snapshot_dir or s.data_dir / "search-snapshots"


def _mapped(collection: str, r, chroma) -> LiveIndex | None:
    root = _snapshot_root()
    if root is None or r is None or chroma is None:
        return None
    try:
        model, dim = _model_dim(chroma, collection)
        epoch, seq = lexical.position(r, collection)
        if seq and epoch is None:
            epoch = lexical.ensure_epoch(r, collection)
        return search_snapshot.load(root, collection, search_snapshot.Expect(epoch, seq, model, dim))
    except Exception:  # no snapshot is only slower: the sync loads from Redis
        log.warning("search snapshot not mapped", exc_info=True, extra={"collection": collection})
        return None


def _maybe_snapshot(idx: LiveIndex, chroma, collection: str) -> None:
    """After a sync: have a snapshot written in the background when the index is far enough past
    the newest one (pipelines.search.snapshot.maybe_write; a cheap check otherwise)."""
    s = get_settings()
    root = _snapshot_root()
    if root is None:
        return
    search_snapshot.maybe_write(
        idx,
        root,
        _model_of(chroma, collection),
        min_changes=s.search_snapshot_min_changes,
        min_interval_s=s.search_snapshot_interval_s,
    )


def _snapshot_after_compaction(idx: LiveIndex) -> None:
    """A compaction (run in the background) lays the rows out anew: the snapshot that processes
    started later map should have that layout, so the check runs again once it is in place."""
    try:
        _maybe_snapshot(idx, get_chroma(), idx.collection)
    except Exception:  # a snapshot is only a faster start
        log.warning("search snapshot not written", exc_info=True, extra={"collection": idx.collection})


def _chroma_collection(chroma, name: str):
    return vector_index.open_collection(chroma, name)


def _model_dim(chroma, name: str) -> tuple[str, int]:
    got = _collection_model.get(name)
    if got is None:
        got = _collection_model[name] = vector_index.collection_model(_chroma_collection(chroma, name))
    return got


def _model_of(chroma, name: str) -> str:
    return _model_dim(chroma, name)[0]


@lru_cache(maxsize=1024)
def _query_vector(model: str, text: str) -> np.ndarray:
    return get_embedder(model).embed_queries([text])[0]


def _timed_query_vector(model: str, text: str) -> tuple[np.ndarray, float]:
    t = time.perf_counter()
    return _query_vector(model, text), (time.perf_counter() - t) * 1e3


_embed_pools: dict[int, ThreadPoolExecutor] = {}
_embed_pools_lock = threading.Lock()


def _embed_async(model: str, text: str) -> Future:
    """Embed the query in a helper thread (the engine releases the GIL), so the index sync, the
    filter and BM25 run meanwhile. One pool per process: a forked worker must not inherit one."""
    pool = _embed_pools.get(os.getpid())
    if pool is None:
        with _embed_pools_lock:
            pool = _embed_pools.get(os.getpid())
            if pool is None:
                pool = _embed_pools[os.getpid()] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-embed")
    return pool.submit(_timed_query_vector, model, text)


def _maybe_backfill(r, chroma, idx: LiveIndex) -> None:
    """A collection Chroma holds but this index never saw (filled before it existed, or Redis lost
    its data): index it from Chroma once, under a lock shared by all processes."""
    now = time.monotonic()
    if idx.n_alive or now - _backfill_checked.get(idx.collection, -1e9) < _BACKFILL_CHECK_S:
        return
    _backfill_checked[idx.collection] = now
    if lexical.count(r, idx.collection):
        return
    try:
        col = _chroma_collection(chroma, idx.collection)
        if not col.count():
            return
        lock = r.lock(lexical.prefix(idx.collection) + "backfill-lock", timeout=600, blocking_timeout=0)
        if lock.acquire(blocking=False):
            try:
                lexical.backfill_from_chroma(r, col)
            finally:
                lock.release()
    except YanaError:
        return


def _fetcher(chroma, name: str):
    def fetch(ids: list[str]) -> dict:
        got = _chroma_collection(chroma, name).get(ids=ids, include=["embeddings"])
        embs = got.get("embeddings")
        return {} if embs is None else dict(zip(got["ids"], embs, strict=True))

    return fetch


def warm(r=None, chroma=None) -> int:
    """Load the active collection into this process (API start-up); returns the chunks loaded."""
    r = r or get_redis()
    name = vector_index.active_name(r)
    if not name:  # nothing indexed yet: still load the model the first collection will use
        _query_vector(resolve_default_model(r), "warm-up")
        return 0
    chroma = chroma or get_chroma()
    _query_vector(_model_of(chroma, name), "warm-up")  # loads the embedding model too
    idx = live_index(name, r, chroma)
    with idx.lock:
        idx.sync(r, _fetcher(chroma, name))
        _maybe_snapshot(idx, chroma, name)
    return idx.n_alive


# ------------------------------------------------------------------ validation
def _validate(query_text, filters, k, sort_by, page, page_size, mode) -> tuple[str, dict[str, list[str]], int]:
    """(normalized query, clean filters, page size), or BAD_REQUEST naming the first bad argument."""
    if query_text is not None and not isinstance(query_text, str):
        raise bad_request("query_text must be a string")
    if query_text and len(query_text) > QUERY_MAX_CHARS:
        raise bad_request(f"query_text is longer than {QUERY_MAX_CHARS} characters")
    _check_paging(k, page, page_size)
    if sort_by not in SORTS:
        raise bad_request(f"sort_by must be one of {', '.join(SORTS)}")
    if mode not in MODES:
        raise bad_request(f"mode must be one of {', '.join(MODES)}")
    size = page_size or k
    if page * size > MAX_DEPTH:
        raise bad_request(f"page * page_size must be at most {MAX_DEPTH}")
    return normalize(query_text or "").strip(), _clean_filters(filters), size


def _check_paging(k, page, page_size) -> None:
    for name, v, hi in (("k", k, K_MAX), ("page_size", page_size if page_size is not None else 1, PAGE_SIZE_MAX)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise bad_request(f"{name} must be an integer in 1..{hi}")
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise bad_request("page must be an integer >= 1")


def _clean_filters(filters) -> dict[str, list[str]]:
    if filters is not None and not isinstance(filters, dict):
        raise bad_request("filters must be an object")
    clean: dict[str, list[str]] = {}
    for name, value in (filters or {}).items():
        if name not in FILTER_FIELDS:
            raise bad_request(f"unknown filter {name!r} (allowed: {', '.join(FILTER_FIELDS)})")
        values = value if isinstance(value, list) else [value]
        if not all(v is None or isinstance(v, str) for v in values):
            raise bad_request(f"filter {name!r} must be a string or a list of strings")
        values = [v for v in values if v and v.strip()]
        if values:  # "" or null means: no filter on this field (e.g. "brewery": "")
            clean[name] = values
    return clean


# ------------------------------------------------------------------ ranking helpers
def _minmax(x: np.ndarray) -> np.ndarray:
    if not x.size:
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def _ordered(idx: LiveIndex, rows: np.ndarray, key: np.ndarray, m: int) -> list[int]:
    """Positions (into rows) of the top m by key desc, ties broken by chunk id; boundary ties are
    all included so the order never depends on m."""
    n = rows.shape[0]
    if m < n:
        cut = np.partition(key, n - m)[n - m]  # the m-th largest key
        part = np.flatnonzero(key >= cut)
    else:
        part = np.arange(n)
    ids = idx.ids
    return sorted(part.tolist(), key=lambda i: (-float(key[i]), ids[rows[i]]))


def _hamming(a: str, b: str) -> int:
    """hashing.hamming, with a malformed stored hash counting as far apart."""
    try:
        return hashing.hamming(a, b)
    except ValueError:
        return 64


class _Dedup:
    def __init__(self, idx: LiveIndex, phash_bits: int):
        self.idx, self.phash_bits = idx, phash_bits
        self.docs: set[str] = set()
        self.phashes: list[str] = []
        self.products: dict[tuple[str, str], list[int]] = {}

    def duplicate_of_kept(self, row: int) -> bool:
        h = self.idx.hit(row)
        if h["doc_id"] in self.docs:
            return True
        if h["phash"] and any(_hamming(h["phash"], p) <= self.phash_bits for p in self.phashes):
            return True
        same = self.products.get((h["brand_name"], h["product_name"])) if h["product_name"] else None
        if same and self.idx.has_vec[row]:
            sims = self.idx.vectors(same) @ self.idx.vectors(row)
            if float(sims.max()) >= DUP_COSINE:
                return True
        self.docs.add(h["doc_id"])
        if h["phash"]:
            self.phashes.append(h["phash"])
        if h["product_name"] and self.idx.has_vec[row]:
            self.products.setdefault((h["brand_name"], h["product_name"]), []).append(row)
        return False


def _empty(debug: bool, reason: str, q: str = "") -> dict:
    missing = [m.concepts[0] for m in glossary_mod.get().matches(q)] if q else []
    return {
        "hits": [],
        "next_page": None,
        "not_found": list(dict.fromkeys(missing)),
        "debug": {"mode": reason, "timing_ms": {}} if debug else {},
    }


# ------------------------------------------------------------------ the stages of a search
@dataclass
class _Query:
    """What is asked, with the query embedding already under way in a helper thread."""

    text: str  # normalized; "" browses
    terms: list[str]  # BM25 terms ([] in dense mode)
    mode: str
    vector: Future | None  # (vector, embed_ms), None in lexical mode or without a query


@dataclass
class _Scored:
    """Candidate rows (index rows passing the filters) and their scores, position for position."""

    rows: np.ndarray
    score: np.ndarray  # float64: what the ranking orders by
    lex: np.ndarray | None = None
    dense: np.ndarray | None = None
    bonus: np.ndarray | None = None
    matched: dict[str, set[int]] = field(default_factory=dict)  # field -> value codes the query names

    def take(self, positions: np.ndarray) -> _Scored:
        def part(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[positions]

        return _Scored(
            self.rows[positions],
            self.score[positions],
            part(self.lex),
            part(self.dense),
            part(self.bonus),
            self.matched,
        )


@dataclass
class _Ranked:
    scored: _Scored
    kept: list[int]  # positions into scored, in display order, up to one past the asked page
    suppressed: int  # near-duplicates skipped on the way
    filtered: int | None  # rows passing the filters; None when only the recency pool was ranked


def _plan(q: str, mode: str, chroma, collection: str, use_glossary: bool = True) -> _Query:
    vector = _embed_async(_model_of(chroma, collection), q) if q and mode != "lexical" else None
    scheme = DEFAULT_SCHEME if use_glossary else NO_GLOSSARY
    return _Query(q, tokenize(q, scheme, broader=False) if q and mode != "dense" else [], mode, vector)


def _not_found(idx: LiveIndex, q: str, filters: dict[str, list[str]]) -> list[str]:
    """The glossary concepts the query names that no row passing the filters carries."""
    missing: list[str] = []
    matches = glossary_mod.get().matches(q) if q else []
    if not matches:
        return missing
    mask, rows = idx.select(filters) if filters else (None, None)
    for m in matches:
        if not any(idx.carries(GLOSS_PREFIX + c, mask, rows) for c in m.concepts):
            missing.append(m.concepts[0])
    return list(dict.fromkeys(missing))


def _sync(idx: LiveIndex, r, chroma, collection: str, timing: dict[str, float]) -> None:
    t = time.perf_counter()
    idx.sync(r, _fetcher(chroma, collection))
    if not idx.n_alive:
        _maybe_backfill(r, chroma, idx)
        idx.sync(r, _fetcher(chroma, collection))
    _maybe_snapshot(idx, chroma, collection)
    timing["sync_ms"] = (time.perf_counter() - t) * 1e3


def _score(idx: LiveIndex, query: _Query, filters: dict[str, list[str]], w_lex: float, timing: dict) -> _Scored:
    """BM25, cosine and metadata bonus of every row passing the filters, fused by the mode."""
    t = time.perf_counter()
    mask, rows = idx.select(filters)
    whole = rows.shape[0] == idx.n  # every row passes (no filter, no dead rows): no gather needed

    def pick(a: np.ndarray) -> np.ndarray:
        return a[: idx.n] if whole else a[rows]

    sc = _Scored(rows, np.zeros(rows.shape[0], dtype=np.float64))
    if query.text:
        if query.mode != "dense":
            sc.lex = pick(idx.bm25(query.terms)) if whole else idx.bm25_rows(query.terms, mask, rows)
        if query.mode == "hybrid":
            sc.matched = idx.matched_values(query.text)
            sc.bonus = _meta_bonus(idx, sc.matched, pick, rows.shape[0])
        if query.vector is not None:
            sc.dense = _cosine(idx, rows, pick, query.vector, timing)
        sc.score = _fuse(sc, query.mode, w_lex)
    timing["score_ms"] = (time.perf_counter() - t) * 1e3
    return sc


def _meta_bonus(idx: LiveIndex, matched: dict[str, set[int]], pick, n: int) -> np.ndarray:
    bonus = np.zeros(n, dtype=np.float32)
    for field_name, codes in matched.items():
        bonus += META_BONUS[field_name] * np.isin(pick(idx.codes[field_name]), list(codes))
    return np.minimum(bonus, META_BONUS_CAP)


def _cosine(idx: LiveIndex, rows: np.ndarray, pick, vector: Future, timing: dict) -> np.ndarray:
    qvec, timing["embed_ms"] = vector.result()  # already done: search() waited outside the lock
    if idx.dim is not None and idx.dim != qvec.shape[0]:
        raise YanaError.of(
            ErrorCode.MODEL_MISMATCH, f"{idx.collection} holds {idx.dim}-d vectors, the query is {qvec.shape[0]}-d"
        )
    if idx.dim is None:
        return np.zeros(rows.shape[0], dtype=np.float32)
    if rows.shape[0] * 4 < idx.n:  # a selective filter: only its rows
        return idx.cosine(qvec, rows)
    return pick(idx.cosine(qvec))  # gathering most rows would copy the matrix: one product, then pick


def _fuse(sc: _Scored, mode: str, w_lex: float) -> np.ndarray:
    if mode == "lexical" and sc.lex is not None:
        return sc.lex.astype(np.float64)
    if mode == "dense" and sc.dense is not None:
        return sc.dense.astype(np.float64)
    if sc.lex is None or sc.dense is None or sc.bonus is None:
        raise internal(f"search mode {mode} is missing one of its signals")
    fused: np.ndarray = w_lex * _minmax(sc.lex) + (1.0 - w_lex) * _minmax(sc.dense) + sc.bonus
    return fused.astype(np.float64)


def _rank(idx: LiveIndex, sc: _Scored, *, recency: bool, browse: bool, end: int, phash_bits: int, timing) -> _Ranked:
    """Walk the total order from the top, skipping near-duplicates, until one row past `end`."""
    t = time.perf_counter()
    filtered: int | None = int(sc.rows.shape[0])
    if recency and not browse:  # the most relevant RECENCY_POOL, newest first
        sc = sc.take(np.asarray(_ordered(idx, sc.rows, sc.score, RECENCY_POOL), dtype=np.int64))
        filtered = None
    rows = sc.rows
    order_key = idx.ts[rows] if recency else sc.score
    dedup = _Dedup(idx, phash_bits)
    kept: list[int] = []
    suppressed = 0
    m = min(rows.shape[0], end * 2 + 20)  # rank a few more than asked; widen only when duplicates ate them
    done = 0
    while True:
        order = _ordered(idx, rows, order_key, m)
        for i in order[done:]:
            if dedup.duplicate_of_kept(int(rows[i])):
                suppressed += 1
            else:
                kept.append(i)
                if len(kept) > end:
                    break
        done = len(order)
        if len(kept) > end or m >= rows.shape[0]:
            break
        m = min(rows.shape[0], m * 4)
    timing["order_ms"] = (time.perf_counter() - t) * 1e3
    return _Ranked(sc, kept, suppressed, filtered)


_HIT_KEYS = ("id", "category", "brand_name", "product_name", "brewery", "region", "file_path")


def _present(idx: LiveIndex, ranked: _Ranked, page: int, size: int, debug: bool) -> tuple[list[dict], list[dict]]:
    """The asked page's hits and, with debug, each hit's signals."""
    sc, end = ranked.scored, page * size
    hits, dbg_hits = [], []
    for i in ranked.kept[end - size : end]:
        row = int(sc.rows[i])
        h = idx.hit(row)
        hit = {key: h[key] for key in _HIT_KEYS}
        hit["label_features"] = list(h["label_features"])
        hit["score"] = round(float(sc.score[i]), 6)
        hit["chunk_id"] = h["chunk_id"]
        hit["source"] = h["source"]
        # A label's image, from any API host whatever the blob store (file_path is this host's disk).
        hit["image_url"] = labels.image_url(h["id"]) if h["source"] == "label" else None
        hit["ingested_at"] = h["ingested_at"]
        hit["text"] = idx.text(row)
        hits.append(hit)
        if debug:
            dbg_hits.append(
                {
                    "id": h["id"],
                    "score": hit["score"],
                    "dense": _signal(sc.dense, i),
                    "lexical": _signal(sc.lex, i),
                    "meta_bonus": _signal(sc.bonus, i),
                }
            )
    return hits, dbg_hits


def _signal(values: np.ndarray | None, i: int) -> float | None:
    return None if values is None else round(float(values[i]), 6)


def _formula(mode: str, q: str, browse: bool, w_lex: float) -> str:
    if mode == "hybrid" and q:
        return f"{w_lex}*minmax(bm25) + {1 - w_lex:.2f}*minmax(cosine) + meta_bonus(cap {META_BONUS_CAP})"
    return "recency" if browse else mode


# ------------------------------------------------------------------ THE search
def search(
    query_text: str | None,
    filters: dict | None = None,
    k: int = 5,
    sort_by: str = "relevance",
    page: int = 1,
    page_size: int | None = None,
    *,
    debug: bool = True,
    mode: str = "hybrid",
    use_glossary: bool = True,
    collection: str | None = None,
    r=None,
    chroma=None,
) -> dict:
    """Ranked, filtered, paged hits of the active collection (or `collection`).

    Returns {hits: [{id, category, brand_name, product_name, brewery, region, label_features,
    file_path, score, ...}], next_page: int | None, not_found: [concept], debug: {...}}. Raises
    YanaError BAD_REQUEST on bad arguments. `mode` "lexical"/"dense" rank by one signal alone, and
    use_glossary=False leaves the glossary's terms out of the query (evaluation).
    """
    t0 = time.perf_counter()
    q, flt, size = _validate(query_text, filters, k, sort_by, page, page_size, mode)
    r = r or get_redis()
    if collection is None:
        collection = vector_index.active_name(r)
    if not collection:
        return _empty(debug, "no_collection", q)
    chroma = chroma or get_chroma()
    s = get_settings()
    timing: dict[str, float] = {}
    query = _plan(q, mode, chroma, collection, use_glossary)
    browse = not q
    recency = sort_by == "recency" or browse

    idx = live_index(collection, r, chroma)
    if query.vector is not None:
        # Catch up while the query is embedded, then wait for the embedding WITHOUT the index
        # lock: a slow model (or the thread of a request that already timed out) must not hold
        # every other search of this process behind it.
        with idx.lock:
            idx.sync(r, _fetcher(chroma, collection))
        t_wait = time.perf_counter()
        try:
            embedded = query.vector.result(timeout=s.search_embed_timeout_s)
        except FutureTimeout as exc:
            raise YanaError.of(
                ErrorCode.EMBED_TIMEOUT, f"the query embedding took longer than {s.search_embed_timeout_s}s"
            ) from exc
        timing["embed_wait_ms"] = (time.perf_counter() - t_wait) * 1e3
        query.vector = Future()
        query.vector.set_result(embedded)  # scoring reads it without waiting, under the lock
    with idx.lock:
        _sync(idx, r, chroma, collection, timing)
        scored = _score(idx, query, flt, s.search_lexical_weight, timing)
        ranked = _rank(
            idx, scored, recency=recency, browse=browse, end=page * size, phash_bits=s.phash_threshold, timing=timing
        )
        hits, dbg_hits = _present(idx, ranked, page, size, debug)
        not_found = _not_found(idx, q, flt)
        seq = idx.seq

    out: dict = {
        "hits": hits,
        "next_page": page + 1 if len(ranked.kept) > page * size else None,
        "not_found": not_found,
        "debug": {},
    }
    if debug:
        top = dbg_hits[0] if dbg_hits else {}
        timing["total_ms"] = (time.perf_counter() - t0) * 1e3
        out["debug"] = {
            "mode": "browse" if browse else mode,
            "score": top.get("score"),
            "meta_bonus": top.get("meta_bonus"),
            "formula": _formula(mode, q, browse, s.search_lexical_weight),
            "hits": dbg_hits,
            "matched": {f: sorted(_value_names(idx, f, c)) for f, c in scored.matched.items()},
            "filtered": ranked.filtered,
            "suppressed": ranked.suppressed,
            "collection": collection,
            "index_seq": seq,
            "timing_ms": {key: round(v, 3) for key, v in timing.items()},
        }
    return out


def _value_names(idx: LiveIndex, field_name: str, codes: set[int]) -> list[str]:
    names = {code: value for value, code in idx.value_code[field_name].items()}
    return [names[c] for c in codes if c in names]


def search_or_alternatives(query_text: str | None, filters: dict | None = None, k: int = 5, **kw) -> dict:
    """THE search for a conversation (chat): when the query names something no label has
    (`not_found`), the hits are the nearest labels of the catalogue category the glossary names as
    nearest to it (泡盛 -> sake, メロン -> juice), unless the caller filtered the category already;
    `alternatives_from` then says which filter the alternatives come from."""
    res = search(query_text, filters, k=k, **kw)
    missing = res.get("not_found") or []
    category = glossary_mod.get().near_category(missing) if missing else ""
    if category and not (filters or {}).get("category"):
        alt = search(query_text, {**(filters or {}), "category": category}, k=k, **kw)
        if alt["hits"]:
            res = {**alt, "not_found": missing, "alternatives_from": {"category": category}}
    return res
