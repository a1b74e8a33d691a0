"""Near-duplicate index of 64-bit pHashes: exact, fast at a million, atomic across hosts.

Truth lives in Redis, as an append-only log plus a sha1 map:

  yana:phash:log    string of fixed 33-byte records: op ('+' add, '-' remove), 16 hex pHash,
                    16 hex key (the first 16 hex of the image's sha1; label id = "label_" + key)
  yana:phash:sha1   hash sha1 -> "label_id|phash|owner|file_path" for every indexed image (exact
                    duplicates, and a redelivered item recognising its own earlier insert by `owner`)

Every process keeps an in-memory copy of the log (read incrementally by offset) organised as a
multi-index hash (Norouzi et al., "Fast exact search in Hamming space with multi-index hashing"):
the 64 bits are cut into m = 4 blocks of 16 bits; with threshold t = q*m + a, any code within
distance t of the query has one of the first a+1 blocks within q of the query's block or one of the
others within q-1 (pigeonhole), so probing those block neighbourhoods in sorted block tables finds
every match: recall is exactly that of a brute-force scan. Candidates are verified with popcount.

  yana:phash:sig    key -> signature entry of the second stage (pipelines.neardup.decision), written and
                    removed together with the log record
  yana:phash:fields:{digest}  set of keys indexed with the same (category, brand, product): they
                    are candidates at any pHash distance (a crop too far for the hash)
  yana:phash:text:{digest}    set of keys whose label reads the same brand (OCR): candidates at any
                    pHash distance too (two photographs of one label whose pHashes are far apart)

Check-and-insert is two-stage and stays atomic: the process searches its copy (up to log offset N)
for candidates within the loose `radius`, a verifier (Python, pipelines.neardup.decision) judges them, and
only when none is the same label the Lua script runs: it scans the records appended after N and,
when one of them is a candidate not judged yet, returns it instead of inserting; the worker judges
it and calls again. So a record is appended only when every candidate up to that moment was judged
different, and two workers racing with near-duplicates serialise in Redis: exactly one is indexed,
the other learns it is a duplicate of it and how far. Without a verifier, distance <= threshold
alone decides (the first stage used alone).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson

from pipelines.neardup.hashing import hamming, hamming_array

LOG_KEY = "yana:phash:log"
SHA1_KEY = "yana:phash:sha1"
SIG_KEY = "yana:phash:sig"  # key (16 hex) -> the verifier's signature entry (pipelines.neardup.decision)
# set of keys whose uploader sent the same category/brand/product (candidates at any distance)
FIELDS_KEY = "yana:phash:fields:{digest}"
# set of keys whose label's read brand (OCR) keeps one part (its ends, first two or last two
# characters: decision.text_digests); a label is in one set per part (candidates at any distance)
TEXT_KEY = "yana:phash:text:{digest}"
# hash upload sha1 -> JSON {dedup_of, distance, verifier_score, phash, file_path, at}: every merge decided
DUPS_KEY = "yana:phash:dups"
REC = 33
BLOCKS = 4
BLOCK_BITS = 16
TAIL_CAP = 4096  # records the script scans itself; beyond that the caller syncs first

_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i

# KEYS: log, sha1 map, signature map, the set of labels with the same fields (or ''), then the sets
# of labels that read the same (none or more).
# ARGV: phash(16 hex), sha1, key(16 hex), owner, offset, radius, cap, file_path, signature entry,
# then the keys already judged (not candidates again).
_CHECK_AND_INSERT = """
local log, map, sigs, same = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local said = {}
for i = 5, #KEYS do if KEYS[i] ~= '' then said[#said + 1] = KEYS[i] end end
local function in_said(k)
  for _, s in ipairs(said) do
    if redis.call('SISMEMBER', s, k) == 1 then return true end
  end
  return false
end
local ph, sha1, key, owner = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local offset, radius, cap = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local ex = redis.call('HGET', map, sha1)
if ex then return {'exists', ex} end
local len = redis.call('STRLEN', log)
local n = len / 33
if n - offset > cap then return {'stale', tostring(n)} end
local out = {'candidates', tostring(n)}
if n > offset then
  local judged = {}
  for i = 10, #ARGV do judged[ARGV[i]] = true end
  local pc = {}
  for i = 0, 255 do
    local c, v = 0, i
    while v > 0 do c = c + (v % 2); v = math.floor(v / 2) end
    pc[i] = c
  end
  local function popcount32(x)
    return pc[bit.band(x, 255)] + pc[bit.band(bit.rshift(x, 8), 255)]
         + pc[bit.band(bit.rshift(x, 16), 255)] + pc[bit.rshift(x, 24)]
  end
  local qh, ql = tonumber(string.sub(ph, 1, 8), 16), tonumber(string.sub(ph, 9, 16), 16)
  local tail = redis.call('GETRANGE', log, offset * 33, len - 1)
  for pos = 1, #tail, 33 do
    if string.sub(tail, pos, pos) == '-' then return {'stale', tostring(n)} end
    local h = tonumber(string.sub(tail, pos + 1, pos + 8), 16)
    local l = tonumber(string.sub(tail, pos + 9, pos + 16), 16)
    local d = popcount32(bit.bxor(qh, h)) + popcount32(bit.bxor(ql, l))
    local k = string.sub(tail, pos + 17, pos + 32)
    if not judged[k] and (d <= radius or (same ~= '' and redis.call('SISMEMBER', same, k) == 1)
                          or in_said(k)) then
      out[#out + 1] = k
      out[#out + 1] = tostring(d)
    end
  end
end
if #out > 2 then return out end
redis.call('APPEND', log, '+' .. ph .. key)
redis.call('HSET', map, sha1, 'label_' .. key .. '|' .. ph .. '|' .. owner .. '|' .. ARGV[8])
if ARGV[9] ~= '' then redis.call('HSET', sigs, key, ARGV[9]) end
if same ~= '' then redis.call('SADD', same, key) end
for _, s in ipairs(said) do redis.call('SADD', s, key) end
return {'indexed', tostring(n + 1)}
"""

# KEYS: log, sha1 map, signature map. ARGV: sha1. Appends a tombstone for the image's record.
_REMOVE = """
local ex = redis.call('HGET', KEYS[2], ARGV[1])
if not ex then return 0 end
local sep = string.find(ex, '|', 1, true)
local ph = string.sub(ex, sep + 1, sep + 16)
redis.call('APPEND', KEYS[1], '-' .. ph .. string.sub(ARGV[1], 1, 16))
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], string.sub(ARGV[1], 1, 16))
return 1
"""

# KEYS: sha1 map, signature map, the read-the-same sets (none or more). ARGV: sha1, key, signature
# entry. What a deferred read found, on an image still indexed: its entry replaced, the sets joined.
_ADD_READING = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
for i = 3, #KEYS do redis.call('SADD', KEYS[i], ARGV[2]) end
return 1
"""


@dataclass
class Outcome:
    status: str  # "indexed" | "self" (our own earlier insert) | "dedup"
    label_id: str  # ours when indexed/self, the existing label's when dedup
    distance: int = 0
    phash: str = ""
    score: float | None = None  # the verifier's score of the match (None: exact bytes or no verifier)
    candidates: int = 0  # candidates within the radius that were judged


@dataclass
class _Synced:
    """What one sync round trip brought (PHashIndex._sync, _candidates)."""

    existing: str | None = None  # the sha1 map's entry of the image's bytes
    entries: dict[str, str | None] = field(default_factory=dict)  # signature entries read with it
    same: set[str] = field(default_factory=set)  # labels indexed with the same fields, or read the same
    reset: bool = False  # the log was reset: the local copy was rebuilt
    read: int = 0
    offset: int = 0  # log records applied after it (the candidates cover every record before)
    added_codes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    added_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    candidates: list[tuple[str, int]] = field(default_factory=list)


class Verify(Protocol):
    """Second stage: given candidates (label_id, distance, signature entry or None), the best one
    that is the same label (an object with label_id, distance, score), or None."""

    def __call__(self, candidates: list[tuple[str, int, str | None]]) -> Any: ...


def label_of_key(key: str) -> str:
    return f"label_{key}"


def parse_records(raw: bytes | str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log bytes → (ops as uint8, pHash uint64, key uint64)."""
    buf = raw.encode("ascii") if isinstance(raw, str) else raw
    a = np.frombuffer(buf, dtype=np.uint8).reshape(-1, REC)
    nib = _HEX[a[:, 1:]].astype(np.uint64)
    if (nib == 255).any():
        raise ValueError("corrupt pHash log record")
    shifts = np.arange(60, -1, -4, dtype=np.uint64)
    codes = np.bitwise_or.reduce(nib[:, :16] << shifts, axis=1)
    keys = np.bitwise_or.reduce(nib[:, 16:] << shifts, axis=1)
    return a[:, 0], codes, keys


def _masks(bits: int, radius: int) -> np.ndarray:
    """All `bits`-bit values of popcount <= radius (the XOR masks of a Hamming ball)."""
    if radius < 0:
        return np.zeros(0, dtype=np.uint64)
    v = np.arange(1 << bits, dtype=np.uint64)
    return v[np.bitwise_count(v) <= radius]


def probe_radii(threshold: int, m: int = BLOCKS) -> list[int]:
    """Per-block search radius so that every code within `threshold` is found (pigeonhole)."""
    q, a = divmod(threshold, m)
    return [q if j <= a else q - 1 for j in range(m)]


_M1, _M2, _M4, _H01 = (
    np.uint64(v) for v in (0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F, 0x0101010101010101)
)


def _popcount(x):
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return (x * _H01) >> np.uint64(56)


def _search(code, radius, masks, n_masks, offsets, sorted_codes, sorted_rows, codes, n_sorted, n, alive):
    """MultiIndex.search compiled: the probed buckets of each block, then the unsorted tail;
    returns the live rows within `radius` and their distances, nearest first (then by row)."""
    nb_ = masks.shape[0]
    total = n - n_sorted  # room for every probed code: no growth in the loop
    for j in range(nb_):
        qb = (code >> np.uint64(BLOCK_BITS * (nb_ - 1 - j))) & np.uint64(0xFFFF)
        for mi in range(n_masks[j]):
            b = np.int64(masks[j, mi] ^ qb)
            total += offsets[j, b + 1] - offsets[j, b]
    rows = np.empty(total, dtype=np.int64)
    dists = np.empty(total, dtype=np.int64)
    k = 0
    for j in range(nb_):
        qb = (code >> np.uint64(BLOCK_BITS * (nb_ - 1 - j))) & np.uint64(0xFFFF)
        for mi in range(n_masks[j]):
            b = np.int64(masks[j, mi] ^ qb)
            for pos in range(offsets[j, b], offsets[j, b + 1]):
                d = np.int64(_popcount(sorted_codes[j, pos] ^ code))
                if d <= radius:
                    rows[k] = sorted_rows[j, pos]
                    dists[k] = d
                    k += 1
    for row in range(n_sorted, n):  # recent additions not in the tables yet: scanned directly
        d = np.int64(_popcount(codes[row] ^ code))
        if d <= radius:
            rows[k] = row
            dists[k] = d
            k += 1
    order = np.argsort(rows[:k])  # a row found through two blocks counts once; removed rows not at all
    out_rows = np.empty(k, dtype=np.int64)
    out_d = np.empty(k, dtype=np.int64)
    m = 0
    for i in order:
        r = rows[i]
        if (m > 0 and out_rows[m - 1] == r) or not alive[r]:
            continue
        out_rows[m] = r
        out_d[m] = dists[i]
        m += 1
    best = np.argsort(out_d[:m] * (n + 1) + out_rows[:m])
    return out_rows[:m][best], out_d[:m][best]


_jit_lock = threading.Lock()
_jitted = False


def _compiled_search():
    """`_search` compiled by numba (cache=True: loaded from numba's on-disk cache once built, see
    `yana prepare`), on first use: numba and llvmlite (~60 MB) stay out of processes that only
    read the index's Redis records (the API's exact-duplicate answer, the metrics)."""
    global _jitted
    if not _jitted:
        with _jit_lock:
            if not _jitted:
                import numba as nb

                jit = nb.njit(cache=True, nogil=True)
                # `_search` calls `_popcount` by its global name: compiled first, then rebound.
                globals()["_popcount"] = jit(_popcount)
                globals()["_search"] = jit(_search)
                _jitted = True
    return globals()["_search"]


class MultiIndex:
    """In-memory exact Hamming-radius search over 64-bit codes (no Redis)."""

    def __init__(self, threshold: int):
        if not 0 <= threshold <= 20:
            raise ValueError("threshold must be within 0..20")
        self.threshold = threshold
        self.radii = probe_radii(threshold)
        self._mask_cache = {r: _masks(BLOCK_BITS, r) for r in set(self.radii)}
        # Storage grows by doubling, so tailing the log one record at a time stays O(1) amortised.
        self._codes = np.zeros(1024, dtype=np.uint64)
        self._keys = np.zeros(1024, dtype=np.uint64)
        self._alive = np.zeros(1024, dtype=bool)
        self.n = 0
        self._pos: dict[int, int] = {}  # key -> row
        # probe masks per block (padded to one array for the compiled search) and their counts
        probes = [self._mask_cache[r] for r in self.radii]
        self._masks = np.zeros((BLOCKS, max(len(m) for m in probes)), dtype=np.uint64)
        for j, m in enumerate(probes):
            self._masks[j, : len(m)] = m
        self._n_masks = np.array([len(m) for m in probes], dtype=np.int64)
        # per block: bucket offsets, the codes sorted by the block's value, their rows (see _rebuild),
        # replaced as one tuple so a search running beside a rebuild sees one consistent set
        self._tables = (
            np.zeros((BLOCKS, (1 << BLOCK_BITS) + 1), dtype=np.int64),
            np.zeros((BLOCKS, 0), dtype=np.uint64),
            np.zeros((BLOCKS, 0), dtype=np.int64),
        )
        self._n_sorted = 0  # rows [0, n_sorted) are in the sorted tables; the rest is a scanned tail

    def __len__(self) -> int:
        return len(self._pos)

    @property
    def codes(self) -> np.ndarray:
        return self._codes[: self.n]

    @property
    def keys(self) -> np.ndarray:
        return self._keys[: self.n]

    @property
    def alive(self) -> np.ndarray:
        return self._alive[: self.n]

    def add_many(self, codes: np.ndarray, keys: np.ndarray) -> None:
        start, m = self.n, len(codes)
        if start + m > len(self._codes):
            cap = max(start + m, 2 * len(self._codes))
            for name in ("_codes", "_keys", "_alive"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=old.dtype)
                new[:start] = old[:start]
                setattr(self, name, new)
        self._codes[start : start + m] = codes
        self._keys[start : start + m] = keys
        self._alive[start : start + m] = True
        self.n = start + m
        for i, k in enumerate(np.asarray(keys).tolist()):
            self._pos[int(k)] = start + i
        tail = self.n - self._n_sorted
        if tail > max(2048, self._n_sorted // 16):
            self._rebuild()

    def code_of(self, key: int) -> int | None:
        row = self._pos.get(int(key))
        return None if row is None else int(self._codes[row])

    def remove_key(self, key: int) -> None:
        row = self._pos.pop(int(key), None)
        if row is not None:
            self._alive[row] = False

    def _rebuild(self) -> None:
        """Per block: rows sorted by the block's value, their codes in that order (so a bucket's
        candidates are contiguous in memory) and bucket offsets (a bucket is found in O(1))."""
        codes = self.codes
        offsets = np.zeros((BLOCKS, (1 << BLOCK_BITS) + 1), dtype=np.int64)
        sorted_codes = np.empty((BLOCKS, len(codes)), dtype=np.uint64)
        sorted_rows = np.empty((BLOCKS, len(codes)), dtype=np.int64)
        for j in range(BLOCKS):
            shift = np.uint64(BLOCK_BITS * (BLOCKS - 1 - j))
            block = ((codes >> shift) & np.uint64(0xFFFF)).astype(np.int64)
            order = np.argsort(block, kind="stable")
            np.cumsum(np.bincount(block, minlength=1 << BLOCK_BITS), out=offsets[j, 1:])
            sorted_codes[j] = codes[order]
            sorted_rows[j] = order
        self._tables = (offsets, sorted_codes, sorted_rows)
        self._n_sorted = len(codes)

    def search(self, code: int, radius: int | None = None) -> list[tuple[int, int]]:
        """All (key, distance) within `radius` (<= threshold), nearest first."""
        radius = self.threshold if radius is None else min(radius, self.threshold)
        offsets, sorted_codes, sorted_rows = self._tables
        codes, alive, keys_all = self._codes, self._alive, self._keys
        # the compiled search reads without bounds checks: every row it is given must exist
        n = min(self.n, len(codes), len(alive), len(keys_all))
        rows, dists = _compiled_search()(
            np.uint64(code),
            radius,
            self._masks,
            self._n_masks,
            offsets,
            sorted_codes,
            sorted_rows,
            codes,
            min(sorted_codes.shape[1], n),
            n,
            alive,
        )
        return list(zip(keys_all[rows].tolist(), dists.tolist(), strict=True))

    def nearest(self, code: int) -> tuple[int, int] | None:
        hits = self.search(code)
        return hits[0] if hits else None


def warm_up() -> None:
    """Run the compiled search once (see imaging.warm_up)."""
    mi = MultiIndex(12)
    mi.add_many(np.arange(4096, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15), np.arange(4096, dtype=np.uint64))
    mi.search(12345)


class PHashIndex:
    """The Redis-backed index; one instance per process (see `shared_index`)."""

    def __init__(
        self,
        r,
        threshold: int,
        *,
        radius: int | None = None,
        log_key: str = LOG_KEY,
        sha1_key: str = SHA1_KEY,
        sig_key: str = SIG_KEY,
    ):
        self.r = r
        self.threshold = threshold  # distance alone decides at or under this (no verifier)
        self.radius = max(threshold, radius if radius is not None else threshold)  # candidates
        self.log_key, self.sha1_key, self.sig_key = log_key, sha1_key, sig_key
        self.local = MultiIndex(self.radius)
        self.offset = 0  # records of the log applied to `local`
        self._lock = threading.RLock()  # a sync, and a candidate search with the sync it rests on
        self._check = r.register_script(_CHECK_AND_INSERT)
        self._remove = r.register_script(_REMOVE)
        self._add_reading = r.register_script(_ADD_READING)

    def sync(self) -> int:
        """Apply log records appended since the last sync. Returns how many were read."""
        return self._sync().read

    def _sync(self, sha1: str | None = None, prefetch: list[str] | None = None, same: tuple[str, ...] = ()) -> _Synced:
        """`sync` in one round trip (the log's length and its tail together), which also reads the
        sha1 map's entry of `sha1`, the signature entries of the keys in `prefetch` and the members
        of the sets in `same` (the same-fields and read-the-same sets), where given."""
        same = tuple(k for k in same if k)
        with self._lock:
            start = self.offset * REC
            with self.r.pipeline(transaction=False) as p:
                p.strlen(self.log_key)
                p.getrange(self.log_key, start, -1)  # "" when nothing was appended
                if sha1 is not None:
                    p.hget(self.sha1_key, sha1)
                if prefetch:
                    p.hmget(self.sig_key, prefetch)
                if same:
                    p.sunion(*same)
                res = p.execute()
            length, raw, rest = int(res[0]), res[1], iter(res[2:])
            out = _Synced(
                existing=next(rest) if sha1 is not None else None,
                entries=dict(zip(prefetch, next(rest), strict=True)) if prefetch else {},
                same=set(next(rest)) if same else set(),
            )
            if length < start:  # the log was reset under us (a wiped Redis): start over
                self.local = MultiIndex(self.radius)
                self.offset = 0
                out.reset = True
                raw = self.r.getrange(self.log_key, 0, -1)
            n = len(raw) // REC
            out.offset = self.offset
            if n == 0:
                return out
            ops, codes, keys = parse_records(raw[: n * REC])
            adds = ops == ord("+")
            if adds.all():
                self.local.add_many(codes, keys)
            else:  # apply in order so a remove after an add of the same key wins
                for op, c, k in zip(ops.tolist(), codes, keys, strict=True):
                    if op == ord("+"):
                        self.local.add_many(np.array([c]), np.array([k]))
                    else:
                        self.local.remove_key(int(k))
            self.offset += n
            out.read, out.offset, out.added_codes, out.added_keys = n, self.offset, codes[adds], keys[adds]
            return out

    def _candidates(self, code: int, sha1: str | None, same: tuple[str, ...], verify: Verify | None) -> _Synced:
        """Sync, then the candidates within the radius (and, with `same`, every label indexed with
        the same fields), nearest first, in the sync's round trip where possible: the local copy is
        searched before the sync and the signatures of what it finds read with it; then only the
        records the sync brought are looked at (a full search when the log was reset). Under the
        lock: another thread's sync in between would apply records neither search sees."""
        with self._lock:
            return self._candidates_locked(code, sha1, same, verify)

    def _candidates_locked(self, code: int, sha1: str | None, same: tuple[str, ...], verify: Verify | None) -> _Synced:
        before = [(f"{k:016x}", d) for k, d in self.local.search(code, self.radius)] if verify is not None else []
        synced = self._sync(sha1, [k for k, _d in before], same)
        if synced.reset or verify is None:
            found = [(f"{k:016x}", d) for k, d in self.local.search(code, self.radius)]
        else:
            found = [c for c in before if self.local.code_of(int(c[0], 16)) is not None]  # not removed since
            seen = {k for k, _d in found}
            dist = hamming_array(synced.added_codes, code)
            for i in np.nonzero(dist <= self.radius)[0].tolist():
                added = int(synced.added_keys[i])
                if f"{added:016x}" not in seen and self.local.code_of(added) is not None:
                    seen.add(f"{added:016x}")
                    found.append((f"{added:016x}", int(dist[i])))
        near = {k for k, _d in found}
        for member in synced.same:
            c = self.local.code_of(int(member, 16))
            if c is not None and member not in near:
                found.append((member, hamming(c, code)))
        synced.candidates = sorted(found, key=lambda c: c[1])
        return synced

    def search(self, phash_hex: str, radius: int | None = None) -> list[tuple[str, int]]:
        """Indexed labels within `radius` of a pHash (after a sync), nearest first."""
        self.sync()
        return [(label_of_key(f"{k:016x}"), d) for k, d in self.local.search(int(phash_hex, 16), radius)]

    def _judge(
        self, cands: list[tuple[str, int]], verify: Verify | None, entries: dict[str, str | None]
    ) -> tuple[str, int, float | None] | None:
        """The matching candidate (key, distance, score) among (key, distance) pairs, or None.
        `entries`: signature entries already read (the others are read here)."""
        if not cands:
            return None
        if verify is None:
            near = [c for c in cands if c[1] <= self.threshold]
            return (near[0][0], near[0][1], None) if near else None
        missing = [k for k, _d in cands if k not in entries]
        if missing:
            entries.update(zip(missing, self.r.hmget(self.sig_key, missing), strict=True))
        m = verify([(label_of_key(k), d, entries[k]) for k, d in cands])
        return (m.label_id.removeprefix("label_"), m.distance, m.score) if m else None

    def fields_set(self, fields_digest: str) -> str:
        return FIELDS_KEY.format(digest=fields_digest) if fields_digest else ""

    def text_sets(self, text_digests: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(TEXT_KEY.format(digest=d) for d in text_digests if d)

    def check_and_insert(
        self,
        phash_hex: str,
        sha1: str,
        owner: str,
        file_path: str = "",
        *,
        entry: str = "",
        verify: Verify | None = None,
        fields_digest: str = "",
        text_digests: tuple[str, ...] = (),
    ) -> Outcome:
        """Index an image unless an indexed one is the same label. `entry`: the signature entry
        stored for later verifiers; `verify`: the second stage (None: distance <= threshold);
        `fields_digest` / `text_digests`: labels indexed with the same uploader fields / a brand read
        alike are candidates at any distance."""
        phash_hex = phash_hex.lower()
        key = sha1[:16]
        code = int(phash_hex, 16)
        same = self.fields_set(fields_digest) if verify is not None else ""
        said = self.text_sets(text_digests) if verify is not None else ()
        judged: set[str] = set()
        entries: dict[str, str | None] = {}
        tail: list[tuple[str, int]] = []
        offset = self.offset
        for attempt in range(64):
            if tail:  # candidates the script found after our offset
                cands = tail
            else:
                # the first sync also reads the exact-bytes entry (the script checks it again)
                synced = self._candidates(code, sha1 if attempt == 0 else None, (same, *said), verify)
                if synced.existing:
                    return self._existing(synced.existing, owner, phash_hex)
                entries.update(synced.entries)
                cands, offset = synced.candidates, synced.offset
            cands = [c for c in cands if c[0] not in judged]
            hit = self._judge(cands, verify, entries)
            judged.update(k for k, _d in cands)
            if hit:
                return Outcome("dedup", label_of_key(hit[0]), hit[1], score=hit[2], candidates=len(judged))
            res = self._check(
                keys=[self.log_key, self.sha1_key, self.sig_key, same, *said],
                args=[phash_hex, sha1, key, owner, offset, self.radius, TAIL_CAP, file_path, entry, *judged],
            )
            status = res[0]
            if status == "exists":
                return self._existing(res[1], owner, phash_hex)
            if status == "indexed":
                return Outcome("indexed", label_of_key(key), 0, phash_hex, candidates=len(judged))
            # candidates appended after our offset: judge them; stale (far behind, or a removal in
            # the tail): catch up and try again
            tail = [(res[i], int(res[i + 1])) for i in range(2, len(res), 2)] if status == "candidates" else []
        raise RuntimeError("pHash index: could not catch up with the log")

    @staticmethod
    def _existing(ex: str, owner: str, phash_hex: str) -> Outcome:
        lid, ph, who, _path = _split_entry(ex)
        if who == owner:
            return Outcome("self", lid, 0, ph)
        return Outcome("dedup", lid, hamming(ph, phash_hex), ph)

    def identify(
        self, phash_hex: str, sha1: str, verify: Verify | None, text_digests: tuple[str, ...] = ()
    ) -> Outcome | None:
        """What check_and_insert would answer for an image, without indexing it: the label with
        the same bytes (distance 0, no score) or the one the second stage takes it for (candidates
        by hash, and by `text_digests` like check_and_insert's); else None."""
        same = self.lookup_sha1(sha1)
        if same:
            return Outcome("dedup", same["id"], hamming(same["phash"], phash_hex), same["phash"])
        said = self.text_sets(text_digests) if verify is not None else ()
        synced = self._candidates(int(phash_hex, 16), None, said, verify)
        entries = dict(synced.entries)
        hit = self._judge(synced.candidates, verify, entries)
        if hit is None:
            return None
        return Outcome("dedup", label_of_key(hit[0]), hit[1], score=hit[2], candidates=len(synced.candidates))

    def lookup_sha1(self, sha1: str) -> dict | None:
        return lookup_sha1(self.r, sha1, self.sha1_key)

    def entry(self, sha1: str) -> str | None:
        """The signature entry of an indexed image (None: none)."""
        return self.r.hget(self.sig_key, sha1[:16])

    def add_reading(self, sha1: str, entry: str, text_digests: tuple[str, ...] = ()) -> bool:
        """After a deferred read: the image's signature entry becomes `entry` (what was read now in
        it) and it joins the read-the-same sets of `text_digests`, if it is still indexed. Its
        candidates were judged when it was indexed (reading whatever they needed then)."""
        keys = [self.sha1_key, self.sig_key, *self.text_sets(text_digests)]
        return bool(self._add_reading(keys=keys, args=[sha1, sha1[:16], entry]))

    def remove(self, sha1: str) -> bool:
        return bool(self._remove(keys=[self.log_key, self.sha1_key, self.sig_key], args=[sha1]))

    def count(self) -> int:
        return int(self.r.hlen(self.sha1_key))


def _split_entry(v: str) -> tuple[str, str, str, str]:
    lid, ph, owner, path = (v.split("|", 3) + ["", ""])[:4]
    return lid, ph, owner, path


def lookup_sha1(r, sha1: str, sha1_key: str = SHA1_KEY) -> dict | None:
    """The indexed label with exactly these bytes: {id, phash, owner, file_path}, or None."""
    v = r.hget(sha1_key, sha1)
    if not v:
        return None
    lid, ph, owner, path = _split_entry(v)
    return {"id": lid, "phash": ph, "owner": owner, "file_path": path}


def all_entries(r, sha1_key: str = SHA1_KEY) -> dict[str, dict]:
    """label_id -> {sha1, phash, file_path} of every indexed image (reports, tools)."""
    out = {}
    for sha1, v in r.hscan_iter(sha1_key, count=1000):
        lid, ph, _owner, path = _split_entry(v)
        out[lid] = {"sha1": sha1, "phash": ph, "file_path": path}
    return out


_shared: dict[tuple[int, int, int], PHashIndex] = {}
_shared_lock = threading.Lock()


def shared_index(r, threshold: int, radius: int | None = None) -> PHashIndex:
    """One index per (Redis client, threshold, radius) per process: the log is read once, then tailed."""
    key = (id(r), threshold, radius if radius is not None else threshold)
    with _shared_lock:
        idx = _shared.get(key)
        if idx is None:
            idx = _shared[key] = PHashIndex(r, threshold, radius=radius)
        return idx


def record_merges(r, merges: dict[str, dict]) -> None:
    """Keep what each merged upload was merged into, and why (the duplicates report reads it)."""
    if merges:
        r.hset(DUPS_KEY, mapping={sha1: orjson.dumps(m).decode() for sha1, m in merges.items()})


def iter_merges(r):
    """(upload sha1, merge record) of every merge recorded."""
    for sha1, raw in r.hscan_iter(DUPS_KEY, count=1000):
        yield sha1, orjson.loads(raw)


def merge_of(r, sha1: str) -> dict | None:
    """The merge record of one upload (None: its bytes were never merged, or were split again)."""
    raw = r.hget(DUPS_KEY, sha1)
    return orjson.loads(raw) if raw else None


def forget_merge(r, sha1: str) -> None:
    """Drop one upload's merge record (a person split it: it is its own label now). `r` may be a pipeline."""
    r.hdel(DUPS_KEY, sha1)
