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

from mosaic.evaluation.raster import Canvas, clip, gaussian
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
        self._coarse: dict = {}  # (lo, span, step) -> the coarse rotation grid of a range
        self._rgb = {c: spec.rgb(c) for c in hypotheses}  # colour -> sRGB (``spec.rgb`` builds the palette on every call)

    def fit(self, alpha: np.ndarray, color: str, side: int) -> tuple[SceneObject, float, dict] | None:
        """Best shape hypothesis for a coverage map ``alpha`` ``[H, W]``: (object, soft IoU,
        ``{shape: (object, IoU)}`` of every hypothesis tried); :meth:`fit_many` of one map."""
        return self.fit_many([(alpha, color)], side)[0]

    def fit_many(self, items: list[tuple[np.ndarray, str]], side: int,
                 boxes: list | None = None) -> list[tuple[SceneObject, float, dict] | None]:
        """Best shape hypothesis for each of several coverage maps, fitted together.

        Args:
            items: ``(alpha, colour)`` pairs: float64 coverage ``[H, W]`` of an image of ``side``
                px (signed: noise averages out in the area) and the colour whose hypotheses the
                spec allows.
            side: the image side, px.
            boxes: per item, None or a box ``(rows, cols)`` slices outside which its map is zero
                (read on the box only: the same pixels in the same order).
        Returns:
            per item, ``(object, soft IoU, {shape: (object, IoU)})`` of the best hypothesis and of
            every refined one, or None where the map holds no positive coverage.

        Per item: the area gives each shape's circumradius (``area = k_shape * r²``); each shape
        is matched on a coarse rotation grid; shapes within :data:`SHAPE_MARGIN` of the best are
        refined on a fine grid, then size and centre are calibrated twice so that the rendered
        coverage has the observed area and centroid (Pillow's polygon fill is biased by up to half
        a supersampled pixel), and a match below 0.97 is retried against blurred renders. The
        renders of every item at each of these four steps are drawn in one :class:`Canvas`.
        """
        s = self.supersample
        m = 2 + int(math.ceil(2 * self.blurs[-1] * side / 64.0))  # room for a blurred hypothesis
        canvas = Canvas(s, side)
        out: list = [None] * len(items)
        work = []
        for i, (alpha, color) in enumerate(items):
            area = float(alpha.sum())  # signed: noise averages out
            if area <= 0:
                continue
            box = boxes[i] if boxes else None
            if box is None:
                alpha = clip(alpha, 0.0, 1.0)
                ys, xs = np.nonzero(alpha)
                w = alpha[ys, xs]
            else:  # the nonzero pixels of the box, in the same (row-major) order
                sub = clip(alpha[box], 0.0, 1.0)
                ys, xs = np.nonzero(sub)
                w = sub[ys, xs]
                ys, xs = ys + box[0].start, xs + box[1].start
            wsum = w.sum()
            if wsum <= 0:
                continue
            cx = float((w * (xs + 0.5)).sum() / wsum)
            cy = float((w * (ys + 0.5)).sum() / wsum)
            y0, y1 = max(0, int(ys.min()) - m), min(alpha.shape[0], int(ys.max()) + m + 1)
            x0, x1 = max(0, int(xs.min()) - m), min(alpha.shape[1], int(xs.max()) + m + 1)
            patch = alpha[y0:y1, x0:x1] if box is None else clip(alpha[y0:y1, x0:x1], 0.0, 1.0)
            hyps = []
            rgb = self._rgb.get(color)
            if rgb is None:
                rgb = self._rgb[color] = self.spec.rgb(color)
            for h in self.hypotheses[color].values():  # coarse pass: every shape, coarse rotations
                r_px = math.sqrt(area / unit_area(h.shape))
                obj = SceneObject(h.shape, color, rgb, 2 * r_px / side, (cx / side, cy / side), 0.0)
                cands = self.rotation_candidates(h, 0.0, r_px, fine=False)
                g = canvas.add(obj, patch.shape, (x0, y0)) if cands is None else \
                    canvas.add_rotations(obj, cands, patch.shape, (x0, y0))
                hyps.append(_Hyp(h, obj, r_px, cands, g))
            work.append((i, patch, (x0, y0), area, cx, cy, hyps))
        covs = canvas.render()
        for _, patch, _, _, _, _, hyps in work:
            ious = _scores(canvas, covs, patch, [hy.group for hy in hyps])
            for hy in hyps:
                hy.iou, hy.raw, hy.cov = _best(patch, hy.h, hy.obj, hy.cands, covs[hy.group], ious.pop(0))
        refined = []  # fine pass: shapes within the margin of the best
        for k, (_, patch, origin, _, _, _, hyps) in enumerate(work):
            top = max(hy.iou for hy in hyps)
            for hy in hyps:
                if hy.iou < top - SHAPE_MARGIN:  # clearly another shape: not refined
                    continue
                hy.cands = self.rotation_candidates(hy.h, hy.obj.rotation, hy.r_px, fine=True)
                if hy.cands is None or hy.cands == [hy.raw]:
                    hy.group = None  # the coarse render is this one, pixel for pixel
                else:
                    hy.group = canvas.add_rotations(hy.obj, hy.cands, patch.shape, origin)
                refined.append((k, hy))
        covs = canvas.render()
        drawn: dict[int, list[_Hyp]] = {}  # per item, its refined shapes drawn anew (consecutive groups)
        for k, hy in refined:
            if hy.group is not None:
                drawn.setdefault(k, []).append(hy)
        scores = {id(hy): ious for k, hys in drawn.items()
                  for hy, ious in zip(hys, _scores(canvas, covs, work[k][1], [hy.group for hy in hys]))}
        for k, hy in refined:
            if hy.group is None:  # its coarse best stands: the same render, IoU, rotation (set by ``_best``)
                continue
            hy.iou, hy.raw, hy.cov = _best(work[k][1], hy.h, hy.obj, hy.cands, covs[hy.group], scores.get(id(hy)))
        # calibrate size and centre so that the rendered coverage has the observed area and centroid
        live = list(refined)
        for _ in range(2):
            nxt = []
            for k, hy in live:
                _, patch, (x0, y0), area, cx, cy, _ = work[k]
                rendered = float(hy.cov.sum())
                if rendered <= 0:
                    continue
                gy, gx = np.nonzero(hy.cov)
                gw = hy.cov[gy, gx]
                rx = float((gw * (gx + 0.5 + x0)).sum() / rendered)
                ry = float((gw * (gy + 0.5 + y0)).sum() / rendered)
                obj = hy.obj
                obj.size = obj.size * math.sqrt(area / rendered)
                obj.center = (obj.center[0] + (cx - rx) / side, obj.center[1] + (cy - ry) / side)
                hy.group = canvas.add(obj, patch.shape, (x0, y0))
                nxt.append((k, hy))
            covs = canvas.render()
            for k, hy in nxt:
                hy.cov = covs[hy.group][0]
            live = nxt
        # a blurred image is compared with blurred hypotheses (blur keeps area and centroid)
        by_item: dict[int, list[_Hyp]] = {}
        for k, hy in refined:
            hy.iou = soft_iou(work[k][1], hy.cov)
            if hy.iou < 0.97:  # not a sharp match: try blurred hypotheses
                by_item.setdefault(k, []).append(hy)
        for k, hys in by_item.items():
            patch = work[k][1]
            stack = np.stack([hy.cov for hy in hys])
            blurred = [soft_ious(patch, gaussian(stack, b * side / 64.0)) for b in self.blurs if b]
            for j, hy in enumerate(hys):
                hy.iou = max([hy.iou] + [ious[j] for ious in blurred])
        best: dict[int, tuple] = {}
        alts: dict[int, dict] = {}
        for k, hy in refined:
            obj = hy.obj
            obj.size = round(obj.size, 5)
            obj.center = (round(obj.center[0], 5), round(obj.center[1], 5))
            alts.setdefault(k, {})[hy.h.shape] = (obj, hy.iou)
            if k not in best or hy.iou > best[k][1]:
                best[k] = (obj, hy.iou)
        for k, (i, *_rest) in enumerate(work):
            out[i] = (best[k][0], best[k][1], alts[k])
        return out

    def rotation_candidates(self, h: ShapeHypothesis, rotation: float, r_px: float, fine: bool) -> list[float] | None:
        """Rotations (degrees) to try for ``h``: the coarse grid of what the spec allows
        (``fine=False``) or a fine grid around ``rotation`` (``fine=True``; the step keeps a
        vertex at circumradius ``r_px`` within about 0.3 px); None for the circle."""
        period = SYMMETRY_DEG[h.shape]
        if period is None:
            return None
        if isinstance(h.rotations, tuple):  # a range
            lo, hi = h.rotations
            span = min(hi - lo, period)
            step_f = max(0.5, min(3.0, math.degrees(0.3 / max(r_px, 1e-6))))
            step_c = max(step_f, min(10.0, span / 6.0))
            if not fine:  # the same grid for every object of a size: made once (callers do not change it)
                key = (lo, span, step_c)
                cands = self._coarse.get(key)
                if cands is None:
                    cands = self._coarse[key] = [float(r) for r in (np.arange(lo, lo + span + 1e-9, step_c) if span > 0 else [lo])]
                return cands
            elif step_c > step_f:
                cands = list(np.arange(rotation - step_c, rotation + step_c + 1e-9, step_f))
            else:
                cands = [rotation]
        elif fine:
            cands = [rotation]
        else:
            key = (period, tuple(h.rotations))
            cands = self._coarse.get(key)
            if cands is None:
                cands = self._coarse[key] = [float(r) for r in sorted({r % period for r in h.rotations})]
            return cands
        return [float(r) for r in cands]

    def render_patch(self, obj: SceneObject, shape: tuple[int, int], origin: tuple[int, int], side: int) -> np.ndarray:
        """Coverage in [0, 1] (float64 ``shape``) of ``obj`` drawn exactly as
        :class:`renderers.pillow.PillowRenderer` draws it (same supersampling and rounding),
        cropped to a patch at pixel ``origin`` ``(x0, y0)``."""
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


@dataclass
class _Hyp:
    """One shape hypothesis of one item of :meth:`ShapeFitter.fit_many` while it is fitted."""

    h: ShapeHypothesis
    obj: SceneObject
    r_px: float
    cands: list[float] | None  # rotations tried at the current step (None: a circle)
    group: int | None  # their canvas group
    iou: float = 0.0
    raw: float = 0.0  # the best candidate rotation, before reduction modulo the symmetry
    cov: np.ndarray | None = None  # float64 [h, w] coverage of the best candidate


def _scores(canvas: Canvas, covs: list[np.ndarray], patch: np.ndarray, groups: list[int]) -> list[list[float] | None]:
    """Per group of ``groups`` (rendered by ``canvas``, consecutive, all of ``patch``'s size), the
    soft IoU of each of its renders against ``patch``: one :func:`soft_ious` over the slice of
    their shared block (the same bits as scoring each group alone); None each when they do not
    share one."""
    block, start = canvas.blocks[groups[0]]
    last, end = canvas.blocks[groups[-1]]
    if last is not block:
        return [None] * len(groups)
    ious = soft_ious(patch, block[start:end + len(covs[groups[-1]])])
    out, at = [], 0
    for g in groups:
        k = len(covs[g])
        out.append(ious[at:at + k])
        at += k
    return out


def _best(patch: np.ndarray, h: ShapeHypothesis, obj: SceneObject, cands: list[float] | None,
          covs: np.ndarray, ious: list[float] | None = None) -> tuple[float, float, np.ndarray]:
    """The best of the rendered candidates ``covs`` (float64 ``[R, h, w]``, one per rotation of
    ``cands``; one disk for a circle) against ``patch``: ``(IoU, rotation as tried, coverage)``, the first best on ties;
    ``obj.rotation`` is set to that rotation modulo the shape's symmetry, rounded to 0.001 deg.
    ``ious``: their soft IoUs, when already computed (:func:`_scores`)."""
    if cands is None:
        return (soft_iou(patch, covs[0]) if ious is None else ious[0]), 0.0, covs[0]
    ious = soft_ious(patch, covs) if ious is None else ious
    top = max(ious)  # the first of the best (IoUs are never NaN: a zero denominator reads 0.0)
    j = ious.index(top)
    best = (top, float(cands[j]), covs[j])
    obj.rotation = round(best[1] % SYMMETRY_DEG[h.shape], 3)
    return best


def merge_rotations(a, b):
    """The rotations two templates allow together: a (lo, hi) range when either is a range, else the union list."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        lo = min(x[0] if isinstance(x, tuple) else min(x) for x in (a, b))
        hi = max(x[1] if isinstance(x, tuple) else max(x) for x in (a, b))
        return (lo, hi)
    return sorted(set(a) | set(b))


def soft_ious(a: np.ndarray, bs) -> list[float]:
    """:func:`soft_iou` of ``a`` ``[H, W]`` against each of ``bs`` (a list of ``[H, W]`` maps or a
    ``[K, H, W]`` stack), the minimum and maximum taken over all of them at once; each sum is
    numpy's pairwise sum over one contiguous ``[H, W]`` block, as in :func:`soft_iou`, so the
    values are the same to the bit."""
    stack = bs if isinstance(bs, np.ndarray) else np.stack(bs)
    k = stack.shape[0]
    lo = np.minimum(a, stack).reshape(k, -1).sum(1).tolist()
    hi = np.maximum(a, stack).reshape(k, -1).sum(1).tolist()
    return [n / d if d > 0 else 0.0 for n, d in zip(lo, hi)]


def soft_iou(a: np.ndarray, b: np.ndarray) -> float:
    """Soft IoU ``sum(min(a, b)) / sum(max(a, b))`` of two coverage maps of one shape (0.0 when both are empty)."""
    den = float(np.maximum(a, b).sum())
    return float(np.minimum(a, b).sum()) / den if den > 0 else 0.0
