"""Safe image decoding, content hashes and storage of the original bytes.

Decoding refuses, before any pixel is decompressed: more than MAX_IMAGE_BYTES, a type other than
JPEG / PNG / WebP / GIF (sniffed from magic bytes, not the file name or the client's content type),
and a header announcing more than MAX_IMAGE_PIXELS (decompression bomb). A file that then fails to
decode (truncated, corrupt) is CORRUPT_IMAGE. Animated GIFs use their first frame; EXIF rotation is
applied so a rotated phone photo hashes like its upright twin.

Each error is a YanaError whose code names the problem; the ingest job records it on the item.

Near duplicates are decided in two stages (pipelines.neardup): the 64-bit pHash finds candidates,
then `verify` compares a 32x32 signature of the candidate (luma and two colour planes, stored in
Redis) with the query image after aligning them, block by block (on a grid and on the grid shifted by
half a block), so labels that share a design and differ only in their text (where a global hash sees
one image) are told apart.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import cv2
import imagehash
import numpy as np
from PIL import Image, ImageOps
from scipy import ndimage

from yana.blobs import BlobStore
from yana.errors import ErrorCode, YanaError, describe

FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
EXTENSIONS = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif"}


@dataclass
class DecodedImage:
    image: Image.Image  # RGB, first frame, EXIF-upright
    format: str  # one of FORMATS
    width: int
    height: int


def sniff_format(data: bytes) -> str | None:
    """The image type by its magic bytes, or None when it is none we accept."""
    head = data[:16]
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "GIF"
    return None


def check_bytes(data: bytes, max_bytes: int) -> str:
    """Cheap checks the API can run before accepting bytes: size cap and type. Returns the format."""
    if len(data) > max_bytes:
        raise YanaError.of(ErrorCode.IMAGE_TOO_LARGE, f"image is {len(data)} bytes; the limit is {max_bytes}")
    if not data:
        raise YanaError.of(ErrorCode.EMPTY_IMAGE, "image is empty")
    fmt = sniff_format(data)
    if fmt is None:
        raise YanaError.of(ErrorCode.UNSUPPORTED_IMAGE_TYPE, "not a JPEG, PNG, WebP or GIF image")
    return fmt


def decode_image(data: bytes, *, max_bytes: int, max_pixels: int) -> DecodedImage:
    fmt = check_bytes(data, max_bytes)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data), formats=[fmt])
            w, h = img.size
            if w <= 0 or h <= 0:
                raise YanaError.of(ErrorCode.CORRUPT_IMAGE, "image has no pixels")
            if w * h > max_pixels:
                raise YanaError.of(
                    ErrorCode.IMAGE_TOO_MANY_PIXELS,
                    f"image is {w}x{h} pixels; the limit is {max_pixels} (decompression bomb guard)",
                )
            if getattr(img, "n_frames", 1) > 1:
                img.seek(0)
            img.load()
            rgb = ImageOps.exif_transpose(img).convert("RGB")
    except YanaError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise YanaError.of(ErrorCode.IMAGE_TOO_MANY_PIXELS, f"decompression bomb refused: {exc}") from exc
    except Exception as exc:  # UnidentifiedImageError, OSError (truncated), SyntaxError, struct.error...
        raise YanaError.of(ErrorCode.CORRUPT_IMAGE, f"cannot decode {fmt} image: {describe(exc)}") from exc
    return DecodedImage(rgb, fmt, rgb.width, rgb.height)


def sha1_hex(data: bytes) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()


def phash_hex(image: Image.Image) -> str:
    """64-bit DCT perceptual hash (imagehash.phash, 8x8) as 16 hex chars."""
    return str(imagehash.phash(image, hash_size=8))


def phash_int(hex16: str) -> int:
    return int(hex16, 16)


def hamming(a: str | int, b: str | int) -> int:
    """Bits that differ between two 64-bit hashes (ints or 16 hex chars): the one implementation."""
    a = phash_int(a) if isinstance(a, str) else a
    b = phash_int(b) if isinstance(b, str) else b
    return (a ^ b).bit_count()


def hamming_array(a, b) -> np.ndarray:
    """`hamming` over uint64 arrays (or a Python int), broadcasting like numpy."""
    return np.bitwise_count(np.asarray(a, dtype=np.uint64) ^ np.asarray(b, dtype=np.uint64))


# --- second stage: aligned thumbnail comparison ----------------------------------------------

SIG_SIDE = 32  # the stored signature: SIG_SIDE x SIG_SIDE bytes per channel
_PLANE = SIG_SIDE * SIG_SIDE
_RENDER = 128  # the query is warped into the candidate's frame at this size, then boxed down
_BLOCKS = 8  # the comparison grid (8 x 8 blocks of 4 x 4 signature pixels)
_HALF_BLOCK = SIG_SIDE // _BLOCKS // 2  # the offset of the shifted grid
_TEXTURED = 4.0  # a block whose levels vary less than this is flat ground: no correlation
# The colour planes need more: JPEG keeps colour at half resolution and quantizes it coarsely, so a
# small JPEG's colour blocks hold little but noise (a 96 x 144 label re-saved at q80 decorrelated
# to 0.88 at 4.0; at 12.0 only ink and shapes that differ in hue count: 23 of 24 such twins pass).
_TEXTURED_COLOUR = 12.0
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
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)
# colour-opponent axes (red-green, yellow-blue), stored as value / 2 + 128 in one byte each
_OPPONENT = np.array([[1, -1, 0], [1, 1, -2]], dtype=np.float32) / np.array([[2**0.5], [6**0.5]], dtype=np.float32)


def _rgb_square(image: Image.Image, side: int) -> Image.Image:
    g = image.convert("RGB")
    return g.resize((side, side), Image.Resampling.BOX if min(g.size) >= side else Image.Resampling.BILINEAR)


def _channels(rgb: np.ndarray) -> np.ndarray:
    """(h, w, 3) RGB floats -> (3, h, w): luma, red-green, yellow-blue."""
    return np.concatenate([(rgb @ _LUMA)[None], np.moveaxis(rgb @ _OPPONENT.T, -1, 0)])


def signature(image: Image.Image) -> bytes:
    """The candidate-side data of the verifier (3 KiB): the image boxed to SIG_SIDE x SIG_SIDE
    (aspect ignored: an alignment absorbs it) as luma, then the two colour-opponent planes."""
    rgb = np.asarray(_rgb_square(_rgb_square(image, _RENDER), SIG_SIDE), dtype=np.float32)
    ch = _channels(rgb)
    ch[1:] = ch[1:] / 2 + 128
    return np.clip(np.rint(ch), 0, 255).astype(np.uint8).tobytes()


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


def _grid(side: int) -> tuple[np.ndarray, np.ndarray]:
    ys, xs = np.mgrid[0:side, 0:side].astype(np.float32)
    c = (side - 1) / 2
    return ((xs - c) / side).ravel(), ((ys - c) / side).ravel()


def _bilinear(stack: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Sample per candidate the maps stacked as (k, s*s, m) at points x, y (k, n), clamped to
    the border; returns (k, n, m)."""
    k, ss, _m = stack.shape
    s = int(round(ss**0.5))
    x = np.clip(x, 0, s - 1.001)
    y = np.clip(y, 0, s - 1.001)
    x0, y0 = x.astype(np.intp), y.astype(np.intp)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    rows = np.arange(k)[:, None]
    i = y0 * s + x0
    top = stack[rows, i] * (1 - fx) + stack[rows, i + 1] * fx
    bottom = stack[rows, i + s] * (1 - fx) + stack[rows, i + s + 1] * fx
    return top * (1 - fy) + bottom * fy


_DAMP = 1e-3 * np.eye(8)


def _align(q: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """Per candidate (cs: k x 32 x 32), the affine map (6 parameters, normalised coordinates)
    taking the query's frame into the candidate's, with a gain and offset for brightness and
    contrast: Gauss-Newton (Lucas-Kanade) on all candidates at once, coarse (16 px, blurred: a
    wide basin for crops and rotations) then fine (32 px)."""
    k = cs.shape[0]
    p = np.zeros((k, 6))
    qb, cb = ndimage.gaussian_filter(q, 1.0), ndimage.gaussian_filter(cs, (0, 1.0, 1.0))
    levels = (
        (qb.reshape(16, 2, 16, 2).mean(axis=(1, 3)), cb.reshape(k, 16, 2, 16, 2).mean(axis=(2, 4)), 8),
        (ndimage.gaussian_filter(q, 0.5), ndimage.gaussian_filter(cs, (0, 0.5, 0.5)), 4),
    )
    for ql, cl, iters in levels:
        s = ql.shape[0]
        u, v = _grid(s)
        gy, gx = np.gradient(cl, axis=(1, 2))
        stack = np.stack([cl, gx * s, gy * s], axis=-1).reshape(k, s * s, 3)
        q1 = ql.ravel()
        half = (s - 1) / 2
        for _ in range(iters):
            cx = ((1 + p[:, 0:1]) * u + p[:, 1:2] * v + p[:, 2:3]) * s + half
            cy = (p[:, 3:4] * u + (1 + p[:, 4:5]) * v + p[:, 5:6]) * s + half
            w = ((cx >= 0) & (cx <= s - 1) & (cy >= 0) & (cy <= s - 1)).astype(np.float64)
            sampled = _bilinear(stack, cx, cy)
            cw, gxw, gyw = sampled[..., 0], sampled[..., 1], sampled[..., 2]
            n = np.maximum(w.sum(axis=1, keepdims=True), 1)
            qm = (w * q1).sum(axis=1, keepdims=True) / n
            cm = (w * cw).sum(axis=1, keepdims=True) / n
            dq = (q1 - qm) * w
            gain = (dq * (cw - cm)).sum(axis=1, keepdims=True) / np.maximum((dq * dq).sum(axis=1, keepdims=True), 1e-6)
            e = (cw - cm - gain * (q1 - qm)) * w
            jac = np.stack([gxw * u, gxw * v, gxw, gyw * u, gyw * v, gyw, -q1 + 0 * gxw, -np.ones_like(gxw)], 2)
            jw = jac * w[:, :, None]
            h = np.einsum("kni,knj->kij", jw, jac) + _DAMP
            dp = np.linalg.solve(h, -np.einsum("kni,kn->ki", jw, e)[:, :, None])[:, :, 0]
            live = (w.sum(axis=1) >= q1.size // 4)[:, None]
            p = p + np.where(live, dp[:, :6], 0)
            if np.abs(dp[:, :6]).max() < 5e-4:
                break
    return p


def _warp_into(square: Image.Image, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The query (RGB, _RENDER square) rendered in the candidate's frame at _RENDER size, then
    boxed like a signature (so both come from the same filter), as its three channels, and per
    signature pixel the share the query covers."""
    a_mat = np.array([[1 + p[0], p[1]], [p[3], 1 + p[4]]])
    t = np.array([p[2], p[5]])
    ai = np.linalg.inv(a_mat)
    r = _RENDER
    # output pixel X -> candidate coord X/R - .5 -> query coord ai @ (. - t) -> query pixel
    base = ai @ (np.array([-0.5, -0.5]) - t)
    data = (ai[0, 0], ai[0, 1], r * (base[0] + 0.5), ai[1, 0], ai[1, 1], r * (base[1] + 0.5))
    warped = square.transform((r, r), Image.Transform.AFFINE, data, Image.Resampling.BILINEAR, fillcolor=0)
    cover = Image.new("L", (r, r), 255).transform(
        (r, r), Image.Transform.AFFINE, data, Image.Resampling.NEAREST, fillcolor=0
    )
    qw = np.asarray(warped.resize((SIG_SIDE, SIG_SIDE), Image.Resampling.BOX), dtype=np.float32)
    cv = np.asarray(cover.resize((SIG_SIDE, SIG_SIDE), Image.Resampling.BOX), dtype=np.float32) / 255
    return _channels(qw), cv


# Past the affine alignment, a homography refinement (OpenCV's ECC, compiled) for what an affine
# map cannot model: a phone photo's perspective. Tried whenever the affine score fails (gating it
# at 2.5 saved a fifth of the verifier's time and lost a tenth of the perspective variants).
_ECC_CRITERIA = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 40, 1e-4)
_F = _RENDER / SIG_SIDE
_EVERY_PIXEL = np.full((SIG_SIDE, SIG_SIDE), 255, np.uint8)
_TO_SIG = np.array([[1 / _F, 0, 0.5 / _F - 0.5], [0, 1 / _F, 0.5 / _F - 0.5], [0, 0, 1]])
_TO_RENDER = np.array([[_F, 0, 0.5 * _F - 0.5], [0, _F, 0.5 * _F - 0.5], [0, 0, 1]])


def _homography_of(p: np.ndarray) -> np.ndarray:
    """`_align`'s affine parameters as a 3x3 map from query to candidate signature pixels."""
    a = np.array([[1 + p[0], p[1]], [p[3], 1 + p[4]]])
    half = (SIG_SIDE - 1) / 2
    h = np.eye(3)
    h[:2, :2] = a
    h[:2, 2] = a @ np.array([-half, -half]) + np.array([p[2], p[5]]) * SIG_SIDE + half
    return h


def _refine(q: np.ndarray, c: np.ndarray, p: np.ndarray) -> np.ndarray | None:
    """The homography (query -> candidate signature pixels) ECC converges to from the affine
    alignment, or None when it does not converge."""
    try:
        _cc, h = cv2.findTransformECC(
            q, c, _homography_of(p).astype(np.float32), cv2.MOTION_HOMOGRAPHY, _ECC_CRITERIA, _EVERY_PIXEL, 1
        )
    except cv2.error:
        return None
    return h.astype(np.float64)


def _warp_homography(square: Image.Image, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """As `_warp_into`, for a homography between signature pixels."""
    m = _TO_RENDER @ h @ _TO_SIG
    size = (_RENDER, _RENDER)
    warped = cv2.warpPerspective(np.asarray(square, dtype=np.float32), m, size, flags=cv2.INTER_LINEAR)
    cover = cv2.warpPerspective(np.full(size, 255, np.float32), m, size, flags=cv2.INTER_NEAREST)
    qw = cv2.resize(warped, (SIG_SIDE, SIG_SIDE), interpolation=cv2.INTER_AREA)
    return _channels(qw), cv2.resize(cover, (SIG_SIDE, SIG_SIDE), interpolation=cv2.INTER_AREA) / 255


Score = tuple[float, float, float, float]
# (luma residual, worst luma block, worst colour block, worst colour block on the shifted grid)


def compare(image: Image.Image, candidate_sigs: list[bytes], query_sig: bytes | None = None) -> list[Score]:
    """Per candidate signature: the score parts of the query image after aligning it. An
    unaligned comparison that already passes is kept: most re-uploads (a new JPEG, a resize,
    brightness) need no alignment, and it costs a tenth of one. Then an affine alignment, then a
    homography refinement; the best score counts."""
    if not candidate_sigs:
        return []
    cs = np.stack([_sig_array(c) for c in candidate_sigs])
    colour = [_chroma_arrays(c) for c in candidate_sigs]
    q = _sig_array(query_sig if query_sig is not None else signature(image))
    square = _rgb_square(image, _RENDER)
    unaligned = _warp_into(square, np.zeros(6))
    out = [_score(*unaligned, c, cc) for c, cc in zip(cs, colour, strict=True)]
    todo = [i for i, sc in enumerate(out) if _passes(sc, colour[i]) > 1.0]
    if todo:
        for i, p in zip(todo, _align(q, cs[todo]), strict=True):
            out[i] = _better(out[i], _score(*_warp_into(square, p), cs[i], colour[i]), colour[i])
            if _passes(out[i], colour[i]) > 1.0 and (h := _refine(q, cs[i], p)) is not None:
                out[i] = _better(out[i], _score(*_warp_homography(square, h), cs[i], colour[i]), colour[i])
    return out


def _passes(sc: Score, colour: np.ndarray | None) -> float:
    return _combined(*sc, legacy=colour is None)


def _better(a: Score, b: Score, colour: np.ndarray | None) -> Score:
    return a if _passes(a, colour) <= _passes(b, colour) else b


def _combined(
    residual: float, worst: float, worst_colour: float = 0.0, worst_colour_shifted: float = 0.0, *, legacy: bool = False
) -> float:
    """The verifier score: <= 1.0 when every part is within its limit."""
    return max(
        residual / (LEGACY_MAX_RESIDUAL if legacy else MAX_RESIDUAL),
        worst / (LEGACY_MAX_BLOCK_DECORRELATION if legacy else MAX_BLOCK_DECORRELATION),
        worst_colour / MAX_CHROMA_DECORRELATION,
        worst_colour_shifted / MAX_SHIFTED_CHROMA_DECORRELATION,
    )


def _block_decorrelation(
    qw: np.ndarray, ok: np.ndarray, c: np.ndarray, textured: float = _TEXTURED, shift: int = 0
) -> np.ndarray:
    """Per block of the comparison grid (shifted by `shift` pixels: the grid then drops the last
    block row and column), 1 - correlation over the covered pixels, for blocks covered at least
    half and textured (standard deviation over `textured`) on both sides; -1.0 elsewhere."""
    b = SIG_SIDE // _BLOCKS
    n = _BLOCKS - (1 if shift else 0)
    end = shift + n * b
    qw, ok, c = qw[shift:end, shift:end], ok[shift:end, shift:end], c[shift:end, shift:end]
    shape = (n, b, n, b)
    w = ok.reshape(shape).astype(np.float32)
    cnt = w.sum(axis=(1, 3))
    xs, ys = qw.reshape(shape) * w, c.reshape(shape) * w
    safe = np.maximum(cnt, 1)
    mx, my = xs.sum(axis=(1, 3)) / safe, ys.sum(axis=(1, 3)) / safe
    vx = (xs * qw.reshape(shape)).sum(axis=(1, 3)) / safe - mx**2
    vy = (ys * c.reshape(shape)).sum(axis=(1, 3)) / safe - my**2
    cxy = (xs * c.reshape(shape)).sum(axis=(1, 3)) / safe - mx * my
    use = (cnt >= b * b / 2) & (vx > textured**2) & (vy > textured**2)
    return np.where(use, 1 - cxy / np.sqrt(np.maximum(vx * vy, 1e-12)), -1.0)


def _worst_block(qw: np.ndarray, ok: np.ndarray, c: np.ndarray, textured: float = _TEXTURED) -> float:
    """1 - correlation of the worst block (_BLOCKS x _BLOCKS grid); 0.0 when none is textured."""
    return max(0.0, float(_block_decorrelation(qw, ok, c, textured).max()))


def _worst_inner_block(qw: np.ndarray, ok: np.ndarray, c: np.ndarray) -> float:
    """The worst luma block away from the border, over the grid and the grid shifted by half a
    block (a character that straddles two blocks is whole in one of the shifted ones)."""
    aligned = _block_decorrelation(qw, ok, c)[1:-1, 1:-1]
    shifted = _block_decorrelation(qw, ok, c, shift=_HALF_BLOCK)[1:-1, 1:-1]
    return max(0.0, float(aligned.max()), float(shifted.max()))


def _score(qw: np.ndarray, cover: np.ndarray, c: np.ndarray, colour: np.ndarray | None = None) -> Score:
    """qw: the warped query's channels (3 x S x S); c: the candidate's luma; colour: its colour
    planes. The colour blocks are only looked at when the luma parts pass (they can only fail it).
    A grey-only (legacy) signature keeps the luma test it was stored under: every block of the grid."""
    ok = cover >= 0.999
    if int(ok.sum()) < c.size // 2:  # the alignment ran off: not the same picture
        return 9.0, 9.0, 9.0, 9.0
    x, y = qw[0][ok], c[ok]
    xm, ym = x.mean(), y.mean()
    gain = ((x - xm) * (y - ym)).sum() / max(((x - xm) ** 2).sum(), 1e-6)
    residual = float(np.sqrt(((y - ym - gain * (x - xm)) ** 2).mean()) / (y.std() + 1e-3))
    if colour is None:
        return residual, _worst_block(qw[0], ok, c), 0.0, 0.0
    worst = _worst_inner_block(qw[0], ok, c)
    if _combined(residual, worst) > 1.0:
        return residual, worst, 0.0, 0.0
    grids = [
        _block_decorrelation(qw[k + 1], ok, colour[k], _TEXTURED_COLOUR, shift)
        for shift in (0, _HALF_BLOCK)
        for k in range(2)
    ]
    aligned = max(0.0, float(grids[0].max()), float(grids[1].max()))
    shifted = max(0.0, float(grids[2].max()), float(grids[3].max()))
    return residual, worst, aligned, shifted


def verify_many(
    image: Image.Image,
    candidate_sigs: list[bytes],
    query_sig: bytes | None = None,
    fields_agree: list[bool] | None = None,
) -> list[float]:
    """Verifier score per candidate signature: <= 1.0 means the same label. Where
    `fields_agree[i]`, the uploader's fields already tell the labels apart, and the score is the
    grey-only one (residual / LEGACY_MAX_RESIDUAL, worst luma block / LEGACY_MAX_BLOCK_DECORRELATION;
    no colour), which pipelines.neardup compares with its looser FIELDS_AGREE_MAX_SCORE."""
    agree = fields_agree or [False] * len(candidate_sigs)
    return [
        score_of(sc, sig, fields_agree=a)
        for sc, sig, a in zip(compare(image, candidate_sigs, query_sig), candidate_sigs, agree, strict=True)
    ]


def score_of(sc: Score, sig: bytes, *, fields_agree: bool = False) -> float:
    """One candidate's score from `compare`'s parts (see verify_many)."""
    if fields_agree:
        return _combined(sc[0], sc[1], legacy=True)
    return _passes(sc, _chroma_arrays(sig))


def verify(image: Image.Image, candidate_sig: bytes, query_sig: bytes | None = None) -> float:
    """Verifier score of one near-duplicate candidate: <= 1.0 means the same label."""
    return verify_many(image, [candidate_sig], query_sig)[0]


def image_relpath(sha1: str, fmt: str) -> str:
    """Where an image lives, relative to DATA_DIR (content-addressed: rewriting it is harmless)."""
    return f"images/{sha1[:2]}/{sha1}.{EXTENSIONS[fmt]}"


MEDIA_TYPES = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp", "gif": "image/gif"}


def store_image(blobs: BlobStore, sha1: str, fmt: str, data: bytes) -> str:
    """Keep the original bytes in the blob store (atomic put); returns the blob key, which is also
    the path relative to DATA_DIR with the local backend. Content-addressed: a second put of the
    same bytes is skipped."""
    key = image_relpath(sha1, fmt)
    have = blobs.stat(key)
    if have is not None and have.size == len(data):
        return key
    blobs.put(key, data)
    return key


def media_type(key: str) -> str:
    return MEDIA_TYPES.get(key.rsplit(".", 1)[-1].lower(), "application/octet-stream")


def write_atomic(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
