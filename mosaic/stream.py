"""Data on the fly: a torch ``IterableDataset`` that samples and renders a spec's split inside the
DataLoader workers, so training volume is not bounded by disk.

Sample ``i`` of a split is exactly sample ``i`` of the dataset ``mosaic generate`` writes from the
same spec (the same :func:`mosaic.records.sample_record` and renderer), so a stream is a generated
dataset that was never written: deterministic per ``(seed, split, index)``, with the split's exact
quotas, and never a held-out combination outside ``test_ood``. For more samples than the spec's
split holds, raise the split's size (``--set splits.train=1000000``): the quota plan grows with it.

Sharding: with ``W`` DataLoader workers on each of ``R`` ranks (``torch.distributed``, or
``rank``/``world_size`` given), position ``p`` of the epoch's index order goes to rank ``p mod R``
(so rank ``r`` yields exactly ``len()`` items, ``len(range(r, n, R))``, however many workers it
has) and, within the rank, to worker ``(p div R) mod W``: the ranks and workers together yield
every index once and no index twice.
"""

from __future__ import annotations


from pathlib import Path

import numpy as np
import torch

from mosaic.errors import DatasetError, SpecError
from mosaic.executors import worker_processes
from mosaic.hf import labels_of, mosaic_split
from mosaic.io import unreadable_path
from mosaic.records import sample_record, spec_from_data, spec_of
from mosaic.spec import Spec, load_spec, parse_spec
from mosaic.torch_data import item_index
from mosaic.verify import check_before_read
from renderers import BACKENDS, backend_of, get_renderer


def _spec_of(spec) -> Spec:
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, dict):
        return parse_spec(spec)
    p = Path(spec)
    try:
        is_dir = p.is_dir()
    except OSError as e:  # a name over 255 bytes: pathlib raises where the CLI names it
        raise SpecError(f"{unreadable_path(p, e)}; give a spec YAML or a dataset folder") from None
    if is_dir or p.name == "manifest.json":
        root = p if is_dir else p.parent
        check_before_read(root)  # a manifest whose spec no longer matches its fingerprint (or a damaged dataset) is refused
        return spec_of(root)
    return load_spec(p)


def _whole(name: str, v) -> int:
    """``v`` as an int when it is one (a numpy integer too), else a DatasetError naming ``name``:
    ``int()`` would take ``0.5`` for 0, ``3.7`` for 3 and ``True`` for 1."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise DatasetError([(name, f"{name} must be an integer, got {v!r} ({type(v).__name__}): give a whole number, "
                             "e.g. " + ("start=0, stop=100" if name in ("start", "stop") else "rank=0, world_size=2"))])
    return int(v)


def _flag(name: str, v) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise DatasetError([(name, f"{name} must be True or False, got {v!r} ({type(v).__name__})")])
    return bool(v)


def _dist() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class StreamingDataset(torch.utils.data.IterableDataset):
    """One split of a spec, sampled and rendered on the fly.

    Each item is a dict, as :class:`mosaic.torch_data.MosaicDataset` gives:
        ``image``: uint8 tensor ``[3, H, W]``;
        ``targets``: int64 tensor ``[C]``, each concept's value index in its domain (order of
        ``self.concepts``; -1 where the scene shows no value; decode with ``self.decode``);
        ``index``: int, the sample's index in the split; ``caption``: str; ``held_out``: bool;
        ``mask``: uint8 ``[H, W]`` instance mask when ``masks``.

    Args:
        spec: a :class:`~mosaic.spec.Spec`, a spec YAML path, a spec dict, or a generated dataset
            (its directory or manifest) standing for its spec.
        split: ``train``, ``val`` (or ``validation``), ``test``, ``test_id`` or ``test_ood``.
        shuffle: visit the split's indices in a seeded permutation per epoch (:meth:`set_epoch`);
            the quota plans already spread combinations over the indices, so plain order is
            already mixed.
        rank, world_size: this process's place among data-parallel ranks (default: from
            ``torch.distributed`` when initialised, else 0 of 1).
        start, stop: a range of the split's indices (default: all of it).
        masks: also render instance masks.
        renderer: renderer backend name.
    Raises:
        DatasetError: a split the spec does not have (the message lists the splits it has), or an
            empty range; a dataset given for its spec that fails its quick check
            (:func:`mosaic.verify.check_before_read`, e.g. a spec edited after generation).
    """

    def __init__(self, spec, split: str = "train", *, shuffle: bool = False, rank: int | None = None,
                 world_size: int | None = None, start: int = 0, stop: int | None = None, masks: bool = False,
                 renderer: str = "pillow"):
        super().__init__()
        spec = _spec_of(spec)
        sizes = spec.split_sizes()
        name = mosaic_split(split)
        if not isinstance(name, str) or name not in sizes:
            have = ", ".join(f"{s} ({n})" for s, n in sizes.items())
            raise DatasetError([("split", f"spec {spec.name!r} has no split {split!r}; its splits: {have}"
                                 + (" (val is also called validation)" if "val" in sizes else ""))])
        n = sizes[name]
        start = _whole("start", start)
        stop = n if stop is None else _whole("stop", stop)
        if not 0 <= start <= stop <= n:
            raise DatasetError([("stop", f"range {start}..{stop} is outside split {name!r} (0..{n})")])
        if start == stop:
            raise DatasetError([("stop", f"range {start}..{stop} of split {name!r} is empty" + (
                f" (the spec's splits.{name} is 0): give the split samples" if n == 0 else
                f": give stop > start (the split holds indices 0..{n - 1})"))])
        dr, dw = _dist()
        self.rank = dr if rank is None else _whole("rank", rank)
        self.world_size = dw if world_size is None else _whole("world_size", world_size)
        if self.world_size < 1:
            raise DatasetError([("world_size", f"world_size {self.world_size} is not a number of ranks: give 1 or more")])
        if not 0 <= self.rank < self.world_size:
            raise DatasetError([("rank", f"rank {self.rank} is not in 0..{self.world_size - 1}")])
        self.spec_data = spec.to_dict()
        self.seed = spec.seed
        self.split = name
        self.start, self.stop = start, stop
        self.shuffle = _flag("shuffle", shuffle)
        self.epoch = 0
        self.masks = _flag("masks", masks)
        if not isinstance(renderer, str) or renderer not in BACKENDS or (renderer == "shaded" and spec.image.renderer != "shaded"):
            raise DatasetError([("renderer", f"{str(renderer)[:40]!r} cannot draw spec {spec.name!r}: give one of "
                                             f"{', '.join(b for b in BACKENDS if b != 'shaded')} (a spec with image.renderer: shaded "
                                             "is drawn shaded whatever is given)")])
        self.renderer_name = renderer
        self.concepts = list(spec.concepts)
        self.domains = {c: spec.domain(c) for c in self.concepts}
        self.image_size = spec.image.size
        self._spec = spec
        self._renderer = None

    # -- pickling into DataLoader workers: the spec travels as data and is parsed once there
    def __getstate__(self):
        d = dict(self.__dict__)
        d["_spec"] = None
        d["_renderer"] = None
        return d

    @property
    def spec(self) -> Spec:
        if self._spec is None:
            self._spec = spec_from_data(self.spec_data)
        return self._spec

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch's permutation (with ``shuffle``); call on every rank before iterating."""
        self.epoch = _whole("epoch", epoch)

    def order(self) -> np.ndarray:
        """The epoch's index order over ``start..stop-1`` (int64)."""
        idx = np.arange(self.start, self.stop, dtype=np.int64)
        if self.shuffle:
            rng = np.random.default_rng(np.random.SeedSequence(entropy=self.seed, spawn_key=(3000, self.epoch)))
            idx = idx[rng.permutation(len(idx))]
        return idx

    def shard(self, worker: int = 0, num_workers: int = 1) -> np.ndarray:
        """The indices one DataLoader worker of this rank yields, in order: this rank's positions
        (``rank::world_size``, the ``len()`` items), split among its workers (``worker::num_workers``)."""
        return self.order()[self.rank :: self.world_size][worker :: num_workers]

    def __len__(self) -> int:
        """Items this rank yields per epoch (all its workers together)."""
        n = self.stop - self.start
        return len(range(self.rank, n, self.world_size))

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in self.shard(worker, num_workers):
            yield self[int(i)]

    def __getitem__(self, index: int) -> dict:
        """Sample ``index`` of the split (any index, whatever this rank's shard)."""
        index = item_index(index, self.spec.split_sizes()[self.split], f"split {self.split!r}")
        if self._renderer is None:
            self._renderer = get_renderer(backend_of(self.spec, self.renderer_name), supersample=self.spec.image.supersample)
        rec, scene = sample_record(self.spec, self.split, index)
        if rec["held_out"] != (self.split == "test_ood") and self.spec.holdout is not None:
            raise DatasetError(f"sample {self.split}/{index} shows combination {rec['combination']} "
                               f"({'held out' if rec['held_out'] else 'seen'}) in split {self.split}: this is a bug in mosaic, please report it")
        image, mask = self._renderer.render_one(scene)
        lab = labels_of(self.spec, rec["concepts"])
        item = {
            "image": torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))),
            "targets": torch.tensor([lab[c] for c in self.concepts], dtype=torch.long),
            "index": int(index),
            "caption": rec["caption"],
            "held_out": bool(rec["held_out"]),
        }
        if self.masks:
            item["mask"] = torch.from_numpy(np.ascontiguousarray(mask))
        return item

    def decode(self, targets) -> dict:
        """Concept -> value of a ``targets`` vector (``[C]``; -1 gives None)."""
        t = [int(x) for x in (targets.tolist() if hasattr(targets, "tolist") else targets)]
        return {c: (self.domains[c][k] if k >= 0 else None) for c, k in zip(self.concepts, t)}


# ----------------------------------------------------------------------------------------------
# the lab's streamed training data
# ----------------------------------------------------------------------------------------------

class _Items(torch.utils.data.Dataset):
    """Map-style view of a split for a DataLoader: item ``i`` is ``(image uint8 [3,H,W] or None, record)``."""

    def __init__(self, stream: StreamingDataset, render: bool = True):
        self.stream = stream
        self.render = render

    def __len__(self) -> int:
        return self.stream.stop - self.stream.start

    def __getitem__(self, i: int):
        s = self.stream
        if s._renderer is None:
            s._renderer = get_renderer(backend_of(s.spec, s.renderer_name), supersample=s.spec.image.supersample)
        rec, scene = sample_record(s.spec, s.split, int(i))
        if rec["held_out"] != (s.split == "test_ood") and s.spec.holdout is not None:
            raise DatasetError(f"sample {s.split}/{i} shows a {'held-out' if rec['held_out'] else 'seen'} combination "
                               f"{rec['combination']} in split {s.split}: this is a bug in mosaic, please report it")
        if not self.render:
            return None, rec
        image, _ = s._renderer.render_one(scene)
        return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1))), rec


class _Collate:
    def __init__(self, encode, image_key: str | None):
        self.encode, self.image_key = encode, image_key

    def __call__(self, items):
        out = self.encode([r for _, r in items])
        if self.image_key is not None:
            out = {self.image_key: torch.stack([im for im, _ in items]), **out}
        return out


class StreamSource:
    """Training data for the lab's loop, sampled and rendered on the fly (``dataset.stream: true``).

    ``len(source)`` examples (the spec's split size); :meth:`batches` yields the batch of each
    micro-step of a :class:`mosaic.lab.data.BatchPlan` in order, rendered by ``workers`` DataLoader
    processes ahead of the training step. Batches are a pure function of ``(plan, micro-step)``, so
    a resumed run sees the batches an uninterrupted one would have seen, as with data on disk.

    Args:
        spec: the dataset's spec (or anything :class:`StreamingDataset` takes).
        split: the split to stream (``train``).
        encode: ``encode(records) -> {name: tensor [B, ...]}``, the task's non-image inputs of a
            batch of records (e.g. condition ids, targets); runs in the DataLoader workers.
        workers: DataLoader worker processes (0: render in this process).
        image_key: the batch key of the images (uint8 ``[B, 3, H, W]``), or None to render nothing
            (inputs built from the records alone, e.g. scene tokens).
    Attributes:
        concepts: the spec's concepts, in order.
    """

    def __init__(self, spec, split: str, encode, workers: int = 2, image_key: str | None = "image"):
        self.stream = StreamingDataset(spec, split)
        self.encode = encode
        self.workers = worker_processes(workers) if int(workers) > 0 else 0  # never more DataLoader processes than CPUs
        self.image_key = image_key
        self.concepts = list(self.stream.concepts)

    def __len__(self) -> int:
        return self.stream.stop - self.stream.start

    def batches(self, plan, first: int, stop: int):
        """The batches (``{image_key: uint8 [B,3,H,W], **encode(records)}``) of micro-steps
        ``first..stop-1`` of ``plan`` (an object with ``indices(m) -> int64 [B]``), in order."""

        class _Steps(torch.utils.data.Sampler):
            def __len__(self_inner):
                return max(0, stop - first)

            def __iter__(self_inner):
                for m in range(first, stop):
                    yield plan.indices(m).tolist()

        dl = torch.utils.data.DataLoader(_Items(self.stream, self.image_key is not None), batch_sampler=_Steps(),
                                         num_workers=self.workers, collate_fn=_Collate(self.encode, self.image_key),
                                         prefetch_factor=4 if self.workers else None,
                                         persistent_workers=False)
        yield from dl
