"""Linear-factorization extras: whitened R², k95, |cos| of concept means, per-concept probe-span R²,
the probe-subspace ("projected") analysis, an imbalance-safe least-squares fit and held-out R².

Source: Uselis, Dittadi & Oh, "Compositional Generalization Requires Linear, Orthogonal
Representations in Vision Embedding Models" (arXiv 2602.24264), code
``oshapio/necessary-compositionality``, ``src/complinearity/analyse_embeddings_probes.py``:
``compute_concept_value_means_from_matrix`` (factors), ``compute_linear_factorization_r2_from_matrix``
(R², whitened R²), ``compute_means_metrics_and_orthogonality`` and ``k_at_threshold`` (k95, |cos|),
``get_r2_per_concept_probe_span`` (probe-span R²) and ``main`` (projected analysis). Definitions
restated in ``shared/reference/diagnostics.md`` §1; this is our own code, in float64 (the
reference runs float32, so expect differences of about 1e-6).

Notation: ``E [N, D]`` embeddings, ``X = E − mean(E)`` (global centring, no per-concept
re-centring), ``y_h(i)`` sample i's value index of concept h, factors ``u_{h,v}`` = mean of X over
the samples with ``y_h = v`` (a value with no sample gets a zero row and is *inactive*).

- ``r2`` = 1 − Σ‖X − X̂‖² / (Σ‖X‖² + 1e-9) with ``X̂_i = Σ_h u_{h, y_h(i)}`` (no intercept).
- ``r2_whitened``: thin SVD ``X = U S Vᵀ``, ``λ = S²/(N−1)``, ZCA map
  ``Z = V diag((λ + 1e-9)^-½) Vᵀ`` applied to X and every factor; then
  1 − ‖X_w − X̂_w‖² / ‖X_w‖² (no ε; nan when the denominator is 0).
- ``k95[h]``: singular values s of h's active factor rows (not re-centred),
  ``evr = s²/Σs²``, the smallest k with ``cumsum(evr)_k ≥ 0.95`` (capped at the row count).
- |cos|: factor rows over ``(‖u‖ + 1e-9)``; within a concept all off-diagonal entries, across
  concepts h < h' all ``V_h × V_h'`` entries; averages *pooled over entries*.
- ``probe_span_r2[h]``: ``B_h`` = right singular vectors of the probe weights ``W_h``' active rows
  with s > 1e-12, ``P_h = B_h B_hᵀ``; ``Z = X P_h``, ``Ẑ_i = u_{h, y_h(i)} P_h``;
  1 − Σ‖Z − Ẑ‖² / (Σ‖Z − mean Z‖² + 1e-9).
- projected: stack every head's active W rows, B = right singular vectors with s > 1e-6,
  ``X_proj = X B Bᵀ``, and everything above again on X_proj.

Pitfalls handled (diagnostics.md §1, "Pitfalls"): with missing cells or skewed counts the sum of
marginal means is not the least-squares additive fit, so :func:`additive_lstsq_r2` also fits one
by least squares on one-hot design columns; :func:`heldout_r2` fits the additive model on train cells (least squares by default, since a
holdout leaves train cells unbalanced) and scores held-out cells (the reference has no compositional split and scores in-sample); whitening a
rank-deficient matrix blows up null directions (gain ≈ 3e4), so ``rank_tol`` whitens only the
components above ``rank_tol · s_max`` (the projected analysis uses it by default).
"""

from __future__ import annotations

import numpy as np

from mosaic.diagnostics.errors import DiagnosticError

EPS = 1e-9


def as_float64(x, name: str = "x") -> np.ndarray:
    """numpy float64 copy of a numpy array or torch tensor."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def as_int64(y, name: str = "labels") -> np.ndarray:
    if hasattr(y, "detach"):
        y = y.detach().cpu().numpy()
    return np.asarray(y, dtype=np.int64)


def _check_xy(x, labels, what: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = as_float64(x), as_int64(labels)
    if y.ndim == 1:
        y = y[:, None]
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise DiagnosticError(f"{what}: embeddings must be [N, D] and labels [N, C] with the same N, got {x.shape} and {y.shape}")
    if not np.isfinite(x).all():
        raise DiagnosticError(f"{what}: the embeddings hold {int((~np.isfinite(x)).sum())} non-finite values (nan/inf)")
    return x, y


def concept_means(x: np.ndarray, labels: np.ndarray, n_values: list[int] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per-concept value means of (already centred) embeddings.

    Args:
        x: float ``[N, D]`` (centred by the caller: the reference centres globally, once).
        labels: int ``[N, C]`` value indices, all ``>= 0``.
        n_values: values per concept (default: max label + 1, as the reference).
    Returns:
        Per concept ``(means float64 [V_h, D], counts int64 [V_h])``; a value with no sample has a
        zero row and count 0.
    """
    out = []
    for h in range(labels.shape[1]):
        v_h = int(n_values[h]) if n_values is not None else int(labels[:, h].max()) + 1
        counts = np.bincount(labels[:, h], minlength=v_h)[:v_h].astype(np.int64)
        sums = np.zeros((v_h, x.shape[1]))
        np.add.at(sums, labels[:, h], x)
        means = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], 0.0)
        out.append((means, counts))
    return out


def _zca(x: np.ndarray, rank_tol: float | None) -> np.ndarray:
    """The ZCA whitening map ``[D, D]`` of centred ``x`` (see the module docstring)."""
    n = x.shape[0]
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    if rank_tol is not None:
        keep = s > rank_tol * (s[0] if s.size else 0.0)
        s, vt = s[keep], vt[keep]
    lam = s ** 2 / (n - 1 if n > 1 else max(n, 1))
    return (vt.T * (1.0 / np.sqrt(lam + EPS))) @ vt


def lf_r2(x: np.ndarray, labels: np.ndarray, means, rank_tol: float | None = None) -> dict:
    """Linear-factorization R² and whitened R² of centred ``x`` ``[N, D]`` from factor ``means``
    (:func:`concept_means`). Returns ``{"r2", "r2_whitened", "sse", "sst"}``."""
    recon = np.zeros_like(x)
    for h, (m, _) in enumerate(means):
        recon += m[labels[:, h]]
    sse = float(((x - recon) ** 2).sum())
    sst = float((x ** 2).sum())
    z = _zca(x, rank_tol)
    xw, rw = x @ z, recon @ z  # Σ_h u_h Z = (Σ_h u_h) Z
    sse_w, sst_w = float(((xw - rw) ** 2).sum()), float((xw ** 2).sum())
    return {"r2": 1.0 - sse / (sst + EPS), "r2_whitened": 1.0 - sse_w / sst_w if sst_w > 0 else float("nan"),
            "sse": sse, "sst": sst}


def k_at_threshold(evr: np.ndarray, threshold: float = 0.95) -> int:
    """The smallest k with ``cumsum(evr)[k-1] >= threshold``, capped at ``len(evr)`` (0 when empty)."""
    evr = np.asarray(evr, dtype=np.float64)
    if evr.size == 0:
        return 0
    return int(min(np.searchsorted(np.cumsum(evr), threshold, side="left") + 1, evr.size))


def k95(means, threshold: float = 0.95) -> list[int]:
    """Per concept: components explaining ``threshold`` of the variance of its active factor rows
    (not re-centred; reference ``compute_means_metrics_and_orthogonality``)."""
    out = []
    for m, c in means:
        rows = m[c > 0]
        s = np.linalg.svd(rows, compute_uv=False) if len(rows) else np.zeros(0)
        var = s ** 2
        out.append(k_at_threshold(var / var.sum(), threshold) if var.sum() > 0 else 0)
    return out


def abs_cos(means, names: list[str]) -> dict:
    """Mean |cos| between factor rows: ``pairwise`` (``"a_vs_b"`` per concept pair, ``"a_vs_a"``
    within), ``within`` and ``cross`` pooled over entries (nan when there are none)."""
    units = [m[c > 0] / (np.linalg.norm(m[c > 0], axis=1, keepdims=True) + EPS) for m, c in means]
    pairwise, same, cross = {}, [], []
    for a in range(len(units)):
        for b in range(a, len(units)):
            sims = np.abs(units[a] @ units[b].T)
            vals = sims[~np.eye(len(sims), dtype=bool)] if a == b else sims.ravel()
            (same if a == b else cross).append(vals)
            pairwise[f"{names[a]}_vs_{names[b]}"] = float(vals.mean()) if vals.size else float("nan")
    pool = lambda parts: float(np.concatenate(parts).mean()) if parts and sum(p.size for p in parts) else float("nan")  # noqa: E731
    return {"pairwise": pairwise, "within": pool(same), "cross": pool(cross)}


def probe_span_r2(x: np.ndarray, labels: np.ndarray, means, weights: list) -> list[float]:
    """Per concept h, the share of variance in the span of its probe weights ``weights[h]``
    (``[V_h, D]``, active rows used) that h's factors explain (see the module docstring)."""
    out = []
    for h, ((m, c), w) in enumerate(zip(means, weights)):
        w = as_float64(w)
        if w.ndim != 2 or w.shape[1] != x.shape[1] or w.shape[0] < len(c):
            raise DiagnosticError(f"probe_span_r2: probe weights of concept {h} must be [V >= {len(c)}, {x.shape[1]}], got {w.shape}")
        _, s, vt = np.linalg.svd(w[: len(c)][c > 0], full_matrices=False)
        b = vt[s > 1e-12].T
        p = b @ b.T
        z = x @ p
        zh = (m @ p)[labels[:, h]]
        out.append(1.0 - float(((z - zh) ** 2).sum()) / (float(((z - z.mean(0)) ** 2).sum()) + EPS))
    return out


def additive_lstsq_r2(x: np.ndarray, labels: np.ndarray) -> float:
    """R² of the least-squares additive fit ``X ≈ Σ_h a_{h, y_h}`` (one-hot design columns with an
    intercept, min-norm solution) of centred ``x``: equal to ``r2`` on a balanced full grid, and
    the honest additive fit with missing cells or skewed counts (where the sum of marginal means
    is not least squares). Denominator Σ‖X‖² as ``r2``."""
    cols = [np.ones((len(x), 1))]
    for h in range(labels.shape[1]):
        vals, idx = np.unique(labels[:, h], return_inverse=True)
        onehot = np.zeros((len(x), len(vals)))
        onehot[np.arange(len(x)), idx] = 1.0
        cols.append(onehot)
    a = np.concatenate(cols, 1)
    coef, *_ = np.linalg.lstsq(a, x, rcond=None)
    return 1.0 - float(((x - a @ coef) ** 2).sum()) / (float((x ** 2).sum()) + EPS)


def factorization(x, labels, concepts: list[str] | None = None, *, n_values: list[int] | None = None,
                  probe_weights: list | None = None, threshold: float = 0.95, rank_tol: float | None = None,
                  projected: bool = True) -> dict:
    """The reference's factorization analysis of embeddings, in-sample (faithful to the reference).

    Args:
        x: float ``[N, D]`` embeddings (numpy or torch), not centred (this centres globally).
        labels: int ``[N, C]`` value index per concept; samples with any label ``< 0`` are left out.
        concepts: C names (default ``c0, c1, ...``).
        n_values: values per concept (default: max label + 1).
        probe_weights: per concept a linear probe's weights ``[V_h, D]`` (e.g.
            :class:`mosaic.diagnostics.probes.LinearProbes` ``.weights``); enables ``probe_span_r2``
            and the projected analysis.
        threshold: the explained-variance share of ``k95``.
        rank_tol: whiten only components with singular value above ``rank_tol · s_max`` (None: all
            components, as the reference).
        projected: also analyse ``X_proj`` (needs ``probe_weights``), whitened with
            ``rank_tol`` 1e-6 (the reference whitens all components there; see the pitfalls).
    Returns:
        ``{"n", "r2", "r2_whitened", "r2_lstsq", "k95": {concept: k}, "abs_cos": {"pairwise",
        "within", "cross"}, "probe_span_r2": {concept: r2, "mean": m} | absent, "projected":
        {"rank", "r2", "r2_whitened", "k95", "abs_cos"} | absent}``.
    Raises:
        DiagnosticError: shapes that do not match, non-finite embeddings, fewer than 2 samples.
    """
    x, y = _check_xy(x, labels, "factorization")
    keep = (y >= 0).all(1)
    x, y = x[keep], y[keep]
    if len(x) < 2:
        raise DiagnosticError(f"factorization needs at least 2 samples with every label, got {len(x)}")
    names = list(concepts) if concepts else [f"c{h}" for h in range(y.shape[1])]
    xc = x - x.mean(0, keepdims=True)
    means = concept_means(xc, y, n_values)
    out = {"n": int(len(xc))}
    r = lf_r2(xc, y, means, rank_tol)
    out.update(r2=r["r2"], r2_whitened=r["r2_whitened"], r2_lstsq=additive_lstsq_r2(xc, y))
    out["k95"] = dict(zip(names, k95(means, threshold)))
    out["abs_cos"] = abs_cos(means, names)
    if probe_weights is not None:
        if len(probe_weights) != y.shape[1]:
            raise DiagnosticError(f"factorization: {len(probe_weights)} probe weight matrices for {y.shape[1]} concepts")
        span = probe_span_r2(xc, y, means, probe_weights)
        out["probe_span_r2"] = {**dict(zip(names, span)), "mean": float(np.mean(span))}
        if projected:
            rows = np.concatenate([as_float64(w)[: len(c)][c > 0] for w, (_, c) in zip(probe_weights, means)])
            _, s, vt = np.linalg.svd(rows, full_matrices=False)
            b = vt[s > 1e-6].T
            xp = xc @ b @ b.T
            mp = concept_means(xp, y, n_values)
            rp = lf_r2(xp, y, mp, rank_tol=1e-6)
            out["projected"] = {"rank": int(b.shape[1]), "r2": rp["r2"], "r2_whitened": rp["r2_whitened"],
                                "k95": dict(zip(names, k95(mp, threshold))), "abs_cos": abs_cos(mp, names)}
    return out


def heldout_r2(x_train, y_train, x_test, y_test, method: str = "lstsq") -> dict:
    """Out-of-sample linear factorization: an additive model fitted on train (seen) cells, R² on
    held-out cells.

    ``method="lstsq"`` (default) fits ``X ≈ c + Σ_h a_{h,v}`` by least squares on one-hot design
    columns of the train samples (min-norm); ``"means"`` uses the reference's factors (train mean
    and marginal means of the train samples). With a compositional holdout the train cells are
    unbalanced by construction (each value misses some partners), so marginal means are biased and
    even an exactly additive embedding scores R² < 1 with ``"means"``; ``"lstsq"`` recovers it
    exactly. ``r2 = 1 − Σ‖X − X̂‖² / Σ‖X − x̄_train‖²`` over the test samples. A test value absent
    from train has no factor (zero) and is counted in ``unseen_values``.

    Args:
        x_train, x_test: float ``[N, D]``; y_train, y_test: int ``[N, C]`` (rows with a label < 0 dropped).
        method: ``lstsq`` or ``means``.
    Returns:
        ``{"r2", "method", "n_train", "n_test", "unseen_values"}``.
    Raises:
        DiagnosticError: shapes that disagree; fewer than 2 train or 1 test sample; an unknown method.
    """
    if method not in ("lstsq", "means"):
        raise DiagnosticError(f"heldout_r2: method {method!r} is not one of lstsq, means")
    xa, ya = _check_xy(x_train, y_train, "heldout_r2 (train)")
    xb, yb = _check_xy(x_test, y_test, "heldout_r2 (test)")
    if xa.shape[1] != xb.shape[1] or ya.shape[1] != yb.shape[1]:
        raise DiagnosticError(f"heldout_r2: train {xa.shape}/{ya.shape} and test {xb.shape}/{yb.shape} disagree in D or C")
    ka, kb = (ya >= 0).all(1), (yb >= 0).all(1)
    xa, ya, xb, yb = xa[ka], ya[ka], xb[kb], yb[kb]
    if len(xa) < 2 or len(xb) < 1:
        raise DiagnosticError(f"heldout_r2 needs >= 2 train and >= 1 test samples with every label, got {len(xa)} and {len(xb)}")
    mu = xa.mean(0, keepdims=True)
    nv = [int(max(ya[:, h].max(), yb[:, h].max())) + 1 for h in range(ya.shape[1])]
    unseen = sum(int(np.isin(np.unique(yb[:, h]), ya[:, h], invert=True).sum()) for h in range(ya.shape[1]))
    if method == "means":
        means = concept_means(xa - mu, ya, nv)
        recon = mu + sum(m[yb[:, h]] for h, (m, _) in enumerate(means))
    else:
        def design(y):
            cols = [np.ones((len(y), 1))]
            for h, v in enumerate(nv):
                oh = np.zeros((len(y), v))
                oh[np.arange(len(y)), y[:, h]] = 1.0
                cols.append(oh)
            return np.concatenate(cols, 1)

        coef, *_ = np.linalg.lstsq(design(ya), xa, rcond=None)
        recon = design(yb) @ coef
    return {"r2": 1.0 - float(((xb - recon) ** 2).sum()) / (float(((xb - mu) ** 2).sum()) + EPS), "method": method,
            "n_train": int(len(xa)), "n_test": int(len(xb)), "unseen_values": unseen}
