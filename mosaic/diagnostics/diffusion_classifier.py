"""A conditional diffusion model as a zero-shot classifier: for each test image, the condition
with the lowest expected denoising error.

Sources:

- Li et al. (2023), "Your Diffusion Model is Secretly a Zero-Shot Classifier", code
  ``diffusion-classifier/diffusion-classifier`` ``eval_prob_adaptive.py::eval_prob_adaptive``:
  error = MSE over C×H×W between the noise and the prediction (``--loss l2``; l1 is an option),
  one noise per (timestep, trial) shared by every candidate, uniform timestep weighting, and
  *adaptive elimination*: evaluate a coarse timestep subset for every candidate, keep the best,
  add timesteps for the survivors. Timesteps: the odd grid ``{1, 3, ..., T−1}`` sliced
  ``[⌊(T/2)/n/2⌋ :: ⌊(T/2)/n⌋]`` for n of them (n = 50: 11, 31, ..., 991).
- Jeong et al. (2025), "Diffusion classifiers understand compositionality, but conditions apply"
  (Self-Bench), code ``eugene6923/Diffusion-Classifiers-Compositionality``
  ``diffusion_itm.py::score_batch``: the *unsquared* L2 norm of the error over the whole input is
  the default there (``norm="l2"`` here), score = −mean over timesteps, argmax; one fixed noise
  per timestep shared by all candidates and all images; timestep weightings for flow matching.
  (diagnostics.md §3.)

mosaic's models are pixel-space DDPM UNets / DiTs conditioned on concept values; the candidates
are every combination of the grid, **held-out combinations included**, so discriminative accuracy
can be reported for seen vs held-out images next to the model's generation accuracy. Errors are
computed in float32; for a v-prediction model the prediction is converted to a noise prediction
(``ε̂ = √ᾱ v̂ + √(1−ᾱ) x_t``) so every model is scored on the same ε error (``target="model"``
scores the model's own target instead).

The core function :func:`classify` needs only a callable
``denoise_error(x0 [B, C, H, W] float, cond [B, ...], t int64 [B], noise [B, C, H, W]) -> [B]``
(an oracle in tests, :func:`model_denoise_error` for a lab model).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from mosaic.diagnostics.errors import DiagnosticError

DenoiseError = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

TIMESTEP_KINDS = ("li", "linspace", "later")
WEIGHTINGS = ("uniform", "min_snr")
NORMS = ("mse", "l2", "l1")


def timesteps(kind: str = "li", n: int = 50, num_train_timesteps: int = 1000) -> torch.Tensor:
    """A fixed timestep set, int64 ``[n]``, increasing.

    Args:
        kind: ``li`` (Li et al.'s odd grid slice, see the module docstring), ``linspace`` (n evenly
            spaced in ``[0, T−1]``, rounded), ``later`` (n evenly spaced in ``[T/2, T−1]``, like
            Self-Bench's ``--later_timesteps``).
        n: how many; num_train_timesteps: T of the noise schedule.
    Raises:
        DiagnosticError: an unknown kind, ``n < 1`` or more timesteps than the schedule has.
    """
    T = int(num_train_timesteps)
    if kind not in TIMESTEP_KINDS:
        raise DiagnosticError(f"diffusion classifier: timesteps kind {kind!r} is not one of {', '.join(TIMESTEP_KINDS)}")
    if n < 1 or n > (T // 2 if kind in ("li", "later") else T):
        raise DiagnosticError(f"diffusion classifier: {n} timesteps of kind {kind!r} do not fit a {T}-step schedule")
    if kind == "li":
        grid = torch.arange(1, T, 2)
        stride = max(1, len(grid) // n)
        return grid[stride // 2::stride][:n].long()
    lo = 0 if kind == "linspace" else T // 2
    return torch.unique(torch.linspace(lo, T - 1, n).round().long())


def timestep_weights(kind: str, t: torch.Tensor, alphas_cumprod: torch.Tensor | None = None, gamma: float = 5.0) -> torch.Tensor:
    """Weights float64 ``[len(t)]`` (normalised to sum 1) of the per-timestep ε errors.

    ``uniform``: every timestep alike (Li et al.; Self-Bench with Stable Diffusion).
    ``min_snr``: ``min(SNR_t, gamma) / SNR_t`` with ``SNR = ᾱ/(1−ᾱ)``, the Min-SNR-γ weighting
    (Hang et al. 2023) that the lab's ``model.schedule.snr_gamma`` trains ε-models with, so the
    classifier weighs timesteps as the training loss did (it down-weights low-noise timesteps).
    Learned weights (Self-Bench ``learn_timestep_weights.py``) can be passed to :func:`classify`
    directly.

    Raises:
        DiagnosticError: an unknown kind, or ``min_snr`` without ``alphas_cumprod``.
    """
    if kind not in WEIGHTINGS:
        raise DiagnosticError(f"diffusion classifier: weighting {kind!r} is not one of {', '.join(WEIGHTINGS)}")
    if kind == "uniform":
        w = torch.ones(len(t), dtype=torch.float64)
    else:
        if alphas_cumprod is None:
            raise DiagnosticError(f"diffusion classifier: weighting {kind!r} needs the schedule's alphas_cumprod")
        ab = alphas_cumprod.double().cpu()[t.cpu()]
        snr = ab / (1 - ab).clamp(min=1e-12)
        w = snr.clamp(max=gamma) / snr.clamp(min=1e-12)
    return w / w.sum()


def noise_bank(shape: tuple[int, ...], n_timesteps: int, n_trials: int = 1, seed: int = 0) -> torch.Tensor:
    """Fixed Gaussian noises float32 ``[n_timesteps, n_trials, *shape]``: entry ``[k, j]`` is
    seeded by ``(seed, k, j)`` alone, and is shared by every candidate and every image (as the
    references do), so errors of different conditions are compared on the same noise."""
    out = torch.empty((n_timesteps, n_trials, *shape))
    for k in range(n_timesteps):
        for j in range(n_trials):
            g = torch.Generator().manual_seed(int(seed) * 1_000_003 + k * 1009 + j)
            out[k, j] = torch.randn(shape, generator=g)
    return out


@dataclass
class Classification:
    """Result of :func:`classify`.

    Attributes:
        errors: float64 ``[N, K]`` weighted mean denoising error of each image under each
            candidate (``inf`` for a candidate eliminated before the last stage).
        pred: int64 ``[N]`` index of the best candidate (lowest error; first index on ties).
        evaluations: denoiser evaluations (image × candidate × timestep × trial) performed.
        seconds: wall time.
    """

    errors: np.ndarray
    pred: np.ndarray
    evaluations: int
    seconds: float

    @property
    def images_per_second(self) -> float:
        return len(self.pred) / self.seconds if self.seconds > 0 else float("nan")


def classify(denoise_error: DenoiseError, images: torch.Tensor, candidates: torch.Tensor, t: torch.Tensor, *,
             weights: torch.Tensor | None = None, n_trials: int = 1, seed: int = 0, batch_size: int = 256,
             stages: list[tuple[int, int]] | None = None, device=None, progress=None) -> Classification:
    """Classify images by the candidate condition with the lowest expected denoising error.

    ``error(i, c) = Σ_k w_k · mean_j denoise_error(x0_i, c, t_k, ε_{k,j})`` over the fixed
    timesteps ``t`` and noises ``ε`` (:func:`noise_bank`, seeded by ``seed``).

    Args:
        denoise_error: the callable of the module docstring (errors per sample, float ``[B]``).
        images: float ``[N, C, H, W]`` clean inputs, in the model's range (the lab: [-1, 1]).
        candidates: ``[K, ...]`` encoded conditions (e.g. ``conditioner.encode``), shared by all images.
        t: int64 ``[T]`` timesteps (:func:`timesteps`).
        weights: float ``[T]`` per-timestep weights (default uniform; :func:`timestep_weights`).
        n_trials: noises per timestep.
        batch_size: (image, candidate) pairs per call of ``denoise_error``.
        stages: adaptive elimination (Li et al.): ``[(n_t, keep), ...]``: stage s evaluates an
            evenly strided subset of ``n_t`` of the timesteps (cumulative with the earlier stages)
            for the surviving candidates, then keeps the ``keep`` with the lowest mean error so
            far; a last stage over all timesteps for the survivors is added. None: every
            candidate at every timestep.
        progress: called with the number of images done.
    Returns:
        :class:`Classification`.
    Raises:
        DiagnosticError: shapes that disagree, no candidate, bad stages or weights, a denoiser
        that returns the wrong shape or non-finite errors.
    """
    t0 = time.perf_counter()
    if images.ndim != 4:
        raise DiagnosticError(f"diffusion classifier: images must be float [N, C, H, W], got shape {tuple(images.shape)}")
    K, T = len(candidates), len(t)
    if K < 1 or T < 1:
        raise DiagnosticError(f"diffusion classifier: needs at least one candidate and one timestep, got {K} and {T}")
    w = (torch.ones(T, dtype=torch.float64) / T) if weights is None else torch.as_tensor(weights, dtype=torch.float64)
    if w.shape != (T,) or (w < 0).any() or not w.sum() > 0:
        raise DiagnosticError(f"diffusion classifier: weights must be {T} non-negative numbers with a positive sum, got {tuple(w.shape)}")
    plan = _plan(stages, T, K)
    dev = torch.device(device) if device is not None else images.device
    bank = noise_bank(tuple(images.shape[1:]), T, n_trials, seed)
    t = t.long().cpu()
    N = len(images)
    errors = np.full((N, K), np.inf)
    evaluations = 0
    per_t = torch.full((N, K, T), float("nan"), dtype=torch.float64)   # mean over trials
    img_chunk = max(1, batch_size // min(K, batch_size))               # images per outer chunk
    for s0 in range(0, N, img_chunk):
        idx_img = torch.arange(s0, min(N, s0 + img_chunk))
        alive = torch.arange(K).expand(len(idx_img), K).clone()         # [b, S] surviving candidates
        done_t = torch.zeros(T, dtype=torch.bool)
        for n_t, keep in plan:
            new_t = [k for k in _strided(T, n_t) if not done_t[k]]
            for k in new_t:
                pairs_i = idx_img[:, None].expand_as(alive).reshape(-1)
                pairs_c = alive.reshape(-1)
                vals = torch.zeros(len(pairs_i), dtype=torch.float64)
                for j in range(n_trials):
                    vals += _eval_pairs(denoise_error, images, candidates, pairs_i, pairs_c, int(t[k]), bank[k, j], batch_size, dev)
                    evaluations += len(pairs_i)
                per_t[pairs_i, pairs_c, k] = vals / n_trials
                done_t[k] = True
            # rank survivors by the weighted mean over the timesteps evaluated so far
            wk = w * done_t
            sub = per_t[idx_img[:, None], alive][:, :, done_t]                      # [b, S, T_done]
            score = (sub * (wk[done_t] / wk[done_t].sum())).sum(-1)                   # [b, S]
            if keep < alive.shape[1]:
                order = torch.argsort(score, dim=1, stable=True)[:, :keep]
                alive = torch.gather(alive, 1, order)
        final = per_t[idx_img[:, None], alive]                                       # [b, S, T]
        score = (final * (w / w.sum())).sum(-1)
        e = np.full((len(idx_img), K), np.inf)
        np.put_along_axis(e, alive.numpy(), score.numpy(), axis=1)
        errors[idx_img.numpy()] = e
        if progress:
            progress(int(idx_img[-1]) + 1)
    pred = np.argmin(errors, axis=1).astype(np.int64)
    return Classification(errors, pred, evaluations, time.perf_counter() - t0)


def _strided(T: int, n: int) -> list[int]:
    if n >= T:
        return list(range(T))
    step = T / n
    return sorted({min(T - 1, int(step / 2 + i * step)) for i in range(n)})


def _plan(stages, T: int, K: int) -> list[tuple[int, int]]:
    if not stages:
        return [(T, K)]
    plan = []
    prev_keep, prev_n = K, 0
    for st in stages:
        if len(st) != 2:
            raise DiagnosticError(f"diffusion classifier: each stage is (n_timesteps, keep), got {st!r}")
        n_t, keep = int(st[0]), int(st[1])
        if not (1 <= n_t <= T) or n_t < prev_n or not (1 <= keep <= prev_keep):
            raise DiagnosticError(f"diffusion classifier: stage {st!r} must have 1 <= n_timesteps <= {T} (non-decreasing) and "
                                  f"1 <= keep <= {prev_keep} (non-increasing)")
        plan.append((n_t, keep))
        prev_keep, prev_n = keep, n_t
    if plan[-1][0] < T:
        plan.append((T, prev_keep))
    return plan


def _eval_pairs(fn, images, candidates, pi, pc, t: int, noise, batch_size: int, dev) -> torch.Tensor:
    out = torch.empty(len(pi), dtype=torch.float64)
    for s in range(0, len(pi), batch_size):
        bi, bc = pi[s:s + batch_size], pc[s:s + batch_size]
        x0 = images[bi].to(dev).float()
        cond = candidates[bc].to(dev)
        nz = noise.to(dev).expand_as(x0)
        tt = torch.full((len(bi),), t, dtype=torch.long, device=dev)
        with torch.no_grad():
            e = fn(x0, cond, tt, nz)
        e = torch.as_tensor(e).reshape(-1)
        if e.shape[0] != len(bi):
            raise DiagnosticError(f"diffusion classifier: denoise_error returned {e.shape[0]} errors for a batch of {len(bi)}")
        if not torch.isfinite(e).all():
            raise DiagnosticError(f"diffusion classifier: denoise_error returned non-finite errors at timestep {t}")
        out[s:s + len(bi)] = e.double().cpu()
    return out


def reduce_error(diff: torch.Tensor, norm: str = "mse") -> torch.Tensor:
    """Per-sample error of ``diff`` ``[B, ...]``: ``mse`` (mean square, Li et al.), ``l2``
    (unsquared norm, Self-Bench's default), ``l1`` (mean absolute)."""
    d = diff.float().flatten(1)
    if norm == "mse":
        return d.pow(2).mean(1)
    if norm == "l2":
        return d.pow(2).sum(1).sqrt()
    if norm == "l1":
        return d.abs().mean(1)
    raise DiagnosticError(f"diffusion classifier: norm {norm!r} is not one of {', '.join(NORMS)}")


def model_denoise_error(model, scheduler, *, norm: str = "mse", target: str = "epsilon", autocast: str | None = None) -> DenoiseError:
    """The ``denoise_error`` callable of a lab model (:class:`mosaic.lab.diffusion.DiffusionModel`
    or anything with ``forward(x_t, t, cond) -> prediction``) and its training noise scheduler
    (diffusers ``DDPMScheduler``: ``add_noise``, ``alphas_cumprod``, ``config.prediction_type``).

    Args:
        norm: ``mse`` / ``l2`` / ``l1`` (:func:`reduce_error`).
        target: ``epsilon`` (score ε̂ against ε, converting a v-prediction) or ``model`` (score
            the model's own target: ε, or v = √ᾱ ε − √(1−ᾱ) x₀).
        autocast: ``bf16`` / ``fp16`` on a GPU (errors are reduced in float32).
    Raises:
        DiagnosticError: an unknown norm, target or prediction type.
    """
    if norm not in NORMS:
        raise DiagnosticError(f"diffusion classifier: norm {norm!r} is not one of {', '.join(NORMS)}")
    if target not in ("epsilon", "model"):
        raise DiagnosticError(f"diffusion classifier: target {target!r} is not one of epsilon, model")
    ptype = scheduler.config.prediction_type
    if ptype not in ("epsilon", "v_prediction"):
        raise DiagnosticError(f"diffusion classifier: prediction type {ptype!r} is not supported (epsilon, v_prediction)")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast or "")

    def fn(x0, cond, t, noise):
        ab = scheduler.alphas_cumprod.to(x0.device)[t].float().view(-1, 1, 1, 1)
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        with torch.autocast(x0.device.type, dtype=dtype, enabled=dtype is not None):
            pred = model(xt, t, cond).float()
        if ptype == "epsilon" or target == "model":
            ref = noise if ptype == "epsilon" else ab.sqrt() * noise - (1 - ab).sqrt() * x0
            return reduce_error(pred - ref, norm)
        eps_hat = ab.sqrt() * pred + (1 - ab).sqrt() * xt
        return reduce_error(eps_hat - noise, norm)

    return fn


# ----------------------------------------------------------------------------------------------
# candidates and per-concept scoring
# ----------------------------------------------------------------------------------------------


def combination_grid(n_values: list[int], limit: int = 4096) -> np.ndarray:
    """Every combination of value indices, int64 ``[Π n_values, C]`` (row-major, last concept fastest).

    Raises:
        DiagnosticError: more than ``limit`` combinations (score per concept or on fewer concepts).
    """
    total = math.prod(int(v) for v in n_values)
    if total > limit:
        raise DiagnosticError(f"diffusion classifier: the grid has {total} combinations, more than the limit {limit}: each costs "
                              "a denoiser pass per timestep and image; raise the limit or use stages (adaptive elimination)")
    return np.stack(np.meshgrid(*[np.arange(v) for v in n_values], indexing="ij"), -1).reshape(-1, len(n_values)).astype(np.int64)


def per_concept_predictions(errors: np.ndarray, candidate_labels: np.ndarray, mode: str = "mean",
                            temperature: float = 1.0) -> np.ndarray:
    """Per-concept predictions from candidate errors, marginalising the other concepts.

    Args:
        errors: float ``[N, K]`` (:attr:`Classification.errors`).
        candidate_labels: int ``[K, C]`` value index of each candidate per concept.
        mode: ``mean`` (a value's error = the mean error of the candidates with that value, i.e.
            the other concepts averaged out uniformly), ``min`` (the value of the best candidate:
            the joint prediction's value; works with elimination), ``logsumexp`` (Bayes with
            ``log p(x|c) ≈ −error/temperature`` and a uniform prior over candidates:
            ``log p(v|x) = logsumexp_{c: c_h = v}(−error_c/temperature)``).
    Returns:
        int64 ``[N, C]`` predicted value index per concept.
    Raises:
        DiagnosticError: an unknown mode; ``mean`` / ``logsumexp`` with eliminated candidates.
    """
    e = np.asarray(errors, dtype=np.float64)
    lab = np.asarray(candidate_labels, dtype=np.int64)
    if mode not in ("mean", "min", "logsumexp"):
        raise DiagnosticError(f"diffusion classifier: per-concept mode {mode!r} is not one of mean, min, logsumexp")
    if mode != "min" and not np.isfinite(e).all():
        raise DiagnosticError(f"diffusion classifier: per-concept mode {mode!r} needs every candidate scored; with stages "
                              "(adaptive elimination) use mode 'min'")
    out = np.zeros((len(e), lab.shape[1]), dtype=np.int64)
    for h in range(lab.shape[1]):
        vals = np.unique(lab[:, h])
        score = np.full((len(e), len(vals)), np.inf)
        for j, v in enumerate(vals):
            sel = e[:, lab[:, h] == v]
            if mode == "mean":
                score[:, j] = sel.mean(1)
            elif mode == "min":
                score[:, j] = sel.min(1)
            else:
                z = -sel / temperature
                m = z.max(1, keepdims=True)
                score[:, j] = -(m[:, 0] + np.log(np.exp(z - m).sum(1)))
        out[:, h] = vals[np.argmin(score, 1)]
    return out


def classification_report(pred: np.ndarray, truth: np.ndarray, held_out: np.ndarray, names: list[str],
                          candidate_held_out: np.ndarray | None = None, per_concept: np.ndarray | None = None) -> dict:
    """Discriminative accuracy, seen vs held-out.

    Args:
        pred: int64 ``[N, C]`` predicted value index per concept (the joint prediction's values).
        truth: int64 ``[N, C]`` true value indices.
        held_out: bool ``[N]`` the image's combination is held out.
        names: C concept names.
        candidate_held_out: optional bool ``[N]``: the predicted combination is held out (how often
            the classifier picks a held-out cell at all).
        per_concept: optional int64 ``[N, C]`` marginal per-concept predictions
            (:func:`per_concept_predictions`).
    Returns:
        ``{group: {"joint": acc, concept: acc, "n": n, "wrong_by_concept": {concept: share of the
        wrong images whose prediction differs in that concept}, "picked_held_out": share,
        "marginal": {concept: acc}}}`` for group in seen, held_out (groups without images left out).
    """
    pred, truth = np.asarray(pred), np.asarray(truth)
    held_out = np.asarray(held_out, dtype=bool)
    out = {}
    for group, sel in (("seen", ~held_out), ("held_out", held_out)):
        if not sel.any():
            continue
        p, y = pred[sel], truth[sel]
        hit = p == y
        joint = hit.all(1)
        g = {"joint": float(joint.mean()), "n": int(sel.sum())}
        g.update({c: float(hit[:, h].mean()) for h, c in enumerate(names)})
        wrong = ~joint
        g["wrong_by_concept"] = {c: float((~hit[wrong, h]).mean()) if wrong.any() else 0.0 for h, c in enumerate(names)}
        if candidate_held_out is not None:
            g["picked_held_out"] = float(np.asarray(candidate_held_out, dtype=bool)[sel].mean())
        if per_concept is not None:
            pc = np.asarray(per_concept)[sel]
            g["marginal"] = {c: float((pc[:, h] == y[:, h]).mean()) for h, c in enumerate(names)}
        out[group] = g
    return out
