"""The seen / held-out table: one key schema, one builder, one printer.

Every model family reports its headline result in the same shape, stored under ``table`` in a
run's ``metrics.json`` and flattened into the ``seen.*`` / ``held_out.*`` columns of a sweep's
``results.csv`` (:func:`table_columns`)::

    table = {group: {metric: value, ..., "n": examples}}

- **group** — ``seen`` (test examples whose combination was in training: split ``test_id``),
  ``held_out`` (combinations held out of training: split ``test_ood``), or ``test`` (a dataset
  without a holdout); always in that order (:data:`GROUPS`). Which groups a family reports is
  the family's: the diffusion lab leaves out a group without images, the classifier reports one
  with ``n: 0`` and NaN values (``null`` in ``metrics.json``).
- **metric** — a fraction in [0, 1] (float; NaN / ``null`` when undefined):
  per-concept accuracy keyed by the concept's name plus ``joint`` (every concept right) for the
  diffusion lab (evaluator reading = intended value) and the classifier (head prediction =
  label); ``object_accuracy``, ``object_accuracy_swap_scenes``, ``no_swap_fraction``,
  ``swap_accuracy`` and ``concept_accuracy`` for binding
  (:func:`mosaic.lab.transformer.binding.binding_metrics`).
- **n** — the number of examples (int) the group's metrics are computed on.

Builders: :func:`build_table` (the one that fixes the schema), :func:`accuracy_row` (per-concept
and joint accuracy of predicted value indices), :func:`table_from_scores` (from an evaluator score
dict, :func:`mosaic.evaluation.metrics.score`) and :func:`table_from_splits` (from per-split rows).
Printer: :func:`render_table` / :func:`print_table` (rich: one column per group, one row per
metric, ``joint`` last).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

GROUPS = ("seen", "held_out", "test")
"""Table groups, in order."""

SPLIT_GROUP = {"test_id": "seen", "test_ood": "held_out", "test": "test"}
"""The group of each test split."""


def build_table(groups: Mapping[str, Mapping | None], keys: Iterable[str] | None = None) -> dict:
    """The table of one row per group: ``{group: {metric: value, ..., "n": int}}``.

    Args:
        groups: group name (one of :data:`GROUPS`) -> its row, or None to leave the group out.
        keys: the metrics to keep, in order (default: all of the row's, in its order).
    Returns:
        The rows of the groups present, in :data:`GROUPS` order.
    Raises:
        ValueError: a group not in :data:`GROUPS`, or a row without ``n``.
    """
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"table groups {unknown} are not among {list(GROUPS)}")
    out = {}
    for g in GROUPS:
        row = groups.get(g)
        if row is None:
            continue
        if "n" not in row:
            raise ValueError(f"table row {g!r} has no 'n' (number of examples)")
        out[g] = {k: row[k] for k in keys} if keys is not None else dict(row)
    return out


def accuracy_row(pred, target, names: list[str]) -> dict:
    """Per-concept and joint accuracy of predicted value indices.

    Args:
        pred: int ``[N, C]`` predicted value index per concept (torch tensor).
        target: int ``[N, C]`` true value index; ``-1`` (not shown) leaves the example out of that
            concept's accuracy and makes its joint wrong.
        names: the ``C`` concept names.
    Returns:
        ``{concept: accuracy, ..., "joint": accuracy, "n": N}`` (floats; NaN for a concept without a
        labelled example, and everywhere when ``N == 0``).
    """
    out = {"n": int(len(pred))}
    if not len(pred):
        return {**{c: float("nan") for c in names}, "joint": float("nan"), "n": 0}
    hit = pred == target
    for h, c in enumerate(names):
        ok = target[:, h] >= 0
        out[c] = float(hit[ok, h].float().mean()) if ok.any() else float("nan")
    out["joint"] = float(hit.all(1).float().mean())
    return out


def table_from_scores(scores: dict) -> dict:
    """The table of an evaluator score dict (:func:`mosaic.evaluation.metrics.score`): per group
    ``seen`` / ``held_out`` the concepts' ``accuracy``, ``joint`` (its ``joint_accuracy``) and
    ``n``; a group without images is left out."""
    rows = {}
    for g in ("seen", "held_out"):
        s = scores.get(g) or {}
        if s.get("n"):
            rows[g] = {**(s.get("accuracy") or {}), "joint": s.get("joint_accuracy"), "n": s["n"]}
    return build_table(rows)


def table_from_splits(per_split: Mapping[str, Mapping], keys: Iterable[str] | None = None) -> dict:
    """The table of rows per test split (``test_id`` -> seen, ``test_ood`` -> held_out, ``test``
    -> test; other splits are ignored), keeping ``keys``."""
    return build_table({SPLIT_GROUP[s]: row for s, row in per_split.items() if s in SPLIT_GROUP}, keys)


def check_row(check: Mapping | None) -> dict:
    """The evaluator's own accuracy on fresh ground-truth renders as a table row: per-concept
    accuracy, ``joint`` and ``n``, from :func:`mosaic.evaluation.check_evaluator`'s dict
    (``accuracy``, ``joint_accuracy``, ``n``) or from a dict already in row form (``joint``)."""
    check = check or {}
    joint = check.get("joint_accuracy", check.get("joint"))
    return {**(check.get("accuracy") or {}), "joint": joint, "n": check.get("n")}


def table_columns(table: Mapping | None, groups: Iterable[str] = ("seen", "held_out")) -> dict:
    """The table as flat results columns ``{"<group>.<metric>": value}``: the numeric metrics of
    ``groups`` (``n`` left out), as in a sweep's ``results.csv``."""
    out = {}
    for g in groups:
        for k, v in ((table or {}).get(g) or {}).items():
            if isinstance(v, (int, float)) and k != "n":
                out[f"{g}.{k}"] = v
    return out


def fmt_fraction(v) -> str:
    """``0.123`` -> ``"12.3%"``; None or NaN -> ``"-"``."""
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"


def render_table(table: Mapping, title: str, rows: Iterable[str] | None = None, labels: Mapping[str, str] | None = None,
                 caption: str | None = None):
    """A ``rich.table.Table`` of a table: one column per group (``seen (n=..)``, ``held-out (n=..)``,
    ``test (n=..)``), one row per metric (default: the first group's, ``joint`` last, in bold),
    values as percentages (:func:`fmt_fraction`). ``labels`` renames metric rows. None when the
    table is empty."""
    from rich.table import Table

    cols = [g for g in GROUPS if g in table]
    if not cols:
        return None
    labels = labels or {}
    t = Table(title=title, caption=caption)
    t.add_column("concept" if rows is None else "metric")
    for g in cols:
        t.add_column(f"{g.replace('_', '-')} (n={table[g]['n']})", justify="right")
    keys = list(rows) if rows is not None else [k for k in table[cols[0]] if k not in ("joint", "n")] + ["joint"]
    for k in keys:
        name = labels.get(k, k)
        t.add_row(f"[bold]{name}[/]" if k == "joint" else name, *[fmt_fraction(table[g].get(k)) for g in cols])
    return t


def print_table(table: Mapping, title: str = "accuracy of generated images (evaluator reading = intended value)",
                console=None, **kwargs) -> None:
    """Print :func:`render_table` (nothing for an empty table) on ``console`` (default: a new rich Console)."""
    t = render_table(table, title, **kwargs)
    if t is None:
        return
    if console is None:
        from rich.console import Console

        console = Console(emoji=False)
    console.print(t)


__all__ = ["table_problem", "GROUPS", "SPLIT_GROUP", "build_table", "accuracy_row", "table_from_scores", "table_from_splits", "check_row",
           "table_columns", "fmt_fraction", "render_table", "print_table"]


def table_problem(table) -> str | None:
    """Why a metrics.json ``table`` is not one mosaic wrote (:mod:`mosaic.evaluation.table`), or None:
    a group that is not a mapping, an ``n`` that is not a count, or a metric that is not a fraction in
    [0, 1], NaN or null (``Infinity``, ``1.5``, ``"0.9"`` would be reported, or silently left out)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        return f"table is a {type(table).__name__}, not a mapping"
    for g, row in table.items():
        if not isinstance(row, dict):
            return f"table.{g} is a {type(row).__name__}, not a mapping"
        for k, v in row.items():
            if k == "n":
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                    return f"table.{g}.n = {str(v)[:40]!r} is not a count"
            elif v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not (v != v or 0 <= v <= 1)):
                return f"table.{g}.{k} = {str(v)[:40]!r}"
    return None
