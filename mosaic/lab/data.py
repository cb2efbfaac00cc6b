"""Training data for the lab: resolve a dataset (existing or generated on demand), keep splits in
memory as uint8, and plan batches as a pure function of ``(seed, step, process)``.

The loader is index arithmetic on tensors that already sit on the training device (a 10k-image
64 px split is 123 MB of uint8), so it is never the bottleneck, and because the batch of every
step is a function of the step number, a resumed run sees exactly the batches an uninterrupted
run would have seen.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from mosaic.dataset import dataset_out_check, generate as gen, read_manifest
from mosaic.errors import DatasetError
from mosaic.lab.config import DatasetSection
from mosaic.overrides import ParsedOverride
from mosaic.spec import load_spec
from mosaic.io import read_bounded
from mosaic.verify import MANIFEST_LIMIT, check_before_read
from mosaic.records import manifest_hint


def dataset_dir_for(spec) -> str:
    """Folder name of a dataset generated on demand: ``<spec name>-<first 12 of fingerprint>``."""
    return f"{spec.name}-{spec.fingerprint()[:12]}"


def load_dataset_spec(section: DatasetSection):
    """The spec of ``section.spec`` with ``section.overrides`` applied (:func:`override_items`, set
    by their path parts: a key below a section, such as a colour named ``dark.red``, is one key).

    Raises:
        SpecError: missing spec file or invalid spec (after overrides).
    """
    overrides = [ParsedOverride(parts, v) for parts, v in override_items(section.overrides)]
    return load_spec(section.spec, overrides)


def override_items(overrides: dict, prefix: tuple = ()):
    """``(path parts, value)`` pairs of ``dataset.overrides``. A top-level key is a dotted path: a
    dotted key sets exactly that field (``holdout.rule.n: 3``; a mapping given there is the value,
    replacing the field whole, e.g. ``holdout.rule: {kind: random, fraction: 0.2}``); a mapping under a
    plain key is merged field by field (``holdout: {rule: {n: 3}}`` sets ``holdout.rule.n`` only, the
    rest of ``holdout`` stays), except a mapping that names a ``kind`` (a holdout rule, a
    distribution): it replaces the field whole, because the old mapping's other fields belong to the
    old kind (``holdout: {rule: {kind: diagonal, n: 1}}`` on a coverage rule with ``k`` drops ``k``).
    A key below the top level is one key, never split: ``colors: {dark.red: [120, 0, 0]}`` names the
    colour ``dark.red`` (it was flattened to ``colors.dark.red`` and set as ``colors.dark``)."""
    for k, v in overrides.items():
        parts = prefix + ((str(k),) if prefix else tuple(str(k).split(".")))
        if isinstance(v, dict) and v and (prefix or "." not in str(k)) and "kind" not in v:
            yield from override_items(v, parts)
        else:
            yield parts, v


def resolve_dataset(section: DatasetSection, generate: bool = True, on_progress=None) -> Path:
    """The dataset directory a config names, generating it from the spec when needed.

    Args:
        section: the config's ``dataset`` section.
        generate: with a spec, generate (or finish) the dataset; False only computes the path.
        on_progress: ``on_progress(done, total)`` during generation.
    Returns:
        The dataset root (a complete mosaic dataset when ``generate``).
    Raises:
        DatasetError: ``dataset.path`` is missing or incomplete; the generated folder holds another spec.
        SpecError, LayoutError: from the spec and its generation.
    """
    if section.path is not None:
        root = Path(section.path)
        if not (root / "manifest.json").is_file():
            if (hint := manifest_hint(root)) is not None:  # a split folder, a run: never "generate a dataset there"
                raise DatasetError([("dataset.path", hint)])
            if root.exists() and not root.is_dir():  # a file, a FIFO, a device: `generate --out` could not make a dataset there
                raise DatasetError([("dataset.path", f"{str(root)!r} is not a folder (a file or another kind of entry stands there): "
                                     "give the folder of a dataset made by `mosaic generate SPEC --out DIR`")])
            raise DatasetError(
                f"dataset.path {str(root)!r}: no mosaic dataset there (manifest.json is missing). Generate it with "
                f"`mosaic generate SPEC --out {root}`, or set dataset.spec to generate one on demand"
            )
        if read_manifest(root).get("status") != "complete":
            raise DatasetError(f"dataset.path {str(root)!r} is incomplete (generation was interrupted): rerun `mosaic generate` on it")
        if generate:  # the quick check before training on it: damage is named, never trained on
            try:
                check_before_read(root)
            except DatasetError as e:
                raise DatasetError([("dataset.path", f"{str(root)!r} (the config's dataset.path)")] + e.problems, source=str(root)) from None
        return root
    spec = load_dataset_spec(section)
    if section.stream:  # the train split is streamed (mosaic.stream): write the others only
        root = Path(section.root) / (dataset_dir_for(spec) + "-stream")
        dataset_out_check(root, "dataset.root")  # a dry run names a dataset.root inside a dataset too, before anything is written
        if generate:
            gen(spec, root, workers=section.workers, on_progress=on_progress, splits=[s for s in spec.split_sizes() if s != "train"])
        return root
    root = Path(section.root) / dataset_dir_for(spec)
    dataset_out_check(root, "dataset.root")
    if generate:
        gen(spec, root, workers=section.workers, on_progress=on_progress)
    return root


def manifest_fingerprint(root: str | Path) -> dict:
    """What identifies a dataset for a run: spec fingerprint, name, per-split counts and a hash of
    the manifest file (so a regenerated or edited dataset is noticed)."""
    root = Path(root)
    man = read_manifest(root)
    return {
        "path": str(root.resolve()),
        "name": man.get("name"),
        "fingerprint": man.get("fingerprint"),
        "splits": {k: v.get("count") for k, v in man.get("splits", {}).items()},
        "manifest_sha256": hashlib.sha256(read_bounded(root / "manifest.json", MANIFEST_LIMIT)).hexdigest(),
    }


def split_names(root: str | Path) -> list[str]:
    """Split names of a dataset, in manifest order."""
    return list(read_manifest(root).get("splits", {}))


def evaluation_splits(root: str | Path) -> list[str]:
    """The test splits of a dataset: ``test_id`` and ``test_ood`` with a holdout, else ``test``."""
    names = split_names(root)
    tests = [s for s in ("test_id", "test_ood", "test") if s in names]
    if not tests:
        raise DatasetError(f"dataset {root} has no test split (splits: {', '.join(names)}): generate it with test splits")
    return tests


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 ``[B, 3, H, W]`` (0-255) -> float32 ``[B, 3, H, W]`` in [-1, 1]."""
    return images.float().div_(127.5).sub_(1.0)


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """float ``[B, 3, H, W]`` in [-1, 1] -> uint8 numpy ``[B, H, W, 3]`` (clipped, rounded)."""
    return ((x.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()


def step_seed(seed: int, step: int, rank: int) -> int:
    """A 63-bit seed that is a pure function of ``(seed, step, rank)`` (numpy ``SeedSequence``)."""
    return int(np.random.SeedSequence([seed, step, rank]).generate_state(2, np.uint64)[0] >> np.uint64(1))


class BatchPlan:
    """Which training examples each process takes at each micro-step.

    Every epoch is a seeded permutation of the ``n`` examples (seed ``(seed, epoch)``); micro-step
    ``m`` takes the ``m``-th block of ``batch_size * processes`` indices of it (the last partial
    block of an epoch is dropped) and process ``rank`` takes its ``batch_size`` slice. Pure in
    ``(seed, m, rank)``: resuming at any step reproduces the same batches.

    Raises:
        DatasetError: the split holds fewer examples than one global batch.
    """

    def __init__(self, n: int, batch_size: int, processes: int, rank: int, seed: int):
        self.n, self.batch_size, self.processes, self.rank, self.seed = n, batch_size, processes, rank, seed
        self.global_batch = batch_size * processes
        if n < self.global_batch:
            raise DatasetError(
                f"the train split holds {n} examples, fewer than one batch of training.batch_size {batch_size} x "
                f"{processes} processes = {self.global_batch}: lower training.batch_size or generate more train samples"
            )
        self.per_epoch = n // self.global_batch
        self._epoch, self._perm = -1, None

    def indices(self, micro_step: int) -> torch.Tensor:
        """int64 ``[batch_size]`` indices of this process's examples at ``micro_step``."""
        epoch, block = divmod(micro_step, self.per_epoch)
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(step_seed(self.seed, epoch, 1_000_003))
            self._perm, self._epoch = torch.randperm(self.n, generator=g), epoch
        start = block * self.global_batch + self.rank * self.batch_size
        return self._perm[start:start + self.batch_size]
