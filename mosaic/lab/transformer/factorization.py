"""Linear factorization of embeddings: how well a sum of per-concept value vectors explains them.

Source: Uselis, Dittadi & Oh, "Compositional Generalization Requires Linear, Orthogonal
Representations in Vision Embedding Models" (arXiv 2602.24264, eq. 7; code
``analyse_embeddings_probes.py``), also used in "Does Data Scaling Lead to Visual Compositional
Generalization?" (ICML 2025). With ``X`` the embeddings minus their mean and ``y_h(i)`` sample
i's value of concept h:

- factors ``u_{h,v}`` = mean of ``X`` over the samples with ``y_h = v``;
- reconstruction ``X̂_i = Σ_h u_{h, y_h(i)}``;
- ``R² = 1 − Σ_i ‖X_i − X̂_i‖² / Σ_i ‖X_i‖²`` (1: exactly additive);
- orthogonality: mean ``|cos|`` between factors of different concepts (cross-concept) and between
  distinct values of one concept (within-concept).
"""

from __future__ import annotations

import numpy as np


def linear_factorization(x, labels, concepts: list[str] | None = None) -> dict:
    """Linear-factorization R² and factor orthogonality of embeddings.

    Args:
        x: float ``[N, D]`` embeddings (numpy or torch).
        labels: int ``[N, C]`` value index of each concept; a sample with any label ``< 0`` is
            left out.
        concepts: C names for the per-concept report (default ``c0, c1, ...``).
    Returns:
        ``{"r2", "cross_concept_abs_cos", "within_concept_abs_cos", "n", "per_concept": {name:
        {"values": k, "r2_alone"}}}``: ``r2_alone`` is the R² of that concept's factors alone.
        ``cross_concept_abs_cos`` is nan with one concept; ``within_concept_abs_cos`` nan when no
        concept has two values.
    Raises:
        ValueError: shapes that do not match, or fewer than 2 usable samples.
    """
    x = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    y = np.asarray(labels.detach().cpu() if hasattr(labels, "detach") else labels, dtype=np.int64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"x must be [N, D] and labels [N, C] with the same N, got {x.shape} and {y.shape}")
    keep = (y >= 0).all(1)
    x, y = x[keep], y[keep]
    if len(x) < 2:
        raise ValueError(f"linear_factorization needs at least 2 samples with every label, got {len(x)}")
    names = concepts or [f"c{h}" for h in range(y.shape[1])]
    xc = x - x.mean(0, keepdims=True)
    total = float((xc ** 2).sum())
    recon = np.zeros_like(xc)
    factors: list[np.ndarray] = []          # per concept [k_h, D] (rows of observed values)
    per_concept = {}
    for h in range(y.shape[1]):
        vals = np.unique(y[:, h])
        u = np.stack([xc[y[:, h] == v].mean(0) for v in vals])
        lookup = np.searchsorted(vals, y[:, h])
        recon += u[lookup]
        factors.append(u)
        alone = 1.0 - float(((xc - u[lookup]) ** 2).sum()) / total if total > 0 else float("nan")
        per_concept[names[h]] = {"values": int(len(vals)), "r2_alone": alone}
    r2 = 1.0 - float(((xc - recon) ** 2).sum()) / total if total > 0 else float("nan")

    def unit(u):
        n = np.linalg.norm(u, axis=1, keepdims=True)
        return u / np.maximum(n, 1e-12)

    units = [unit(u) for u in factors]
    cross = []
    for a in range(len(units)):
        for b in range(a + 1, len(units)):
            cross.append(np.abs(units[a] @ units[b].T).ravel())
    within = []
    for u in units:
        if len(u) > 1:
            c = np.abs(u @ u.T)
            within.append(c[~np.eye(len(u), dtype=bool)])
    return {
        "r2": r2,
        "cross_concept_abs_cos": float(np.concatenate(cross).mean()) if cross else float("nan"),
        "within_concept_abs_cos": float(np.concatenate(within).mean()) if within else float("nan"),
        "n": int(len(x)),
        "per_concept": per_concept,
    }
