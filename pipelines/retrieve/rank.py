"""The deterministic hybrid extractor: chunks → BM25 + dense cosine → fused → one passage per document.

With vectors (the API's path) the fusion is linear (issue 25; chosen on the bench's dev halves of
the en, ja and pyfaq sets over reciprocal-rank fusion, which found as many top-3 answers but fewer
first ones): a chunk's dense value — its own cosine (CONTEXT_SELF_WEIGHT) + the cosines of its two
neighbour pairs + SENTENCE_WEIGHT x its best sentence's cosine — standardised over the request's
chunks that have a vector (mean 0, sd 1; a chunk without one gets the lowest standardised value),
plus LINEAR_LEX_WEIGHT x its BM25 score over the request's best BM25 score. Score = the logistic of
that value: in 0..1, ordered as the ranking, the same for the same input. Without vectors (no model,
or mode "lexical" with `fuse`) the reciprocal-rank fusion below ranks lexically.

Reciprocal-rank fusion (`fuse`, used without vectors):
Ranking, per chunk of the request's documents:
  * BM25 (k1 1.2, b 0.75) over the request's chunks, query terms weighted by their IDF in the
    request (a term in every chunk says nothing) — terms from pipelines.retrieve.terms;
  * dense: cosine of the query and the chunk's embedding, counted CONTEXT_SELF_WEIGHT times, plus
    the cosines of the two "neighbour pair" embeddings it belongs to (the chunk joined with the one
    before, and with the one after; its own cosine stands in for a missing pair), so a paragraph that
    answers without naming its topic is still found (chunks without a vector yet: lexical only);
  * fused by reciprocal rank (k = RRF_K) of the two lists plus a bonus when the chunk contains the
    query's numbers and names (a cheap cross-check that both lists miss when they paraphrase);
  * neighbouring context: a chunk inherits NEIGHBOUR_WEIGHT of its best neighbour's fused value
    (adjacent chunks of the document, or adjacent documents in request order when each document is
    one paragraph), since an answer's topic is often named in the paragraph next to it.
A document's score is its best chunk's. Its evidence is that chunk's best sentence by dense cosine
(when the chunk was shortlisted for sentence evidence) and its best sentence by IDF-weighted query
terms — one span, or two when they are apart; the passage around it is chosen by
pipelines.retrieve.passage ("chunk": the chunk, grown to whole sentences around the evidence within
max_chunk_chars; "window": the best window of up to three sentences; "document": all of it).
Scores are the fused value over its largest possible value, so 0..1 and the same for the same input.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import numpy as np

from pipelines.retrieve import passage as P
from pipelines.retrieve import terms as T
from pipelines.retrieve.chunks import Chunk, byte_span, chunk_document

RRF_K = 10
LEX_WEIGHT = 0.2  # dense is the stronger list on English prose (chosen on the bench dev half)
DENSE_WEIGHT = 1.0
CROSS_WEIGHT = 0.0  # number/name agreement bonus: no gain on the bench dev half, so off by default
NEIGHBOUR_WEIGHT = 0.15
# A chunk's own cosine counts 3x, its two neighbour-pair cosines once each: chosen on the bench's dev
# half (1, 1.5, 2, 3, 4 tried; 3 best on English dev, 2 and 3 tie on Japanese dev; 2 vs 3 is within
# one question, and the int8 encoder's batch-dependent vectors move that much).
CONTEXT_SELF_WEIGHT = 1.0  # linear fusion: own + two pair cosines + best sentence, equal weights
# Sentence evidence: for the SENTENCE_TOP_N best chunks of a first fusion, the cosine of the chunk's
# best sentence (windows of SENTENCE_SPAN sentences) is added SENTENCE_WEIGHT times to its dense
# value (the others add their own cosine instead), so a chunk with one answering sentence among
# others is not diluted by them. Chosen on the bench's dev halves (weights 0.5-5 and spans 1-2
# tried; 1.5-2 and span 1 best in both languages). The shortlist is for speed (a warm request
# reads the vectors of its sentences): the dev halves rank the same with every sentence scored.
SENTENCE_WEIGHT = 1.0
# Linear fusion (dev halves of en/ja/pyfaq: BM25-over-max weights 0.1-1.3, self 1-4, sentence 0-4,
# neighbour 0-0.3 tried; 0.3 / 1 / 1 / 0 best on the sum of hit@1).
LINEAR_LEX_WEIGHT = 0.3
SENTENCE_SPAN = 1
SENTENCE_TOP_N = 40
# A cold request (vectors missing from the cache, a time budget): the chunks may use at most
# COLD_CHUNK_SHARE of the embedding time, then the neighbour pairs and sentences of the
# COLD_LEADERS best chunks so far are embedded before anything else (`_leaders_first`).
COLD_CHUNK_SHARE = 0.6  # dev halves of en/ja/pyfaq under the default budget: 0.5-0.8 tried, 0.6 best
COLD_LEADERS = 6
COLD_NEIGHBOUR_WEIGHT = 0.3
GLANCE_WEIGHT = 1.0  # dev halves of en/pyfaq/ja: 0.5-3 tried; 1-1.5 best (answers among the first 30-50)
WINDOW_SENTENCES = 3
BM25_K1, BM25_B = 1.2, 0.75


@dataclass
class Ranked:
    doc_index: int
    chunk: Chunk
    score: float
    window: tuple[int, int]  # character offsets of the passage in the document
    evidence: tuple[tuple[int, int], ...] = ()  # character windows of the evidence in the document


@dataclass
class Ranking:
    ranked: list[Ranked]
    chunks: list[Chunk]
    warnings: list[str] = field(default_factory=list)
    lexical_only: list[int] = field(default_factory=list)  # chunk indexes ranked without a vector
    context_missing: list[str] = field(default_factory=list)  # neighbour-pair texts without a vector
    sentences_missing: list[str] = field(default_factory=list)  # shortlisted sentences without a vector
    best_sentence: dict[int, tuple[int, int]] = field(default_factory=dict)  # chunk → its best sentence by cosine


def chunk_all(texts: list[str], max_chunk_chars: int) -> list[Chunk]:
    out: list[Chunk] = []
    for i, t in enumerate(texts):
        out.extend(chunk_document(i, t, max_chunk_chars))
    return out


class BM25:
    def __init__(self, docs: list[tuple[str, ...]]):
        self.tf = [Counter(d) for d in docs]
        self.len = np.array([len(d) for d in docs], dtype=np.float64)
        self.avg = float(self.len.mean()) if len(docs) and self.len.mean() > 0 else 1.0
        df: Counter[str] = Counter()
        for c in self.tf:
            df.update(c.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query_terms: tuple[str, ...]) -> np.ndarray:
        out = np.zeros(len(self.tf), dtype=np.float64)
        q = Counter(t for t in query_terms if t in self.idf)
        if not q:
            return out
        norm = BM25_K1 * (1 - BM25_B + BM25_B * self.len / self.avg)
        for term, qtf in q.items():
            idf = self.idf[term] * (1 + 0.5 * math.log(qtf))  # a repeated query term weighs a bit more
            f = np.array([c.get(term, 0) for c in self.tf], dtype=np.float64)
            out += idf * f * (BM25_K1 + 1) / (f + norm)
        return out


_INDEX_MAX = 8
_index_cache: OrderedDict[tuple, tuple[list[Chunk], BM25]] = OrderedDict()
_index_lock = threading.Lock()


def neighbour_pairs(chunks: list[Chunk], doc_count: int) -> list[tuple[int, int]]:
    """Adjacent chunks that are neighbours: in one document, or — when every document is a single
    chunk (a client sending an essay's paragraphs) — adjacent documents in request order."""
    single = doc_count == len(chunks)
    return [(i, i + 1) for i in range(len(chunks) - 1) if single or chunks[i].doc_index == chunks[i + 1].doc_index]


def pair_text(texts: list[str], a: Chunk, b: Chunk) -> str:
    """The text of two neighbouring chunks as one passage (what is embedded for their context)."""
    if a.doc_index == b.doc_index:
        return texts[a.doc_index][a.start : b.end]
    return a.text + "\n" + b.text


def sentence_units(texts: list[str], chunks: list[Chunk], only=None) -> list[tuple[int, str]]:
    """(chunk index, text) of every window of SENTENCE_SPAN consecutive sentences inside a chunk that
    has more sentences than that (a shorter chunk is its own unit); none when SENTENCE_WEIGHT is 0.
    `only`: just these chunk indexes."""
    return [(i, texts[chunks[i].doc_index][a:b]) for i, (a, b) in unit_windows(chunks, only)]


def unit_windows(chunks: list[Chunk], only=None) -> list[tuple[int, tuple[int, int]]]:
    """(chunk index, character window in its document) of the units of `sentence_units`, same order."""
    if SENTENCE_WEIGHT <= 0:
        return []
    out = []
    for i in sorted(only) if only is not None else range(len(chunks)):
        s = chunks[i].sentences
        for k in range(len(s) - SENTENCE_SPAN + 1 if len(s) > SENTENCE_SPAN else 0):
            out.append((i, (s[k][0], s[k + SENTENCE_SPAN - 1][1])))
    return out


def vector_texts(texts: list[str], max_chunk_chars: int) -> list[str]:
    """Every text the extractor embeds for these documents: the chunks, then their neighbour pairs,
    then their sentence windows (for warming a cache)."""
    chunks, _ = _index(texts, max_chunk_chars)
    pairs = neighbour_pairs(chunks, len(texts))
    return (
        [c.text for c in chunks]
        + [pair_text(texts, chunks[i], chunks[j]) for i, j in pairs]
        + [t for _, t in sentence_units(texts, chunks)]
    )


def _with_context(own: np.ndarray, pairs: list[tuple[int, int]], pair_cos: np.ndarray, pair_ok: np.ndarray):
    """CONTEXT_SELF_WEIGHT x own cosine + the cosine of the pair before + of the pair after."""
    before, after = own.copy(), own.copy()
    for k, (i, j) in enumerate(pairs):
        if pair_ok[k]:
            after[i] = before[j] = pair_cos[k]
    return CONTEXT_SELF_WEIGHT * own + before + after


def _best_unit(own: np.ndarray, units: list, unit_cos: np.ndarray, unit_ok: np.ndarray, where=None):
    """Per chunk, the best cosine among its sentence windows; its own cosine when it has none (or
    none has a vector yet). `where`: filled with chunk → the best window's position."""
    best = np.full(len(own), -np.inf)
    for k, u in enumerate(units):
        i = u[0]
        if unit_ok[k] and unit_cos[k] > best[i]:
            best[i] = unit_cos[k]
            if where is not None:
                where[i] = u[-1]
    return np.where(np.isfinite(best), best, own)


def _with_sentences(query, texts, chunks, lexical, dense, own, valid, chunk_vectors, query_vector, out) -> np.ndarray:
    """The dense values plus SENTENCE_WEIGHT x best-sentence cosine for the SENTENCE_TOP_N chunks
    that a first fusion ranks best (own cosine for the rest, and for a shortlisted chunk whose
    sentences have no vector yet: those are listed in out.sentences_missing)."""
    first = fuse_linear(lexical, dense + SENTENCE_WEIGHT * own, valid)
    order = sorted((i for i in range(len(chunks)) if valid[i]), key=lambda i: (-first[i], i))
    top = order[:SENTENCE_TOP_N] if SENTENCE_TOP_N > 0 else order
    pos = {i: k for k, i in enumerate(top)}  # asked for best chunk first (a cold request's budget)
    units = sorted(
        ((i, texts[chunks[i].doc_index][a:b], (a, b)) for i, (a, b) in unit_windows(chunks, set(top))),
        key=lambda u: pos[u[0]],
    )
    if not units:
        return dense + SENTENCE_WEIGHT * own
    vecs, present = chunk_vectors([u[1] for u in units])
    out.sentences_missing = [u[1] for k, u in enumerate(units) if not present[k]]
    return dense + SENTENCE_WEIGHT * _best_unit(own, units, vecs @ query_vector, present, out.best_sentence)


class _Asked:
    """The request's `chunk_vectors` callback, asked for each text's vector once: a text already
    given is not asked again (a later stage may ask for the leaders' texts again), a missing one is
    (a later stage may still have time for it). `share`: of the embedding time left, how much this
    ask may use (the callback's own rule; a cache hit costs none)."""

    def __init__(self, fn):
        self.fn = fn
        self.got: dict[str, np.ndarray] = {}
        self.dim = 0

    def __call__(self, texts: list[str], share: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        new = [t for t in dict.fromkeys(texts) if t not in self.got]
        if new:
            vecs, ok = self.fn(new, share=share)
            self.dim = vecs.shape[1]
            self.got.update((t, vecs[k]) for k, t in enumerate(new) if ok[k])
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        present = np.zeros(len(texts), dtype=bool)
        for k, t in enumerate(texts):
            v = self.got.get(t)
            if v is not None:
                out[k], present[k] = v, True
        return out, present


def _own_vectors(ask: _Asked, chunks: list[Chunk], lexical: np.ndarray, doc_count: int, share: float, glance=None):
    """(vectors, present) of the chunks, asked best first by BM25 plus COLD_NEIGHBOUR_WEIGHT x their
    best neighbour's BM25: on a cold request only the first get a vector in time (in document
    order those were the first paragraphs, whatever the query), and an answer that paraphrases
    the question often sits next to the paragraph that names its topic. `glance(texts)`: (query
    cosines, present) of the chunks' heads, cheap; the chunks without a vector are then asked best
    first by that promise and their glance, standardised, GLANCE_WEIGHT to one. A text's vector does
    not depend on what it is embedded with, so a warm request ranks the same whatever the order."""
    promise = lexical + COLD_NEIGHBOUR_WEIGHT * _neighbour_best(chunks, lexical, doc_count)
    texts = [c.text for c in chunks]
    if glance is not None:
        _, have = ask(texts, share=0.0)  # the cache only: a warm request glances at nothing
        missing = np.flatnonzero(~have)
        if len(missing) > 1:
            # glanced best-promise first, so a glance cut short leaves the least promising
            by_promise = missing[np.argsort(-promise[missing], kind="stable")]
            got = glance([texts[i] for i in by_promise])
            if got is not None:
                cos, seen = got
                order = np.full(len(chunks), np.inf)  # a cached chunk costs nothing: first
                order[by_promise] = _standard(promise[by_promise]) + GLANCE_WEIGHT * np.where(
                    seen, _standard(cos, seen), 0.0
                )
                return _ask_in_order(ask, texts, np.argsort(-order, kind="stable"), share)
    return _ask_in_order(ask, texts, np.argsort(-promise, kind="stable"), share)


def _standard(x: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
    """x standardised (mean 0, deviation 1) over `where` (default all)."""
    sel = x if where is None else x[where]
    if sel.size == 0:
        return np.zeros_like(x, dtype=np.float64)
    sd = float(sel.std())
    return (x - float(sel.mean())) / (sd if sd > 0 else 1.0)


def _leaders_first(ask: _Asked, texts, chunks, pairs, ptexts, first: np.ndarray, valid: np.ndarray) -> None:
    """A cold request's next texts: the neighbour pairs and sentences of the COLD_LEADERS chunks a
    first fusion (own cosine and BM25) ranks best, leader by leader. The answer is decided among
    the leaders, so their context is worth more than the context of a chunk that cannot win; a
    warm request finds these in the cache and ranks as before."""
    lead = sorted((i for i in range(len(chunks)) if valid[i]), key=lambda i: (-first[i], i))[:COLD_LEADERS]
    if not lead:
        return
    by_chunk: dict[int, list[str]] = {i: [] for i in lead}
    for k, (i, j) in enumerate(pairs):
        for c in (i, j):
            if c in by_chunk:
                by_chunk[c].append(ptexts[k])
    for i, t in sentence_units(texts, chunks, set(lead)):
        by_chunk[i].append(t)
    ask([t for i in lead for t in by_chunk[i]])


def _pair_vectors(ask: _Asked, pairs, ptexts: list[str], first: np.ndarray):
    """(vectors, present) of the neighbour pairs, a pair by its better chunk in the first fusion."""
    order = sorted(range(len(pairs)), key=lambda k: (-max(first[pairs[k][0]], first[pairs[k][1]]), k))
    return _ask_in_order(ask, ptexts, np.asarray(order, dtype=np.intp))


def _ask_in_order(ask: _Asked, texts: list[str], order: np.ndarray, share: float = 1.0):
    """(vectors, present) of `texts`, in their own order, asked for in `order` (the order a time
    budget serves them in)."""
    got, ok = ask([texts[i] for i in order], share=share)
    vecs, present = np.empty_like(got), np.empty_like(ok)
    vecs[order], present[order] = got, ok
    return vecs, present


def _index(texts: list[str], max_chunk_chars: int) -> tuple[list[Chunk], BM25]:
    """Chunks and BM25 statistics of a document set, kept for the last few sets: clients send the
    same documents with many queries."""
    key = (tuple(texts), max_chunk_chars)
    with _index_lock:
        hit = _index_cache.get(key)
        if hit is not None:
            _index_cache.move_to_end(key)
            return hit
    chunks = chunk_all(texts, max_chunk_chars)
    built = (chunks, BM25([T.terms(c.text) for c in chunks]))
    with _index_lock:
        _index_cache[key] = built
        while len(_index_cache) > _INDEX_MAX:
            _index_cache.popitem(last=False)
    return built


def _ranks(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """1-based rank by value, descending, ties by position; invalid → inf."""
    order = sorted((i for i in range(len(values)) if valid[i]), key=lambda i: (-values[i], i))
    ranks = np.full(len(values), np.inf)
    for r, i in enumerate(order, 1):
        ranks[i] = r
    return ranks


def _cross_check(query: str, chunk_texts: list[str]) -> np.ndarray:
    """Share of the query's numbers and names that appear in each chunk."""
    nums, names = T.numbers(query), T.names(query)
    if not nums and not names:
        return np.zeros(len(chunk_texts))
    out = np.zeros(len(chunk_texts))
    for i, t in enumerate(chunk_texts):
        got = len(nums & T.numbers(t)) if nums else 0
        low = t.lower()
        got += sum(1 for n in names if n in low)
        out[i] = got / (len(nums) + len(names))
    return out


def fuse(
    query: str,
    chunks: list[Chunk],
    lexical: np.ndarray,
    dense: np.ndarray | None,
    dense_valid: np.ndarray | None,
    *,
    doc_count: int,
) -> tuple[np.ndarray, float]:
    """Fused value per chunk and the largest value possible (for calibration)."""
    n = len(chunks)
    lex_valid = lexical > 0
    fused = np.zeros(n)
    best = 0.0
    with np.errstate(divide="ignore"):
        fused += LEX_WEIGHT / (RRF_K + _ranks(lexical, lex_valid))
    best += LEX_WEIGHT / (RRF_K + 1)
    if dense is not None and dense_valid is not None and dense_valid.any():
        fused += DENSE_WEIGHT / (RRF_K + _ranks(dense, dense_valid))
        best += DENSE_WEIGHT / (RRF_K + 1)
    cross = _cross_check(query, [c.text for c in chunks])
    fused += CROSS_WEIGHT * cross / (RRF_K + 1)
    best += CROSS_WEIGHT / (RRF_K + 1)
    if NEIGHBOUR_WEIGHT > 0 and n > 1:
        fused = fused + NEIGHBOUR_WEIGHT * _neighbour_best(chunks, fused, doc_count)
        best *= 1 + NEIGHBOUR_WEIGHT
    return fused, best


def fuse_linear(lexical: np.ndarray, dense: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Standardised dense value (over the chunks with a vector; the others get the lowest) plus
    LINEAR_LEX_WEIGHT x BM25 over the best BM25 of the request."""
    top = float(lexical.max()) if len(lexical) else 0.0
    lex = lexical / top if top > 0 else np.zeros(len(lexical))
    if not valid.any():
        return LINEAR_LEX_WEIGHT * lex
    v = dense[valid]
    sd = float(v.std())
    z = (dense - float(v.mean())) / (sd if sd > 1e-12 else 1.0)
    z = np.where(valid, z, float(z[valid].min()))
    return z + LINEAR_LEX_WEIGHT * lex


def _neighbour_best(chunks: list[Chunk], fused: np.ndarray, doc_count: int) -> np.ndarray:
    """Best fused value among each chunk's neighbours: the chunks next to it in its document, and
    — when documents are single chunks (paragraphs) — the documents next to it in request order."""
    out = np.zeros(len(chunks))
    single = doc_count == len(chunks)
    for i, c in enumerate(chunks):
        vals = []
        if i > 0 and (chunks[i - 1].doc_index == c.doc_index or single):
            vals.append(fused[i - 1])
        if i + 1 < len(chunks) and (chunks[i + 1].doc_index == c.doc_index or single):
            vals.append(fused[i + 1])
        out[i] = max(vals) if vals else 0.0
    return out


def _sentence_weights(query_terms: set[str], idf: dict[str, float], chunk: Chunk, text: str) -> list[float]:
    return [sum(idf.get(t, 0.0) for t in set(T.terms(text[a:b])) & query_terms) for a, b in chunk.sentences]


def evidence_of(
    query_terms: set[str], idf: dict[str, float], chunk: Chunk, text: str, best_sentence: tuple[int, int] | None
) -> tuple[tuple[int, int], ...]:
    """The chunk's evidence: its best sentence by cosine (when known) and its best sentence by
    IDF-weighted query terms (earliest on ties; none when no term matches), in document order;
    the whole chunk when there is neither."""
    ev = set()
    if best_sentence is not None:
        ev.add(best_sentence)
    if query_terms and len(chunk.sentences) > 1:
        weights = _sentence_weights(query_terms, idf, chunk, text)
        k = max(range(len(weights)), key=lambda j: (weights[j], -j))
        if weights[k] > 0:
            ev.add(chunk.sentences[k])
    return tuple(sorted(ev)) or ((chunk.start, chunk.end),)


def best_window(query_terms: set[str], idf: dict[str, float], chunk: Chunk, text: str) -> tuple[int, int]:
    """The run of up to WINDOW_SENTENCES sentences of the chunk with the most IDF-weighted query
    terms (earliest on ties); the whole chunk when nothing matches."""
    sents = chunk.sentences
    if len(sents) <= WINDOW_SENTENCES or not query_terms:
        return chunk.start, chunk.end
    weights = _sentence_weights(query_terms, idf, chunk, text)
    best_i, best_w = 0, -1.0
    for i in range(len(sents) - WINDOW_SENTENCES + 1):
        w = sum(weights[i : i + WINDOW_SENTENCES])
        if w > best_w + 1e-12:
            best_i, best_w = i, w
    if best_w <= 0:
        return chunk.start, chunk.end
    return sents[best_i][0], sents[best_i + WINDOW_SENTENCES - 1][1]


def _dense_values(query, texts, chunks, lexical, ask: _Asked, query_vector, mode: str, out: Ranking, glance=None):
    """(dense value, has a vector) per chunk. A cold request's embedding time goes to the chunks
    (best first by `_own_vectors`, at most COLD_CHUNK_SHARE of it), then to the leaders' context
    and sentences, then to the other pairs and the shortlisted sentences."""
    n = len(chunks)
    pairs = neighbour_pairs(chunks, len(texts)) if mode != "dense" else []
    ptexts = [pair_text(texts, chunks[i], chunks[j]) for i, j in pairs]
    own_v, valid = _own_vectors(ask, chunks, lexical, len(texts), COLD_CHUNK_SHARE if pairs else 1.0, glance)
    own = own_v @ query_vector
    dense = own
    if pairs:
        first = fuse_linear(lexical, own, valid)
        if mode == "hybrid" and valid.any():
            _leaders_first(ask, texts, chunks, pairs, ptexts, first, valid)
        pvecs, pok = _pair_vectors(ask, pairs, ptexts, first)
        dense = _with_context(own, pairs, pvecs @ query_vector, pok)
        out.context_missing = [t for k, t in enumerate(ptexts) if not pok[k]]
    out.lexical_only = [i for i in range(n) if not valid[i]]
    if mode == "hybrid" and SENTENCE_WEIGHT > 0 and valid.any():
        dense = _with_sentences(query, texts, chunks, lexical, dense, own, valid, ask, query_vector, out)
    return dense, valid


def rank(
    query: str,
    texts: list[str],
    *,
    max_chunk_chars: int,
    chunk_vectors=None,
    query_vector: np.ndarray | None = None,
    mode: str = "hybrid",
    windows: int | None = None,
    passage: str = "chunk",
    glance=None,
) -> Ranking:
    """Rank documents `texts` for `query`. `chunk_vectors(chunk_texts, share=1.0)` returns (n x dim
    vectors, bool present), embedding what is missing with at most `share` of the embedding time
    left (a callback without a time budget ignores it); None or mode "lexical" ranks lexically.
    mode "dense" ranks by cosine only. `glance(chunk_texts)`: (query cosines of the chunks' heads,
    present) or None, for a cold request to choose which chunks to embed first (`_own_vectors`).
    `passage`: what each of the `windows` best results' window covers (pipelines.retrieve.passage
    modes, or "bare": the ranked chunk itself, as a plain chunk retriever returns it)."""
    chunks, bm25 = _index(texts, max_chunk_chars)
    out = Ranking([], chunks)
    if not chunks:
        return out
    q_terms = T.terms(query)
    lexical = bm25.scores(q_terms)
    dense = valid = None
    if mode != "lexical" and chunk_vectors is not None and query_vector is not None:
        dense, valid = _dense_values(
            query, texts, chunks, lexical, _Asked(chunk_vectors), query_vector, mode, out, glance
        )
    if mode == "lexical" or dense is None or (mode == "hybrid" and valid is not None and not valid.any()):
        fused, best = (
            fuse(query, chunks, lexical, None, None, doc_count=len(texts))
            if mode != "lexical"
            else (
                lexical,
                float(lexical.max()) or 1.0,
            )
        )
    elif mode == "dense":  # the plain vector baseline: the chunk's own cosine, no context
        assert valid is not None  # set together with dense
        fused, best = np.where(valid, (dense + 1) / 2, 0.0), 1.0
    else:  # hybrid with vectors: linear fusion, its logistic as the score
        assert valid is not None
        fused, best = 1.0 / (1.0 + np.exp(-fuse_linear(lexical, dense, valid))), 1.0
    # One result per document: its best chunk.
    by_doc: dict[int, int] = {}
    for i, c in enumerate(chunks):
        j = by_doc.get(c.doc_index)
        if j is None or fused[i] > fused[j]:
            by_doc[c.doc_index] = i
    qset = set(q_terms)
    for d, i in by_doc.items():
        score = float(min(1.0, max(0.0, fused[i] / best))) if best > 0 else 0.0
        out.ranked.append(Ranked(d, chunks[i], round(score, 6), (chunks[i].start, chunks[i].end)))
    # Evidence and passage only for the documents that can be returned (`windows` best).
    out.ranked.sort(key=lambda r: (-r.score, r.doc_index))
    index_of = {(c.doc_index, c.ordinal): i for i, c in enumerate(chunks)}
    for r in out.ranked[: len(out.ranked) if windows is None else windows]:
        doc = texts[r.doc_index]
        ev = evidence_of(qset, bm25.idf, r.chunk, doc, out.best_sentence.get(index_of[(r.doc_index, r.chunk.ordinal)]))
        if passage == "bare":
            r.window, r.evidence = (r.chunk.start, r.chunk.end), ev
            continue
        short = best_window(qset, bm25.idf, r.chunk, doc) if passage == "window" else None
        p = P.around(doc, list(ev), max_chunk_chars, passage, short)
        r.window, r.evidence = (p.start, p.end), p.evidence
    return out


def span_of(text: str, window: tuple[int, int]) -> dict:
    return byte_span(text, *window)
