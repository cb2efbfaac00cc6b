"""The scene parser: an image of the renderer -> a parsed scene graph -> concept values.

Steps (every one restricted to what the spec can produce):

1. **Colour classification.** Every pixel goes to the nearest colour (CIELAB, CIE76) among the
   background and the colours the spec's templates can take. Anti-aliased edge pixels are blends
   ``bg + a * (c - bg)`` of an object colour ``c`` and the background (the Pillow renderer
   box-averages sRGB bytes); a pixel is foreground when it is nearer to an object colour than to
   the background, i.e. roughly when ``a >= 0.5``.
2. **Objects.** Connected components (4-connectivity) of the foreground. The colour of a
   component is read from its interior pixels (the edge ring is a blend and would read as a third
   colour: the rim of a white disk on a dark background looks gray): the nearest palette colour
   to their mean, allowing the interior to be dimmed by blur (``bg + a (c - bg)``, ``a`` in
   [0.7, 1]). A component whose interior holds two colours (touching objects of different colours)
   is split by colour. Components too small to be an object of the spec are dropped as specks.
3. **Coverage.** For each object of colour ``c`` the per-pixel coverage ``a`` is the projection of
   ``p - bg`` on ``c - bg`` (clipped to [0, 1]), over the component grown by one pixel. Its sum is
   the object's area in px² (sub-pixel exact on clean renders, and preserved by blur); its
   weighted centroid is the centre (the centroid of every shape of :data:`mosaic.vocab.SHAPES` is
   its circumcentre).
4. **Shape, size, rotation.** For each shape the spec allows for that colour, the area gives the
   circumscribed diameter (``area = k_shape * r²``); the renderer's own coverage mask of that
   shape at that centre and size is compared with the observed coverage (soft IoU,
   ``sum(min) / sum(max)``) over the rotations the spec allows (coarse to fine, modulo the shape's
   symmetry). The best match gives shape, size (rendered area = observed area) and rotation.
5. **Touching same-colour objects.** No shape matches well (IoU < 0.7) and the area holds two or
   more of the smallest object: weighted k-means on pixel coordinates for k = 2.., best mean IoU.
6. The parsed :class:`~mosaic.scene.Scene` goes through :func:`mosaic.labels.read_labels` (the
   generator's function); its problems and the parser's own are the reasons of a failed read.

In the spirit of GenEval's detector + rules (Ghosh et al. 2023), exact for a known renderer;
accuracy measured by :func:`mosaic.evaluation.check_evaluator`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from mosaic.grammar import POSITION_BINS
from mosaic.labels import assign_templates, read_labels
from mosaic.scene import Scene, SceneObject
from mosaic.spec import Spec, allowed_values, template_sets
from mosaic.vocab import plural, srgb_to_lab
from mosaic.errors import MosaicError
from mosaic.evaluation.parallel_reads import read_in_processes
from mosaic.evaluation.raster import Canvas, clip, erode, gaussian, median, median_rgb
from mosaic.evaluation.region_ops import grow as _grow, kmeans_split as _kmeans_split, main_share as _main_share, sqdist as _sqdist
from mosaic.evaluation.region_ops import unique_inverse as _unique_inverse
from mosaic.evaluation.shape_fit import SHAPE_MARGIN, ShapeFitter, ShapeHypothesis, merge_rotations, soft_iou, unit_area

#: Coverage interior pixels keep under blur: the interior colour is matched to ``bg + a (c - bg)``.
_INTERIOR_ALPHAS = np.linspace(0.7, 1.0, 7)
_SPLIT_IOU = 0.7  # below this a region is tried as several touching objects
_SPECK_FRACTION = 0.3  # components smaller than this fraction of the smallest object are specks
_MATCH_SMOOTH = 0.8  # px: Gaussian smoothing of observed and rendered coverage before the quality IoU
_MATCH_RADIUS = 8.0  # px: the match IoU shortfall is normalised to an object of this circumradius
_SPECK_MIN_PX = 4.0  # dropped specks of at least this area (px² of a 64 px image) count against the fragments measure

#: Abstention thresholds on the match-quality measures (:meth:`SceneParser._quality`): a read with
#: any measure below its threshold is ``unreadable``. Calibrated with
#: :func:`mosaic.evaluation.quality.calibrate_abstention` on mild and strong degraded renders of
#: the shipped specs (docs/evaluation.md, "Abstention and match quality"); a clean render scores about 1 on each.
ABSTAIN_THRESHOLDS: dict[str, float] = {"iou": 0.81, "fragments": 0.85, "area": 0.45}
_MEASURE_TEXT = {"iou": "shape match (soft IoU)", "fragments": "share of the object in one region", "area": "area against the spec's size"}


@dataclass
class Parse:
    """The parser's reading of one image.

    Attributes:
        scene: the parsed scene graph (objects without ``template``).
        values: concept -> value, None where the image does not show one.
        problems: reasons for every value that could not be read, plus the parser's own notes
            (dropped specks, split regions, poor shape fits).
        ious: per object, the soft IoU of its best shape hypothesis (1.0 = exact).
        quality: the match quality of the read, in [0, 1]: the lowest of ``measures`` (0 for a
            read without objects where the spec always draws some).
        measures: ``{"iou", "fragments", "area"}`` (:meth:`SceneParser._quality`).
        raw_values: the values before abstention (equal to ``values`` unless ``abstained``).
        abstained: True when a measure fell below its threshold and abstention is on: every
            value is then None (unreadable, counted wrong).
    """

    scene: Scene
    values: dict
    problems: list[str] = field(default_factory=list)
    ious: list[float] = field(default_factory=list)
    quality: float = 1.0
    measures: dict = field(default_factory=dict)
    raw_values: dict | None = None
    abstained: bool = False
    matches: list[float] = field(default_factory=list)


class SceneParser:
    """Reads concept values from images of the spec's renderer (see the module docstring).

    Args:
        spec: the spec the images were made from (palette, shapes, sizes, rotations, labels).
        abstain: read an image whose match quality is below ``thresholds`` as unreadable (every
            value None) instead of crediting the nearest allowed shape; on by default.
        thresholds: per measure (``iou``, ``fragments``, ``area``); default
            :data:`ABSTAIN_THRESHOLDS`.
        position_bins: ``strict`` (default: an angle read between two bins of a position concept
            is unreadable, as the labels' rule) or ``nearest`` (the nearest bin: the forced choice
            of MOSAIC's 10-way position classifier; :func:`mosaic.labels.read_labels`).
        workers: processes that :meth:`read` and :meth:`predict` spread a call's images over (1:
            this process; the same reads either way, :mod:`mosaic.evaluation.parallel_reads`).
    Attributes:
        name: ``"parser"``.
        colors: the object colours the spec can produce (the only ones considered).
    """

    name = "parser"

    def __init__(self, spec: Spec, abstain: bool = True, thresholds: dict[str, float] | None = None,
                 position_bins: str = "strict", workers: int = 1):
        if getattr(spec.image, "renderer", None) == "shaded":
            raise MosaicError(f"the scene parser reads flat renders; spec {spec.name!r} uses image.renderer: shaded: "
                              "score it with a learned evaluator (`mosaic evaluator train SPEC`, then --evaluator DIR)")
        self.abstain = bool(abstain)
        if position_bins not in POSITION_BINS:
            raise MosaicError(f"position_bins is {position_bins!r}: use one of {', '.join(POSITION_BINS)} (--position-bins, evaluation.position_bins)")
        self.position_bins = position_bins
        self.workers, self._pool = max(1, int(workers)), None
        unknown = set(thresholds or {}) - set(ABSTAIN_THRESHOLDS)
        if unknown:
            raise ValueError(f"unknown abstention measure(s) {sorted(unknown)}: use {', '.join(ABSTAIN_THRESHOLDS)}")
        self.thresholds = {**ABSTAIN_THRESHOLDS, **(thresholds or {})}
        self.spec = spec
        self.supersample = spec.image.supersample
        self._cov_cache: dict = {}
        self.bg = np.asarray(spec.background_rgb(), dtype=np.float64)
        colors: list[str] = []
        hyps: dict[str, dict[str, ShapeHypothesis]] = {}
        for t in spec.templates:
            t_colors = list(allowed_values(spec, t.color))
            t_shapes = list(allowed_values(spec, t.shape))
            sv = allowed_values(spec, t.size)
            sizes = [spec.size_fraction(v) for v in (sv if isinstance(sv, list) else list(sv))]
            intervals = [(v, v) for v in sizes] if isinstance(sv, list) else [(min(sizes), max(sizes))]
            rot = t.rotation
            if rot.kind == "range":
                rots: list[float] | tuple[float, float] = (float(rot.range[0]), float(rot.range[1]))
            else:
                rots = [float(v) for v in allowed_values(spec, rot)]
            for c in t_colors:
                if c not in colors:
                    colors.append(c)
                for sh in t_shapes:
                    h = hyps.setdefault(c, {}).get(sh)
                    new = ShapeHypothesis(sh, None if sh == "circle" else rots, (min(sizes), max(sizes)), list(intervals))
                    if h is None:
                        hyps[c][sh] = new
                    else:  # merge templates sharing colour and shape
                        h.size_range = (min(h.size_range[0], new.size_range[0]), max(h.size_range[1], new.size_range[1]))
                        h.sizes = sorted(set(h.sizes) | set(new.sizes))
                        if sh != "circle":
                            h.rotations = merge_rotations(h.rotations, new.rotations)
        self.colors = colors
        # the fewest objects a scene of the spec holds (an empty read of a spec that never draws an
        # empty scene has match quality 0)
        self._min_objects = sum(int(min(float(v) for v in (allowed_values(spec, t.repeat) or [0]))) for t in spec.templates)
        self._max_objects = {t.name: int(max(float(v) for v in allowed_values(spec, t.repeat))) for t in spec.templates
                             if allowed_values(spec, t.repeat)}
        self.rgb = np.array([spec.rgb(c) for c in colors], dtype=np.float64)  # [K, 3]
        self.hypotheses = hyps
        self._fitter = ShapeFitter(spec, hyps, self.supersample)
        self._lab = srgb_to_lab(np.vstack([self.bg[None], self.rgb]))  # [K+1, 3], 0 = background
        # interior colour models bg + a (c - bg), a in [0.7, 1]: [K, A, 3] Lab
        mix = self.bg[None, None] + _INTERIOR_ALPHAS[None, :, None] * (self.rgb[:, None] - self.bg[None, None])
        self._interior_lab = srgb_to_lab(mix)
        # dims[i, j]: colour i looks like colour j dimmed by a blurred edge (bg + a (c_j - bg), a in [0.15, 0.7])
        dim_lab = srgb_to_lab(self.bg[None, None] + np.linspace(0.15, 0.7, 12)[None, :, None] * (self.rgb[:, None] - self.bg[None, None]))
        lab_c = self._lab[1:]
        self._dims = np.sqrt(_sqdist(lab_c[:, None, None, :], dim_lab).min(-1)).squeeze(1) < 12.0  # [K, K]
        np.fill_diagonal(self._dims, False)
        # smallest object of each colour, as a fraction of the image area (for specks and splits)
        self._min_area = {
            c: min(unit_area(h.shape) * (h.size_range[0] / 2) ** 2 for h in hyps[c].values()) for c in colors
        }

    # -- public --------------------------------------------------------------------------------
    def predict(self, images: np.ndarray) -> list[dict]:
        """Concept values of each image.

        Args:
            images: uint8 ``[N, H, W, 3]`` sRGB (square images of any side).
        Returns:
            one dict per image: concept -> value (None where unreadable).
        Raises:
            ValueError: ``images`` is not ``[N, H, W, 3]`` uint8.
        """
        return [p.values for p in self.read(images)]

    def read(self, images: np.ndarray) -> list[Parse]:
        """The full reading of each image (values, quality measures, abstention), uint8
        ``[N, H, W, 3]``; :meth:`predict` is ``[p.values for p in read(images)]``."""
        return read_in_processes(self, _check_images(images))

    def __getstate__(self):  # a worker's copy: no pool, reads in its own process
        return {**self.__dict__, "_pool": None, "workers": 1}

    def explain(self, images: np.ndarray) -> list[list[str]]:
        """Per image: what the parser found (``"found 4 red circles, 1 brown circle"``) and the
        reasons for every value it could not read."""
        out = []
        for im in _check_images(images):
            p = self.parse(im)
            kinds = Counter((o.color, o.shape) for o in p.scene.objects)
            found = ", ".join(f"{n} {c} {sh if n == 1 else plural(sh)}" for (c, sh), n in kinds.items()) or "no objects"
            out.append([f"found {found}"] + p.problems)
        return out

    def parse(self, image: np.ndarray) -> Parse:
        """Parse one image (uint8 ``[H, W, 3]``) into a scene graph and concept values."""
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"parse() needs one uint8 image [H, W, 3], got shape {image.shape}")
        if image.dtype != np.uint8:  # integer sRGB in another dtype reads the same
            u8 = image.astype(np.uint8)
            if not np.array_equal(u8, image):
                raise ValueError(f"parse() needs sRGB bytes (uint8 [H, W, 3]), got {image.dtype} values outside 0-255 or not whole")
            image = u8
        side = image.shape[0]
        px = image.astype(np.float64)
        notes: list[str] = []
        specks: list[float] = []
        regions, bg = self._regions(image, px, notes, specks)
        objects, ious, shares, maps = [], [], [], []
        if regions:
            # every pixel near an object belongs to its nearest region (within R px): the faint,
            # blurred edge of an object is read, but never the pixels of another one
            ids = np.zeros(px.shape[:2], np.int32)
            for k, (_, region) in enumerate(regions, start=1):
                ids[region] = k
            # (on the box of the regions grown by more than R: a pixel outside it is farther)
            reach = max(2.0, 3.0 * side / 64.0)
            g = int(math.ceil(reach)) + 1
            rows, cols = np.flatnonzero(ids.any(1)), np.flatnonzero(ids.any(0))
            box = (slice(max(0, rows[0] - g), rows[-1] + g + 1), slice(max(0, cols[0] - g), cols[-1] + g + 1))
            sub = ids[box]
            dist, (iy, ix) = ndimage.distance_transform_edt(sub == 0, return_indices=True)
            owner = np.zeros_like(ids)
            owner[box] = np.where(dist <= reach, sub[iy, ix], 0)
            alts = []
            for obj, iou, alt, share, alpha, dom, box in self._read_objects(px, bg, owner, regions, side, notes):
                objects.append(obj)
                ious.append(iou)
                alts.append(alt)
                shares.append(share)
                maps.append((alpha, dom, box))
            self._settle_shapes(objects, ious, alts, side, notes)
        self._cov_cache = {}
        scene = Scene(side, tuple(int(v) for v in self.bg), objects)
        reading = read_labels(scene, self.spec, self.position_bins)
        matches = self._match(objects, maps, side)
        # objects no template can take, and objects beyond a template's largest count (a second
        # region where the spec draws one object: the smaller ones), count as fragments
        area_of = [unit_area(o.shape) * (o.size * side / 2) ** 2 for o in objects]
        groups, unmatched = assign_templates(scene, self.spec) if objects else ({}, [])
        surplus = list(unmatched)
        for name, idx in groups.items():
            most = self._max_objects.get(name)
            if most is not None and len(idx) > most:
                surplus += sorted(idx, key=lambda i: area_of[i])[: len(idx) - most]
        extra = sum(area_of[i] for i in surplus)
        quality = self._quality(objects, [m[0] for m in matches], shares, specks, side, [m[1] for m in matches], extra)
        values, problems = dict(reading.values), list(reading.problems) + notes
        below = {m: v for m, v in quality.items() if v < self.thresholds[m]}
        abstained = bool(self.abstain and below)
        if abstained:
            problems.append("unreadable (abstained): " + "; ".join(f"{_MEASURE_TEXT[m]} {v:.2f} < {self.thresholds[m]:.2f}"
                                                                    for m, v in below.items()))
            values = {c: None for c in values}
        q = min(quality.values()) if objects or self._min_objects == 0 else 0.0
        return Parse(scene, values, problems, ious, quality=q, measures=quality,
                     raw_values=dict(reading.values), abstained=abstained, matches=[m[0] for m in matches])

    def _match(self, objects: list[SceneObject], maps: list[tuple], side: int) -> list[tuple[float, float]]:
        """How well each read object explains its coverage, robust to blur, noise and colour gain:
        the soft IoU between the observed coverage ``alpha`` (float64 ``[H, W]``, signed, zero
        outside ``domain``, bool ``[H, W]``; ``maps`` holds ``(alpha, domain, box of the domain or None)`` per object) divided by its
        interior level (a colour shift scales it), and the renderer's coverage of the object
        (restricted to ``domain``, blurred by the best of the parser's blurs), both smoothed by a
        Gaussian of ``_MATCH_SMOOTH`` px (pixel noise averages out) and clipped to [0, 1]. Returns
        ``(IoU, interior level)`` per object. The renders of every object are drawn in one
        :class:`~mosaic.evaluation.raster.Canvas` (and those resized for their level in a second)."""
        m = 2 + int(math.ceil(3 * _MATCH_SMOOTH + 2 * self._fitter.blurs[-1] * side / 64.0))
        canvas = Canvas(self.supersample, side)
        work = []
        for obj, (alpha, domain, box) in zip(objects, maps):
            # work on a patch: the domain and the object's box, with room for smoothing and blur
            H, W = alpha.shape
            if box is None:
                ys, xs = np.nonzero(domain)
                dy0, dy1, dx0, dx1 = (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1) if len(ys) else (None,) * 4
            else:  # the domain's box
                dy0, dy1, dx0, dx1 = box[0].start, box[0].stop, box[1].start, box[1].stop
            bx0, by0, bx1, by1 = obj.bbox(side)
            y0 = max(0, min(by0 if dy0 is None else dy0, by0) - m)
            y1 = min(H, max(by1 if dy1 is None else dy1, by1) + m)
            x0 = max(0, min(bx0 if dx0 is None else dx0, bx0) - m)
            x1 = min(W, max(bx1 if dx1 is None else dx1, bx1) + m)
            a, dom = alpha[y0:y1, x0:x1], domain[y0:y1, x0:x1]
            work.append([obj, a, dom, (x0, y0), canvas.add(obj, a.shape, (x0, y0)), 1.0])
        covs = canvas.render()
        for w in work:
            obj, a, dom, origin, g, _ = w
            cov = covs[g][0]
            core = erode(cov >= 0.999) & dom
            level = min(1.25, max(0.75, median(a[core]))) if np.count_nonzero(core) >= 4 else 1.0
            w[5] = level
            if level != 1.0:  # the parser sized the object by its (dimmed) area: undo that
                obj = SceneObject(obj.shape, obj.color, obj.rgb, obj.size / math.sqrt(level), obj.center, obj.rotation)
                w[4] = canvas.add(obj, a.shape, origin)
            else:
                w[4] = cov
        covs = canvas.render()
        if not work:
            return []
        # every object's patch in one zero-padded stack: a Gaussian of mode "constant" gives each
        # patch of the stack the bits it gives the patch alone (the padding reads as the zeros
        # outside), so each smoothing step is one call for all objects
        sm = _MATCH_SMOOTH
        hh = max(w[1].shape[0] for w in work)
        ww = max(w[1].shape[1] for w in work)
        n = len(work)
        obs, cov, dom = np.zeros((n, hh, ww)), np.zeros((n, hh, ww)), np.zeros((n, hh, ww), bool)
        for k, (_, a, d, _, g, level) in enumerate(work):
            h, w = a.shape
            obs[k, :h, :w] = a / level
            cov[k, :h, :w] = g if level == 1.0 else covs[g][0]
            dom[k, :h, :w] = d
        obs = clip(gaussian(obs, sm), 0.0, 1.0)
        best = [0.0] * n
        live = list(range(n))
        for b in self._fitter.blurs:  # sharp to blurred; the IoU rises to the image's blur, then falls: stop there
            sub = cov[live] if len(live) < n else cov
            c = gaussian(sub, b * side / 64.0) if b else sub
            c = clip(gaussian(np.where(dom[live] if len(live) < n else dom, c, 0.0), sm), 0.0, 1.0)
            nxt = []
            for j, k in enumerate(live):
                h, w = work[k][1].shape
                iou = soft_iou(obs[k, :h, :w], c[j, :h, :w])
                if iou >= best[k]:
                    best[k] = iou
                    nxt.append(k)
            live = nxt
            if not live:
                break
        return [(best[k], work[k][5]) for k in range(n)]

    def _quality(self, objects, matches, shares, specks, side, levels=None, extra: float = 0.0) -> dict[str, float]:
        """The match-quality measures of one read, each in [0, 1] (1 = a clean render):

        - ``iou``: the lowest size-normalised match over the objects: ``1 - (1 - m) r / 8`` for
          an object of circumradius ``r`` px whose match is ``m`` (:meth:`_match`: how well the
          best allowed shape explains the object's coverage). Blur and noise cost a clean shape an
          IoU shortfall roughly proportional to its perimeter over its area (``1 / r``), while a
          wrong shape costs a shortfall of its own; the normalisation puts every object on the
          scale of a 16 px wide one, so that one threshold serves small and large objects;
        - ``fragments``: the lowest share of an object's coverage in its main connected region,
          and one minus the share of object-coloured mass left in dropped specks and in objects
          no template of the spec can take (one object drawn in two pieces scores about the
          smaller piece's complement);
        - ``area``: the lowest ratio between an object's area (corrected for its interior level,
          ``levels``) and the nearest area its shape may have in the spec
          (``min(a / a_spec, a_spec / a)``; 1 inside an allowed size range).

        An image without objects scores 1 on every measure (nothing to judge; its values say
        what is missing, and it is not abstained on), but its overall ``quality`` is 0 when the
        spec never draws an empty scene."""
        if not objects:
            return {"iou": 1.0, "fragments": 1.0, "area": 1.0}
        total = sum(unit_area(o.shape) * (o.size * side / 2) ** 2 for o in objects)  # px², unmatched ones (``extra``) included
        frag = min(min(shares), 1.0 - (sum(specks) + extra) / (total + sum(specks))) if total > 0 else 1.0
        area = 1.0
        for o, lv in zip(objects, levels or [1.0] * len(objects)):
            h = self.hypotheses.get(o.color, {}).get(o.shape)
            if h is None or not h.sizes:
                continue
            size = o.size / math.sqrt(lv)
            near = min((min(max(size, lo), hi) for lo, hi in h.sizes), key=lambda v: abs(v - size))
            r = (size / near) ** 2 if near > 0 else 0.0
            area = min(area, r if r <= 1 else 1.0 / r)
        norm = [1.0 - (1.0 - m) * (o.size * side / 2.0) / _MATCH_RADIUS for o, m in zip(objects, matches)]
        return {"iou": float(max(0.0, min(norm))), "fragments": float(max(0.0, frag)), "area": float(area)}

    def _settle_shapes(self, objects, ious, alts, side, notes) -> None:
        """Settle ambiguous shapes with the spec's fixed object counts, in place.

        When a template with a fixed ``repeat`` (exactly n objects, e.g. the one target of a
        position task) reads more or fewer objects than n, an object whose second-best shape is
        within ``SHAPE_MARGIN`` IoU of its best (a blurred 9 px square looks round) and that would
        fix the count takes that shape instead, most ambiguous first. Every change is noted.
        """
        fixed = {t.name: int(t.repeat.value) for t in self.spec.templates if t.repeat.kind == "value"}
        if not fixed or len(objects) < 2:
            return
        sets = self.__dict__.get("_sets")
        if sets is None:  # the spec's template sets, made once
            sets = self._sets = {t.name: template_sets(self.spec, t) for t in self.spec.templates}
        moved: set[int] = set()
        for _ in range(len(objects)):
            groups, _ = assign_templates(Scene(side, tuple(int(v) for v in self.bg), objects), self.spec)
            move = None
            for name, n in fixed.items():
                idx = groups.get(name, [])
                shapes, colors, _ = sets[name]
                if len(idx) > n:  # an extra object: re-read one as a shape this template cannot have
                    cands = [(ious[i] - iou2, i, sh) for i in idx for sh, (_, iou2) in alts[i].items() if sh not in shapes]
                elif len(idx) < n:  # a missing object: re-read another one as a shape it can have
                    cands = [(ious[i] - iou2, i, sh) for i in range(len(objects)) if i not in idx and objects[i].color in colors
                             for sh, (_, iou2) in alts[i].items() if sh in shapes and sh != objects[i].shape]
                else:
                    continue
                cands = [c for c in cands if c[0] < SHAPE_MARGIN and c[1] not in moved]
                if cands:
                    move = min(cands)
                    break
            if move is None:
                return
            margin, i, sh = move
            moved.add(i)
            old = objects[i].shape
            objects[i], ious[i] = alts[i][sh]
            notes.append(f"re-read a {objects[i].color} {old} as a {sh} (IoU {margin:.2f} lower) to match the spec's object counts")

    # -- segmentation ----------------------------------------------------------------------------
    def _regions(self, image: np.ndarray, px: np.ndarray, notes: list[str],
                 specks: list[float] | None = None) -> tuple[list[tuple[int, np.ndarray]], np.ndarray]:
        """Single-colour connected regions ``[(colour index, bool mask [H, W])]`` of an image
        (uint8 ``[H, W, 3]``; ``px`` is the same as float64) and the image's background colour
        (float64 ``[3]``: median of the background pixels, follows a colour shift). The areas
        (px²) of dropped specks of at least ``_SPECK_MIN_PX`` are appended to ``specks``."""
        H, W, _ = px.shape
        # every colour is classified once, however many pixels show it (the same bits as per
        # pixel: the colour science is element-wise and row-wise)
        code = (image[..., 0].astype(np.int32) << 16) | (image[..., 1].astype(np.int32) << 8) | image[..., 2]
        u, inv = _unique_inverse(code.ravel())  # np.unique's arrays
        cols = np.stack([u >> 16, (u >> 8) & 255, u & 255], 1).astype(np.uint8)  # [U, 3], the distinct colours
        lab_u = srgb_to_lab(cols.astype(np.float64))  # [U, 3]
        fg_u = _sqdist(lab_u, self._lab).argmin(-1) != 0  # [U]: nearer an object colour than the background
        fg = fg_u[inv].reshape(H, W)
        n_bg = H * W - int(np.count_nonzero(fg))
        bg = median_rgb(cols[~fg_u], np.bincount(inv, minlength=len(cols))[~fg_u]) if n_bg >= 16 else self.bg
        comp, n = ndimage.label(fg)
        out: list[tuple[int, np.ndarray]] = []
        if n == 0:
            return out, bg
        inv2 = inv.reshape(H, W)  # per pixel: its distinct colour
        interior = erode(fg)
        side2 = float(H * W)
        # interior-colour distance of every foreground pixel: nearest model bg + a (c - bg), a in [0.7, 1]
        di_u = np.zeros((len(cols), len(self.colors)))
        di_u[fg_u] = _sqdist(lab_u[fg_u][:, None, :], self._interior_lab).min(-1)  # [U_fg, K]
        for k, sl in enumerate(ndimage.find_objects(comp), start=1):
            if sl is None:
                continue
            sl = _grow(sl, 1, H, W)
            mask = comp[sl] == k
            core = mask & interior[sl]
            if core.sum() < 3:
                core = mask
            at = inv2[sl][core]  # the distinct colours of the core pixels, row-major
            lab_core = lab_u[at]  # [P, 3]
            di = di_u[at]  # [P, K]
            near = di.argmin(-1)
            votes = np.bincount(near, minlength=len(self.colors))
            # colours holding a real share of the interior; a colour that is a dimmed version of
            # another present one (gray next to white) is that colour's blurred edge, not an object
            thr, vl = max(3, 0.2 * int(np.count_nonzero(core))), votes.tolist()
            present = [c for c in np.argsort(-votes).tolist() if vl[c] >= thr]
            if len(present) > 1:
                present = [c for c in present if not any(self._dims[c, o] for o in present if o != c)]
            if len(present) <= 1:
                # the colour of the interior mean (less noisy than a vote)
                mean_lab = lab_core.mean(0) if len(present) == 0 else lab_core[near == present[0]].mean(0)
                c = int(_sqdist(mean_lab[None, None], self._interior_lab).min(-1).argmin())
                parts = [(c, mask)]
            else:
                sub = di_u[inv2[sl]][:, :, present].argmin(-1)
                parts = []
                for j, c in enumerate(present):
                    lab_j, m = ndimage.label(mask & (sub == j))
                    for q in range(1, m + 1):
                        parts.append((c, lab_j == q))
                notes.append(f"a region holds {len(present)} colours ({', '.join(self.colors[c] for c in present)}): split by colour")
            for c, m in parts:
                full = np.zeros((H, W), bool)
                full[sl] = m
                # the same pixels in the same (row-major) order as indexing the whole image by ``full``
                area = float(clip(self._coverage(px, bg, self.colors[c])[sl][m], 0.0, 1.0).sum())  # cached per colour
                if area < _SPECK_FRACTION * self._min_area[self.colors[c]] * side2:
                    if area >= 2.0:
                        notes.append(f"dropped a {self.colors[c]} speck of {area:.1f} px (smaller than any object of that colour)")
                    if specks is not None and area >= _SPECK_MIN_PX * side2 / 4096.0:
                        specks.append(area)
                    continue
                out.append((c, full))
        return out, bg

    def _coverage(self, px: np.ndarray, bg: np.ndarray, color: str) -> np.ndarray:
        """Per-pixel coverage ``a`` of ``color`` over background ``bg``: the projection of
        ``p - bg`` on ``c - bg``, ``[H, W]`` float64, clipped to [-1, 1] (not at 0, so that noise
        averages out in sums)."""
        key = (id(px), color)
        if self._cov_cache.get("key") != (id(px), tuple(bg)):
            self._cov_cache = {"key": (id(px), tuple(bg))}
        if key not in self._cov_cache:
            c = np.asarray(self._fitter._rgb.get(color) or self.spec.rgb(color), dtype=np.float64) - bg
            if "diff" not in self._cov_cache:
                self._cov_cache["diff"] = px - bg
            self._cov_cache[key] = clip((self._cov_cache["diff"] @ c) / float(c @ c), -1.0, 1.0)
        return self._cov_cache[key]

    # -- objects ---------------------------------------------------------------------------------
    def _read_objects(self, px, bg, owner, regions, side, notes):
        """The objects of every region: ``(object, IoU, alternatives, main share, coverage,
        domain, box of the domain or None)`` each, in region order. Region ``k`` (1-based) reads the coverage of its colour
        over ``owner == k`` (int ``[H, W]``); a region whose best shape matches poorly
        (IoU < ``_SPLIT_IOU``) and that holds at least 1.6 of the colour's smallest object is also
        split by k-means into k = 2.. parts, and the k with the best mean IoU (by at least 0.05)
        is kept. Every region's fit, then every split's, is one :meth:`ShapeFitter.fit_many`."""
        items = []
        boxes = ndimage.find_objects(owner, max_label=len(regions))  # per region, the box of its domain
        for k, (color_idx, _) in enumerate(regions, start=1):
            color = self.colors[color_idx]
            domain = owner == k
            items.append((np.where(domain, self._coverage(px, bg, color), 0.0), color, domain))
        fits = self._fitter.fit_many([(a, c) for a, c, _ in items], side, boxes)
        splits = []  # (region, [parts of k = 2..kmax])
        for r, ((alpha, color, _), fit) in enumerate(zip(items, fits)):
            smallest = self._min_area[color] * side * side
            if fit is not None and fit[1] < _SPLIT_IOU and alpha.sum() >= 1.6 * smallest:
                kmax = min(int(alpha.sum() / smallest + 0.5), 12)
                clipped = clip(alpha, 0.0, 1.0)
                splits.append((r, [_kmeans_split(clipped, k) for k in range(2, kmax + 1)]))
        flat = [(p, items[r][1]) for r, ks in splits for parts in ks for p in parts]
        part_fits = iter(self._fitter.fit_many(flat, side) if flat else [])
        chosen = {}
        for r, ks in splits:
            alpha, color, _ = items[r]
            best = (fits[r][1], None)
            for parts in ks:
                pf = [next(part_fits) for _ in parts]
                if any(f is None for f in pf):
                    continue
                mean_iou = float(np.mean([f[1] for f in pf]))
                if mean_iou > best[0] + 0.05:
                    best = (mean_iou, (pf, parts))
            chosen[r] = (fits[r][1], best)
        out = []
        for r, ((alpha, color, domain), fit) in enumerate(zip(items, fits)):
            if fit is None:
                continue
            if r in chosen and chosen[r][1][1] is not None:
                iou, (mean_iou, (pf, parts)) = chosen[r]
                out += [(*f, _main_share(p), np.where(p > 0, alpha, 0.0), p > 0, None) for f, p in zip(pf, parts)]
                notes.append(f"split a {color} region into {len(pf)} touching objects (IoU {iou:.2f} -> {mean_iou:.2f})")
            else:
                out.append((*fit, _main_share(alpha, boxes[r]), alpha, domain, boxes[r]))
        return out


def _check_images(images) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 [N, H, W, 3], got {images.dtype} {list(images.shape)}")
    return images
