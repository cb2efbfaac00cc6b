"""The evaluator interface and an evaluator's own accuracy: thresholds, and the check on fresh
ground-truth renders of the ``evaluator_check`` split (a seed distinct from every dataset split)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from mosaic.errors import MosaicError
from mosaic.spec import Spec
from mosaic.evaluation.metrics import score
from mosaic.holdout import is_held_out
from mosaic.labels import labels
from mosaic.sampling import sample_scene
from renderers import backend_of, get_renderer

#: Minimum per-concept accuracy on clean ground-truth renders for an evaluator to be trusted.
THRESHOLDS = {"parser": 0.995, "learned": 0.99}
CHECK_SPLIT = "evaluator_check"


@runtime_checkable
class Evaluator(Protocol):
    """What every evaluator offers: a ``name`` and ``predict(images uint8 [N, H, W, 3]) ->
    [{concept: value | None}]``; optionally ``explain(images) -> [[reason, ...]]``."""

    name: str

    def predict(self, images: np.ndarray) -> list[dict]: ...


def threshold_of(evaluator: Evaluator) -> float:
    """The accuracy threshold of an evaluator (99.5 % for the parser, 99 % for learned ones)."""
    return THRESHOLDS["parser"] if evaluator.name == "parser" else THRESHOLDS["learned"]


def ground_truth(spec: Spec, start: int, stop: int, split: str = CHECK_SPLIT) -> tuple[np.ndarray, list[dict]]:
    """Renders of samples ``start..stop-1`` of ``split`` and their records.

    Returns:
        images uint8 ``[n, H, W, 3]``; records ``[{"index", "concepts", "held_out"}]``.
    """

    scenes, records = [], []
    for i in range(start, stop):
        scene, _ = sample_scene(spec, split, i)
        vals = labels(scene, spec)
        scenes.append(scene)
        records.append({"index": i, "concepts": vals, "held_out": bool(is_held_out(spec, vals))})

    images, _ = get_renderer(backend_of(spec), supersample=spec.image.supersample).render(scenes)
    return images, records


def explanations(evaluator: Evaluator, images: np.ndarray) -> list[list[str]]:
    """The evaluator's reasons per image (uint8 ``[N, H, W, 3]``) when it has ``explain``, else
    an empty list per image."""
    fn = getattr(evaluator, "explain", None)
    return fn(images) if fn is not None else [[] for _ in range(len(images))]


def confusion_summary(records: list[dict], predictions: list[dict], spec: Spec, top: int = 5) -> dict:
    """Per concept, the ``top`` most frequent errors ``[{"intended", "read", "count"}]`` (read None =
    unreadable)."""
    out = {}
    for c in spec.concepts:
        cnt = Counter()
        for r, p in zip(records, predictions):
            t, v = r["concepts"][c], p.get(c)
            if v != t:
                cnt[(str(t), "unreadable" if v is None else str(v))] += 1
        out[c] = [{"intended": a, "read": b, "count": k} for (a, b), k in cnt.most_common(top)]
    return out


def check_evaluator(spec: Spec, evaluator: Evaluator, n: int = 2000, degrade: str | None = "none",
                    batch_size: int = 256, examples: int = 8,
                    on_progress: Callable[[int, int], None] | None = None) -> dict:
    """Accuracy of an evaluator on ``n`` fresh ground-truth renders of the ``evaluator_check`` split.

    The split draws every concept uniformly over the whole combination grid (held-out
    combinations included) from its own seed, distinct from every dataset split. With
    ``degrade`` (``mild``, ``strong``: :data:`mosaic.evaluation.degrade.DEGRADATIONS`) the renders
    are blurred, noised and colour-shifted first (seeded by the batch start, so deterministic).

    Returns:
        ``{"evaluator", "spec", "spec_fingerprint", "split", "n", "degradation", "accuracy"
        (concept -> fraction), "joint_accuracy", "unreadable", "seen"/"held_out" (the same split by
        combination), "confusion" (:func:`confusion_summary`), "failures" (a few examples with the
        evaluator's reasons), "threshold", "passed", "below_threshold" (concepts under it),
        "seconds", "images_per_second", "abstained" (the parser's reads made unreadable by
        abstention; None for other evaluators)}``.
    Raises:
        MosaicError: ``n`` < 1 or an unknown degradation.
    """
    from mosaic.evaluation.degrade import degrade as apply_degrade
    from mosaic.evaluation.degrade import get_degradation

    if n < 1:
        raise MosaicError(f"--n {n}: the check needs at least 1 image (2000 is the default)")
    deg = get_degradation(degrade)
    deg_name = degrade if isinstance(degrade, str) else ("none" if degrade is None else "custom")
    records, preds, failures = [], [], []
    t_eval, abstained = 0.0, None
    for a in range(0, n, batch_size):
        b = min(n, a + batch_size)
        images, recs = ground_truth(spec, a, b)
        if deg_name != "none":
            images = apply_degrade(images, deg, seed=a)
        t = time.perf_counter()
        read = getattr(evaluator, "read", None)  # the parser's full reads (abstention), as quality.read_images
        reads = read(images) if read is not None else None
        p = [r.values for r in reads] if reads is not None else evaluator.predict(images)
        t_eval += time.perf_counter() - t
        if reads is not None:
            abstained = (abstained or 0) + sum(r.abstained for r in reads)
        wrong = [k for k, (r, q) in enumerate(zip(recs, p)) if any(q.get(c) != r["concepts"][c] for c in spec.concepts)]
        if wrong and len(failures) < examples:
            take = wrong[: examples - len(failures)]
            for k, why in zip(take, explanations(evaluator, images[take])):
                failures.append({"index": recs[k]["index"], "intended": recs[k]["concepts"], "read": p[k], "reasons": why})
        records += recs
        preds += p
        if on_progress:
            on_progress(b, n)
    m = score(records, preds, spec)
    thr = threshold_of(evaluator)
    below = [c for c, v in m["overall"]["accuracy"].items() if v is None or v < thr]
    return {
        "evaluator": evaluator.name, "spec": spec.name, "spec_fingerprint": spec.fingerprint(), "split": CHECK_SPLIT,
        "n": n, "degradation": {"name": deg_name, **deg.model_dump()},
        "accuracy": m["overall"]["accuracy"], "joint_accuracy": m["overall"]["joint_accuracy"],
        "unreadable": m["overall"]["unreadable"],
        "seen": {k: m["seen"].get(k) for k in ("n", "accuracy", "joint_accuracy")},
        "held_out": {k: m["held_out"].get(k) for k in ("n", "accuracy", "joint_accuracy")},
        "confusion": confusion_summary(records, preds, spec), "failures": failures,
        "threshold": thr, "passed": not below, "below_threshold": below, "abstained": abstained,
        "seconds": round(t_eval, 3), "images_per_second": round(n / t_eval, 1) if t_eval > 0 else None,
    }


def evaluator_accuracy(spec: Spec, evaluator: Evaluator, n: int = 500) -> dict:
    """The evaluator's accuracy report for a results report, always measured here: a fresh check
    of ``n`` ground-truth renders. A learned evaluator's saved ``report.json`` is a claim a file
    makes (an edited one could say 100 %), so it is never what trust rests on; when it states an
    accuracy for this spec, the result carries it as ``saved_accuracy`` and ``saved_disagrees``
    (a concept more than 5 points away from the fresh measurement)."""
    fresh = {**check_evaluator(spec, evaluator, n=n), "source": "fresh check"}
    saved = getattr(evaluator, "report", None) or {}
    clean = saved.get("check_clean") if isinstance(saved, dict) else None
    if isinstance(clean, dict) and clean.get("spec_fingerprint") == spec.fingerprint() and isinstance(clean.get("accuracy"), dict):
        acc = {c: v for c, v in clean["accuracy"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        fresh["saved_accuracy"] = acc
        fresh["saved_disagrees"] = sorted(c for c, v in fresh["accuracy"].items()
                                          if v is not None and c in acc and abs(acc[c] - v) > 0.05)
    return fresh
