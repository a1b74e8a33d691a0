"""What a label image says, read once per image bytes: the OCR reading and the fields extracted
from it, cached in Redis under the image's sha1 (content-addressed), so a retried or re-run batch
does not read the same image twice.

A failed or timed-out read is returned as a warning (never raised): the label is kept without it,
and a failure is not cached (a later ingest of the same bytes tries again)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from PIL import Image

from pipelines.ingest.keys import READING_KEY, READING_LOCK_KEY
from yana.settings import Settings

log = logging.getLogger("yana.ingest.read")

# A reader holds an image's lock for a lease it renews while it reads (every LEASE_S / 3 s): a
# reader that dies (kill -9 of a pool process, its worker) stops renewing and the next reader of
# those bytes takes over within LEASE_S, not after the read timeout. Renew and release only touch
# the lock while it is still the reader's own.
LEASE_S = 5
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"

READING_TTL_S = 30 * 86400


def cached(r, sha1: str) -> dict | None:
    raw = r.get(READING_KEY.format(sha1=sha1))
    return orjson.loads(raw) if raw else None


def store(r, sha1: str, reading: dict) -> None:
    r.set(READING_KEY.format(sha1=sha1), orjson.dumps(reading), ex=READING_TTL_S)


def read_label(r, sha1: str, image: Image.Image, s: Settings) -> tuple[dict | None, dict | None]:
    """(reading, warning): the cached reading of these bytes, else a fresh read (then cached).

    reading = {engine, text, lines: [{text, box, confidence, vertical, order}], fields:
    {name: {value, source, confidence, evidence}}, label_features: [...]}."""
    got = cached(r, sha1)
    if got is not None:
        return got, None
    lock = READING_LOCK_KEY.format(sha1=sha1)
    token = uuid.uuid4().hex
    if not r.set(lock, token, nx=True, ex=LEASE_S):
        # Another worker (the `ocr` queue's read-ahead, a job's re-run) is reading these bytes:
        # wait for its reading. Its lock gone without one (it failed, or died and its lease
        # lapsed): take the lock and read here; past the read timeout read here anyway.
        deadline = time.monotonic() + s.ocr_timeout_s + 5
        while time.monotonic() < deadline:
            time.sleep(0.1)
            got = cached(r, sha1)
            if got is not None:
                return got, None
            if r.set(lock, token, nx=True, ex=LEASE_S):
                break
    with _leased(r, lock, token):
        return _read(r, sha1, image, s)


@contextmanager
def _leased(r, lock: str, token: str) -> Iterator[None]:
    """Renew the lease on `lock` while the body runs, release it after (both only while the lock
    holds `token`). Redis away: the lease lapses, and at worst a second reader reads the same
    bytes (content-addressed: the same reading)."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(LEASE_S / 3):
            try:
                r.eval(_RENEW, 1, lock, token, LEASE_S)
            except Exception:  # noqa: BLE001 - see above
                log.debug("reading lease of %s not renewed", lock, exc_info=True)

    renewer = threading.Thread(target=renew, name="reading-lease", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        try:
            r.eval(_RELEASE, 1, lock, token)
        except Exception:  # noqa: BLE001 - the lease lapses on its own
            log.debug("reading lock %s not released", lock, exc_info=True)


def _read(r, sha1: str, image: Image.Image, s: Settings) -> tuple[dict | None, dict | None]:
    from pipelines.read.fields import extract_fields
    from pipelines.read.ocr import OcrError, OcrTimeout, read_image

    try:
        reading = read_image(image, engine=s.ocr_engine, timeout_s=s.ocr_timeout_s)
    except OcrTimeout as exc:
        return None, {"code": "OCR_TIMEOUT", "message": str(exc)}
    except OcrError as exc:
        return None, {"code": "OCR_FAILED", "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a reader bug must not lose the label
        log.exception("OCR read failed")
        return None, {"code": "OCR_FAILED", "message": f"{type(exc).__name__}: {exc}"}
    out: dict[str, Any] = reading.to_dict()
    try:
        out.update(extract_fields(reading).to_dict())
    except Exception as exc:  # noqa: BLE001
        log.exception("field extraction failed")
        out.update(fields={}, label_features=[])
        store(r, sha1, out)
        return out, {"code": "OCR_FIELDS_FAILED", "message": f"{type(exc).__name__}: {exc}"}
    store(r, sha1, out)
    return out, None


def field_reader(s: Settings):
    """How the near-duplicate decision reads a printed field across (pipelines.neardup.printed:
    a field read off one photograph only, read on the other where its line maps to), with this
    engine; None with OCR off. The value comes as `identity_fields` gives read values (the value,
    then what its digits may also be), '' when the crop prints none a label can."""
    if s.ocr_mode == "off":
        return None
    engine = s.ocr_engine

    def read_field(crop, vertical: bool, key: str) -> str:
        try:
            return _field_at(crop, vertical, key, engine)
        except Exception:  # noqa: BLE001 - a failed read across reads nothing: the decision stands
            log.exception("field %s not read across", key)
            return ""

    return read_field


def _field_at(crop, vertical: bool, key: str, engine: str) -> str:
    from pipelines.neardup.printed import NUMBERS
    from pipelines.read.fields import bare_value, extract_fields, plausible
    from pipelines.read.ocr import Reading, get_reader

    reader = get_reader(engine)
    recognise = getattr(reader, "recognise_line", None)  # engines without it read nothing across
    line = recognise(crop, vertical) if recognise is not None else None
    if line is None:
        return ""
    found = extract_fields(Reading((line,), reader.name)).to_dict()
    value = identity_fields(found, min_confidence=0.0).get(key, "")
    if value or key in found["fields"]:  # read as the field (a value no label prints: none)
        return value
    if any(k in found["fields"] for k in NUMBERS):  # another printed number's line: misplaced
        return ""
    # the line is known to be this field's: its number and unit alone say its value
    bare = bare_value(key, line.text)
    return bare if plausible(key, bare) else ""


def read_ahead(items: list[dict], *, r, s: Settings, blobs) -> int:
    """Fill the reading cache for these ingest items (the `ocr` queue's task: OCR workers read a
    batch before, or while, the ingest worker gets to it). Only sources already in the blob store
    or the import folder (a URL is not fetched twice); any failure is left to the ingest body to
    report. Idempotent (content-addressed). Returns how many images were read here."""
    from pipelines.ingest import image_io, sources
    from pipelines.neardup import hashing

    n = 0
    for item in items:
        src = item.get("source") or {}
        if src.get("kind") not in ("stored", "file"):
            continue
        try:
            data = sources.read_source(
                src,
                blobs=blobs,
                import_dir=s.import_dir,
                allow=[],
                timeout_s=s.fetch_timeout_s,
                max_bytes=s.max_image_bytes,
            )
            sha1 = hashing.sha1_hex(data)
            if cached(r, sha1) is not None:
                continue
            dec = image_io.decode_image(data, max_bytes=s.max_image_bytes, max_pixels=s.max_image_pixels)
            reading, _warning = read_label(r, sha1, dec.image, s)
            n += reading is not None
        except Exception as exc:  # noqa: BLE001 - the ingest body reports the item's failure
            log.info("read-ahead skipped item %s: %s", item.get("index"), exc)
    return n


# A read value joins the near-duplicate decision (it can make two labels of one image pair) only
# when read this surely: a brush brand misread on one photo of a label (北の者誉 / 北の誉誉, 0.72)
# must not split it. On the tune photographs correct brands and grades read at 0.82-0.95.
IDENTITY_MIN_CONFIDENCE = 0.8


def identity_fields(
    reading: dict | None, given: dict | None = None, min_confidence: float = IDENTITY_MIN_CONFIDENCE
) -> dict[str, str]:
    """{field: value} of a reading for the near-duplicate decision: the ones read at least this
    surely, and none the uploader gave (their value is compared as the uploader's field). A
    printed number whose digits the recogniser was unsure of carries the other values it may be,
    after a MAYBE_SEP ("56%|55%": pipelines.read.fields._digit_maybes; the decision reads the
    first as the value and the rest as what it might also be)."""
    from pipelines.neardup.decision import MAYBE_SEP
    from pipelines.read.fields import plausible

    given = given or {}
    maybe = (reading or {}).get("maybe") or {}
    out = {}
    for k, f in ((reading or {}).get("fields") or {}).items():
        value = f.get("value")
        if (
            value
            and not given.get(k)
            and float(f.get("confidence") or 0.0) >= min_confidence
            and plausible(k, value)  # a misread number (5002ml) says nothing about identity
        ):
            others = [str(v) for v in maybe.get(k) or () if v != value and plausible(k, v) and MAYBE_SEP not in str(v)]
            out[k] = MAYBE_SEP.join([str(value), *others])
    return out


def said_fields(reading: dict | None, given: dict | None = None) -> dict[str, str]:
    """{field: value} of what the label says, for agreeing: every value a reading gives, however
    surely, and where the uploader gave a field, their value (the label's brand is the brand the
    uploader named; without it a label sent with its brand could never agree on text, and brand-only
    ingest lost the text path: held-out recall 0.033 against 0.650 images only). The same value
    read off two photographs is evidence even at low confidence (two misreads rarely agree), while
    only sure values may veto a match (identity_fields). On the tune photographs a correct 内容量
    often reads at ~0.7, and pairs of one label's photographs failed to agree on that alone (8 of
    30 pairs, tune split, seed 7). Nothing was read (no reading): nothing is said."""
    said = identity_fields(reading, given, min_confidence=0.0)
    if reading is not None:
        said.update({k: str(v) for k, v in (given or {}).items() if v})
    return said
