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
set (:meth:`RuleConfig.build`); every RuleConfig subclass defined in this module (above
:data:`HoldoutRule`) joins the ``holdout.rule`` union by itself. Adding a rule is writing one
CellSet and one RuleConfig here (and its README entry): the union, the grid, the leak check and
``mosaic splits`` need no change.
A :class:`Grid` evaluates the sets once; :meth:`Grid.status_of` is the one way to ask whether a
combination is seen, held out or excluded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, Union as TypingUnion

import numpy as np
from pydantic import Field, model_validator

from mosaic.schema import StrictModel

if TYPE_CHECKING:  # pragma: no cover
    from mosaic.spec import Spec

Value = str | int | float
Combination = tuple  # one value per grid concept, in grid order

SEEN, HELD_OUT, EXCLUDED = 0, 1, 2
STATUS_NAMES = {SEEN: "seen", HELD_OUT: "held_out", EXCLUDED: "excluded"}


# ----------------------------------------------------------------------------------------------
# cell sets: a rule's meaning, one membership method, composed by set algebra
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Axes:
    """The axes of a combination grid: its concepts and each concept's values (in order)."""

    concepts: tuple[str, ...]
    domains: tuple[tuple[Value, ...], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(d) for d in self.domains)

    def index_of(self, combination) -> tuple[int, ...] | None:
        """Value indices of a combination; None when it is not a cell of the grid (wrong length,
        a value outside its concept's domain). Values compare with ``==`` (``3 == 3.0``)."""
        if combination is None or len(combination) != len(self.domains):
            return None
        try:
            return tuple(d.index(v) for d, v in zip(self.domains, combination))
        except ValueError:
            return None

    def values_of(self, idx) -> Combination:
        """The combination at value indices ``idx``."""
        return tuple(self.domains[a][int(i)] for a, i in enumerate(idx))


class CellSet:
    """A set of cells (combinations) of one grid. Subclasses implement :meth:`contains` only.

    ``a | b``, ``a & b``, ``a - b`` and ``~a`` compose sets; :meth:`mask` evaluates a set over
    the whole grid.
    """

    axes: Axes

    def contains(self, combination: Combination) -> bool:
        """Whether ``combination`` (one value per grid concept, a cell of the grid) is in the set."""
        raise NotImplementedError

    def mask(self) -> np.ndarray:
        """bool array of the grid's shape: ``contains`` of every cell."""
        out = np.zeros(self.axes.shape, bool)
        for idx in np.ndindex(*self.axes.shape):
            out[idx] = self.contains(self.axes.values_of(idx))
        return out

    def __or__(self, other: CellSet) -> CellSet:
        return Union([self, other])

    def __and__(self, other: CellSet) -> CellSet:
        return Intersection([self, other])

    def __sub__(self, other: CellSet) -> CellSet:
        return Difference(self, other)

    def __invert__(self) -> CellSet:
        return Complement(self)


class _IndexSet(CellSet):
    """A set defined on value indices: subclasses implement ``contains_index`` (``contains`` maps
    values to indices; ``mask`` skips that mapping)."""

    def __init__(self, axes: Axes):
        self.axes = axes

    def contains(self, combination: Combination) -> bool:
        idx = self.axes.index_of(combination)
        return idx is not None and bool(self.contains_index(idx))

    def contains_index(self, idx: tuple[int, ...]) -> bool:
        """Membership of the cell at value indices ``idx`` (what a subclass implements)."""
        raise NotImplementedError

    def mask(self) -> np.ndarray:
        if getattr(self, "_mask", None) is None:  # a set does not change once built: evaluate it once
            self._mask = np.zeros(self.axes.shape, bool)
            for idx in np.ndindex(*self.axes.shape):
                self._mask[idx] = self.contains_index(idx)
        return self._mask.copy()


class Empty(_IndexSet):
    """No cell (``kind: none``)."""

    def contains_index(self, idx) -> bool:
        return False


class Diagonal(_IndexSet):
    """Cell (i, j) of a 2-D grid iff ``(i - j - offset) mod n_i < n`` (MOSAIC's held-out pairs)."""

    def __init__(self, axes: Axes, n: int, offset: int = 0):
        super().__init__(axes)
        self.n, self.offset = n, offset

    def contains_index(self, idx) -> bool:
        i, j = idx
        return (i - j - self.offset) % self.axes.shape[0] < self.n


class Uncovered(_IndexSet):
    """Cell (i, j) of a 2-D grid iff j is outside the cyclic band of ``k`` values starting at
    ``i + offset`` (the complement of the (n, k) coverage band)."""

    def __init__(self, axes: Axes, k: int, offset: int = 0):
        super().__init__(axes)
        self.k, self.offset = k, offset

    def contains_index(self, idx) -> bool:
        i, j = idx
        return not (j - i - self.offset) % self.axes.shape[1] < self.k


class Cells(_IndexSet):
    """An explicit set of cells, given as a bool mask of the grid's shape."""

    def __init__(self, axes: Axes, member: np.ndarray):
        super().__init__(axes)
        self.member = np.asarray(member, bool)

    def contains_index(self, idx) -> bool:
        return bool(self.member[idx])


class ObjectTypes(_IndexSet):
    """Cells whose objects are held-out object types: all of them (``every=True``) or at least
    one (``every=False``).

    Args:
        slot_axes: per object, the grid axes of its attributes (e.g. ``[[0, 1], [2, 3]]``).
        held_types: bool array over object types (the attribute domains of one slot).
    """

    def __init__(self, axes: Axes, slot_axes: list[list[int]], held_types: np.ndarray, every: bool):
        super().__init__(axes)
        self.slot_axes, self.held_types, self.every = slot_axes, held_types, every

    def contains_index(self, idx) -> bool:
        flags = (bool(self.held_types[tuple(idx[a] for a in s)]) for s in self.slot_axes)
        return all(flags) if self.every else any(flags)

    def mask(self) -> np.ndarray:  # vectorized contains_index (object grids reach 10^5 cells)
        grid_idx = np.indices(self.axes.shape, sparse=True)
        out = np.full(self.axes.shape, self.every)
        for s in self.slot_axes:
            flag = self.held_types[tuple(grid_idx[a] for a in s)]  # broadcasts over the other slots' axes
            out = (out & flag) if self.every else (out | flag)
        return out


class _Parts(CellSet):
    """Cells in any (``any_of``) or in every one of ``parts``."""

    any_of: ClassVar[bool]

    def __init__(self, parts: list[CellSet]):
        self.parts, self.axes = list(parts), parts[0].axes

    def contains(self, combination) -> bool:
        return (any if self.any_of else all)(p.contains(combination) for p in self.parts)

    def mask(self) -> np.ndarray:
        return (np.logical_or if self.any_of else np.logical_and).reduce([p.mask() for p in self.parts])


class Union(_Parts):
    """Cells in any of ``parts``."""

    any_of = True


class Intersection(_Parts):
    """Cells in every one of ``parts``."""

    any_of = False


class Difference(CellSet):
    """Cells in ``a`` and not in ``b``."""

    def __init__(self, a: CellSet, b: CellSet):
        self.a, self.b, self.axes = a, b, a.axes

    def contains(self, combination) -> bool:
        return self.a.contains(combination) and not self.b.contains(combination)

    def mask(self) -> np.ndarray:
        return self.a.mask() & ~self.b.mask()


class Complement(CellSet):
    """Cells of the grid not in ``a``."""

    def __init__(self, a: CellSet):
        self.a, self.axes = a, a.axes

    def contains(self, combination) -> bool:
        return self.axes.index_of(combination) is not None and not self.a.contains(combination)

    def mask(self) -> np.ndarray:
        return ~self.a.mask()


@dataclass
class Partition:
    """What a rule marks: ``held_out`` cells and ``excluded`` ones (object-level rules); the
    rest are seen. ``excluded`` never overlaps ``held_out`` once the grid is built."""

    held_out: CellSet
    excluded: CellSet


@dataclass
class RuleContext:
    """What a rule is built against: the grid's axes, the spec's seed, and the problem list that
    :meth:`RuleConfig.build` appends ``(field path, message)`` to."""

    axes: Axes
    seed: int
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.axes.shape

    @property
    def concepts(self) -> list[str]:
        return list(self.axes.concepts)

    def problem(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def nothing(self) -> Partition:
        return Partition(Empty(self.axes), Empty(self.axes))


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


# ----------------------------------------------------------------------------------------------
# grids
# ----------------------------------------------------------------------------------------------

@dataclass
class Grid:
    """A combination grid and the class of every cell.

    Attributes:
        concepts: the grid's concepts (axes, in order).
        domains: each concept's values.
        status: int8 array of shape ``[len(d) for d in domains]``: 0 seen, 1 held out, 2 excluded.
        problems: ``(field path, message)`` pairs found while building it.
    """

    concepts: list[str]
    domains: list[list[Value]]
    status: np.ndarray
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(d) for d in self.domains)

    @property
    def axes(self) -> Axes:
        return Axes(tuple(self.concepts), tuple(tuple(d) for d in self.domains))

    def status_of(self, combination) -> int | None:
        """The one membership question: ``SEEN``, ``HELD_OUT`` or ``EXCLUDED`` for a combination
        (one value per grid concept, in grid order; a mapping concept -> value is read in grid
        order), None when it is not a cell of the grid (a missing value, one outside its concept's
        domain, a wrong length)."""
        if isinstance(combination, Mapping):
            combination = self.combination(combination)
        if combination is None or len(combination) != len(self.domains):
            return None
        try:
            return int(self.status[self.index_of(combination)])
        except ValueError:
            return None

    def combination(self, values: Mapping) -> Combination:
        """The combination (grid values, in grid order) of a sample's concept values (None for a
        missing concept)."""
        return tuple(values.get(c) for c in self.concepts)

    def cells(self, cls: int) -> list[Combination]:
        """The combinations of one class (``SEEN``, ``HELD_OUT``, ``EXCLUDED``), in grid order."""
        return [self.values_of(idx) for idx in zip(*np.nonzero(self.status == cls))]

    def index_cells(self, cls: int) -> np.ndarray:
        """``[n, len(concepts)]`` int64 index tuples of one class, in grid order."""
        return np.argwhere(self.status == cls)

    def count(self, cls: int) -> int:
        """How many cells are of one class."""
        return int(np.sum(self.status == cls))

    def values_of(self, idx) -> Combination:
        return tuple(self.domains[a][int(i)] for a, i in enumerate(idx))

    def index_of(self, combination) -> tuple[int, ...]:
        """Value indices of a combination. Raises ValueError for a value outside its domain."""
        return tuple(self.domains[a].index(v) for a, v in enumerate(combination))

    @property
    def coverage(self) -> float:
        """Fraction of the grid's (non-excluded) cells that training sees."""
        usable = self.status.size - self.count(EXCLUDED)
        return float(self.count(SEEN)) / usable if usable else 0.0

    @property
    def connected(self) -> bool:
        """Whether the seen cells connect every value of every concept (see :func:`_connected`)."""
        return bool(_connected(self.index_cells(SEEN), self.shape))


def _connected(seen_idx: np.ndarray, shape: tuple[int, ...]) -> bool:
    """Whether the seen cells connect every value of every axis (hypergraph: a cell joins its values)."""
    offsets = np.cumsum((0,) + shape[:-1])
    parent = list(range(int(sum(shape))))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for cell in seen_idx:
        nodes = [int(offsets[a] + c) for a, c in enumerate(cell)]
        r0 = find(nodes[0])
        for n in nodes[1:]:
            parent[find(n)] = r0
    return len({find(a) for a in range(len(parent))}) == 1


def _every_value_seen(status: np.ndarray) -> list[tuple[int, int]]:
    """(axis, value index) pairs that no seen cell contains."""
    missing = []
    for axis in range(status.ndim):
        others = tuple(a for a in range(status.ndim) if a != axis)
        seen_any = np.any(status == SEEN, axis=others) if others else status == SEEN
        missing += [(axis, int(i)) for i in np.nonzero(~seen_any)[0]]
    return missing


def _random_holdout(shape, fraction: float, seed: int, path: str, problems) -> np.ndarray:
    n_cells = int(np.prod(shape))
    target = int(round(fraction * n_cells))
    max_out = n_cells - (int(sum(shape)) - len(shape) + 1) if len(shape) == 2 else None
    status = np.zeros(shape, np.int8)
    rng = np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(7_000_001,)))
    order = rng.permutation(n_cells)
    removed = 0
    for flat in order:
        if removed >= target:
            break
        idx = np.unravel_index(int(flat), shape)
        status[idx] = HELD_OUT
        if _every_value_seen(status) or not _connected(np.argwhere(status == SEEN), shape):
            status[idx] = SEEN
        else:
            removed += 1
    if removed < target:
        most = max_out if max_out is not None else removed
        problems.append((path, (
            f"fraction {fraction} holds out {target} of {n_cells} combinations, but at most {most} "
            f"(fraction <= {most / n_cells:.3f}) can be held out while every value stays in training "
            "and the seen combinations stay connected: lower the fraction"
        )))
    return status


def build_grid(spec: "Spec") -> Grid | None:
    """The combination grid of a spec's holdout (None without one). Problems are collected in
    ``grid.problems`` as ``(field path, message)`` (the spec validator raises them)."""
    h = spec.holdout
    if h is None:
        return None
    domains = [spec.concepts[c].domain for c in h.concepts]
    ctx = RuleContext(Axes(tuple(h.concepts), tuple(tuple(d) for d in domains)), spec.seed)
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


def grid_concepts(spec: "Spec") -> list[str]:
    """The concepts of the spec's combination grid ([] without a holdout)."""
    return list(spec.holdout.concepts) if spec.holdout is not None else []


def held_out_cells(spec: "Spec") -> set[tuple]:
    """The held-out combinations (tuples of values in ``grid_concepts`` order)."""
    g = spec.grid
    return set(g.cells(HELD_OUT)) if g is not None else set()


def combination_of(spec: "Spec", values: dict) -> tuple | None:
    """The combination (grid values) of a sample's concept values; None without a holdout."""
    return spec.grid.combination(values) if spec.grid is not None else None


def is_held_out(spec: "Spec", values: dict) -> bool:
    """Whether a sample's concept values form a held-out combination (:meth:`Grid.status_of`)."""
    return spec.grid is not None and spec.grid.status_of(values) == HELD_OUT


# ----------------------------------------------------------------------------------------------
# leak check
# ----------------------------------------------------------------------------------------------

def _key(combo) -> str:
    return "|".join(map(str, combo))


def leak_check(spec: "Spec", records_by_split: dict[str, list[dict]]) -> dict:
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
        checks["every_seen_combination_in_train"] = {"passed": not unseen, "missing": unseen[:50]}
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
