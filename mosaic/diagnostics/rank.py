"""Rank axes for ordinal concepts (counts, sizes, angle bins in order): is the concept's order a
linear direction of the embedding?

Source: "rankable vision embeddings" (code ``aktsonthalia/rankable-vision-embeddings``,
``src/rankbench/``; diagnostics.md §5): score ``s = ⟨e, w⟩``, rankability = Spearman ρ between s and
the attribute on test samples (``utils.py::compute_metrics``, which also reports Kendall τ-b, used
here because counts have ties). Two axes:

- **extremes**: ``w = (ē_hi − ē_lo) / ‖ē_hi − ē_lo‖`` with ``ē`` the mean embedding of the
  highest and lowest value's training samples (the paper's two-extremes direction; the code builds
  it from text prompts, ``utils.py::direction_from_text``, we use image/scene embeddings as the
  paper describes).
- **fitted**: a linear regression of the value rank on the embedding over all training samples
  (the code trains ``Linear(D → 1)`` with MSE and Adam,
  ``models/experiments.py::TrainingExperiment._train``; we solve the same least-squares problem in
  closed form with a small ridge ``λ · tr(XᵀX)/D`` for stability, which is deterministic and has
  no schedule to tune).

Both axes are fitted on the train split (seen combinations only) and scored on ``test_id`` (seen)
and ``test_ood`` (held-out combinations). The fitted axis ignores nuisance directions that the
extremes' means pick up when another concept is confounded with the extremes in training.
"""

from __future__ import annotations

import numpy as np

from mosaic.diagnostics.errors import DiagnosticError, LeakageError, NotApplicableError

AXES = ("extremes", "fitted")


def _np(x, dtype):
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def spearman(score, order) -> float:
    """Spearman ρ (average ranks for ties); nan when either side is constant or n < 2."""
    from scipy.stats import spearmanr

    s, o = _np(score, np.float64), _np(order, np.float64)
    if len(s) < 2 or np.ptp(s) == 0 or np.ptp(o) == 0:
        return float("nan")
    return float(spearmanr(s, o).statistic)


def kendall_tau_b(score, order) -> float:
    """Kendall τ-b (tie-corrected); nan when either side is constant or n < 2."""
    from scipy.stats import kendalltau

    s, o = _np(score, np.float64), _np(order, np.float64)
    if len(s) < 2 or np.ptp(s) == 0 or np.ptp(o) == 0:
        return float("nan")
    return float(kendalltau(s, o, variant="b").statistic)


def _ties(s: np.ndarray) -> np.ndarray:
    """Projections equal up to floating-point noise (1e-10 of the largest) become exact ties."""
    scale = float(np.abs(s).max()) if len(s) else 0.0
    return np.round(s / scale, 10) * scale if scale > 0 else s


def extremes_axis(x, order) -> np.ndarray:
    """Unit axis ``[D]`` from the mean embeddings of the lowest and highest ``order`` value.

    Raises:
        DiagnosticError: fewer than two distinct values, or identical extreme means.
    """
    x, o = _np(x, np.float64), _np(order, np.float64)
    lo, hi = o.min(), o.max()
    if lo == hi:
        raise DiagnosticError("rank axes: the training samples show one value only; an axis needs two")
    d = x[o == hi].mean(0) - x[o == lo].mean(0)
    n = np.linalg.norm(d)
    if n == 0:
        raise DiagnosticError("rank axes: the extreme values have identical mean embeddings")
    return d / n


def fitted_axis(x, order, ridge: float = 1e-6) -> np.ndarray:
    """Unit axis ``[D]``: least-squares regression of ``order`` on centred ``x`` (ridge
    ``ridge · tr(XᵀX)/D``); oriented so that larger scores mean larger values."""
    x, o = _np(x, np.float64), _np(order, np.float64)
    xc = x - x.mean(0)
    oc = o - o.mean()
    g = xc.T @ xc
    lam = ridge * max(np.trace(g) / max(g.shape[0], 1), 1e-12)
    w = np.linalg.solve(g + lam * np.eye(len(g)), xc.T @ oc)
    n = np.linalg.norm(w)
    if n == 0 or not np.isfinite(n):
        raise DiagnosticError("rank axes: the regression axis is zero (the embeddings do not vary with the value)")
    return w / n


def rank_axes(train: tuple, evals: dict[str, tuple], *, concept: str = "concept", ridge: float = 1e-6,
              keep_points: int = 400) -> dict:
    """Fit the extremes and the fitted rank axis on the train split; score each evaluation split.

    Args:
        train: ``(features float [N, D], order [N] numbers, held_out bool [N] or None)``; ``order``
            is the value's rank (e.g. the count, the size, the angle bin index); samples with a
            negative or nan order (no value) are left out.
        evals: split (``test_id``, ``test_ood``, ...) -> ``(features [M, D], order [M])``.
        concept: the concept's name (for messages and the report).
        keep_points: up to this many ``(order, projection)`` pairs per split and axis are kept
            for the scatter plot (evenly strided).
    Returns:
        ``{"concept", "values": distinct train values, axis: {"train": {"spearman", "kendall_tau_b",
        "n"}, split: {...}, "points": {split: [[order, score], ...]}} for axis in extremes, fitted}``.
    Raises:
        LeakageError: held-out training samples; DiagnosticError: bad shapes, fewer than two values.
    """
    xtr, otr, held = train
    xtr, otr = _np(xtr, np.float64), _np(otr, np.float64).reshape(-1)
    if xtr.ndim != 2 or len(xtr) != len(otr):
        raise DiagnosticError(f"rank axes ({concept}): features must be [N, D] and order [N], got {xtr.shape} and {otr.shape}")
    if held is not None and _np(held, bool).any():
        raise LeakageError(f"rank axes ({concept}): {int(_np(held, bool).sum())} training samples are held-out combinations; "
                           "axes are fitted on seen combinations only (the train split)")
    ok = np.isfinite(otr) & (otr >= 0)
    xtr, otr = xtr[ok], otr[ok]
    if len(np.unique(otr)) < 2:
        raise NotApplicableError("rank", f"concept {concept!r} shows fewer than two values in the train split",
                                 "rank axes need an ordinal concept that varies")
    axes = {"extremes": extremes_axis(xtr, otr), "fitted": fitted_axis(xtr, otr, ridge)}
    out: dict = {"concept": concept, "values": sorted(set(otr.tolist()))}
    splits = {"train": (xtr, otr), **{s: (_np(x, np.float64), _np(o, np.float64).reshape(-1)) for s, (x, o) in evals.items()}}
    for name, w in axes.items():
        rep: dict = {"points": {}}
        for split, (x, o) in splits.items():
            keep = np.isfinite(o) & (o >= 0)
            x, o = x[keep], o[keep]
            if not len(o):
                continue
            s = _ties(x @ w)
            rep[split] = {"spearman": spearman(s, o), "kendall_tau_b": kendall_tau_b(s, o), "n": int(len(o))}
            if split != "train":
                step = max(1, len(o) // keep_points)
                rep["points"][split] = [[float(a), float(b)] for a, b in zip(o[::step], s[::step])]
        out[name] = rep
    return out


def ordinal_concepts(spec) -> dict[str, list[float]]:
    """The spec's ordinal concepts and each value's rank: ``count`` (the count), ``size`` (the
    size's fraction of the image), ``position`` (the angle bin's index; note angle bins are
    circular, so the first and last bins are neighbours and ρ understates a circular code).

    Returns:
        ``{concept: [rank of value 0, rank of value 1, ...]}`` in domain order (empty when none).
    """
    out = {}
    for c, role in spec.roles.items():
        dom = spec.domain(c)
        if role == "count":
            out[c] = [float(v) for v in dom]
        elif role == "size":
            out[c] = [float(spec.size_fraction(v)) for v in dom]
        elif role == "position":
            out[c] = [float(k) for k in range(len(dom))]
    return {c: r for c, r in out.items() if len(set(r)) >= 2}


def require_ordinal(spec, concepts: list[str] | None = None) -> dict[str, list[float]]:
    """:func:`ordinal_concepts`, restricted to ``concepts`` when given.

    Raises:
        NotApplicableError: the spec has no ordinal concept (or a requested concept is not ordinal),
            naming the spec's concepts and their roles.
    """
    found = ordinal_concepts(spec)
    roles = ", ".join(f"{c} ({r})" for c, r in spec.roles.items())
    if concepts:
        bad = [c for c in concepts if c not in found]
        if bad:
            raise NotApplicableError("rank", f"{bad} are not ordinal concepts of the dataset (concepts: {roles})",
                                     "rank axes apply to count, size and position (angle-bin) concepts")
        return {c: found[c] for c in concepts}
    if not found:
        raise NotApplicableError("rank", f"the dataset has no ordinal concept (concepts: {roles})",
                                 "rank axes apply to count, size and position (angle-bin) concepts; leave 'rank' out of --what")
    return found
