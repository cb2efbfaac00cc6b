"""What a folder mosaic wrote is, from the files it holds: the hint of an error given the wrong kind.

A new user gives a run folder to ``verify``, a dataset to ``evaluate`` or a run to ``report``; the
error said what was missing and suggested making the expected kind *there* (``mosaic generate SPEC
--out RUN``, ``mosaic sweep ... --out RUN``), which would write into the other folder.
:func:`kind_hint` names what the folder is and where the expected input lies instead. Only file
names are looked at (nothing is read).
"""

from __future__ import annotations

import os
from pathlib import Path

#: (marker files, what the folder is, the fix per expected kind: "dataset", "images", "sweep")
_KINDS = (
    (("manifest.json",), "a mosaic dataset",
     {"images": lambda p: _split_fix(p), "sweep": "`mosaic verify {p}` checks a dataset; "
      "`mosaic report` takes the folder `mosaic sweep` wrote"}),
    (("run.json",), "a training run folder (`mosaic train` wrote it)",
     {"dataset": "a run's dataset is the folder its dataset.json names", "images": lambda p: _run_images_fix(p), "sweep": "a run's results are its metrics.json; `mosaic report` takes "
      "the folder `mosaic sweep` wrote"}),
    (("sweep.yaml",), "a sweep folder (`mosaic sweep` wrote it)",
     {"dataset": "its trials' datasets are named in trials/*/trial.json", "images": "evaluate a samples folder of one of its "
      "trials ({p}/trials/ID/run/samples/NAME)"}),
    (("sampling.json",), "a samples folder (`mosaic sample` wrote it)",
     {"dataset": "the dataset it was sampled for is named in its run's dataset.json", "sweep": "`mosaic report` takes the folder `mosaic "
      "sweep` wrote"}),
)


def kind_hint(folder: str | Path, expected: str) -> str | None:
    """``"<folder> is <what it is>: <the fix>"`` when ``folder`` holds the marker of another kind of
    mosaic folder than ``expected`` (``"dataset"``, ``"images"`` or ``"sweep"``), else None."""
    p = Path(folder)
    for markers, what, fixes in _KINDS:
        if expected in fixes and all((p / m).is_file() for m in markers):
            fix = fixes[expected]
            return f"{p} is {what}, not {_EXPECTED[expected]}: {fix(p) if callable(fix) else fix.format(p=p)}"
    return None


def transformer_run(p: Path) -> bool:
    """Whether a run folder holds a transformer's weights (``model.safetensors``, no diffusion ``conditioner``), by file
    names only: such a run makes no images, its results are its ``metrics.json``."""
    return any((p / w / "model.safetensors").is_file() and not (p / w / "conditioner.safetensors").exists() for w in ("best", "final"))


def _run_images_fix(p: Path) -> str:
    """The fix for a run folder given where images are wanted: a diffusion run's samples folder; a transformer run makes
    none (`mosaic sample` refuses it: it was advised, round 32)."""
    if transformer_run(p):
        return f"a transformer run makes no images: its results are its metrics.json ({p / 'metrics.json'})"
    return f"evaluate a samples folder of it ({p}/samples/NAME; `mosaic sample {p}` makes one)"


def _split_fix(p: Path) -> str:
    """The fix for a dataset given where images are wanted: one of its split folders that exists; a dataset whose
    splits are Parquet shards has none (it advised ``{p}/test_ood``, a folder a Parquet dataset lacks, attack round 27)."""
    splits = sorted(d.name for d in p.iterdir() if (d / "metadata.jsonl").is_file()) if p.is_dir() else []
    if splits or not any((p / "data").glob("*.parquet")):
        split = "test_ood" if "test_ood" in splits or not splits else splits[0]
        return f"give one of its splits, e.g. {p / split} (and --spec {p})"
    return (f"its splits are Parquet shards, not image folders: export it first (`mosaic export {p} --format imagefolder "
            f"--out NEW`), then give one of NEW's splits, e.g. NEW/test_ood (and --spec NEW)")


_EXPECTED = {"dataset": "a dataset", "images": "a folder of images to evaluate", "sweep": "a sweep folder"}


#: the files that mark a folder mosaic wrote (a run, a samples folder, a sweep, a sweep's trial)
OWNED_MARKERS = ("run.json", "sampling.json", "sweep.yaml", "trial.json")


def owned_folder(folder: str | Path) -> Path | None:
    """The nearest of ``folder`` (links resolved) and its ancestors that holds a marker of a folder mosaic
    wrote (:data:`OWNED_MARKERS`), or None."""
    p = Path(os.path.realpath(os.path.abspath(folder)))
    for f in (p, *p.parents):
        if any((f / m).is_file() for m in OWNED_MARKERS):
            return f
    return None
