"""Shape fitting for the scene parser: the renderer's own coverage of a shape hypothesis, matched
to an observed coverage map (step 4 of :mod:`mosaic.evaluation.parser`).

For each shape the spec allows for a colour, the observed area gives the circumscribed diameter
(``area = k_shape * r²``, :func:`unit_area`); the coverage mask :class:`renderers.pillow.PillowRenderer`
would draw for that shape at that centre and size (:meth:`ShapeFitter.render_patch`, pixel for
pixel: same supersampling and rounding) is compared with the observed one by soft IoU
(:func:`soft_iou`, ``sum(min) / sum(max)``) over the rotations the spec allows (coarse to fine,
modulo the shape's symmetry, :data:`SYMMETRY_DEG`), and over the parser's blur levels. The best
match gives shape, size (calibrated so the rendered area equals the observed one) and rotation.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw
from scipy import ndimage

from mosaic.scene import SceneObject
from mosaic.spec import Spec
from mosaic.vocab import SHAPES

#: Rotational symmetry period of each shape, degrees (None: rotation does not show).
SYMMETRY_DEG: dict[str, float | None] = {
    "circle": None, "square": 90.0, "triangle": 120.0, "diamond": 180.0, "pentagon": 72.0,
    "hexagon": 60.0, "star": 72.0, "cross": 90.0,
}

#: Gaussian sigmas (px of a 64 px image) tried on every hypothesis.
BLURS = (0.0, 0.5, 0.8, 1.1, 1.5)
#: A shape within this IoU of the best one is refined too; the parser may also take an object's
#: second-best shape within it to fit the spec's fixed object counts.
SHAPE_MARGIN = 0.1


@functools.lru_cache(maxsize=None)
def unit_area(shape: str) -> float:
    """Area of a shape with circumradius 1 (shoelace; pi for the circle; computed once per shape)."""
    v = SHAPES[shape]
    if v is None:
        return math.pi
    x = np.array([p[0] for p in v])
    y = np.array([p[1] for p in v])
    return float(0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


@dataclass
class ShapeHypothesis:
    """One shape a colour may take in the spec, with the sizes and rotations its templates allow."""

    shape: str
    rotations: list[float] | tuple[float, float] | None  # explicit list, (lo, hi) range, or None (circle)
    size_range: tuple[float, float]  # fractions of the side
    sizes: list[tuple[float, float]] = field(default_factory=list)  # allowed sizes: intervals (v, v) or (lo, hi)


class ShapeFitter:
    """Fits shape hypotheses to coverage maps by rendering them as the Pillow renderer does.

    Args:
        spec: the spec (object colours' sRGB).
        hypotheses: colour -> shape -> :class:`ShapeHypothesis` (what the spec allows).
        supersample: the spec's ``image.supersample`` (the renderer's anti-aliasing factor).
        blurs: Gaussian sigmas (px of a 64 px image) tried on every hypothesis; default :data:`BLURS`.
    """

    def __init__(self, spec: Spec, hypotheses: dict[str, dict[str, ShapeHypothesis]], supersample: int,
                 blurs: tuple[float, ...] = BLURS):
        self.spec = spec
        self.hypotheses = hypotheses
        self.supersample = supersample
        self.blurs = blurs

    def fit(self, alpha: np.ndarray, color: str, side: int) -> tuple[SceneObject, float, dict] | None:
        """Best shape hypothesis for a coverage map ``alpha`` ``[H, W]``: (object, soft IoU,
        ``{shape: (object, IoU)}`` of every hypothesis tried)."""
        area = float(alpha.sum())  # signed: noise averages out
        if area <= 0:
            return None
        alpha = np.clip(alpha, 0.0, 1.0)
        ys, xs = np.nonzero(alpha)
        w = alpha[ys, xs]
        if w.sum() <= 0:
            return None
        cx = float((w * (xs + 0.5)).sum() / w.sum())
        cy = float((w * (ys + 0.5)).sum() / w.sum())
        m = 2 + int(math.ceil(2 * self.blurs[-1] * side / 64.0))  # room for a blurred hypothesis
        y0, y1 = max(0, ys.min() - m), min(alpha.shape[0], ys.max() + m + 1)
        x0, x1 = max(0, xs.min() - m), min(alpha.shape[1], xs.max() + m + 1)
        patch = alpha[y0:y1, x0:x1]
        # coarse pass: every shape the spec allows for this colour, on a coarse rotation grid
        coarse = []
        for h in self.hypotheses[color].values():
            r_px = math.sqrt(area / unit_area(h.shape))
            obj = SceneObject(h.shape, color, self.spec.rgb(color), 2 * r_px / side, (cx / side, cy / side), 0.0)
            coarse.append((self.rotation_search(obj, h, patch, (x0, y0), side, r_px, fine=False), h, obj, r_px))
        top = max(c[0][0] for c in coarse)
        best, alts = None, {}
        for (iou0, rot0, _), h, obj, r_px in coarse:
            if iou0 < top - SHAPE_MARGIN:  # clearly another shape: not refined
                continue
            obj.rotation = rot0
            _, iou, cov = self.rotation_search(obj, h, patch, (x0, y0), side, r_px, fine=True)
            # calibrate size and centre so that the rendered coverage has the observed area and
            # centroid (Pillow's polygon fill is biased by up to half a supersampled pixel)
            for _ in range(2):
                rendered = float(cov.sum())
                if rendered <= 0:
                    break
                gy, gx = np.nonzero(cov)
                gw = cov[gy, gx]
                rx = float((gw * (gx + 0.5 + x0)).sum() / rendered)
                ry = float((gw * (gy + 0.5 + y0)).sum() / rendered)
                obj.size = obj.size * math.sqrt(area / rendered)
                obj.center = (obj.center[0] + (cx - rx) / side, obj.center[1] + (cy - ry) / side)
                cov = self.render_patch(obj, patch.shape, (x0, y0), side)
            # a blurred image is compared with blurred hypotheses (blur keeps area and centroid)
            iou = soft_iou(patch, cov)
            if iou < 0.97:  # not a sharp match: try blurred hypotheses
                iou = max([iou] + [soft_iou(patch, ndimage.gaussian_filter(cov, b * side / 64.0, mode="constant")) for b in self.blurs if b])
            obj.size = round(obj.size, 5)
            obj.center = (round(obj.center[0], 5), round(obj.center[1], 5))
            alts[h.shape] = (obj, iou)
            if best is None or iou > best[1]:
                best = (obj, iou)
        return best[0], best[1], alts

    def rotation_search(self, obj, h: ShapeHypothesis, patch, origin, side, r_px, fine: bool):
        """Rotations the spec allows: the coarse grid (``fine=False``), or a fine grid around
        ``obj.rotation`` (``fine=True``). Returns ``(IoU, rotation, coverage)`` of the best;
        ``obj.rotation`` is left at the best rotation (modulo the shape's symmetry)."""
        period = SYMMETRY_DEG[h.shape]
        if period is None:
            cov = self.render_patch(obj, patch.shape, origin, side)
            return soft_iou(patch, cov), 0.0, cov
        if isinstance(h.rotations, tuple):  # a range
            lo, hi = h.rotations
            span = min(hi - lo, period)
            step_f = max(0.5, min(3.0, math.degrees(0.3 / max(r_px, 1e-6))))
            step_c = max(step_f, min(10.0, span / 6.0))
            if not fine:
                cands = list(np.arange(lo, lo + span + 1e-9, step_c)) if span > 0 else [lo]
            elif step_c > step_f:
                cands = list(np.arange(obj.rotation - step_c, obj.rotation + step_c + 1e-9, step_f))
            else:
                cands = [obj.rotation]
        else:
            cands = sorted({r % period for r in h.rotations}) if not fine else [obj.rotation]
        best = None
        covs = self.render_rotations(obj, [float(r) for r in cands], patch.shape, origin, side)
        for r, cov, iou in zip(cands, covs, soft_ious(patch, covs)):
            if best is None or iou > best[0]:
                best = (iou, float(r), cov)
        obj.rotation = round(best[1] % period, 3)
        return best[0], obj.rotation, best[2]

    def render_rotations(self, obj: SceneObject, rotations: list[float], shape: tuple[int, int], origin: tuple[int, int],
                          side: int) -> list[np.ndarray]:
        """:meth:`render_patch` of the polygon ``obj`` at each of ``rotations``, pixel for pixel,
        drawn in one Pillow image: the patches are stacked vertically (Pillow's scan-line fill
        computes each row's crossings from integer row differences, so a whole-row shift moves the
        polygon without changing a pixel), each in a band with room above and below for the part of
        the polygon the patch clips, on multiples of the supersampling (the box reduction sees the
        same blocks). ``obj.rotation`` is left at the last rotation."""
        s = self.supersample
        big = side * s
        ox, oy = origin[0] * s, origin[1] * s
        hs, ws = shape[0] * s, shape[1] * s
        polys = []
        for r in rotations:
            obj.rotation = r
            polys.append([(round(x) - ox, round(y) - oy) for x, y in obj.vertices(big)])
        if len(polys) == 1:
            return [self.render_patch(obj, shape, origin, side)]
        lo = min(min(y for _, y in p) for p in polys)
        hi = max(max(y for _, y in p) for p in polys)
        pad = max(0, -lo, hi - (hs - 1)) + 1
        pad = -(-pad // s) * s  # a multiple of the supersampling
        band = hs + 2 * pad
        img = Image.new("L", (ws, band * len(polys)), 0)
        d = ImageDraw.Draw(img)
        for k, p in enumerate(polys):
            dy = k * band + pad
            d.polygon([(x, y + dy) for x, y in p], fill=255)
        if s > 1:
            img = img.reduce(s)
        a = np.asarray(img, dtype=np.float64) / 255.0
        b, q = band // s, pad // s
        return [a[k * b + q:k * b + q + shape[0]] for k in range(len(polys))]

    def render_patch(self, obj: SceneObject, shape: tuple[int, int], origin: tuple[int, int], side: int) -> np.ndarray:
        """Coverage in [0, 1] of ``obj`` drawn exactly as :class:`renderers.pillow.PillowRenderer`
        draws it (same supersampling and rounding), cropped to a patch at pixel ``origin``."""
        s = self.supersample
        big = side * s
        ox, oy = origin[0] * s, origin[1] * s
        img = Image.new("L", (shape[1] * s, shape[0] * s), 0)
        d = ImageDraw.Draw(img)
        verts = obj.vertices(big)
        if verts is None:
            r = obj.radius * big
            cx, cy = obj.center[0] * big, obj.center[1] * big
            d.ellipse((round(cx - r) - ox, round(cy - r) - oy, round(cx + r) - 1 - ox, round(cy + r) - 1 - oy), fill=255)
        else:
            d.polygon([(round(x) - ox, round(y) - oy) for x, y in verts], fill=255)
        if s > 1:
            img = img.reduce(s)
        return np.asarray(img, dtype=np.float64) / 255.0


def merge_rotations(a, b):
    """The rotations two templates allow together: a (lo, hi) range when either is a range, else the union list."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        lo = min(x[0] if isinstance(x, tuple) else min(x) for x in (a, b))
        hi = max(x[1] if isinstance(x, tuple) else max(x) for x in (a, b))
        return (lo, hi)
    return sorted(set(a) | set(b))


def soft_ious(a: np.ndarray, bs: list[np.ndarray]) -> list[float]:
    """:func:`soft_iou` of ``a`` against each of ``bs`` (same shape), the minimum and maximum taken
    over all of them at once; each sum is over one contiguous ``[H, W]`` block, as in
    :func:`soft_iou`, so the values are the same to the bit."""
    if len(bs) == 1:
        return [soft_iou(a, bs[0])]
    stack = np.stack(bs)
    lo, hi = np.minimum(a, stack), np.maximum(a, stack)
    out = []
    for k in range(len(bs)):
        den = float(hi[k].sum())
        out.append(float(lo[k].sum()) / den if den > 0 else 0.0)
    return out


def soft_iou(a: np.ndarray, b: np.ndarray) -> float:
    """Soft IoU ``sum(min(a, b)) / sum(max(a, b))`` of two coverage maps of one shape (0.0 when both are empty)."""
    den = float(np.maximum(a, b).sum())
    return float(np.minimum(a, b).sum()) / den if den > 0 else 0.0
