"""Held-out combinations: combination grids, holdout rules as set algebra, split plans, leak check.

A holdout names two or more concepts; the product of their domains is the **combination grid**.
A rule marks cells **held out** (only in ``test_ood``); the rest are **seen** (``train``, ``val``,
``test_id``). Object-level rules (binding) also mark **excluded** cells: scenes that mix seen and
held-out objects belong to no split.

Rules (``kind``):

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
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:  # pragma: no cover
    from mosaic.spec import Spec

Value = str | int | float


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DiagonalRule(_Base):
    kind: Literal["diagonal"]
    n: int = Field(ge=0, description="number of held-out diagonals (MOSAIC's N)")
    offset: int = 0


class CoverageRule(_Base):
    kind: Literal["coverage"]
    k: int = Field(description="seen values of the second concept per value of the first")
    offset: int = 0


class RandomRule(_Base):
    kind: Literal["random"]
    fraction: float = Field(ge=0, lt=1, description="fraction of the grid's cells held out")
    seed: int | None = Field(None, description="defaults to the spec's seed")


class ExplicitRule(_Base):
    kind: Literal["explicit"]
    combinations: list[list[Value]] = Field(min_length=1)


class ObjectsRule(_Base):
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


class NoneRule(_Base):
    kind: Literal["none"]


class UnionRule(_Base):
    kind: Literal["union"]
    rules: list["HoldoutRule"] = Field(min_length=1)


class DifferenceRule(_Base):
    kind: Literal["difference"]
    rules: list["HoldoutRule"] = Field(min_length=2, max_length=2)


HoldoutRule = Annotated[
    Union[DiagonalRule, CoverageRule, RandomRule, ExplicitRule, ObjectsRule, NoneRule, UnionRule, DifferenceRule],
    Field(discriminator="kind"),
]
UnionRule.model_rebuild()
DifferenceRule.model_rebuild()


class Holdout(_Base):
    """``holdout:`` section of a spec: the grid's ``concepts`` (2+) and a ``rule``."""

    concepts: list[str] = Field(min_length=2)
    rule: HoldoutRule


# ----------------------------------------------------------------------------------------------
# grids
# ----------------------------------------------------------------------------------------------

SEEN, HELD_OUT, EXCLUDED = 0, 1, 2


@dataclass
class Grid:
    """A combination grid and the class of every cell.

    Attributes:
        concepts: the grid's concepts (axes, in order).
        domains: each concept's values.
        status: int8 array of shape ``[len(d) for d in domains]``: 0 seen, 1 held out, 2 excluded.
    """

    concepts: list[str]
    domains: list[list[Value]]
    status: np.ndarray
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(d) for d in self.domains)

    def cells(self, cls: int) -> list[tuple[Value, ...]]:
        """The combinations of one class (``SEEN``, ``HELD_OUT``, ``EXCLUDED``), in grid order."""
        return [self.values_of(idx) for idx in zip(*np.nonzero(self.status == cls))]

    def index_cells(self, cls: int) -> np.ndarray:
        """``[n, len(concepts)]`` int64 index tuples of one class, in grid order."""
        return np.argwhere(self.status == cls)

    def values_of(self, idx) -> tuple[Value, ...]:
        return tuple(self.domains[a][int(i)] for a, i in enumerate(idx))

    def index_of(self, combination) -> tuple[int, ...]:
        return tuple(self.domains[a].index(v) for a, v in enumerate(combination))

    def status_of(self, combination) -> int:
        return int(self.status[self.index_of(combination)])

    @property
    def coverage(self) -> float:
        """Fraction of the grid's (non-excluded) cells that training sees."""
        usable = int(np.sum(self.status != EXCLUDED))
        return float(np.sum(self.status == SEEN)) / usable if usable else 0.0


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


def _apply(rule, shape: tuple[int, ...], grid_concepts: list[str], domains, seed: int, path: str, problems) -> tuple[np.ndarray, np.ndarray]:
    """(held-out mask, excluded mask), bool arrays of ``shape``."""
    held = np.zeros(shape, bool)
    excl = np.zeros(shape, bool)
    kind = rule.kind
    if kind == "none":
        return held, excl
    if kind in ("diagonal", "coverage"):
        if len(shape) != 2:
            problems.append((f"{path}.kind", f"a {kind} rule needs exactly 2 concepts, the holdout has {len(shape)}: use random, explicit or objects"))
            return held, excl
        n_i, n_j = shape
        i = np.arange(n_i)[:, None]
        j = np.arange(n_j)[None, :]
        if kind == "diagonal":
            if rule.n >= n_i:
                problems.append((f"{path}.n", f"n = {rule.n} >= the grid's side {n_i} ({grid_concepts[0]} has {n_i} values): it would hold out every combination; use n <= {n_i - 1}"))
                return held, excl
            held = ((i - j - rule.offset) % n_i) < rule.n
        else:
            if not 1 <= rule.k <= n_j:
                problems.append((f"{path}.k", f"coverage k = {rule.k} is out of range: {grid_concepts[1]} has {n_j} values, use 1 <= k <= {n_j}"))
                return held, excl
            held = ~(((j - i - rule.offset) % n_j) < rule.k)
        return held, excl
    if kind == "random":
        status = _random_holdout(shape, rule.fraction, seed if rule.seed is None else rule.seed, f"{path}.fraction", problems)
        return status == HELD_OUT, excl
    if kind == "explicit":
        for n, combo in enumerate(rule.combinations):
            if len(combo) != len(shape):
                problems.append((f"{path}.combinations[{n}]", f"{combo} has {len(combo)} values; the grid {grid_concepts} needs {len(shape)}"))
                continue
            try:
                held[tuple(domains[a].index(v) for a, v in enumerate(combo))] = True
            except ValueError:
                bad = [f"{grid_concepts[a]}={v!r}" for a, v in enumerate(combo) if v not in domains[a]]
                problems.append((f"{path}.combinations[{n}]", f"{', '.join(bad)} not in the concept's values"))
        return held, excl
    if kind == "objects":
        return _objects(rule, shape, grid_concepts, domains, seed, path, problems)
    if kind in ("union", "difference"):
        parts = [_apply(r, shape, grid_concepts, domains, seed, f"{path}.rules[{n}]", problems) for n, r in enumerate(rule.rules)]
        if kind == "union":
            held = np.logical_or.reduce([p[0] for p in parts])
        else:
            held = parts[0][0] & ~parts[1][0]
        excl = np.logical_or.reduce([p[1] for p in parts]) & ~held
        return held, excl
    raise AssertionError(kind)


def _objects(rule: ObjectsRule, shape, grid_concepts, domains, seed, path, problems):
    held = np.zeros(shape, bool)
    excl = np.zeros(shape, bool)
    slots = rule.slots
    width = len(slots[0])
    axes = []
    for n, slot in enumerate(slots):
        if len(slot) != width:
            problems.append((f"{path}.slots[{n}]", f"every slot needs the same number of concepts ({width}), got {slot}"))
            return held, excl
        for c in slot:
            if c not in grid_concepts:
                problems.append((f"{path}.slots[{n}]", f"concept {c!r} is not in holdout.concepts {grid_concepts}: add it there"))
                return held, excl
        axes.append([grid_concepts.index(c) for c in slot])
    flat = [a for s in axes for a in s]
    if sorted(flat) != list(range(len(grid_concepts))):
        problems.append((f"{path}.slots", f"the slots must use every concept of holdout.concepts exactly once, got {slots}"))
        return held, excl
    obj_domains = [domains[a] for a in axes[0]]
    for n, s in enumerate(axes[1:], start=1):
        if [domains[a] for a in s] != obj_domains:
            problems.append((f"{path}.slots[{n}]", f"slot {slots[n]} has other values than slot {slots[0]}: objects of every slot must share one set of types"))
            return held, excl
    obj_shape = tuple(len(d) for d in obj_domains)
    n_types = int(np.prod(obj_shape))
    held_types = np.zeros(obj_shape, bool)
    if rule.objects is not None:
        for n, o in enumerate(rule.objects):
            try:
                held_types[tuple(obj_domains[a].index(v) for a, v in enumerate(o))] = True
            except (ValueError, IndexError):
                problems.append((f"{path}.objects[{n}]", f"{o} is not an object type of {slots[0]} (values {obj_domains})"))
    else:
        if len(obj_shape) >= 2:
            status = _random_holdout(obj_shape, rule.fraction, seed if rule.seed is None else rule.seed, f"{path}.fraction", problems)
            held_types = status == HELD_OUT
        else:
            rng = np.random.default_rng(np.random.SeedSequence(entropy=seed if rule.seed is None else rule.seed, spawn_key=(7_000_002,)))
            k = int(round(rule.fraction * n_types))
            held_types.flat[rng.permutation(n_types)[:k]] = True
    if not held_types.any():
        problems.append((f"{path}", f"no object type is held out (fraction {rule.fraction} of {n_types} types rounds to 0): raise the fraction"))
    for idx in itertools.product(*[range(s) for s in shape]):
        flags = [bool(held_types[tuple(idx[a] for a in s)]) for s in axes]
        if all(flags):
            held[idx] = True
        elif any(flags):
            excl[idx] = True
    return held, excl


def build_grid(spec: "Spec") -> Grid | None:
    """The combination grid of a spec's holdout (None without one). Problems are collected in
    ``grid.problems`` as ``(field path, message)`` (the spec validator raises them)."""
    h = spec.holdout
    if h is None:
        return None
    problems: list[tuple[str, str]] = []
    domains = [spec.concepts[c].domain for c in h.concepts]
    shape = tuple(len(d) for d in domains)
    held, excl = _apply(h.rule, shape, list(h.concepts), domains, spec.seed, "holdout.rule", problems)
    status = np.zeros(shape, np.int8)
    status[excl] = EXCLUDED
    status[held] = HELD_OUT
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
    if spec.holdout is None:
        return None
    return tuple(values.get(c) for c in spec.holdout.concepts)


def is_held_out(spec: "Spec", values: dict) -> bool:
    """Whether a sample's concept values form a held-out combination."""
    combo = combination_of(spec, values)
    if combo is None or any(v is None for v in combo):
        return False
    try:
        return spec.grid.status_of(combo) == HELD_OUT
    except ValueError:
        return False


# ----------------------------------------------------------------------------------------------
# split plans: which combination each sample of a split shows
# ----------------------------------------------------------------------------------------------

def apportion(total: int, weights: np.ndarray, cells: np.ndarray | None = None) -> np.ndarray:
    """Integer quotas summing to ``total``, proportional to ``weights`` (largest remainder).

    Leftover samples go to the largest remainders; among equal remainders, when ``cells``
    (``[n, k]`` value indices) is given, to the cell whose values are least represented so far,
    so a split's marginals stay as even as the grid allows; otherwise by a golden-ratio sequence
    over the item order.
    """
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    exact = total * w
    q = np.floor(exact).astype(np.int64)
    rest = total - int(q.sum())
    if not rest:
        return q
    remainder = np.round(exact - q, 9)
    spread = (np.arange(len(w)) * 0.6180339887498949) % 1.0
    if cells is None or len(w) > 20_000:
        q[np.lexsort((spread, -remainder))[:rest]] += 1
        return q
    import heapq

    k = cells.shape[1]
    marg = [np.bincount(cells[:, a], weights=q, minlength=int(cells[:, a].max()) + 1).tolist() for a in range(k)]
    rows = cells.tolist()

    def load(i: int) -> float:
        return sum(marg[a][rows[i][a]] for a in range(k))

    # Greedy: within the largest remainder left, the cell whose values are least represented so far
    # (then the spread). Loads only grow, so a heap with lazy re-keying pops the true minimum.
    order = np.argsort(-remainder, kind="stable")
    start = 0
    while rest > 0:
        top = remainder[order[start]]
        end = start
        while end < len(order) and remainder[order[end]] == top:
            end += 1
        heap = [(load(int(i)), float(spread[i]), int(i)) for i in order[start:end]]
        heapq.heapify(heap)
        while rest > 0 and heap:
            key, sp, i = heapq.heappop(heap)
            now = load(i)
            if now != key:
                heapq.heappush(heap, (now, sp, i))
                continue
            q[i] += 1
            rest -= 1
            for a in range(k):
                marg[a][rows[i][a]] += 1
        start = end
    return q


def cell_weights(spec: "Spec", cells: np.ndarray, balanced: bool) -> np.ndarray:
    """Sampling weight of each cell (``[n, k]`` index array): the product of the grid concepts'
    marginal probabilities (concept imbalance), or uniform when ``balanced``."""
    if balanced:
        return np.ones(len(cells))
    w = np.ones(len(cells))
    for a, c in enumerate(spec.holdout.concepts):
        w = w * spec.concepts[c].probabilities()[cells[:, a]]
    return w


def split_cells(spec: "Spec", split: str) -> tuple[np.ndarray, np.ndarray]:
    """``(cells [n, k] int64 index tuples, quotas [n] int64)`` of a dataset split.

    ``train``/``val`` follow the concepts' distributions over seen cells; ``test_id`` (seen) and
    ``test_ood`` (held-out) are balanced unless ``splits.balanced_tests`` is false. With
    ``splits.per: combination`` a split's count is per cell (the total grows with the cells);
    with ``per: total`` it is the split's total (MOSAIC's 10/9, 10/7, 2, 5 rescaling follows).
    """
    g = spec.grid
    cells = g.index_cells(HELD_OUT if split == "test_ood" else SEEN)
    count = getattr(spec.splits, split)
    balanced = split in ("test_id", "test_ood") and spec.splits.balanced_tests
    w = cell_weights(spec, cells, balanced)
    total = count * len(cells) if spec.splits.per == "combination" else count
    return cells, apportion(total, w, cells) if len(cells) else np.zeros(0, np.int64)


_PLANS: dict[tuple[str, str], np.ndarray] = {}


def combination_for(spec: "Spec", split: str, index: int) -> tuple[Value, ...]:
    """The combination sample ``index`` of ``split`` shows: quotas are exact, and a seeded
    permutation spreads the cells over the indices."""
    key = (spec.fingerprint(), split)
    if key not in _PLANS:
        from mosaic.sampling import SPLIT_IDS

        cells, quotas = split_cells(spec, split)
        table = np.repeat(np.arange(len(cells)), quotas)
        perm = np.random.default_rng(np.random.SeedSequence(entropy=spec.seed, spawn_key=(1000 + SPLIT_IDS[split],))).permutation(len(table))
        _PLANS[key] = cells[table[perm]]
    plan = _PLANS[key]
    if index >= len(plan):
        raise IndexError(f"split {split!r} has {len(plan)} samples, asked for index {index}")
    return spec.grid.values_of(plan[index])


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
                combo = tuple(r["concepts"].get(c) for c in g.concepts)
                cnt[_key(combo)] = cnt.get(_key(combo), 0) + 1
                try:
                    st = g.status_of(combo)
                except ValueError:
                    st = -1
                want = HELD_OUT if split == "test_ood" else SEEN
                if st != want:
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
            "connected": bool(_connected(g.index_cells(SEEN), g.shape)),
            "seen": [list(c) for c in g.cells(SEEN)],
            "held_out": [list(c) for c in g.cells(HELD_OUT)],
            "excluded_count": int(np.sum(g.status == EXCLUDED)),
            "counts": counts,
        })
    report["passed"] = all(c["passed"] for c in checks.values())
    return report
