"""Converting a complete dataset between its two storage forms, imagefolder and Parquet (``mosaic export``).

Images are copied as the same PNG bytes and labels as the same values; the source is checked
against its recorded digests first (damage is named, never copied into a dataset whose fresh digests
would pass ``mosaic verify``), and the new dataset gets its leak check, digests and card as
``mosaic generate`` writes them. Sits above :mod:`mosaic.parquet` (its shard writer) and
:mod:`mosaic.verify`.
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from mosaic.checksums import bounded_lines, write_checksums
from mosaic.errors import DatasetError
from mosaic.executors import LocalExecutor
from mosaic.hf import write_card
from mosaic.io import atomic_text_writer, read_json
from mosaic.locks import FolderLock
from mosaic.manifest_io import write_manifest
from mosaic.parquet import (
    DEFAULT_SHARD_BYTES, ESTIMATE_SAMPLES, check_format, finalize_parquet, iter_records, own_parquet_folders, parquet_manifest,
    plan_rows_per_shard, row_of, row_schema, storage_of, write_shards,
)
from mosaic.dataset import dataset_out_check
from mosaic.dataset_folder import holds_files, remove_dataset
from mosaic.records import MANIFEST, base_manifest, read_manifest, replaceable_or_raise, spec_from_data, spec_of, unfinished_hint
from mosaic.spec import Spec
from mosaic.tally import Tally
from mosaic.verify import fix_of, verify as verify_dataset


def _imagefolder_rows(spec: Spec, src: Path, split: str, masks: bool) -> Iterator[dict]:
    path = src / split / "metadata.jsonl"
    if not path.is_file():
        raise DatasetError(f"no split {split!r} in {src}: {path} is missing")
    with path.open("rb") as f:
        for line in bounded_lines(f):  # checked by the quick check before; a line grown since is not held whole
            if not line.strip():
                continue
            rec = json.loads(line)
            image = (src / split / rec["file_name"]).read_bytes()
            mask = (src / split / rec["mask_file_name"]).read_bytes() if masks else None
            yield row_of(spec, rec, image, mask)


def export(src: str | Path, format: str, dst: str | Path | None = None, shard_bytes: int = DEFAULT_SHARD_BYTES,
           overwrite: bool = False, on_progress: Callable[[int, int], None] | None = None) -> dict:
    """Convert a complete dataset between imagefolder and Parquet (see :func:`_export`), holding
    the output folder's lock and the source's (:class:`mosaic.locks.FolderLock`, never waiting): a
    second export or generation into the same folder, or a ``generate --overwrite`` of the source,
    stops, naming the process that holds it."""
    check_format(format)
    out = Path(dst) if dst is not None else Path(src).with_name(f"{Path(src).name}-{format}")
    dataset_out_check(out, "--out")  # never a folder inside another dataset (the CLI's --out check, for the Python API too)
    # the source is locked too (never waiting): a `generate --overwrite` of it stops while it is read, and an export
    # never starts while one runs (it would copy a half-replaced source)
    with FolderLock(src, DatasetError, "dataset (the export's source)", wait=False, reader=True), \
            FolderLock(out, DatasetError, "dataset", wait=False):
        return _export(src, format, out, shard_bytes, overwrite, on_progress)


def _export(src: str | Path, format: str, dst: Path, shard_bytes: int, overwrite: bool,
            on_progress: Callable[[int, int], None] | None) -> dict:
    """Convert a complete dataset between imagefolder and Parquet; images are copied as the same
    PNG bytes and labels as the same values.

    Args:
        src: a complete mosaic dataset (either form).
        format: ``parquet`` or ``imagefolder`` (the form to write).
        dst: output directory (:func:`export` defaults it to ``<src>-<format>``); must be new or
            empty unless ``overwrite``.
    Returns:
        The manifest of ``dst``.
    Raises:
        DatasetError: unknown format, ``src`` incomplete or already in that form, ``dst`` not empty.
    """
    src = Path(src)
    man = read_manifest(src)
    if man.get("status") != "complete":
        raise DatasetError(f"{src} is incomplete (status {man.get('status')!r}): {unfinished_hint(src, man)}, then export it")
    have = storage_of(man)
    if have == format:
        raise DatasetError([("--format", f"{src} is already {format}: choose the other form ({'imagefolder' if format == 'parquet' else 'parquet'})")])
    rs, rd = src.resolve(), dst.resolve()
    if rs == rd or rs in rd.parents or rd in rs.parents:  # checked before anything is deleted: the source is only read
        raise DatasetError([("--out", f"{dst} is {'the source' if rs == rd else 'inside the source' if rs in rd.parents else 'a folder holding the source'} "
                             f"{src}: give a folder outside it (default: {src.name}-{format} beside it)")])
    if dst.exists() or dst.is_symlink():
        if not dst.is_dir() or dst.is_symlink() or (holds_files(dst) and not overwrite and not _interrupted_export_of(dst, src)):
            raise DatasetError(f"--out {dst} exists and is not empty: give a new directory (or --overwrite to replace a mosaic dataset)")
        replaceable_or_raise(dst)
    # the whole source is checked against its recorded digests first: damage is named here, never copied into
    # a new dataset whose fresh digests would then pass `mosaic verify`
    report = verify_dataset(src, deep=True)
    if not report.ok:
        shown = report.problems()[:5]
        more = [("", f"... and {len(report.damage) - 5} more")] if len(report.damage) > 5 else []
        raise DatasetError([("", f"{src} is damaged, and export copies the source as it is:")] + shown + more
                           + [("fix", fix_of(report, src) + ", then export")], source=str(src))
    spec = spec_of(src)
    if dst.exists():
        remove_dataset(dst)  # the manifest last: interrupted, the folder is still a dataset that --overwrite replaces
    masks = bool(man.get("masks"))
    renderer = man.get("renderer", {}).get("name", "pillow")
    if format == "parquet":
        plan = {}
        for split, v in man["splits"].items():
            if v["count"]:
                rows = list(islice(_imagefolder_rows(spec, src, split, masks), ESTIMATE_SAMPLES))
                plan[split] = plan_rows_per_shard(pa.Table.from_pylist(rows, schema=row_schema(spec, masks)), shard_bytes)
        dst.mkdir(parents=True, exist_ok=True)
        own_parquet_folders(dst)
        write_manifest(dst / MANIFEST, {**parquet_manifest(spec, masks, renderer, "incomplete", plan, shard_bytes),
                                        "export_source": str(src.resolve())})  # named by verify if this export is interrupted
        spec_data = spec.to_dict()
        write_shards(spec, dst, plan, masks, _table_of_imagefolder_cached(),
                     lambda s, a, b: (spec_data, str(src), s, a, b, masks), LocalExecutor(1), on_progress)
        return finalize_parquet(spec, dst, masks, renderer, plan, shard_bytes)
    return _parquet_to_imagefolder(spec, src, dst, man, masks, renderer, on_progress)


def _interrupted_export_of(dst: Path, src: Path) -> bool:
    """Whether ``dst`` is an unfinished export of ``src`` (its manifest not complete, its
    ``export_source`` this source): the same command, rerun after an interruption or a full disk,
    replaces it, as the error of that interruption says. Anything else in a non-empty ``dst`` is
    refused unless ``--overwrite``."""
    try:
        man = read_json(dst / MANIFEST)
    except (OSError, ValueError):
        return False
    return isinstance(man, dict) and man.get("status") != "complete" and man.get("export_source") == str(src.resolve())


def _table_of_imagefolder_cached():
    """A row-group maker over imagefolder splits that reads each split's metadata once, in order (export writes
    row groups in order, so a running reader per split avoids re-reading the file per group)."""
    state: dict = {}

    def make(spec_data, src, split, start, stop, masks):
        spec = spec_from_data(spec_data)
        key = (src, split)
        if key not in state or state[key][1] != start:
            it = _imagefolder_rows(spec, Path(src), split, masks)
            for _ in islice(it, start):
                pass
            state[key] = [it, start]
        it = state[key][0]
        rows = [next(it) for _ in range(stop - start)]
        state[key][1] = stop
        return pa.Table.from_pylist(rows, schema=row_schema(spec, masks))

    return make


def _records_of(path: Path) -> Iterator[dict]:
    """The records of a ``metadata.jsonl``, one line at a time."""
    with open(path, "rb") as f:
        for line in bounded_lines(f):
            yield json.loads(line)


def _own_name(src: Path, split: str, row: dict, image: dict, sub: str) -> str:
    """The file name a Parquet row's image (or mask) gets in an imagefolder export: always
    ``<sub>/NNNNNN.png`` of the row's index. A row whose stored ``path`` names anything else (``../x``,
    an absolute path, another index) is not mosaic's: refused (DatasetError), never written there."""
    index = row.get("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise DatasetError(f"{src}: a row of split {split!r} has index {index!r}, not a sample index: the shard is not mosaic's; regenerate the dataset")
    want = f"{sub}/{index:06d}.png"
    if image.get("path") not in (None, want) or not isinstance(image.get("bytes"), bytes):
        raise DatasetError(f"{src}: row {index} of split {split!r} stores its {sub[:-1]} as {image.get('path')!r}, not {want!r} "
                           f"(or without PNG bytes): the shard is not mosaic's; regenerate the dataset")
    return want


def _parquet_to_imagefolder(spec: Spec, src: Path, dst: Path, man: dict, masks: bool, renderer: str, on_progress) -> dict:
    total = sum(v["count"] for v in man["splits"].values())
    done = 0
    dst.mkdir(parents=True, exist_ok=True)  # kept empty by remove_dataset (a mount point)
    out_man = base_manifest(spec, masks, renderer, "incomplete", "imagefolder")
    write_manifest(dst / MANIFEST, {**out_man, "export_source": str(src.resolve())})  # named by verify if this export is interrupted
    tally = Tally(spec)
    for split, v in man["splits"].items():
        tally.begin(split)
        (dst / split / "images").mkdir(parents=True)
        if masks:
            (dst / split / "masks").mkdir(parents=True)
        with atomic_text_writer(dst / split / "metadata.jsonl") as f:
            for row in iter_records(src, split, manifest=man):
                image = row.pop("image")
                mask = row.pop("mask", None)
                fn = _own_name(src, split, row, image, "images")  # never a path out of the split folder
                (dst / split / fn).write_bytes(image["bytes"])
                rec = {"file_name": fn, **row}
                if mask is not None:
                    mfn = _own_name(src, split, row, mask, "masks")
                    (dst / split / mfn).write_bytes(mask["bytes"])
                    rec["mask_file_name"] = mfn
                f.write(json.dumps(rec, sort_keys=True) + "\n")
                tally.add(split, row["index"], row["concepts"])
                done += 1
                if on_progress and done % 1024 == 0:
                    on_progress(done, total)
    out_man["splits"] = {s: {"count": v["count"]} for s, v in man["splits"].items()}
    out_man["leak_check"] = tally.report()
    out_man["status"] = "complete" if out_man["leak_check"]["passed"] else "failed_leak_check"
    if out_man["status"] == "complete":  # every file read back and digested, as `mosaic generate` does (mosaic verify checks them)
        order = [s for s in spec.split_sizes() if s in man["splits"]] + [s for s in man["splits"] if s not in spec.split_sizes()]
        out_man["checksums"] = write_checksums(dst, {s: _records_of(dst / s / "metadata.jsonl") for s in order})  # generate's order
    write_card(dst, spec, out_man, "imagefolder")  # the card first: a failure here leaves the export unfinished
    write_manifest(dst / MANIFEST, out_man)
    if on_progress:
        on_progress(total, total)
    return out_man
