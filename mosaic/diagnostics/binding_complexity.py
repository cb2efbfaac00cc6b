"""Binding-function complexity: how complex must a function of the objects' labels be to predict a
model's scene embedding, and does that function generalize to scenes of held-out object types?

Source: Uselis, Koishigarina & Oh (2026), "How can embedding models bind concepts?", code
``oshapio/binding-concepts-complexity``, ``src/mob/clip_embeddings/approximate_complexity_scenes.py``
(class ``MLP`` and its training loop) and ``run_analyses.sh::profile_config`` (the three profiles);
definitions restated in ``shared/reference/diagnostics.md`` §2.4. A map ``g(labels) → scene
embedding`` is fitted on scenes of train object types and scored on scenes of held-out types:

- input: one label slot per (object, concept) — for 2-object colour/shape scenes four slots
  ``(colour₀, shape₀, colour₁, shape₁)`` — each with its own ``Embedding(V_s, D)`` (``D`` = the
  embedding's width, PyTorch's default N(0, 1) initialisation);
- ``regular_mlp``: concatenate the slot embeddings ``[B, S·D]`` → ``[Linear–ReLU]`` per hidden
  width → ``Linear(→ D)`` (reference README: hidden ``[1024]``; its sweep 128 … 4096);
- ``mult_linear``: the elementwise product ``e₀ ⊙ … ⊙ e_{S−1}`` → ``Linear(D → D)``;
- ``sum_mult_linear``: ``[product ; Σ_s e'_s]`` with separate sum embeddings → ``Linear(2D → D)``;
- training: full-batch MSE (``nn.MSELoss``, mean over scenes and dimensions), Adam, lr 1e-2, a
  constant learning rate (the reference builds a cosine scheduler but never steps it), 4000 epochs;
- metrics: ``R² = 1 − SSE / SST`` per set of scenes, with SST taken around the mean of **all**
  scenes scored (the reference's ``two_object_scene_embeddings_mean``), and the frozen concept /
  object probes applied to the *predicted* embeddings.

Deviations (stated, deliberate): mosaic fits on the run's own **train** split (seen object types
only; a held-out scene in the fitting data raises :class:`~mosaic.diagnostics.errors.LeakageError`)
and scores ``test_id`` (seen types) and ``test_ood`` (held-out types), where the reference draws
its own object split (a fraction ρ of the tuples, seed 0). The **final** epoch is reported: the
reference keeps the checkpoint with the best *test* object accuracy, which selects on test. The
epoch count is an option (mosaic's default is smaller, see :class:`ComplexityConfig`).

Reading: a scene code that is a product of per-slot factors is fitted exactly by ``mult_linear``
and generalizes to held-out object types, while a generic MLP on the concatenated labels
interpolates only the tuples it saw; a code with a random vector per object tuple is predicted by
no family on held-out types (R² ≈ 0).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from mosaic.diagnostics.errors import DiagnosticError, refuse_held_out

FAMILIES = ("regular_mlp", "mult_linear", "sum_mult_linear")


@dataclass
class ComplexityConfig:
    """Approximator training settings.

    Attributes:
        families: which of :data:`FAMILIES` to fit.
        hidden: ``regular_mlp`` hidden widths (reference README ``[1024]``).
        epochs: full-batch Adam steps (reference 4000; mosaic's analysis default is lower, see the
            ``analysis.binding_complexity`` options).
        lr: Adam learning rate, constant (reference 1e-2).
        eval_every: record R² of every scored set every this many epochs (a curve for the report,
            never used to select); None: ``max(1, epochs // 10)``.
        seed: seeds the initialisation (one seed per family, the same for every family).
        device: torch device.
    """

    families: tuple[str, ...] = FAMILIES
    hidden: tuple[int, ...] = (1024,)
    epochs: int = 4000
    lr: float = 1e-2
    eval_every: int | None = None
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        self.families = tuple(self.families)
        self.hidden = tuple(int(h) for h in self.hidden)
        bad = [f for f in self.families if f not in FAMILIES]
        if bad or not self.families:
            raise DiagnosticError(f"binding complexity: families {list(self.families)} must be a non-empty subset of {', '.join(FAMILIES)}")
        if self.epochs < 1:
            raise DiagnosticError(f"binding complexity: epochs {self.epochs} must be >= 1")
        if not self.lr > 0:
            raise DiagnosticError(f"binding complexity: lr {self.lr} must be > 0")
        if any(h < 1 for h in self.hidden):
            raise DiagnosticError(f"binding complexity: hidden widths {list(self.hidden)} must be >= 1")
        if self.eval_every is not None and self.eval_every < 1:
            raise DiagnosticError(f"binding complexity: eval_every {self.eval_every} must be >= 1 (or None)")


class SceneApproximator(nn.Module):
    """``g(labels) → scene embedding`` of one family (the reference's ``MLP`` with the profile's
    flags: ``regular_mlp`` = concat, ``mult_linear`` = ``mult_probes``, ``sum_mult_linear`` =
    ``mult_probes`` + ``sum_and_mult``; ``use_W_mult`` and ``mult_within_obj`` off).

    Args:
        family: one of :data:`FAMILIES`.
        n_values: values per label slot (S slots).
        dim: the embedding width D.
        hidden: hidden widths (``regular_mlp`` only).
    Forward: int64 ``[B, S]`` value indices → float32 ``[B, D]``.
    """

    def __init__(self, family: str, n_values: list[int], dim: int, hidden: tuple[int, ...] = (1024,)):
        super().__init__()
        if family not in FAMILIES:
            raise DiagnosticError(f"binding complexity: unknown family {family!r}; choose from {', '.join(FAMILIES)}")
        self.family = family
        self.embeddings = nn.ModuleList(nn.Embedding(int(v), dim) for v in n_values)
        if family == "sum_mult_linear":
            self.sum_embeddings = nn.ModuleList(nn.Embedding(int(v), dim) for v in n_values)
        layers: list[nn.Module] = []
        width = dim * len(n_values) if family == "regular_mlp" else (2 * dim if family == "sum_mult_linear" else dim)
        for h in (hidden if family == "regular_mlp" else ()):
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = [emb(x[:, s]) for s, emb in enumerate(self.embeddings)]
        if self.family == "regular_mlp":
            h = torch.cat(e, 1)
        else:
            h = torch.stack(e, 1).prod(1)
            if self.family == "sum_mult_linear":
                h = torch.cat([h, torch.stack([emb(x[:, s]) for s, emb in enumerate(self.sum_embeddings)], 1).sum(1)], 1)
        return self.net(h)


def r2_score(y, pred, mean) -> float:
    """``1 − Σ‖y − ŷ‖² / Σ‖y − mean‖²`` pooled over scenes and dimensions (float64); nan when the
    set is empty or SST is 0.

    Args:
        y, pred: float ``[N, D]``; mean: float ``[D]`` (the mean of *all* scenes scored).
    """
    y = np.asarray(y, np.float64)
    if not len(y):
        return float("nan")
    sse = float(((y - np.asarray(pred, np.float64)) ** 2).sum())
    sst = float(((y - np.asarray(mean, np.float64)) ** 2).sum())
    return 1.0 - sse / sst if sst > 0 else float("nan")


def _check(labels, y, n_values, what):
    labels = np.asarray(labels.detach().cpu() if hasattr(labels, "detach") else labels, dtype=np.int64)
    y = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y, dtype=np.float32)
    if labels.ndim != 2 or y.ndim != 2 or len(labels) != len(y):
        raise DiagnosticError(f"binding complexity ({what}): labels must be [N, S] and embeddings [N, D] with the same N, "
                              f"got {labels.shape} and {y.shape}")
    if labels.shape[1] != len(n_values):
        raise DiagnosticError(f"binding complexity ({what}): {labels.shape[1]} label slots for {len(n_values)} n_values")
    if len(labels) and ((labels < 0).any() or (labels >= np.asarray(n_values)[None, :]).any()):
        raise DiagnosticError(f"binding complexity ({what}): a label is outside 0..n_values-1 of its slot "
                              "(scenes with a missing object or value must be dropped before fitting)")
    if not np.isfinite(y).all():
        raise DiagnosticError(f"binding complexity ({what}): the embeddings hold non-finite values")
    return labels, y


def fit_approximator(labels, y, n_values: list[int], family: str, *, held_out=None, config: ComplexityConfig | None = None,
                     monitor: Callable[[int, nn.Module], None] | None = None) -> tuple[SceneApproximator, dict]:
    """Fit one approximator by full-batch MSE with Adam at a constant learning rate.

    Args:
        labels: int ``[N, S]`` value index per label slot of the *fitting* scenes (train split).
        y: float ``[N, D]`` their frozen scene embeddings.
        n_values: values per slot.
        family: one of :data:`FAMILIES`.
        held_out: optional bool ``[N]``: the scene holds a held-out object type / combination; any
            True raises.
        config: :class:`ComplexityConfig` (its ``families`` is ignored here).
        monitor: called as ``monitor(epoch, model)`` after every ``eval_every``-th epoch and the
            last one (under ``no_grad``, model in eval mode).
    Returns:
        ``(model on config.device, {"final_loss": float, "epochs": int, "params": int, "seconds": float})``.
    Raises:
        LeakageError: a fitting scene is flagged held-out.
        DiagnosticError: shapes that disagree, labels out of range, non-finite embeddings, no scene.
    """
    cfg = config or ComplexityConfig()
    labels, y = _check(labels, y, n_values, "fit")
    refuse_held_out(len(labels), held_out, "binding complexity", "fitting scenes",
                    "hold held-out object types; the approximators are fitted on seen types only (the train split) so that "
                    "test_ood measures generalization: drop them, or pass the train split's scenes")
    if not len(labels):
        raise DiagnosticError("binding complexity: no fitting scene")
    dev = torch.device(cfg.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = SceneApproximator(family, list(n_values), y.shape[1], cfg.hidden).to(dev)
    x_t, y_t = torch.from_numpy(labels).to(dev), torch.from_numpy(y).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    every = cfg.eval_every or max(1, cfg.epochs // 10)
    t0 = time.perf_counter()
    loss = torch.tensor(float("nan"))
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x_t), y_t)
        loss.backward()
        opt.step()
        if monitor is not None and (epoch % every == 0 or epoch == cfg.epochs):
            model.eval()
            with torch.no_grad():
                monitor(epoch, model)
    model.eval()
    info = {"final_loss": float(loss.detach()), "epochs": cfg.epochs, "params": int(sum(p.numel() for p in model.parameters())),
            "seconds": time.perf_counter() - t0}
    return model, info


@torch.no_grad()
def predict(model: nn.Module, labels, batch_size: int = 65536) -> np.ndarray:
    """float32 ``[N, D]`` predicted embeddings of int ``[N, S]`` labels (batched)."""
    dev = next(model.parameters()).device
    labels = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    out = [model(labels[s:s + batch_size].to(dev)).float().cpu() for s in range(0, len(labels), batch_size)]
    return torch.cat(out).numpy() if out else np.zeros((0, model.net[-1].out_features), np.float32)


def binding_complexity(train: tuple, evals: dict[str, tuple], n_values: list[int], config: ComplexityConfig | None = None,
                       probe_score: Callable[[np.ndarray, np.ndarray], dict] | None = None) -> dict:
    """Fit each family on the train scenes and score R² (and, with ``probe_score``, the frozen
    probes on the predicted embeddings) on every evaluation set, at the final epoch.

    Args:
        train: ``(labels int [N, S], embeddings float [N, D], held_out bool [N] or None)`` of the
            fitting scenes (the train split: seen object types only).
        evals: set name (``test_id``, ``test_ood``, ...) -> ``(labels int [M, S], embeddings [M, D])``.
        n_values: values per label slot.
        config: :class:`ComplexityConfig`.
        probe_score: ``fn(embeddings [M, D], labels [M, S]) -> {name: number}``, e.g. the frozen
            concept probes' accuracy; applied to the true embeddings once per set
            (``probe_true``) and to each family's predictions.
    Returns:
        ``{"n": {set: scenes}, "sst_mean": "...", "probe_true": {set: {...}},
        "families": {family: {"train": {"r2", "mse", ...}, set: {"r2", "mse", ...}, "final_loss", "epochs",
        "params", "seconds", "curve": {"epoch": [...], set: [r2, ...]}}}}``. R²'s SST is around
        the mean embedding of the train and evaluation scenes together.
    Raises:
        LeakageError: a held-out training scene; DiagnosticError: bad shapes or labels.
    """
    cfg = config or ComplexityConfig()
    ltr, ytr = _check(train[0], train[1], n_values, "train")
    sets = {"train": (ltr, ytr)}
    for name, (lab, y) in evals.items():
        if name == "train":
            raise DiagnosticError("binding complexity: an evaluation set may not be called 'train'")
        sets[name] = _check(lab, y, n_values, name)
    mean = np.concatenate([y for _, y in sets.values()]).astype(np.float64).mean(0)
    out: dict = {"n": {k: int(len(v[0])) for k, v in sets.items()},
                 "sst_mean": "mean embedding of all scored scenes (" + ", ".join(sets) + ")", "families": {}}
    if probe_score is not None:
        out["probe_true"] = {k: probe_score(y, lab) for k, (lab, y) in sets.items() if len(lab)}
    for fam in cfg.families:
        curve: dict = {"epoch": [], **{k: [] for k in sets}}

        def monitor(epoch, model):
            curve["epoch"].append(epoch)
            for k, (lab, y) in sets.items():
                curve[k].append(r2_score(y, predict(model, lab), mean))

        model, info = fit_approximator(ltr, ytr, n_values, fam, held_out=train[2], config=cfg, monitor=monitor)
        rep: dict = {**info, "curve": curve}
        for k, (lab, y) in sets.items():
            if not len(lab):
                continue
            pred = predict(model, lab)
            r = {"r2": r2_score(y, pred, mean), "mse": float(((y.astype(np.float64) - pred) ** 2).mean()), "n": int(len(lab))}
            if probe_score is not None:
                r.update(probe_score(pred, lab))
            rep[k] = r
        out["families"][fam] = rep
    return out
