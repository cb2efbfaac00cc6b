"""Per-layer features of frozen models, read with forward hooks (no model edits).

- :func:`transformer_block_features`: the pooled output of every block of a lab encoder
  (:class:`~mosaic.lab.transformer.encoders.ViTEncoder` / ``TokenEncoder``: an
  ``nn.TransformerEncoder`` at ``.encoder`` with blocks in ``.encoder.layers`` and a final
  ``.norm``), then the encoder's own pooled output. Pooling ``own`` follows the encoder (the
  ViT's ``[CLS]`` token, the token encoder's last non-padding token); ``mean`` averages the
  (non-padding) tokens — a deviation from the encoder's readout, labelled as such
  (diagnostics.md §4).
- :func:`unet_block_features`: the spatially mean-pooled output of each down block and the mid
  block of a diffusers ``UNet2DConditionModel`` (``down_blocks[i]`` return ``(hidden, residuals)``;
  the hidden state is ``[B, C, H, W]``), or of each transformer block of a ``PixArtTransformer2DModel``
  (tokens mean-pooled), at a fixed timestep with a fixed seeded noise, under the **null**
  condition: the condition tokens would otherwise hand the labels to the probe.

Source of the protocol: Uselis et al., ``oshapio/intermediate-layer-generalization``
(``intermediate_gen/intermediate_probe_model.py``: frozen top-level children of a ResNet, each
probed; the reference flattens whole activation maps, we pool them).
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from mosaic.diagnostics.errors import DiagnosticError

POOLS = ("own", "mean")


@contextmanager
def hooked(modules: dict[str, nn.Module]):
    """Forward hooks that keep each module's latest output in the yielded dict (name -> output)."""
    got: dict = {}
    handles = []
    for name, m in modules.items():
        def hook(_m, _inp, out, name=name):
            got[name] = out
        handles.append(m.register_forward_hook(hook))
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _pool_tokens(h: torch.Tensor, pool: str, kind: str, pad: torch.Tensor | None) -> torch.Tensor:
    """``h [B, L, D]`` -> ``[B, D]``."""
    if pool == "mean":
        if pad is None:
            return h.mean(1)
        keep = (~pad).float()[:, :, None]
        return (h * keep).sum(1) / keep.sum(1).clamp(min=1)
    if kind == "vit":
        return h[:, 0]
    last = (~pad).sum(1) - 1
    return h[torch.arange(h.shape[0], device=h.device), last]


@torch.no_grad()
def transformer_block_features(encoder: nn.Module, inputs: torch.Tensor, *, pool: str = "own", batch_size: int = 256,
                               device=None, extra: dict | None = None) -> dict[str, np.ndarray]:
    """Pooled features of every block of a lab transformer encoder, and its output.

    Args:
        encoder: a ``ViTEncoder`` (images) or ``TokenEncoder`` (tokens; padding id 0), in eval mode.
        inputs: uint8 / float images ``[N, 3, H, W]`` or int64 tokens ``[N, L]``.
        pool: ``own`` (the encoder's readout token) or ``mean`` (mean over non-padding tokens).
        extra: name -> ``fn(output [B, width]) -> [B, E]`` for features computed from the
            encoder's output (e.g. the dual encoder's scene projection), added last.
    Returns:
        Ordered ``{"block1": float32 [N, width], ..., "blockL": ..., "output": [N, width], **extra}``:
        ``blockK`` is the K-th block's output (before the final LayerNorm), ``output`` the
        encoder's own feature (final LayerNorm, its pooling).
    Raises:
        DiagnosticError: a module without ``.encoder.layers``; an unknown pool.
    """
    if pool not in POOLS:
        raise DiagnosticError(f"layer features: pool {pool!r} is not one of {', '.join(POOLS)}")
    layers = getattr(getattr(encoder, "encoder", None), "layers", None)
    if layers is None:
        raise DiagnosticError(f"layer features: {type(encoder).__name__} has no transformer blocks at .encoder.layers")
    kind = "tokens" if inputs.dtype in (torch.int64, torch.int32) else "vit"
    dev = torch.device(device) if device is not None else next(encoder.parameters()).device
    names = [f"block{i + 1}" for i in range(len(layers))]
    outs: dict[str, list] = {n: [] for n in names + ["output"] + list(extra or {})}
    was = encoder.training
    encoder.eval()
    try:
        with hooked(dict(zip(names, layers))) as got:
            for s in range(0, len(inputs), batch_size):
                x = inputs[s:s + batch_size].to(dev)
                pad = (x == 0) if kind == "tokens" else None
                y = encoder(x)
                for n in names:
                    outs[n].append(_pool_tokens(_first(got[n]).float(), pool, kind, pad).cpu())
                outs["output"].append(y.float().cpu())
                for n, fn in (extra or {}).items():
                    outs[n].append(fn(y).float().cpu())
    finally:
        encoder.train(was)
    return {n: torch.cat(v).numpy() for n, v in outs.items()}


@torch.no_grad()
def unet_block_features(model: nn.Module, images: torch.Tensor, null_cond: torch.Tensor, *, scheduler, t: int = 100,
                        seed: int = 0, batch_size: int = 128, device=None) -> dict[str, np.ndarray]:
    """Pooled block features of a lab diffusion model (:class:`mosaic.lab.diffusion.DiffusionModel`:
    ``.backbone``, ``forward(x, t, cond, drop)``) on noised images, under the null condition.

    Args:
        model: the diffusion model (its ``backbone`` a diffusers UNet2DConditionModel with
            ``down_blocks`` / ``mid_block``, or a PixArt DiT with ``transformer_blocks``).
        images: float ``[N, 3, S, S]`` in [-1, 1] (the lab's ``to_float``).
        null_cond: ``[1, ...]`` or ``[N, ...]`` any encoded condition: it is replaced by the null
            tokens (``drop=True``), so only its shape matters.
        scheduler: the training noise scheduler (``add_noise``).
        t: the timestep (fixed for every image); seed: the seed of the noise (image i's noise
            depends only on ``(seed, i)``).
    Returns:
        Ordered ``{"down1": float32 [N, C1], ..., "mid": [N, C]}`` for a UNet, or
        ``{"block1": [N, W], ...}`` for a DiT.
    Raises:
        DiagnosticError: a backbone with neither ``down_blocks`` nor ``transformer_blocks``.
    """
    bb = model.backbone
    if hasattr(bb, "down_blocks"):
        mods = {f"down{i + 1}": b for i, b in enumerate(bb.down_blocks)}
        if getattr(bb, "mid_block", None) is not None:
            mods["mid"] = bb.mid_block
    elif hasattr(bb, "transformer_blocks"):
        mods = {f"block{i + 1}": b for i, b in enumerate(bb.transformer_blocks)}
    else:
        raise DiagnosticError(f"layer features: the diffusion backbone {type(bb).__name__} has neither down_blocks nor transformer_blocks")
    dev = torch.device(device) if device is not None else next(model.parameters()).device
    outs: dict[str, list] = {n: [] for n in mods}
    was = model.training
    model.eval()
    try:
        with hooked(mods) as got:
            for s in range(0, len(images), batch_size):
                x0 = images[s:s + batch_size].to(dev).float()
                b = len(x0)
                noise = torch.stack([torch.randn(x0.shape[1:], generator=torch.Generator().manual_seed(seed * 1_000_003 + s + i))
                                     for i in range(b)]).to(dev)
                tt = torch.full((b,), int(t), dtype=torch.long, device=dev)
                xt = scheduler.add_noise(x0, noise, tt)
                cond = null_cond[:1].expand(b, *null_cond.shape[1:]) if len(null_cond) == 1 else null_cond[s:s + b]
                model(xt, tt, cond.to(dev), torch.ones(b, dtype=torch.bool, device=dev))
                for n in mods:
                    h = _first(got[n]).float()
                    outs[n].append((h.mean((2, 3)) if h.ndim == 4 else h.mean(1)).cpu())
    finally:
        model.train(was)
    return {n: torch.cat(v).numpy() for n, v in outs.items()}
