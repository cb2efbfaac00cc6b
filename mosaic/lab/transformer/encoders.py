"""Small transformer encoders trained from scratch: a ViT over images and an encoder over tokens.

Both are pre-LN transformer encoders (``torch.nn.TransformerEncoderLayer`` with
``norm_first=True``) that return one pooled feature per input, float ``[B, width]`` after a final
LayerNorm:

- :class:`ViTEncoder` (Dosovitskiy et al. 2021): non-overlapping ``patch x patch`` patches by a
  strided convolution, a learned ``[CLS]`` token and learned position embeddings; pools ``[CLS]``.
- :class:`TokenEncoder` (the scene / query encoder of Uselis, Koishigarina & Oh 2026,
  ``amortization/models.py``): token + learned position embeddings, padding masked out; pools
  the last non-padding token (``EOS``).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from mosaic.lab.transformer.tokens import PAD


def _encoder(width: int, depth: int, heads: int, mlp_ratio: float, dropout: float) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(
        width, heads, dim_feedforward=int(width * mlp_ratio), dropout=dropout,
        activation="gelu", batch_first=True, norm_first=True,
    )
    return nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)


class ViTEncoder(nn.Module):
    """Vision transformer over uint8 or float images.

    Args:
        image_size: input side in pixels (images of another side are resized, bilinear + antialias).
        patch: patch side in pixels; must divide ``image_size``.
        width, depth, heads, mlp_ratio, dropout: transformer shape.
        stem: ``"patch"`` (a linear patch embedding, the plain ViT) or ``"conv"`` (two 3x3
            convolutions, the second strided, before a ``patch/2`` patch embedding: the "early
            convolutions" of Xiao et al. 2021, which make small-data ViTs train far more easily;
            ``patch`` must then be even).
    Input: uint8 ``[B, 3, H, W]`` (0-255) or float ``[B, 3, H, W]`` in [-1, 1].
    Output: float ``[B, width]``, the final-LayerNorm ``[CLS]`` feature.
    Raises:
        ValueError: ``patch`` does not divide ``image_size``; ``heads`` does not divide ``width``.
    """

    def __init__(self, image_size: int, patch: int = 4, width: int = 128, depth: int = 4, heads: int = 4,
                 mlp_ratio: float = 2.0, dropout: float = 0.0, stem: str = "patch"):
        super().__init__()
        if stem not in ("patch", "conv"):
            raise ValueError(f"model.stem {stem!r} is not one of patch, conv")
        if stem == "conv" and patch % 2:
            raise ValueError(f"model.patch {patch} must be even with model.stem conv")
        if image_size % patch:
            raise ValueError(f"model.patch {patch} must divide the image size {image_size}")
        if width % heads:
            raise ValueError(f"model.heads {heads} must divide model.width {width}")
        self.image_size, self.patch, self.width = image_size, patch, width
        n = (image_size // patch) ** 2
        if stem == "patch":
            self.proj = nn.Conv2d(3, width, patch, stride=patch)
        else:
            c = max(8, width // 2)
            self.proj = nn.Sequential(
                nn.Conv2d(3, c, 3, padding=1), nn.GELU(),
                nn.Conv2d(c, c, 3, stride=2, padding=1), nn.GELU(),
                nn.Conv2d(c, width, patch // 2, stride=patch // 2),
            )
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.randn(1, n + 1, width) * 0.02)
        self.encoder = _encoder(width, depth, heads, mlp_ratio, dropout)
        self.norm = nn.LayerNorm(width)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float().div(127.5).sub(1.0) if images.dtype == torch.uint8 else images.float()
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", antialias=True, align_corners=False)
        x = self.proj(x).flatten(2).transpose(1, 2)                  # [B, n, width]
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.norm(self.encoder(x)[:, 0])


class TokenEncoder(nn.Module):
    """Transformer encoder over token sequences (scenes or queries).

    Args:
        vocab_size: token ids are ``0 .. vocab_size-1``; ``PAD`` (0) is masked out.
        max_len: longest sequence.
        width, depth, heads, mlp_ratio, dropout: transformer shape.
    Input: int64 ``[B, L]`` token ids, right-padded with ``PAD``, ``L <= max_len``.
    Output: float ``[B, width]``, the final-LayerNorm feature of the last non-padding token.
    """

    def __init__(self, vocab_size: int, max_len: int, width: int = 128, depth: int = 4, heads: int = 4,
                 mlp_ratio: float = 2.0, dropout: float = 0.0):
        super().__init__()
        if width % heads:
            raise ValueError(f"model.heads {heads} must divide model.width {width}")
        self.width, self.max_len = width, max_len
        self.embed = nn.Embedding(vocab_size, width)
        self.pos = nn.Parameter(torch.randn(1, max_len, width) * 0.02)
        nn.init.normal_(self.embed.weight, std=0.02)
        self.encoder = _encoder(width, depth, heads, mlp_ratio, dropout)
        self.norm = nn.LayerNorm(width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == PAD
        x = self.embed(tokens) + self.pos[:, :tokens.shape[1]]
        x = self.encoder(x, src_key_padding_mask=pad)
        last = (~pad).sum(1) - 1
        return self.norm(x[torch.arange(x.shape[0], device=x.device), last])
