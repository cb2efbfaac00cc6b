"""Score any model's images: a folder with a ``metadata.jsonl`` of intended concept values, read
by an evaluator, with the evaluator's own accuracy attached and one row per image."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from mosaic.errors import MosaicError
from mosaic.evaluation.check import Evaluator, evaluator_accuracy, explanations, threshold_of
from mosaic.spec import Spec


def read_folder(images_dir: str | Path) -> list[dict]:
    """The records of ``images_dir/metadata.jsonl`` (generator schema: ``file_name``, ``concepts``,
    optional ``held_out``). Raises MosaicError when missing or malformed (names the line)."""
    d = Path(images_dir)
    meta = d / "metadata.jsonl"
    if not d.is_dir():
        raise MosaicError(f"{d} is {'not a folder' if d.exists() else 'missing'}: give a folder of images with a metadata.jsonl "
                          "(a dataset split such as DATASET/test_ood, or a run's samples folder)")
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


def _predict_any_size(evaluator: Evaluator, images: list[np.ndarray], batch_size: int) -> tuple[list[dict], list | None]:
    """Predict in batches of consecutive images of one shape; also the parser's full reads
    (:func:`mosaic.evaluation.quality.read_images`; None for other evaluators)."""
    from mosaic.evaluation.quality import read_images

    preds: list[dict] = []
    reads: list | None = [] if hasattr(evaluator, "read") else None
    i = 0
    while i < len(images):
        j = i
        while j < len(images) and j - i < batch_size and images[j].shape == images[i].shape:
            j += 1
        p, r = read_images(evaluator, np.stack(images[i:j]))
        preds += p
        if reads is not None:
            reads += r
        i = j
    return preds, reads


def evaluate_folder(images_dir: str | Path, spec: Spec, evaluator: Evaluator, out: str | Path | None = None,
                    check_n: int = 500, batch_size: int = 256, compare: Evaluator | None = None) -> dict:
    """Score a folder of images whose intended concept values are in ``metadata.jsonl``.

    Any model's images can be scored: each record gives ``file_name`` (relative to the folder),
    ``concepts`` (intended values) and optionally ``held_out``. The result is
    :func:`mosaic.evaluation.metrics.score` plus ``evaluator`` (its name, its own accuracy from
    :func:`evaluator_accuracy`, threshold, ``trusted``) and ``flagged`` (True when the evaluator
    is below its threshold: such a result must not be reported unmarked), and ``results``
    (per image: intended, read, correct, reasons). For the parser it adds ``quality``
    (:func:`mosaic.evaluation.quality.quality_summary`: mean match quality seen / held-out, reads
    abstained, verdicts abstention changed). With ``compare`` (a second evaluator, e.g. a learned
    one) it adds ``agreement`` (:func:`mosaic.evaluation.agreement.compare_evaluators`: Cohen's
    kappa per concept and of the verdicts, disagreements listed). With ``out`` it writes
    ``metrics.json``, ``metrics.csv``, ``heatmap.png`` and ``predictions.jsonl``.

    Raises:
        MosaicError: a missing or malformed metadata.jsonl, a missing image, or intended values
            that do not belong to the spec.
    """
    from mosaic.evaluation.metrics import score, write_metrics

    from mosaic.evaluation.provenance import check_spec_reads

    d = Path(images_dir)
    records = read_folder(d)
    check_spec_reads(records, spec, d)  # a concept the spec cannot read, or another dataset's images: refuse
    images = _load_images(d, records)
    t = time.perf_counter()
    preds, reads = _predict_any_size(evaluator, images, batch_size)
    seconds = time.perf_counter() - t
    metrics = score(records, preds, spec)
    if reads is not None:
        from mosaic.evaluation.quality import quality_summary

        metrics["quality"] = quality_summary(records, reads, spec, evaluator)
    if compare is not None:
        from mosaic.evaluation.agreement import compare_evaluators

        other, _ = _predict_any_size(compare, images, batch_size)
        metrics["agreement"] = compare_evaluators(records, preds, other, list(spec.concepts),
                                                  names=(evaluator.name, getattr(compare, "name", "other")))
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
    results = prediction_rows(records, preds, spec, evaluator, images, reads=reads)
    if out is not None:
        title = f"{spec.name}: joint accuracy per combination ({evaluator.name})" + (" — FLAGGED evaluator" if metrics["flagged"] else "")
        write_metrics(metrics, out, spec, title=title)
        write_prediction_rows(results, Path(out) / "predictions.jsonl")
    metrics["results"] = results
    return metrics


def prediction_rows(records: list[dict], preds: list[dict], spec: Spec, evaluator=None, images=None, reads=None) -> list[dict]:
    """One row per image: ``file_name``, ``held_out``, ``intended`` (the record's concepts), ``read``
    (the evaluator's values, None = unreadable), ``correct`` (every concept read as intended) and
    ``reasons`` (one line per wrong concept, plus the evaluator's own explanation of the image
    when it has ``explain`` and ``images`` (uint8 ``[N, H, W, 3]`` or a list) are given); with the
    parser's ``reads`` also ``quality`` (match quality in [0, 1]), ``measures`` and ``abstained``."""
    wrong = [i for i, (r, p) in enumerate(zip(records, preds)) if any(p.get(c) != r["concepts"].get(c) for c in spec.concepts)]
    why: dict = {}
    if evaluator is not None and images is not None and wrong and len({images[i].shape for i in wrong}) == 1:
        why = dict(zip(wrong, explanations(evaluator, np.stack([images[i] for i in wrong]))))
    rows = []
    for i, (r, p) in enumerate(zip(records, preds)):
        bad = [c for c in spec.concepts if p.get(c) != r["concepts"].get(c)]
        reasons = [f"{c}: read {p.get(c)!r}, intended {r['concepts'].get(c)!r}" for c in bad] + why.get(i, [])
        row = {"file_name": r.get("file_name"), "held_out": bool(r.get("held_out") or False), "intended": r["concepts"],
               "read": p, "correct": not bad, "reasons": reasons}
        if reads is not None:
            q = reads[i]
            row.update({"quality": round(q.quality, 4), "measures": {k: round(v, 4) for k, v in q.measures.items()},
                        "abstained": q.abstained})
        rows.append(row)
    return rows


def write_prediction_rows(rows: list[dict], path: Path) -> None:
    """Write :func:`prediction_rows` as JSON lines."""
    with Path(path).open("w") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")
