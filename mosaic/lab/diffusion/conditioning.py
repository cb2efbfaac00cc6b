"""Conditions for generative models: concept values (or a caption) -> cross-attention tokens.

Three conditioners share one interface, ``forward(cond, drop) -> (tokens [B, L, D], mask [B, L])``:

- :class:`FactorizedConditioner` (default): one learned embedding per (concept, value), one token
  per concept. A held-out combination is a new arrangement of trained tokens, so it is
  expressible (DESIGN.md, "Factorized conditioning").
- :class:`CaptionConditioner`: a closed-vocabulary word tokenizer built from the dataset's captions
  and a small transformer text encoder trained jointly with the denoiser (the from-scratch
  stand-in for CLIP in diffusers' ``train_text_to_image.py``).
- :class:`OneHotConditioner`: MOSAIC's encoders, a one-hot per concept through an MLP (one token
  per concept, or one token); its null condition is the MLP of all-zero one-hots.
- :class:`CombinationConditioner`: one embedding per *combination* of all concept values, a
  **baseline only**: a held-out combination gets an embedding that training never updated, so it
  cannot generalize compositionally by construction (MOSAIC's one-hot encoders are of this kind
  for a single concept).

Classifier-free guidance (Ho & Salimans 2022): ``drop`` (bool ``[B]``) replaces a sample's
condition by learned null tokens; training drops per sample with probability
``model.cond_dropout``; sampling runs the null and the real condition and mixes them.
"""

from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from mosaic.errors import MosaicError
from mosaic.grammar import domain_index

_WORD = re.compile(r"[a-z0-9_]+(?:-[a-z0-9_]+)*|[^\sa-z0-9_]")
PAD, NULL = "<pad>", "<null>"


def tokenize(caption: str) -> list[str]:
    """Lower-cased words and punctuation of a caption: ``"a red circle, two squares"`` ->
    ``["a", "red", "circle", ",", "two", "squares"]`` (value names such as ``36-54`` stay whole)."""
    return _WORD.findall(caption.lower())


def value_index(domains: dict[str, list], concept: str, value) -> int:
    """Index of ``value`` in ``concept``'s domain; -1 for None (the scene shows no value).

    Raises:
        MosaicError: the value is not in the domain (the record and the spec disagree).
    """
    if value is None:
        return -1
    dom = domains[concept]
    k = domain_index(dom, value)
    if k is None:
        raise MosaicError(f"concept {concept!r} has no value {value!r} ({type(value).__name__}); its domain is {dom}")
    return k


class FactorizedConditioner(nn.Module):
    """One token per concept: ``E[concept][value]`` (``[B, C, D]``); no mask.

    Each concept has ``len(domain) + 1`` rows; the last is its learned null token, used for
    classifier-free-guidance dropout and for a concept a scene does not show (index -1).

    Args:
        domains: concept -> values (the spec's domains, in concept order).
        dim: token width D (the backbone's cross-attention width).
    """

    kind = "factorized"

    def __init__(self, domains: dict[str, list], dim: int):
        super().__init__()
        self.domains = {c: list(v) for c, v in domains.items()}
        sizes = [len(v) + 1 for v in self.domains.values()]
        offsets = [0]
        for s in sizes[:-1]:
            offsets.append(offsets[-1] + s)
        self.register_buffer("offsets", torch.tensor(offsets, dtype=torch.long), persistent=False)
        self.register_buffer("nulls", torch.tensor([s - 1 for s in sizes], dtype=torch.long), persistent=False)
        self.embed = nn.Embedding(sum(sizes), dim)
        nn.init.normal_(self.embed.weight, std=1.0)
        self.num_tokens = len(sizes)

    def encode(self, records: list[dict]) -> torch.Tensor:
        """int64 ``[N, C]``: each record's value index per concept (-1: no value)."""
        return torch.tensor([[value_index(self.domains, c, r["concepts"].get(c)) for c in self.domains] for r in records],
                            dtype=torch.long).reshape(len(records), len(self.domains))

    def forward(self, cond: torch.Tensor, drop: torch.Tensor | None = None):
        """``cond`` int64 ``[B, C]`` -> tokens float ``[B, C, D]``, mask None."""
        idx = torch.where(cond < 0, self.nulls, cond)
        if drop is not None:
            idx = torch.where(drop[:, None], self.nulls.expand_as(idx), idx)
        return self.embed(idx + self.offsets), None


class CombinationConditioner(nn.Module):
    """Baseline: one token per combination of all concept values (mixed-radix id), ``[B, 1, D]``.

    Held-out combinations index rows that training never updates, so this conditioner cannot
    generalize to them; it exists to measure exactly that. The last row is the null token.

    Raises:
        MosaicError: more than 1,000,000 combinations (use factorized conditioning).
    """

    kind = "combination"

    def __init__(self, domains: dict[str, list], dim: int):
        super().__init__()
        self.domains = {c: list(v) for c, v in domains.items()}
        self.num_combinations = math.prod(len(v) for v in self.domains.values())
        if self.num_combinations > 1_000_000:
            raise MosaicError(f"model.conditioning 'combination' needs {self.num_combinations} embeddings (one per combination of "
                              "every concept's values): use model.conditioning: factorized")
        self.embed = nn.Embedding(self.num_combinations + 1, dim)
        nn.init.normal_(self.embed.weight, std=1.0)
        self.num_tokens = 1

    def encode(self, records: list[dict]) -> torch.Tensor:
        """int64 ``[N, 1]``: the combination id of each record (-1 when a concept has no value)."""
        out = []
        for r in records:
            cid = 0
            for c, dom in self.domains.items():
                k = value_index(self.domains, c, r["concepts"].get(c))
                if k < 0:
                    cid = -1
                    break
                cid = cid * len(dom) + k
            out.append([cid])
        return torch.tensor(out, dtype=torch.long).reshape(len(records), 1)

    def forward(self, cond: torch.Tensor, drop: torch.Tensor | None = None):
        """``cond`` int64 ``[B, 1]`` -> tokens ``[B, 1, D]``, mask None."""
        null = torch.full_like(cond, self.num_combinations)
        idx = torch.where(cond < 0, null, cond)
        if drop is not None:
            idx = torch.where(drop[:, None], null, idx)
        return self.embed(idx), None


class OneHotConditioner(nn.Module):
    """MOSAIC's condition encoders (``model.py``): one-hot vectors through MLPs of Linear + ReLU +
    Dropout (after every layer, the last included, so tokens are non-negative).

    ``tokens="per_concept"``: one MLP and one token per concept (MOSAIC's ``two_condition_encoder``
    for two concepts, its ``condition_encoder`` for one); ``tokens="one"``: one MLP over the
    concatenated one-hots, one token. The null condition (classifier-free guidance) and a concept
    the scene does not show (index -1) are all-zero one-hots, so the unconditional input is
    ``encoder(zeros)`` as in MOSAIC, not a learned null token.

    Args:
        domains: concept -> values. dim: token width. hidden: hidden widths. dropout: after every ReLU.
    """

    kind = "onehot"

    def __init__(self, domains: dict[str, list], dim: int, hidden: list[int] | None = None, tokens: str = "per_concept",
                 dropout: float = 0.1):
        super().__init__()
        self.domains = {c: list(v) for c, v in domains.items()}
        self.sizes = [len(v) for v in self.domains.values()]
        self.per_concept = tokens == "per_concept"

        def mlp(d_in: int) -> nn.Sequential:
            layers, w = [], d_in
            for h in list(hidden or []) + [dim]:
                layers += [nn.Linear(w, h), nn.ReLU(), nn.Dropout(dropout)]
                w = h
            return nn.Sequential(*layers)

        self.mlps = nn.ModuleList([mlp(n) for n in self.sizes] if self.per_concept else [mlp(sum(self.sizes))])
        self.num_tokens = len(self.sizes) if self.per_concept else 1

    def encode(self, records: list[dict]) -> torch.Tensor:
        """int64 ``[N, C]``: each record's value index per concept (-1: no value)."""
        return torch.tensor([[value_index(self.domains, c, r["concepts"].get(c)) for c in self.domains] for r in records],
                            dtype=torch.long).reshape(len(records), len(self.domains))

    def forward(self, cond: torch.Tensor, drop: torch.Tensor | None = None):
        """``cond`` int64 ``[B, C]`` -> tokens float ``[B, T, D]`` (T = C or 1), mask None."""
        keep = cond >= 0
        if drop is not None:
            keep = keep & ~drop[:, None]
        hots = [F.one_hot(cond[:, k].clamp(min=0), n).float() * keep[:, k:k + 1].float() for k, n in enumerate(self.sizes)]
        if self.per_concept:
            return torch.stack([m(h) for m, h in zip(self.mlps, hots)], dim=1), None
        return self.mlps[0](torch.cat(hots, dim=1)).unsqueeze(1), None


class CaptionConditioner(nn.Module):
    """Caption -> word tokens -> a small pre-norm transformer encoder -> ``[B, L, D]`` + mask.

    Args:
        vocab: the word list (``<pad>`` and ``<null>`` are added first); build it with
            :func:`build_vocab`.
        dim: token width D; layers, heads, ff width ``4 * dim``, dropout: the encoder's shape.
        max_len: longest caption in tokens (longer ones raise at :meth:`encode`).
    """

    kind = "caption"

    def __init__(self, vocab: list[str], dim: int, layers: int = 2, heads: int = 4, max_len: int = 32, dropout: float = 0.0):
        super().__init__()
        if dim % heads:
            raise MosaicError(f"model.text.heads {heads} must divide the token width {dim}")
        self.vocab = [PAD, NULL] + [w for w in vocab if w not in (PAD, NULL)]
        self.index = {w: i for i, w in enumerate(self.vocab)}
        self.max_len = max_len
        self.embed = nn.Embedding(len(self.vocab), dim)
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.num_tokens = max_len

    def encode(self, records: list[dict]) -> torch.Tensor:
        """int64 ``[N, max_len]`` token ids of each record's ``caption``, padded with 0.

        Raises:
            MosaicError: a word outside the vocabulary, or a caption longer than ``max_len``.
        """
        out = torch.zeros(len(records), self.max_len, dtype=torch.long)
        for i, r in enumerate(records):
            words = tokenize(r["caption"])
            if len(words) > self.max_len:
                raise MosaicError(f"caption {r['caption']!r} has {len(words)} tokens, more than model.text.max_len {self.max_len}: raise it")
            unknown = [w for w in words if w not in self.index]
            if unknown:
                raise MosaicError(f"caption {r['caption']!r}: words {unknown} are not in the run's vocabulary (built from the training data)")
            out[i, :len(words)] = torch.tensor([self.index[w] for w in words], dtype=torch.long)
        return out

    def forward(self, cond: torch.Tensor, drop: torch.Tensor | None = None):
        """``cond`` int64 ``[B, L]`` -> tokens ``[B, L, D]``, mask bool ``[B, L]`` (True = a word)."""
        if drop is not None:
            null = torch.zeros_like(cond)
            null[:, 0] = 1  # <null> then padding
            cond = torch.where(drop[:, None], null, cond)
        mask = cond != 0
        x = self.embed(cond) + self.pos[: cond.shape[1]]
        x = self.encoder(x, src_key_padding_mask=~mask)
        return self.norm(x), mask


def build_vocab(captions) -> list[str]:
    """Sorted word list of the given captions (the closed vocabulary of a grammar's captions)."""
    return sorted({w for c in captions for w in tokenize(c)})


__all__ = ["PAD", "NULL", "tokenize", "value_index", "FactorizedConditioner", "CombinationConditioner", "OneHotConditioner", "CaptionConditioner",
           "build_vocab"]
