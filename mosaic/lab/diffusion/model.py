"""The denoiser: a diffusers UNet (cross-attention), PixArt DiT or SD3 MMDiT built from scratch
from the config, with the conditioner as one module. The backbone works on RGB pixels, or on an
autoencoder's latents (``model.latent``): ``size`` and ``channels`` are then the latents'."""

from __future__ import annotations

import math

from torch import nn

from mosaic.errors import ConfigError
from mosaic.lab.diffusion.config import DiffusionModelSection


def check_model_fits(m: DiffusionModelSection, image_size: int) -> None:
    """Refuse a backbone that does not fit the image size (the latent side for latent diffusion)
    or is internally inconsistent.

    Raises:
        ConfigError: a UNet with more downsampling levels than the image allows (the lowest level
        must be at least 2 px and every level an integer size), channels not divisible by
        ``norm_num_groups`` or ``heads``; a DiT whose ``patch_size`` does not divide the image or
        leaves fewer than 2x2 tokens. Each names the field, the value and a fix.
    """
    problems = []
    if m.backbone == "unet":
        u = m.unet
        levels = len(u.block_out_channels)
        down = 2 ** (levels - 1)
        if image_size % down or image_size // down < 2:
            fit = max(1, int(math.log2(max(image_size // 2, 1))) + 1)
            while fit > 1 and image_size % (2 ** (fit - 1)):
                fit -= 1
            problems.append(("model.unet.block_out_channels",
                             f"{levels} levels downsample {image_size} px by {down} to {image_size / down:g} px: the model is too large "
                             f"for {image_size} px images; use at most {fit} levels, or a larger image.size"))
        for ch in u.block_out_channels:
            if ch % u.norm_num_groups:
                problems.append(("model.unet.norm_num_groups", f"{u.norm_num_groups} does not divide the channel count {ch}"))
                break
        attn = [ch for ch, a in zip(u.block_out_channels, u.cross_attention) if a] + [u.block_out_channels[-1]]
        for ch in attn:
            if ch % u.heads:
                problems.append(("model.unet.heads", f"{u.heads} heads do not divide the channel count {ch} of an attention level"))
                break
    else:
        d = m.dit if m.backbone == "dit" else m.mmdit_
        where = "model.dit.patch_size" if m.backbone == "dit" else "model.mmdit.patch_size"
        if image_size % d.patch_size or image_size // d.patch_size < 2:
            problems.append((where,
                             f"{d.patch_size} px patches do not tile {image_size} px images into at least 2x2 tokens: the model is too "
                             f"large for the image; use a patch_size that divides {image_size} and is at most {image_size // 2}"))
    if m.conditioning == "caption" and m.cond_dim % m.text.heads:
        problems.append(("model.text.heads", f"{m.text.heads} heads do not divide model.cond_dim {m.cond_dim}"))
    if problems:
        raise ConfigError(problems)


def build_backbone(m: DiffusionModelSection, image_size: int, channels: int = 3) -> nn.Module:
    """The denoiser: ``forward`` takes ``x [B, channels, S, S]`` (``S = image_size``: pixels, or
    the latent side), timesteps ``[B]`` and condition tokens ``[B, L, m.cond_dim]``. Raises
    ConfigError (see :func:`check_model_fits`)."""
    check_model_fits(m, image_size)
    if m.backbone == "unet":
        from diffusers import UNet2DConditionModel

        u = m.unet
        n = len(u.block_out_channels)
        down = ["CrossAttnDownBlock2D" if a else "DownBlock2D" for a in u.cross_attention]
        up = ["CrossAttnUpBlock2D" if u.cross_attention[n - 1 - j] else "UpBlock2D" for j in range(n)]
        return UNet2DConditionModel(
            sample_size=image_size, in_channels=channels, out_channels=channels,
            down_block_types=tuple(down), up_block_types=tuple(up), mid_block_type="UNetMidBlock2DCrossAttn",
            block_out_channels=tuple(u.block_out_channels), layers_per_block=u.layers_per_block,
            attention_head_dim=u.heads, norm_num_groups=u.norm_num_groups, cross_attention_dim=m.cond_dim,
            transformer_layers_per_block=u.transformer_layers_per_block,
            **({"class_embed_type": "projection", "projection_class_embeddings_input_dim": m.cond_dim} if u.time_condition else {}),
        )
    if m.backbone == "mmdit":
        from diffusers import SD3Transformer2DModel

        d = m.mmdit_
        # pooled_projection_dim: stock diffusers requires pooled_projections (MOSAIC patched CombinedTimestepTextProjEmbeddings
        # for None); mosaic passes zeros or the mean condition token of this width instead (model.mmdit.pooled)
        return SD3Transformer2DModel(
            sample_size=image_size, patch_size=d.patch_size, in_channels=channels, out_channels=channels, num_layers=d.num_layers,
            attention_head_dim=d.head_dim, num_attention_heads=d.heads, joint_attention_dim=m.cond_dim,
            caption_projection_dim=d.heads * d.head_dim, pooled_projection_dim=m.cond_dim,
        )
    from diffusers import PixArtTransformer2DModel

    d = m.dit
    return PixArtTransformer2DModel(
        num_attention_heads=d.heads, attention_head_dim=d.head_dim, in_channels=channels, out_channels=channels, num_layers=d.num_layers,
        dropout=d.dropout, cross_attention_dim=d.heads * d.head_dim, sample_size=image_size, patch_size=d.patch_size,
        caption_channels=m.cond_dim, use_additional_conditions=False,
    )


_NO_ADDED = {"resolution": None, "aspect_ratio": None}


class DiffusionModel(nn.Module):
    """Conditioner + denoiser as one module (one ``forward`` for DDP, one state for checkpoints).

    ``forward(x [B,C,S,S] float, t [B] int64 (DDPM) or float (flow matching), cond int64 [B, ...],
    drop bool [B] | None)`` returns the prediction ``[B, C, S, S]`` (noise, v or flow velocity, per
    the objective); C = 3 in pixel space, the latent channels in latent space.
    """

    def __init__(self, backbone: nn.Module, conditioner: nn.Module, kind: str, pooled: str = "zeros"):
        super().__init__()
        self.backbone, self.conditioner, self.kind, self.pooled = backbone, conditioner, kind, pooled
        # model.unet.time_condition: the backbone adds a projection of the pooled tokens to its timestep embedding
        self.time_condition = getattr(getattr(backbone, "config", None), "class_embed_type", None) == "projection"

    def forward(self, x, t, cond, drop=None):
        tokens, mask = self.conditioner(cond, drop)
        if self.kind == "unet":
            pooled = pool_tokens(tokens, mask) if self.time_condition else None
            return self.backbone(x, t, encoder_hidden_states=tokens, encoder_attention_mask=mask, class_labels=pooled).sample
        if self.kind == "mmdit":
            # the supported way to run SD3's MMDiT without a pooled text vector: a tensor of zeros (model.mmdit.pooled)
            pooled = pool_tokens(tokens, mask) if self.pooled == "condition" else tokens.new_zeros(tokens.shape[0], tokens.shape[-1])
            return self.backbone(hidden_states=x, encoder_hidden_states=tokens, pooled_projections=pooled, timestep=t).sample
        return self.backbone(x, encoder_hidden_states=tokens, timestep=t, added_cond_kwargs=_NO_ADDED,
                             encoder_attention_mask=mask).sample


def pool_tokens(tokens, mask=None):
    """Mean of the condition tokens ``[B, L, D]`` over the real ones (``mask`` bool ``[B, L]``, True =
    a token; None = all) -> ``[B, D]``, the input of ``model.unet.time_condition``'s projection."""
    if mask is None:
        return tokens.mean(dim=1)
    w = mask.to(tokens.dtype).unsqueeze(-1)
    return (tokens * w).sum(dim=1) / w.sum(dim=1).clamp_min(1.0)


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
