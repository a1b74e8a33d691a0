"""Compiled kernels of the near-duplicate verifier (pipelines.imaging.compare).

The verifier's steps are many small array operations on 32 x 32 signatures: as numpy calls each
costs more in dispatch than in arithmetic (an aligned comparison took ~5 ms, ~25 calls per
Gauss-Newton iteration). Here they are loops compiled by numba (nopython, cached on disk next to
this file), one call per candidate: the unaligned comparison, the affine alignment (Gauss-Newton,
coarse then fine), the homography refinement for a phone photo's perspective, the warps of the
query into the candidate's frame, a 32 px preview of each warp that skips the exact one where no
pair could pass (imaging.PREVIEW_RESIDUAL_FACTOR), and the block scores.

Coordinates: a point of a picture is given in normalised units, u = E / side - 0.5 where E is the
position measured from the picture's top-left edge in pixels of that side (so -0.5 .. 0.5 across
the picture whatever its resolution). An alignment is a 3 x 3 map of normalised query points onto
normalised candidate points (affine: last row 0 0 1).
"""

from __future__ import annotations

import numba as nb
import numpy as np

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}  # numpy: x / 0 is inf or nan, not an exception

SIG = 32  # signature side (imaging.SIG_SIDE)
RENDER = 128  # the query square's side (imaging._RENDER)
BOX = RENDER // SIG
BLOCK = 4  # comparison block side in signature pixels
HALF_BLOCK = BLOCK // 2
# `limits` (imaging.verifier_limits(), where each is explained), by position:
RESIDUAL, BLOCK_DECORRELATION, CHROMA, SHIFTED_CHROMA, LEGACY_RESIDUAL, LEGACY_BLOCK, TEXTURED, TEXTURED_COLOUR = range(
    8
)
FAILED = 9.0  # every score part of a comparison that ran off the picture
_DAMP = 1e-3
_STEP_DONE = 5e-4  # a Gauss-Newton step this small (normalised units) has converged
_AFFINE_ITERS = (8, 4)  # coarse (16 px), fine (32 px)
# The homography refinement is OpenCV's ECC (findTransformECC, as the verifier first called it),
# until the correlation changes less than 1e-4, at most 5 iterations: from the affine alignment
# more do not help (perspective, rotation and crop variants of 400 labels that the affine
# alignment failed: 55 of 67 pass after 5 iterations, 54 after OpenCV's 40, 56 after 3), while
# an unrelated candidate that does not stop at once (4 in 10) ran all 40 (p99 2.3 ms vs 0.39).
_ECC_ITERS = 5
_ECC_EPS = 1e-4


@nb.njit(**_JIT)
def combined(residual, worst, worst_colour, worst_colour_shifted, limits, legacy):
    """The verifier score: <= 1.0 when every part is within its limit."""
    r = residual / limits[LEGACY_RESIDUAL if legacy else RESIDUAL]
    b = worst / limits[LEGACY_BLOCK if legacy else BLOCK_DECORRELATION]
    return max(r, b, worst_colour / limits[CHROMA], worst_colour_shifted / limits[SHIFTED_CHROMA])


@nb.njit(**_JIT)
def gaussian_blur(img, sigma):
    """scipy.ndimage.gaussian_filter(img, sigma) (mode 'reflect', truncate 4.0) in float64."""
    radius = int(4.0 * sigma + 0.5)
    kern = np.empty(2 * radius + 1)
    total = 0.0
    for i in range(-radius, radius + 1):
        kern[i + radius] = np.exp(-0.5 * i * i / (sigma * sigma))
        total += kern[i + radius]
    kern /= total
    return _convolve_columns(_convolve_columns(img, kern).T, kern).T


@nb.njit(**_JIT)
def _convolve_columns(img, kern):
    """img convolved along its first axis with the symmetric kernel (mode 'reflect')."""
    radius = kern.size // 2
    h, w = img.shape
    out = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            acc = 0.0
            for i in range(-radius, radius + 1):
                yy = y + i
                yy = -yy - 1 if yy < 0 else (2 * h - yy - 1 if yy >= h else yy)
                acc += kern[i + radius] * img[yy, x]
            out[y, x] = acc
    return out


@nb.njit(**_JIT)
def _halve(img):
    s = img.shape[0] // 2
    out = np.empty((s, s))
    for y in range(s):
        for x in range(s):
            out[y, x] = 0.25 * (
                img[2 * y, 2 * x] + img[2 * y, 2 * x + 1] + img[2 * y + 1, 2 * x] + img[2 * y + 1, 2 * x + 1]
            )
    return out


@nb.njit(**_JIT)
def _gradient(img):
    """np.gradient along both axes (central inside, one-sided at the edges), scaled to
    normalised units (per picture width)."""
    s = img.shape[0]
    gx = np.empty((s, s))
    gy = np.empty((s, s))
    for y in range(s):
        for x in range(s):
            if x == 0:
                gx[y, x] = img[y, 1] - img[y, 0]
            elif x == s - 1:
                gx[y, x] = img[y, x] - img[y, x - 1]
            else:
                gx[y, x] = 0.5 * (img[y, x + 1] - img[y, x - 1])
            if y == 0:
                gy[y, x] = img[1, x] - img[0, x]
            elif y == s - 1:
                gy[y, x] = img[y, x] - img[y - 1, x]
            else:
                gy[y, x] = 0.5 * (img[y + 1, x] - img[y - 1, x])
    return gx * s, gy * s


@nb.njit(**_JIT)
def pyramid(img):
    """The two levels the alignment runs on: blurred (sigma 1) and halved to 16 px, and the
    32 px picture lightly blurred (sigma 0.5)."""
    return _halve(gaussian_blur(img, 1.0)), gaussian_blur(img, 0.5)


@nb.njit(**_JIT)
def _cell(px, py, s):
    """The bilinear cell of a pixel-centre position clamped into an s x s picture: its top-left
    pixel and the fractions."""
    px = min(max(px, 0.0), s - 1.001)
    py = min(max(py, 0.0), s - 1.001)
    x0 = int(px)
    y0 = int(py)
    return x0, y0, px - x0, py - y0


@nb.njit(**_JIT)
def _sample_affine(cl, gx, gy, m, cw, gxw, gyw, inside):
    """Per point of the query's grid (s x s, normalised units), whether m maps it inside the
    candidate level cl, and the level and its gradients there (bilinear, clamped to the border).
    Returns how many points fall inside."""
    s = cl.shape[0]
    half = (s - 1) / 2
    n = 0.0
    for j in range(s * s):
        u = ((j % s) - half) / s
        v = ((j // s) - half) / s
        cx = (m[0, 0] * u + m[0, 1] * v + m[0, 2]) * s + half
        cy = (m[1, 0] * u + m[1, 1] * v + m[1, 2]) * s + half
        inside[j] = 1.0 if (cx >= 0 and cx <= s - 1 and cy >= 0 and cy <= s - 1) else 0.0
        n += inside[j]
        x0, y0, fx, fy = _cell(cx, cy, s)
        w00 = (1 - fx) * (1 - fy)
        w01 = fx * (1 - fy)
        w10 = (1 - fx) * fy
        w11 = fx * fy
        cw[j] = w00 * cl[y0, x0] + w01 * cl[y0, x0 + 1] + w10 * cl[y0 + 1, x0] + w11 * cl[y0 + 1, x0 + 1]
        gxw[j] = w00 * gx[y0, x0] + w01 * gx[y0, x0 + 1] + w10 * gx[y0 + 1, x0] + w11 * gx[y0 + 1, x0 + 1]
        gyw[j] = w00 * gy[y0, x0] + w01 * gy[y0, x0 + 1] + w10 * gy[y0 + 1, x0] + w11 * gy[y0 + 1, x0 + 1]
    return n


@nb.njit(**_JIT)
def _weighted_means(w, a, b, total):
    """sum(w * a) / total and sum(w * b) / total."""
    ma = 0.0
    mb = 0.0
    for j in range(w.size):
        ma += w[j] * a[j]
        mb += w[j] * b[j]
    return ma / total, mb / total


@nb.njit(**_JIT)
def _affine_step(q1, cw, gxw, gyw, inside, n):
    """One Gauss-Newton step (6 affine parameters, then gain and offset) from the samples."""
    npts = q1.size
    s = int(np.sqrt(npts))
    half = (s - 1) / 2
    qm, cm = _weighted_means(inside, q1, cw, max(n, 1.0))
    num = 0.0
    den = 0.0
    for j in range(npts):
        dq = (q1[j] - qm) * inside[j]
        num += dq * (cw[j] - cm)
        den += dq * dq
    gain = num / max(den, 1e-6)
    jac = np.zeros((npts, 8))  # rows of the points outside stay 0
    err = np.zeros(npts)
    for j in range(npts):
        if inside[j] == 0.0:
            continue
        u = ((j % s) - half) / s
        v = ((j // s) - half) / s
        err[j] = cw[j] - cm - gain * (q1[j] - qm)
        jac[j, 0] = gxw[j] * u
        jac[j, 1] = gxw[j] * v
        jac[j, 2] = gxw[j]
        jac[j, 3] = gyw[j] * u
        jac[j, 4] = gyw[j] * v
        jac[j, 5] = gyw[j]
        jac[j, 6] = -q1[j]
        jac[j, 7] = -1.0
    hess = jac.T @ jac
    for r in range(8):
        hess[r, r] += _DAMP
    return np.linalg.solve(hess, -(jac.T @ err))


@nb.njit(**_JIT)
def align_affine(ql, cl, m, iters):
    """Refine the affine map m (3 x 3, normalised query -> candidate points) so that the candidate
    level cl sampled at m(point) matches the query level ql up to a gain and offset: Gauss-Newton
    (Lucas-Kanade), a step taken only while the map covers at least a quarter of the query."""
    s = ql.shape[0]
    gx, gy = _gradient(cl)
    m = m.copy()
    q1 = ql.ravel()
    cw = np.empty(s * s)
    gxw = np.empty(s * s)
    gyw = np.empty(s * s)
    inside = np.empty(s * s)
    for _ in range(iters):
        n = _sample_affine(cl, gx, gy, m, cw, gxw, gyw, inside)
        dp = _affine_step(q1, cw, gxw, gyw, inside, n)
        if n >= (s * s) // 4:
            for k in range(6):  # the two rows of the affine map
                m[k // 3, k % 3] += dp[k]
        if np.abs(dp[:6]).max() < _STEP_DONE:
            break
    return m


@nb.njit(**_JIT)
def _pixel_frame(s):
    """(normalised -> pixel centres, pixel centres -> normalised) at side s."""
    half = (s - 1) / 2
    to_px = np.array([[s, 0.0, half], [0.0, s, half], [0.0, 0.0, 1.0]])
    to_norm = np.array([[1.0 / s, 0.0, -half / s], [0.0, 1.0 / s, -half / s], [0.0, 0.0, 1.0]])
    return to_px, to_norm


@nb.njit(**_JIT)
def _to_pixels(m, s):
    """A map of normalised points as a map of pixel centres (0 .. s-1) at side s."""
    to_px, to_norm = _pixel_frame(s)
    return to_px @ m @ to_norm


@nb.njit(**_JIT)
def _from_pixels(h, s):
    to_px, to_norm = _pixel_frame(s)
    return to_norm @ h @ to_px


@nb.njit(**_JIT)
def _linear_sample(img, x, y):
    """OpenCV's INTER_LINEAR with BORDER_CONSTANT 0: the position rounded to 1/32 px, neighbours
    outside the picture count as 0."""
    s = img.shape[0]
    xq = int(np.rint(x * 32))
    yq = int(np.rint(y * 32))
    x0 = xq >> 5
    y0 = yq >> 5
    ax = (xq & 31) / 32
    ay = (yq & 31) / 32
    v = 0.0
    if 0 <= y0 < s:
        if 0 <= x0 < s:
            v += (1 - ax) * (1 - ay) * img[y0, x0]
        if 0 <= x0 + 1 < s:
            v += ax * (1 - ay) * img[y0, x0 + 1]
    if 0 <= y0 + 1 < s:
        if 0 <= x0 < s:
            v += (1 - ax) * ay * img[y0 + 1, x0]
        if 0 <= x0 + 1 < s:
            v += ax * ay * img[y0 + 1, x0 + 1]
    return v


@nb.njit(**_JIT)
def _ecc_sample(img, gx, gy, h, warped, mask, jac):
    """One ECC warp: per template pixel, the input and its gradients warped back through h
    (linear), whether h maps it inside the input (nearest), and the Jacobian of the warped input
    by the 8 homography parameters (OpenCV's order). Returns how many pixels are inside."""
    s = img.shape[0]
    cnt = 0.0
    for j in range(s * s):
        x = float(j % s)
        y = float(j // s)
        den = h[2, 0] * x + h[2, 1] * y + h[2, 2]
        if den == 0:
            warped[j] = 0.0
            mask[j] = 0.0
            jac[j, :] = 0.0
            continue
        px = (h[0, 0] * x + h[0, 1] * y + h[0, 2]) / den
        py = (h[1, 0] * x + h[1, 1] * y + h[1, 2]) / den
        xi = np.rint(px)
        yi = np.rint(py)
        mask[j] = 1.0 if (0 <= xi < s and 0 <= yi < s) else 0.0
        cnt += mask[j]
        warped[j] = _linear_sample(img, px, py)
        gxd = _linear_sample(gx, px, py) / den
        gyd = _linear_sample(gy, px, py) / den
        temp = -px * gxd - py * gyd
        jac[j, 0] = gxd * x
        jac[j, 1] = gyd * x
        jac[j, 2] = temp * x
        jac[j, 3] = gxd * y
        jac[j, 4] = gyd * y
        jac[j, 5] = temp * y
        jac[j, 6] = gxd
        jac[j, 7] = gyd
    return cnt


@nb.njit(**_JIT)
def _ecc_zero_mean(warped, mask, t1, tzm, cnt):
    """Inside the mask, the warped input and the template less their means (outside it the
    warped input keeps its value and the template is 0, as OpenCV's masked subtract leaves them).
    Returns the two norms and their correlation."""
    im, tm = _weighted_means(mask, warped, t1, cnt)
    ivar = 0.0
    tvar = 0.0
    correlation = 0.0
    for j in range(t1.size):
        if mask[j] > 0:
            warped[j] -= im
            tzm[j] = t1[j] - tm
            ivar += warped[j] * warped[j]
            tvar += tzm[j] * tzm[j]
            correlation += tzm[j] * warped[j]
        else:
            tzm[j] = 0.0
    return np.sqrt(ivar), np.sqrt(tvar), correlation


@nb.njit(**_JIT)
def _gradients_reflect(img):
    """OpenCV's filter2D with (-0.5, 0, 0.5) along x and y (BORDER_REFLECT_101)."""
    s = img.shape[0]
    gx = np.empty((s, s))
    gy = np.empty((s, s))
    for y in range(s):
        for x in range(s):
            xl = x - 1 if x > 0 else 1
            xr = x + 1 if x < s - 1 else s - 2
            yu = y - 1 if y > 0 else 1
            yd = y + 1 if y < s - 1 else s - 2
            gx[y, x] = 0.5 * (img[y, xr] - img[y, xl])
            gy[y, x] = 0.5 * (img[yd, x] - img[yu, x])
    return gx, gy


@nb.njit(**_JIT)
def ecc_homography(tmpl, img, h, max_iters):
    """OpenCV's findTransformECC(tmpl, img, h, MOTION_HOMOGRAPHY, (EPS | COUNT, max_iters, 1e-4),
    every pixel, gaussFiltSize 1), ported: the homography h (pixel centres of tmpl -> img) that
    maximises the enhanced correlation coefficient (Evangelidis & Psarakis, 2008), which ignores
    brightness and contrast. Returns (h, converged, iterations): not converged where OpenCV raises
    (the correlation would be minimised: uncorrelated or non-overlapping pictures)."""
    n = tmpl.size
    gx, gy = _gradients_reflect(img)
    h = h.copy()
    t1 = tmpl.ravel()
    warped = np.empty(n)
    mask = np.empty(n)
    jac = np.empty((n, 8))
    tzm = np.empty(n)
    rho = -1.0
    last = -_ECC_EPS
    it = 0
    while it < max_iters and abs(rho - last) >= _ECC_EPS:
        it += 1
        cnt = _ecc_sample(img, gx, gy, h, warped, mask, jac)
        if cnt == 0:
            return h, False, it
        img_norm, tmp_norm, correlation = _ecc_zero_mean(warped, mask, t1, tzm, cnt)
        try:
            hess_inv = np.linalg.inv(jac.T @ jac)
        except Exception:  # noqa: BLE001 (numba catches no narrower class) singular: a flat picture
            return h, False, it
        last = rho
        rho = correlation / (img_norm * tmp_norm)
        img_proj = jac.T @ warped
        iph = hess_inv @ img_proj
        lambda_d = correlation - (jac.T @ tzm) @ iph
        if np.isnan(rho) or lambda_d <= 0.0:
            return h, False, it
        lam = (img_norm * img_norm - img_proj @ iph) / lambda_d
        dp = hess_inv @ (jac.T @ (lam * tzm - warped))
        for k in range(8):  # OpenCV's order: column by column, h[2, 2] stays 1
            h[k % 3, k // 3] += dp[k]
    return h, True, it


@nb.njit(**_JIT)
def warp(square, m):
    """The query square (RENDER x RENDER x 3 RGB, float64: bytes would wrap in the lerps) seen in
    the candidate's frame through m, as Pillow renders it (imaging's first version warped with
    Image.transform, then resized with BOX): bilinear samples at RENDER px, truncated to bytes, 0
    outside the query, then boxed to SIG px in two rounded passes (rows, then columns). Returns its channels (3 x SIG x SIG: luma, red-green,
    yellow-blue) and per signature pixel whether all its samples fell inside the query."""
    mi = np.linalg.inv(m)
    out = np.zeros((3, SIG, SIG))
    ok = np.zeros((SIG, SIG), dtype=np.bool_)
    last = RENDER - 1
    for by in range(SIG):
        for bx in range(SIG):
            c0 = 0
            c1 = 0
            c2 = 0
            covered = 0
            for sy in range(BOX):
                r0 = 0
                r1 = 0
                r2 = 0
                vn = (by * BOX + sy + 0.5) / RENDER - 0.5
                for sx in range(BOX):
                    un = (bx * BOX + sx + 0.5) / RENDER - 0.5
                    den = mi[2, 0] * un + mi[2, 1] * vn + mi[2, 2]
                    if den <= 0:
                        continue
                    ex = ((mi[0, 0] * un + mi[0, 1] * vn + mi[0, 2]) / den + 0.5) * RENDER
                    ey = ((mi[1, 0] * un + mi[1, 1] * vn + mi[1, 2]) / den + 0.5) * RENDER
                    if ex < 0.0 or ex >= RENDER or ey < 0.0 or ey >= RENDER:
                        continue
                    covered += 1
                    px = ex - 0.5
                    py = ey - 0.5
                    x0 = int(px + 1.0) - 1  # floor: px > -1
                    y0 = int(py + 1.0) - 1
                    fx = px - x0
                    fy = py - y0
                    xa = max(x0, 0)
                    xb = min(x0 + 1, last)
                    ya = max(y0, 0)
                    yb = min(y0 + 1, last)
                    # Pillow's lerps (rows, then between them), truncated to a byte
                    a = square[ya, xa, 0] + (square[ya, xb, 0] - square[ya, xa, 0]) * fx
                    b = square[yb, xa, 0] + (square[yb, xb, 0] - square[yb, xa, 0]) * fx
                    r0 += int(a + (b - a) * fy)
                    a = square[ya, xa, 1] + (square[ya, xb, 1] - square[ya, xa, 1]) * fx
                    b = square[yb, xa, 1] + (square[yb, xb, 1] - square[yb, xa, 1]) * fx
                    r1 += int(a + (b - a) * fy)
                    a = square[ya, xa, 2] + (square[ya, xb, 2] - square[ya, xa, 2]) * fx
                    b = square[yb, xa, 2] + (square[yb, xb, 2] - square[yb, xa, 2]) * fx
                    r2 += int(a + (b - a) * fy)
                # rounded means of BOX (rows, then columns), as Pillow's two resampling passes
                c0 += (2 * r0 + BOX) // (2 * BOX)
                c1 += (2 * r1 + BOX) // (2 * BOX)
                c2 += (2 * r2 + BOX) // (2 * BOX)
            ok[by, bx] = covered == BOX * BOX
            r = (2 * c0 + BOX) // (2 * BOX)
            g = (2 * c1 + BOX) // (2 * BOX)
            b = (2 * c2 + BOX) // (2 * BOX)
            out[0, by, bx] = 0.299 * r + 0.587 * g + 0.114 * b
            out[1, by, bx] = (r - g) / np.sqrt(2.0)
            out[2, by, bx] = (r + g - 2 * b) / np.sqrt(6.0)
    return out, ok


@nb.njit(**_JIT)
def _inside(mi, un, vn):
    """Whether the candidate-frame point (normalised) maps inside the query through mi (the
    inverse map), with `warp`'s test on the RENDER px sample there."""
    den = mi[2, 0] * un + mi[2, 1] * vn + mi[2, 2]
    if den <= 0:
        return False
    ex = ((mi[0, 0] * un + mi[0, 1] * vn + mi[0, 2]) / den + 0.5) * RENDER
    ey = ((mi[1, 0] * un + mi[1, 1] * vn + mi[1, 2]) / den + 0.5) * RENDER
    return 0.0 <= ex < RENDER and 0.0 <= ey < RENDER


@nb.njit(**_JIT)
def warp_preview(unaligned, m):
    """A cheap stand-in for `warp`: the query's SIG px view (unaligned) sampled bilinearly where m
    maps each signature pixel's centre, 1/16 of the samples. Coverage is warp's own (a pixel's
    samples all fall inside when its four corner samples do: the map keeps lines straight)."""
    mi = np.linalg.inv(m)
    out = np.zeros((3, SIG, SIG))
    ok = np.zeros((SIG, SIG), dtype=np.bool_)
    lo = 0.5 / RENDER - 0.5
    span = (BOX - 1) / RENDER
    for by in range(SIG):
        v0 = by / SIG + lo
        for bx in range(SIG):
            u0 = bx / SIG + lo
            ok[by, bx] = (
                _inside(mi, u0, v0)
                and _inside(mi, u0 + span, v0)
                and _inside(mi, u0, v0 + span)
                and _inside(mi, u0 + span, v0 + span)
            )
            un = (bx + 0.5) / SIG - 0.5
            vn = (by + 0.5) / SIG - 0.5
            den = mi[2, 0] * un + mi[2, 1] * vn + mi[2, 2]
            if den <= 0:
                continue
            px = ((mi[0, 0] * un + mi[0, 1] * vn + mi[0, 2]) / den + 0.5) * SIG - 0.5
            py = ((mi[1, 0] * un + mi[1, 1] * vn + mi[1, 2]) / den + 0.5) * SIG - 0.5
            x0, y0, fx, fy = _cell(px, py, SIG)
            for ch in range(3):
                a = unaligned[ch, y0, x0] + (unaligned[ch, y0, x0 + 1] - unaligned[ch, y0, x0]) * fx
                b = unaligned[ch, y0 + 1, x0] + (unaligned[ch, y0 + 1, x0 + 1] - unaligned[ch, y0 + 1, x0]) * fx
                out[ch, by, bx] = a + (b - a) * fy
    return out, ok


@nb.njit(**_JIT)
def _moments(qw, c, ok, y0, y1, x0, x1):
    """Over the covered pixels of rows y0..y1-1 and columns x0..x1-1: their count and the sums of
    qw, c, qw^2, c^2 and qw * c."""
    n = 0.0
    sx = 0.0
    sy = 0.0
    sxx = 0.0
    syy = 0.0
    sxy = 0.0
    for y in range(y0, y1):
        for x in range(x0, x1):
            if ok[y, x]:
                a = qw[y, x]
                b = c[y, x]
                n += 1
                sx += a
                sy += b
                sxx += a * a
                syy += b * b
                sxy += a * b
    return n, sx, sy, sxx, syy, sxy


@nb.njit(**_JIT)
def worst_block(qw, ok, c, textured, shift, inner):
    """1 - correlation of the worst block of the comparison grid (shifted by `shift` px: one
    block fewer per side), over the covered pixels, among blocks covered at least half and
    textured on both sides; `inner` leaves the outer ring of blocks out. 0.0 when none counts."""
    n = SIG // BLOCK - (1 if shift else 0)
    lo = 1 if inner else 0
    hi = n - 1 if inner else n
    worst = 0.0
    for bi in range(lo, hi):
        for bj in range(lo, hi):
            y0 = shift + bi * BLOCK
            x0 = shift + bj * BLOCK
            cnt, sx, sy, sxx, syy, sxy = _moments(qw, c, ok, y0, y0 + BLOCK, x0, x0 + BLOCK)
            if cnt < BLOCK * BLOCK / 2:
                continue
            mx = sx / cnt
            my = sy / cnt
            vx = sxx / cnt - mx * mx
            vy = syy / cnt - my * my
            if vx <= textured * textured or vy <= textured * textured:
                continue
            cxy = sxy / cnt - mx * my
            worst = max(worst, 1 - cxy / np.sqrt(max(vx * vy, 1e-12)))
    return worst


@nb.njit(**_JIT)
def _residual(qw, ok, c):
    """The candidate's luma less its best gain and offset fit by the warped query's luma, over the
    covered pixels: the RMS relative to the candidate's own spread; -1.0 when under half of the
    picture is covered (the alignment ran off: not the same picture)."""
    n, sx, sy, sxx, syy, sxy = _moments(qw, c, ok, 0, SIG, 0, SIG)
    if n < SIG * SIG // 2:
        return -1.0
    vxx = sxx - sx * sx / n  # centred sums (levels are bytes: no cancellation to speak of)
    vyy = syy - sy * sy / n
    vxy = sxy - sx * sy / n
    gain = vxy / max(vxx, 1e-6)
    err = max(vyy - 2 * gain * vxy + gain * gain * vxx, 0.0)
    return np.sqrt(err / n) / (np.sqrt(max(vyy, 0.0) / n) + 1e-3)


@nb.njit(**_JIT)
def score(qw, ok, c, colour, has_colour, limits):
    """The score parts (luma residual, worst luma block, worst colour block, worst colour block on
    the shifted grid) of the warped query qw against the candidate's luma c and colour planes.
    The colour blocks are only looked at when the luma parts pass (they can only fail it). A
    grey-only (legacy) signature keeps the luma test it was stored under: every block of the grid."""
    residual = _residual(qw[0], ok, c)
    if residual < 0:
        return FAILED, FAILED, FAILED, FAILED
    if not has_colour:
        return residual, worst_block(qw[0], ok, c, limits[TEXTURED], 0, False), 0.0, 0.0
    worst = max(
        worst_block(qw[0], ok, c, limits[TEXTURED], 0, True),
        worst_block(qw[0], ok, c, limits[TEXTURED], HALF_BLOCK, True),
    )
    if combined(residual, worst, 0.0, 0.0, limits, False) > 1.0:
        return residual, worst, 0.0, 0.0
    aligned = 0.0
    shifted = 0.0
    for k in range(2):
        aligned = max(aligned, worst_block(qw[k + 1], ok, colour[k], limits[TEXTURED_COLOUR], 0, False))
        shifted = max(shifted, worst_block(qw[k + 1], ok, colour[k], limits[TEXTURED_COLOUR], HALF_BLOCK, False))
    return residual, worst, aligned, shifted


@nb.njit(**_JIT)
def _passes(parts, limits, legacy):
    return combined(parts[0], parts[1], parts[2], parts[3], limits, legacy)


@nb.njit(**_JIT)
def _better(a, b, limits, legacy):
    return b if _passes(b, limits, legacy) < _passes(a, limits, legacy) else a


@nb.njit(**_JIT)
def _aligned(square, unaligned, c, colour, has_colour, limits, m, gate):
    """The score parts of the query seen through m: the preview's when its residual is over
    `gate` (the exact warp could not pass), else the exact warp's."""
    pw, pok = warp_preview(unaligned, m)
    preview = score(pw, pok, c, colour, has_colour, limits)
    if preview[0] > gate:
        return preview, True
    qw, ok = warp(square, m)
    return score(qw, ok, c, colour, has_colour, limits), False


@nb.njit(**_JIT)
def compare_one(square, unaligned, q_levels, q, c, colour, has_colour, limits, homography, gate):
    """The score parts of the query against one candidate: unaligned (most re-uploads need no
    alignment), else after an affine alignment, else (with `homography`) after a homography
    refinement of it; the best counts. square: the query at RENDER px (RGB); unaligned: its
    channels boxed to SIG px; q: the query's signature luma; q_levels: pyramid(q); c: the
    candidate's luma (SIG x SIG); colour: its two colour planes, used when has_colour; limits:
    see RESIDUAL...TEXTURED_COLOUR; gate: a preview residual over which an alignment is not
    rendered exactly (and an affine one not refined): infinite to render every one."""
    legacy = not has_colour
    best = score(unaligned, np.ones((SIG, SIG), dtype=np.bool_), c, colour, has_colour, limits)
    if _passes(best, limits, legacy) <= 1.0:
        return best
    c16, c32 = pyramid(c)
    m = align_affine(q_levels[0], c16, np.eye(3), _AFFINE_ITERS[0])
    m = align_affine(q_levels[1], c32, m, _AFFINE_ITERS[1])
    parts, skipped = _aligned(square, unaligned, c, colour, has_colour, limits, m, gate)
    best = _better(best, parts, limits, legacy)
    if skipped or not homography or _passes(best, limits, legacy) <= 1.0:
        return best
    h, converged, _iterations = ecc_homography(q, c, _to_pixels(m, SIG), _ECC_ITERS)
    if not converged:
        return best
    parts, _skipped = _aligned(square, unaligned, c, colour, has_colour, limits, _from_pixels(h, SIG), gate)
    return _better(best, parts, limits, legacy)
