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

import json
import math
import os
import random
from pathlib import Path

import numpy as np

from mosaic.audit import read_rows
from mosaic.errors import MosaicError, SweepError
from mosaic.evaluation.check import check_evaluator
from mosaic.evaluation.load import load_evaluator
from mosaic.evaluation.metrics import score
from mosaic.evaluation.quality import quality_from_predictions, read_images
from mosaic.evaluation.table import table_columns, table_from_scores
from mosaic.io import read_json
from mosaic.lab.config import read_config_yaml
from mosaic.lab.run_record import numbers_close, record_problem, unmeasured
from mosaic.png import FOREIGN_FORMATS, decode_image
from mosaic.records import spec_from_data

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
    if unmeasured(a) and unmeasured(b):  # NaN measured, null recorded (JSON has no NaN; a binding run without swap negatives, round 30)
        return True
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) and not isinstance(b, bool):
        return numbers_close(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


#: rows whose verdicts are read again from their images by the run's evaluator (drawn by the system's random source)
SPOT_READS = 16


def _fail(path, why: str, fix: str) -> SweepError:
    return SweepError([(str(path), f"{why}; {fix}")])


def check_run_scores(run: Path, metrics: dict, fix: str | None = None) -> None:
    """Raise unless the figures of a finished diffusion run's ``metrics.json`` (``metrics``) are those
    its scored samples give (see the module docstring): the table is its scores' table; its scores,
    whole (per value, per cell, unreadable fractions, match quality), and its ``evaluator_check`` are
    the samples folder's own files; that folder was sampled with the run's sampling settings; its
    figures are its ``predictions.jsonl`` scored again with the held-out flags the spec gives; and
    :data:`SPOT_READS` of its verdicts are what the run's evaluator reads in those images now; an
    ``analysis`` section is the one ``mosaic analyze`` recorded in ``RUN/analysis/analysis.json``.
    A run whose figures name no samples folder, or whose table has no scores, is refused. A run
    without a sampling section in its config (a transformer) is not checked here.

    Raises:
        SweepError: naming the file whose figures are not the ones below it, and the fix (``fix``, default: a
            sweep trial's)."""
    run = Path(run)
    mpath = run / "metrics.json"
    fix = fix or (f"restore it, or score the samples again (`mosaic sample {run}` with the run's settings), or delete the trial "
                  "folder and rerun `mosaic sweep`")
    try:
        cfg = read_config_yaml(run / "config.yaml")
    except (MosaicError, OSError, ValueError):
        cfg = None
    if "analysis" in metrics:
        _check_analysis(run, metrics["analysis"])
    _check_train_record(run, metrics, cfg, fix)
    if not ("table" in metrics or "scores" in metrics):
        return
    diffusion = (not isinstance(cfg, dict) or "objective" not in cfg or "sampling" in cfg or "scores" in metrics or "samples" in metrics
                 or any((run / w / "conditioner.safetensors").exists() for w in ("best", "final")))
    if not diffusion:  # a transformer run (an objective, and nothing of a diffusion run's: its weights, samples, scores)
        _check_transformer_table(run, metrics, fix)
        return
    if not isinstance(cfg, dict) or not isinstance(cfg.get("sampling"), dict) or not isinstance(cfg.get("evaluation", {}), dict):
        raise _fail(run / "config.yaml", "holds no sampling section, so the samples its figures come from cannot be checked", fix)
    scores, folder = metrics.get("scores"), scored_samples(run, metrics)
    if folder is None or not isinstance(scores, dict):
        raise _fail(mpath, "its figures name no scored samples folder (samples.out) or have no scores, so nothing they come from "
                           "can be read", fix)
    if not isinstance(metrics.get("table"), dict):  # null: the figures a report shows would be gone (attack round 25)
        raise _fail(mpath, "its table is missing, while its scores are there", fix)
    want, got = table_columns(table_from_scores(scores)), table_columns(metrics["table"])
    if not _same(want, got):
        k = next((k for k in sorted(set(want) | set(got)) if not _same(want.get(k), got.get(k))), "?")
        raise _fail(mpath, f"its table is not the table of its own scores ({k}: {got.get(k)!r}, its scores give {want.get(k)!r})", fix)
    own = _read(folder / "metrics.json", fix, f"the figures of {mpath} come from it")
    if not _same(own, scores):
        raise _fail(mpath, f"its scores are not those of its samples ({folder / 'metrics.json'})", fix)
    if metrics.get("evaluator_check") is None and os.path.lexists(folder / "evaluator_check.json"):  # a failed check hidden (round 27)
        raise _fail(mpath, f"its evaluator_check is gone, while its samples hold one ({folder / 'evaluator_check.json'})", fix)
    if metrics.get("evaluator_check") is not None:
        check = _read(folder / "evaluator_check.json", fix, f"the evaluator check of {mpath} comes from it")
        timing = ("seconds", "images_per_second")  # measured again with the same figures when the run is sampled again
        mine = metrics["evaluator_check"] if isinstance(metrics["evaluator_check"], dict) else {}
        if not _same({k: v for k, v in check.items() if k not in timing}, {k: v for k, v in mine.items() if k not in timing}):
            raise _fail(mpath, f"its evaluator_check is not the samples' own ({folder / 'evaluator_check.json'})", fix)
    settings = _read(folder / "sampling.json", fix, "it records how the samples were made")
    ev_cfg = cfg.get("evaluation") or {}
    given = {k: cfg["sampling"][k] for k in ("guidance", "steps", "sampler", "n_per_combination", "checkpoint") if k in cfg["sampling"]}
    given.update({k: ev_cfg[k] for k in ("evaluator", "abstain") if k in ev_cfg})
    if isinstance(ev_cfg.get("splits"), list):
        given["splits"] = ev_cfg["splits"]
    differs = [k for k in given if k not in settings or not _same(settings[k], given[k])]  # a key removed is a difference
    if not differs and isinstance(metrics.get("samples"), dict) and metrics["samples"].get("splits") is not None \
            and settings.get("splits") != metrics["samples"]["splits"]:
        differs = ["splits"]
    if differs:
        raise _fail(folder / "sampling.json", f"these samples were made with other settings than the run's ({', '.join(differs)}): "
                                              "they are not the run's scored samples", fix)
    try:
        spec = spec_from_data(_read(run / "dataset_manifest.json", fix, "the run's spec scores its samples")["spec"])
    except SweepError:
        raise
    except Exception as e:  # noqa: BLE001 - a spec that no longer parses (SpecError), or no spec, is named
        raise _fail(run / "dataset_manifest.json", f"holds no spec that parses ({str(e)[:120]})", fix) from None
    rows = [r for _, r in read_rows(folder / "predictions.jsonl")]
    if isinstance(metrics.get("samples"), dict) and "images" in metrics["samples"] and not _same(metrics["samples"]["images"], len(rows)):
        raise _fail(mpath, f"its samples.images is {metrics['samples']['images']!r}, but its samples folder holds {len(rows)} scored images", fix)
    if settings.get("images") != len(rows) or own.get("n") != len(rows):  # rows dropped, then everything rescored (round 25)
        raise _fail(folder / "predictions.jsonl", f"holds {len(rows)} rows, but sampling.json records {settings.get('images')!r} "
                                                  f"images and metrics.json scores {own.get('n')!r}", fix)
    try:  # the flags the spec gives, never the rows' own (held-out images re-filed as seen, attack round 24)
        again = score([{"concepts": r.get("intended")} for r in rows], [r.get("read") or {} for r in rows], spec)
    except Exception as e:  # noqa: BLE001 - rows the spec cannot score are named
        raise _fail(folder / "predictions.jsonl", f"cannot be scored again ({str(e)[:120]})", fix) from None
    keys = ("n", "concepts", "overall", "seen", "held_out", "by_value", "grid")
    if not all(_same(again.get(k), own.get(k)) for k in keys):
        k = next(k for k in keys if not _same(again.get(k), own.get(k)))
        raise _fail(folder / "metrics.json", f"its figures ({k}) are not those of its own per-image verdicts "
                                             f"({folder / 'predictions.jsonl'}, scored again with the spec's held-out flags)", fix)
    _spot_read(run, cfg, settings, spec, folder, rows, fix, own.get("quality"), metrics.get("evaluator_check"))


#: how far a transformer run's accuracies measured again may lie from its recorded ones (a GPU's floats at training
#: against the CPU's now can turn an argmax; a forged figure lies far further)
TRANSFORMER_TOLERANCE = 0.02


def _check_transformer_table(run: Path, metrics: dict, fix: str) -> None:
    """A transformer run keeps no per-image record, so its table is measured again: the weights its evaluation
    chose, on the run's own (checked) test splits, on the CPU (:meth:`Task.evaluate`, a few seconds at CPU scale).
    Each accuracy must lie within :data:`TRANSFORMER_TOLERANCE` of the recorded one, each ``n`` equal (a forged
    table was reported, attack round 24). A run without its weights (neither ``best/`` nor ``final/``) cannot be
    measured and is reported as recorded."""
    if not any((run / w / "model.safetensors").is_file() for w in ("best", "final")):
        return
    import torch

    from mosaic.diagnostics.runs import load_task, open_any_run

    try:
        family, cfg, runf, root = open_any_run(run)
        task, _ = load_task(family, cfg, runf, root, None)
        with torch.no_grad():
            table = task.evaluate(task.model.eval(), "cpu").get("table")
    except MosaicError as e:
        raise _fail(run / "metrics.json", f"its table cannot be measured again ({str(e)[:160]})", fix) from None
    want, got = table_columns(table), table_columns(metrics.get("table"))
    for k in sorted(set(want) | set(got)):
        a, b = want.get(k), got.get(k)
        if not (_same(a, b) or (not k.endswith(".n") and _within(b, a, TRANSFORMER_TOLERANCE))):
            raise _fail(run / "metrics.json", f"its table says {k} = {b!r}, but the run's weights measure {a!r} on its test splits now",
                        fix)


def _within(got, want, tol: float) -> bool:
    """Whether a recorded number ``got`` lies within ``tol`` of a float measured again, ``want`` (a bool is no number)."""
    return isinstance(got, (int, float)) and not isinstance(got, bool) and isinstance(want, float) and abs(got - want) <= tol


def seconds_ok(v) -> bool:
    """Whether ``v`` is a time in seconds as mosaic records one: a finite number >= 0 (not a bool)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v) and v >= 0 and float(v) < 1e15  # no run takes 30 million years: a 400-digit integer is no time
    except OverflowError:
        return False


def _read(path: Path, fix: str, why: str) -> dict:
    try:
        data = read_json(path)
    except (OSError, ValueError) as e:
        raise _fail(path, f"missing or damaged ({type(e).__name__}: {str(e)[:80]}): {why} and cannot be checked", fix) from None
    if not isinstance(data, dict):
        raise _fail(path, f"is no mapping: {why} and cannot be checked", fix)
    return data


def _spot_read(run: Path, cfg: dict, settings: dict, spec, folder: Path, rows: list[dict], fix: str, quality=None,
               check=None) -> None:
    """:data:`SPOT_READS` rows' ``read`` must be what the run's evaluator (``sampling.json``'s, with the
    config's ``position_bins``) reads in their images now: verdicts rewritten to "right" were believed."""
    if not rows:
        return
    ev_cfg = cfg.get("evaluation") if isinstance(cfg.get("evaluation"), dict) else {}
    which = settings.get("evaluator") or ev_cfg.get("evaluator") or "parser"
    abstain = settings.get("abstain") if isinstance(settings.get("abstain"), bool) else ev_cfg.get("abstain", True)
    kept = settings.get("evaluator_folder")
    if which != "parser" and not Path(str(which)).is_absolute() and not Path(str(which)).is_dir() and isinstance(kept, str) \
            and Path(kept).is_absolute() and Path(kept).is_dir():
        which = kept  # a relative name is read from the sweep's start folder; `sample` recorded where it was
    try:
        ev = load_evaluator(spec, which, abstain=bool(abstain), position_bins=ev_cfg.get("position_bins", "strict"))
    except MosaicError as e:
        rel = which != "parser" and not Path(str(which)).is_absolute()
        raise _fail(folder / "sampling.json", f"its evaluator cannot be loaded to read the samples again ({str(e)[:120]})"
                    + (f"; {which!r} is a relative path, read from the current folder {Path.cwd()}: run the report from the folder "
                       "the sweep was run from" if rel else ""), fix) from None
    picked = random.SystemRandom().sample(range(len(rows)), min(SPOT_READS, len(rows)))
    images = []
    for k in picked:
        name = rows[k].get("file_name")
        if not isinstance(name, str):
            raise _fail(folder / "predictions.jsonl", f"row {k + 1} names no image", fix)
        images.append(decode_image(folder / name, where=str(folder / name), error=SweepError, formats=FOREIGN_FORMATS))
    preds, reads = read_images(ev, np.stack(images))
    for j, (k, p) in enumerate(zip(picked, preds)):
        read = rows[k].get("read") or {}
        if any(p.get(c) != read.get(c) for c in spec.concepts):
            raise _fail(folder / "predictions.jsonl", f"row {k + 1} ({rows[k].get('file_name')}) says the evaluator read "
                                                      f"{json.dumps(read)[:100]}, but it reads {json.dumps(p, default=str)[:100]} in that "
                                                      "image now: the verdicts are not the images'", fix)
        raw_now = None if reads is None else json.loads(json.dumps(reads[j].raw_values, default=str))
        if reads is not None and "raw" in rows[k] and (rows[k]["raw"] != raw_now or rows[k].get("quality") != round(reads[j].quality, 4)):
            raise _fail(folder / "predictions.jsonl", f"row {k + 1} ({rows[k].get('file_name')}) records a raw read or match quality "
                                                      "the evaluator does not read in that image now", fix)
    _check_quality(folder, rows, spec, ev, quality, fix)
    if check is not None:
        _measure_check_again(folder, cfg, spec, ev, which, check, fix)


#: the seconds a run's metrics.json records (each a finite number >= 0 where given)
_TIMES = (("time_s",), ("generate_s",), ("train", "train_time_s"), ("train", "images_per_s"), ("train", "train_time_this_call_s"),
          ("samples", "seconds"))


def _check_train_record(run: Path, metrics: dict, cfg, fix: str) -> None:
    """The training record of a finished run (``metrics.json``'s ``train`` and times) as the run gives it: ``steps``
    the config's ``training.steps``, ``final_loss`` the mean loss of the last 10 % of ``log.jsonl``'s rows (as
    :func:`mosaic.lab.loop.train` records it), every time a finite number >= 0; ``params``, ``train.best``,
    ``train.val``, ``train.processes``, ``train.device``, ``train.global_batch`` and ``dataset`` as their own files give
    them (:func:`mosaic.lab.run_record.record_problem`). Edited values went into a sweep's results and a rerun's print
    (attack round 27)."""
    mpath = run / "metrics.json"
    problem = record_problem(run, metrics, cfg)
    if problem is not None:
        raise _fail(problem[0], problem[1], fix)
    for keys in _TIMES:
        node = metrics
        for k in keys:
            node = node.get(k) if isinstance(node, dict) else None
        if node is not None and not seconds_ok(node):
            raise _fail(mpath, f"its {'.'.join(keys)} is {node!r}, not a time in seconds (a finite number >= 0)", fix)
    tr = metrics.get("train")
    if not isinstance(tr, dict):
        return
    want = ((cfg or {}).get("training") or {}).get("steps") if isinstance(cfg, dict) else None
    if want is not None and not _same(tr.get("steps"), want):
        raise _fail(mpath, f"its train.steps is {tr.get('steps')!r}, but the run's config trains {want!r} steps", fix)
    if "final_loss" in tr and isinstance(want, int):
        from mosaic.lab.run_folder import RunFolder, final_loss

        try:
            log = RunFolder(run).read_log()
        except MosaicError as e:
            raise _fail(run / "log.jsonl", f"cannot be read ({str(e)[:100]}), so its final loss cannot be checked", fix) from None
        loss = final_loss(log, want)
        if not (loss is None and tr["final_loss"] is None) and not (isinstance(tr["final_loss"], (int, float)) and loss is not None
                                                                     and numbers_close(tr["final_loss"], loss, 1e-6, 1e-9)):
            raise _fail(mpath, f"its train.final_loss is {tr['final_loss']!r}, but its log.jsonl gives {loss!r}", fix)


#: how far the evaluator's accuracies on fresh renders measured again may lie from the recorded ones (a learned
#: evaluator on a GPU at sampling against the CPU now; the parser on another host's floats)
CHECK_TOLERANCE = 0.02
#: evaluator checks measured in this process: ``(spec fingerprint, evaluator, n, abstain, bins) -> check`` (the seeds of one
#: condition share their spec, so a sweep's report renders each condition's check once)
_CHECKS: dict = {}


def _measure_check_again(folder: Path, cfg: dict, spec, ev, which, check, fix: str) -> None:
    """The run's ``evaluator_check`` (the evaluator's accuracy on ``evaluation.check_n`` fresh ground-truth renders,
    :func:`mosaic.evaluation.check_evaluator`) measured again: its ``n`` must be the run config's ``check_n``, its
    accuracies within :data:`CHECK_TOLERANCE` of the fresh ones and its verdict (``passed``) the same (forged in both
    the run's and the samples' files, a check was reported, attack round 25). About 1-2 CPU s per 200 renders at
    16-24 px, once per spec and evaluator in a process."""
    where = folder / "evaluator_check.json"
    ev_cfg = cfg.get("evaluation") if isinstance(cfg.get("evaluation"), dict) else {}
    n = check.get("n") if isinstance(check, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 1 or n != ev_cfg.get("check_n", n):
        raise _fail(where, f"measured on {n!r} renders, but the run's config sets evaluation.check_n {ev_cfg.get('check_n')!r}", fix)
    key = (spec.fingerprint(), str(which), n, getattr(ev, "abstain", None), getattr(ev, "position_bins", None))
    if key not in _CHECKS:
        _CHECKS[key] = check_evaluator(spec, ev, n=n)
    fresh = _CHECKS[key]
    acc = check.get("accuracy") if isinstance(check.get("accuracy"), dict) else {}
    pairs = [("joint_accuracy", check.get("joint_accuracy"), fresh["joint_accuracy"])] + \
            [(f"accuracy.{c}", acc.get(c), v) for c, v in fresh["accuracy"].items()]
    for name, got, want in pairs:
        if not (_same(got, want) or _within(got, want, CHECK_TOLERANCE)):
            raise _fail(where, f"says the evaluator's {name} on fresh renders is {got!r}, but it measures {want!r} now", fix)
    if check.get("passed") is not fresh["passed"]:
        raise _fail(where, f"says the evaluator passed: {check.get('passed')!r}, but it measures {fresh['passed']!r} now", fix)


#: how far a mean of the quality figures derived again from predictions.jsonl (measures rounded to 4 decimals there)
#: may lie from the recorded one
QUALITY_TOLERANCE = 1e-3


def _check_quality(folder: Path, rows: list[dict], spec, ev, quality, fix: str) -> None:
    """The match-quality figures (``scores.quality``: accuracy without abstention, what abstention changed) must be
    those :func:`mosaic.evaluation.quality.quality_from_predictions` derives from the rows again (forged in both the
    run's and the samples' files, they were reported, attack round 25). Rows that carry raw reads and no recorded
    quality, or a recorded quality with rows that carry none (every row's ``raw`` stripped, as an older mosaic wrote
    them, and the figures forged: attack round 28), are refused: such a folder is scored again."""
    if quality is None and not any("raw" in r for r in rows):
        return
    try:
        again = quality_from_predictions(rows, spec, ev)
    except ValueError as e:
        raise _fail(folder / "predictions.jsonl", f"its quality fields cannot be read ({str(e)[:120]})", fix) from None
    if again is None:
        raise _fail(folder / "predictions.jsonl", "its rows carry no raw reads (the values before abstention), so the quality "
                                                  f"figures of {folder / 'metrics.json'} cannot be derived again", fix)
    if not isinstance(quality, dict) or not _close(again, quality):
        raise _fail(folder / "metrics.json", "its quality figures (accuracy without abstention, abstained images) are not those "
                                             f"of its own per-image reads ({folder / 'predictions.jsonl'})", fix)


def _close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_close(a[k], b[k]) for k in a)
    return _same(a, b) or _within(b, a, QUALITY_TOLERANCE)


def _check_analysis(run: Path, analysis) -> None:
    """A run's ``analysis`` section must be the one ``mosaic analyze`` recorded beside its figures
    (``RUN/analysis/analysis.json``): a section invented in ``metrics.json`` was reported as measured."""
    path = run / "analysis" / "analysis.json"
    try:
        rec = read_json(path)
    except (OSError, ValueError):
        rec = None
    if not _same(rec, analysis):
        raise _fail(run / "metrics.json", f"its analysis section is not the one `mosaic analyze` recorded ({path} is missing or "
                                          "differs)", f"rerun `mosaic analyze {run}`, or restore the files")
