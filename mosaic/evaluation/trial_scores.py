"""The figures a finished diffusion run reports, checked against what they are made from.

A run's ``metrics.json`` holds a ``table`` (seen / held-out accuracy) made from its ``scores``, which
are a copy of the scored samples folder's own ``metrics.json`` (``RUN/samples/<name>``, the folder its
``samples.out`` names), which :func:`mosaic.evaluation.metrics.score` computed from the verdict of every
image (that folder's ``predictions.jsonl``). ``mosaic report`` and a sweep's results read the table;
an edited table, or table and scores edited together, was reported as measured (attack round 23).
:func:`check_run_scores` re-derives each layer from the one below before a figure is used: the
table from the scores, the scores from the samples folder's ``metrics.json``, and that from the
per-image verdicts scored again (:func:`~mosaic.evaluation.metrics.score`, a few ms per trial).
"""

from __future__ import annotations

import math
from pathlib import Path

from mosaic.audit import read_rows
from mosaic.errors import SweepError
from mosaic.evaluation.metrics import score
from mosaic.evaluation.table import table_columns, table_from_scores
from mosaic.io import read_json
from mosaic.records import spec_from_data

#: the groups and fields compared (the figures results and reports show)
_GROUPS = ("overall", "seen", "held_out")


def scored_samples(run: Path, metrics: dict) -> Path | None:
    """The samples folder whose scores a run's ``metrics`` (its ``metrics.json``) holds: the folder
    ``samples.out`` names, looked up inside the run (a moved or copied run keeps its own), or None
    when the run recorded no samples (a run without sampling, a transformer run)."""
    rec = metrics.get("samples")
    out = rec.get("out") if isinstance(rec, dict) else None
    if not isinstance(out, str) or not out:
        return None
    name = Path(out).name
    if name in ("", ".", ".."):
        return None
    return Path(run) / "samples" / name


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


def _figures(scores) -> dict:
    """``{group: {"n", "joint_accuracy", "accuracy"}}`` of a score dict (what a table is made from)."""
    out = {}
    for g in _GROUPS:
        s = scores.get(g) if isinstance(scores, dict) else None
        if isinstance(s, dict):
            out[g] = {k: s.get(k) for k in ("n", "joint_accuracy", "accuracy")}
    return out


def check_run_scores(run: Path, metrics: dict) -> None:
    """Raise unless the figures of a finished run's ``metrics.json`` (``metrics``) are those its
    scored samples give (see the module docstring). A run that recorded no scored samples is not
    checked.

    Raises:
        SweepError: naming the file whose figures are not the ones below it, the figure, and the
            fix (restore the file, or score the samples again: ``mosaic sample RUN``)."""
    scores = metrics.get("scores")
    folder = scored_samples(run, metrics)
    if folder is None or not isinstance(scores, dict):
        return
    mpath = Path(run) / "metrics.json"
    fix = (f"restore it, or score the samples again (`mosaic sample {run}` with the run's settings), or delete the trial "
           "folder and rerun `mosaic sweep`")
    if isinstance(metrics.get("table"), dict):
        want, got = table_columns(table_from_scores(scores)), table_columns(metrics["table"])
        if not _same(want, got):
            k = next((k for k in sorted(set(want) | set(got)) if not _same(want.get(k), got.get(k))), "?")
            raise SweepError([(str(mpath), f"its table is not the table of its own scores ({k}: {got.get(k)!r}, its scores give "
                                           f"{want.get(k)!r}); {fix}")])
    try:
        own = read_json(folder / "metrics.json")
    except (OSError, ValueError) as e:
        raise SweepError([(str(folder / "metrics.json"), f"missing or damaged ({type(e).__name__}: {str(e)[:80]}): the figures of "
                                                         f"{mpath} come from it and cannot be checked; {fix}")]) from None
    if not _same(_figures(own), _figures(scores)):
        raise SweepError([(str(mpath), f"its scores are not those of its samples ({folder / 'metrics.json'}); {fix}")])
    try:
        man = read_json(Path(run) / "dataset_manifest.json")
        spec = spec_from_data(man["spec"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SweepError([(str(Path(run) / "dataset_manifest.json"), f"missing or damaged ({type(e).__name__}): the run's spec, "
                                                                      f"which scores its samples, cannot be read; {fix}")]) from None
    except Exception as e:  # noqa: BLE001 - a spec that no longer parses (SpecError) is named, never a traceback
        raise SweepError([(str(Path(run) / "dataset_manifest.json"), f"its spec does not parse ({str(e)[:120]}); {fix}")]) from None
    rows = [r for _, r in read_rows(folder / "predictions.jsonl")]
    try:
        again = score([{"concepts": r.get("intended"), "held_out": r.get("held_out")} for r in rows],
                      [r.get("read") or {} for r in rows], spec)
    except Exception as e:  # noqa: BLE001 - rows the spec cannot score are named
        raise SweepError([(str(folder / "predictions.jsonl"), f"cannot be scored again ({str(e)[:120]}); {fix}")]) from None
    if not _same(_figures(again), _figures(own)):
        raise SweepError([(str(folder / "metrics.json"), f"its figures are not those of its own per-image verdicts "
                                                         f"({folder / 'predictions.jsonl'}, scored again); {fix}")])
