"""``mosaic verify DIR --against-spec``: every sample regenerated from the spec and compared.

The digests of ``checksums.sha256`` and the manifest find damage: a file that changed after
generation. They cannot find a forgery that rewrote a file *and* its digests (labels moved to other
seen values, an image swapped for another rendering, the digest list and its sha256 in the manifest
written again to match). A sample is a pure function of ``(spec, split, index)``, and the spec's
fingerprint is checked first, so the one proof that a dataset holds exactly what its spec makes is to
make every sample again and compare:

- imagefolder: each metadata line against the record the generator gives (as parsed JSON), each
  image's and mask's bytes against the PNG the generator writes;
- Parquet: each shard's rows against the rows the generator writes for the same indices.

It costs about as much as generating the dataset again with one process (sampling, rendering and
PNG encoding: under 1 ms an image at 16-64 px; docs/integrity.md). Anything that differs is a
:class:`mosaic.verify.Damage` with problem ``not the spec's``, and the report is not repairable by
``--repair`` (which trusts the recorded digests): the fix is ``mosaic generate DIR --out DIR
--overwrite`` (the manifest's own spec) or a copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from mosaic.checksums import metadata_lines, parse_record
from mosaic.records import png_bytes, sample_record, spec_from_data
from mosaic.repair import expected_sample
from mosaic.shard_checks import shard_mb_text
from mosaic.verify import Damage, VerifyReport

#: the problem name of a sample that is not what the spec makes
NOT_SPEC = "not the spec's"


def _same_bytes(path: Path, want: bytes) -> bool:
    try:
        return path.is_file() and not path.is_symlink() and path.stat().st_size == len(want) and path.read_bytes() == want
    except OSError:
        return False


def _imagefolder(root: Path, man: dict, spec, tick) -> list[Damage]:
    masks = bool(man.get("masks"))
    renderer = man.get("renderer", {}).get("name", "pillow")
    out: list[Damage] = []
    for split, n in spec.split_sizes().items():
        meta = root / split / "metadata.jsonl"
        lines = metadata_lines(meta) if meta.is_file() else iter(())
        for k in range(n):
            line = next(lines, None)
            rec, image, mask = expected_sample(spec, split, k, masks, renderer=renderer, sample_fn=sample_record, png_fn=png_bytes)
            got = parse_record(line, k) if line is not None else None
            if got is None or json.loads(json.dumps(rec, sort_keys=True)) != got:
                out.append(Damage(f"{split}/metadata.jsonl:{k + 1}", NOT_SPEC, f"line {k + 1} is not the record the spec gives "
                                  f"sample {k}", split, k))
            if not _same_bytes(root / split / rec["file_name"], image):
                out.append(Damage(f"{split}/{rec['file_name']}", NOT_SPEC, "its bytes are not the image the spec renders", split, k))
            if mask is not None and not _same_bytes(root / split / rec["mask_file_name"], mask):
                out.append(Damage(f"{split}/{rec['mask_file_name']}", NOT_SPEC, "its bytes are not the mask the spec renders", split, k))
            tick()
    return out


def _parquet(root: Path, man: dict, spec, tick) -> list[Damage]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mosaic.parquet import render_rows

    masks = bool(man.get("masks"))
    renderer = man.get("renderer", {}).get("name", "pillow")
    out: list[Damage] = []
    for split, n in spec.split_sizes().items():
        start = 0
        for shard in (man.get("shards") or {}).get(split, []):  # records of mosaic's shape (records.shards_problem)
            name, stop = f"data/{shard['name']}", min(n, start + shard["rows"])
            want = render_rows(man["spec"], split, start, stop, masks, renderer)
            try:
                got = pq.read_table(root / name)
                same = got.num_rows == want.num_rows and got.select(want.column_names).cast(want.schema).equals(want)
            except (OSError, KeyError, ValueError, pa.ArrowException):
                same = False
            if not same:
                out.append(Damage(name, NOT_SPEC, f"its rows are not samples {start}-{stop - 1} of split {split!r} as the spec "
                                  "makes them", split))
            for _ in range(start, stop):
                tick()
            start = stop
        if start != n:
            out.append(Damage(split, NOT_SPEC, f"its shards hold {start} rows, the spec makes {n}", split))
    return out


def regenerate_command(root: str | Path, man: dict) -> str:
    """The ``mosaic generate`` command that makes the dataset at ``root`` again from its manifest's
    own spec, in the same form (masks, Parquet and its shard size)."""
    cmd = f"mosaic generate {root} --out {root} --overwrite"
    if man.get("masks"):
        cmd += " --masks"
    if man.get("storage") == "parquet":
        b = (man.get("parquet") or {}).get("shard_bytes")
        cmd += " --format parquet" + (f" --shard-mb {shard_mb_text(b)}" if isinstance(b, int) and b > 0 else "")
    return cmd


def against_spec(root: str | Path, man: dict, report: VerifyReport,
                 on_progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Add to ``report`` (a :func:`mosaic.verify.verify` of ``root`` whose manifest is ``man``, as
    :func:`mosaic.verify.read_manifest_checked` returns it: its shard records are mosaic's) one
    :class:`~mosaic.verify.Damage` per sample (imagefolder: metadata line, image, mask; Parquet:
    shard) that differs from what the spec in ``man`` makes; such a report is not repairable
    (``--repair`` trusts the recorded digests). Skipped when the manifest itself is damaged (its
    spec cannot be trusted) or unfinished. ``on_progress(done, total)`` after each sample."""
    if any(d.problem in ("manifest", "incomplete") for d in report.damage):
        return report
    spec = spec_from_data(man["spec"])
    total, done = sum(spec.split_sizes().values()), [0]

    def tick():
        done[0] += 1
        if on_progress is not None:
            on_progress(done[0], total)

    found = (_parquet if report.storage == "parquet" else _imagefolder)(Path(root), man, spec, tick)
    if found:
        report.damage += found
        report.repairable = False
    return report


__all__ = ["NOT_SPEC", "against_spec", "regenerate_command"]
