"""A split in memory for the transformer lab: records, encoder inputs (images or scene tokens),
concept labels and object tuples."""

from __future__ import annotations

from pathlib import Path

import torch

from mosaic.lab.transformer.tokens import SceneTokenizer, fact_table, object_table, tokens_from_table
from mosaic.dataset import read_metadata
from mosaic.lab.data import evaluation_splits, split_names as names
from mosaic.torch_data import MosaicDataset


class SplitData:
    """One split in memory: records, the encoder input and labels.

    Attributes:
        records: metadata records (index order).
        inputs: uint8 ``[N, 3, H, W]`` images or int64 ``[N, L]`` scene tokens.
        targets: int64 ``[N, C]`` value index of each spec concept (``-1``: not shown).
        objects: int64 ``[N, M, A]`` object tuples (``-1`` rows: no object), or None without a tokenizer.
    """

    def __init__(self, root: Path, split: str, spec, input_kind: str, tokenizer: SceneTokenizer | None):
        self.split = split
        self.records = read_metadata(root, split)
        self.concepts = list(spec.concepts)
        lookup = {c: {v: k for k, v in enumerate(spec.domain(c))} for c in self.concepts}
        self.targets = torch.tensor(
            [[lookup[c].get(r["concepts"].get(c), -1) for c in self.concepts] for r in self.records], dtype=torch.long
        ).reshape(len(self.records), len(self.concepts))
        self.objects = object_table(tokenizer, self.records) if tokenizer is not None else None
        if input_kind == "image":
            self.inputs = MosaicDataset(root, split).images
        else:
            self.inputs = tokens_from_table(tokenizer, self.objects, fact_table(tokenizer, self.records))

    def __len__(self) -> int:
        return len(self.records)


def batches(n: int, size: int):
    for s in range(0, n, size):
        yield slice(s, min(n, s + size))


def split_names(root: Path) -> list[str]:
    return names(root)


def test_splits(root: Path) -> list[str]:
    return evaluation_splits(root)
