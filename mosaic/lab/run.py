"""The one run driver of the lab: a config in, a finished run folder out, for every model family.

:func:`run` does, in this order: the done-check (a finished run with the same config returns its
``metrics.json``), the ``Accelerator``, the dataset (resolved or generated on the main process
first, then one process per node), **seeding** (``torch.manual_seed(training.seed)``, once, right
before the task is built, so the initial weights follow ``training.seed``; a resumed run then
loads its checkpoint), the task (config errors found against the dataset leave the run folder
untouched), the run folder (:meth:`mosaic.lab.run_folder.RunFolder.open`), training
(:func:`mosaic.lab.loop.train`), the family's results (main process), ``metrics.json`` and
``DONE``.

A model family plugs in with a :class:`Family`: how to build its task, what to say about it, and
what to measure after training. The diffusion lab (:mod:`mosaic.lab.diffusion`) and the
transformer lab (:mod:`mosaic.lab.transformer`) are the two families.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from mosaic.errors import ConfigError, TrainingError
from mosaic.lab.config import RunConfig, config_diff
from mosaic.lab.loop import Task, make_accelerator, torch_threads_restored, train
from mosaic.lab.run_folder import RunFolder
from mosaic.locks import FolderLock
from mosaic.dataset import spec_of
from mosaic.evaluation.table import table_problem
from mosaic.io import loads_json, output_dir_problem
from mosaic.lab.data import load_dataset_spec, manifest_fingerprint, resolve_dataset


@dataclass
class RunContext:
    """What a family's hooks get besides the config and the task."""

    run: RunFolder
    root: Path
    accelerator: object
    say: Callable[[str], None]
    generate_s: float


class Family:
    """A model family's plug-in to :func:`run` (override :meth:`build_task` and :meth:`results`)."""

    def build_task(self, cfg: RunConfig, root: Path, run: RunFolder) -> Task:
        """The task of ``cfg`` on the dataset at ``root``, built with torch seeded. ``run`` is not
        open yet: nothing may be written into it. Raise ConfigError for a config that does not fit
        the dataset."""
        raise NotImplementedError

    def check(self, cfg: RunConfig, spec) -> None:
        """Check ``cfg`` against the dataset's spec (model shape against the image size, evaluator,
        concepts) before any dataset is generated or any folder created. Raise ConfigError naming
        the field. Default: nothing to check."""

    def opened(self, cfg: RunConfig, task: Task, ctx: RunContext) -> None:
        """Called once the run folder is open (every process), before training."""

    def describe(self, cfg: RunConfig, task: Task, status: str, ctx: RunContext) -> str:
        """The line said before training (``status``: ``new`` or ``resume``)."""
        return f"run {ctx.run.root} ({status}), dataset {ctx.root}"

    def results(self, cfg: RunConfig, task: Task, ctx: RunContext) -> dict:
        """The family's keys of ``metrics.json`` after training (main process only)."""
        raise NotImplementedError

    def finish(self, metrics: dict) -> dict:
        """The complete metrics as written to ``metrics.json`` and returned (default: as they are)."""
        return metrics


def finished_metrics(run: RunFolder, config: dict | None = None) -> dict | None:
    """A finished run's metrics with ``already_done``, or None. With ``config``, only when the
    run's config is the same (``out`` aside). Each field a rerun prints must be of its type (``mosaic
    train`` then derives its figures again, :func:`mosaic.evaluation.trial_scores.check_run_scores`).

    Raises:
        TrainingError: ``metrics.json`` damaged (a field of another type, a key given twice)."""
    if not (run.is_done() and run.metrics.is_file()):
        return None
    if config is not None:
        if [d for d in config_diff(run.read_config(), config) if d not in ("out", "dataset.path")]:
            return None
    metrics = run._read(run.metrics, loads_json)  # a key given twice is damage (attack round 26)
    bad = _finished_problem(metrics)
    if bad is not None:  # printed field by field as the run's result: another type was a traceback (attack round 26)
        raise TrainingError(f"{run.metrics} is damaged: {bad}; {rerun_fix(run.root)}")
    was, now = metrics.get("run"), str(run.root)
    if isinstance(was, str) and was != now:  # a copied or moved run folder: its own paths, never the original's
        metrics = _moved(metrics, was, now)
    out = (metrics.get("samples") or {}).get("out")
    if isinstance(out, str) and not Path(os.path.abspath(out)).is_relative_to(Path(os.path.abspath(run.root))):
        raise TrainingError(f"{run.metrics} is damaged: its samples.out {out!r} lies outside the run (a run's samples are "
                            f"written into it); {rerun_fix(run.root)}")
    return {**metrics, "already_done": True}


def rerun_fix(root: Path) -> str:
    """The fix for a finished run whose ``metrics.json`` is damaged or whose figures are not its own."""
    return (f"restore it, or delete {Path(root) / 'DONE'} and rerun the same command (training resumes from its last "
            "checkpoint, then samples and scores again)")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: the fields of a finished run's metrics.json that a rerun prints, and what each must be
_FINISHED_FIELDS = {
    "run": (lambda v: isinstance(v, str), "a path"),
    "train": (lambda v: isinstance(v, dict) and all(_num(v.get(k)) for k in ("steps", "train_time_s", "images_per_s", "final_loss"))
              and isinstance(v.get("device"), str) and _num(v.get("processes")), "a mapping of steps, times, device and final loss"),
    "time_s": (_num, "a number of seconds"),
    "evaluator_check": (lambda v: v is None or isinstance(v, dict), "a mapping or null"),
    "samples": (lambda v: isinstance(v, dict) and isinstance(v.get("out"), str), "a mapping naming its folder (out)"),
}


def _finished_problem(metrics: dict) -> str | None:
    """Why a finished run's ``metrics.json`` cannot be printed as its result, or None: each field a rerun prints
    (:data:`_FINISHED_FIELDS`; ``run`` and ``train`` required, the others where given) of its type, and the table
    one mosaic writes."""
    for key, (ok, what) in _FINISHED_FIELDS.items():
        if key in metrics or key in ("run", "train"):
            if not ok(metrics.get(key)):
                return f"its {key} is {json.dumps(metrics.get(key), default=str)[:60]}, not {what}"
    bad = table_problem(metrics.get("table"))
    return None if bad is None else f"its table: {bad}"


def _moved(value, was: str, now: str):
    """``value`` (JSON data) with every string that is the path ``was`` or lies under it rewritten under ``now``."""
    if isinstance(value, str):
        return now + value[len(was):] if value == was or value.startswith(was.rstrip("/") + "/") else value
    if isinstance(value, dict):
        return {k: _moved(v, was, now) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved(v, was, now) for v in value]
    return value


def dataset_spec(cfg: RunConfig):
    """The spec of the dataset a config names, without generating anything: ``dataset.spec`` with
    its overrides, or the spec recorded in the manifest of ``dataset.path``.

    Raises:
        SpecError: the spec is invalid. DatasetError: ``dataset.path`` is no complete dataset.
    """

    if cfg.dataset.spec is not None:
        return load_dataset_spec(cfg.dataset)

    return spec_of(resolve_dataset(cfg.dataset, generate=False))


#: the training split is held in memory as uint8; it may take at most this share of physical memory
MAX_MEMORY_SHARE = 0.5


def check_memory(cfg: RunConfig, spec) -> None:
    """Refuse a training split whose images (uint8, held in memory by the lab) would need more than
    :data:`MAX_MEMORY_SHARE` of this machine's physical memory, before anything is generated.

    Raises:
        ConfigError: naming the split size, the image size and the memory it needs.
    """
    import os

    n = spec.split_sizes().get("train", 0)
    need = n * spec.image.size ** 2 * 3
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: no bound known
        return
    if need > MAX_MEMORY_SHARE * have:
        field = "dataset.overrides" if cfg.dataset.spec is not None else "dataset.path"
        raise ConfigError([(field, f"the training split holds {n:,} images of {spec.image.size} px: {need / 2**30:.1f} GiB as uint8, "
                            f"more than {MAX_MEMORY_SHARE:.0%} of this machine's {have / 2**30:.1f} GiB; lower splits.train "
                            "or image.size, or use a machine with more memory")])


def check_outputs(cfg: RunConfig) -> None:
    """The run folder (``out``) must be (or be creatable as) a writable folder, and for a dataset
    generated from ``dataset.spec``, ``dataset.root`` a folder or creatable as one (an existing
    read-only root may hold the dataset already) (:func:`mosaic.io.output_dir_problem`): checked
    first, before a dataset is generated for a run that could not be written.

    Raises:
        ConfigError: naming the field and the path (under a file, ``/dev/null``, unwritable).
    """

    problems = []
    out = cfg.run_dir()
    if (p := output_dir_problem(out, run=True)) is not None:  # the run's own folder (a resume)
        problems.append(("out", f"the run folder {str(out)!r} {p}: give a folder (created if missing) in a writable place"))
    root = Path(cfg.dataset.root)  # an existing read-only root may hold the dataset already: only a non-folder is refused here
    if cfg.dataset.spec is not None and not root.is_dir() and (p := output_dir_problem(root)) is not None:
        problems.append(("dataset.root", f"{str(cfg.dataset.root)!r} {p}: give a folder (created if missing) in a writable place"))
    if problems:
        raise ConfigError(problems)


def check_batch(cfg: RunConfig, spec, processes: int = 1) -> None:
    """One global batch (``training.batch_size`` x ``processes``) must fit in the training split the
    spec gives (:class:`mosaic.lab.data.BatchPlan` drops the last partial batch of an epoch), checked
    before the dataset is generated.

    Raises:
        ConfigError: naming training.batch_size, the split size and the fix.
    """

    n = spec.split_sizes().get("train", 0)
    need = cfg.training.batch_size * processes
    if n < need:
        field = "dataset.overrides" if cfg.dataset.spec is not None else "dataset.path"
        more = f" x {processes} processes = {need}" if processes > 1 else ""
        raise ConfigError([("training.batch_size", f"{cfg.training.batch_size}{more} is more than the {n} samples of the "
                            f"training split (splits.train of the dataset's spec; see {field}): lower training.batch_size "
                            f"to at most {max(n // processes, 1)}, or raise splits.train")])


def pick_checkpoint(run: RunFolder, wanted: str) -> str:
    """``wanted`` (``best`` or ``final``), or ``final`` when no best weights were selected."""
    return wanted if wanted == "final" or run.best.is_dir() else "final"


def run(cfg: RunConfig, family: Family, say: Callable[[str], None] = print, on_generate=None) -> dict:
    """Run ``cfg`` end to end with ``family`` (see the module docstring); ``training.threads``
    applies to this run only.

    Returns:
        The run's metrics (also in ``RUN/metrics.json``): ``run``, ``name``, ``dataset``
        (fingerprint record), ``params``, ``train`` (:func:`mosaic.lab.loop.train`'s summary),
        the family's keys and ``time_s``; ``already_done`` when nothing was left to do; on a
        non-main process of a multi-process run only ``train``.
    Raises:
        ConfigError, DatasetError, SpecError, TrainingError (all MosaicError).
    """

    with torch_threads_restored():
        return _run(cfg, family, say, on_generate)


def _run(cfg: RunConfig, family: Family, say, on_generate) -> dict:
    t_start = time.perf_counter()
    run_folder = RunFolder(cfg.run_dir())
    config = cfg.model_dump(mode="json")
    done = finished_metrics(run_folder, config)  # cheap path: a finished run with the same config is a no-op
    if done is not None:
        return done
    check_outputs(cfg)  # a run that could not be written fails before its dataset is generated
    spec = dataset_spec(cfg)
    check_memory(cfg, spec)
    check_batch(cfg, spec)
    family.check(cfg, spec)  # the whole config against the spec: nothing is generated or written before
    accelerator = make_accelerator(cfg.training, run_folder.root)
    check_batch(cfg, spec, accelerator.num_processes)
    t0 = time.perf_counter()
    # the main process generates first; then one process per node (a node without the shared file system makes its own copy)
    with accelerator.main_process_first(), accelerator.local_main_process_first():
        root = resolve_dataset(cfg.dataset, generate=True, on_progress=on_generate if accelerator.is_main_process else None)
    ctx = RunContext(run_folder, root, accelerator, say, time.perf_counter() - t0)
    torch.manual_seed(cfg.training.seed)  # the one seeding point: the initial weights follow training.seed
    task = family.build_task(cfg, root, run_folder)  # before the run folder is touched: config errors leave nothing behind
    # one process trains in a run folder at a time: a second `mosaic train` on it stops here, naming the first
    lock = FolderLock(run_folder.root, TrainingError, "run folder") if accelerator.is_main_process else contextlib.nullcontext()
    with lock:
        return _train_locked(cfg, family, say, run_folder, config, root, accelerator, task, ctx, t_start)


def _train_locked(cfg, family, say, run_folder, config, root, accelerator, task, ctx, t_start) -> dict:
    with accelerator.main_process_first():
        status = run_folder.open(config, root, accelerator.is_main_process)
    if status == "done" and run_folder.metrics.is_file():
        return finished_metrics(run_folder)
    family.opened(cfg, task, ctx)
    say(family.describe(cfg, task, status, ctx))
    summary = train(task, cfg.training, run_folder, accelerator, on_log=say)
    if not accelerator.is_main_process:
        return {"train": summary}
    metrics = {"run": str(run_folder.root), "name": cfg.name, "dataset": manifest_fingerprint(root),
               "params": sum(p.numel() for p in task.model.parameters()), "train": summary}
    metrics.update(family.results(cfg, task, ctx))
    metrics["time_s"] = time.perf_counter() - t_start
    metrics = family.finish(metrics)
    run_folder.write_metrics(metrics)
    run_folder.mark_done()
    return metrics
