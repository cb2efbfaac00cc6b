"""Checks of a Parquet dataset's shards against its manifest (size, footer, rows, sha256) and of
each stored image's PNG header against the spec's ``image.size``: the shard part of
:func:`mosaic.verify.verify` and of every reader's quick check
(:func:`mosaic.verify.check_before_read`), shared with the Parquet writer's own check
(:mod:`mosaic.parquet`). pyarrow is imported only when a shard is read."""

from __future__ import annotations

from pathlib import Path

from mosaic.checksums import digest_file
from mosaic.png import png_size_problem


def spec_image_size(man: dict) -> int | None:
    """``image.size`` (pixels a side) of the manifest's spec; None where it records none (the
    fingerprint check names an edited spec)."""
    size = ((man.get("spec") or {}).get("image") or {}).get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def check_shards(root: Path, man: dict, deep: bool = False) -> list[tuple[str, str]]:
    """``(data/<shard>, message)`` for each shard a Parquet manifest lists that is missing, of
    another size, has an unreadable footer or another row count, or (``deep``) another sha256 or
    an image or mask whose PNG header gives another size than the spec's ``image.size``."""
    import pyarrow.parquet as pq

    image_size = spec_image_size(man)
    problems = []
    for split, lst in man.get("shards", {}).items():
        for s in lst:
            p = root / "data" / s["name"]
            where = f"data/{s['name']}"
            if not p.is_file():
                problems.append((where, "shard is missing"))
                continue
            size = p.stat().st_size
            if size != s["bytes"]:
                problems.append((where, f"shard is damaged: {size} bytes, the manifest records {s['bytes']}"))
                continue
            try:
                f = pq.ParquetFile(p)
                rows = f.metadata.num_rows
            except Exception as e:  # noqa: BLE001 - any unreadable footer is damage
                problems.append((where, f"shard is damaged: {e}"))
                continue
            if rows != s["rows"]:
                problems.append((where, f"shard is damaged: {rows} rows, the manifest records {s['rows']}"))
            elif deep and digest_file(p)[0] != s["sha256"]:
                problems.append((where, "shard is damaged: its sha256 differs from the manifest's"))
            elif deep and image_size is not None:
                problems += _shard_image_sizes(f, where, image_size)
    return problems


def _shard_image_sizes(f, where: str, image_size: int, limit: int = 20) -> list[tuple[str, str]]:
    """Each row of an open Parquet shard ``f`` (``pyarrow.parquet.ParquetFile``) whose image or
    mask PNG header gives another size than the spec's (rows rewritten together with the shard's
    sha256): read from the first 24 bytes of each, nothing decoded. At most ``limit`` named."""
    problems = []
    cols = [c for c in ("image", "mask") if c in f.schema_arrow.names]
    for batch in f.iter_batches(batch_size=1024, columns=["index", *cols]):
        rows = batch.to_pydict()
        for i, index in enumerate(rows["index"]):
            for c in cols:
                head = (rows[c][i] or {}).get("bytes") or b""
                if (why := png_size_problem(head[:24], image_size)) is not None:
                    problems.append((f"{where} (sample {index}, {c})", f"shard is damaged: {why}"))
                    if len(problems) == limit:
                        return problems
    return problems
