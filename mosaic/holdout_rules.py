"""Holdout rule configs: the ``holdout.rule`` section of a spec, one :class:`RuleConfig` class per
``kind`` (the kinds are described in :mod:`mosaic.holdout`), and the ``holdout:`` section itself.

A rule's config validates its fields against the grid and builds its :class:`~mosaic.cellsets.CellSet`
(:meth:`RuleConfig.build`); every RuleConfig subclass defined in this module (above
:data:`HoldoutRule`) joins the ``holdout.rule`` union by itself. :func:`grid_of` evaluates a
holdout on its concepts' domains into a :class:`~mosaic.cellsets.Grid` (the spec validator calls
it; :func:`mosaic.holdout.build_grid` is the same from a spec).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union as TypingUnion

import numpy as np
from pydantic import Field, model_validator

from mosaic.cellsets import (
    EXCLUDED, HELD_OUT, Axes, CellSet, Cells, Diagonal, Empty, Grid, ObjectTypes, Partition, RuleContext, Uncovered,
    Union, Value, _every_value_seen, _random_holdout,
)
from mosaic.schema import StrictModel

# ----------------------------------------------------------------------------------------------
# rule configs: the ``holdout.rule`` section, one class per kind
# ----------------------------------------------------------------------------------------------

RULES: list[type[RuleConfig]] = []


class RuleConfig(StrictModel):
    """A rule's config (``kind`` plus its fields). Subclasses define ``kind: Literal[...]`` and
    :meth:`build`; defining one in this module, above :data:`HoldoutRule`, registers it in the
    ``holdout.rule`` union (:data:`RULES`, in definition order)."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        RULES.append(cls)

    def build(self, ctx: RuleContext, path: str) -> Partition:
        """The rule's cells on ``ctx.axes``. A field that does not fit the grid appends
        ``(field path, message)`` to ``ctx.problems`` (the spec validator raises them) and the rule
        marks nothing."""
        raise NotImplementedError

    def _two_concepts(self, ctx: RuleContext, path: str) -> bool:
        if len(ctx.shape) != 2:
            ctx.problem(f"{path}.kind", f"a {self.kind} rule needs exactly 2 concepts, the holdout has {len(ctx.shape)}: use random, explicit or objects")
            return False
        return True


def _held(cells: CellSet) -> Partition:
    return Partition(cells, Empty(cells.axes))


class DiagonalRule(RuleConfig):
    kind: Literal["diagonal"]
    n: int = Field(ge=0, description="number of held-out diagonals (MOSAIC's N)")
    offset: int = 0

    def build(self, ctx, path):
        if not self._two_concepts(ctx, path):
            return ctx.nothing()
        n_i = ctx.shape[0]
        if self.n >= n_i:
            ctx.problem(f"{path}.n", f"n = {self.n} >= the grid's side {n_i} ({ctx.concepts[0]} has {n_i} values): it would hold out every combination; use n <= {n_i - 1}")
            return ctx.nothing()
        return _held(Diagonal(ctx.axes, self.n, self.offset))


class CoverageRule(RuleConfig):
    kind: Literal["coverage"]
    k: int = Field(description="seen values of the second concept per value of the first")
    offset: int = 0

    def build(self, ctx, path):
        if not self._two_concepts(ctx, path):
            return ctx.nothing()
        n_j = ctx.shape[1]
        if not 1 <= self.k <= n_j:
            ctx.problem(f"{path}.k", f"coverage k = {self.k} is out of range: {ctx.concepts[1]} has {n_j} values, use 1 <= k <= {n_j}")
            return ctx.nothing()
        return _held(Uncovered(ctx.axes, self.k, self.offset))


class RandomRule(RuleConfig):
    kind: Literal["random"]
    fraction: float = Field(ge=0, lt=1, description="fraction of the grid's cells held out")
    seed: int | None = Field(None, description="defaults to the spec's seed")

    def build(self, ctx, path):
        status = _random_holdout(ctx.shape, self.fraction, ctx.seed if self.seed is None else self.seed, f"{path}.fraction", ctx.problems)
        return _held(Cells(ctx.axes, status == HELD_OUT))


class ExplicitRule(RuleConfig):
    kind: Literal["explicit"]
    combinations: list[list[Value]] = Field(min_length=1)

    def build(self, ctx, path):
        member = np.zeros(ctx.shape, bool)
        for n, combo in enumerate(self.combinations):
            if len(combo) != len(ctx.shape):
                ctx.problem(f"{path}.combinations[{n}]", f"{combo} has {len(combo)} values; the grid {ctx.concepts} needs {len(ctx.shape)}")
                continue
            idx = ctx.axes.index_of(combo)
            if idx is None:
                bad = [f"{ctx.concepts[a]}={v!r}" for a, v in enumerate(combo) if v not in ctx.axes.domains[a]]
                ctx.problem(f"{path}.combinations[{n}]", f"{', '.join(bad)} not in the concept's values")
                continue
            member[idx] = True
        return _held(Cells(ctx.axes, member))


class ObjectsRule(RuleConfig):
    kind: Literal["objects"]
    slots: list[list[str]] = Field(min_length=1, description="concepts of each object, e.g. [[color1, shape1], [color2, shape2]]")
    fraction: float | None = Field(None, gt=0, lt=1, description="fraction of object types held out")
    objects: list[list[Value]] | None = Field(None, description="explicit held-out object types")
    seed: int | None = None

    @model_validator(mode="after")
    def _one(self):
        if (self.fraction is None) == (self.objects is None):
            raise ValueError("give exactly one of fraction, objects")
        return self

    def build(self, ctx, path):
        slots, concepts, domains = self.slots, ctx.concepts, ctx.axes.domains
        width = len(slots[0])
        axes = []
        for n, slot in enumerate(slots):
            if len(slot) != width:
                ctx.problem(f"{path}.slots[{n}]", f"every slot needs the same number of concepts ({width}), got {slot}")
                return ctx.nothing()
            for c in slot:
                if c not in concepts:
                    ctx.problem(f"{path}.slots[{n}]", f"concept {c!r} is not in holdout.concepts {concepts}: add it there")
                    return ctx.nothing()
            axes.append([concepts.index(c) for c in slot])
        if sorted(a for s in axes for a in s) != list(range(len(concepts))):
            ctx.problem(f"{path}.slots", f"the slots must use every concept of holdout.concepts exactly once, got {slots}")
            return ctx.nothing()
        obj_domains = [list(domains[a]) for a in axes[0]]
        for n, s in enumerate(axes[1:], start=1):
            if [list(domains[a]) for a in s] != obj_domains:
                ctx.problem(f"{path}.slots[{n}]", f"slot {slots[n]} has other values than slot {slots[0]}: objects of every slot must share one set of types")
                return ctx.nothing()
        held_types = self._held_types(ctx, path, obj_domains)
        if not held_types.any():
            ctx.problem(f"{path}", f"no object type is held out (fraction {self.fraction} of {held_types.size} types rounds to 0): raise the fraction")
        every = ObjectTypes(ctx.axes, axes, held_types, every=True)
        return Partition(every, ObjectTypes(ctx.axes, axes, held_types, every=False) - every)

    def _held_types(self, ctx, path, obj_domains) -> np.ndarray:
        """bool ``[n values of each attribute]``: the held-out object types."""
        obj_shape = tuple(len(d) for d in obj_domains)
        held_types = np.zeros(obj_shape, bool)
        seed = ctx.seed if self.seed is None else self.seed
        if self.objects is not None:
            for n, o in enumerate(self.objects):
                try:
                    held_types[tuple(obj_domains[a].index(v) for a, v in enumerate(o))] = True
                except (ValueError, IndexError):
                    ctx.problem(f"{path}.objects[{n}]", f"{o} is not an object type of {self.slots[0]} (values {obj_domains})")
        elif len(obj_shape) >= 2:
            held_types = _random_holdout(obj_shape, self.fraction, seed, f"{path}.fraction", ctx.problems) == HELD_OUT
        else:
            n_types = int(np.prod(obj_shape))
            rng = np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(7_000_002,)))
            held_types.flat[rng.permutation(n_types)[:int(round(self.fraction * n_types))]] = True
        return held_types


class NoneRule(RuleConfig):
    kind: Literal["none"]

    def build(self, ctx, path):
        return ctx.nothing()


class UnionRule(RuleConfig):
    kind: Literal["union"]
    rules: list["HoldoutRule"] = Field(min_length=1)

    def build(self, ctx, path):
        parts = [r.build(ctx, f"{path}.rules[{n}]") for n, r in enumerate(self.rules)]
        held = Union([p.held_out for p in parts])
        return Partition(held, Union([p.excluded for p in parts]) - held)


class DifferenceRule(RuleConfig):
    kind: Literal["difference"]
    rules: list["HoldoutRule"] = Field(min_length=2, max_length=2)

    def build(self, ctx, path):
        a, b = (r.build(ctx, f"{path}.rules[{n}]") for n, r in enumerate(self.rules))
        held = a.held_out - b.held_out
        return Partition(held, (a.excluded | b.excluded) - held)


#: The ``holdout.rule`` section: one of the registered :class:`RuleConfig` kinds.
HoldoutRule = Annotated[TypingUnion[tuple(RULES)], Field(discriminator="kind")]
for _rule in RULES:
    _rule.model_rebuild()


class Holdout(StrictModel):
    """``holdout:`` section of a spec: the grid's ``concepts`` (2+) and a ``rule``."""

    concepts: list[str] = Field(min_length=2)
    rule: HoldoutRule



def grid_of(holdout: Holdout, domains: list[list[Value]], seed: int) -> Grid:
    """The combination grid of ``holdout`` over its concepts' ``domains`` (in ``holdout.concepts``
    order), the rule seeded by ``seed`` (the spec's). Problems are collected in ``grid.problems``
    as ``(field path, message)`` (the spec validator raises them)."""
    h = holdout
    ctx = RuleContext(Axes(tuple(h.concepts), tuple(tuple(d) for d in domains)), seed)
    part = h.rule.build(ctx, "holdout.rule")
    held, excl = part.held_out.mask(), part.excluded.mask()
    status = np.zeros(ctx.shape, np.int8)
    status[excl] = EXCLUDED
    status[held] = HELD_OUT
    problems = ctx.problems
    grid = Grid(list(h.concepts), domains, status, problems)
    if not problems:
        for axis, i in _every_value_seen(status):
            problems.append(("holdout.rule", (
                f"value {domains[axis][i]!r} of concept {h.concepts[axis]!r} would never occur in training "
                "(every combination holding it is held out or excluded): hold out fewer combinations"
            )))
    return grid
