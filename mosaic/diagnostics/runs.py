"""Open a finished run folder of either lab family and run the diagnostics on it (``mosaic analyze
RUN``): the run-level side of :mod:`mosaic.diagnostics.analyze` (which works on a built task and is
what the families call at the end of training, so it imports no family)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from mosaic.diagnostics.analyze import _jsonable, analyze_task
from mosaic.diagnostics.applies import resolve_what
from mosaic.diagnostics.config import AnalysisSection
from mosaic.errors import TrainingError
from mosaic.evaluation.table import table_problem
from mosaic.io import atomic_write, own_folders, read_json
from mosaic.locks import FolderLock
from mosaic.dataset import spec_of
from mosaic.lab.config import validate_config
from mosaic.lab.diffusion.config import DiffusionConfig
from mosaic.lab.diffusion.task import DiffusionTask
from mosaic.lab.run_folder import RunFolder
from mosaic.lab.run import pick_checkpoint
from mosaic.lab.transformer.binding_task import BindingTask
from mosaic.lab.transformer.classifier import ClassifierTask
from mosaic.lab.transformer.config import TransformerConfig
from mosaic.lab.transformer.models import load_weights
from mosaic.lab.transformer.tokens import SceneTokenizer


def open_any_run(run_dir: str | Path):
    """``(family, cfg, run folder, dataset root)`` of a finished lab run of either family.

    Raises:
        TrainingError: not a run folder, or a run that has not finished (no metrics.json);
        DatasetError: the dataset is gone or changed; ConfigError: an invalid stored config.
    """
    run = RunFolder(run_dir)
    if not run.config.is_file():
        raise TrainingError(f"{run_dir} is not a run folder (no {run.config.name}): give the folder `mosaic train` wrote")
    raw = run.read_config()
    if not run.metrics.is_file():
        raise TrainingError(f"run {run_dir} has not finished (no metrics.json): finish training (rerun the same "
                            "`mosaic train` command) before analysing it")
    family = "transformer" if isinstance(raw, dict) and "objective" in raw else "diffusion"
    cfg = validate_config(TransformerConfig if family == "transformer" else DiffusionConfig, raw, source=str(run.config))
    return family, cfg, run, run.dataset_root()  # gone, changed or damaged: named (RunFolder.dataset_root)


def load_task(family: str, cfg, run, root: Path, checkpoint: str | None):
    """The run's task with the analysed weights loaded; returns ``(task, checkpoint)``.

    Raises:
        TrainingError: the run lacks the weights (named: which checkpoint, which folder, the fix).
    """

    wanted = checkpoint or (cfg.evaluation.checkpoint if family == "transformer" else cfg.sampling.checkpoint)
    chosen = pick_checkpoint(run, wanted) if checkpoint is None else checkpoint
    weights = run.best if chosen == "best" else run.final
    need = weights / ("model.safetensors" if family == "transformer" else "conditioner.safetensors")
    if not need.is_file():
        alt = "final" if chosen == "best" else "best"
        raise TrainingError(f"run {run.root} has no {chosen} checkpoint ({need} is missing): the diagnostics need trained weights; "
                            f"finish training, or pass --checkpoint {alt}")
    if family == "transformer":
        # the task built as mosaic.lab.transformer.family.build_task does (not imported: the
        # family imports this module for its analysis: section)

        spec = spec_of(root)
        tokenizer = SceneTokenizer.from_spec(spec) if cfg.objective == "binding" or cfg.input.kind == "tokens" else None
        task = (ClassifierTask if cfg.objective == "classifier" else BindingTask)(cfg, spec, root, tokenizer)
        load_weights(task.model, weights)
    else:
        task = DiffusionTask(cfg, root, run, train=False)
        task.load_weights(weights)
    return task, chosen


def analyze_run(run_dir: str | Path, *, what: list[str] | None = None, options: AnalysisSection | None = None,
                checkpoint: str | None = None, device: str = "cpu", write: bool = True, say: Callable[[str], None] = print) -> dict:
    """Run the diagnostics on a finished run and (``write``) store them in its ``metrics.json``
    under ``analysis`` (figures in ``RUN/analysis/``).

    Args:
        what: diagnostics to run (None: the options', else every one that applies).
        options: defaults to the run's own ``analysis:`` section, else :class:`AnalysisSection` defaults.
        checkpoint: ``final`` / ``best`` (default: the weights the run evaluated).
    Returns:
        The ``analysis`` dict (see :func:`analyze_task`), with ``checkpoint``.
    Raises:
        TrainingError, DatasetError, ConfigError, NotApplicableError, LeakageError (all MosaicError);
        TrainingError: another process writes the run folder (``mosaic train`` resuming it, another
        ``mosaic analyze``): the run's lock is held while its ``metrics.json`` is read and written.
    """
    if not write:
        return _analyze_run(run_dir, what, options, checkpoint, device, write, say)
    # metrics.json is read, extended and written again: under the run folder's lock (mosaic.lab.run holds it while training)
    with FolderLock(Path(run_dir), TrainingError, "run folder", wait=False):
        return _analyze_run(run_dir, what, options, checkpoint, device, write, say)


def _analyze_run(run_dir, what, options, checkpoint, device, write, say) -> dict:
    family, cfg, run, root = open_any_run(run_dir)
    opts = options or getattr(cfg, "analysis", None) or AnalysisSection()
    try:
        metrics = read_json(run.metrics)
    except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested 100k deep (mosaic.io.read_json)
        metrics = e
    if not isinstance(metrics, dict):  # checked before any diagnostic runs: the results are written into it
        why = f"{type(metrics).__name__}: {str(metrics)[:80]}" if isinstance(metrics, Exception) else f"not a JSON mapping but {json.dumps(metrics)[:40]}"
        raise TrainingError(f"{run.metrics} is damaged ({why}): it holds the run's results; restore it from a copy, "
                            "or train the run again into a new --out")
    if (bad := table_problem(metrics.get("table"))) is not None:  # the figures read it (a list was a traceback, attack round 21)
        raise TrainingError(f"{run.metrics} is damaged ({bad}): it holds the run's results; restore it from a copy, "
                            "or train the run again into a new --out")
    # the applicability check comes before the (slow) task is built

    resolve_what(what if what is not None else opts.what, family, spec_of(root),
                 getattr(cfg.model, "conditioning", None) if family == "diffusion" else None)
    task, chosen = load_task(family, cfg, run, root, checkpoint or opts.checkpoint)
    out = analyze_task(family, task, opts, what=what, device=device, metrics=metrics,
                       out_dir=run.root / "analysis" if write else None, say=say)
    out["checkpoint"] = chosen
    out = _jsonable(out)
    if write:
        metrics["analysis"] = out
        # the record a report compares metrics.json's section with (an invented section was reported, attack round 24)
        own_folders(run.root, ["analysis"])
        atomic_write(run.root / "analysis" / "analysis.json", json.dumps(out, indent=2, sort_keys=True, default=str) + "\n")
        run.write_metrics(metrics)
    return out
