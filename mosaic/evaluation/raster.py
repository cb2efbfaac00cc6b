"""Batched drawing and filtering for the scene parser: many shape hypotheses drawn in one Pillow
image, pixel for pixel as :class:`renderers.pillow.PillowRenderer` draws each of them alone, and
Gaussian smoothing with precomputed kernels (the same bits as :func:`scipy.ndimage.gaussian_filter`).

Drawing: every job (a polygon or a disk of a :class:`~mosaic.scene.SceneObject`, cropped to a
patch ``[h, w]`` at a pixel origin) gets a horizontal band of one tall ``L`` image: its patch with
room above and below for the part of the shape the patch clips, on multiples of the supersampling
(Pillow's scan-line fill computes each row's crossings from integer row differences, so a
whole-row shift moves a shape without changing a pixel, and the box reduction sees the same
blocks). Left and right clipping is as in the patch alone: every band starts at x = 0 and columns
right of a patch are not read. One ``Image.new``, one ``reduce`` and one copy out serve every job,
where drawing each in its own image cost about 100 µs of Python and Pillow overhead per job.
"""

from __future__ import annotations

import functools
import math
from itertools import accumulate

import numpy as np
from PIL import Image
from scipy import ndimage

from mosaic.scene import SceneObject
from mosaic.vocab import SHAPES


_UNIT = {k: (None if v is None else (np.array([p[0] for p in v]), np.array([p[1] for p in v]))) for k, v in SHAPES.items()}


def polygon_coords(shape: str, r: np.ndarray, cx: np.ndarray, cy: np.ndarray, rotations: list[float],
                   ox: np.ndarray, oy: np.ndarray) -> np.ndarray:
    """int64 ``[N, V, 2]``: the vertices of ``N`` polygons of one shape, as
    :meth:`SceneObject.vertices` computes them and the renderer rounds them, shifted by
    ``-(ox, oy)``. Per polygon (float64 ``[N]`` each): circumradius ``r``, centre ``(cx, cy)``
    (supersampled px), rotation (degrees, a list of N) and offset ``(ox, oy)`` (int64, supersampled
    px). The arithmetic is that of :meth:`SceneObject.vertices` element for element (``math``
    cosines, the same products and sums, no fused multiply-add), so the values are the same to the bit."""
    turned = _TURNED.get(shape)
    if turned is None or len(turned) > 50_000:  # (a bound on the memory of fine rotations)
        turned = _TURNED[shape] = {}
    unit = []
    for rot in rotations:
        t = turned.get(rot)
        if t is None:
            ux, uy = _UNIT[shape]
            a = math.radians(-rot)
            ca, sa = math.cos(a), math.sin(a)
            t = turned[rot] = np.stack([ux * ca - uy * sa, ux * sa + uy * ca])
        unit.append(t)
    unit = np.array(unit)  # [N, 2, V]: the unit polygon turned by each rotation, as ``vertices`` turns it
    r, cx, cy = r[:, None], cx[:, None], cy[:, None]
    out = np.empty((len(unit), unit.shape[2], 2), np.int64)
    out[..., 0] = np.rint(cx + r * unit[:, 0]).astype(np.int64) - ox[:, None]  # half to even, as round()
    out[..., 1] = np.rint(cy + r * unit[:, 1]).astype(np.int64) - oy[:, None]
    return out


_TURNED: dict[str, dict[float, np.ndarray]] = {}  # shape -> rotation -> float64 [2, V] turned unit vertices


class Canvas:
    """Collects shapes to draw, each cropped to its own patch, and draws them all at once.

    Args:
        supersample: the renderer's anti-aliasing factor (``image.supersample``).
        side: the image side, px.
    Queue groups with :meth:`add` (one shape) and :meth:`add_rotations` (one polygon at several
    rotations; they return the group's index), then :meth:`render` draws every group.
    """

    def __init__(self, supersample: int, side: int):
        self.s = int(supersample)
        self.side = int(side)
        self.big = self.side * self.s
        self._groups: list[tuple] = []  # (h, w, shape, radius, cx, cy, rotations | None, ox, oy)
        self.blocks: list[tuple[np.ndarray, int]] = []  # after render: per group, (its block, first index)

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, obj: SceneObject, shape: tuple[int, int], origin: tuple[int, int]) -> int:
        """Queue ``obj`` at its own rotation (a disk for a circle), cropped to a patch of
        ``shape`` ``(h, w)`` px at pixel ``origin`` ``(x0, y0)``; returns the group index."""
        return self.add_rotations(obj, None if _UNIT[obj.shape] is None else [obj.rotation], shape, origin)

    def add_rotations(self, obj: SceneObject, rotations: list[float] | None, shape: tuple[int, int],
                      origin: tuple[int, int]) -> int:
        """Queue the polygon ``obj`` at each of ``rotations`` (degrees; ``obj`` is not changed;
        None: a disk), each cropped like :meth:`add`; returns the group index."""
        big, s = self.big, self.s
        self._groups.append((int(shape[0]), int(shape[1]), obj.shape, obj.radius * big, obj.center[0] * big,
                             obj.center[1] * big, rotations, int(origin[0]) * s, int(origin[1]) * s))
        return len(self._groups) - 1

    def render(self) -> list[np.ndarray]:
        """Per queued group, in order: float64 coverage in [0, 1], C-contiguous ``[R, h, w]`` (R
        rotations; 1 for a disk or :meth:`add`). The queue is emptied; :attr:`blocks` tells where
        each group lies in the block it shares with its neighbours of the same patch size."""
        groups, self._groups = self._groups, []
        if not groups:
            return []
        s = self.s
        coords: list = [None] * len(groups)  # a disk's box; a polygon group's (lo, hi, right) rows and column
        by_shape: dict[str, list[int]] = {}
        for g, (h, w, shape, r, cx, cy, rots, ox, oy) in enumerate(groups):
            if rots is None:  # a disk: the renderer's box
                coords[g] = [round(cx - r) - ox, round(cy - r) - oy, round(cx + r) - 1 - ox, round(cy + r) - 1 - oy]
            else:
                by_shape.setdefault(shape, []).append(g)
        shapes = []
        for shape, gs in by_shape.items():  # every polygon of a shape in one pass
            n = [len(groups[g][6]) for g in gs]
            col = np.array([groups[g][3:6] + groups[g][7:9] for g in gs]).T  # radius, centre, offset
            if max(n) > 1:
                col = np.repeat(col, n, axis=1)
            pts = polygon_coords(shape, col[0], col[1], col[2], [x for g in gs for x in groups[g][6]],
                                 col[3].astype(np.int64), col[4].astype(np.int64))
            starts = list(accumulate(n[:-1], initial=0))
            # per group: its polygons' lowest and highest vertex rows and rightmost vertex column
            ys = pts[:, :, 1]
            ext = zip(np.minimum.reduceat(ys.min(1), starts).tolist(), np.maximum.reduceat(ys.max(1), starts).tolist(),
                      np.maximum.reduceat(pts[:, :, 0].max(1), starts).tolist())
            for g, e in zip(gs, ext):
                coords[g] = e
            shapes.append((gs, n, pts))
        # each group's band holds only the output rows its shapes can reach (a polygon fills the
        # rows and columns of its vertices, no more; a disk gets a pixel to spare), moved up by a
        # whole number of output rows (a multiple of the supersampling: the same pixels); the
        # image is as wide as the rightmost reachable column; the rest of each patch is zero
        layout, width, y = [], s, 0
        for (h, w, _, _, _, _, rots, _, _), c in zip(groups, coords):
            if rots is None:
                n, lo, hi, right, spare = 1, c[1], c[3], c[2], s
            else:
                n, (lo, hi, right), spare = len(rots), c, 0
            q0 = max(lo - spare, 0) // s
            q1 = max(q0, min(hi + spare, h * s - 1) // s + 1)
            cols = max(0, min(w, (right + spare) // s + 1))
            lo, hi = lo - q0 * s, hi - q0 * s
            rows = (q1 - q0) * s
            pad = max(0, -lo, hi - (rows - 1))
            if pad or spare:
                pad = -(-(pad + 1) // s) * s  # a multiple of the supersampling
            band = rows + 2 * pad
            layout.append((y, n, band, pad, q0, q1, cols))
            y += n * band
            width = max(width, cols * s)
        img = Image.new("L", (width, y), 0)
        d = Image.core.draw(img.im, 0)  # what ``ImageDraw.Draw(img).draw`` makes
        for g, c in enumerate(coords):
            if groups[g][6] is None:
                y0, _, _, pad, q0, _, _ = layout[g]
                top = y0 + pad - q0 * s
                d.draw_ellipse([c[0], c[1] + top, c[2], c[3] + top], 255, 1)
        for gs, n, pts in shapes:  # each polygon moved down to its band, all of a shape at once
            shift = []
            for g, k in zip(gs, n):
                y0, _, band, pad, q0, _, _ = layout[g]
                top = y0 + pad - q0 * s
                shift += range(top, top + k * band, band) if band else [top] * k
            pts[:, :, 1] += np.array(shift)[:, None]
            for p in pts.reshape(len(pts), -1).tolist():
                d.draw_polygon(p, 255, 1)
        if s > 1:
            img = img.reduce(s)
        a = np.frombuffer(img.tobytes(), np.uint8).reshape(img.size[1], img.size[0])
        # consecutive groups of one patch size share one block: each group's renders are a
        # C-contiguous slice of it (``blocks``), so a caller can score several groups at once
        out, self.blocks = [], []
        g = 0
        while g < len(groups):
            h, w = groups[g][0], groups[g][1]
            end, total = g, 0
            while end < len(groups) and groups[end][0] == h and groups[end][1] == w:
                total += layout[end][1]
                end += 1
            block, at = np.zeros((total, h, w)), 0
            for (y0, n, band, pad, q0, q1, cols) in layout[g:end]:
                y0, band, pad = y0 // s, band // s, pad // s
                cov = block[at:at + n]
                np.divide(a[y0:y0 + n * band].reshape(n, band, a.shape[1])[:, pad:pad + q1 - q0, :cols], 255.0,
                          out=cov[:, q0:q1, :cols])
                out.append(cov)
                self.blocks.append((block, at))
                at += n
            g = end
        return out


# -- element-wise helpers --------------------------------------------------------------------------
try:  # the ufunc np.clip calls, without its dispatch (same bits, -0.0 kept as np.clip keeps it)
    from numpy._core.umath import clip
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.umath import clip


def median(x: np.ndarray) -> float:
    """``float(np.median(x))`` of a 1-D float64 array, from one ``np.partition`` (the middle value,
    or the sum of the two middle ones halved, as numpy computes it)."""
    n = x.size
    if n == 0 or np.isnan(x).any():
        return float(np.median(x))
    if n % 2:
        k = (n - 1) // 2
        return float(np.partition(x, k)[k])
    k = n // 2
    p = np.partition(x, [k - 1, k])
    return float((p[k - 1] + p[k]) / 2.0)


# -- Gaussian smoothing --------------------------------------------------------------------------
try:  # scipy's own kernel and 1-D correlation, called without the per-call argument checks
    from scipy.ndimage._filters import _gaussian_kernel1d
    from scipy.ndimage import _nd_image, _ni_support
    _CONSTANT = _ni_support._extend_mode_to_code("constant")
except Exception:  # pragma: no cover - another scipy layout: the public functions below
    _nd_image = None


@functools.lru_cache(maxsize=256)
def _weights(sigma: float) -> np.ndarray:
    """The kernel :func:`scipy.ndimage.gaussian_filter1d` builds for ``sigma`` (truncate 4),
    reversed for correlation, float64 ``[2 lw + 1]``."""
    lw = int(4.0 * float(sigma) + 0.5)
    return np.ascontiguousarray(_gaussian_kernel1d(sigma, 0, lw)[::-1], dtype=np.float64)


def _gauss_fast(a: np.ndarray, sigma: float, axes: tuple[int, ...]) -> np.ndarray:
    w = _weights(float(sigma))
    out = np.empty(a.shape, np.float64)  # every element is written by the first pass
    src = a
    for ax in axes:
        _nd_image.correlate1d(src, w, ax, out, _CONSTANT, 0.0, 0)
        src = out
    return out


def _gauss_public(a: np.ndarray, sigma: float, axes: tuple[int, ...]) -> np.ndarray:
    sig = [0.0] * a.ndim
    for ax in axes:
        sig[ax] = sigma
    return ndimage.gaussian_filter(a, sig, mode="constant")


def gaussian(a: np.ndarray, sigma: float) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter(a, sigma, mode="constant")`` of a float64 ``[H, W]`` map, or
    of each ``[H, W]`` map of a stack ``[K, H, W]`` (same bits as filtering each alone)."""
    axes = (0, 1) if a.ndim == 2 else (1, 2)
    return _GAUSS(np.asarray(a, dtype=np.float64), float(sigma), axes)


def median_rgb(colors: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``np.median(pixels, axis=0)`` (float64 ``[3]``) of pixels given as distinct uint8 colours
    ``[U, 3]`` and their pixel counts ``[U]``, from per-channel histograms: the middle value,
    or the mean of the two middle ones (exact: they are integers)."""
    n = int(counts.sum())
    ks = [(n - 1) // 2] if n % 2 else [n // 2 - 1, n // 2]
    out = np.empty(3)
    for ch in range(3):
        cum = np.cumsum(np.bincount(colors[:, ch], weights=counts, minlength=256))
        vals = np.searchsorted(cum, np.array(ks, dtype=np.float64), side="right").astype(np.float64)
        out[ch] = vals[0] if len(vals) == 1 else (vals[0] + vals[1]) / 2.0
    return out


def erode(b: np.ndarray) -> np.ndarray:
    """``scipy.ndimage.binary_erosion(b)`` of a bool ``[H, W]`` map (4-connected cross, outside
    counted as False), in five shifted ANDs."""
    p = np.zeros((b.shape[0] + 2, b.shape[1] + 2), bool)
    p[1:-1, 1:-1] = b
    return b & p[:-2, 1:-1] & p[2:, 1:-1] & p[1:-1, :-2] & p[1:-1, 2:]


def _self_check() -> bool:
    """The fast path gives the public function's bits on a small map (else the public one is used)."""
    if _nd_image is None:
        return False
    try:
        a = np.sin(np.arange(19 * 23, dtype=np.float64)).reshape(19, 23) ** 2
        ok = all(np.array_equal(_gauss_fast(a, s, (0, 1)), ndimage.gaussian_filter(a, s, mode="constant"))
                 for s in (0.5, 0.8, 1.5))
        stack = np.stack([a, a[::-1]])
        return ok and np.array_equal(_gauss_fast(stack, 0.8, (1, 2))[1], ndimage.gaussian_filter(a[::-1], 0.8, mode="constant"))
    except Exception:  # pragma: no cover
        return False


_GAUSS = _gauss_fast if _self_check() else _gauss_public
