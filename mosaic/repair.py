"""Repairing a dataset byte-identically: what ``mosaic verify --repair`` and a rerun of ``mosaic generate`` do.

:func:`repair` regenerates, from ``(spec, split, index)``, exactly the samples (imagefolder) that
:func:`mosaic.verify.verify` found damaged, with the generator's own record and PNG functions, and
checks the rewritten bytes against the recorded digests; :func:`mark_shards_for_regeneration` and
:func:`check_repaired_shards` do the same for Parquet shards, which
:func:`mosaic.parquet.generate_parquet` writes again (it resumes). Sits above :mod:`mosaic.verify`
and below :mod:`mosaic.dataset` and :mod:`mosaic.parquet`; :func:`mosaic.dataset.repair_dataset`
chooses between the two storage forms.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from mosaic.checksums import CHECKSUMS
from mosaic.errors import DatasetError
from mosaic.hf import write_card
from mosaic.io import atomic_write
from mosaic.manifest_io import write_manifest
from mosaic.records import package_versions, png_bytes, sample_record, spec_from_data
from mosaic.verify import MANIFEST, VerifyReport, read_checksums, read_manifest_checked, sha256_file, verify
from renderers import backend_of, get_renderer


def make_room(root: Path, rel: str, error: type[Exception] = DatasetError) -> Path:
    """Make ``root/rel`` writable as a file before a repair writes it: a file (or dangling link)
    standing where one of its folders belongs is removed (that folder is part of the dataset: the
    file is damage), and so is an empty folder standing where the file belongs. Returns the path.

    Raises:
        error: a folder that holds files stands where the file belongs (never deleted: move it away).
    """
    node = root
    for part in Path(rel).parts[:-1]:
        node = node / part
        if node.is_symlink() or node.exists() and not node.is_dir():  # a link is replaced, never written through
            node.unlink()
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not target.is_symlink():
        try:
            target.rmdir()
        except OSError:
            raise error([(rel, f"a folder that holds files stands where this file of the dataset belongs: move {target} "
                          "away (repair never deletes a folder with content), then rerun")], source=str(root)) from None
    return target


def rewrite_card(root: str | Path, man: dict) -> None:
    """Write the card of ``man`` again (what --repair does for a ``card`` damage; atomic, a link at
    ``README.md`` is replaced, never written through). A folder standing at ``README.md`` is treated as one
    standing at a sample's file (:func:`make_room`), since the card is the dataset's own file and its rewrite the
    documented repair: an empty folder is removed, one holding files is refused by name (never deleted)."""
    make_room(Path(root), "README.md")
    write_card(root, spec_from_data(man["spec"]), man, man.get("storage", "imagefolder"))




def _mismatch_cause(man: dict) -> str:
    """Why bytes regenerated from the spec can differ from a recorded digest, for the manifest
    ``man``: another mosaic or library made the dataset (its recorded versions differ from this
    one's), or, with the same versions, the file was rewritten together with its digests."""
    versions = package_versions()
    if man.get("versions") == versions:
        return ("the versions that determine the bytes are this mosaic's, so the file and its recorded digest were rewritten "
                "together (`mosaic verify DIR --against-spec` lists every such file); it was left as it is: regenerate "
                "the dataset with --overwrite")
    return (f"this mosaic (versions {versions}) differs from the one that made the dataset ({man.get('versions')}); it was left "
            "as it is: regenerate the dataset with --overwrite")


def expected_sample(spec, split: str, index: int, masks: bool, renderer: str = "pillow", sample_fn=None,
                    png_fn=None) -> tuple[dict, bytes, bytes | None]:
    """The record, image PNG bytes and mask PNG bytes (or None) the generator writes for one sample.

    ``sample_fn`` / ``png_fn``: the record and PNG functions of the generator that wrote the
    dataset (default :func:`mosaic.records.sample_record` / :func:`mosaic.records.png_bytes`), so
    the bytes are identical."""
    sample_fn, png_fn = sample_fn or sample_record, png_fn or png_bytes
    rec, scene = sample_fn(spec, split, index)
    image, mask = get_renderer(backend_of(spec, renderer), supersample=spec.image.supersample).render_one(scene)
    if masks:
        rec["mask_file_name"] = f"masks/{index:06d}.png"
    return rec, png_fn(image), png_fn(mask) if masks else None


def repair(root: str | Path, report: VerifyReport, sample_fn=None, png_fn=None,
           on_progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Regenerate, byte-identically, what ``report`` found damaged in an imagefolder dataset, then
    check again (same depth).

    Each damaged image or mask is rendered again from ``(spec, split, index)``; a damaged
    ``metadata.jsonl`` is rewritten from the records the spec produces. ``sample_fn`` / ``png_fn``:
    as :func:`expected_sample`. (Parquet: :func:`mark_shards_for_regeneration`, then the generator
    resumes.)

    Raises:
        DatasetError: the dataset cannot be repaired (incomplete, digests missing or altered, or the
            rewritten bytes do not match the recorded digests: mosaic or a library that determines the
            bytes changed since the dataset was made; the message says which).
    """
    root = Path(root)
    man = read_manifest_checked(root)
    if report.ok:
        return report
    if not report.repairable or man.get("storage", "imagefolder") != "imagefolder":
        raise DatasetError(report.problems(), source=str(root))
    spec = spec_from_data(man["spec"])
    sample_fn = sample_fn or sample_record
    if any(d.path == "README.md" for d in report.damage):  # the card is made from the manifest alone
        rewrite_card(root, man)
        report = verify(root, deep=report.deep, manifest=man, sample_fn=sample_fn)
        if report.ok:
            return report
    links = [d.path for d in report.damage if d.problem == "link"]
    if links:  # a link inside the dataset is removed (never written through), then what it hid is found missing
        for rel in links:
            p = root / rel
            if p.is_symlink():
                p.unlink()
        for split in man["splits"]:
            for sub in ("images", "masks") if man.get("masks") else ("images",):
                if (root / split).is_dir() and not (root / split).is_symlink():
                    (root / split / sub).mkdir(exist_ok=True)
        report = verify(root, deep=report.deep, manifest=man, sample_fn=sample_fn)
        if report.ok:
            return report
    if any(d.path == CHECKSUMS for d in report.damage):
        raise DatasetError([(CHECKSUMS, "the recorded file digests are damaged, so damaged samples cannot be told apart: "
                             f"regenerate with `mosaic generate SPEC --out {root} --overwrite`, or restore the file")], source=str(root))
    sums = read_checksums(root, man, VerifyReport(str(root), "imagefolder", True)) or {}
    masks = bool(man.get("masks"))
    renderer = man.get("renderer", {}).get("name", "pillow")
    samples = sorted({(d.split, d.index) for d in report.damage if d.index is not None and d.problem != "metadata"})
    meta_splits = sorted({d.split for d in report.damage if d.split and (d.problem == "metadata" or d.path.endswith("metadata.jsonl")
                                                                            or d.index is None)})
    total = len(samples) + len(meta_splits)
    for k, (split, index) in enumerate(samples):
        rec, img, mask = expected_sample(spec, split, index, masks, renderer, sample_fn, png_fn)
        for rel, data in ((f"{split}/{rec['file_name']}", img), (f"{split}/{rec.get('mask_file_name')}", mask)):
            if data is None:
                continue
            if sums and hashlib.sha256(data).hexdigest() != sums.get(rel):
                raise DatasetError([(rel, "regenerating it gives other bytes than the recorded digest: " + _mismatch_cause(man))],
                                   source=str(root))
            atomic_write(make_room(root, rel), data)
        if on_progress:
            on_progress(k + 1, total)
    for split in meta_splits:  # streamed: one record at a time into a temporary file, checked, then moved in place
        rel = f"{split}/metadata.jsonl"
        fd, name = tempfile.mkstemp(dir=root, prefix=f".{split}.metadata.jsonl.tmp{os.getpid()}.")  # O_EXCL: unique, no link followed
        tmp = Path(name)
        h = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as f:
                for index in range(int(man["splits"][split]["count"])):
                    rec, _ = sample_fn(spec, split, index)
                    if masks:
                        rec["mask_file_name"] = f"masks/{index:06d}.png"
                    line = (json.dumps(rec, sort_keys=True) + "\n").encode()
                    f.write(line)
                    h.update(line)
            if sums and h.hexdigest() != sums.get(rel):
                raise DatasetError([(rel, "the records the spec gives differ from the recorded digest: " + _mismatch_cause(man))],
                                   source=str(root))
            os.replace(tmp, make_room(root, rel))
        finally:
            tmp.unlink(missing_ok=True)
    return verify(root, deep=report.deep, manifest=man, sample_fn=sample_fn)  # rewritten bytes were checked above


def mark_shards_for_regeneration(root: str | Path, report: VerifyReport) -> list[str]:
    """For a Parquet dataset: delete each damaged shard and its finished-shard record and mark the
    manifest ``incomplete``, so that :func:`mosaic.parquet.generate_parquet` (which resumes) writes
    exactly those shards again, byte-identically. Returns the shard names."""
    root = Path(root)
    man = read_manifest_checked(root)
    names = {Path(d.path).name for d in report.damage}
    hit = []
    for split, lst in man.get("shards", {}).items():
        for k, s in enumerate(lst):
            if s["name"] in names:
                for rel in (f".mosaic/shards/{split}-{k:05d}.json", f"data/{s['name']}"):
                    target = make_room(root, rel)  # a folder or file in the way is cleared (or refused)
                    target.unlink(missing_ok=True)
                hit.append(s["name"])
    write_manifest(root / MANIFEST, {**man, "status": "incomplete", "repairing": {"shards": hit, "was": man.get("shards")}})
    return hit


def check_repaired_shards(root: str | Path, man: dict) -> None:
    """After a Parquet repair: every rewritten shard must have its recorded sha256.

    Raises:
        DatasetError: a regenerated shard differs (another mosaic or library made the dataset)."""
    was = (man.get("repairing") or {}).get("was") or {}
    names = set((man.get("repairing") or {}).get("shards") or [])
    root = Path(root)
    for split, lst in was.items():
        for s in lst:
            if s["name"] in names and sha256_file(root / "data" / s["name"]) != s["sha256"]:
                raise DatasetError([(f"data/{s['name']}", "the regenerated shard differs from the recorded digest: " + _mismatch_cause(man))],
                                   source=str(root))


def check_and_repair(root: str | Path, deep: bool = False, sample_fn=None, png_fn=None,
                     on_progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """What ``mosaic generate`` does on a finished imagefolder dataset: a quick check (``deep``: a
    full one), then :func:`repair` of whatever is damaged. Returns the first check's report
    (``damage`` lists what was repaired).

    Raises:
        DatasetError: the damage cannot be repaired (see :func:`repair`).
    """
    report = verify(root, deep=deep, sample_fn=sample_fn)
    if not report.ok:
        after = repair(root, report, sample_fn, png_fn, on_progress)
        if not after.ok:
            raise DatasetError(after.problems(), source=str(root))
    return report
