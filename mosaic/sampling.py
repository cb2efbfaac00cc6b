"""``(spec, split, index) -> Scene``: deterministic scene sampling with a bounded layout search.

All randomness of a sample comes from ``numpy.random.SeedSequence(entropy=spec.seed,
spawn_key=(split_id, index))``, so a dataset is the same bytes with any number of workers, in
any order, and on resume (DESIGN.md, "Determinism"). numpy's PCG64 stream is stable for a given
numpy build; the manifest records the numpy version.
"""

from __future__ import annotations

import math

import numpy as np

from mosaic.errors import LayoutError
from mosaic.scene import COORD_DECIMALS, Scene, SceneObject, angle_deg, relation
from mosaic.scene3d import Scene3D, SolidObject, camera_relation_of, preset_view
from mosaic.spec import Rule, Spec, interchangeable
from mosaic.splits import SPLIT_IDS, combination_for, marginal_quotas, value_for  # noqa: F401  (marginal_quotas: re-exported)
from renderers.shaded import annotate_boxes, prime_masks, visibility


def rng_for(spec: Spec, split: str, index: int) -> np.random.Generator:
    """The generator of sample ``index`` of ``split`` (PCG64 seeded by ``SeedSequence``)."""
    if split not in SPLIT_IDS:
        raise KeyError(f"unknown split {split!r}; known: {sorted(SPLIT_IDS)}")
    return np.random.default_rng(np.random.SeedSequence(entropy=spec.seed, spawn_key=(SPLIT_IDS[split], int(index))))


#: Splits outside a dataset: every concept uniform over its whole domain, held-out combinations
#: included (an evaluator is trained and checked on all of them).
FULL_GRID_SPLITS = ("preview_all", "evaluator_train", "evaluator_check")


def sample_values(spec: Spec, split: str, index: int, rng: np.random.Generator) -> dict:
    """The concept values of sample ``index`` of ``split``.

    Dataset splits use exact quotas: with a holdout the grid concepts come from the split's
    per-combination quotas (:func:`mosaic.splits.combination_for`), and every other concept from
    its own per-value quotas (:func:`mosaic.splits.value_for`), so a split's marginal counts match the
    distribution exactly (as MOSAIC's hard-coded skew lists did) and every value with a non-zero
    quota occurs. ``train`` and ``val`` follow each concept's distribution (concept imbalance);
    test splits are uniform unless ``splits.balanced_tests`` is false. Other splits (previews,
    evaluator renders, :data:`FULL_GRID_SPLITS`) draw every concept uniformly over the full grid,
    held-out combinations included.
    """
    if split in FULL_GRID_SPLITS or split not in spec.split_sizes():
        return {name: c.domain[int(rng.integers(len(c.domain)))] for name, c in spec.concepts.items()}
    fixed = {}
    if spec.holdout is not None:
        fixed = dict(zip(spec.holdout.concepts, combination_for(spec, split, index)))
    return {name: fixed[name] if name in fixed else value_for(spec, split, name, index) for name in spec.concepts}


def _pick(rule: Rule, values: dict, rng: np.random.Generator):
    # Rule.kind's order (the first field set), read directly: this runs several times per object
    if rule.value is not None:
        return rule.value
    if rule.concept is not None:
        return values[rule.concept]
    if rule.choice is not None:
        return rule.choice[int(rng.integers(len(rule.choice)))]
    lo, hi = rule.range
    return float(rng.uniform(lo, hi))


def build_objects(spec: Spec, values: dict, rng: np.random.Generator) -> list[SceneObject]:
    """Instantiate every template's objects (attributes only; centres are set by :func:`place`)."""
    objs = []
    palette = spec.palette  # built once per scene, not once per object (spec.rgb rebuilds it)
    for t in spec.templates:
        if t.repeat.kind == "range":
            lo, hi = t.repeat.range
            n = int(rng.integers(int(lo), int(hi) + 1))
        else:
            n = int(_pick(t.repeat, values, rng))
        for _ in range(n):
            shape = _pick(t.shape, values, rng)
            color = _pick(t.color, values, rng)
            size = round(spec.size_fraction(_pick(t.size, values, rng)), COORD_DECIMALS)
            rotation = round(float(_pick(t.rotation, values, rng)) % 360.0, 3)
            if spec.image.renderer == "shaded":  # a solid: its material is drawn last (flat specs draw nothing more)
                material = str(_pick(t.material, values, rng)) if t.material is not None else None  # None: rubber, unnamed
                objs.append(SolidObject(shape, color, palette[color], size, (0.0, 0.0), rotation, t.name, material=material))
            else:
                objs.append(SceneObject(shape, color, palette[color], size, (0.0, 0.0), rotation, t.name))
    return objs


#: The flat image-plane relation read as the camera relations are (:func:`_maybe_fits`): unit vectors "right" and
#: "behind" in a frame with y up (the centres' y flipped), and the names of (j right of, left of, behind, in front of i).
_AXES = {relation: (1.0, 0.0, 0.0, -1.0, ("left_of", "right_of", "above", "below"))}
_TOL = 1e-5  # > the rounding of a proposal to COORD_DECIMALS (5e-6 per coordinate) plus float error


def _maybe_fits(objs: list, i: int, u: np.ndarray, placed: list[int], gap: float, rels: list, axes, order_pairs: list,
                eps: float) -> np.ndarray:
    """bool ``[k]``: which of ``k`` proposals (unrounded, ``u = [x0, y0, x1, y1, ...]``) for object ``i`` may pass
    :func:`place`'s ``fits``: each test of ``fits`` loosened by :data:`_TOL`, so no proposal ``fits`` accepts after
    rounding is rejected here (a relation read by a function without ``axes`` is not screened)."""
    x, y = u[0::2], u[1::2]
    r = objs[i].radius
    ok = (x >= r + gap - _TOL) & (x <= 1 - r - gap + _TOL) & (y >= r + gap - _TOL) & (y <= 1 - r - gap + _TOL)
    for j in placed:
        q = objs[j]
        lim = max(r + q.radius + gap - _TOL, 0.0)
        dx, dy = x - q.center[0], y - q.center[1]
        ok &= dx * dx + dy * dy >= lim * lim
    if axes is not None:
        r0, r1, b0, b1, names = axes
        for s, rv, ob, margin in rels:
            if not ((s == i and ob in placed) or (ob == i and s in placed)) or rv not in names:
                continue
            # (b - a) with y flipped, as the relation functions read it; a = the subject
            if s == i:
                dx, dy = objs[ob].center[0] - x, y - objs[ob].center[1]
            else:
                dx, dy = x - objs[s].center[0], objs[s].center[1] - y
            dr, db = dx * r0 + dy * r1, dx * b0 + dy * b1
            k = names.index(rv)
            main, other = (dr, db) if k < 2 else (db, dr)
            sign = main if k % 2 == 0 else -main
            ok &= (sign > -2 * _TOL) & (np.abs(main) >= np.abs(other) + (margin - 4 * _TOL))
    for a, b in order_pairs:
        if a == i and b in placed:
            ok &= x + eps <= objs[b].center[0] + _TOL
        elif b == i and a in placed:
            ok &= objs[a].center[0] + eps <= x + _TOL
    return ok


def place(spec: Spec, objs: list[SceneObject], values: dict, rng: np.random.Generator, where: str = "", relate=relation) -> None:
    """Set the centres of ``objs`` in place: inside the frame, disks ``layout.min_gap`` apart,
    relations and positions honoured, look-alike templates left to right.

    The search is bounded: ``layout.max_tries`` proposals per object and ``layout.max_restarts``
    restarts of the whole scene. ``relate(a, b, margin)`` reads a relation (the flat image-plane
    :func:`~mosaic.scene.relation`; a camera's frame for 3-D scenes). Raises :class:`LayoutError` naming the object that could not be
    placed and the spec fields that would fix it.
    """
    gap = spec.layout.min_gap
    name_to_idx: dict[str, int] = {}
    for i, o in enumerate(objs):
        name_to_idx.setdefault(o.template, i)

    pos_of: dict[int, tuple[int, tuple[float, float], tuple[float, float]]] = {}  # target -> (ref, (lo, hi) deg, (dmin, dmax))
    for p in spec.positions:
        bins = spec.concepts[p.concept].angle_bins
        k = bins.names().index(values[p.concept])
        lo, hi = bins.bins()[k]
        t, r = name_to_idx[p.target], name_to_idx[p.reference]
        dmin = objs[t].radius + objs[r].radius + gap
        dist = p.distance or (dmin, 0.5)
        pos_of[t] = (r, (lo + bins.margin, hi - bins.margin), (max(dist[0], 0.0), dist[1]))

    rels: list[tuple[int, str, int, float]] = []
    for rel in spec.relations:
        rv = values[rel.relation.concept] if rel.relation.kind == "concept" else rel.relation.value
        rels.append((name_to_idx[rel.subject], rv, name_to_idx[rel.object], rel.margin))

    # look-alike single objects must read left to right in template order
    order_pairs: list[tuple[int, int]] = []
    singles = [t for t in spec.objects if t.repeat.kind == "value" and t.repeat.value == 1 and t.name in name_to_idx]
    for a in range(len(singles)):
        for b in range(a + 1, len(singles)):
            if interchangeable(spec, singles[a], singles[b]):
                order_pairs.append((name_to_idx[singles[a].name], name_to_idx[singles[b].name]))

    # references before their targets
    order = [i for i in range(len(objs)) if i not in pos_of]
    pending = [i for i in range(len(objs)) if i in pos_of]
    while pending:
        ready = [i for i in pending if pos_of[i][0] in order]
        if not ready:
            raise LayoutError(f"positions form a cycle among {[objs[i].template for i in pending]}: make one object the reference of the others")
        order += ready
        pending = [i for i in pending if i not in ready]

    eps = 1.0 / spec.image.size
    failures = [0] * len(objs)

    def fits(i: int, c: tuple[float, float], placed: list[int]) -> bool:
        o = objs[i]
        r = o.radius
        if not (r + gap <= c[0] <= 1 - r - gap and r + gap <= c[1] <= 1 - r - gap):
            return False
        for j in placed:
            q = objs[j]
            if math.dist(c, q.center) < r + q.radius + gap:
                return False
        o.center = c
        for s, rv, ob, margin in rels:
            if (s == i and ob in placed) or (ob == i and s in placed):
                if relate(objs[s], objs[ob], margin) != rv:
                    return False
        for a, b in order_pairs:
            if (a == i and b in placed and not objs[a].center[0] + eps <= objs[b].center[0]) or (
                b == i and a in placed and not objs[a].center[0] + eps <= objs[b].center[0]
            ):
                return False
        if i in pos_of:
            ref, (alo, ahi), _ = pos_of[i]
            a = angle_deg(objs[ref], o)
            if not (alo <= a < ahi or alo <= a + 360.0 < ahi):
                return False
        return True

    axes = _AXES.get(relate) or getattr(relate, "axes", None)
    bits = rng.bit_generator
    max_tries = spec.layout.max_tries

    def search(i: int, placed: list[int], lo_c: float, hi_c: float, k: int) -> bool:
        """Tries 2..: the proposals the scalar loop would draw, ``k`` at a time (the same doubles), screened in
        arrays by :func:`_maybe_fits` (never rejects a proposal :func:`fits` takes); the survivors go through
        ``fits`` in order. The generator is left where the scalar loop leaves it: after the accepted proposal,
        or after all of them."""
        left = max_tries - 1
        while left:
            k = min(k, left)
            state = bits.state
            u = rng.uniform(lo_c, hi_c, 2 * k)
            for m in np.flatnonzero(_maybe_fits(objs, i, u, placed, gap, rels, axes, order_pairs, eps)).tolist():
                c = (round(float(u[2 * m]), COORD_DECIMALS), round(float(u[2 * m + 1]), COORD_DECIMALS))
                if fits(i, c, placed):
                    if m + 1 < k:  # rewind to just after proposal m
                        bits.state = state
                        rng.uniform(lo_c, hi_c, 2 * (m + 1))
                    return True
            left -= k
            k = left
        return False

    for _restart in range(spec.layout.max_restarts):
        placed: list[int] = []
        for i in order:
            o = objs[i]
            lo_c, hi_c = o.radius + gap, 1 - o.radius - gap
            if i not in pos_of:  # the first proposal as one scalar pair (most objects fit at once), then in arrays
                c = (round(rng.uniform(lo_c, hi_c), COORD_DECIMALS), round(rng.uniform(lo_c, hi_c), COORD_DECIMALS))
                if fits(i, c, placed) or (max_tries > 1 and search(i, placed, lo_c, hi_c, 15)):
                    placed.append(i)
                    continue
                failures[i] += 1
                break
            ref, (alo, ahi), (dmin, dmax) = pos_of[i]
            for _try in range(max_tries):
                a = math.radians(rng.uniform(alo, ahi))
                d = rng.uniform(dmin, max(dmin, dmax))
                rc = objs[ref].center
                c = (round(rc[0] + d * math.cos(a), COORD_DECIMALS), round(rc[1] - d * math.sin(a), COORD_DECIMALS))
                if fits(i, c, placed):
                    placed.append(i)
                    break
            else:
                failures[i] += 1
                break
        else:
            return
    worst = max(range(len(objs)), key=lambda i: failures[i])
    o = objs[worst]
    path = next(f"{kind}[{k}]" for kind, lst in (("objects", spec.objects), ("distractors", spec.distractors)) for k, t in enumerate(lst) if t.name == o.template)
    n_same = sum(1 for q in objs if q.template == o.template)
    raise LayoutError(
        f"could not lay out {len(objs)} objects{where}: object {o.template!r} ({path}, size {o.size:g}, {n_same} in the scene) "
        f"found no free place in {spec.layout.max_tries} tries per object x {spec.layout.max_restarts} restarts. "
        f"The scene is too crowded or its relations/positions conflict: lower {path}.repeat or {path}.size or "
        "layout.min_gap, loosen relations[].margin or positions[].distance, or raise layout.max_tries"
    )


def solid_scene(spec: Spec, values: dict, rng: np.random.Generator, where: str = "") -> Scene3D:
    """The 3-D scene of given concept values (:func:`_solid_steps`, run to the end)."""
    steps = _solid_steps(spec, values, rng, where)
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


def _solid_steps(spec: Spec, values: dict, rng: np.random.Generator, where: str = ""):
    """A generator: the layout tries of :func:`solid_scene`, each yielded before its occlusion check
    (which reads the scene's instance mask, drawn then unless a driver drew it meanwhile:
    :func:`renderers.shaded.prime_masks`); it returns the scene kept.

    The 3-D scene of given concept values (``image.renderer: shaded``): a view from the camera
    preset (jittered by ``rng``), objects standing on the ground plane laid out by :func:`place`
    (footprint disks ``layout.min_gap`` apart, so solids never intersect; relations read in the
    camera's frame), then CLEVR's occlusion check on the instance mask: every object keeps at least
    ``layout.min_visible_fraction`` of its silhouette (the spec's objects ``layout.objects_min_visible_fraction``
    where set) and ``layout.min_visible_pixels`` pixels, or
    the whole scene is drawn and laid out again, at most ``layout.visibility_retries`` times.
    Mask-derived ground truth (visible fraction, box, pixel coordinates) is filled in.

    Raises:
        LayoutError: no layout passed the occlusion check (the message names the object most often
            hidden and the fields that would fix it), or :func:`place` failed.
    """

    img, lay = spec.image, spec.layout
    view = preset_view(img.camera or "mosaic", rng, img.camera_jitter, img.light_jitter)
    min_frac = 0.25 if lay.min_visible_fraction is None else lay.min_visible_fraction
    # the labelled objects' bound (layout.objects_min_visible_fraction), the distractors' min_frac
    labelled = {t.name for t in spec.objects}
    obj_frac = min_frac if lay.objects_min_visible_fraction is None else lay.objects_min_visible_fraction
    min_px = 8 if lay.min_visible_pixels is None else lay.min_visible_pixels
    tries = 50 if lay.visibility_retries is None else lay.visibility_retries

    relate = camera_relation_of(view)

    hidden_count: dict[str, int] = {}
    for _ in range(tries):
        objs = build_objects(spec, values, rng)
        place(spec, objs, values, rng, where, relate)
        scene = Scene3D(img.size, spec.background_rgb(), objs, view)
        yield scene  # a driver may draw the masks of several samples' layouts at once (sample_scenes)
        mask = visibility(scene)
        hidden = [o for o in objs if o.visible_fraction < (obj_frac if o.template in labelled else min_frac) or o.visible_pixels < min_px]
        if not hidden:
            annotate_boxes(scene, mask)  # boxes and pixel coordinates: only of the layout kept
            return scene
        for o in hidden:
            hidden_count[o.template] = hidden_count.get(o.template, 0) + 1
    worst = max(hidden_count, key=hidden_count.get)
    raise LayoutError(
        f"could not lay out the 3-D scene{where}: in {tries} layouts (layout.visibility_retries) some object stayed hidden "
        f"behind others or outside the frame, most often {worst!r} ({hidden_count[worst]} times), below "
        + (f"layout.objects_min_visible_fraction {obj_frac:g}" if worst in labelled and lay.objects_min_visible_fraction is not None
           else f"layout.min_visible_fraction {min_frac:g}")
        + f" of its silhouette or layout.min_visible_pixels {min_px}. Fix: fewer or smaller objects, a larger "
        "image.size, lower layout.min_visible_fraction / objects_min_visible_fraction / min_visible_pixels, raise layout.visibility_retries, or use "
        "image.camera: mosaic (top-down, little occlusion)"
    )


def scene_from_values(spec: Spec, values: dict, rng: np.random.Generator, where: str = "") -> Scene:
    """Build and lay out the scene of given concept values."""
    if spec.image.renderer == "shaded":
        return solid_scene(spec, values, rng, where)
    objs = build_objects(spec, values, rng)
    place(spec, objs, values, rng, where)
    return Scene(spec.image.size, spec.background_rgb(), objs)


def sample_scene(spec: Spec, split: str, index: int) -> tuple[Scene, dict]:
    """Sample ``index`` of ``split``: ``(scene, sampled concept values)``. Deterministic.

    Raises:
        LayoutError: the bounded layout search failed (the message names the spec fields).
    """
    ahead = _AHEAD.get("samples")
    if ahead is not None and _AHEAD.get("spec") is spec and _AHEAD.get("split") == split and index in ahead:
        out = ahead.pop(index)  # sampled ahead by prefetch_scenes: the same scene, laid out in a batch
        if isinstance(out, LayoutError):
            raise out
        return out
    rng = rng_for(spec, split, index)
    values = sample_values(spec, split, index, rng)
    return scene_from_values(spec, values, rng, f" (split {split}, index {index})"), values


#: scenes sampled ahead (:func:`prefetch_scenes`) for one spec object and split, taken once each by
#: :func:`sample_scene`
_AHEAD: dict = {}


def sample_scenes(spec: Spec, split: str, indices) -> list:
    """:func:`sample_scene` of each index (``(scene, values)``, or the :class:`LayoutError` it raises), the
    same scenes; for a shaded spec the occlusion checks of the samples' layout tries are drawn together,
    one batched instance-mask pass a round (:func:`renderers.shaded.prime_masks`)."""
    if spec.image.renderer != "shaded":
        out = []
        for i in indices:
            try:
                out.append(sample_scene(spec, split, i))
            except LayoutError as e:
                out.append(e)
        return out
    res: dict = {}
    steps: dict = {}
    cands: dict = {}

    def advance(i):
        gen, values = steps[i]
        try:
            cands[i] = next(gen)
        except StopIteration as done:
            res[i] = (done.value, values)
            cands.pop(i, None)
        except LayoutError as e:
            res[i] = e
            cands.pop(i, None)

    for i in indices:
        rng = rng_for(spec, split, i)
        values = sample_values(spec, split, i, rng)
        steps[i] = (_solid_steps(spec, values, rng, f" (split {split}, index {i})"), values)
        advance(i)
    while cands:
        prime_masks(list(cands.values()))
        for i in list(cands):
            advance(i)
    return [res[i] for i in indices]


def prefetch_scenes(spec: Spec, split: str, indices) -> None:
    """Sample ``indices`` of ``split`` together (:func:`sample_scenes`) for the next :func:`sample_scene`
    calls of this spec object and split (each taken once; any earlier prefetch is dropped). A no-op for
    a flat spec."""
    _AHEAD.clear()
    if spec.image.renderer == "shaded":
        indices = list(indices)
        _AHEAD.update(spec=spec, split=split, samples=dict(zip(indices, sample_scenes(spec, split, indices))))
