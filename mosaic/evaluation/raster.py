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

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage

from mosaic.scene import SceneObject
from mosaic.vocab import SHAPES

_UNIT = {k: (None if v is None else (np.array([p[0] for p in v]), np.array([p[1] for p in v]))) for k, v in SHAPES.items()}


def polygon_coords(obj: SceneObject, rotations: list[float], big: int, ox: int, oy: int) -> np.ndarray:
    """int64 ``[R, V, 2]``: the vertices of the polygon ``obj`` at each of ``rotations`` (degrees),
    as :meth:`SceneObject.vertices` computes them at scale ``big`` (px of the supersampled image),
    rounded as the renderer rounds them and shifted by ``-(ox, oy)`` (supersampled px). The
    arithmetic is that of :meth:`SceneObject.vertices`, element for element (``math`` cosines,
    the same products and sums; no fused multiply-add), so the values are the same to the bit."""
    ux, uy = _UNIT[obj.shape]
    r = (obj.size / 2.0) * big
    cx, cy = obj.center[0] * big, obj.center[1] * big
    ang = [math.radians(-float(rot)) for rot in rotations]
    ca = np.array([math.cos(a) for a in ang])[:, None]
    sa = np.array([math.sin(a) for a in ang])[:, None]
    x = cx + r * (ux * ca - uy * sa)
    y = cy + r * (ux * sa + uy * ca)
    out = np.empty(x.shape + (2,), np.int64)
    out[..., 0] = np.rint(x).astype(np.int64) - ox  # round half to even, as Python's round()
    out[..., 1] = np.rint(y).astype(np.int64) - oy
    return out


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
        self._groups: list[tuple[int, int, str, object]] = []  # (h, w, kind, int coords)

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, obj: SceneObject, shape: tuple[int, int], origin: tuple[int, int]) -> int:
        """Queue ``obj`` at its own rotation (a disk for a circle), cropped to a patch of
        ``shape`` ``(h, w)`` px at pixel ``origin`` ``(x0, y0)``; returns the group index."""
        if _UNIT[obj.shape] is not None:
            return self.add_rotations(obj, [obj.rotation], shape, origin)
        s, big = self.s, self.big
        ox, oy = int(origin[0]) * s, int(origin[1]) * s
        r = obj.radius * big
        cx, cy = obj.center[0] * big, obj.center[1] * big
        box = [round(cx - r) - ox, round(cy - r) - oy, round(cx + r) - 1 - ox, round(cy + r) - 1 - oy]
        self._groups.append((int(shape[0]), int(shape[1]), "e", box))
        return len(self._groups) - 1

    def add_rotations(self, obj: SceneObject, rotations: list[float], shape: tuple[int, int],
                      origin: tuple[int, int]) -> int:
        """Queue the polygon ``obj`` at each of ``rotations`` (degrees; ``obj`` is not changed),
        each cropped like :meth:`add`; returns the group index."""
        s = self.s
        pts = polygon_coords(obj, rotations, self.big, int(origin[0]) * s, int(origin[1]) * s)
        self._groups.append((int(shape[0]), int(shape[1]), "p", pts))
        return len(self._groups) - 1

    def render(self) -> list[np.ndarray]:
        """Per queued group, in order: float64 coverage in [0, 1], C-contiguous ``[R, h, w]`` (R
        rotations; 1 for :meth:`add`). The queue is emptied."""
        groups, self._groups = self._groups, []
        if not groups:
            return []
        s = self.s
        layout, width, y = [], s, 0
        for h, w, kind, c in groups:
            hs = h * s
            if kind == "e":
                n, lo, hi = 1, c[1], c[3]
            else:
                n, ys = c.shape[0], c[:, :, 1]
                lo, hi = int(ys.min()), int(ys.max())
            pad = max(0, -lo, hi - (hs - 1)) + 1
            pad = -(-pad // s) * s  # a multiple of the supersampling
            band = hs + 2 * pad
            layout.append((y, n, band, pad))
            y += n * band
            width = max(width, w * s)
        img = Image.new("L", (width, y), 0)
        d = ImageDraw.Draw(img).draw
        for (h, w, kind, c), (y0, n, band, pad) in zip(groups, layout):
            if kind == "e":
                d.draw_ellipse([c[0], c[1] + y0 + pad, c[2], c[3] + y0 + pad], 255, 1)
                continue
            q = c.copy()
            q[:, :, 1] += (y0 + pad + band * np.arange(n))[:, None]
            for p in q.tolist():
                d.draw_polygon(p, 255, 1)
        if s > 1:
            img = img.reduce(s)
        a = np.frombuffer(img.tobytes(), np.uint8).reshape(img.size[1], img.size[0])
        out = []
        for (h, w, _, _), (y0, n, band, pad) in zip(groups, layout):
            y0, band, pad = y0 // s, band // s, pad // s
            out.append(a[y0:y0 + n * band].reshape(n, band, a.shape[1])[:, pad:pad + h, :w] / 255.0)
        return out


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
    out = np.zeros(a.shape, np.float64)
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
