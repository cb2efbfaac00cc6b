"""The transformer family's plug-in to the run driver (:mod:`mosaic.lab.run`): build the task of
the objective, evaluate the trained weights on the test splits, and the rich tables printed at the
end of training."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from mosaic.lab.loop import Task
from mosaic.lab.run_folder import RunFolder
from mosaic.lab.run import Family, RunContext, pick_checkpoint
from mosaic.lab.run import run as run_with
from mosaic.lab.transformer.config import TransformerConfig
from mosaic.lab.transformer.models import load_weights
from mosaic.lab.transformer.tokens import SceneTokenizer
from mosaic.dataset import spec_of
from mosaic.diagnostics.analyze import analyze_after_training
from mosaic.diagnostics.applies import check_analysis
from mosaic.errors import ConfigError
from mosaic.evaluation.table import render_table
from mosaic.lab.transformer.binding_task import BindingTask
from mosaic.lab.transformer.classifier import ClassifierTask


def build_task(cfg: TransformerConfig, root: Path) -> Task:
    """The task of a config on a dataset: :class:`~mosaic.lab.transformer.classifier.ClassifierTask`
    or :class:`~mosaic.lab.transformer.binding_task.BindingTask`.

    Raises:
        ConfigError: a field that does not fit the dataset (unknown concept, token input for
            positions/relations, a patch that does not divide the image side, ...).
        TokenizationError: the spec has no token form (binding and token input need one).
    """

    spec = spec_of(root)
    need_tokens = cfg.objective == "binding" or cfg.input.kind == "tokens"
    tokenizer = SceneTokenizer.from_spec(spec) if need_tokens else None
    if cfg.objective == "classifier":
        return ClassifierTask(cfg, spec, root, tokenizer)
    return BindingTask(cfg, spec, root, tokenizer)


class TransformerFamily(Family):
    """ViTs and token encoders from scratch: the classifier and binding objectives."""

    def build_task(self, cfg: TransformerConfig, root: Path, run: RunFolder) -> Task:
        return build_task(cfg, root)

    def check(self, cfg: TransformerConfig, spec) -> None:
        """The model shape against the spec's image size, the token form and the classifier's
        concepts, before anything is written. Raises ConfigError (or TokenizationError) naming the field."""

        m, problems = cfg.model, []
        if m.width % m.heads:
            problems.append(("model.heads", f"{m.heads} must divide model.width {m.width}"))
        if cfg.input.kind == "image":
            size = cfg.input.image_size or spec.image.size
            if size % m.patch:
                problems.append(("model.patch", f"{m.patch} must divide the image size {size} (input.image_size or the spec's image.size)"))
            if m.stem == "conv" and m.patch % 2:
                problems.append(("model.patch", f"{m.patch} must be even with model.stem conv"))
        if cfg.objective == "classifier" and cfg.classifier.concepts:
            unknown = [c for c in cfg.classifier.concepts if c not in spec.concepts]
            if unknown:
                problems.append(("classifier.concepts", f"{unknown} are not concepts of the dataset's spec ({list(spec.concepts)})"))
        if problems:
            raise ConfigError(problems)
        if cfg.objective == "binding" or cfg.input.kind == "tokens":
            SceneTokenizer.from_spec(spec)

        check_analysis(cfg, "transformer", spec)  # analysis.what names only diagnostics that apply

    def describe(self, cfg: TransformerConfig, task: Task, status: str, ctx: RunContext) -> str:
        n_params = sum(p.numel() for p in task.model.parameters())
        what = f"{cfg.objective} on {cfg.input.kind}" + (f" ({cfg.model.stem} stem, patch {cfg.model.patch})" if cfg.input.kind == "image" else "")
        return f"{super().describe(cfg, task, status, ctx)}: {what}, {n_params / 1e6:.3f} M parameters, {len(task.train)} training scenes"

    def results(self, cfg: TransformerConfig, task: Task, ctx: RunContext) -> dict:
        """``objective``, ``input``, ``checkpoint`` and the task's evaluation (``table``, ...), and
        ``pictures`` (files written into the run folder)."""
        import torch

        checkpoint = pick_checkpoint(ctx.run, cfg.evaluation.checkpoint)
        model = task.model
        load_weights(model, ctx.run.best if checkpoint == "best" else ctx.run.final)
        model.to(ctx.accelerator.device)
        out = {"objective": cfg.objective, "input": cfg.input.kind, "checkpoint": checkpoint}
        with torch.no_grad():
            out.update(task.evaluate(model, ctx.accelerator.device))
        if hasattr(task, "write_pictures"):
            out["pictures"] = [str(p) for p in task.write_pictures(ctx.run.root)]
        if cfg.analysis is not None:  # the representation diagnostics on the evaluated weights

            out["analysis"] = analyze_after_training("transformer", cfg, task, ctx.run.root, ctx.accelerator.device, out, ctx.say)
        return out

    def finish(self, metrics: dict) -> dict:
        return jsonable(metrics)


def run_transformer(cfg: TransformerConfig, say: Callable[[str], None] = print, on_generate=None) -> dict:
    """Generate the dataset if needed, train (or resume) and evaluate on the test splits.

    Same run folders as the diffusion lab (:mod:`mosaic.lab.run_folder`): re-running a finished run
    (``RUN/DONE``) returns its ``metrics.json`` without doing anything; an interrupted one resumes
    from its latest checkpoint. Evaluation uses the ``final`` (EMA when enabled) weights, or the
    ``best`` on ``val`` with ``evaluation.checkpoint: best``.

    Returns:
        The run's metrics (also in ``RUN/metrics.json``): ``run``, ``name``, ``objective``,
        ``input``, ``dataset`` (fingerprint record), ``params``, ``train`` (the loop's summary),
        ``checkpoint``, ``table`` (the seen / held-out table, :mod:`mosaic.evaluation.table`:
        ``seen`` = ``test_id`` / ``held_out`` = ``test_ood``, or ``test`` without a holdout): for
        the classifier accuracy per concept, ``joint`` and ``n``, plus ``per_split`` and
        ``per_cell``; for binding ``object_accuracy``, ``concept_accuracy``, ``swap_accuracy`` and
        ``n``, plus ``binding`` (per test split, also by number of objects) and ``tau``; for both
        ``factorization`` (:func:`~mosaic.lab.transformer.factorization.linear_factorization`) and
        ``time_s``; ``already_done`` when nothing was left to do.
    Raises:
        ConfigError, DatasetError, SpecError, TrainingError, TokenizationError (all MosaicError).
    """
    return run_with(cfg, TransformerFamily(), say, on_generate)


def jsonable(x):
    """``x`` with NaN / inf as None, numpy scalars as Python numbers, tuples as lists, keys as str."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


BINDING_ROWS = {"object_accuracy": "object accuracy", "no_swap_fraction": "floor (no swap)",
                "object_accuracy_swap_scenes": "object acc. (swap scenes)", "concept_accuracy": "concept accuracy",
                "swap_accuracy": "swap accuracy"}


def report_tables(metrics: dict) -> list:
    """Rich tables of a transformer run's headline metrics (printed at the end of training): the
    seen / held-out table (:func:`mosaic.evaluation.table.render_table`) of the classifier's
    accuracy per concept or of binding's object / concept / swap accuracy, and the linear
    factorization."""
    from rich.table import Table

    tables = []
    table = metrics.get("table") or {}
    if metrics.get("objective") == "classifier" and table:
        tables.append(render_table(table, "concept accuracy (classifier heads)"))
    b = metrics.get("binding") or {}
    if metrics.get("objective") == "binding" and table:
        trained_concepts = b.get("concept_queries", True)
        rows = [k for k in BINDING_ROWS if trained_concepts or k != "concept_accuracy"]
        caption = None if trained_concepts else "concept accuracy left out: binding.concept_queries is false, so concept queries were never trained"
        tables.append(render_table(table, f"binding (min-positive > max-negative over all {b.get('object_types')} object types; "
                                          f"{b.get('train_object_types')} seen in train)", rows=rows, labels=BINDING_ROWS, caption=caption))
    fac = metrics.get("factorization")
    if fac:
        t = Table(title=f"linear factorization ({fac.get('embedding', '')}, n={fac['n']})")
        for col in ("R²", "cross-concept |cos|", "within-concept |cos|"):
            t.add_column(col, justify="right")
        t.add_row(*[f"{fac[k]:.3f}" if fac.get(k) is not None else "-" for k in ("r2", "cross_concept_abs_cos", "within_concept_abs_cos")])
        tables.append(t)
    return [t for t in tables if t is not None]
