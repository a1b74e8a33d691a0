"""Deferred reads: with OCR_MODE=auto, an image sent with full uploader fields is not read during
its ingest unless the near-duplicate decision needs it; a background pass reads it afterwards.

Why: reading a label costs several times what the rest of its ingest does (docs/ocr.md), and
with the brand, product and brewery given the label is searchable and identifiable without it.
What identity needs is never skipped (pipelines.neardup.decision.Verifier): an image that has a
candidate (by hash or by the same fields) its uploader's fields do not rule out is read before it
is judged, and so is every such candidate whose own read was deferred (`StoredReadings`); an
image with none, which is a new label whatever it says, is indexed unread. Before its read it
neither searches nor joins the read-the-same set (every label of its brand would be a candidate);
the pass puts it there.

The pass, at least once and idempotent:
  * each ingest batch puts its deferred labels in the zset `DEFERRED_READS_KEY` (score: when the
    read is due) and refreshes `INGEST_ACTIVE_KEY` (TTL OCR_DEFER_IDLE_S), in the same
    transaction as its outcomes;
  * the workers' maintenance loop claims due reads (`claim_due`: their score moves a lease ahead)
    once ingest has been idle for OCR_DEFER_IDLE_S, or when the oldest has waited
    OCR_DEFER_MAX_WAIT_S, and sends them to the `ocr` queue (tasks.ocr.read_deferred);
  * `read_deferred` reads each label (the reading cache: nothing is read twice), puts what was read
    into its record and text (pipelines.ingest.records.apply_reading: re-indexed at once) and its
    signature entry (vetoes and agreement for later decisions; the read-the-same set), then
    removes it from the zset. A worker killed meanwhile leaves it in the zset: claimed again
    after the lease. A read that fails is due again OCR_DEFER_RETRY_S later (doubling), up to
    OCR_DEFER_ATTEMPTS tries; then the record is marked read failed (`give_up`) and leaves.
"""

from __future__ import annotations

import logging
import time
from pathlib import PurePosixPath

from pipelines.ingest import image_io, readings
from pipelines.ingest.keys import DEFERRED_FAILURES_KEY, DEFERRED_READS_KEY, INGEST_ACTIVE_KEY
from pipelines.labels import schema as labels
from pipelines.neardup import decision, printed
from yana.blobs import BlobMissing, BlobStore
from yana.settings import Settings

log = logging.getLogger("yana.ingest.deferred")

# The uploader's fields that make a read deferrable: with these the label text has its words and
# the same-fields set finds the label's other uploads.
FULL_FIELDS = ("brand_name", "product_name", "brewery")

# KEYS: the deferred zset, the ingest-active key. ARGV: now, max wait, lease, limit.
# Due reads (score <= now) when ingest is idle or the oldest has waited max wait; each claimed one
# is due again after the lease (a worker that dies leaves it to be claimed again).
_CLAIM_DUE = """
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first == 0 then return {} end
local now = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[2]) == 1 and tonumber(first[2]) > now - tonumber(ARGV[2]) then return {} end
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), id) end
return due
"""


# A label record's mark (chunk metadata) while its read is deferred; set to "read" once the pass
# has applied it, "failed" once it gave up (values, not a removal: Chroma's upsert merges
# metadata keys).
RECORD_MARK = "ocr"


PENDING, READ, FAILED = "deferred", "read", "failed"


def mark(record: dict, state: str) -> None:
    """PENDING (deferred at ingest), READ (the pass applied it) or FAILED (the pass gave up)."""
    record[RECORD_MARK] = state


def is_pending(record: dict) -> bool:
    return record.get(RECORD_MARK) == PENDING


def has_failed(record: dict) -> bool:
    return record.get(RECORD_MARK) == FAILED


def has_full_fields(fields: dict) -> bool:
    return all(str(fields.get(k) or "").strip() for k in FULL_FIELDS)


def defers(r, s: Settings, fields: dict, sha1: str) -> bool:
    """Whether this image's read may wait: OCR_MODE=auto, full uploader fields, not read yet."""
    if s.ocr_mode != "auto" or not has_full_fields(fields):
        return False
    return readings.cached(r, sha1) is None


def note_batch(p, label_ids: list[str], s: Settings, now: float | None = None) -> None:
    """In an ingest batch's transaction (`p`): its deferred labels are due now, and ingest is
    active for another OCR_DEFER_IDLE_S."""
    p.set(INGEST_ACTIVE_KEY, "1", px=max(1, int(s.ocr_defer_idle_s * 1000)))
    if label_ids:
        now = time.time() if now is None else now
        p.zadd(DEFERRED_READS_KEY, dict.fromkeys(label_ids, now), nx=True)


def claim_due(r, s: Settings, limit: int = 64, now: float | None = None) -> list[str]:
    """Label ids whose deferred read is due and may run now (see _CLAIM_DUE); atomic, so several
    workers' maintenance loops never claim one twice within a lease."""
    now = time.time() if now is None else now
    got = r.eval(
        _CLAIM_DUE, 2, DEFERRED_READS_KEY, INGEST_ACTIVE_KEY, now, s.ocr_defer_max_wait_s, s.ocr_defer_lease_s, limit
    )
    return [x.decode() if isinstance(x, bytes) else x for x in got]


def pending(r) -> int:
    """How many labels wait for their deferred read."""
    return int(r.zcard(DEFERRED_READS_KEY))


def index_reading(index, sha1: str, fields: dict, reading: dict) -> bool:
    """What was read goes into the image's signature entry and the read-the-same set."""
    entry = index.entry(sha1)
    if not entry:
        return False
    read, said = readings.identity_fields(reading, fields), readings.said_fields(reading, fields)
    said_keys = {k: v for k, v in said.items() if k in decision.READ_KEYS and v}
    return index.add_reading(
        sha1,
        decision.entry_with_reading(entry, read, said_keys, printed.field_lines(reading)),
        decision.text_digests(said_keys or read),
    )


def _image(blobs: BlobStore, key: str, s: Settings):
    """The stored original, decoded as its ingest decoded it (it passed these limits then)."""
    return image_io.decode_image(blobs.get(key), max_bytes=s.max_image_bytes, max_pixels=s.max_image_pixels).image


class StoredReadings:
    """decision.Readings over the blob store and the reading cache: a candidate whose read was
    deferred is read now (cached by its sha1, so its own deferred read finds it done)."""

    def __init__(self, r, blobs: BlobStore, s: Settings):
        self.r, self.blobs, self.s = r, blobs, s

    def __call__(self, refs: list[tuple[str, str, dict]]) -> list[tuple[dict, dict] | None]:
        return [self._one(label_id, key, given) for label_id, key, given in refs]

    def _one(self, label_id: str, key: str, given: dict) -> tuple[dict, dict] | None:
        key = key or str(self.r.hget(labels.LABEL_IMAGES_KEY, label_id) or "")
        if not key:
            return None
        sha1 = PurePosixPath(key).stem
        reading = readings.cached(self.r, sha1)
        if reading is None:
            try:
                image = _image(self.blobs, key, self.s)
            except Exception:  # noqa: BLE001 - gone or no longer decodable: judged as not read
                log.info("deferred candidate %s could not be read", label_id, exc_info=True)
                return None
            reading, _warning = readings.read_label(self.r, sha1, image, self.s)
        if reading is None:
            return None
        return readings.identity_fields(reading, given), readings.said_fields(reading, given)


def stored_readings(r, blobs: BlobStore, s: Settings) -> StoredReadings:
    return StoredReadings(r, blobs, s)


def read_deferred(label_ids: list[str], *, r, chroma, blobs: BlobStore, s: Settings, index) -> dict[str, int]:
    """The background pass over these labels (tasks.ocr.read_deferred). Returns counts. A label
    leaves the zset once read or gone; a failed read is due again later (`_failed`); an error (a
    store away) leaves it for the lease."""
    counts = {"read": 0, "gone": 0, "retry": 0, "failed": 0}
    for label_id in label_ids:
        done = _read_one(label_id, r=r, chroma=chroma, blobs=blobs, s=s, index=index)
        if done == "failed":
            done = _failed(r, chroma, label_id, s)
        else:
            _leave(r, label_id)
        counts[done] += 1
    return counts


def _leave(r, label_id: str) -> None:
    with r.pipeline(transaction=True) as p:
        p.zrem(DEFERRED_READS_KEY, label_id)
        p.hdel(DEFERRED_FAILURES_KEY, label_id)
        p.execute()


def _failed(r, chroma, label_id: str, s: Settings) -> str:
    """A failed read is due again OCR_DEFER_RETRY_S later, doubling each time (an OCR time limit is
    the load of the moment more often than the image); after OCR_DEFER_ATTEMPTS the label is marked
    read failed and leaves the pass. Returns "retry" or "failed"."""
    from pipelines.ingest.records import give_up_reading

    tries = int(r.hincrby(DEFERRED_FAILURES_KEY, label_id, 1))
    if tries < s.ocr_defer_attempts:
        r.zadd(DEFERRED_READS_KEY, {label_id: time.time() + s.ocr_defer_retry_s * 2 ** (tries - 1)}, xx=True)
        return "retry"
    give_up_reading(r, chroma, label_id)
    _leave(r, label_id)
    return "failed"


def _read_one(label_id: str, *, r, chroma, blobs: BlobStore, s: Settings, index) -> str:
    from pipelines.ingest.records import apply_reading

    key = r.hget(labels.LABEL_IMAGES_KEY, label_id)
    key = key.decode() if isinstance(key, bytes) else key
    if not key:
        return "gone"
    sha1 = PurePosixPath(key).stem
    reading, warning = readings.cached(r, sha1), None  # read already when a decision needed it
    if reading is None:
        try:
            image = _image(blobs, key, s)
        except BlobMissing:
            return "gone"
        reading, warning = readings.read_label(r, sha1, image, s)
    if reading is None:
        # A failed read is not cached: tried again later (read_deferred); meanwhile the label keeps
        # its uploader's fields, as a failed inline read leaves it.
        log.warning("deferred read of %s failed: %s", label_id, (warning or {}).get("message"))
        return "failed"
    if not apply_reading(r, chroma, label_id, reading):
        return "gone"
    entry = index.entry(sha1)
    if entry:
        fields = decision.parse_entry(entry)[1]
        index_reading(index, sha1, {k: fields.get(k) for k in decision.FIELD_KEYS}, reading)
    return "read"
