"""The binding study's objective: a dual encoder (scene encoder + query encoder) trained with
in-batch concept and object queries, swap negatives and a multi-positive soft cross-entropy
(Uselis, Koishigarina & Oh 2026); evaluated by the ranking rule on every test split."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from mosaic.errors import ConfigError
from mosaic.evaluation.table import table_from_splits
from mosaic.lab.loop import Task
from mosaic.lab.transformer.binding import (
    binding_metrics, cat_queries, concept_positives, ctoks_empty, object_positives, similarity_logits, soft_cross_entropy,
    swap_negatives, type_ids,
)
from mosaic.lab.transformer.config import TransformerConfig
from mosaic.lab.transformer.data import SplitData, batches, split_names, test_splits
from mosaic.lab.transformer.factorization import linear_factorization
from mosaic.lab.transformer.models import DualEncoder, make_encoder
from mosaic.lab.transformer.tokens import SceneTokenizer


class BindingTask(Task):
    """Dual-encoder binding (the loop's :class:`~mosaic.lab.loop.Task` interface).

    Per step: concept queries = the concept values present in the batch; object queries = the
    object types present in the batch, ``binding.swap_negatives`` swap negatives per scene (drawn
    from the scene's precomputed valid swaps) and ``binding.random_negatives`` random object types
    per present type. Loss = soft CE over concept queries + soft CE over object queries.
    """

    def __init__(self, cfg: TransformerConfig, spec, root: Path, tokenizer: SceneTokenizer):
        self.cfg, self.spec, self.root, self.tokenizer = cfg, spec, root, tokenizer
        kind = cfg.input.kind
        if cfg.dataset.stream:
            raise ConfigError([("dataset.stream", "the binding objective needs the whole training split in memory (its swap "
                                "negatives and seen object types): set dataset.stream: false, or use objective: classifier")])
        self.train = SplitData(root, "train", spec, kind, tokenizer)
        self.val = SplitData(root, "val", spec, kind, tokenizer) if "val" in split_names(root) else None
        objs = self.train.objects
        n_obj = (objs[:, :, 0] >= 0).sum(1)
        if int(n_obj.max()) < 2 and cfg.binding.swap_negatives:
            raise ConfigError([("binding.swap_negatives", "every training scene holds fewer than 2 objects, so there is nothing to swap: "
                                "set it to 0, or use a spec with 2+ objects per scene")])
        # allowed negative object types (by type id)
        n_types = tokenizer.n_object_types
        seen = torch.zeros(n_types, dtype=torch.bool)
        valid = objs[:, :, 0] >= 0
        seen[type_ids(objs[valid], tokenizer.radix)] = True
        self.train_types = seen
        self.allowed_neg = seen if cfg.binding.negatives == "train" else torch.ones(n_types, dtype=torch.bool)
        # every valid swap of every training scene, padded with -1: [N, S, A]
        swaps = [swap_negatives(o) for o in objs.tolist()]
        if cfg.binding.negatives == "train":
            swaps = [[s for s in sw if bool(seen[type_ids(torch.tensor([s]), tokenizer.radix)])] for sw in swaps]
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
        qtoks = cat_queries(ctoks, otoks)
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
                        for sl in batches(len(self.all_types), 4096)])
        cl, ol, emb = [], [], []
        for sl in batches(len(data), self.cfg.evaluation.batch_size):
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

    def evaluate(self, model, device) -> dict:
        out: dict = {"binding": {}}
        embs, targets = [], []
        for split in test_splits(self.root):
            data = SplitData(self.root, split, self.spec, self.cfg.input.kind, self.tokenizer)
            if not len(data):
                continue
            m, e = self.split_metrics(model, data, device)
            out["binding"][split] = m
            embs.append(e)
            targets.append(data.targets)
        keys = ("object_accuracy", "object_accuracy_swap_scenes", "no_swap_fraction", "swap_accuracy", "n")
        keys += ("concept_accuracy",) if self.cfg.binding.concept_queries else ()
        out["table"] = table_from_splits(out["binding"], keys)
        out["binding"]["train_object_types"] = int(self.train_types.sum())
        out["binding"]["object_types"] = int(self.tokenizer.n_object_types)
        out["binding"]["concept_queries"] = bool(self.cfg.binding.concept_queries)
        out["tau"] = float(model.log_tau.exp())
        if self.cfg.evaluation.factorization and embs:
            out["factorization"] = linear_factorization(torch.cat(embs), torch.cat(targets), self.train.concepts)
            out["factorization"]["embedding"] = "normalised scene embedding, test splits together"
        return out
