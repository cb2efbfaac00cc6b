"""The coverage study's objective: an encoder with one linear head per concept, summed
cross-entropy (Uselis, Dittadi & Oh 2025). Reports per-concept and joint accuracy on seen and
held-out combinations (the table of :mod:`mosaic.evaluation.table`), per grid cell, and the linear
factorization of the pooled features."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from mosaic.errors import ConfigError, DatasetError
from mosaic.evaluation.table import accuracy_row, build_table
from mosaic.lab.loop import Task
from mosaic.lab.transformer.config import TransformerConfig
from mosaic.lab.transformer.data import SplitData, batches, split_names, test_splits
from mosaic.lab.transformer.factorization import linear_factorization
from mosaic.lab.transformer.models import ClassifierModel, make_encoder
from mosaic.lab.transformer.tokens import SceneTokenizer, fact_table, object_table, tokens_from_table
from mosaic.evaluation.metrics import plot_cell_heatmap, score
from mosaic.stream import StreamSource
from mosaic.vocab import closest


class _StreamInputs:
    """A streamed batch's non-image inputs (picklable): targets ``y`` int64 ``[B, heads]``, and the
    scene tokens ``x`` for ``input.kind: tokens``."""

    def __init__(self, kind: str, tokenizer, head_idx: list[int]):
        self.kind, self.tokenizer, self.head_idx = kind, tokenizer, head_idx

    def __call__(self, records):
        out = {"y": torch.tensor([list(r["labels"].values()) for r in records], dtype=torch.long)[:, self.head_idx]}
        if self.kind != "image":
            out["x"] = tokens_from_table(self.tokenizer, object_table(self.tokenizer, records), fact_table(self.tokenizer, records))
        return out


class ClassifierTask(Task):
    """Multi-head concept classification (the loop's :class:`~mosaic.lab.loop.Task` interface).

    Loss: sum over concepts of the cross-entropy of its head (samples without a value skipped).
    """

    def __init__(self, cfg: TransformerConfig, spec, root: Path, tokenizer: SceneTokenizer | None):
        self.cfg, self.spec, self.root = cfg, spec, root
        kind = cfg.input.kind
        self.heads = cfg.classifier.concepts or list(spec.concepts)
        unknown = [c for c in self.heads if c not in spec.concepts]
        if unknown:
            hints = [f"{u!r} -> {m!r}" for u in unknown if (m := closest(u, spec.concepts, cutoff=0.6))]
            raise ConfigError([("classifier.concepts", f"{unknown} are not concepts of the dataset's spec ({list(spec.concepts)})"
                                + (f": did you mean {', '.join(hints)}?" if hints else ""))])
        self.head_idx = [list(spec.concepts).index(c) for c in self.heads]
        self.tokenizer = tokenizer
        self._last = None  # (records, predictions) of the last evaluate, for write_pictures
        self.val = SplitData(root, "val", spec, kind, tokenizer) if "val" in split_names(root) else None
        if cfg.dataset.stream:  # train batches sampled and rendered on the fly (mosaic.stream)

            self.train = StreamSource(spec, "train", _StreamInputs(kind, tokenizer, self.head_idx), workers=cfg.dataset.workers,
                                      image_key="x" if kind == "image" else None)
            self.train_source, self.train_data = self.train, {}
        else:
            self.train = SplitData(root, "train", spec, kind, tokenizer)
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
        for sl in batches(len(data), self.cfg.evaluation.batch_size):
            f, logits = model(data.inputs[sl].to(device))
            preds.append(torch.stack([lg.argmax(1) for lg in logits], 1).cpu())
            feats.append(f.float().cpu())
        return torch.cat(preds), torch.cat(feats)

    def validate(self, model, accelerator):
        if self.val is None or not len(self.val):
            return {}
        pred, _ = self.predict(model, self.val, accelerator.device)
        acc = accuracy_row(pred, self.val.targets[:, self.head_idx], self.heads)
        return {f"accuracy_{k}": v for k, v in acc.items() if k != "n"}

    def write_pictures(self, out_dir: Path) -> list[Path]:
        """After :meth:`evaluate`, with a holdout: ``heatmap.png``, joint accuracy per combination of
        the grid (held-out cells outlined; the same picture ``mosaic evaluate`` draws). Concepts
        without a head count as read correctly. Returns the files written."""
        if self.spec.holdout is None or self._last is None:
            return []

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
        for split in test_splits(self.root):
            data = SplitData(self.root, split, self.spec, self.cfg.input.kind, self.tokenizer)
            if not len(data):
                continue
            p, f = self.predict(model, data, device)
            out["per_split"][split] = accuracy_row(p, data.targets[:, self.head_idx], self.heads)
            preds.append(p)
            feats.append(f)
            targets.append(data.targets)
            records += data.records
        if not preds:
            raise DatasetError(f"dataset {self.root}: every test split ({', '.join(test_splits(self.root))}) is empty; "
                               "generate it with test samples (splits.test_id / test_ood / test > 0)")
        pred, feat, tgt = torch.cat(preds), torch.cat(feats), torch.cat(targets)
        self._last = (records, pred)
        held = torch.tensor([bool(r.get("held_out")) for r in records])
        y = tgt[:, self.head_idx]
        if self.spec.holdout is not None:
            out["table"] = build_table({"seen": accuracy_row(pred[~held], y[~held], self.heads),
                                        "held_out": accuracy_row(pred[held], y[held], self.heads)})
            out["per_cell"] = _per_cell(pred, y, records, self.heads)
        else:
            out["table"] = build_table({"test": accuracy_row(pred, y, self.heads)})
        if self.cfg.evaluation.factorization:
            out["factorization"] = linear_factorization(feat, tgt, self.train.concepts)
            out["factorization"]["embedding"] = "pooled encoder feature (before the heads), test splits together"
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
