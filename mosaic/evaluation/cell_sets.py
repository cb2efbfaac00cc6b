"""Scores on a fixed set of combinations: a sweep's ``report.cells``.

A sweep that varies the holdout (MOSAIC's N held-out diagonals) changes *which* combinations its
``held_out.*`` columns average over: at N = 1 of MOSAIC's attribute grid they are the ten
same-colour pairs, the hardest cells, at N = 3 ordinary pairs join them, so the held-out mean can
rise with N while every cell falls. A cell set fixes the cells: ``report.cells`` names sets, each
written as a holdout rule (the cells that rule would hold out, :mod:`mosaic.holdout_rules`), and
every trial gets the accuracy over exactly those cells, whatever its own holdout:

    report:
      cells:
        same_colour: {kind: diagonal, n: 1}     # (c2 - c1) mod 10 = 0, held out at every N

gives the columns ``cells.same_colour.joint``, ``cells.same_colour.<concept>`` (accuracy),
``cells.same_colour.n`` (images scored) and ``cells.same_colour.held_out`` (the fraction of those
images held out in that trial: 1.0 when the set lies inside every trial's holdout), from the
trial's per-cell scores (``metrics.json`` ``scores.grid.cells``, :func:`mosaic.evaluation.metrics.score`),
each cell weighted by its images. A ``random`` rule is drawn with seed 0, the same set in every trial.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from mosaic.cellsets import Axes, RuleContext


def cell_set_mask(rule: Any, concepts: list[str], domains: list[list]) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """``(mask, problems)``: bool array of the grid's shape (``len(d)`` per concept in ``domains``),
    True on the cells ``rule`` (a holdout rule config) holds out, and the ``(field, message)``
    problems of the rule on that grid (e.g. a diagonal rule on a 3-concept grid); the mask is all
    False when there are problems."""
    ctx = RuleContext(Axes(tuple(concepts), tuple(tuple(d) for d in domains)), 0)
    part = rule.build(ctx, "rule")
    return part.held_out.mask(), list(ctx.problems)


def cell_set_problems(cells: Mapping[str, Any], concepts: list[str], domains: list[list]) -> list[str]:
    """The problems of ``report.cells`` on one spec's holdout grid, each ``report.cells.<name>...: message``,
    and a set that holds no cell of the grid."""
    out = []
    for name, rule in cells.items():
        mask, problems = cell_set_mask(rule, concepts, domains)
        out += [f"report.cells.{name}.{p.removeprefix('rule.')}: {m}" for p, m in problems]
        if not problems and not mask.any():
            out.append(f"report.cells.{name}: holds no combination of the grid {' x '.join(concepts)}: it would score nothing")
    return out


def _index(domain: list, value) -> int | None:
    for i, v in enumerate(domain):
        if v == value or str(v) == str(value):
            return i
    return None


def cell_set_columns(grid: Mapping | None, cells: Mapping[str, Any]) -> dict[str, float | int]:
    """The ``cells.<name>.*`` columns of one trial from its per-cell scores ``grid``
    (``{"concepts": [...], "domains": {concept: [values]}, "cells": [{"combination", "n",
    "joint_accuracy", "accuracy": {concept: float}, "status"}]}``); NaN accuracies and ``n`` 0
    where the trial scored no image of the set; no columns without a grid."""
    if not cells or not isinstance(grid, Mapping) or not grid.get("cells"):
        return {}
    concepts = list(grid.get("concepts") or [])
    domains = [list((grid.get("domains") or {}).get(c) or []) for c in concepts]
    out: dict[str, float | int] = {}
    for name, rule in cells.items():
        mask, problems = cell_set_mask(rule, concepts, domains)
        n = held = 0
        joint = 0.0
        acc: dict[str, float] = {}
        for cell in grid["cells"]:
            idx = tuple(_index(d, v) for d, v in zip(domains, cell.get("combination") or ()))
            k = int(cell.get("n") or 0)
            if problems or len(idx) != len(domains) or None in idx or not mask[idx] or not k:
                continue
            n += k
            held += k if cell.get("status") == "held_out" else 0
            joint += k * float(cell.get("joint_accuracy", math.nan))
            for c, a in (cell.get("accuracy") or {}).items():
                acc[c] = acc.get(c, 0.0) + k * float(a)
        base = f"cells.{name}"
        out[f"{base}.n"] = n
        out[f"{base}.joint"] = joint / n if n else math.nan
        out[f"{base}.held_out"] = held / n if n else math.nan
        for c in concepts:
            out[f"{base}.{c}"] = acc[c] / n if n and c in acc else math.nan
    return out


__all__ = ["cell_set_columns", "cell_set_mask", "cell_set_problems"]
