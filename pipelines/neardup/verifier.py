"""The near-duplicate verifier: second stage after the pHash candidates (pipelines.neardup.decision).

`verify` compares a 32x32 signature of the candidate (luma and two colour planes, stored in Redis)
with the query image after aligning them, block by block (on a grid and on the grid shifted by half
a block), so labels that share a design and differ only in their text (where a global hash sees one
image) are told apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image


def _kernels():
    """The compiled kernels, imported on first use: numba and llvmlite (~50 MB, seconds) stay out
    of processes that only decode and hash images (the API)."""
    from pipelines.neardup import kernels

    return kernels


# --- second stage: aligned thumbnail comparison ----------------------------------------------

SIG_SIDE = 32  # the stored signature: SIG_SIDE x SIG_SIDE bytes per channel
_PLANE = SIG_SIDE * SIG_SIDE
_RENDER = 128  # the query is warped into the candidate's frame at this size, then boxed down
# the comparison grid: 8 x 8 blocks of 4 x 4 signature pixels (verifier_kernels.BLOCK)
_TEXTURED = 4.0  # a block whose levels vary less than this is flat ground: no correlation
# The colour planes need more: JPEG keeps colour at half resolution and quantizes it coarsely, so a
# small JPEG's colour blocks hold little but noise (a 96 x 144 label re-saved at q80 decorrelated
# to 0.88 at 4.0; at 12.0 only ink and shapes that differ in hue count: 23 of 24 such twins pass).
_TEXTURED_COLOUR = 12.0
# A score at or under this is the same label: every part within its limit (_combined).
SAME_MAX_SCORE = 1.0
# A pair is the same label when all parts stay under these: the luma residual after alignment and
# a global gain/offset (relative to the candidate's contrast), and the worst block's 1 - correlation
# in luma and in the two colour-opponent channels (a changed word lives in a few blocks; a global
# score would average it away). Small blocks (4 x 4 px) keep a changed character from being diluted
# by the ground around it. The colour channels exist because ink often differs from its ground in
# hue, not brightness (purple on teal: the same grey), and a grey signature then shows no text at
# all: on the tuning seed (seed 2, 400 labels, half from shared designs, 2,934 pairs of distinct
# labels within the pHash radius) 222 pairs passed the grey-only test, 5 pass this one, and the
# recall of 800 variants went from 0.970 to 0.981.
# Two grids, since the label's text is faint at 32 x 32 (thin strokes, ink close to its ground):
# the 8 x 8 grid, and the same grid shifted by half a block (7 x 7 blocks, the outer 2 px left
# out), because a character cut by a block border leaves every aligned block correlated. The luma
# test looks at the inner blocks of both grids only: the border ring is where a rotation's fill, a
# crop's or a photo's edge and the frame line decorrelate most, and it cost the most variants (37
# of 130 lost on the tuning seed failed on a luma border block alone). The colour test keeps every
# block of the aligned grid at 0.60 and adds the shifted grid, which skips the noisiest border
# pixels, at 0.40. On the tuning seed (seed 2, --n 2000: 2,000 labels, 30 % from shared designs,
# 4,000 variants) images only went from recall 0.9675 / 0.42 % false merges (23 same-design labels
# and 2 variants) to 0.9795 / 0.15 % (7 and 2); the residual and luma limits were loosened from
# 0.30 / 0.50 in that step (at no cost in false merges there; tightening any limit costs 0.4 %
# recall or more per false merge saved). Reported on seed 1 by bench/neardup_eval.py (README's
# bench table).
MAX_RESIDUAL = 0.35
MAX_BLOCK_DECORRELATION = 0.55
MAX_CHROMA_DECORRELATION = 0.60
MAX_SHIFTED_CHROMA_DECORRELATION = 0.40
# Signatures stored before the colour channels (grey only, 1 KiB) keep the test they were tuned
# with: residual 0.20 and every block of the aligned grid at 0.50 (without the colour test, looser
# limits would let more same-design labels through).
LEGACY_MAX_RESIDUAL = 0.20
LEGACY_MAX_BLOCK_DECORRELATION = 0.50
# An alignment is first scored on a preview (the query's 32 px view resampled: 1/16 of the exact
# warp's samples); when the preview's residual is over this many times the residual limit, the
# exact warp is skipped (and an affine alignment is not refined by a homography): no pair can pass
# from there. On the tuning seed (seed 2, 1,500 labels, 2,632 affine and 2,316 homography
# alignments) the preview's residual of every pair that then passed was at most 1.9x its exact
# one and at most 0.455 (limit 0.35), and every pair the homography rescued had an affine preview
# residual of at most 0.484; the gate at 2x skips 71 % of the refinements of other labels. It is
# not applied where the fields agree (their looser limit allows a larger residual).
PREVIEW_RESIDUAL_FACTOR = 2.0
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)
# colour-opponent axes (red-green, yellow-blue), stored as value / 2 + 128 in one byte each
_OPPONENT = np.array([[1, -1, 0], [1, 1, -2]], dtype=np.float32) / np.array([[2**0.5], [6**0.5]], dtype=np.float32)


def _rgb_square(image: Image.Image, side: int) -> Image.Image:
    g = image.convert("RGB")
    return g.resize((side, side), Image.Resampling.BOX if min(g.size) >= side else Image.Resampling.BILINEAR)


def _channels(rgb: np.ndarray) -> np.ndarray:
    """(h, w, 3) RGB floats -> (3, h, w): luma, red-green, yellow-blue."""
    return np.concatenate([(rgb @ _LUMA)[None], np.moveaxis(rgb @ _OPPONENT.T, -1, 0)])


def _boxed_channels(image: Image.Image) -> tuple[Image.Image, np.ndarray]:
    """The image squared to _RENDER px, and its channels boxed to SIG_SIDE px (float)."""
    square = _rgb_square(image, _RENDER)
    return square, _channels(np.asarray(_rgb_square(square, SIG_SIDE), dtype=np.float32))


def _to_signature(ch: np.ndarray) -> bytes:
    ch = ch.copy()
    ch[1:] = ch[1:] / 2 + 128
    return np.clip(np.rint(ch), 0, 255).astype(np.uint8).tobytes()


def signature(image: Image.Image) -> bytes:
    """The candidate-side data of the verifier (3 KiB): the image boxed to SIG_SIDE x SIG_SIDE
    (aspect ignored: an alignment absorbs it) as luma, then the two colour-opponent planes."""
    return _to_signature(_boxed_channels(image)[1])


@dataclass(frozen=True)
class QueryView:
    """What the verifier needs of a query image, made once with its signature (before the atomic
    check-and-insert, whatever the number of candidates)."""

    sig: bytes
    square: np.ndarray  # RGB at _RENDER px (float64): warped into each candidate's frame
    unaligned: np.ndarray  # its channels boxed to SIG_SIDE px: the query as an unaligned comparison sees it
    luma: np.ndarray  # the signature's luma (float64)
    levels: tuple[np.ndarray, np.ndarray]  # the alignment's pyramid of it


def query_view(image: Image.Image) -> QueryView:
    square, ch = _boxed_channels(image)
    sig = _to_signature(ch)
    luma = _sig_array(sig).astype(np.float64)
    return QueryView(sig, np.asarray(square, dtype=np.float64), ch.astype(np.float64), luma, _kernels().pyramid(luma))


def _sig_array(sig: bytes) -> np.ndarray:
    """The luma plane of a signature (every signature starts with it)."""
    return np.frombuffer(sig[:_PLANE], dtype=np.uint8).reshape(SIG_SIDE, SIG_SIDE).astype(np.float32)


def _chroma_arrays(sig: bytes) -> np.ndarray | None:
    """The two colour planes (2 x SIG_SIDE x SIG_SIDE, opponent units), or None for a grey-only
    signature stored before they existed."""
    if len(sig) < 3 * _PLANE:
        return None
    planes = np.frombuffer(sig[_PLANE : 3 * _PLANE], dtype=np.uint8).reshape(2, SIG_SIDE, SIG_SIDE)
    return (planes.astype(np.float32) - 128) * 2


def verifier_limits() -> np.ndarray:
    """The limits above in the order verifier_kernels takes them (read at each call, so a tuning
    run can set them)."""
    return np.array(
        [
            MAX_RESIDUAL,
            MAX_BLOCK_DECORRELATION,
            MAX_CHROMA_DECORRELATION,
            MAX_SHIFTED_CHROMA_DECORRELATION,
            LEGACY_MAX_RESIDUAL,
            LEGACY_MAX_BLOCK_DECORRELATION,
            _TEXTURED,
            _TEXTURED_COLOUR,
        ]
    )


Score = tuple[float, float, float, float]
# (luma residual, worst luma block, worst colour block, worst colour block on the shifted grid)
_NO_COLOUR = np.zeros((2, SIG_SIDE, SIG_SIDE))


def compare(
    query: Image.Image | QueryView,
    candidate_sigs: list[bytes],
    *,
    homography: bool = True,
    loose: list[bool] | None = None,
) -> list[Score]:
    """Per candidate signature: the score parts of the query image after aligning it (compiled:
    pipelines.neardup.kernels). An unaligned comparison that already passes is kept: most
    re-uploads (a new JPEG, a resize, brightness) need no alignment. Then an affine alignment
    (Gauss-Newton on the luma, 16 then 32 px), then (with `homography`) a homography refinement
    of it for what an affine map cannot model, a phone photo's perspective; the best score counts.
    The query is warped at _RENDER px into the candidate's frame and boxed down, so both sides
    come from the same filter. `loose[i]`: the candidate will be judged on the fields-agree limit,
    so no preview skips its exact warp."""
    if not candidate_sigs:
        return []
    view = query if isinstance(query, QueryView) else query_view(query)
    limits = verifier_limits()
    out: list[Score] = []
    for i, sig in enumerate(candidate_sigs):
        colour = _chroma_arrays(sig)
        limit = MAX_RESIDUAL if colour is not None else LEGACY_MAX_RESIDUAL
        parts = _kernels().compare_one(
            view.square,
            view.unaligned,
            view.levels,
            view.luma,
            _sig_array(sig).astype(np.float64),
            _NO_COLOUR if colour is None else colour.astype(np.float64),
            colour is not None,
            limits,
            homography,
            np.inf if loose and loose[i] else PREVIEW_RESIDUAL_FACTOR * limit,
        )
        out.append((float(parts[0]), float(parts[1]), float(parts[2]), float(parts[3])))
    return out


def _passes(sc: Score, colour: np.ndarray | None) -> float:
    return _combined(*sc, legacy=colour is None)


def _combined(
    residual: float, worst: float, worst_colour: float = 0.0, worst_colour_shifted: float = 0.0, *, legacy: bool = False
) -> float:
    """The verifier score: <= 1.0 when every part is within its limit."""
    return float(_kernels().combined(residual, worst, worst_colour, worst_colour_shifted, verifier_limits(), legacy))


def verify_many(
    query: Image.Image | QueryView, candidate_sigs: list[bytes], fields_agree: list[bool] | None = None
) -> list[float]:
    """Verifier score per candidate signature: <= 1.0 means the same label. Where
    `fields_agree[i]`, the uploader's fields already tell the labels apart, and the score is the
    grey-only one (residual / LEGACY_MAX_RESIDUAL, worst luma block / LEGACY_MAX_BLOCK_DECORRELATION;
    no colour), which pipelines.neardup.decision compares with its looser FIELDS_AGREE_MAX_SCORE."""
    agree = fields_agree or [False] * len(candidate_sigs)
    return [
        score_of(sc, sig, fields_agree=a)
        for sc, sig, a in zip(compare(query, candidate_sigs, loose=agree), candidate_sigs, agree, strict=True)
    ]


def score_of(sc: Score, sig: bytes, *, fields_agree: bool = False) -> float:
    """One candidate's score from `compare`'s parts (see verify_many)."""
    if fields_agree:
        return _combined(sc[0], sc[1], legacy=True)
    return _passes(sc, _chroma_arrays(sig))


def verify(query: Image.Image | QueryView, candidate_sig: bytes) -> float:
    """Verifier score of one near-duplicate candidate: <= 1.0 means the same label."""
    return verify_many(query, [candidate_sig])[0]


def warm_up() -> None:
    """Run every compiled kernel of the verifier once (loads them from numba's on-disk cache, or
    compiles them on a fresh install: ~15 s), so a worker's first candidate does not pay it."""
    from PIL import ImageDraw

    pictures = []
    for k in range(2):
        img = Image.new("RGB", (96, 144), (200, 180, 120))
        ImageDraw.Draw(img).rectangle((20 + 10 * k, 30, 70, 100 - 20 * k), fill=(40, 20, 90))
        pictures.append(img)
    other = signature(pictures[1])
    compare(pictures[0], [other, other[:_PLANE]])  # colour and grey-only, through every stage
    compare(pictures[0], [other], loose=[True])
