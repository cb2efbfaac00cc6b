"""Held-out combinations: combination grids, holdout rules as set algebra, leak check.

A holdout names two or more concepts; the product of their domains is the **combination grid**.
A rule marks cells **held out** (only in ``test_ood``); the rest are **seen** (``train``, ``val``,
``test_id``). Object-level rules (binding) also mark **excluded** cells: scenes that mix seen and
held-out objects belong to no split. Which split shows which cell, and how often, is
:mod:`mosaic.splits`.

Rules (``kind`` in a spec's ``holdout.rule``):

- ``diagonal`` — MOSAIC's scheme (Jeong et al. 2026, ``data.py held_out_pairs``): cell (i, j) is
  held out iff ``(i - j - offset) mod n_i < n``, i indexing the first concept (n_i values). For
  count/position, concepts ``[color, count]`` give MOSAIC's ``(c - (k-1)) mod 10 < N``; for
  attribute, concepts ``[color2, color1]`` give its ``(c2 - c1) mod 10 < N``.
- ``coverage`` — k seen values of the second concept per value of the first, in a connected cyclic
  band ``(i, i+offset), (i, i+offset+1), ...`` (Uselis et al. 2025, the (n, k) grid).
- ``random`` — a seeded ``fraction`` of cells held out, keeping every value in training and the
  seen cells connected (each seen cell links its values; a connected graph makes a compositional
  solution identifiable). Greedy removal of non-bridge cells in a seeded order.
- ``explicit`` — a list of combinations.
- ``objects`` — object-level holdout (Uselis et al. 2026, binding): ``slots`` name the concepts of
  each object (e.g. ``[[color1, shape1], [color2, shape2]]``); a seeded ``fraction`` (or explicit
  ``objects``) of object types is held out; a cell is seen when all its objects are seen types,
  held out when all are held-out types, excluded otherwise.
- ``none``; ``union`` (``rules: [...]``) and ``difference`` (``rules: [a, b]``, a minus b).

Design (after Spriteworld's factor distributions, ``contains()``): a rule's meaning is a
:class:`CellSet`, a small class with one membership method, ``contains(combination) -> bool``;
sets compose by set algebra (``a | b``, ``a & b``, ``a - b``, ``~a``: :class:`Union`,
:class:`Intersection`, :class:`Difference`, :class:`Complement`). A rule's pydantic config (a
:class:`RuleConfig` subclass with a ``kind``) validates its fields against the grid and builds its
set (:meth:`RuleConfig.build`); every RuleConfig subclass defined in :mod:`mosaic.holdout_rules`
(above :data:`HoldoutRule`) joins the ``holdout.rule`` union by itself. Adding a rule is writing one
CellSet (in :mod:`mosaic.cellsets`) and one RuleConfig (in :mod:`mosaic.holdout_rules`), and its
entry in the docs' holdouts page: the union, the grid, the leak check and ``mosaic splits`` need
no change. A :class:`Grid` evaluates the sets once; :meth:`Grid.status_of` is the one way to ask
whether a combination is seen, held out or excluded.

Layering: :mod:`mosaic.cellsets` (sets, grids) and :mod:`mosaic.holdout_rules` (the configs) sit
below :mod:`mosaic.spec`, which validates a holdout with them; this module sits above it and holds
what takes a whole spec (:func:`build_grid`, :func:`is_held_out`, the leak check). Every name of
the two lower modules is importable from here.
"""


from __future__ import annotations

from mosaic.cellsets import (  # re-exported: mosaic.holdout is the public home of holdouts
    EXCLUDED, HELD_OUT, SEEN, STATUS_NAMES, Axes, CellSet, Cells, Combination, Complement, Diagonal, Difference,
    Empty, Grid, Intersection, ObjectTypes, Partition, RuleContext, Uncovered, Union, Value,
)
from mosaic.holdout_rules import (
    RULES, CoverageRule, DiagonalRule, DifferenceRule, ExplicitRule, Holdout, HoldoutRule, NoneRule, ObjectsRule,
    RandomRule, RuleConfig, UnionRule, grid_of,
)
from mosaic.spec import Spec

__all__ = [
    "EXCLUDED", "HELD_OUT", "SEEN", "STATUS_NAMES", "Axes", "CellSet", "Cells", "Combination", "Complement", "Diagonal",
    "Difference", "Empty", "Grid", "Intersection", "ObjectTypes", "Partition", "RuleContext", "Uncovered", "Union", "Value",
    "RULES", "CoverageRule", "DiagonalRule", "DifferenceRule", "ExplicitRule", "Holdout", "HoldoutRule", "NoneRule",
    "ObjectsRule", "RandomRule", "RuleConfig", "UnionRule", "grid_of",
    "build_grid", "grid_concepts", "held_out_cells", "combination_of", "is_held_out", "leak_check",
]


def build_grid(spec: Spec) -> Grid | None:
    """The combination grid of a spec's holdout (None without one). Problems are collected in
    ``grid.problems`` as ``(field path, message)`` (the spec validator raises them)."""
    h = spec.holdout
    if h is None:
        return None
    return grid_of(h, [spec.concepts[c].domain for c in h.concepts], spec.seed)


def grid_concepts(spec: Spec) -> list[str]:
    """The concepts of the spec's combination grid ([] without a holdout)."""
    return list(spec.holdout.concepts) if spec.holdout is not None else []


def held_out_cells(spec: Spec) -> set[tuple]:
    """The held-out combinations (tuples of values in ``grid_concepts`` order)."""
    g = spec.grid
    return set(g.cells(HELD_OUT)) if g is not None else set()


def combination_of(spec: Spec, values: dict) -> tuple | None:
    """The combination (grid values) of a sample's concept values; None without a holdout."""
    return spec.grid.combination(values) if spec.grid is not None else None


def is_held_out(spec: Spec, values: dict) -> bool:
    """Whether a sample's concept values form a held-out combination (:meth:`Grid.status_of`)."""
    return spec.grid is not None and spec.grid.status_of(values) == HELD_OUT


# ----------------------------------------------------------------------------------------------
# leak check
# ----------------------------------------------------------------------------------------------

def _key(combo) -> str:
    return "|".join(map(str, combo))


def leak_check(spec: Spec, records_by_split: dict[str, list[dict]]) -> dict:
    """Verify a generated dataset's splits from its metadata (the labels read back from scenes).

    Checks: no held-out combination in ``train``/``val``/``test_id``; only held-out ones in
    ``test_ood``; no excluded combination anywhere; every value of every concept in ``train``.
    Returns a JSON-ready report with ``passed``, each check, the seen / held-out / excluded cell
    lists, coverage and per-split per-cell counts.
    """
    checks: dict[str, dict] = {}
    train = records_by_split.get("train", [])
    missing = {}
    for c, concept in spec.concepts.items():
        present = {r["concepts"].get(c) for r in train}
        lost = [v for v in concept.domain if v not in present]
        if lost:
            missing[c] = lost
    checks["every_value_in_train"] = {"passed": not missing, "missing": missing} if train else {"passed": True, "skipped": "no train split"}
    report: dict = {"checks": checks}
    g = spec.grid
    if g is not None:
        counts: dict[str, dict[str, int]] = {}
        leaks: dict[str, list] = {}
        for split, recs in records_by_split.items():
            cnt: dict[str, int] = {}
            bad = []
            for r in recs:
                combo = g.combination(r["concepts"])
                cnt[_key(combo)] = cnt.get(_key(combo), 0) + 1
                if g.status_of(combo) != (HELD_OUT if split == "test_ood" else SEEN):
                    bad.append({"index": r["index"], "combination": list(combo)})
            counts[split] = cnt
            if bad:
                leaks[split] = bad[:20]
        checks["splits_respect_holdout"] = {"passed": not leaks, "violations": leaks}
        seen_in_train = {k for k in counts.get("train", {})}
        unseen = [list(c) for c in g.cells(SEEN) if _key(c) not in seen_in_train]
        checks["every_seen_combination_in_train"] = ({"passed": not unseen, "missing": unseen[:50]} if train
                                                     else {"passed": True, "skipped": "no train split"})
        report.update({
            "concepts": g.concepts,
            "coverage": g.coverage,
            "connected": g.connected,
            "seen": [list(c) for c in g.cells(SEEN)],
            "held_out": [list(c) for c in g.cells(HELD_OUT)],
            "excluded_count": g.count(EXCLUDED),
            "counts": counts,
        })
    report["passed"] = all(c["passed"] for c in checks.values())
    return report
