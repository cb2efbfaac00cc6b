"""Counting one training step: FLOPs, the bytes autograd saves for the backward pass, aten ops.

:func:`measure_step` runs one step of a model's loss under ``torch.utils.flop_counter.FlopCounterMode``
(on fake tensors by default: shapes only, no compute, no memory), with the saved-tensor hooks and an op
counter; :func:`measure_autoencoder` does the same for latent diffusion's autoencoder. How
:mod:`mosaic.lab.cost` turns these counts into an estimate is in its docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from mosaic.lab.autoencoder import build_autoencoder, cache_dir, reconstruction_loss

#: Images in the fake-tensor step that measures FLOPs and activations (a prime: weights' shapes are rarely its multiples).
PROBE_BATCH = 13


def sdpa_mapping() -> dict:
    """FLOP formulas for the CPU attention kernels the stock counter does not know."""
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    out = {}

    def fwd(q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_flop_count(q, k, v)

    def bwd(grad_out, q, k, v, *args, out_shape=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out, q, k, v)

    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        out[aten._scaled_dot_product_flash_attention_for_cpu] = fwd
        out[aten._scaled_dot_product_flash_attention_for_cpu_backward] = bwd
    return out


class _OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts aten ops dispatched that compute (each is about one kernel launch on a GPU)."""

    def __init__(self):
        super().__init__()
        self.n = 0

    _FREE = {"detach", "alias", "lift_fresh", "_to_copy_meta", "empty", "empty_like", "zeros", "ones", "scalar_tensor",
             "_local_scalar_dense", "clone_meta", "resolve_conj", "resolve_neg"}

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        if not func.is_view and func.__name__.split(".")[0] not in self._FREE:  # views and allocations launch no kernel
            self.n += 1
        return func(*args, **(kwargs or {}))


@dataclass
class StepMeasure:
    """One measured forward + backward: FLOPs, saved-activation bytes, aten op count."""

    forward_flops: float
    backward_flops: float
    saved_bytes: float
    saved_bytes_batched: float  # of the saved tensors whose leading dimension is a multiple of the batch
    ops: int

    @property
    def flops(self) -> float:
        return self.forward_flops + self.backward_flops


def measure_step(model: torch.nn.Module, loss_fn: Callable, batch: dict, *, dtype: torch.dtype | None = None,
                 fake: bool = True, seed: int = 0) -> StepMeasure:
    """FLOPs and saved-activation bytes of one training step ``loss_fn(model, batch, generator).backward()``.

    Args:
        model: the module (CPU); its gradients are cleared afterwards.
        loss_fn: ``(model, batch, torch.Generator) -> scalar loss``.
        batch: tensors with a leading batch dimension (CPU).
        dtype: ``torch.bfloat16`` / ``torch.float16`` to run under CPU autocast, None for fp32.
        fake: run on fake tensors (shapes only; no compute, no memory).
    Returns:
        :class:`StepMeasure`: forward and backward FLOPs (``FlopCounterMode``), bytes of the
        distinct storages autograd saved for backward (parameters excluded) and of those among
        them whose leading dimension is a multiple of the batch (activations; the rest, e.g.
        autocast copies of weights, is per step), aten ops that compute.
    """
    from torch.utils.flop_counter import FlopCounterMode

    param_keys = {p.untyped_storage()._cdata for p in model.parameters()}
    b = len(next(iter(batch.values())))
    saved: dict[int, tuple[int, bool]] = {}

    def pack(t):
        try:
            st = t.untyped_storage()
            key = st._cdata
            if key not in param_keys:
                batched = b > 1 and t.dim() > 0 and t.shape[0] % b == 0
                saved[key] = (st.nbytes(), batched or saved.get(key, (0, False))[1])
        except (RuntimeError, NotImplementedError):  # tensors without storage (nested, sparse)
            pass
        return t

    fwd = FlopCounterMode(display=False, custom_mapping=sdpa_mapping())
    bwd = FlopCounterMode(display=False, custom_mapping=sdpa_mapping())
    ops = _OpCounter()
    model.train()
    ctx_fake = None
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        ctx_fake = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        if ctx_fake is not None:
            ctx_fake.__enter__()
            batch = {k: ctx_fake.from_tensor(v) for k, v in batch.items()}
        gen = torch.Generator().manual_seed(seed)
        with ops:
            with fwd, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                    loss = loss_fn(model, batch, gen)
            with bwd:
                loss.backward()
    finally:
        if ctx_fake is not None:
            ctx_fake.__exit__(None, None, None)
        model.zero_grad(set_to_none=True)
    return StepMeasure(float(fwd.get_total_flops()), float(bwd.get_total_flops()), float(sum(n for n, _ in saved.values())),
                       float(sum(n for n, bt in saved.values() if bt)), ops.n)


def measure_autoencoder(cfg, spec) -> dict:
    """The autoencoder of ``model.latent`` measured on fake tensors: ``params``, training FLOPs and
    saved-activation bytes per image (its own loss: encode, sample, decode, L1 + MSE + edge + KL),
    encoder and decoder forward FLOPs per image; ``cached`` when the run would find it trained."""
    from torch.utils.flop_counter import FlopCounterMode

    lat = cfg.model.latent
    sec = lat.autoencoder
    size = spec.image.size
    vae = build_autoencoder(sec, size)

    def loss(model_, batch, gen):
        x = batch["image"].float() / 127.5 - 1
        post = model_.encode(x).latent_dist
        rec = model_.decode(post.sample(generator=gen)).sample
        return reconstruction_loss(sec, rec, x, post.kl())

    b = PROBE_BATCH
    step = measure_step(vae, loss, {"image": torch.zeros((b, 3, size, size), dtype=torch.uint8)}, fake=True)
    from torch._subclasses.fake_tensor import FakeTensorMode

    enc, dec = FlopCounterMode(display=False, custom_mapping=sdpa_mapping()), FlopCounterMode(display=False, custom_mapping=sdpa_mapping())
    with FakeTensorMode(allow_non_fake_inputs=True) as mode, torch.no_grad():
        x = mode.from_tensor(torch.zeros((b, 3, size, size)))
        with enc:
            z = vae.encode(x).latent_dist.mean
        with dec:
            vae.decode(z)
    folder = Path(lat.path) if lat.path is not None else cache_dir(lat.root, spec, sec)
    return {"params": sum(p.numel() for p in vae.parameters()), "train_flops_img": step.flops / b, "saved_img": step.saved_bytes_batched / b,
            "encode_flops_img": float(enc.get_total_flops()) / b, "decode_flops_img": float(dec.get_total_flops()) / b,
            "cached": (folder / "vae" / "config.json").is_file() and (lat.path is not None or (folder / "autoencoder.json").is_file()),
            "steps": sec.steps, "batch": sec.batch_size, "pool": min(sec.pool, spec.split_sizes().get("train", 0))}
