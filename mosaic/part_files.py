"""A shard's part file (``.mosaic/parts/<split>-NNNNNN.jsonl``), the record of an unfinished imagefolder
dataset: written last and atomically by :func:`mosaic.dataset.render_shard` (it marks the shard finished),
read back by :func:`mosaic.dataset.finalize`, which merges the records into each split's
``metadata.jsonl``. Its first line is a header ``{"start", "stop", "concepts", "sha256"}`` (each sample's
concept values, in concept order, for the leak check; each image's digest as rendered); then one record a
line, as :func:`mosaic.records.sample_line` gives it.

Nothing in a part file is believed: each record must be its index's, with its header's concept values
and the spec's ``held_out`` flag (:func:`check_part_record`), and a part file the finishing process did
not write must hold the spec's records byte for byte (:func:`check_resumed_record`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from mosaic.errors import DatasetError
from mosaic.holdout import is_held_out
from mosaic.checksums import MAX_LINE_BYTES
from mosaic.io import JSONReadError, loads_json
from mosaic.records import sample_line
from mosaic.spec import Spec


def part_head(part: Path, split: str, line: bytes) -> dict:
    """The first line of a part file: ``{"start": int, "stop": int, "concepts": [...]}``.

    Raises:
        DatasetError: not UTF-8 JSON, nested too deep, or not of that shape (a damaged part file,
            e.g. from a full disk or another program), naming it and the fix: delete it and rerun
            the same command, which generates that shard again.
    """
    try:
        head = loads_json(line)
    except JSONReadError as e:
        head, why = None, str(e)
    else:
        why = "not a part file's header"
    if (isinstance(head, dict) and all(isinstance(head.get(k), int) and not isinstance(head.get(k), bool) for k in ("start", "stop"))
            and isinstance(head.get("concepts"), list)):
        return head
    raise DatasetError(f"split {split!r}: part file {part} is damaged (its first line is {why}); delete it and rerun the "
                       "same command (that shard is generated again)")


def check_part_record(spec: Spec, split: str, part: Path, i: int, line: bytes, vals: list, names: list[str]) -> None:
    """Record ``i`` of a part file (``line``, with its newline) must be the record of its index and
    split, with the concept values its header gives (``vals``, what the leak check counts) and the
    ``held_out`` flag the spec gives them: a record edited in an unfinished dataset (a held-out
    combination's labels on a training image) is never merged into ``metadata.jsonl`` and digested
    as if mosaic wrote it. One JSON parse per record (about 10 us).

    Raises:
        DatasetError: naming the part file, the index and the fix (delete it and rerun)."""
    fix = "delete it and rerun the same command (that shard is generated again)"
    if not line.endswith(b"\n"):  # missing (the file ends early), cut short, or longer than MAX_LINE_BYTES (TOO_LONG)
        raise DatasetError(f"split {split!r}: part file {part} is damaged (record {i} is missing, cut short or longer than "
                           f"{MAX_LINE_BYTES:,} bytes); {fix}")
    try:
        rec = loads_json(line)
    except JSONReadError as e:
        raise DatasetError(f"split {split!r}: part file {part} is damaged (record {i} is {e}); {fix}") from None
    conc = rec.get("concepts") if isinstance(rec, dict) else None
    if (not isinstance(conc, dict) or rec.get("index") != i or rec.get("split") != split
            or [conc.get(c) for c in names] != vals or rec.get("held_out") is not is_held_out(spec, conc)):
        raise DatasetError(f"split {split!r}: part file {part} is damaged (record {i} is not the record of index {i} "
                           f"with the concepts its header gives and the spec's held_out flag); {fix}")


def check_resumed_record(spec: Spec, split: str, part: Path, i: int, line: bytes, masks: bool) -> None:
    """Record ``i`` of a part file this process did not write must be, byte for byte, the record
    the spec gives sample ``i`` of ``split`` (:func:`sample_line`).

    Raises:
        DatasetError: naming the part file, the index and the fix (delete it and rerun)."""
    want = sample_line(spec, split, i, f"masks/{i:06d}.png" if masks else None)[0]
    if line[:-1] != want.encode():
        raise DatasetError(f"split {split!r}: part file {part} is not this spec's (record {i} differs from the record the "
                           "spec gives that sample); delete it and rerun the same command (that shard is generated again)")


def rendered_digests(parts: Path, split: str, masks: bool) -> Iterator[tuple[str, Path] | None]:
    """``(sha256, part file)`` of each image (and mask) of ``split`` as rendered, in file order, read
    from the part files' headers one at a time; None where a part file of an older mosaic recorded none."""
    for part in part_files(parts, split):
        with part.open("rb") as f:
            head = part_head(part, split, f.readline(MAX_LINE_BYTES + 1))
        n = (head["stop"] - head["start"]) * (2 if masks else 1)
        digs = head.get("sha256")
        if isinstance(digs, list) and len(digs) == n:
            yield from ((d, part) if isinstance(d, str) else None for d in digs)
        else:
            yield from (None for _ in range(n))


def part_files(parts: Path, split: str) -> Iterator[Path]:
    """The part files of a split in shard order, without listing the folder: shard 0, 1, ... while
    they exist, then any other part file of the split (a stray one, which finalize reports)."""
    shard = 0
    while (p := parts / f"{split}-{shard:06d}.jsonl").is_file():
        yield p
        shard += 1
    # a gap or a foreign name: fall back to the listing so the error names the file (rare; small then)
    rest = sorted(q for q in parts.glob(f"{split}-*.jsonl") if q.name > f"{split}-{shard:06d}.jsonl")
    yield from rest
