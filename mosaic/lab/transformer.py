"""The transformer lab: ViTs and token encoders trained from scratch on mosaic datasets, for the
coverage study (multi-head concept classifiers) and the binding study (dual encoders).

- **classifier** (Uselis, Dittadi & Oh 2025, "Does Data Scaling Lead to Visual Compositional
  Generalization?"): an encoder and one linear head per concept, summed cross-entropy. Reported:
  accuracy per concept and joint on seen (``test_id``) and held-out (``test_ood``) combinations,
  per combination-grid cell, and the linear factorization of the pooled features.
- **binding** (Uselis, Koishigarina & Oh 2026, "How can embedding models bind concepts?", code
  ``amortization/``): a scene encoder (ViT over the image, or a token encoder over the scene
  graph's symbolic form) and a token query encoder for concept queries ``[value, EOS]`` and object
  queries ``[SOO, values, EOO, EOS]``; logits ``exp(tau) * cos``, tau learned (init 1.15, scale
  clamped at ``binding.tau_max`` in training); multi-positive soft cross-entropy over the
  in-batch queries (present concept values; present objects plus swap negatives), one term for
  concept and one for object queries. Reported: object and concept accuracy by the
  min-positive > max-negative rule on every test split (``test_ood`` = binding generalization:
  scenes of held-out object types only, candidates = every object type), and the factorization.

Both plug into the shared loop (:mod:`mosaic.lab.loop`) through :class:`ClassifierTask` and
:class:`BindingTask`; :func:`run_transformer` runs a config end to end into a run folder.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from pydantic import Field, model_validator

from mosaic.errors import DatasetError, MosaicError
from mosaic.lab.binding import (
    concept_positives, object_positives, ranking_correct, similarity_logits, soft_cross_entropy, swap_negatives,
)
from mosaic.lab.config import ConfigError, RunConfig, _Base
from mosaic.lab.encoders import TokenEncoder, ViTEncoder
from mosaic.lab.factorization import linear_factorization
from mosaic.lab.tokens import SceneTokenizer, fact_table, object_table, tokens_from_table

# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------


class InputSection(_Base):
    """What the scene encoder reads: the rendered ``image`` (ViT) or the scene graph's ``tokens``."""

    kind: Literal["image", "tokens"] = "image"
    image_size: int | None = Field(None, ge=4, description="resize images to this side for the ViT (default: the dataset's)")


class ModelSection(_Base):
    """Transformer shape, shared by the scene and query encoders."""

    patch: int = Field(4, ge=1, description="ViT patch side in pixels (must divide the image side)")
    stem: Literal["patch", "conv"] = Field("patch", description="ViT stem: linear patch embedding, or early convolutions (Xiao et al. 2021)")
    width: int = Field(128, ge=8)
    depth: int = Field(4, ge=1)
    heads: int = Field(4, ge=1)
    mlp_ratio: float = Field(2.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    embed_dim: int = Field(64, ge=2, description="binding: dimension of the shared scene/query embedding")


class ClassifierSection(_Base):
    concepts: list[str] | None = Field(None, description="concepts with a head (default: every concept of the spec)")


class BindingSection(_Base):
    """Queries and negatives of the dual encoder (defaults follow the reference code)."""

    concept_queries: bool = True
    object_queries: bool = True
    swap_negatives: int = Field(1, ge=0, description="swap negatives drawn per scene and step")
    random_negatives: int = Field(0, ge=0, description="random object-type negatives per present object type")
    negatives: Literal["all", "train"] = Field(
        "train", description="object types allowed as negatives in training: train (only types seen in train, so "
        "held-out types never occur in training at all) or all (the reference code's default: held-out types may be "
        "negatives, never positives; on small grids the model then learns to rank them last)")
    tau_init: float = 1.15
    tau_max: float = Field(10.0, gt=0, description="clamp of exp(tau) in training (reference: 10)")

    @model_validator(mode="after")
    def _some(self):
        if not (self.concept_queries or self.object_queries):
            raise ValueError("enable concept_queries or object_queries (or both)")
        return self


class EvaluationSection(_Base):
    batch_size: int = Field(256, ge=1)
    factorization: bool = Field(True, description="linear-factorization R² and factor |cos| of the embeddings")
    checkpoint: Literal["final", "best"] = Field("final", description="weights to evaluate: final (EMA when enabled) or best on val")


class TransformerConfig(RunConfig):
    """``mosaic train transformer`` config: run, dataset and training sections (shared with the
    diffusion lab) plus the objective, the input, the model and objective options."""

    objective: Literal["classifier", "binding"]
    input: InputSection = Field(default_factory=InputSection)
    model: ModelSection = Field(default_factory=ModelSection)
    classifier: ClassifierSection = Field(default_factory=ClassifierSection)
    binding: BindingSection = Field(default_factory=BindingSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)

    @model_validator(mode="after")
    def _sections_of_the_objective(self):
        other = {"classifier": "binding", "binding": "classifier"}[self.objective]
        section = getattr(self, other)
        if other in self.model_fields_set and section != type(section)():  # a dumped config carries the defaults: fine
            raise ValueError(f"a {other}: section has no effect with objective: {self.objective}: remove it "
                             f"(or set objective: {other})")
        return self


# ----------------------------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------------------------


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
    (not normalised; :func:`~mosaic.lab.binding.similarity_logits` takes the cosine).
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


# ----------------------------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------------------------


class SplitData:
    """One split in memory: records, the encoder input and labels.

    Attributes:
        records: metadata records (index order).
        inputs: uint8 ``[N, 3, H, W]`` images or int64 ``[N, L]`` scene tokens.
        targets: int64 ``[N, C]`` value index of each spec concept (``-1``: not shown).
        objects: int64 ``[N, M, A]`` object tuples (``-1`` rows: no object), or None without a tokenizer.
    """

    def __init__(self, root: Path, split: str, spec, input_kind: str, tokenizer: SceneTokenizer | None):
        from mosaic.dataset import read_metadata

        self.split = split
        self.records = read_metadata(root, split)
        self.concepts = list(spec.concepts)
        lookup = {c: {v: k for k, v in enumerate(spec.domain(c))} for c in self.concepts}
        self.targets = torch.tensor(
            [[lookup[c].get(r["concepts"].get(c), -1) for c in self.concepts] for r in self.records], dtype=torch.long
        ).reshape(len(self.records), len(self.concepts))
        self.objects = object_table(tokenizer, self.records) if tokenizer is not None else None
        if input_kind == "image":
            from mosaic.torch_data import MosaicDataset

            self.inputs = MosaicDataset(root, split).images
        else:
            self.inputs = tokens_from_table(tokenizer, self.objects, fact_table(tokenizer, self.records))

    def __len__(self) -> int:
        return len(self.records)


def _batches(n: int, size: int):
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


# ----------------------------------------------------------------------------------------------
# tasks
# ----------------------------------------------------------------------------------------------


class ClassifierTask:
    """Multi-head concept classification (the loop's :class:`~mosaic.lab.loop.Task` interface).

    Loss: sum over concepts of the cross-entropy of its head (samples without a value skipped).
    """

    def __init__(self, cfg: TransformerConfig, spec, root: Path, tokenizer: SceneTokenizer | None):
        self.cfg, self.spec, self.root = cfg, spec, root
        kind = cfg.input.kind
        self.heads = cfg.classifier.concepts or list(spec.concepts)
        unknown = [c for c in self.heads if c not in spec.concepts]
        if unknown:
            from mosaic.vocab import closest

            hints = [f"{u!r} -> {m!r}" for u in unknown if (m := closest(u, spec.concepts, cutoff=0.6))]
            raise ConfigError([("classifier.concepts", f"{unknown} are not concepts of the dataset's spec ({list(spec.concepts)})"
                                + (f": did you mean {', '.join(hints)}?" if hints else ""))])
        self.head_idx = [list(spec.concepts).index(c) for c in self.heads]
        self.tokenizer = tokenizer
        self._last = None  # (records, predictions) of the last evaluate, for write_pictures
        self.train = SplitData(root, "train", spec, kind, tokenizer)
        self.val = SplitData(root, "val", spec, kind, tokenizer) if "val" in _splits(root) else None
        self.train_data = {"x": self.train.inputs, "y": self.train.targets[:, self.head_idx]}
        encoder = make_encoder(cfg, kind, tokenizer, spec.image.size)
        self.model = ClassifierModel(encoder, [len(spec.domain(c)) for c in self.heads])
        self.selection = ("accuracy_joint", "max") if self.val is not None and len(self.val) else None

    def loss(self, model, batch, generator):
        _, logits = model(batch["x"])
        y = batch["y"]
        return sum(F.cross_entropy(lg.float(), y[:, h], ignore_index=-1) for h, lg in enumerate(logits))

    @torch.no_grad()
    def predict(self, model, data: SplitData, device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(predicted value indices int64 [N, heads], features float [N, width])`` on CPU."""
        preds, feats = [], []
        for sl in _batches(len(data), self.cfg.evaluation.batch_size):
            f, logits = model(data.inputs[sl].to(device))
            preds.append(torch.stack([lg.argmax(1) for lg in logits], 1).cpu())
            feats.append(f.float().cpu())
        return torch.cat(preds), torch.cat(feats)

    def validate(self, model, accelerator):
        if self.val is None or not len(self.val):
            return {}
        pred, _ = self.predict(model, self.val, accelerator.device)
        acc = _accuracy(pred, self.val.targets[:, self.head_idx], self.heads)
        return {f"accuracy_{k}": v for k, v in acc.items() if k != "n"}

    def export(self, model, out_dir: Path) -> None:
        _export(model, out_dir)

    def write_pictures(self, out_dir: Path) -> list[Path]:
        """After :meth:`evaluate`, with a holdout: ``heatmap.png``, joint accuracy per combination of
        the grid (held-out cells outlined; the same picture ``mosaic evaluate`` draws). Concepts
        without a head count as read correctly. Returns the files written."""
        if self.spec.holdout is None or self._last is None:
            return []
        from mosaic.evaluation.metrics import plot_cell_heatmap, score

        records, pred = self._last
        preds = []
        for r, p in zip(records, pred.tolist()):
            row = dict(r["concepts"])
            row.update({c: self.spec.domain(c)[k] for c, k in zip(self.heads, p)})
            preds.append(row)
        heads = "" if set(self.heads) == set(self.spec.concepts) else f" (heads: {', '.join(self.heads)})"
        path = Path(out_dir) / "heatmap.png"
        plot_cell_heatmap(score(records, preds, self.spec), path, self.spec,
                          title=f"{self.cfg.name}: {self.cfg.input.kind} classifier, joint accuracy per combination{heads}")
        return [path]

    def evaluate(self, model, device) -> dict:
        """Accuracy (seen / held-out per concept and joint, per grid cell) and factorization."""
        model.eval()
        out: dict = {"table": {}, "per_split": {}}
        preds, feats, targets, records = [], [], [], []
        for split in _test_splits(self.root):
            data = SplitData(self.root, split, self.spec, self.cfg.input.kind, self.tokenizer)
            if not len(data):
                continue
            p, f = self.predict(model, data, device)
            out["per_split"][split] = _accuracy(p, data.targets[:, self.head_idx], self.heads)
            preds.append(p)
            feats.append(f)
            targets.append(data.targets)
            records += data.records
        if not preds:
            raise DatasetError(f"dataset {self.root}: every test split ({', '.join(_test_splits(self.root))}) is empty; "
                               "generate it with test samples (splits.test_id / test_ood / test > 0)")
        pred, feat, tgt = torch.cat(preds), torch.cat(feats), torch.cat(targets)
        self._last = (records, pred)
        held = torch.tensor([bool(r.get("held_out")) for r in records])
        if self.spec.holdout is not None:
            out["table"]["seen"] = _accuracy(pred[~held], tgt[~held][:, self.head_idx], self.heads)
            out["table"]["held_out"] = _accuracy(pred[held], tgt[held][:, self.head_idx], self.heads)
            out["per_cell"] = _per_cell(pred, tgt[:, self.head_idx], records, self.heads)
        else:
            out["table"]["test"] = _accuracy(pred, tgt[:, self.head_idx], self.heads)
        if self.cfg.evaluation.factorization:
            out["factorization"] = linear_factorization(feat, tgt, self.train.concepts)
            out["factorization"]["embedding"] = "pooled encoder feature (before the heads), test splits together"
        return out


class BindingTask:
    """Dual-encoder binding (the loop's :class:`~mosaic.lab.loop.Task` interface).

    Per step: concept queries = the concept values present in the batch; object queries = the
    object types present in the batch, ``binding.swap_negatives`` swap negatives per scene (drawn
    from the scene's precomputed valid swaps) and ``binding.random_negatives`` random object types
    per present type. Loss = soft CE over concept queries + soft CE over object queries.
    """

    def __init__(self, cfg: TransformerConfig, spec, root: Path, tokenizer: SceneTokenizer):
        self.cfg, self.spec, self.root, self.tokenizer = cfg, spec, root, tokenizer
        kind = cfg.input.kind
        self.train = SplitData(root, "train", spec, kind, tokenizer)
        self.val = SplitData(root, "val", spec, kind, tokenizer) if "val" in _splits(root) else None
        objs = self.train.objects
        n_obj = (objs[:, :, 0] >= 0).sum(1)
        if int(n_obj.max()) < 2 and cfg.binding.swap_negatives:
            raise ConfigError([("binding.swap_negatives", "every training scene holds fewer than 2 objects, so there is nothing to swap: "
                                "set it to 0, or use a spec with 2+ objects per scene")])
        # allowed negative object types (by type id)
        n_types = tokenizer.n_object_types
        seen = torch.zeros(n_types, dtype=torch.bool)
        valid = objs[:, :, 0] >= 0
        seen[_type_ids(objs[valid], tokenizer.radix)] = True
        self.train_types = seen
        self.allowed_neg = seen if cfg.binding.negatives == "train" else torch.ones(n_types, dtype=torch.bool)
        # every valid swap of every training scene, padded with -1: [N, S, A]
        swaps = [swap_negatives(o) for o in objs.tolist()]
        if cfg.binding.negatives == "train":
            swaps = [[s for s in sw if bool(seen[_type_ids(torch.tensor([s]), tokenizer.radix)])] for sw in swaps]
        s_max = max(1, max(len(s) for s in swaps))
        table = torch.full((len(swaps), s_max, len(tokenizer.attributes)), -1, dtype=torch.long)
        for n, sw in enumerate(swaps):
            if sw:
                table[n, :len(sw)] = torch.tensor(sw, dtype=torch.long)
        self.train_data = {"x": self.train.inputs, "objects": objs, "swaps": table}
        cq, self.concept_keys = tokenizer.concept_queries()
        self.concept_query_tokens = cq
        self.all_types = torch.from_numpy(tokenizer.all_object_types())
        scene = make_encoder(cfg, kind, tokenizer, spec.image.size)
        query = make_encoder(cfg, "tokens", tokenizer, None, max_len=tokenizer.query_len)
        self.model = DualEncoder(scene, query, cfg.model.embed_dim, cfg.binding.tau_init)
        self.selection = ("object_accuracy", "max") if self.val is not None and len(self.val) else None

    # -- training ---------------------------------------------------------------------------------
    def queries_for(self, objects: torch.Tensor, swaps: torch.Tensor, generator: torch.Generator):
        """The in-batch queries of a batch: ``(concept mask bool [V], object tuples int64 [Q, A])``."""
        b = self.cfg.binding
        dev = objects.device
        cmask = concept_positives(objects, self.tokenizer.radix).any(0)
        valid = objects[:, :, 0] >= 0
        parts = [objects[valid]]
        if b.swap_negatives and swaps.shape[1]:
            ok = swaps[:, :, 0] >= 0
            score = torch.rand(swaps.shape[:2], generator=generator, device=dev).masked_fill(~ok, -1.0)
            k = min(b.swap_negatives, swaps.shape[1])
            top = score.topk(k, dim=1)
            pick = torch.gather(swaps, 1, top.indices[:, :, None].expand(-1, -1, swaps.shape[2]))
            parts.append(pick[top.values >= 0])
        if b.random_negatives:
            allowed = torch.nonzero(self.allowed_neg.to(dev)).squeeze(1)
            n = int(torch.unique(parts[0], dim=0).shape[0]) * b.random_negatives
            ids = allowed[torch.randint(len(allowed), (n,), generator=generator, device=dev)]
            parts.append(self.all_types.to(dev)[ids])
        return cmask, torch.unique(torch.cat(parts), dim=0)

    def loss(self, model, batch, generator):
        b = self.cfg.binding
        objects = batch["objects"]
        cmask, oq = self.queries_for(objects, batch["swaps"], generator)
        ctoks = self.concept_query_tokens.to(objects.device)[cmask] if b.concept_queries else ctoks_empty(objects)
        otoks = self.tokenizer.object_queries(oq.cpu()).to(objects.device) if b.object_queries else ctoks_empty(objects)
        qtoks = _cat_queries(ctoks, otoks)
        s, q = model(batch["x"], qtoks)
        inner = model.module if hasattr(model, "module") else model
        loss = s.sum() * 0.0
        nc = ctoks.shape[0]
        if b.concept_queries and nc:
            logits = similarity_logits(s, q[:nc], inner.log_tau, b.tau_max)
            loss = loss + soft_cross_entropy(logits, concept_positives(objects, self.tokenizer.radix)[:, cmask])
        if b.object_queries and otoks.shape[0]:
            logits = similarity_logits(s, q[nc:], inner.log_tau, b.tau_max)
            loss = loss + soft_cross_entropy(logits, object_positives(objects, oq))
        return loss

    # -- evaluation -------------------------------------------------------------------------------
    @torch.no_grad()
    def scores(self, model, data: SplitData, device) -> dict[str, torch.Tensor]:
        """Similarity logits of every scene of a split against every concept query ``[N, V]`` and
        every object type ``[N, T]``, and the normalised scene embeddings ``[N, E]`` (CPU)."""
        model.eval()
        cq = model.embed_queries(self.concept_query_tokens.to(device))
        oq = torch.cat([model.embed_queries(self.tokenizer.object_queries(self.all_types[sl]).to(device))
                        for sl in _batches(len(self.all_types), 4096)])
        cl, ol, emb = [], [], []
        for sl in _batches(len(data), self.cfg.evaluation.batch_size):
            s = model.embed_scenes(data.inputs[sl].to(device))
            cl.append(similarity_logits(s, cq, model.log_tau, math.inf).cpu())
            ol.append(similarity_logits(s, oq, model.log_tau, math.inf).cpu())
            emb.append(F.normalize(s.float(), dim=-1).cpu())
        return {"concept": torch.cat(cl), "object": torch.cat(ol), "embedding": torch.cat(emb)}

    def split_metrics(self, model, data: SplitData, device) -> tuple[dict, torch.Tensor]:
        """Binding metrics of one split (see :func:`binding_metrics`) and its scene embeddings."""
        sc = self.scores(model, data, device)
        return binding_metrics(sc["concept"], sc["object"], data.objects, self.tokenizer), sc["embedding"]

    def validate(self, model, accelerator):
        if self.val is None or not len(self.val):
            return {}
        m, _ = self.split_metrics(model, self.val, accelerator.device)
        return {k: m[k] for k in ("object_accuracy", "concept_accuracy", "swap_accuracy")}

    def export(self, model, out_dir: Path) -> None:
        _export(model, out_dir)

    def evaluate(self, model, device) -> dict:
        out: dict = {"binding": {}}
        embs, targets = [], []
        for split in _test_splits(self.root):
            data = SplitData(self.root, split, self.spec, self.cfg.input.kind, self.tokenizer)
            if not len(data):
                continue
            m, e = self.split_metrics(model, data, device)
            out["binding"][split] = m
            embs.append(e)
            targets.append(data.targets)
        keys = ("object_accuracy", "object_accuracy_swap_scenes", "no_swap_fraction", "swap_accuracy", "n")
        keys += ("concept_accuracy",) if self.cfg.binding.concept_queries else ()
        out["table"] = {group: {k: out["binding"][split][k] for k in keys}
                        for group, split in (("seen", "test_id"), ("held_out", "test_ood"), ("test", "test")) if split in out["binding"]}
        out["binding"]["train_object_types"] = int(self.train_types.sum())
        out["binding"]["object_types"] = int(self.tokenizer.n_object_types)
        out["binding"]["concept_queries"] = bool(self.cfg.binding.concept_queries)
        out["tau"] = float(model.log_tau.exp())
        if self.cfg.evaluation.factorization and embs:
            out["factorization"] = linear_factorization(torch.cat(embs), torch.cat(targets), self.train.concepts)
            out["factorization"]["embedding"] = "normalised scene embedding, test splits together"
        return out


def ctoks_empty(ref: torch.Tensor) -> torch.Tensor:
    return torch.zeros((0, 2), dtype=torch.long, device=ref.device)


def _cat_queries(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Concatenate query token rows of different lengths (right-padded with PAD = 0)."""
    L = max(a.shape[1], b.shape[1])
    return torch.cat([F.pad(a, (0, L - a.shape[1])), F.pad(b, (0, L - b.shape[1]))])


def _type_ids(tuples: torch.Tensor, radix: list[int]) -> torch.Tensor:
    ids = torch.zeros(tuples.shape[0], dtype=torch.long)
    for a, r in enumerate(radix):
        ids = ids * r + tuples[:, a].cpu()
    return ids


def binding_metrics(concept_logits: torch.Tensor, object_logits: torch.Tensor, objects: torch.Tensor,
                    tokenizer: SceneTokenizer) -> dict:
    """Binding metrics of scenes from their logits against every concept value and object type.

    Args:
        concept_logits: float ``[N, V]`` (V concept values in :meth:`SceneTokenizer.concept_queries` order).
        object_logits: float ``[N, T]`` (every object type, in type-id order).
        objects: int64 ``[N, M, A]`` the scenes' object tuples (``-1`` rows: none).
    Returns:
        ``object_accuracy`` (min present-object logit > max absent-object logit, candidates = every
        object type, swap negatives included), ``concept_accuracy`` (same over concept values),
        ``swap_accuracy`` (candidates = present objects + the scene's swap negatives only, over
        the scenes that have one), ``no_swap_fraction`` (scenes without a swap negative: objects
        that share a value; a bag-of-concepts model can be right on them, so it is the floor of
        ``object_accuracy`` for a model with perfect concept recognition and no binding),
        ``object_accuracy_swap_scenes`` (``object_accuracy``, same rule and candidates, over the
        scenes with at least one swap negative only: there a bag-of-concepts model cannot be right,
        so its floor is 0 rather than ``no_swap_fraction``),
        ``object_accuracy_by_num_objects``, ``n``.
    """
    types = torch.from_numpy(tokenizer.all_object_types())
    opos = object_positives(objects, types)
    cpos = concept_positives(objects, tokenizer.radix)
    ocor, oact = ranking_correct(object_logits, opos)
    ccor, cact = ranking_correct(concept_logits, cpos)
    n_obj = (objects[:, :, 0] >= 0).sum(1)
    # swap-only candidates
    swap_ok, swap_n = 0, 0
    has_swap = torch.zeros(len(objects), dtype=torch.bool)
    for i in range(len(objects)):
        sw = swap_negatives(objects[i].tolist())
        if not sw:
            continue
        has_swap[i] = True
        neg = _type_ids(torch.tensor(sw), tokenizer.radix)
        pos = opos[i]
        swap_ok += int(object_logits[i][pos].min() > object_logits[i][neg].max())
        swap_n += 1
    by_n = {}
    for k in sorted(set(n_obj.tolist())):
        sel = (n_obj == k) & oact
        if sel.any():
            by_n[str(k)] = float(ocor[sel].float().mean())
    swap_sel = oact & has_swap
    return {
        "object_accuracy": float(ocor[oact].float().mean()) if oact.any() else float("nan"),
        "concept_accuracy": float(ccor[cact].float().mean()) if cact.any() else float("nan"),
        "swap_accuracy": swap_ok / swap_n if swap_n else float("nan"),
        "object_accuracy_swap_scenes": float(ocor[swap_sel].float().mean()) if swap_sel.any() else float("nan"),
        "no_swap_fraction": 1.0 - swap_n / len(objects) if len(objects) else float("nan"),
        "object_accuracy_by_num_objects": by_n,
        "n": int(len(objects)),
    }


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _export(model, out_dir: Path) -> None:
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, str(out_dir / "model.safetensors"))


def _splits(root: Path) -> list[str]:
    from mosaic.lab.data import split_names

    return split_names(root)


def _test_splits(root: Path) -> list[str]:
    from mosaic.lab.data import evaluation_splits

    return evaluation_splits(root)


def _accuracy(pred: torch.Tensor, target: torch.Tensor, names: list[str]) -> dict:
    """Per-concept and joint accuracy of predicted value indices ``[N, C]`` against targets
    ``[N, C]`` (``-1`` targets are left out of a concept, and make the joint wrong)."""
    out = {"n": int(len(pred))}
    if not len(pred):
        return {**{c: float("nan") for c in names}, "joint": float("nan"), "n": 0}
    hit = pred == target
    for h, c in enumerate(names):
        ok = target[:, h] >= 0
        out[c] = float(hit[ok, h].float().mean()) if ok.any() else float("nan")
    out["joint"] = float(hit.all(1).float().mean())
    return out


def _per_cell(pred, target, records, names) -> dict:
    """Joint accuracy per combination of the grid, keyed ``"v1|v2|..."`` with ``held_out``."""
    cells: dict[str, list] = {}
    hit = (pred == target).all(1)
    for r, h in zip(records, hit.tolist()):
        combo = r.get("combination")
        if combo is None:
            continue
        key = "|".join(map(str, combo))
        c = cells.setdefault(key, [0, 0, bool(r.get("held_out"))])
        c[0] += int(h)
        c[1] += 1
    return {k: {"joint": a / n, "n": n, "held_out": ho} for k, (a, n, ho) in sorted(cells.items())}


def _fmt(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"


def report_tables(metrics: dict) -> list:
    """Rich tables of a transformer run's headline metrics (printed at the end of training):
    seen vs held-out accuracy per concept (classifier) or object / concept / swap accuracy per
    test split (binding), and the linear factorization."""
    from rich.table import Table

    tables = []
    acc = metrics.get("table") or {} if metrics.get("objective") == "classifier" else {}
    if acc:
        cols = list(acc)
        t = Table(title="concept accuracy (classifier heads)")
        t.add_column("concept")
        for c in cols:
            t.add_column(f"{c.replace('_', '-')} (n={acc[c]['n']})", justify="right")
        for k in [k for k in acc[cols[0]] if k not in ("joint", "n")] + ["joint"]:
            t.add_row(k if k != "joint" else "[bold]joint[/]", *[_fmt(acc[c].get(k)) for c in cols])
        tables.append(t)
    b = {k: v for k, v in (metrics.get("binding") or {}).items() if isinstance(v, dict)}
    if b:
        t = Table(title=f"binding (min-positive > max-negative over all {metrics['binding'].get('object_types')} object types; "
                        f"{metrics['binding'].get('train_object_types')} seen in train)")
        trained_concepts = metrics["binding"].get("concept_queries", True)
        cols = ["split", "n", "object accuracy", "floor (no swap)", "object acc. (swap scenes)"]
        cols += ["concept accuracy"] if trained_concepts else []
        for col in cols + ["swap accuracy"]:
            t.add_column(col, justify="left" if col == "split" else "right")
        for split, m in b.items():
            name = split + (" (held-out objects)" if split == "test_ood" else "")
            row = [name, str(m["n"]), _fmt(m["object_accuracy"]), _fmt(m.get("no_swap_fraction")), _fmt(m.get("object_accuracy_swap_scenes"))]
            row += [_fmt(m["concept_accuracy"])] if trained_concepts else []
            t.add_row(*row, _fmt(m["swap_accuracy"]))
        if not trained_concepts:
            t.caption = "concept accuracy left out: binding.concept_queries is false, so concept queries were never trained"
        tables.append(t)
    fac = metrics.get("factorization")
    if fac:
        t = Table(title=f"linear factorization ({fac.get('embedding', '')}, n={fac['n']})")
        for col in ("R²", "cross-concept |cos|", "within-concept |cos|"):
            t.add_column(col, justify="right")
        t.add_row(*[f"{fac[k]:.3f}" if fac.get(k) is not None else "-" for k in ("r2", "cross_concept_abs_cos", "within_concept_abs_cos")])
        tables.append(t)
    return tables


# ----------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------


def build_task(cfg: TransformerConfig, root: Path):
    """The task of a config on a dataset: :class:`ClassifierTask` or :class:`BindingTask`.

    Raises:
        ConfigError: a field that does not fit the dataset (unknown concept, token input for
            positions/relations, a patch that does not divide the image side, ...).
        TokenizationError: the spec has no token form (binding and token input need one).
    """
    from mosaic.dataset import spec_of

    spec = spec_of(root)
    need_tokens = cfg.objective == "binding" or cfg.input.kind == "tokens"
    tokenizer = SceneTokenizer.from_spec(spec) if need_tokens else None
    if cfg.objective == "classifier":
        return ClassifierTask(cfg, spec, root, tokenizer)
    return BindingTask(cfg, spec, root, tokenizer)


def load_weights(model: nn.Module, path: Path) -> None:
    """Load ``model.safetensors`` weights exported by the loop."""
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(Path(path) / "model.safetensors")))


def run_transformer(cfg: TransformerConfig, say: Callable[[str], None] = print, on_generate=None) -> dict:
    """Generate the dataset if needed, train (or resume) and evaluate on the test splits.

    Same run folders as the diffusion lab (:mod:`mosaic.lab.loop`): re-running a finished run
    (``RUN/DONE``) returns its ``metrics.json`` without doing anything; an interrupted one resumes
    from its latest checkpoint. Evaluation uses the ``final`` (EMA when enabled) weights, or the
    ``best`` on ``val`` with ``evaluation.checkpoint: best``.

    Returns:
        The run's metrics (also in ``RUN/metrics.json``): ``run``, ``name``, ``objective``,
        ``input``, ``dataset`` (fingerprint record), ``params``, ``train`` (the loop's summary),
        ``checkpoint``, ``table`` (``seen`` = ``test_id`` / ``held_out`` = ``test_ood``, or ``test``
        without a holdout; the columns of ``mosaic sweep``): for the classifier accuracy per
        concept, ``joint`` and ``n``, plus ``per_split`` and ``per_cell``; for binding
        ``object_accuracy``, ``concept_accuracy``, ``swap_accuracy`` and ``n``, plus ``binding``
        (per test split, also by number of objects) and ``tau``; for both ``factorization`` (:func:`linear_factorization`) and
        ``time_s``; ``already_done`` when nothing was left to do.
    Raises:
        ConfigError, DatasetError, SpecError, TrainingError, TokenizationError (all MosaicError).
    """
    from mosaic.lab.loop import torch_threads_restored

    with torch_threads_restored():  # training.threads applies to this run only
        return _run_transformer(cfg, say, on_generate)


def _run_transformer(cfg: TransformerConfig, say, on_generate) -> dict:
    from mosaic.lab.config import config_diff
    from mosaic.lab.data import manifest_fingerprint, resolve_dataset
    from mosaic.lab.loop import RunFolder, make_accelerator, train

    t_start = time.perf_counter()
    run = RunFolder(cfg.run_dir())
    if run.is_done() and run.metrics.is_file():
        diff = [d for d in config_diff(run.read_config(), cfg.model_dump(mode="json")) if d != "out"]
        if not diff:
            return {**json.loads(run.metrics.read_text()), "already_done": True}
    accelerator = make_accelerator(cfg.training, run.root)
    with accelerator.main_process_first(), accelerator.local_main_process_first():
        root = resolve_dataset(cfg.dataset, generate=True, on_progress=on_generate if accelerator.is_main_process else None)
    torch.manual_seed(cfg.training.seed)
    task = build_task(cfg, root)  # before the run folder is touched: config errors leave nothing behind
    with accelerator.main_process_first():
        status = run.open(cfg.model_dump(mode="json"), root, accelerator.is_main_process)
    if status == "done" and run.metrics.is_file():
        return {**json.loads(run.metrics.read_text()), "already_done": True}
    n_params = sum(p.numel() for p in task.model.parameters())
    what = f"{cfg.objective} on {cfg.input.kind}" + (f" ({cfg.model.stem} stem, patch {cfg.model.patch})" if cfg.input.kind == "image" else "")
    say(f"run {run.root} ({status}), dataset {root}: {what}, {n_params / 1e6:.3f} M parameters, {len(task.train)} training scenes")
    summary = train(task, cfg.training, run, accelerator, on_log=say)
    if not accelerator.is_main_process:
        return {"train": summary}
    checkpoint = cfg.evaluation.checkpoint if run.best.is_dir() else "final"
    model = task.model
    load_weights(model, run.best if checkpoint == "best" else run.final)
    model.to(accelerator.device)
    metrics = {"run": str(run.root), "name": cfg.name, "objective": cfg.objective, "input": cfg.input.kind,
               "dataset": manifest_fingerprint(root), "params": n_params, "train": summary, "checkpoint": checkpoint}
    with torch.no_grad():
        metrics.update(task.evaluate(model, accelerator.device))
    if hasattr(task, "write_pictures"):
        metrics["pictures"] = [str(p) for p in task.write_pictures(run.root)]
    metrics["time_s"] = time.perf_counter() - t_start
    metrics = _jsonable(metrics)
    run.write_metrics(metrics)
    run.mark_done()
    return metrics


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x


__all__ = [
    "TransformerConfig", "ClassifierTask", "BindingTask", "ClassifierModel", "DualEncoder", "binding_metrics",
    "build_task", "run_transformer", "report_tables", "MosaicError",
]
