"""Repairing a dataset of either storage form, byte-identically (``mosaic verify --repair``).

Sits above :mod:`mosaic.dataset` and :mod:`mosaic.parquet` (which check their own folder on a rerun
of ``mosaic generate`` through :mod:`mosaic.verify`): an imagefolder dataset gets its damaged samples
rendered again with the generator's own record and PNG functions; a Parquet dataset gets its damaged
shards written again by :func:`mosaic.parquet.generate_parquet`, which resumes.
"""

from __future__ import annotations

from pathlib import Path

from mosaic.errors import DatasetError
from mosaic.verify import VerifyReport, mark_shards_for_regeneration, read_manifest_checked, repair, verify


def repair_dataset(root: str | Path, report: VerifyReport) -> VerifyReport:
    """Repair what ``report`` (:func:`mosaic.verify.verify`) found and return a new check of the
    same depth.

    Raises:
        DatasetError: see :func:`mosaic.verify.repair`; a Parquet shard that regenerates to other bytes.
    """
    from mosaic.dataset import png_bytes, sample_record
    from mosaic.locks import FolderLock

    root = Path(root)
    with FolderLock(root, DatasetError, "dataset", wait=True):
        man = read_manifest_checked(root)
        if report.ok:
            return report
        if man.get("storage", "imagefolder") == "imagefolder":
            return repair(root, report, sample_fn=sample_record, png_fn=png_bytes)
        from mosaic.parquet import generate_parquet
        from mosaic.records import spec_from_data

        if not report.repairable:
            raise DatasetError(report.problems(), source=str(root))
        mark_shards_for_regeneration(root, report)
        generate_parquet(spec_from_data(man["spec"]), root, masks=bool(man.get("masks")), shard_bytes=man["parquet"]["shard_bytes"],
                         renderer=man.get("renderer", {}).get("name", "pillow"))
        return verify(root, deep=report.deep)
