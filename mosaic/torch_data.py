"""A torch ``Dataset`` over a generated mosaic dataset directory (imagefolder or Parquet form)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from mosaic.dataset import iter_metadata, read_manifest, resolve_split, spec_of
from mosaic.errors import DatasetError
from mosaic.locks import reading
from mosaic.png import decode_image
from mosaic.records import unfinished_hint
from mosaic.shard_checks import shard_bounds
from mosaic.verify import check_before_read, read_manifest_checked


class MosaicDataset(torch.utils.data.Dataset):
    """One split of a mosaic dataset, with images kept in memory as uint8.

    Each item is a dict:
        ``image``: uint8 tensor ``[3, H, W]``;
        ``targets``: int64 tensor ``[C]``, the index of each concept's value in its domain
        (order of ``self.concepts``; -1 where the scene shows no value);
        ``held_out``: bool tensor ``[]``, whether the sample's combination is held out (only in
        ``test_ood``);
        ``index``: int; ``caption``: str; ``mask``: uint8 ``[H, W]`` when ``load_masks``.

    Decoding targets back to values: ``ds.decode(item["targets"])`` gives ``{concept: value}``,
    i.e. ``ds.domains[concept][targets[k]]`` for the ``k``-th concept of ``ds.concepts`` (None for
    -1); a batch decodes row by row. ``ds.records`` holds every sample's record (concepts,
    combination, caption, scene graph) without the images.

    Args:
        root: dataset directory (made by ``mosaic generate``, either ``--format``).
        split: split name: ``train``, ``val`` (or ``validation``, HF's name), ``test``, ``test_id``,
            ``test_ood``.
        load_masks: also load instance masks (the dataset must have been generated with masks).
        verify: run the quick check first (:func:`mosaic.verify.check_before_read`: the manifest's
            spec against its fingerprint, counts, metadata, every image's presence and trailer,
            stray files and links, every Parquet shard's sha256; about 6 s per 100,000 images, see
            docs/integrity.md). False skips it (a caller that has just checked the folder).
    Raises:
        DatasetError: missing, incomplete or damaged dataset (each damaged file named, and the fix),
            a split it does not have (the message lists the splits it has), no masks, an image
            larger than the spec's image size.
    """

    def __init__(self, root: str | Path, split: str = "train", load_masks: bool = False, verify: bool = True):
        for name, v in (("load_masks", load_masks), ("verify", verify)):  # "no" / "False" are true to Python
            if not isinstance(v, (bool, np.bool_)):
                raise DatasetError([(name, f"{name} must be True or False, got {v!r} ({type(v).__name__})")])
        self.root = Path(root)
        read_manifest_checked(self.root)  # a dataset at all (named otherwise) before a lock file is made beside it
        # the dataset's shared lock from the check to the last image: a `generate --overwrite` can neither start nor
        # finish in between (its new images were paired with the old labels, without a word)
        with reading(self.root, DatasetError):
            self._load(split, load_masks, verify)

    def _load(self, split: str, load_masks: bool, verify: bool) -> None:
        from mosaic.parquet import iter_records, storage_of

        root = self.root
        man = read_manifest_checked(self.root)  # bounded, UTF-8, depth-safe: a damaged manifest is named, never a traceback
        if man.get("status") != "complete":
            raise DatasetError(f"{root} is incomplete: {unfinished_hint(root, man)}")
        if verify:
            man = check_before_read(self.root, man)  # damage, a foreign shard or file, an edited spec: named, never read
        if load_masks and not man.get("masks"):
            raise DatasetError(f"{root} has no masks: regenerate with `mosaic generate ... --masks`")
        self.manifest = man
        self.spec = spec_of(self.root)
        self.split = split = resolve_split(self.root, split, man)
        self.storage = storage_of(man)
        self.concepts = list(self.spec.concepts)
        self.domains = {c: self.spec.domain(c) for c in self.concepts}
        size = self.spec.image.size
        if self.storage == "parquet":
            shard_bounds(self.root, split, man)  # before any row is read: no page decompresses to more than mosaic writes
            self.records, images, masks = [], [], []
            cols = ["image"] + (["mask"] if load_masks else [])
            for row, rec in zip(iter_records(self.root, split, columns=cols, manifest=man), iter_metadata(self.root, split, man)):
                where = f"{self.root}/data ({split} sample {rec['index']})"
                images.append(decode_image(row["image"]["bytes"], where=where, error=DatasetError, exact_size=size))
                if load_masks:
                    masks.append(decode_image(row["mask"]["bytes"], where=where + " mask", error=DatasetError, mode=None, exact_size=size))
                self.records.append(rec)
        else:
            self.records = list(iter_metadata(self.root, split, man))
            base = self.root / split
            images = [decode_image(base / r["file_name"], where=str(base / r["file_name"]), error=DatasetError, exact_size=size)
                      for r in self.records]
            masks = [decode_image(base / r["mask_file_name"], where=str(base / r["mask_file_name"]), error=DatasetError, mode=None,
                                  exact_size=size) for r in self.records] if load_masks else []
        lookup = {c: {v: k for k, v in enumerate(d)} for c, d in self.domains.items()}
        self.targets = torch.tensor(
            [[lookup[c].get(r["concepts"].get(c), -1) for c in self.concepts] for r in self.records], dtype=torch.long
        ).reshape(len(self.records), len(self.concepts))
        self.held_out = torch.tensor([r.get("held_out") is True for r in self.records], dtype=torch.bool)
        self.images = torch.from_numpy(
            np.stack(images) if images else np.zeros((0, size, size, 3), np.uint8)
        ).permute(0, 3, 1, 2).contiguous()
        self.masks = torch.from_numpy(np.stack(masks) if masks else np.zeros((0, size, size), np.uint8)) if load_masks else None

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict:
        i = item_index(i, len(self.records), f"split {self.split!r}", negative=True)
        r = self.records[i]
        item = {"image": self.images[i], "targets": self.targets[i], "held_out": self.held_out[i], "index": r["index"], "caption": r["caption"]}
        if self.masks is not None:
            item["mask"] = self.masks[i]
        return item

    def decode(self, targets) -> dict:
        """``{concept: value}`` of one ``targets`` vector (int ``[C]``; -1 gives None)."""
        t = [int(x) for x in (targets.tolist() if hasattr(targets, "tolist") else targets)]
        if len(t) != len(self.concepts):
            raise ValueError(f"targets has {len(t)} entries, this dataset has {len(self.concepts)} concepts {self.concepts}")
        return {c: (self.domains[c][k] if k >= 0 else None) for c, k in zip(self.concepts, t)}


def item_index(i, n: int, what: str, negative: bool = False) -> int:
    """``i`` as the index of one of ``n`` items (a Python or NumPy integer, or a one-element integer
    tensor; ``negative``: counted from the end as a list does), else a named error. A bool is refused:
    ``dataset[True]`` gave item 1 without a word (``True`` is an ``int`` to Python).

    Raises:
        TypeError: a bool, a float, a slice, a string, any other non-integer;
        IndexError: outside ``0..n-1`` (or ``-n..n-1`` with ``negative``).
    """
    import operator

    if isinstance(i, (bool, np.bool_)) or (torch.is_tensor(i) and i.dtype == torch.bool):
        raise TypeError(f"{what}: an item index must be an integer, not the boolean {i!r} (which Python would read as "
                        f"{int(i)}): give an integer such as 0")
    try:
        k = operator.index(i)
    except TypeError:
        raise TypeError(f"{what}: an item index must be an integer, got {type(i).__name__} {str(i)[:60]!r}: give one integer "
                        "(slices and lists are not taken: index items one at a time, or use a DataLoader)") from None
    lo = -n if negative else 0
    if not lo <= k < n:
        raise IndexError(f"{what} has {n} item(s): index {k} is outside {lo}..{n - 1}")
    return k + n if k < 0 else k
