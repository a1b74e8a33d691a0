"""A search process's in-memory view of one collection, kept in step with the shared store.

Why in memory: at 100k chunks a filtered query must answer in a few milliseconds. Chroma's own
`where` filter costs 37-82 ms there; Redis postings for Japanese bigrams run to tens of thousands of
entries per common term. Here a filter is a comparison on an int array (0.2 ms at 100k), BM25 is
a few sparse column reads, and dense similarity is one matrix-vector product over the rows that
pass the filter (exact, so a filtered query never misses a matching item the way a post-filtered
ANN result can).

Why it never goes stale: `sync()` runs before every query. It reads the collection's change
counter in Redis (pipelines.lexical) and, when it moved, applies exactly the chunks changed since
the last sync. A search that starts after an ingest or delete returned sees it, in every process
on every host. A cold process loads the whole collection once (about a second per 100k chunks
with vectors in Redis).

Layout: rows are append-only; an updated chunk gets a new row and its old row is marked dead, so
readers never see a half-written row. BM25 postings live in a CSC matrix for the rows present at
the last rebuild plus a small per-term delta for newer rows; the matrix is rebuilt when the delta
or the share of dead rows grows (amortised, in the syncing process only).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from typing import Callable

import numpy as np
import orjson
import redis
from scipy import sparse

from pipelines import lexical
from pipelines.tokenize_ja import TOKENIZER_VERSION, normalize, romaji_of

log = logging.getLogger("yana.search_index")

CODE_FIELDS = ("category", "region", "brewery", "brand_name")
BM25_K1, BM25_B = 1.2, 0.75
_DELTA_MAX_ROWS = 2048  # rows held outside the CSC matrix before it is rebuilt
_BULK_ROWS = 512  # a sync applying more rows than this rebuilds the matrix instead of the delta
_FETCH_BATCH = 2000

VectorFetcher = Callable[[list[str]], dict[str, list[float]]]


def _raw_client(r: redis.Redis) -> redis.Redis:
    """A client on the same server that returns bytes (vectors are binary)."""
    pool = r.connection_pool
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
    """The fields a hit shows (seed 000 /v1/chat hits), from a chunk's metadata."""
    feats = md.get("label_features")
    if isinstance(feats, str):
        from pipelines.labels import normalise_features

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
        "label_features": list(feats or []),
        "file_path": str(md.get("file_path") or ""),
        "source": str(md.get("source") or ""),
        "phash": str(md.get("phash") or ""),
        "ingested_at": str(md.get("ingested_at") or ""),
    }


class LiveIndex:
    """All chunks of one collection: vectors, BM25 postings, filter codes, hit fields."""

    def __init__(self, collection: str):
        self.collection = collection
        self.lock = threading.RLock()
        self.seq = 0
        self.synced_at = 0.0
        self.n = 0
        self.cap = 0
        self.dim: int | None = None
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.hits: list[dict | None] = []
        self.texts: list[str] = []
        self.alive = np.zeros(0, dtype=bool)
        self.has_vec = np.zeros(0, dtype=bool)
        self.vecs = np.zeros((0, 0), dtype=np.float32)
        self.doclen = np.zeros(0, dtype=np.float32)
        self.ts = np.zeros(0, dtype=np.float64)
        self.codes = {f: np.zeros(0, dtype=np.int32) for f in CODE_FIELDS}
        self.value_code: dict[str, dict[str, int]] = {f: {} for f in CODE_FIELDS}
        self.value_romaji: dict[str, dict[str, set[int]]] = {f: defaultdict(set) for f in CODE_FIELDS}
        self.term_id: dict[str, int] = {}
        self.row_terms: list[np.ndarray] = []
        self.row_tfs: list[np.ndarray] = []
        self.base: sparse.csc_matrix | None = None
        self.base_rows = 0
        self.delta: dict[int, list[tuple[int, float]]] = defaultdict(list)
        self.delta_rows = 0
        self.n_alive = 0
        self.total_len = 0.0
        self.dead = 0

    # ---------------------------------------------------------------- sync with Redis
    def sync(self, r: redis.Redis, fetch_vectors: VectorFetcher | None = None) -> int:
        """Apply every change recorded since the last sync; returns the number of ids applied."""
        with self.lock:
            p = lexical.prefix(self.collection)
            if int(r.get(p + "seq") or 0) == self.seq:
                self.synced_at = time.time()
                return 0
            changed = r.zrangebyscore(p + "changes", f"({self.seq}", "+inf", withscores=True)
            if not changed:
                return 0
            # Every doc fetched below is at least as new as its change entry, so taking the
            # highest score seen as the new position loses no change (a later one shows up again).
            new_seq = int(max(score for _, score in changed))
            ids = [i for i, _ in changed]
            bulk = len(ids) > _BULK_ROWS
            raw = raw_client(r)
            missing_vec: list[str] = []
            for start in range(0, len(ids), _FETCH_BATCH):
                part = ids[start : start + _FETCH_BATCH]
                pipe = raw.pipeline(transaction=False)
                for id_ in part:
                    pipe.hmget(p + "doc:" + id_, "text", "terms", "tok", "meta", "vec")
                for id_, (text, terms, tok, meta, vec) in zip(part, pipe.execute()):
                    if meta is None:
                        self._remove(id_)
                    elif not self._upsert(id_, text, terms, tok, meta, vec, bulk):
                        missing_vec.append(id_)
            if missing_vec and fetch_vectors is not None:
                self._fill_vectors(missing_vec, fetch_vectors)
            self.seq = new_seq
            self.synced_at = time.time()
            if self.dead > max(1000, 0.3 * self.n):
                self._compact()
            elif bulk or self.delta_rows > _DELTA_MAX_ROWS:
                self._rebuild_postings()
            return len(ids)

    def _grow(self, need: int) -> None:
        if need <= self.cap:
            return
        cap = max(1024, self.cap * 2, need)
        def grown(a, fill=0):
            out = np.full((cap,) + a.shape[1:], fill, dtype=a.dtype)
            out[: self.n] = a[: self.n]
            return out
        self.alive, self.has_vec = grown(self.alive), grown(self.has_vec)
        self.doclen, self.ts = grown(self.doclen), grown(self.ts)
        self.codes = {f: grown(c, -1) for f, c in self.codes.items()}
        if self.dim is not None:
            self.vecs = grown(self.vecs)
        self.cap = cap

    def _code(self, field: str, value: str) -> int:
        v = lexical.filter_value(value)
        if not v:
            return -1
        codes = self.value_code[field]
        code = codes.get(v)
        if code is None:
            code = codes[v] = len(codes)
            if field != "category":
                rom = romaji_of(v)
                if len(rom) >= 4:
                    self.value_romaji[field][rom].add(code)
        return code

    def _remove(self, id_: str) -> None:
        row = self.row_of.pop(id_, None)
        if row is None or not self.alive[row]:
            return
        self.alive[row] = False
        self.n_alive -= 1
        self.total_len -= float(self.doclen[row])
        self.dead += 1
        self.hits[row] = None
        self.texts[row] = ""
        self.row_terms[row] = self.row_terms[row][:0]
        self.row_tfs[row] = self.row_tfs[row][:0]

    def _upsert(self, id_: str, text, terms, tok, meta, vec, bulk: bool) -> bool:
        """Add a chunk as a new row (its old row, if any, dies). False when it has no vector."""
        self._remove(id_)
        text = (text or b"").decode()
        if (tok or b"").decode() == TOKENIZER_VERSION and terms:
            tf_map = orjson.loads(terms)
        else:  # indexed by another tokenizer version: re-tokenize the stored text
            tf_map = lexical.terms_of(text)
        md = orjson.loads(meta)
        row = self.n
        self._grow(row + 1)
        self.n += 1
        self.ids.append(id_)
        self.row_of[id_] = row
        self.hits.append(hit_fields(id_, md))
        self.texts.append(text)
        tids = np.fromiter((self.term_id.setdefault(t, len(self.term_id)) for t in tf_map), dtype=np.int32, count=len(tf_map))
        tfs = np.fromiter(tf_map.values(), dtype=np.float32, count=len(tf_map))
        self.row_terms.append(tids)
        self.row_tfs.append(tfs)
        if not bulk:
            for t, f in zip(tids.tolist(), tfs.tolist()):
                self.delta[t].append((row, f))
            self.delta_rows += 1
        length = float(tfs.sum())
        self.doclen[row] = length
        self.total_len += length
        self.ts[row] = float(md.get("ingested_at_ts") or 0.0)
        for f in CODE_FIELDS:
            self.codes[f][row] = self._code(f, md.get(f) or "")
        self.alive[row] = True
        self.n_alive += 1
        if vec:
            self._set_vec(row, np.frombuffer(vec, dtype=np.float16).astype(np.float32))
            return True
        self.has_vec[row] = False
        return False

    def _set_vec(self, row: int, v: np.ndarray) -> None:
        if self.dim is None:
            self.dim = int(v.shape[0])
            self.vecs = np.zeros((self.cap, self.dim), dtype=np.float32)
        if v.shape[0] != self.dim:
            log.warning("vector of another dimension ignored", extra={"collection": self.collection})
            return
        norm = float(np.linalg.norm(v)) or 1.0
        self.vecs[row] = v / norm
        self.has_vec[row] = True

    def _fill_vectors(self, ids: list[str], fetch: VectorFetcher) -> None:
        try:
            got = fetch(ids)
        except Exception:  # Chroma unreachable: rows stay without a dense score until re-indexed
            log.warning("cannot fetch vectors from the vector store", exc_info=True)
            return
        for id_, emb in got.items():
            row = self.row_of.get(id_)
            if row is not None and emb is not None:
                self._set_vec(row, np.asarray(emb, dtype=np.float32))

    def _rebuild_postings(self) -> None:
        lengths = np.fromiter((len(t) for t in self.row_terms), dtype=np.int64, count=self.n)
        indptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.concatenate(self.row_terms) if self.n else np.zeros(0, dtype=np.int32)
        data = np.concatenate(self.row_tfs) if self.n else np.zeros(0, dtype=np.float32)
        csr = sparse.csr_matrix((data, indices, indptr), shape=(self.n, max(1, len(self.term_id))))
        self.base = csr.tocsc()
        self.base_rows = self.n
        self.delta = defaultdict(list)
        self.delta_rows = 0

    def _compact(self) -> None:
        """Drop dead rows (renumbering the live ones) and rebuild the postings."""
        keep = np.flatnonzero(self.alive[: self.n])
        self.ids = [self.ids[i] for i in keep]
        self.hits = [self.hits[i] for i in keep]
        self.texts = [self.texts[i] for i in keep]
        self.row_terms = [self.row_terms[i] for i in keep]
        self.row_tfs = [self.row_tfs[i] for i in keep]
        n = len(keep)
        for name in ("alive", "has_vec", "doclen", "ts"):
            a = getattr(self, name)
            b = np.zeros_like(a)
            b[:n] = a[keep]
            setattr(self, name, b)
        for f, c in self.codes.items():
            b = np.full_like(c, -1)
            b[:n] = c[keep]
            self.codes[f] = b
        if self.dim is not None:
            v = np.zeros_like(self.vecs)
            v[:n] = self.vecs[keep]
            self.vecs = v
        self.n = n
        self.row_of = {id_: i for i, id_ in enumerate(self.ids)}
        self.dead = 0
        self._rebuild_postings()

    # ---------------------------------------------------------------- queries (hold self.lock)
    def filter_rows(self, filters: dict[str, list[str]]) -> np.ndarray:
        """Rows alive and matching every filter (values of one field are OR-ed)."""
        mask = self.alive[: self.n].copy()
        for field, values in filters.items():
            codes = [self.value_code[field].get(lexical.filter_value(v)) for v in values]
            codes = [c for c in codes if c is not None]
            if not codes:
                return np.zeros(0, dtype=np.int64)
            col = self.codes[field][: self.n]
            mask &= col == codes[0] if len(codes) == 1 else np.isin(col, codes)
        return np.flatnonzero(mask)

    def bm25(self, terms: list[str]) -> np.ndarray:
        """BM25 of every row (dead rows score 0) for the query's distinct terms."""
        scores = np.zeros(self.n, dtype=np.float32)
        if not self.n_alive:
            return scores
        avgdl = max(self.total_len / self.n_alive, 1e-6)
        alive = self.alive
        for term in dict.fromkeys(terms):
            tid = self.term_id.get(term)
            if tid is None:
                continue
            rows_parts, tf_parts = [], []
            if self.base is not None and tid < self.base.shape[1]:
                lo, hi = self.base.indptr[tid], self.base.indptr[tid + 1]
                rows_parts.append(self.base.indices[lo:hi])
                tf_parts.append(self.base.data[lo:hi])
            extra = self.delta.get(tid)
            if extra:
                rows_parts.append(np.fromiter((r for r, _ in extra), dtype=np.int32, count=len(extra)))
                tf_parts.append(np.fromiter((f for _, f in extra), dtype=np.float32, count=len(extra)))
            if not rows_parts:
                continue
            rows = np.concatenate(rows_parts)
            tf = np.concatenate(tf_parts)
            keep = alive[rows]
            rows, tf = rows[keep], tf[keep]
            df = rows.shape[0]
            if not df:
                continue
            idf = math.log(1.0 + (self.n_alive - df + 0.5) / (df + 0.5))
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * self.doclen[rows] / avgdl)
            scores[rows] += idf * tf * (BM25_K1 + 1.0) / (tf + norm)
        return scores

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
