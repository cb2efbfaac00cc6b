"""A torch ``Dataset`` over a generated mosaic dataset directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mosaic.dataset import read_manifest, read_metadata, spec_of
from mosaic.errors import DatasetError


class MosaicDataset(torch.utils.data.Dataset):
    """One split of a mosaic dataset, with images kept in memory as uint8.

    Each item is a dict:
        ``image``: uint8 tensor ``[3, H, W]``;
        ``targets``: int64 tensor ``[C]``, the index of each concept's value in its domain
        (order of ``self.concepts``; -1 where the scene shows no value);
        ``index``: int; ``caption``: str; ``mask``: uint8 ``[H, W]`` when ``load_masks``.

    Args:
        root: dataset directory (made by ``mosaic generate``).
        split: split name, e.g. ``"train"``.
        load_masks: also load instance masks (the dataset must have been generated with masks).
    Raises:
        DatasetError: missing or incomplete dataset, missing split or masks.
    """

    def __init__(self, root: str | Path, split: str = "train", load_masks: bool = False):
        self.root = Path(root)
        man = read_manifest(self.root)
        if man.get("status") != "complete":
            raise DatasetError(f"{root} is incomplete (generation was interrupted): rerun `mosaic generate` to finish it")
        if load_masks and not man.get("masks"):
            raise DatasetError(f"{root} has no masks: regenerate with `mosaic generate ... --masks`")
        self.manifest = man
        self.spec = spec_of(self.root)
        self.split = split
        self.records = read_metadata(self.root, split)
        self.concepts = list(self.spec.concepts)
        self.domains = {c: self.spec.domain(c) for c in self.concepts}
        lookup = {c: {v: k for k, v in enumerate(d)} for c, d in self.domains.items()}
        self.targets = torch.tensor(
            [[lookup[c].get(r["concepts"].get(c), -1) for c in self.concepts] for r in self.records], dtype=torch.long
        ).reshape(len(self.records), len(self.concepts))
        base = self.root / split
        self.images = torch.from_numpy(
            np.stack([np.asarray(Image.open(base / r["file_name"]).convert("RGB")) for r in self.records])
            if self.records else np.zeros((0, man["spec"]["image"]["size"], man["spec"]["image"]["size"], 3), np.uint8)
        ).permute(0, 3, 1, 2).contiguous()
        self.masks = None
        if load_masks:
            self.masks = torch.from_numpy(np.stack([np.asarray(Image.open(base / r["mask_file_name"])) for r in self.records]))

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict:
        r = self.records[i]
        item = {"image": self.images[i], "targets": self.targets[i], "index": r["index"], "caption": r["caption"]}
        if self.masks is not None:
            item["mask"] = self.masks[i]
        return item
