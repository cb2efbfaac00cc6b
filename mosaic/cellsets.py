"""Combination grids and cell sets: the set algebra that holdout rules (:mod:`mosaic.holdout`) are
built from.

A :class:`CellSet` is a small class with one membership method, ``contains(combination) -> bool``;
sets compose by set algebra (``a | b``, ``a & b``, ``a - b``, ``~a``: :class:`Union`,
:class:`Intersection`, :class:`Difference`, :class:`Complement`). A :class:`Grid` holds the class
(seen / held out / excluded) of every cell; :meth:`Grid.status_of` is the one way to ask about a
combination. Nothing here reads a spec: the rule configs are :mod:`mosaic.holdout_rules`, the
spec-level functions (``build_grid``, ``is_held_out``, the leak check) :mod:`mosaic.holdout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

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

