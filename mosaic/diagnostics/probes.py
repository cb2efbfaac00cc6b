"""Linear probes on frozen embeddings: per-concept probes, slot-wise binding probes, and the same
probes on every layer of a model (per-layer generalization).

Sources:

- Per-concept probes: Uselis, Dittadi & Oh (arXiv 2602.24264), code
  ``oshapio/necessary-compositionality``, ``src/complinearity/train_probes.py::train_all_heads_joint``:
  one ``Linear(D → V_h)`` with bias per concept on raw (not centred, not normalised) embeddings,
  the sum of the heads' cross-entropies, one Adam optimizer (weight decay 0, lr 1e-2 as the run
  script sets), cosine annealing to 0, 500 epochs, batch 256, seed 0; a seeded random validation
  slice of the training samples (5 %); validation every ``epochs/10`` epochs and at the end, each
  head keeping its best-validation state. (diagnostics.md §1.1.)
- Binding probes: "CLIP does not lack binding information" (linear probes recover which attribute
  goes with which object) and Uselis, Koishigarina & Oh (2026), ``binding-concepts-complexity``,
  ``run_probe_suite.py`` (diagnostics.md §2.1, whose object probe scores tuples as a set). Ours
  are two linear forms: *slot-wise* (:func:`slot_probe_report`): one head per (object slot,
  attribute), an object bound correctly when all its slot's heads are right; and *keyed*
  (:func:`fit_binding_probes`): for each object, its target attribute (e.g. colour) *given* its
  key attribute (e.g. shape), one ``Linear(D → V_target)`` per key value, trained on (scene, key)
  pairs whose key value occurs once in the scene. A bag of concepts fails both when scenes hold
  two objects. The keyed probe never sees a held-out combination's target for its key, so it is
  meaningful on seen combinations only; the slot-wise probe can reach held-out object types.
- Per-layer generalization: Uselis et al., ``oshapio/intermediate-layer-generalization``,
  ``intermediate_gen/intermediate_probe_model.py::LinearProbeModel`` and ``examples/``: the same
  linear probe on every layer's (frozen) output, trained on in-distribution data, scored out of
  distribution; the best layer is compared with the last (diagnostics.md §4). We pool tokens
  (mean / CLS / the encoder's own pooling) where the reference flattens ResNet maps.

**Leakage rule** (diagnostics.md §1 pitfalls): probes train on the train split's seen
combinations only, and their validation slice is cut from those; :func:`fit_linear_probes` and
:func:`fit_binding_probes` raise :class:`~mosaic.diagnostics.errors.LeakageError` when asked to
train on a sample flagged held-out. Accuracy is then reported on ``test_id`` (seen combinations)
and ``test_ood`` (held-out combinations).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from mosaic.diagnostics.errors import DiagnosticError, refuse_held_out


@dataclass
class ProbeConfig:
    """Probe training settings (defaults: the reference's, see the module docstring).

    Attributes:
        epochs: passes over the training samples (reference 500).
        batch_size: mini-batch size (reference 256).
        lr: Adam learning rate (reference run scripts 1e-2).
        weight_decay: Adam weight decay (reference 0).
        cosine: cosine-anneal the learning rate to 0 over the run.
        val_fraction: share of the training samples held back to select each head's best state
            (reference scripts 0.05; 0 disables selection: the final state is kept).
        evals: validations over the run (reference 10, plus one at the end).
        seed: seeds the split, the initialisation and the batch order.
        device: torch device.
    """

    epochs: int = 500
    batch_size: int = 256
    lr: float = 1e-2
    weight_decay: float = 0.0
    cosine: bool = True
    val_fraction: float = 0.05
    evals: int = 10
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self):
        for name, lo in (("epochs", 1), ("batch_size", 1), ("evals", 1)):
            if getattr(self, name) < lo:
                raise DiagnosticError(f"probe {name} {getattr(self, name)} must be >= {lo}")
        if not 0 <= self.val_fraction < 1:
            raise DiagnosticError(f"probe val_fraction {self.val_fraction} must be in [0, 1)")
        if not self.lr > 0:
            raise DiagnosticError(f"probe lr {self.lr} must be > 0")


@dataclass
class LinearProbes:
    """Trained linear heads on frozen features.

    Attributes:
        weights: per head float32 ``[V_h, D]``; biases: per head float32 ``[V_h]``.
        train_accuracy: per head, accuracy on the samples it trained on.
        val_accuracy: per head, best validation accuracy (nan without a validation slice).
    """

    weights: list[np.ndarray]
    biases: list[np.ndarray]
    train_accuracy: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)

    def logits(self, x) -> list[np.ndarray]:
        """Per head float ``[N, V_h]`` logits of features ``x`` ``[N, D]``."""
        x = _np(x, np.float32)
        return [x @ w.T + b for w, b in zip(self.weights, self.biases)]

    def predict(self, x) -> np.ndarray:
        """int64 ``[N, H]`` argmax value index per head (first index on ties)."""
        lg = self.logits(x)
        return np.stack([l.argmax(1) for l in lg], 1) if lg else np.zeros((len(x), 0), np.int64)

    def accuracy(self, x, y) -> list[float]:
        """Per head accuracy on features ``[N, D]`` and labels int ``[N, H]`` (labels < 0 left
        out of their head; nan for a head with no labelled sample)."""
        y = _np(y, np.int64).reshape(len(y), -1)
        pred = self.predict(x)
        out = []
        for h in range(y.shape[1]):
            ok = y[:, h] >= 0
            out.append(float((pred[ok, h] == y[ok, h]).mean()) if ok.any() else float("nan"))
        return out


def _np(x, dtype) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _check_train(x, held_out, what: str) -> None:
    refuse_held_out(len(x), held_out, what, "training samples",
                    "are held-out combinations; probes train on seen combinations only (the train split): drop them, "
                    "or pass the train split's features")


def fit_linear_probes(x, y, n_values: list[int] | None = None, *, held_out=None, config: ProbeConfig | None = None,
                      what: str = "linear probes") -> LinearProbes:
    """Train one linear head per concept on frozen features, jointly (reference protocol).

    Args:
        x: float ``[N, D]`` features of the *train split* (numpy or torch).
        y: int ``[N, H]`` value index per head (``-1``: no label, left out of that head's loss).
        n_values: values per head (default: max label + 1).
        held_out: optional bool ``[N]`` held-out flags of these samples; any True raises.
        config: :class:`ProbeConfig`.
    Returns:
        :class:`LinearProbes`.
    Raises:
        LeakageError: a training sample is flagged held-out.
        DiagnosticError: shapes that disagree, non-finite features, a head without labels.
    """
    cfg = config or ProbeConfig()
    x = _np(x, np.float32)
    y = _np(y, np.int64)
    y = y.reshape(len(y), -1)
    if x.ndim != 2 or len(x) != len(y):
        raise DiagnosticError(f"{what}: features must be [N, D] and labels [N, H] with the same N, got {x.shape} and {y.shape}")
    if not np.isfinite(x).all():
        raise DiagnosticError(f"{what}: the features hold non-finite values")
    _check_train(x, held_out, what)
    n_values = list(n_values) if n_values is not None else [int(y[:, h].max()) + 1 for h in range(y.shape[1])]
    for h, v in enumerate(n_values):
        if v < 1 or (y[:, h] >= 0).sum() == 0:
            raise DiagnosticError(f"{what}: head {h} has no labelled training sample")
        if y[:, h].max() >= v:
            raise DiagnosticError(f"{what}: head {h} has label {int(y[:, h].max())} >= its {v} values")
    w, b, tr, va = _fit(x, [y[:, h] for h in range(y.shape[1])], None, n_values, cfg)
    return LinearProbes(w, b, tr, va)


def _fit(x: np.ndarray, targets: list[np.ndarray], head_of: np.ndarray | None, n_values: list[int], cfg: ProbeConfig):
    """Joint training of H linear heads.

    Two layouts: ``head_of is None``: every sample feeds every head h with label ``targets[h]``
    (``-1``: skip); else there is one target vector ``targets[0]`` and sample i feeds only head
    ``head_of[i]`` (the binding probes' key). Returns per-head weights, biases, train and best
    validation accuracy.
    """
    dev = torch.device(cfg.device)
    g = torch.Generator().manual_seed(cfg.seed)
    n, d = x.shape
    perm = torch.randperm(n, generator=g)
    n_val = int(math.floor(cfg.val_fraction * n))
    val_idx, tr_idx = perm[:n_val], perm[n_val:]
    xt = torch.from_numpy(x).to(dev)
    H = len(n_values)
    if head_of is None:
        tg = torch.from_numpy(np.stack(targets, 1)).to(dev)                       # [N, H], -1: no label
    else:                                                                         # one head per sample
        t0 = np.asarray(targets[0], dtype=np.int64)
        tg = torch.from_numpy(np.where(np.arange(H)[None, :] == np.asarray(head_of)[:, None], t0[:, None], -1)).to(dev)
    offs = np.concatenate([[0], np.cumsum(n_values)]).astype(int)
    # every head's logits in one padded [B, H, Vmax] block (pad = -inf)
    vmax = int(max(n_values))
    pad_col = int(offs[-1])
    gather = torch.full((H, vmax), pad_col, dtype=torch.long)
    for h in range(H):
        gather[h, :n_values[h]] = torch.arange(offs[h], offs[h + 1])
    gather = gather.to(dev)
    torch.manual_seed(cfg.seed)
    init = torch.nn.Linear(d, int(offs[-1]))                                      # PyTorch's default init
    # parameters in the padded layout [H * Vmax, D + 1] (weights and bias), pad rows masked by -inf
    theta = torch.zeros(H * vmax, d + 1)
    real = gather.cpu().reshape(-1) != pad_col
    theta[real, :d] = init.weight.detach()[gather.cpu().reshape(-1)[real]]
    theta[real, d] = init.bias.detach()[gather.cpu().reshape(-1)[real]]
    theta = theta.to(dev)
    mask = torch.where(real, 0.0, float("-inf")).reshape(H, vmax).to(dev)
    xa = torch.cat([xt, torch.ones(n, 1, device=dev)], 1)                         # features with a bias column
    m_t, v_t = torch.zeros_like(theta), torch.zeros_like(theta)
    b1, b2, eps = 0.9, 0.999, 1e-8
    step = 0

    def logits(idx):
        return (xa[idx] @ theta.T).view(len(idx), H, vmax) + mask

    def adam_step(idx, lr):
        """One step of Adam (torch.optim.Adam's update, L2 weight decay as its ``weight_decay``) on
        the mean over the batch of Σ_h CE_h (the reference's summed heads), gradient in closed form:
        for softmax regression ∂CE/∂z = softmax(z) − onehot(y)."""
        nonlocal step, m_t, v_t, theta
        t = tg[idx]
        valid = (t >= 0)
        p = torch.softmax(logits(idx), -1)
        p.scatter_add_(2, t.clamp(min=0)[:, :, None], -valid[:, :, None].float())
        p *= valid[:, :, None]
        grad = p.reshape(len(idx), H * vmax).T @ xa[idx] / max(1, len(idx))
        if cfg.weight_decay:
            grad = grad + cfg.weight_decay * theta
        step += 1
        m_t.mul_(b1).add_(grad, alpha=1 - b1)
        v_t.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = (v_t.sqrt() / math.sqrt(1 - b2 ** step)).add_(eps)
        theta.addcdiv_(m_t, denom, value=-lr / (1 - b1 ** step))

    def accs(idx):
        t = tg[idx]
        hit = (logits(idx).argmax(2) == t) & (t >= 0)
        n_lab = (t >= 0).sum(0)
        return [float(hit[:, h].sum() / n_lab[h]) if int(n_lab[h]) else float("nan") for h in range(H)]

    def rows(h):
        return slice(h * vmax, h * vmax + n_values[h])

    best = [-1.0] * H
    best_state = [None] * H
    every = max(1, cfg.epochs // cfg.evals)
    with torch.no_grad():
        for epoch in range(cfg.epochs):
            # cosine annealing to 0 per epoch, as torch's CosineAnnealingLR stepped once an epoch
            lr = cfg.lr * (0.5 * (1 + math.cos(math.pi * epoch / max(1, cfg.epochs)))) if cfg.cosine else cfg.lr
            order = tr_idx[torch.randperm(len(tr_idx), generator=g)].to(dev)
            for s in range(0, len(order), cfg.batch_size):
                adam_step(order[s:s + cfg.batch_size], lr)
            if n_val and ((epoch + 1) % every == 0 or epoch == cfg.epochs - 1):
                for h, a in enumerate(accs(val_idx.to(dev))):
                    if not math.isnan(a) and a > best[h]:
                        best[h] = a
                        best_state[h] = theta[rows(h)].clone()
        for h in range(H):
            if best_state[h] is not None:
                theta[rows(h)] = best_state[h]
        tr = accs(tr_idx.to(dev))
    th = theta.cpu().numpy()
    weights = [th[rows(h), :d].copy() for h in range(H)]
    biases = [th[rows(h), d].copy() for h in range(H)]
    val = [b if b >= 0 else float("nan") for b in best]
    return weights, biases, tr, val


def concept_probes(train: tuple, evals: dict[str, tuple], names: list[str], n_values: list[int] | None = None,
                   config: ProbeConfig | None = None) -> tuple[dict, LinearProbes]:
    """Per-concept linear probes trained on the train split and scored on each evaluation split.

    Args:
        train: ``(features [N, D], labels int [N, H], held_out bool [N] or None)`` of the train split.
        evals: split name (``test_id``, ``test_ood``, ...) -> ``(features [M, D], labels int [M, H])``.
        names: H concept names.
        n_values: values per concept (default: max label over train and evals + 1).
        config: :class:`ProbeConfig`.
    Returns:
        ``({"train": {concept: acc}, "val": {concept: acc}, split: {concept: acc, "mean": m, "n": M}},
        probes)``.
    Raises:
        LeakageError: a training sample is held-out; DiagnosticError: bad shapes.
    """
    xtr, ytr, held = train
    ytr = _np(ytr, np.int64).reshape(len(ytr), -1)
    if len(names) != ytr.shape[1]:
        raise DiagnosticError(f"concept_probes: {len(names)} names for {ytr.shape[1]} label columns")
    if n_values is None:
        n_values = [int(max([ytr[:, h].max()] + [_np(y, np.int64).reshape(len(y), -1)[:, h].max() for _, y in evals.values() if len(y)])) + 1
                    for h in range(ytr.shape[1])]
    probes = fit_linear_probes(xtr, ytr, n_values, held_out=held, config=config, what="concept probes")
    out = {"train": dict(zip(names, probes.train_accuracy)), "val": dict(zip(names, probes.val_accuracy))}
    for split, (x, y) in evals.items():
        if not len(y):
            continue
        acc = probes.accuracy(x, y)
        known = [a for a in acc if not math.isnan(a)]
        out[split] = {**dict(zip(names, acc)), "mean": float(np.mean(known)) if known else float("nan"), "n": int(len(y))}
    return out, probes


# ----------------------------------------------------------------------------------------------
# binding probes
# ----------------------------------------------------------------------------------------------


def binding_pairs(objects, key_attr: int, target_attr: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (scene, key value, target value) triples of scenes' objects whose key value is unique
    in their scene (ambiguous keys, two objects of one shape, are left out).

    Args:
        objects: int ``[N, M, A]`` object tuples per scene (``-1`` rows: no object), e.g.
            :attr:`mosaic.lab.transformer.SplitData.objects`.
        key_attr, target_attr: attribute indices (e.g. shape and colour).
    Returns:
        ``(scene int64 [P], key int64 [P], target int64 [P])``.
    """
    o = _np(objects, np.int64)
    if o.ndim != 3:
        raise DiagnosticError(f"binding probes: objects must be [N, M, A], got shape {o.shape}")
    A = o.shape[2]
    for name, a in (("key_attr", key_attr), ("target_attr", target_attr)):
        if not 0 <= a < A:
            raise DiagnosticError(f"binding probes: {name} {a} is not an attribute index (0..{A - 1})")
    if key_attr == target_attr:
        raise DiagnosticError("binding probes: key_attr and target_attr are the same attribute; give two")
    valid = o[:, :, 0] >= 0
    key = o[:, :, key_attr]
    same = (key[:, :, None] == key[:, None, :]) & valid[:, :, None] & valid[:, None, :]
    unique = valid & (same.sum(2) == 1)
    scene, slot = np.nonzero(unique)
    return scene.astype(np.int64), key[scene, slot], o[scene, slot, target_attr]


@dataclass
class BindingProbes:
    """One linear head per key value: ``weights [K, V, D]``, ``biases [K, V]``."""

    weights: np.ndarray
    biases: np.ndarray
    train_accuracy: float = float("nan")
    val_accuracy: list[float] = field(default_factory=list)

    def predict(self, x, key) -> np.ndarray:
        """Target value int64 ``[P]`` of features ``x [P, D]`` under keys int ``[P]``."""
        x = _np(x, np.float32)
        key = _np(key, np.int64)
        lg = np.einsum("pd,pvd->pv", x, self.weights[key]) + self.biases[key]
        return lg.argmax(1)


def fit_binding_probes(x, objects, key_attr: int, target_attr: int, n_key: int, n_target: int, *, held_out=None,
                       config: ProbeConfig | None = None) -> BindingProbes:
    """Slot-wise binding probes: for each key value k (e.g. a shape), a linear head on the scene
    feature predicting the target attribute (e.g. the colour) of the scene's object with key k.

    Args:
        x: float ``[N, D]`` scene features of the *train split*.
        objects: int ``[N, M, A]`` object tuples (see :func:`binding_pairs`).
        key_attr, target_attr: attribute indices; n_key, n_target: their value counts.
        held_out: optional bool ``[N]`` flags; any True raises.
        config: :class:`ProbeConfig`.
    Raises:
        LeakageError: a held-out training scene; DiagnosticError: bad shapes or no usable pair.
    """
    cfg = config or ProbeConfig()
    x = _np(x, np.float32)
    _check_train(x, held_out, "binding probes")
    scene, key, tgt = binding_pairs(objects, key_attr, target_attr)
    if len(x) != len(_np(objects, np.int64)):
        raise DiagnosticError(f"binding probes: {len(x)} features for {len(objects)} scenes")
    if not len(scene):
        raise DiagnosticError("binding probes: no object has a key value that is unique in its scene")
    w, b, tr, va = _fit(x[scene], [tgt], key, [n_target] * n_key, cfg)
    counts = np.bincount(key, minlength=n_key)
    train_acc = float(np.nansum([a * c for a, c in zip(tr, counts)]) / counts.sum())
    return BindingProbes(np.stack(w), np.stack(b), train_acc, va)


def binding_probe_report(train: tuple, evals: dict[str, tuple], key_attr: int, target_attr: int, n_key: int, n_target: int,
                         config: ProbeConfig | None = None, names: tuple[str, str] = ("key", "target")) -> dict:
    """Binding probes trained on the train split, scored per evaluation split.

    Args:
        train: ``(features [N, D], objects int [N, M, A], held_out bool [N] or None)``.
        evals: split -> ``(features [M, D], objects int [M, M', A])``.
        names: the key and target attribute names (for the report).
    Returns:
        ``{"key": name, "target": name, "train": acc, split: {"accuracy", "n_pairs"}}``.
    """
    xtr, otr, held = train
    probes = fit_binding_probes(xtr, otr, key_attr, target_attr, n_key, n_target, held_out=held, config=config)
    out: dict = {"key": names[0], "target": names[1], "train": probes.train_accuracy}
    for split, (x, objs) in evals.items():
        scene, key, tgt = binding_pairs(objs, key_attr, target_attr)
        if not len(scene):
            continue
        pred = probes.predict(_np(x, np.float32)[scene], key)
        out[split] = {"accuracy": float((pred == tgt).mean()), "n_pairs": int(len(scene))}
    return out


def slot_probe_report(train: tuple, evals: dict[str, tuple], n_values: list[int], attributes: list[str],
                      config: ProbeConfig | None = None) -> dict:
    """Slot-wise binding probes: one linear head per (object slot, attribute) on the scene
    feature, trained on the train split; an object counts as bound correctly when every attribute
    head of its slot is right (its colour *and* its shape, in the same slot).

    Unlike the keyed probe (:func:`fit_binding_probes`), every head's classes occur in training
    even under an object-level holdout (each colour is seen in each slot with some shape), so
    held-out object types are reachable: a linear, slot-bound code scores high on them.

    Args:
        train: ``(features [N, D], objects int [N, M, A], held_out bool [N] or None)``.
        evals: split -> ``(features, objects)``.
        n_values: values per attribute; attributes: A attribute names.
    Returns:
        ``{"slots": M, "train": object accuracy, split: {"object_accuracy", <attribute>: accuracy,
        "n_objects"}}``.
    """
    x, objs, held = train
    objs = _np(objs, np.int64)
    if objs.ndim != 3 or objs.shape[2] != len(attributes):
        raise DiagnosticError(f"slot probes: objects must be [N, M, {len(attributes)}], got {objs.shape}")
    M, A = objs.shape[1], objs.shape[2]

    def flat(o):
        o = _np(o, np.int64)
        if o.shape[1] < M:
            o = np.concatenate([o, -np.ones((len(o), M - o.shape[1], A), np.int64)], 1)
        return o[:, :M].reshape(len(o), M * A)

    y = flat(objs)
    used = [h for h in range(M * A) if (y[:, h] >= 0).any()]
    probes = fit_linear_probes(x, y[:, used], [n_values[h % A] for h in used], held_out=held, config=config, what="slot probes")

    def score(xs, o):
        yy = flat(o)
        pred = np.full_like(yy, -2)
        pred[:, used] = probes.predict(xs)
        valid = yy[:, ::A] >= 0                                    # [N, M] objects present
        hit = (pred == yy).reshape(len(yy), M, A)
        out = {"object_accuracy": float(hit.all(2)[valid].mean()) if valid.any() else float("nan"), "n_objects": int(valid.sum())}
        for a, name in enumerate(attributes):
            out[name] = float(hit[:, :, a][valid].mean()) if valid.any() else float("nan")
        return out

    rep: dict = {"slots": int(M), "train": score(_np(x, np.float32), objs)["object_accuracy"]}
    for split, (xs, o) in evals.items():
        if len(o):
            rep[split] = score(_np(xs, np.float32), o)
    return rep


# ----------------------------------------------------------------------------------------------
# per-layer generalization
# ----------------------------------------------------------------------------------------------


def layer_curve(layers: dict[str, dict[str, np.ndarray]], labels: dict[str, np.ndarray], names: list[str], *,
                held_out_train=None, seen: str = "test_id", held: str = "test_ood", config: ProbeConfig | None = None,
                n_values: list[int] | None = None) -> dict:
    """Per-layer generalization: the concept probes of :func:`concept_probes` on each layer.

    Args:
        layers: layer name (in depth order, the last is the model's output layer) -> split ->
            float ``[N_split, D_layer]`` features; every layer has the ``train`` split.
        labels: split -> int ``[N_split, H]`` labels (the same for every layer).
        names: H concept names.
        held_out_train: optional bool ``[N_train]`` held-out flags of the train split (any True raises).
        seen, held: the splits of seen and held-out combinations.
    Returns:
        ``{"layers": [name, ...], "seen": [mean probe accuracy per layer], "held_out": [...],
        "val": [mean validation accuracy], "per_concept": {layer: {split: {concept: acc}}},
        "last": name, "last_held_out": acc, "best_by_val": name, "best_by_val_held_out": acc,
        "best_held_out_layer": name (oracle: chosen on held-out itself, for the curve only),
        "best_held_out": acc, "gain_over_last": best_by_val_held_out − last_held_out}``. The
        best layer by validation (seen combinations, the reference's zero-shot protocol) breaks
        ties toward the deeper layer.
    Raises:
        DiagnosticError: no layer, a layer without ``train`` features; LeakageError as above.
    """
    if not layers:
        raise DiagnosticError("layer_curve: no layer features given")
    out = {"layers": [], "seen": [], "held_out": [], "val": [], "per_concept": {}}
    for name, feats in layers.items():
        if "train" not in feats:
            raise DiagnosticError(f"layer_curve: layer {name!r} has no train-split features")
        evals = {s: (feats[s], labels[s]) for s in (seen, held) if s in feats and s in labels}
        rep, _ = concept_probes((feats["train"], labels["train"], held_out_train), evals, names, n_values, config)
        out["layers"].append(name)
        out["seen"].append(rep.get(seen, {}).get("mean", float("nan")))
        out["held_out"].append(rep.get(held, {}).get("mean", float("nan")))
        vals = [v for v in rep["val"].values() if not math.isnan(v)]
        out["val"].append(float(np.mean(vals)) if vals else float("nan"))
        out["per_concept"][name] = rep
    ho = np.array(out["held_out"], dtype=float)
    val = np.array(out["val"], dtype=float)
    last = len(ho) - 1
    out["last"] = out["layers"][last]
    out["last_held_out"] = float(ho[last])
    # ties go to the deeper layer: an earlier layer wins only when strictly better on validation
    bv = last - int(np.nanargmax(val[::-1])) if np.isfinite(val).any() else last
    out["best_by_val"] = out["layers"][bv]
    out["best_by_val_held_out"] = float(ho[bv])
    bh = int(np.nanargmax(ho)) if np.isfinite(ho).any() else last
    out["best_held_out_layer"] = out["layers"][bh]
    out["best_held_out"] = float(ho[bh])
    out["gain_over_last"] = float(ho[bv] - ho[last])
    return out
