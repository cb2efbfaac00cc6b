"""Split plans: which combination, and which value of every other concept, each sample of a
dataset split shows.

A split's counts are exact **quotas**: the split's total is apportioned over its combinations
(:func:`split_cells`; seen ones for ``train``/``val``/``test_id``, held-out ones for
``test_ood``) and over each other concept's values (:func:`marginal_quotas`) by largest remainder
(:func:`apportion`), and a seeded permutation spreads them over the sample indices
(:func:`combination_for`, :func:`value_for`). The per-sample seeds use the stable split ids
(:data:`SPLIT_IDS`).

Layering: this module reads a spec's fields (:class:`mosaic.grammar.SpecFields`: concepts, splits
and the :class:`mosaic.cellsets.Grid`); it imports :mod:`mosaic.grammar` and :mod:`mosaic.cellsets`
and never :mod:`mosaic.spec` or :mod:`mosaic.holdout` (the spec validator calls it). Every function
takes a :class:`mosaic.spec.Spec`.
"""

from __future__ import annotations

import heapq

import numpy as np

from mosaic.cellsets import HELD_OUT, SEEN, Value
from mosaic.grammar import SpecFields

#: Stable ids of the splits in the per-sample seed. Never renumber: it would change every dataset.
SPLIT_IDS = {
    "train": 0, "val": 1, "test": 2, "test_id": 3, "test_ood": 4,
    "preview": 10, "evaluator_train": 11, "evaluator_check": 12, "preview_all": 13,
}

TEST_SPLITS = ("test", "test_id", "test_ood")


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


def cell_weights(spec: SpecFields, cells: np.ndarray, balanced: bool) -> np.ndarray:
    """Sampling weight of each cell (``[n, k]`` index array): the product of the grid concepts'
    marginal probabilities (concept imbalance), or uniform when ``balanced``."""
    if balanced:
        return np.ones(len(cells))
    w = np.ones(len(cells))
    for a, c in enumerate(spec.holdout.concepts):
        w = w * spec.concepts[c].probabilities()[cells[:, a]]
    return w


def split_cells(spec: SpecFields, split: str) -> tuple[np.ndarray, np.ndarray]:
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


_PLANS: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}


def _shuffled_plan(counts: np.ndarray, seed: np.random.SeedSequence) -> np.ndarray:
    """``np.repeat(arange(len(counts)), counts)`` permuted by ``default_rng(seed)``: the same values
    as ``table[rng.permutation(len(table))]`` (the shuffle draws depend only on the length), held in
    the smallest unsigned dtype and shuffled in place, so a plan costs one byte per sample for up to
    256 cells or values instead of eight, and no index array of the split's size is made."""
    table = np.repeat(np.arange(len(counts), dtype=np.min_scalar_type(max(len(counts) - 1, 0))), counts)
    np.random.default_rng(seed).shuffle(table)
    return table


def combination_for(spec: SpecFields, split: str, index: int) -> tuple[Value, ...]:
    """The combination sample ``index`` of ``split`` shows: quotas are exact, and a seeded
    permutation spreads the cells over the indices."""
    key = (spec.fingerprint(), split)
    if key not in _PLANS:
        cells, quotas = split_cells(spec, split)
        _PLANS[key] = cells, _shuffled_plan(quotas, np.random.SeedSequence(entropy=spec.seed, spawn_key=(1000 + SPLIT_IDS[split],)))
    cells, plan = _PLANS[key]  # plan: the cell (row of cells) of each sample, one small int each
    if index >= len(plan):
        raise IndexError(f"split {split!r} has {len(plan)} samples, asked for index {index}")
    return spec.grid.values_of(cells[plan[index]])


def marginal_quotas(spec: SpecFields, split: str, concept: str) -> np.ndarray:
    """Per-value sample counts ``[len(domain)]`` int64 of a concept in a dataset split."""
    n = spec.split_sizes()[split]
    c = spec.concepts[concept]
    balanced = split in TEST_SPLITS and spec.splits.balanced_tests
    p = np.ones(len(c.domain)) if balanced else c.probabilities()
    return apportion(n, p)


_VALUE_PLANS: dict[tuple[str, str, str], np.ndarray] = {}


def value_for(spec: SpecFields, split: str, concept: str, index: int):
    """A concept's value at ``index`` of a split: its exact quotas, spread by a seeded permutation
    (independent per concept, so concepts are independent across samples)."""
    key = (spec.fingerprint(), split, concept)
    if key not in _VALUE_PLANS:
        q = marginal_quotas(spec, split, concept)
        k = list(spec.concepts).index(concept)
        _VALUE_PLANS[key] = _shuffled_plan(q, np.random.SeedSequence(entropy=spec.seed, spawn_key=(2000 + SPLIT_IDS[split], k)))
    plan = _VALUE_PLANS[key]
    if not 0 <= index < len(plan):
        raise IndexError(f"split {split!r} has {len(plan)} samples, asked for index {index}")
    return spec.concepts[concept].domain[int(plan[index])]
