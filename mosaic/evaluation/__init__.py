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

This file only re-exports. The modules: :mod:`~mosaic.evaluation.check` (the interface,
thresholds, the check on fresh renders), :mod:`~mosaic.evaluation.load` (``load_evaluator``),
:mod:`~mosaic.evaluation.folder` (scoring a folder of images), :mod:`~mosaic.evaluation.metrics`
(scores, ``metrics.*`` files), :mod:`~mosaic.evaluation.parser`, :mod:`~mosaic.evaluation.learned`,
:mod:`~mosaic.evaluation.degrade`; the CLI is :mod:`mosaic.cli.evaluate`.
"""

from mosaic.evaluation.check import (
    CHECK_SPLIT,
    THRESHOLDS,
    Evaluator,
    check_evaluator,
    confusion_summary,
    evaluator_accuracy,
    ground_truth,
    threshold_of,
)
from mosaic.evaluation.folder import evaluate_folder, prediction_rows, read_folder, write_prediction_rows
from mosaic.evaluation.load import load_evaluator

__all__ = [
    "Evaluator", "THRESHOLDS", "CHECK_SPLIT", "load_evaluator", "threshold_of", "check_evaluator", "evaluate_folder",
    "evaluator_accuracy", "ground_truth", "confusion_summary", "read_folder", "prediction_rows", "write_prediction_rows",
]
