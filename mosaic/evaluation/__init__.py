"""Evaluators: read concept values back from images, with their own accuracy measured.

API (used by the diffusion lab and every trainer)::

    ev = load_evaluator(spec, "parser")            # or a trained evaluator directory
    values = ev.predict(images)                    # uint8 [N, H, W, 3] -> [{concept: value | None}]
    report = check_evaluator(spec, ev, n=2000)     # accuracy on fresh ground-truth renders
    result = evaluate_folder(images_dir, spec, ev) # score a folder of images + metadata.jsonl
    from mosaic.evaluation.metrics import score, write_metrics

Two evaluators:

- ``parser`` (:class:`~mosaic.evaluation.parser.SceneParser`): segments the renderer's images by
  the spec's palette, reads shape, size and centre, and applies the same ``labels()`` the
  generator uses. Exact on clean renders; threshold 99.5 % per concept.
- learned (:class:`~mosaic.evaluation.learned.LearnedEvaluator`): a small CNN trained from
  scratch on augmented renders of every combination, for blurry or noisy generated images;
  threshold 99 % per concept.

Every report carries the evaluator's own accuracy on the ``evaluator_check`` split (a seed
distinct from every dataset split) and flags results measured with an evaluator below its
threshold (DESIGN.md: "The evaluator is measured").
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

import numpy as np

from mosaic.errors import MosaicError
from mosaic.spec import Spec

#: Minimum per-concept accuracy on clean ground-truth renders for an evaluator to be trusted.
THRESHOLDS = {"parser": 0.995, "learned": 0.99}
CHECK_SPLIT = "evaluator_check"


@runtime_checkable
class Evaluator(Protocol):
    """What every evaluator offers: a ``name`` and ``predict(images uint8 [N, H, W, 3]) ->
    [{concept: value | None}]``; optionally ``explain(images) -> [[reason, ...]]``."""

    name: str

    def predict(self, images: np.ndarray) -> list[dict]: ...


def load_evaluator(spec: Spec, which: str | Path = "parser", device: str = "cpu") -> Evaluator:
    """The scene parser (``"parser"``) or a trained learned evaluator (a directory).

    Raises:
        MosaicError: ``which`` is neither ``parser`` nor a trained evaluator directory, or the
            directory's concepts differ from the spec's.
    """
    if str(which) == "parser":
        from mosaic.evaluation.parser import SceneParser

        return SceneParser(spec)
    path = Path(which)
    if path.is_dir():
        from mosaic.evaluation.learned import LearnedEvaluator

        return LearnedEvaluator.load(path, spec, device=device)
    raise MosaicError(f"evaluator {str(which)!r} is neither 'parser' nor a directory: give --evaluator parser, or a "
                      "directory made by `mosaic evaluator train SPEC --out DIR`")


def threshold_of(evaluator: Evaluator) -> float:
    """The accuracy threshold of an evaluator (99.5 % for the parser, 99 % for learned ones)."""
    return THRESHOLDS["parser"] if evaluator.name == "parser" else THRESHOLDS["learned"]


def _held_out_fn(spec: Spec):
    try:
        from mosaic.holdout import is_held_out
    except ImportError:  # pragma: no cover - before the holdout landed
        return lambda values: False
    return lambda values: bool(is_held_out(spec, values))


def ground_truth(spec: Spec, start: int, stop: int, split: str = CHECK_SPLIT) -> tuple[np.ndarray, list[dict]]:
    """Renders of samples ``start..stop-1`` of ``split`` and their records.

    Returns:
        images uint8 ``[n, H, W, 3]``; records ``[{"index", "concepts", "held_out"}]``.
    """
    from mosaic.labels import labels
    from mosaic.sampling import sample_scene
    from renderers import get_renderer

    held = _held_out_fn(spec)
    scenes, records = [], []
    for i in range(start, stop):
        scene, _ = sample_scene(spec, split, i)
        vals = labels(scene, spec)
        scenes.append(scene)
        records.append({"index": i, "concepts": vals, "held_out": held(vals)})
    images, _ = get_renderer("pillow", supersample=spec.image.supersample).render(scenes)
    return images, records


def _explain(evaluator, images: np.ndarray) -> list[list[str]]:
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
        "seconds", "images_per_second"}``.
    Raises:
        MosaicError: ``n`` < 1 or an unknown degradation.
    """
    from mosaic.evaluation.degrade import degrade as apply_degrade
    from mosaic.evaluation.degrade import get_degradation
    from mosaic.evaluation.metrics import score

    if n < 1:
        raise MosaicError(f"--n {n}: the check needs at least 1 image (2000 is the default)")
    deg = get_degradation(degrade)
    deg_name = degrade if isinstance(degrade, str) else ("none" if degrade is None else "custom")
    records, preds, failures = [], [], []
    t_eval = 0.0
    for a in range(0, n, batch_size):
        b = min(n, a + batch_size)
        images, recs = ground_truth(spec, a, b)
        if deg_name != "none":
            images = apply_degrade(images, deg, seed=a)
        t = time.perf_counter()
        p = evaluator.predict(images)
        t_eval += time.perf_counter() - t
        wrong = [k for k, (r, q) in enumerate(zip(recs, p)) if any(q.get(c) != r["concepts"][c] for c in spec.concepts)]
        if wrong and len(failures) < examples:
            take = wrong[: examples - len(failures)]
            for k, why in zip(take, _explain(evaluator, images[take])):
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
        "threshold": thr, "passed": not below, "below_threshold": below,
        "seconds": round(t_eval, 3), "images_per_second": round(n / t_eval, 1) if t_eval > 0 else None,
    }


def read_folder(images_dir: str | Path) -> list[dict]:
    """The records of ``images_dir/metadata.jsonl`` (generator schema: ``file_name``, ``concepts``,
    optional ``held_out``). Raises MosaicError when missing or malformed (names the line)."""
    d = Path(images_dir)
    meta = d / "metadata.jsonl"
    if not meta.is_file():
        raise MosaicError(f"{meta} is missing: a folder to evaluate needs a metadata.jsonl with one JSON object per image "
                          '({"file_name": "images/000000.png", "concepts": {...}, "held_out": false})')
    recs = []
    for ln, line in enumerate(meta.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise MosaicError(f"{meta} line {ln} is not valid JSON ({e})") from None
        if not isinstance(r, dict) or "file_name" not in r or not isinstance(r.get("concepts"), dict):
            raise MosaicError(f"{meta} line {ln}: a record needs 'file_name' and a 'concepts' mapping of intended values")
        recs.append(r)
    if not recs:
        raise MosaicError(f"{meta} holds no records: nothing to evaluate")
    return recs


def _load_images(d: Path, records: list[dict]) -> list[np.ndarray]:
    from PIL import Image

    out = []
    for r in records:
        p = d / r["file_name"]
        if not p.is_file():
            raise MosaicError(f"image {p} listed in {d / 'metadata.jsonl'} is missing")
        with Image.open(p) as im:
            out.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
    return out


def _predict_any_size(evaluator: Evaluator, images: list[np.ndarray], batch_size: int) -> list[dict]:
    """Predict in batches of consecutive images of one shape."""
    preds: list[dict] = []
    i = 0
    while i < len(images):
        j = i
        while j < len(images) and j - i < batch_size and images[j].shape == images[i].shape:
            j += 1
        preds += evaluator.predict(np.stack(images[i:j]))
        i = j
    return preds


def evaluator_accuracy(spec: Spec, evaluator: Evaluator, n: int = 500) -> dict:
    """The evaluator's accuracy report for a results report: the report saved with a learned
    evaluator when it was checked on this spec (same fingerprint), else a fresh check of ``n``."""
    saved = getattr(evaluator, "report", None) or {}
    clean = saved.get("check_clean")
    if clean and clean.get("spec_fingerprint") == spec.fingerprint():
        return {**clean, "source": "saved with the evaluator"}
    return {**check_evaluator(spec, evaluator, n=n), "source": "fresh check"}


def evaluate_folder(images_dir: str | Path, spec: Spec, evaluator: Evaluator, out: str | Path | None = None,
                    check_n: int = 500, batch_size: int = 256) -> dict:
    """Score a folder of images whose intended concept values are in ``metadata.jsonl``.

    Any model's images can be scored: each record gives ``file_name`` (relative to the folder),
    ``concepts`` (intended values) and optionally ``held_out``. The result is
    :func:`mosaic.evaluation.metrics.score` plus ``evaluator`` (its name, its own accuracy from
    :func:`evaluator_accuracy`, threshold, ``trusted``) and ``flagged`` (True when the evaluator
    is below its threshold: such a result must not be reported unmarked), and ``results``
    (per image: intended, read, correct, reasons). With ``out`` it writes ``metrics.json``,
    ``metrics.csv``, ``heatmap.png`` and ``predictions.jsonl``.

    Raises:
        MosaicError: a missing or malformed metadata.jsonl, a missing image, or intended values
            that do not belong to the spec.
    """
    from mosaic.evaluation.metrics import score, write_metrics

    d = Path(images_dir)
    records = read_folder(d)
    images = _load_images(d, records)
    t = time.perf_counter()
    preds = _predict_any_size(evaluator, images, batch_size)
    seconds = time.perf_counter() - t
    metrics = score(records, preds, spec)
    acc = evaluator_accuracy(spec, evaluator, n=check_n) if check_n > 0 else None
    thr = threshold_of(evaluator)
    below = [c for c, v in (acc or {}).get("accuracy", {}).items() if v is None or v < thr]
    metrics["evaluator"] = {
        "name": evaluator.name, "threshold": thr,
        "check": None if acc is None else {k: acc.get(k) for k in ("n", "accuracy", "joint_accuracy", "degradation", "source", "split")},
        "below_threshold": below, "trusted": acc is not None and not below,
    }
    metrics["flagged"] = acc is None or bool(below)
    if metrics["flagged"]:
        why = "its accuracy was not checked" if acc is None else f"it is below {thr:.1%} on {', '.join(below)}"
        metrics["flag_reason"] = f"measured with evaluator {evaluator.name!r}, but {why}"
    metrics["images_dir"] = str(d)
    metrics["evaluation_seconds"] = round(seconds, 3)
    results = prediction_rows(records, preds, spec, evaluator, images)
    if out is not None:
        title = f"{spec.name}: joint accuracy per combination ({evaluator.name})" + (" — FLAGGED evaluator" if metrics["flagged"] else "")
        write_metrics(metrics, out, spec, title=title)
        write_prediction_rows(results, Path(out) / "predictions.jsonl")
    metrics["results"] = results
    return metrics


def prediction_rows(records: list[dict], preds: list[dict], spec: Spec, evaluator=None, images=None) -> list[dict]:
    """One row per image: ``file_name``, ``held_out``, ``intended`` (the record's concepts), ``read``
    (the evaluator's values, None = unreadable), ``correct`` (every concept read as intended) and
    ``reasons`` (one line per wrong concept, plus the evaluator's own explanation of the image
    when it has ``explain`` and ``images`` (uint8 ``[N, H, W, 3]`` or a list) are given)."""
    wrong = [i for i, (r, p) in enumerate(zip(records, preds)) if any(p.get(c) != r["concepts"].get(c) for c in spec.concepts)]
    why: dict = {}
    if evaluator is not None and images is not None and wrong and len({images[i].shape for i in wrong}) == 1:
        why = dict(zip(wrong, _explain(evaluator, np.stack([images[i] for i in wrong]))))
    rows = []
    for i, (r, p) in enumerate(zip(records, preds)):
        bad = [c for c in spec.concepts if p.get(c) != r["concepts"].get(c)]
        reasons = [f"{c}: read {p.get(c)!r}, intended {r['concepts'].get(c)!r}" for c in bad] + why.get(i, [])
        rows.append({"file_name": r.get("file_name"), "held_out": bool(r.get("held_out") or False), "intended": r["concepts"],
                     "read": p, "correct": not bad, "reasons": reasons})
    return rows


def write_prediction_rows(rows: list[dict], path: Path) -> None:
    """Write :func:`prediction_rows` as JSON lines."""
    with Path(path).open("w") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")


__all__ = [
    "Evaluator", "THRESHOLDS", "load_evaluator", "threshold_of", "check_evaluator", "evaluate_folder",
    "evaluator_accuracy", "ground_truth", "confusion_summary", "read_folder", "prediction_rows", "write_prediction_rows",
]
