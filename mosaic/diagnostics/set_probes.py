"""Set probes: order-free concept and object probes on a frozen multi-object scene embedding.

Source: Uselis, Koishigarina & Oh (2026), "How can embedding models bind concepts?", code
``oshapio/binding-concepts-complexity``, ``train_embeddings.py::train_embeddings_simple`` (frozen)
as ``run_probe_suite.py`` calls it (diagnostics.md §2.1):

- **concept probe** per attribute ``a``: a bias-free ``Linear(D → V_a)``; its target is soft over
  the values the scene's objects have (0.5 / 0.5 for two objects, 1.0 when both share the value);
- **object probe**: a bias-free ``Linear(D → U)`` over object tuples (e.g. ``(colour, shape)``);
  its target is soft over the scene's tuples;
- loss: the sum of the soft cross-entropies; full batch, Adam lr 1e-2, cosine to 0, dot-product
  logits on raw features (neither centred nor normalised);
- metric: **set accuracy**, ``1[min logit over the present values > max logit over the others]``,
  averaged over scenes; the final state is reported (no selection).

Why next to the slot-wise probe (:func:`mosaic.diagnostics.probes.slot_probe_report`): a scene
embedding trained with an order-free objective (the binding lab's object queries) need not
encode *which slot* an object was in, so slot-wise heads cap near 50 % on it even when every
concept is present; set probes ask only which values (concept probe) and which objects (object
probe) the scene holds. A bag of concepts scores 1 on the concept probes and fails the object
probe on scenes whose swapped pairs differ.

mosaic's differences from the reference, all for held-out combinations: the probes train on the
train split only (seen object types; a held-out sample raises
:class:`~mosaic.diagnostics.errors.LeakageError`) instead of a random 40 % of all scenes; the
object probe's rows are the tuples of the train split, so a scene holding a tuple never trained
(every ``test_ood`` scene under an object-level holdout) has no row to score it and is counted in
``n_untrained`` instead of being scored against an untrained row (the reference's pitfall).
Binding of held-out object types is what the model's own ranking and the slot-wise probe
measure; a factorized object probe (``(P x) · (u[colour] ⊙ v[shape])`` trained on seen types)
was tried and left out: fitted on seen types it scored 0 % on held-out types even for a planted
product code whose ideal factorized read-out scores 96 %, so it measures the probe's
non-identifiability, not the embedding.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mosaic.diagnostics.errors import DiagnosticError
from mosaic.diagnostics.probes import ProbeConfig, _check_train, _np


def _soft_targets(ids: np.ndarray, n: int) -> np.ndarray:
    """float32 ``[N, n]``: each row uniform over the distinct ids >= 0 of ``ids`` ``[N, M]``
    (counted with multiplicity, so two objects sharing a value give it 1.0)."""
    t = np.zeros((len(ids), n), np.float32)
    rows = np.repeat(np.arange(len(ids)), ids.shape[1])
    flat = ids.reshape(-1)
    ok = flat >= 0
    np.add.at(t, (rows[ok], flat[ok]), 1.0)
    s = t.sum(1, keepdims=True)
    return np.divide(t, s, out=np.zeros_like(t), where=s > 0)


def set_accuracy(logits: np.ndarray, present: np.ndarray) -> np.ndarray:
    """bool ``[N]``: min logit over the present classes > max logit over the absent ones.

    Args:
        logits: float ``[N, K]``; present: bool ``[N, K]`` (a row with no present class, or no
            absent one, scores False and True respectively as the reference's min/max do).
    """
    pos = np.where(present, logits, np.inf).min(1)
    neg = np.where(present, -np.inf, logits).max(1)
    return pos > neg


def _fit_soft(x: np.ndarray, targets: list[np.ndarray], cfg: ProbeConfig) -> list[np.ndarray]:
    """Bias-free linear heads ``[K_h, D]`` fitted full-batch by soft cross-entropy (Adam,
    ``cfg.lr``, cosine to 0 over ``cfg.epochs`` when ``cfg.cosine``), seeded by ``cfg.seed``."""
    g = torch.Generator().manual_seed(cfg.seed)
    xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    heads = []
    for t in targets:
        w = torch.empty(t.shape[1], x.shape[1])
        bound = 1 / math.sqrt(x.shape[1])  # nn.Linear's default initialisation
        w.uniform_(-bound, bound, generator=g)
        heads.append(w.requires_grad_())
    tt = [torch.from_numpy(t) for t in targets]
    opt = torch.optim.Adam(heads, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs, eta_min=0.0) if cfg.cosine else None
    for _ in range(cfg.epochs):
        opt.zero_grad(set_to_none=True)
        loss = sum(-(t * torch.log_softmax(xt @ w.T, 1)).sum(1).mean() for w, t in zip(heads, tt))
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    return [w.detach().numpy().copy() for w in heads]


class SetProbes:
    """Trained set probes (§2.1): one bias-free head per attribute and one over the trained object
    tuples. Build with :func:`fit_set_probes`; score any embeddings (true or predicted) with
    :meth:`score`.

    Attributes:
        heads: float32 ``[V_a, D]`` per attribute, then ``[U, D]`` for the objects.
        attributes: attribute names; n_values: values per attribute.
        tuples: int64 ``[U]`` codes of the trained object tuples (``Σ_a value_a · radix_a``).
    """

    def __init__(self, heads: list[np.ndarray], attributes: list[str], n_values: list[int], tuples: np.ndarray):
        self.heads, self.attributes, self.n_values, self.tuples = heads, list(attributes), list(n_values), tuples
        self._radix = np.cumprod([1, *self.n_values[:-1]])

    def codes(self, objects: np.ndarray) -> np.ndarray:
        """int64 ``[N, M]``: the tuple code of each object (-1 for an absent slot)."""
        o = _np(objects, np.int64)
        return np.where((o >= 0).all(2), (o * self._radix).sum(2), -1)

    def rows(self, codes: np.ndarray) -> np.ndarray:
        """int64 like ``codes``: the object head's row of each code (``tuples`` is sorted); -1 absent,
        -2 never trained."""
        idx = np.searchsorted(self.tuples, codes)
        found = (idx < len(self.tuples)) & (self.tuples[np.minimum(idx, len(self.tuples) - 1)] == codes) if len(self.tuples) else False
        return np.where(codes < 0, -1, np.where(found, idx, -2)).astype(np.int64)

    def score(self, x, objects) -> dict:
        """Set accuracy on scenes.

        Args:
            x: float ``[N, D]`` scene embeddings; objects: int ``[N, M, A]``.
        Returns:
            ``{"n", "concepts": {attribute: accuracy}, "concept_mean", "object": accuracy over the
            scenes whose tuples all have a trained row (nan when none), "n_untrained"}``.
        """
        xs, o = _np(x, np.float32), _np(objects, np.int64)
        out: dict = {"n": int(len(xs)), "concepts": {}}
        for a, name in enumerate(self.attributes):
            present = _soft_targets(o[:, :, a], self.n_values[a]) > 0
            out["concepts"][name] = float(set_accuracy(xs @ self.heads[a].T, present).mean()) if len(xs) else float("nan")
        out["concept_mean"] = float(np.mean(list(out["concepts"].values())))
        r = self.rows(self.codes(o))
        untrained = (r == -2).any(1) if r.size else np.zeros(len(o), bool)
        out["n_untrained"] = int(untrained.sum())
        ok = ~untrained
        if ok.any():
            present = _soft_targets(np.where(r[ok] >= 0, r[ok], -1), len(self.tuples)) > 0
            out["object"] = float(set_accuracy(xs[ok] @ self.heads[-1].T, present).mean())
        else:
            out["object"] = float("nan")
        return out


def fit_set_probes(x, objects, n_values: list[int], attributes: list[str], *, held_out=None,
                   config: ProbeConfig | None = None, max_train: int | None = None) -> SetProbes:
    """Train the concept and object set probes (§2.1) on train-split scenes.

    Args:
        x: float ``[N, D]`` scene embeddings; objects: int ``[N, M, A]`` (an absent object's
            attributes are < 0); n_values: values per attribute; attributes: their names.
        held_out: bool ``[N]`` or None: any True raises (probes train on seen combinations only).
        config: epochs, lr, cosine, weight decay and seed (full batch: ``batch_size`` and the
            validation slice are not used; the reference trains 10,000 epochs, the final state).
        max_train: fit on a seeded subset of at most this many scenes.
    Raises:
        LeakageError: a held-out training scene.
        DiagnosticError: ``objects`` is not ``[N, M, A]`` with ``A == len(attributes)``.
    """
    cfg = config or ProbeConfig()
    x, objs = _np(x, np.float32), _np(objects, np.int64)
    if objs.ndim != 3 or objs.shape[2] != len(attributes) or len(objs) != len(x) or len(n_values) != len(attributes):
        raise DiagnosticError(f"set probes: objects must be [N, M, {len(attributes)}] for {len(x)} features "
                              f"(and one value count per attribute), got {objs.shape}")
    _check_train(x, held_out, "set probes")
    if max_train is not None and len(x) > max_train:
        keep = np.sort(np.random.default_rng(cfg.seed).choice(len(x), max_train, replace=False))
        x, objs = x[keep], objs[keep]
    probe = SetProbes([], attributes, n_values, np.zeros(0, np.int64))
    codes = probe.codes(objs)
    probe = SetProbes([], attributes, n_values, np.unique(codes[codes >= 0]))  # the trained rows: seen types
    targets = [_soft_targets(objs[:, :, a], n_values[a]) for a in range(len(attributes))]
    targets.append(_soft_targets(probe.rows(codes), len(probe.tuples)))
    probe.heads = _fit_soft(x, targets, cfg)
    return probe


def set_probe_report(train: tuple, evals: dict[str, tuple], n_values: list[int], attributes: list[str],
                     config: ProbeConfig | None = None, max_train: int | None = None) -> dict:
    """Concept and object set probes (§2.1) trained on the train split, scored on each split.

    Args:
        train: ``(features float [N, D], objects int [N, M, A], held_out bool [N] or None)``.
        evals: split -> ``(features [N', D], objects [N', M', A])``.
        n_values, attributes, config, max_train: as :func:`fit_set_probes`.
    Returns:
        ``{"objects": U trained tuples, "train": {...}, split: :meth:`SetProbes.score`}``.
    Raises:
        LeakageError, DiagnosticError: as :func:`fit_set_probes`.
    """
    x, objs, held = train
    x, objs = _np(x, np.float32), _np(objs, np.int64)
    _check_train(x, held, "set probes")  # before the subset: a held-out sample anywhere in the training data is refused
    if max_train is not None and len(x) > max_train:  # the subset is cut once, here, and scored as "train"
        keep = np.sort(np.random.default_rng((config or ProbeConfig()).seed).choice(len(x), max_train, replace=False))
        x, objs = x[keep], objs[keep]
    probe = fit_set_probes(x, objs, n_values, attributes, config=config)
    rep: dict = {"objects": int(len(probe.tuples)), "train": probe.score(x, objs)}
    for split, (xs, o) in evals.items():
        if len(o):
            rep[split] = probe.score(xs, o)
    return rep


__all__ = ["SetProbes", "fit_set_probes", "set_accuracy", "set_probe_report"]
