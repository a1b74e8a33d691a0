"""The second stage of near-duplicate detection: is a pHash candidate really the same label?

The pHash multi-index (pipelines.neardup.index) returns every indexed label within a loose radius;
each candidate then passes two independent checks, precision first (a false merge silently drops
a distinct label from search, a missed one only leaves a duplicate entry):

1. the uploader's fields: a different non-empty category, brand_name or product_name is never
   the same label (a juice is never a duplicate of a sake, a brewery's product line shares a
   design but not a product name). All three given and equal is evidence the other way: such a
   candidate is judged at any pHash distance (a crop too far for the hash) and passes the image
   check at FIELDS_AGREE_MAX_SCORE;
2. the image: the query is aligned onto the candidate's stored 32x32 signature (luma and two
   colour planes) and compared block by block (`verifier.verify`), so a label printed from the same design with other text
   is told apart from a crop, a rotation or a phone photo of the same label.

What the label says (OCR, when it was read) comes before both: a brand, grade or printed number
read surely off both (`read`) that differs makes two labels. Agreeing text is evidence the other
way, like agreeing fields: images whose reading gives the same brand, or one read alike
(`brands_alike`: brush lettering is misread from photograph to photograph) or one it may be (a
doubted character swapped: pipelines.read.fields._brand_maybes), are candidates at any
pHash distance (the index's read-the-same sets, `text_digests`), and when the same fields were read off
both (`said`: every value read, however surely), all equal, the brand and at least one more
(`text_agrees`), the image check is the grey-only score under TEXT_AGREE_MAX_SCORE (or the strict
check), and then the aligned picture check (pipelines.neardup.picture, on both photographs'
pictures; the candidate's made from its stored original, read only then) has the last word:
another picture (an edition: the same text in another design) vetoes, the same picture merges
what the grey-only score kept apart. Before anything merges, the printed-lines check
(pipelines.neardup.printed: the read fields' lines compared glyph by glyph on both photographs'
originals) vetoes a pair whose lines are printed otherwise (another typeface, a digit read off
one side only), and a merge on text that is only consistent (a value read off one side, a number
or a brand read alike) needs it to confirm. Agreeing uploader fields with readings on
both sides that do not agree get the tighter FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE (the same brand
and product on another design), and where the text is consistent the aligned picture parts such
a merge over the strict limit when it aligned and saw another picture. Whatever is about to merge a pair, a printed field
read off one photograph only is also read across (the recogniser on the other photograph, where that field's
line maps to): another value there, read alike by ACROSS_READS crops, keeps them apart, as a
value read off both that differs would (a product line whose differing number one photograph's
read missed, merged by the pixels).

Per indexed image Redis holds a signature entry (JSON: the base64 signature, zlib-compressed
when that is smaller, the three fields, what was read, and the blob key of the original: 1-3 KB),
written by the same atomic step that indexes its pHash, so any worker on any host can verify.
The picture is not kept in Redis: the entry of every pHash candidate is read, the picture only
where the text agrees (`Pictures`, from the blob store).
"""

from __future__ import annotations

import base64
import hashlib
import unicodedata
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import orjson
from PIL import Image

from pipelines.neardup import picture, printed, verifier
from pipelines.text.distance import edit_distance
from pipelines.text.variants import common_forms

FIELD_KEYS = ("category", "brand_name", "product_name")
# The image check's limit when category, brand and product all agree: the fields already rule out
# the hard negatives (same design, other text), so the image only has to be the same picture
# (aligned: residual <= 0.8; no block limit at 4 x the block threshold; on the grey-only score,
# verifier.verify_many(fields_agree=...)), not pass the block and colour tests
# made for telling text apart.
FIELDS_AGREE_MAX_SCORE = 4.0
# What the label says, as read off it (OCR, pipelines.read.fields): when both images' readings give
# one of these and the values differ, they are different labels whatever their pixels (one design
# printed for several brands, grades, polishing ratios, strengths or sizes).
READ_KEYS = ("brand_name", "grade", "seimai", "alcohol", "volume")
# An image whose signature's luma barely varies (a blank or single-colour image) has no content to
# tell labels apart by: it is never merged on the hash (only identical bytes are the same image).
MIN_CONTENT_STD = 4.0
# Two photographs of one label: when the text read off both agrees (text_agrees: the same read
# fields on both sides, all equal, the brand and at least one more), the candidate is judged at any pHash
# distance (candidates by text, index.TEXT_KEY) and passes the image check on the grey-only score
# (like FIELDS_AGREE_MAX_SCORE) under this limit, or the strict check as before. Chosen on
# tools/photolabels' "tune" split only (bench/identity_eval.py --split tune).
TEXT_AGREE_MAX_SCORE = 4.0
# When the uploader's fields agree but both images were read and their text does not agree, the
# fields-agree limit drops to this (the same brand and product on another design or edition; tune
# split: 4 / 2 / 1 false merges of 180 at 4.0 / 2.0 / 1.0, full-fields recall 0.650 / 0.517 / 0.500).
FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE = 1.0
# The aligned picture check (pipelines.neardup.picture; NEARDUP_PICTURE_CHECK, verifier_for) where
# the read text agrees: a candidate whose stored picture is not the same printed picture (an
# edition: the same text in another palette, frame, ornament or layout) is never the same label,
# whatever the grey-only score says; one whose picture is the same is the same label though the
# grey-only score does not pass (two photographs' own perspective, margin, background and glare
# spread that score over 0.7-5.0). Where the text does not agree, the picture alone never merges
# (a product line shares its picture; only the text it prints differs), unless
# PICTURE_ACCEPTS_UNAGREED and the text is at least consistent (text_consistent: a re-photograph
# whose OCR missed a value on one side). Without more, that merged editions and product-line
# labels whose differing value was read off one side only (held-out seeds 9-14: +0.08 recall for
# 4 -> 6 false merges of 792), so it was off. It is on since the printed-lines check
# (pipelines.neardup.printed) guards it: a merge on consistent text also needs the field lines of
# both photographs printed alike, each field read off one side only included (its line looked up
# on the other photograph); without that check (no original, no line compared) it does not merge.
# Entries whose original cannot be read (indexed before entries kept the blob key, or its blob is
# gone) skip the picture check. Measured in docs/ocr.md.
PICTURE_ACCEPTS_UNAGREED = True
# The grade and the printed numbers veto when read off both photographs however surely, not only
# surely (READ_KEYS' sure values): a product line's labels (one design, another grade or number)
# pass the pixel check (strict score 0.2-1.0), and their differing value is often read at under
# 0.8 on one side. Tune seeds 7 and 8, three modes each: false merges 31 -> 16, recall -0.02 on
# average (what misreads on re-photographs cost; held-out recall did not move). Not the brand:
# brush lettering misreads it (0.85 exact on held-out), so it still vetoes only when read surely.
SAID_VETO_KEYS = ("grade", "seimai", "alcohol", "volume")


# Reading across (printed.compare(across=...)): a printed field read off one photograph only is
# read on the other where its line maps to, from printed.READ_PADS crops; a veto needs this many of
# them to read one value, and that another value than the photograph that read it gives.
ACROSS_READS = 2


# A read value may carry the other values its digits may be, after this ("56%|55%": the recogniser
# offered a 5 where it read the 6; pipelines.ingest.readings.identity_fields). Two values that
# differ only so are neither equal nor a conflict: the text is then only consistent, and a merge
# needs the printed-lines check to find that field's line printed alike on both photographs.
# Tune seeds 7 and 9 (images only): 6 of 18 missed re-photographs were vetoed by a misread number
# (56% / 55%, 40% / 45%, 16度 / 15度, 55% read as 5%); the digit swaps are what this covers.
MAYBE_SEP = "|"


def read_value(value) -> str:
    """A read value as compared (normalised), without the values it may also be."""
    return _read_norm(value).split(MAYBE_SEP)[0]


def _relation(x, y, key: str = "", sure: bool = False) -> str:
    """How two read values of one field compare: "" (not read on both sides), "same", "maybe"
    (they differ, but one may be read as the other, or both as a third; for the brand: read
    alike, `brands_alike`, by their ends only when both were read `sure`ly) or "differs"."""
    xs, ys = _read_norm(x).split(MAYBE_SEP), _read_norm(y).split(MAYBE_SEP)
    if not xs[0] or not ys[0]:
        return ""
    if xs[0] == ys[0]:
        return "same"
    if key == "brand_name" and brands_alike(xs[0], ys[0], ends_only=sure):
        return "maybe"
    if key in printed.NUMBERS and _digits_lost(xs[0], ys[0]):
        return "maybe"
    return "maybe" if (set(xs) & set(ys)) - {""} else "differs"


# A printed number read off both photographs whose digits on one side are the other's with some
# lost (16度 read 6度, 65% read 6%, 1800ml read 180ml): small print drops a digit far more often
# than a product line prints a number that is another's with a digit left out. It is no veto but
# "maybe": the merge then needs that number's line compared alike on both photographs, and the
# longer value's line is read across on the photograph that lost a digit (`Verifier._one_sided`),
# so a product line whose 55% was read 5% off its sibling's 50% can be read 50% there and kept
# apart. Tune seeds 32-33: 2 of 12 missed re-photographs were vetoed by a lost digit; held-out
# seeds 9-16: about 8 more of 480 found, and one number product line merged (seed 16) with or
# without the reading across (docs/ocr.md, 2026-11-29).
def _digits_lost(a: str, b: str) -> bool:
    """One value's digits are the other's with some lost, the rest (the unit) the same."""
    return _non_digits(a) == _non_digits(b) and _part_of(_digits(a), _digits(b))


def _part_of(a: str, b: str) -> bool:
    """One of two strings is the other with characters lost (neither empty)."""
    short, long_ = sorted((a, b), key=len)
    return bool(short) and len(short) < len(long_) and short in long_


def _non_digits(value: str) -> str:
    return "".join(ch for ch in value if not ch.isdigit())


def _longer_side(mine, theirs) -> str:
    """Which of two values a digit was lost from: "q" (mine is the longer), "c" or "" (neither)."""
    a, b = read_value(mine), read_value(theirs)
    if not _digits_lost(a, b):
        return ""
    return "q" if len(_digits(a)) > len(_digits(b)) else "c"


# Brush lettering is read differently from one photograph to the next far more often than print:
# a cursive の read as 八, 門, 刀 or left out, a stroke read as an extra kanji (朝里 / 朝和口里).
# On a check set in a brush face neither split was tuned on (docs/ocr.md), 8 of 14 re-photographs
# missed had their brand read so, and no candidate at all. Two brands are read alike when they
# keep one of `_brand_keys` (the same first and last character, or for names of three or more the
# same first two or last two: an end misread, lost or cut) and differ in at most BRAND_EDITS; a
# merge on brands read alike needs the brand's printed line compared alike (like a number read as
# values that may be one another), since a product line's labels differ in exactly the brand.
BRAND_EDITS = 2


def brands_alike(a: str, b: str, *, ends_only: bool = False) -> bool:
    """Two read brands that may be one name read twice (see BRAND_EDITS). `ends_only`: both were
    read surely, and an end read otherwise is another name (a product line's brands 星の光 and
    風の光, both read at 0.9 on tune seed 32; a misread end was never read surely there)."""
    if not a or not b:
        return False
    a, b = common_forms(a), common_forms(b)  # 惠み read for 恵み: one name
    keep = 1 if ends_only else None  # _brand_keys' first: the ends
    if not set(_brand_keys(a)[:keep]) & set(_brand_keys(b)[:keep]):
        return False
    return edit_distance(a, b, BRAND_EDITS) <= BRAND_EDITS


def _brand_keys(brand: str) -> list[str]:
    """What two reads of one brand keep in common when a misread changes at most one end: its
    first and last characters, and for names of two or more its first two and its last two
    (白の雫 read 白の率, 山のしぼり read しぼり or 山のし, 十四代 read 四代: an end character
    misread, lost or cut; a name of two is its own first two and last two)."""
    keys = ["ends\x1f" + brand[0] + brand[-1]]
    if len(brand) >= 2:
        keys += ["head\x1f" + brand[:2], "tail\x1f" + brand[-2:]]
    return keys


def read_conflict(a: dict, b: dict, keys: tuple[str, ...] = READ_KEYS, *, sure: bool = False) -> str | None:
    """The first read field (of `keys`) both readings give and that differs, or None. Values that
    may be read as one another (MAYBE_SEP) do not differ here. `sure`: both readings are of values
    read surely (`read`)."""
    return next((k for k in keys if _relation(a.get(k), b.get(k), k, sure) == "differs"), None)


def maybe_differs(a: dict, b: dict) -> set[str]:
    """The fields both readings give that differ only as values that may be read as one another."""
    return {k for k in READ_KEYS if _relation(a.get(k), b.get(k), k) == "maybe"}


def _printed_said(said: dict) -> set[str]:
    """The printed fields (printed.FIELDS) a reading gives a value for."""
    return {k for k in printed.FIELDS if read_value(said.get(k))}


def _digits(value) -> str:
    return "".join(ch for ch in read_value(value) if ch.isdigit())


def _read_across_differs(read, across, key: str) -> bool:
    """A value read across (printed.compare) differs from the one read off the other photograph,
    and not only by characters lost (45% read 4%, 1800ml read 180ml, 特別純米 read 純米: a crop of
    small print drops characters far more often than a product line prints a part of its own)."""
    if _relation(read, across, key) != "differs":
        return False
    a, b = read_value(read), read_value(across)
    if key in printed.NUMBERS:
        a, b = _digits(a), _digits(b)
    return not _part_of(a, b)


def text_agrees(a: dict, b: dict) -> bool:
    """What two readings say agrees: the same read fields on both sides (a field read off one only
    is how a differing grade or number hides: two labels of one product line differ in exactly
    that), all equal, the brand and at least one more among them."""
    said_a = {k: read_value(a.get(k)) for k in READ_KEYS if read_value(a.get(k))}
    said_b = {k: read_value(b.get(k)) for k in READ_KEYS if read_value(b.get(k))}
    return said_a == said_b and "brand_name" in said_a and len(said_a) >= 2


def text_consistent(a: dict, b: dict) -> bool:
    """Weaker than text_agrees: the brand read the same or alike (`brands_alike`) off both and no
    value read off both (however surely) differs, except as values that may be read as one another;
    a field read off one side only is allowed (the OCR missed it on the other)."""
    if _relation(a.get("brand_name"), b.get("brand_name"), "brand_name") not in ("same", "maybe"):
        return False
    return read_conflict(a, b) is None


def text_digests(read: dict | None) -> tuple[str, ...]:
    """Keys of the read-the-same sets a reading joins and finds candidates in, () when no brand was
    read: one per `_brand_keys` of the read brand and of each name it may also be, so brands read
    alike (`brands_alike`) or as names that may be one another always share one."""
    names = _read_norm((read or {}).get("brand_name")).split(MAYBE_SEP)  # the brand read, then its maybe names
    if not names[0]:
        return ()
    # the keys of the brand in common kanji forms (brands_alike), and of the brand as read where that
    # differs: sets joined before the forms were folded are still searched; then those of the names
    # it may also be (a doubted character swapped: pipelines.read.fields._brand_maybes)
    keys = dict.fromkeys(k for b in names if b for k in _brand_keys(common_forms(b)) + _brand_keys(b))
    return tuple(hashlib.sha1(("brand-" + key).encode(), usedforsecurity=False).hexdigest()[:20] for key in keys)


def _read_norm(value) -> str:
    return "".join(normalise(value).split())


def has_content(luma) -> bool:
    """Whether the signature's luma plane varies enough to identify anything by."""
    return float(luma.std()) >= MIN_CONTENT_STD


def normalise(value) -> str:
    """Field value as compared: NFKC, case-folded, inner whitespace collapsed."""
    if value is None:
        return ""
    return " ".join(unicodedata.normalize("NFKC", str(value)).casefold().split())


def fields_conflict(a: dict, b: dict) -> str | None:
    """The first field both give and that differs, or None."""
    for k in FIELD_KEYS:
        x, y = normalise(a.get(k)), normalise(b.get(k))
        if x and y and x != y:
            return k
    return None


def fields_agree(a: dict, b: dict) -> bool:
    """All three fields given on both sides and equal."""
    return all(normalise(a.get(k)) and normalise(a.get(k)) == normalise(b.get(k)) for k in FIELD_KEYS)


def fields_digest(fields: dict | None) -> str:
    """Key of the same-fields set, or '' when a field is missing."""
    vals = [normalise((fields or {}).get(k)) for k in FIELD_KEYS]
    if not all(vals):
        return ""
    return hashlib.sha1("\x1f".join(vals).encode(), usedforsecurity=False).hexdigest()[:20]


class Readings(Protocol):
    """What stored labels whose read was deferred say (pipelines.ingest.deferred), read when one is
    a candidate: per (label id, blob key of its original, its uploader's fields) the (read, said)
    pair verifier_for takes, or None when it cannot be read. One call per decision."""

    def __call__(self, refs: list[tuple[str, str, dict]]) -> list[tuple[dict, dict] | None]: ...


class Pictures(Protocol):
    """The aligned picture check's pictures of stored labels: per (label id, blob key of its
    original, '' when the entry has none) the picture (picture.decode's array), None when it
    cannot be read. One call per decision, so a store can read them in one go."""

    def __call__(self, refs: list[tuple[str, str]]) -> list[np.ndarray | None]: ...


# The printed-lines check's greys (printed.grey) of stored labels' originals: the same call as
# Pictures, per (label id, blob key) the grey, None when it cannot be read.
Greys = Pictures


def make_entry(
    sig: bytes,
    fields: dict | None,
    read: dict | None = None,
    said: dict | None = None,
    blob_key: str = "",
    deferred: bool = False,
    lines: dict | None = None,
) -> str:
    fields = fields or {}
    # zlib: a label's flat grounds shrink the 3 KiB signature to ~1.1 KiB (Redis holds one per image)
    packed = zlib.compress(sig, 6)
    doc: dict[str, Any] = (
        {"z": base64.b64encode(packed).decode("ascii")}
        if len(packed) < len(sig)
        else {"s": base64.b64encode(sig).decode("ascii")}
    )
    doc.update({k: normalise(fields.get(k)) for k in FIELD_KEYS if normalise(fields.get(k))})
    _put_reading(doc, read, said, lines)
    if blob_key:  # where the original is: the aligned picture check reads its picture from there
        doc["b"] = blob_key
    if deferred:  # not read yet (OCR deferred): a verifier that meets it reads it first (Readings)
        doc["d"] = 1
    return orjson.dumps(doc).decode()


def _put_reading(doc: dict, read: dict | None, said: dict | None, lines: dict | None = None) -> None:
    """An entry's `read` (sure values), `said` (every value, only when it says more than `read`:
    Redis holds one entry per image) and `ln` (where the read fields' lines are: printed.field_lines)."""
    sure, everything = _read_keys(read), _read_keys(said)
    if sure:
        doc["read"] = sure
    if everything and everything != sure:
        doc["said"] = everything
    if lines:
        doc["ln"] = lines


def entry_with_reading(entry: str, read: dict | None, said: dict | None, lines: dict | None = None) -> str:
    """A stored entry after its deferred read: what was read in it, no longer marked unread."""
    doc = {k: v for k, v in orjson.loads(entry).items() if k not in ("d", "read", "said", "ln")}
    _put_reading(doc, read, said, lines)
    return orjson.dumps(doc).decode()


def _query_reading(read: dict | None, said: dict | None) -> tuple[dict, dict]:
    """A query's (read, said) as the verifier keeps them: READ_KEYS only; said at least read."""
    read = {k: v for k, v in (read or {}).items() if k in READ_KEYS and v}
    return read, {k: v for k, v in (said or {}).items() if k in READ_KEYS and v} or dict(read)


def _read_keys(read: dict | None) -> dict[str, str]:
    return {k: _read_norm((read or {}).get(k)) for k in READ_KEYS if _read_norm((read or {}).get(k))}


def stored_said(theirs: dict) -> dict:
    """What a stored entry's reading said, however surely (entries before "said" hold the sure part)."""
    return theirs.get("said") or theirs.get("read") or {}


def parse_entry(entry: str | None) -> tuple[bytes | None, dict]:
    if not entry:
        return None, {}
    doc = orjson.loads(entry)
    packed, raw = doc.pop("z", None), doc.pop("s", None)
    if packed:
        return zlib.decompress(base64.b64decode(packed)), doc
    return (base64.b64decode(raw) if raw else None), doc


@dataclass
class Match:
    label_id: str
    distance: int
    score: float | None  # verifier score (<= 1.0 is a match); None: judged by distance alone


@dataclass
class Verifier:
    """Called by PHashIndex.check_and_insert with candidates (label_id, distance, entry); returns
    the best one that is the same label, or None. `judged` keeps every verdict for the report."""

    view: verifier.QueryView  # the query image as the verifier sees it (with its signature)
    fields: dict
    legacy_threshold: int  # entries indexed before signatures existed: distance alone decides
    use_fields: bool = True
    read: dict = field(default_factory=dict)  # what OCR read off the query label surely (READ_KEYS): vetoes
    said: dict = field(
        default_factory=dict
    )  # every value read off it, however surely (verifier_for: at least `read`): agreement
    judged: list[dict] = field(default_factory=list)
    # the aligned picture check (NEARDUP_PICTURE_CHECK): the query image, and where the candidates'
    # pictures come from (None: no check)
    image: Image.Image | None = field(default=None, repr=False)
    pictures: Pictures | None = field(default=None, repr=False)
    # A deferred read (OCR_MODE=auto with full uploader fields): the query is read only when it
    # has candidates (read_query gives its (read, said, field lines), once), and candidates whose own read was
    # deferred are read then (readings), so a deferred read never weakens a decision.
    read_query: Callable[[], tuple[dict, dict, dict]] | None = field(default=None, repr=False)
    readings: Readings | None = field(default=None, repr=False)
    # the printed-lines check (pipelines.neardup.printed): where the query's read fields' lines
    # are, and where the candidates' greys come from (None: no check)
    lines: dict = field(default_factory=dict)
    greys: Greys | None = field(default=None, repr=False)
    # reading across (printed.compare): what a printed field read off one photograph only says on
    # the other (pipelines.ingest.readings.field_reader; None: not read across)
    read_field: printed.FieldReader | None = field(default=None, repr=False)
    _pic_array: Any = field(default=None, repr=False, compare=False)  # the query's picture, once
    _grey: Any = field(default=None, repr=False, compare=False)  # the query's grey, once

    def _picture_parts(self, stored: np.ndarray) -> picture.Parts:
        if self._pic_array is None:
            assert self.image is not None
            self._pic_array = picture.of_image(self.image)
        return picture.compare(self._pic_array, stored)

    def _picture_verdict(self, verdict: dict[str, Any], same: bool, stored: np.ndarray | None) -> bool:
        """The aligned picture check's say on a candidate the signature judged `same` or not."""
        if stored is None:  # its original cannot be read: the signature's verdict stands
            verdict["reason"] += ", no picture"
            return same
        parts = self._picture_parts(stored)
        verdict["picture"] = parts.summary()
        alike = picture.same_picture(parts)
        if alike and not same:
            verdict["reason"] += ", picture agrees"
            return True
        if not alike and same:
            verdict["reason"] += ", picture differs"
            return False
        return same

    def _another_picture(self, verdict: dict[str, Any], stored: np.ndarray | None) -> bool:
        """The aligned picture check aligned the two pictures and found them another picture
        (not aligned, or no picture: no say)."""
        if stored is None:
            return False
        parts = self._picture_parts(stored)
        verdict["picture"] = parts.summary()
        if parts.inliers < picture.MIN_INLIERS or parts.box < picture.MIN_AREA or picture.same_picture(parts):
            return False
        verdict["reason"] += ", picture differs"
        return True

    def _printed_check(self, rows: list[dict], refs: list[tuple[dict, str, bool]], joined: set[int]) -> None:
        """The printed-lines check's say on the candidates about to merge (pipelines.neardup.printed):
        their field lines printed otherwise vetoes, a field read off one side only included (its
        line looked up on the other photograph); a merge the picture made on consistent text only
        needs the lines compared and alike (no check, no merge). `joined`: the rows the picture
        made the same."""
        todo, needs, uncertain = [], {}, {}
        for j, (verdict, (theirs, _label, only)) in enumerate(zip(rows, refs, strict=True)):
            if not verdict["same"]:
                continue
            # a number read as values that may be one another is confirmed by its printed line
            # whatever joined the pair (a product line's labels pass the pixel check)
            uncertain[j] = maybe_differs(self.said, stored_said(theirs)) & set(printed.LINE_FIELDS)
            needs[j] = (only and j in joined) or bool(uncertain[j])
            if self.greys is not None and (self.lines or theirs.get("ln")):
                todo.append(j)
            elif needs[j]:
                verdict.update(same=False, reason=verdict["reason"] + ", printed lines not compared")
        if not todo or self.greys is None:
            return
        greys = self.greys([(refs[j][1], str(refs[j][0].get("b") or "")) for j in todo])
        for j, stored in zip(todo, greys, strict=True):
            theirs, _label, only = refs[j]
            found = printed.NOTHING
            if stored is not None:
                if self._grey is None:
                    assert self.image is not None
                    self._grey = printed.grey(self.image)
                found = printed.compare(
                    self._grey,
                    self.lines,
                    stored,
                    theirs.get("ln") or {},
                    across=self._one_sided(theirs),
                    read_field=self.read_field,
                )
            rows[j]["printed"] = found.summary()
            veto = self._printed_veto(found, theirs, only, needs[j], uncertain[j])
            if veto:
                rows[j].update(same=False, reason=rows[j]["reason"] + ", " + veto)

    def _one_sided(self, theirs: dict) -> dict[str, tuple[str, ...]]:
        """Per side ("q": the query, "c": the candidate), the printed fields read off that
        photograph only, or read off both with a digit lost on the other (`_digits_lost`), where
        its entry knows the field's line: what is read across."""
        said, their_said = self.said, stored_said(theirs)
        mine, other = _printed_said(said), _printed_said(their_said)
        their_lines = theirs.get("ln") or {}
        # and a number read off both with a digit lost on one: the longer, on the other photograph
        lost = {k: _longer_side(said.get(k), their_said.get(k)) for k in printed.NUMBERS if k in mine & other}
        return {
            "q": tuple(k for k in printed.FIELDS if (k in mine - other or lost.get(k) == "q") and k in self.lines),
            "c": tuple(k for k in printed.FIELDS if (k in other - mine or lost.get(k) == "c") and k in their_lines),
        }

    def _printed_veto(self, found: printed.Verdict, theirs: dict, only: bool, needs: bool, uncertain: set[str]) -> str:
        """Why the printed-lines check keeps a candidate apart ('' when it does not). `uncertain`:
        the fields read as values that may be one another, whose lines must be printed alike."""
        # a field read off one photograph only, read across on the other as another value: the
        # same veto as a value read off both that differs (SAID_VETO_KEYS), whatever merged them.
        # At least ACROSS_READS crops must read a value, and one value: one crop of small print on
        # a blurred photograph reads anything (500ml read as 1800ml on a tune re-photograph, and
        # as 1500 and 100 by two other crops).
        for key, side, values in found.across:
            source = stored_said(theirs) if side == "c" else self.said
            one = len({read_value(v) for v in values}) == 1
            if len(values) >= ACROSS_READS and one and _read_across_differs(source.get(key), values[0], key):
                return f"{key} read across differs"
        one_sided = set(uncertain)
        if only:  # the fields read off one side only: their lines looked up on the other
            one_sided |= _printed_said(self.said) ^ _printed_said(stored_said(theirs))
        if found.differs or any(found.field_differs(k) for k in one_sided):
            return "printed lines differ"
        if needs and (found.differs is None or any(found.field_differs(k) is None for k in one_sided)):
            return "printed lines not compared"
        return ""

    @property
    def text_digests(self) -> tuple[str, ...]:
        """The read-the-same sets this image's candidates by text come from (and it joins)."""
        return text_digests(self.said) if has_content(self.view.luma) else ()

    def _image_check(self, theirs: dict, stored: dict) -> tuple[bool, float, str, bool]:
        """How a candidate's image is checked: (grey-only score, its limit, reason, text agrees and
        the fields do not)."""
        agree = self.use_fields and fields_agree(self.fields, theirs)
        text = text_agrees(self.said, stored_said(theirs))
        if agree:
            # both read and their text does not agree: perhaps another design of one product
            limit = FIELDS_AGREE_TEXT_DIFFERS_MAX_SCORE if self.read and stored and not text else FIELDS_AGREE_MAX_SCORE
            return True, limit, "verifier (fields agree)", False
        if text:
            return True, TEXT_AGREE_MAX_SCORE, "verifier (text agrees)", True
        return False, verifier.SAME_MAX_SCORE, "verifier", False

    def _read_now(self, parsed: list[tuple[str, int, bytes | None, dict]]) -> None:
        """The deferred reads this decision needs: the query's (once), then those of candidates
        whose entry says they were not read yet and whose fields do not already rule them out."""
        # a candidate the uploader's fields rule out is another label whatever either says
        open_ = [
            (label, theirs)
            for label, _d, _sig, theirs in parsed
            if not (self.use_fields and fields_conflict(self.fields, theirs))
        ]
        if not open_:  # so with none left (or no candidate at all), nothing needs reading
            return
        if self.read_query is not None:
            hook, self.read_query = self.read_query, None
            read, said, lines = hook()
            self.read, self.said = _query_reading(read, said)
            self.lines = lines or {}
        if self.readings is None or not self.said:  # nothing read off the query: nothing to compare
            return
        todo = [(label, theirs) for label, theirs in open_ if theirs.get("d")]
        if not todo:
            return
        refs = [
            (label, str(theirs.get("b") or ""), {k: theirs[k] for k in FIELD_KEYS if theirs.get(k)})
            for label, theirs in todo
        ]
        for (_label, theirs), answer in zip(todo, self.readings(refs), strict=True):
            if answer is not None:
                read, said = answer
                theirs["read"] = _read_keys(read)
                theirs["said"] = _read_keys(said) or theirs["read"]

    def _judge_images(self, to_compare: list, rows: list[dict], consistent_only: list[bool]) -> set[int]:
        """The signature's scores of the candidates left after the vetoes, then the picture's say
        where it applies; each candidate's verdict row updated. Returns the rows the picture made
        the same (the grey-only score alone did not)."""
        scores = verifier.verify_many(self.view, [c[1] for c in to_compare], fields_agree=[c[2] for c in to_compare])
        # agreeing text (fields not) never loses what the strict check alone would find
        strict_rows = [j for j, c in enumerate(to_compare) if c[4]]
        strict = dict(
            zip(strict_rows, verifier.verify_many(self.view, [to_compare[j][1] for j in strict_rows]), strict=True)
        )
        # the candidates' pictures in one call, only where the text agrees or is consistent (few)
        refs = [c[5] for c in to_compare if c[5] is not None]
        loaded = iter(self.pictures(refs) if refs and self.pictures is not None else [])
        joined: set[int] = set()
        for j, ((_row, _sig, loose, limit, _text, ref), score) in enumerate(zip(to_compare, scores, strict=True)):
            same = score <= limit
            if not same and j in strict and strict[j] <= verifier.SAME_MAX_SCORE:
                same, score = True, strict[j]
            if ref is not None:
                stored_picture = next(loaded)
                # on consistent text only, the picture may join (the printed lines then confirm) but
                # never parts what the pixels join (a score under the strict limit), as before it;
                # what the uploader's agreeing fields joined on the grey-only score over that limit
                # it parts where it aligned and saw another picture (an edition sent with the same
                # brand, product and brewery; the picture's colour moves with exposure, and a
                # brighter copy of one image scores 0.05)
                if same and consistent_only[j]:
                    if loose and score > verifier.SAME_MAX_SCORE and self._another_picture(rows[j], stored_picture):
                        same = False
                else:
                    before, same = same, self._picture_verdict(rows[j], same, stored_picture)
                    if same and not before:
                        joined.add(j)
            rows[j].update(same=same, score=round(score, 4))
        return joined

    def __call__(self, candidates: list[tuple[str, int, str | None]]) -> Match | None:
        parsed = [(label_id, distance, *parse_entry(entry)) for label_id, distance, entry in candidates]
        self._read_now(parsed)
        verdicts: list[tuple[str, int, dict[str, Any]]] = []
        # (verdict row, signature, grey-only score, its limit, text agrees and fields do not, the
        # candidate's (label id, blob key) where the picture check applies)
        to_compare: list[tuple[int, bytes, bool, float, bool, tuple[str, str] | None]] = []
        # per row of to_compare: (the candidate's entry, its label id, merged on consistent text only)
        printed_refs: list[tuple[dict, str, bool]] = []
        blank = not has_content(self.view.luma)
        for label_id, distance, sig, theirs in parsed:
            verdict: dict[str, Any]
            conflict = fields_conflict(self.fields, theirs) if self.use_fields else None
            stored = theirs.get("read") or {}
            said = read_conflict(self.read, stored, sure=True) or read_conflict(
                self.said, stored_said(theirs), SAID_VETO_KEYS
            )
            if blank:
                verdict = {"same": False, "reason": "no content (blank or single colour)"}
            elif conflict:
                verdict = {"same": False, "reason": f"different {conflict}"}
            elif said:
                verdict = {"same": False, "reason": f"read {said} differs"}
            elif sig is None:
                verdict = {"same": distance <= self.legacy_threshold, "reason": "no signature: pHash distance"}
            else:
                loose, limit, reason, text_only = self._image_check(theirs, stored)
                verdict = {"same": False, "reason": reason}
                agrees = text_agrees(self.said, stored_said(theirs))
                checked = agrees or (PICTURE_ACCEPTS_UNAGREED and text_consistent(self.said, stored_said(theirs)))
                ref = (label_id, str(theirs.get("b") or "")) if self.pictures is not None and checked else None
                to_compare.append((len(verdicts), sig, loose, limit, text_only, ref))
                printed_refs.append((theirs, label_id, checked and not agrees))
            verdicts.append((label_id, distance, verdict))
        rows = [verdicts[c[0]][2] for c in to_compare]
        joined = self._judge_images(to_compare, rows, [r[2] for r in printed_refs])
        self._printed_check(rows, printed_refs, joined)
        best: Match | None = None
        for label_id, distance, verdict in verdicts:
            self.judged.append({"label_id": label_id, "distance": distance, **verdict})
            if verdict["same"]:
                found = verdict.get("score")
                rank = (found if found is not None else 0.0, distance)
                if best is None or rank < ((best.score or 0.0), best.distance):
                    best = Match(label_id, distance, found)
        return best


def verifier_for(
    image: Image.Image,
    fields: dict | None,
    legacy_threshold: int,
    *,
    use_fields: bool = True,
    read: dict | None = None,
    said: dict | None = None,
    blob_key: str = "",
    pictures: Pictures | None = None,
    read_query: Callable[[], tuple[dict, dict, dict]] | None = None,
    readings: Readings | None = None,
    lines: dict | None = None,
    greys: Greys | None = None,
    read_field: printed.FieldReader | None = None,
):
    """(signature entry to store, fields digest, verifier) for one decoded image, its uploader's
    fields and what was read off it (`read`: {READ_KEYS: value} read surely, which can veto a
    match; `said`: every value read, which can agree; both from OCR, optional). `blob_key`: where
    its original is stored (kept in the entry, so later verifiers can read its picture);
    `pictures`: where the candidates' pictures come from, for the aligned picture check
    (NEARDUP_PICTURE_CHECK; None: no check). `read_query`: the query's read was deferred; it is
    read (this gives its (read, said, field lines)) only if it has candidates, and the entry says it was not
    read; `readings`: where candidates whose read was deferred are read. `lines`: where the read
    fields' lines are on this image (printed.field_lines, kept in the entry); `greys`: where the
    candidates' greys come from, for the printed-lines check (None: no check); `read_field`: how
    a printed field read off one photograph only is read on the other (None: it is not)."""
    view = verifier.query_view(image)
    fields = (fields or {}) if use_fields else {}
    read, said = _query_reading(read, said)
    return (
        make_entry(view.sig, fields, read, said, blob_key, deferred=read_query is not None, lines=lines),
        fields_digest(fields),
        Verifier(
            view,
            fields,
            legacy_threshold,
            use_fields,
            read,
            said,
            image=image,
            pictures=pictures,
            read_query=read_query,
            readings=readings,
            lines=dict(lines or {}),
            greys=greys,
            read_field=read_field,
        ),
    )
