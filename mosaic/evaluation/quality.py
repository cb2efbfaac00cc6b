"""Match quality and abstention of the scene parser: synthetic bad renders, calibration of the
abstention thresholds on degraded ground-truth renders, and the quality summary of a scored set.

The parser (:class:`mosaic.evaluation.parser.SceneParser`) always finds the nearest allowed shape;
its match-quality measures (``iou``, ``fragments``, ``area``; :meth:`SceneParser._quality`) say how
near. With abstention on (the default) a read below a threshold is ``unreadable`` and counted wrong,
so a model is not credited for a blob. The thresholds (:data:`mosaic.evaluation.parser.ABSTAIN_THRESHOLDS`)
are set so that degraded renders of the truth (``mild`` and ``strong``,
:mod:`mosaic.evaluation.degrade`) are rarely rejected (:func:`calibrate_abstention` measures it),
while the failure modes seen in diffusion samples (:data:`BAD_KINDS`) are.
"""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from mosaic.scene import Scene, SceneObject
from mosaic.evaluation.check import ground_truth
from mosaic.labels import labels
from mosaic.sampling import sample_scene

#: Synthetic failure modes of generated images (what an undertrained model draws instead of a shape):
#: ``ellipse`` (an ellipse of the object's area, axes 1.8 : 1), ``peanut`` (two overlapping disks),
#: ``rhombus`` (a rhombus with diagonals 1.6 : 1), ``fragments`` (the object cut in two by a
#: background gap), ``ring`` (an annulus of the object's area, inner radius 0.55 of the outer).
BAD_KINDS = ("ellipse", "peanut", "rhombus", "fragments", "ring")


def _shape_area(obj: SceneObject, side: float) -> float:
    v = obj.vertices(side)
    r = obj.radius * side
    if v is None:
        return math.pi * r * r
    x = np.array([p[0] for p in v])
    y = np.array([p[1] for p in v])
    return float(0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _draw_object(d: ImageDraw.ImageDraw, obj: SceneObject, big: int, fill) -> None:
    v = obj.vertices(big)
    if v is None:
        r = obj.radius * big
        cx, cy = obj.center[0] * big, obj.center[1] * big
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    else:
        d.polygon(v, fill=fill)


def _rotated(points, cx, cy, deg):
    a = math.radians(deg)
    ca, sa = math.cos(a), math.sin(a)
    return [(cx + x * ca - y * sa, cy + x * sa + y * ca) for x, y in points]


def _draw_bad(d: ImageDraw.ImageDraw, obj: SceneObject, big: int, kind: str, bg, angle: float) -> None:
    cx, cy = obj.center[0] * big, obj.center[1] * big
    r = obj.radius * big
    area = _shape_area(obj, big)
    fill = tuple(obj.rgb)
    if kind == "ellipse":
        b = math.sqrt(area / (math.pi * 1.8))
        a = 1.8 * b
        pts = [(a * math.cos(t), b * math.sin(t)) for t in np.linspace(0, 2 * math.pi, 96, endpoint=False)]
        d.polygon(_rotated(pts, cx, cy, angle), fill=fill)
    elif kind == "peanut":
        # two disks of radius rho whose centres are 1.2 rho apart; total area ~ the object's
        rho = math.sqrt(area / (2 * math.pi - 0.52))  # lens overlap of two disks 1.2 rho apart ~ 0.52 rho^2 ... approx.
        for s in (-0.6, 0.6):
            (px, py), = _rotated([(s * rho, 0.0)], cx, cy, angle)
            d.ellipse((px - rho, py - rho, px + rho, py + rho), fill=fill)
    elif kind == "rhombus":
        q = math.sqrt(area / (2 * 1.6))  # half-diagonals 1.6 q and q: area 2 * 1.6 q^2
        pts = [(1.6 * q, 0.0), (0.0, q), (-1.6 * q, 0.0), (0.0, -q)]
        d.polygon(_rotated(pts, cx, cy, angle), fill=fill)
    elif kind == "fragments":
        _draw_object(d, obj, big, fill)
        w = max(0.3 * r, 2.0 * big / 64.0)  # a gap of at least 2 px of a 64 px image
        L = 2.5 * r
        pts = [(-w / 2, -L), (w / 2, -L), (w / 2, L), (-w / 2, L)]
        d.polygon(_rotated(pts, cx, cy, angle), fill=bg)
    elif kind == "ring":
        ro = math.sqrt(area / (math.pi * (1 - 0.55 ** 2)))  # an annulus of the object's area
        d.ellipse((cx - ro, cy - ro, cx + ro, cy + ro), fill=fill)
        ri = 0.55 * ro
        d.ellipse((cx - ri, cy - ri, cx + ri, cy + ri), fill=bg)
    else:
        raise ValueError(f"unknown bad kind {kind!r}: use one of {', '.join(BAD_KINDS)}")


def bad_render(scene: Scene, kind: str, index: int = 0, angle: float = 0.0, supersample: int = 4) -> np.ndarray:
    """Render ``scene`` with object ``index`` drawn as a failure mode ``kind`` of :data:`BAD_KINDS`
    (same colour, centre and area), the other objects as the renderer draws them.

    Args:
        scene: the scene (sizes and centres as fractions of ``scene.image_size``).
        kind: one of :data:`BAD_KINDS`.
        index: which object goes bad.
        angle: orientation of the bad shape (or of the fragments' gap), degrees.
        supersample: drawing resolution factor (box-averaged down, as the Pillow renderer does).
    Returns:
        uint8 ``[H, W, 3]``.
    Raises:
        ValueError: an unknown kind, or ``index`` out of range.
    """
    if kind not in BAD_KINDS:
        raise ValueError(f"unknown bad kind {kind!r}: use one of {', '.join(BAD_KINDS)}")
    if not 0 <= index < len(scene.objects):
        raise ValueError(f"index {index} is not an object of a scene with {len(scene.objects)}")
    side = scene.image_size
    big = side * supersample
    bg = tuple(int(v) for v in scene.background)
    img = Image.new("RGB", (big, big), bg)
    d = ImageDraw.Draw(img)
    for k, obj in enumerate(scene.objects):
        if k == index:
            _draw_bad(d, obj, big, kind, bg, angle)
        else:
            _draw_object(d, obj, big, tuple(obj.rgb))
    if supersample > 1:
        img = img.reduce(supersample)
    return np.asarray(img, dtype=np.uint8)


# -- reading with quality ------------------------------------------------------------------------
def read_images(evaluator, images: np.ndarray) -> tuple[list[dict], list | None]:
    """Predictions of any evaluator and, for one with ``read()`` (the scene parser), its full
    reads (:class:`mosaic.evaluation.parser.Parse`: quality measures, abstention, raw values).

    Args:
        evaluator: an :class:`~mosaic.evaluation.check.Evaluator`.
        images: uint8 ``[N, H, W, 3]``.
    Returns:
        ``(predictions, reads)``; ``reads`` is None for an evaluator without ``read()``.
    """
    fn = getattr(evaluator, "read", None)
    if fn is None:
        return evaluator.predict(images), None
    reads = fn(images)
    return [r.values for r in reads], reads


def below_threshold(read, thresholds: dict[str, float]) -> bool:
    """Whether any of a read's quality measures lies below its threshold (unreadable when abstention is on)."""
    return any(read.measures.get(m, 1.0) < t for m, t in thresholds.items())


def quality_summary(records: list[dict], reads: list, spec, evaluator=None) -> dict:
    """Match quality of a scored set of images, and what abstention changed.

    Args:
        records: one per image with ``concepts`` (intended values) and optional ``held_out``.
        reads: the parser's reads of the same images (:func:`read_images`).
        spec: the spec (its concepts).
        evaluator: the parser (for ``abstain`` and ``thresholds``); default: abstention on with
            :data:`mosaic.evaluation.parser.ABSTAIN_THRESHOLDS`.
    Returns:
        ``{"abstain", "thresholds", "abstained" (reads below a threshold: unreadable when
        abstention is on), "verdicts_changed" (images whose joint verdict abstention turns from
        right to wrong, or would with abstention off), "verdicts_changed_by_concept",
        "overall"/"seen"/"held_out": {"n", "quality" (mean of the per-image quality in [0, 1]),
        "iou", "fragments", "area" (means of the measures), "abstained", "abstained_fraction",
        "verdicts_changed", "joint_accuracy_without_abstention", "accuracy_without_abstention" (concept ->
        fraction read right before abstention)}}``.
    """
    if len(records) != len(reads):
        raise ValueError(f"quality_summary(): {len(records)} records but {len(reads)} reads")
    thresholds, abstain = quality_settings(evaluator)
    concepts = list(spec.concepts)
    rows = []
    for r, q in zip(records, reads):
        raw = q.raw_values if q.raw_values is not None else q.values
        rows.append({"held_out": bool(r.get("held_out") or False), "q": q.quality, "m": q.measures, "below": below_threshold(q, thresholds),
                     "right": _right(raw, r["concepts"], concepts)})
    return _summarize(rows, concepts, thresholds, abstain)


def quality_settings(evaluator) -> tuple[dict, bool]:
    from mosaic.evaluation.parser import ABSTAIN_THRESHOLDS

    return dict(getattr(evaluator, "thresholds", None) or ABSTAIN_THRESHOLDS), bool(getattr(evaluator, "abstain", True))


def _right(raw: dict, intended: dict, concepts: list[str]) -> dict:
    return {c: raw.get(c) is not None and str(raw.get(c)) == str(intended.get(c)) for c in concepts}


def quality_from_predictions(rows: list[dict], spec, evaluator=None) -> dict | None:
    """:func:`quality_summary` derived again from the rows of a ``predictions.jsonl``
    (:func:`mosaic.evaluation.folder.prediction_rows` with the parser's reads: ``quality``, ``measures``
    rounded to 4 decimals, ``below``, ``raw``), so the means agree with the recorded ones to about 1e-4
    and every count exactly. None when no row carries ``raw`` (rows of an older mosaic, or of an
    evaluator without quality).

    Raises:
        ValueError: some rows carry the fields and others do not, or a row's fields are malformed.
    """
    have = [isinstance(r.get("raw"), dict) for r in rows]
    if not any(have):
        return None
    if not all(have):
        raise ValueError(f"{have.count(False)} of {len(rows)} rows carry no raw read (the values before abstention)")
    thresholds, abstain = quality_settings(evaluator)
    concepts = list(spec.concepts)
    out = []
    for k, r in enumerate(rows):
        q, m, below = r.get("quality"), r.get("measures"), r.get("below")
        if not (isinstance(q, (int, float)) and isinstance(m, dict) and isinstance(below, bool) and isinstance(r.get("intended"), dict)):
            raise ValueError(f"row {k + 1} lacks its match quality, measures, below flag or intended values")
        out.append({"held_out": r.get("held_out") is True, "q": float(q), "m": m, "below": below,
                    "right": _right(r["raw"], r["intended"], concepts)})
    return _summarize(out, concepts, thresholds, abstain)


def _summarize(rows: list[dict], concepts: list[str], thresholds: dict, abstain: bool) -> dict:
    for x in rows:
        x["raw_joint"] = all(x["right"].values())
    out: dict = {"abstain": abstain, "thresholds": thresholds}
    for name, keep in (("overall", lambda x: True), ("seen", lambda x: not x["held_out"]), ("held_out", lambda x: x["held_out"])):
        sel = [x for x in rows if keep(x)]
        n = len(sel)
        g: dict = {"n": n}
        if n:
            g["quality"] = float(np.mean([x["q"] for x in sel]))
            for m in ("iou", "fragments", "area"):
                g[m] = float(np.mean([x["m"].get(m, 1.0) for x in sel]))
            g["abstained"] = sum(x["below"] for x in sel)
            g["abstained_fraction"] = g["abstained"] / n
            g["verdicts_changed"] = sum(x["below"] and x["raw_joint"] for x in sel)
            g["joint_accuracy_without_abstention"] = float(np.mean([x["raw_joint"] for x in sel]))
            g["accuracy_without_abstention"] = {c: float(np.mean([x["right"][c] for x in sel])) for c in concepts}
        else:
            g.update({k: None for k in ("quality", "iou", "fragments", "area", "abstained", "abstained_fraction",
                                          "verdicts_changed", "joint_accuracy_without_abstention", "accuracy_without_abstention")})
        out[name] = g
    out["abstained"] = out["overall"]["abstained"] or 0
    out["verdicts_changed"] = out["overall"]["verdicts_changed"] or 0
    out["verdicts_changed_by_concept"] = {c: sum(x["below"] and x["right"][c] for x in rows) for c in concepts}
    return out


# -- calibration ---------------------------------------------------------------------------------
def calibrate_abstention(spec, n: int = 1000, degradations: tuple[str, ...] = ("mild", "strong"), target: float = 0.005,
                         bad_n: int = 100, thresholds: dict[str, float] | None = None, batch_size: int = 200,
                         on_progress=None) -> dict:
    """Measure the abstention thresholds on a spec: how many degraded ground-truth renders they
    reject (should be at most ``target``), how many synthetic bad renders they reject, and the
    thresholds the degraded renders alone would suggest.

    Ground truth: ``n`` renders of the ``evaluator_check`` split (the same images as
    :func:`mosaic.evaluation.check_evaluator`), each degraded by every name of ``degradations``
    (seeded by the batch start). Bad renders: the first ``bad_n`` scenes of that split with their
    first object drawn as each kind of :data:`BAD_KINDS` (random orientation, seed 0), clean and
    ``mild``.

    Returns:
        ``{"spec", "n", "target", "thresholds" (the ones measured), "degraded": {name: {"n",
        "rejected", "rejected_fraction", "quantiles": {measure: {"0.1%", "0.5%", "1%", "min"}},
        "accuracy_without_abstention"}}, "suggested" (per measure: the ``target / 3`` quantile of
        the degraded renders pooled, so that together they reject at most about ``target``),
        "bad": {kind: {"n", "rejected_fraction", "credited_without_abstention" (raw joint read
        right), "credited_with_abstention"}}}``.
    """
    from mosaic.evaluation.degrade import degrade
    from mosaic.evaluation.parser import ABSTAIN_THRESHOLDS, SceneParser

    thr = {**ABSTAIN_THRESHOLDS, **(thresholds or {})}
    parser = SceneParser(spec, abstain=False)
    concepts = list(spec.concepts)
    out: dict = {"spec": spec.name, "n": n, "target": target, "thresholds": thr, "degraded": {}, "bad": {}}
    pooled: dict[str, list[float]] = {m: [] for m in thr}
    total = n * len(degradations) + bad_n * len(BAD_KINDS) * 2
    done = 0
    for deg in degradations:
        meas, rej, right = [], 0, 0
        for a in range(0, n, batch_size):
            images, recs = ground_truth(spec, a, min(n, a + batch_size))
            images = degrade(images, deg, seed=a)
            for im, r in zip(images, recs):
                q = parser.parse(im)
                meas.append(q.measures)
                rej += below_threshold(q, thr)
                right += all(str(q.raw_values.get(c)) == str(r["concepts"][c]) for c in concepts)
            done += len(recs)
            if on_progress:
                on_progress(done, total)
        qs = {}
        for m in thr:
            v = np.array([x[m] for x in meas])
            pooled[m] += list(v)
            qs[m] = {"min": float(v.min()), "0.1%": float(np.quantile(v, 0.001)), "0.5%": float(np.quantile(v, 0.005)),
                     "1%": float(np.quantile(v, 0.01))}
        out["degraded"][deg] = {"n": n, "rejected": rej, "rejected_fraction": rej / n, "quantiles": qs,
                                "accuracy_without_abstention": right / n}
    out["suggested"] = {m: float(np.quantile(np.array(v), target / 3)) for m, v in pooled.items()} if n else {}
    rng = np.random.default_rng(0)
    for kind in BAD_KINDS:
        rej = cred = cred_abst = k = 0
        for i in range(bad_n):
            scene, _ = sample_scene(spec, "evaluator_check", i)
            vals = _intended(scene, spec)
            im = bad_render(scene, kind, 0, angle=float(rng.uniform(0, 180)), supersample=spec.image.supersample)
            for x in (im, degrade(im[None], "mild", seed=i)[0]):
                q = parser.parse(x)
                b = below_threshold(q, thr)
                ok = all(str(q.raw_values.get(c)) == str(vals[c]) for c in concepts)
                rej += b
                cred += ok
                cred_abst += ok and not b
                k += 1
            done += 2
            if on_progress:
                on_progress(done, total)
        out["bad"][kind] = {"n": k, "rejected_fraction": rej / k if k else None,
                            "credited_without_abstention": cred / k if k else None,
                            "credited_with_abstention": cred_abst / k if k else None}
    return out


def _intended(scene: Scene, spec) -> dict:
    return labels(scene, spec)
