"""Encoders for a config (ViT or token encoder), the multi-head classifier and the dual encoder."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from mosaic.errors import ConfigError
from mosaic.lab.checkpoint import load_weights_file
from mosaic.lab.transformer.config import TransformerConfig
from mosaic.lab.transformer.encoders import TokenEncoder, ViTEncoder
from mosaic.lab.transformer.tokens import SceneTokenizer


def make_encoder(cfg: TransformerConfig, kind: str, tokenizer: SceneTokenizer | None, image_size: int | None,
                 max_len: int | None = None) -> nn.Module:
    """A scene encoder of ``kind`` ``image`` (ViT) or ``tokens`` (token encoder of ``max_len``)."""
    m = cfg.model
    if kind == "image":
        try:
            return ViTEncoder(cfg.input.image_size or image_size, m.patch, m.width, m.depth, m.heads, m.mlp_ratio, m.dropout, m.stem)
        except ValueError as e:
            raise ConfigError([("model", str(e))]) from None
    if m.width % m.heads:
        raise ConfigError([("model.heads", f"{m.heads} must divide model.width {m.width}")])
    return TokenEncoder(tokenizer.vocab_size, max_len or tokenizer.max_len, m.width, m.depth, m.heads, m.mlp_ratio, m.dropout)


class ClassifierModel(nn.Module):
    """An encoder and one linear head per concept.

    ``forward(x)`` -> ``(features float [B, width], [logits float [B, n_c] per concept])``.
    """

    def __init__(self, encoder: nn.Module, n_values: list[int]):
        super().__init__()
        self.encoder = encoder
        self.heads = nn.ModuleList(nn.Linear(encoder.width, k) for k in n_values)

    def forward(self, x):
        f = self.encoder(x)
        return f, [h(f) for h in self.heads]


class DualEncoder(nn.Module):
    """Scene encoder + query encoder with linear projections to ``embed_dim`` and a learned
    log-temperature ``log_tau``.

    ``forward(scenes, queries)`` -> ``(scene embeddings float [B, E], query embeddings float [Q, E])``
    (not normalised; :func:`~mosaic.lab.transformer.binding.similarity_logits` takes the cosine).
    """

    def __init__(self, scene_encoder: nn.Module, query_encoder: nn.Module, embed_dim: int, tau_init: float):
        super().__init__()
        self.scene_encoder, self.query_encoder = scene_encoder, query_encoder
        self.scene_proj = nn.Linear(scene_encoder.width, embed_dim)
        self.query_proj = nn.Linear(query_encoder.width, embed_dim)
        self.log_tau = nn.Parameter(torch.tensor(float(tau_init)))

    def embed_scenes(self, x):
        return self.scene_proj(self.scene_encoder(x))

    def embed_queries(self, tokens):
        return self.query_proj(self.query_encoder(tokens))

    def forward(self, scenes, queries):
        return self.embed_scenes(scenes), self.embed_queries(queries)


def load_weights(model: nn.Module, path: Path) -> None:
    """Load ``model.safetensors`` weights exported by the loop (:meth:`mosaic.lab.loop.Task.export`)."""
    load_weights_file(model, Path(path) / "model.safetensors", Path(path))
