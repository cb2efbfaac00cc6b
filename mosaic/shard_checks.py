"""Checks of a Parquet dataset's shards against its manifest (size, footer, rows, sha256) and of
each row against what mosaic writes (its index, paths and PNG bytes): the shard part of
:func:`mosaic.verify.verify` and of every reader's quick check
(:func:`mosaic.verify.check_before_read`), shared with the Parquet writer's own check
(:mod:`mosaic.parquet`). pyarrow is imported only when a shard is read."""

from __future__ import annotations

import json
from pathlib import Path

from mosaic.checksums import digest_file
from mosaic.errors import DatasetError
from mosaic.hf import arrow_schema, feature_tree
from mosaic.parquet_pages import MAX_GROUP_ROWS, shard_bound_problem
from mosaic.png import png_structure_problem
from mosaic.records import spec_from_data
from mosaic.tally import Tally


def spec_image_size(man: dict) -> int | None:
    """``image.size`` (pixels a side) of the manifest's spec; None where it records none (the
    fingerprint check names an edited spec)."""
    size = ((man.get("spec") or {}).get("image") or {}).get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def expected_schema(man: dict):
    """The ``pyarrow.Schema`` a Parquet shard of this manifest's dataset has (its spec's columns,
    with masks where the manifest records them), or None where the spec does not parse (the
    fingerprint check names that)."""
    try:
        return arrow_schema(feature_tree(spec_from_data(man["spec"]), bool(man.get("masks"))))  # mosaic.parquet.row_schema
    except Exception:  # noqa: BLE001 - an unparsable spec is named by the fingerprint check
        return None


def _metadata_problem(got, want) -> str | None:
    """What differs between the schema metadata of ``got`` and ``want``: the keys, and each value as
    JSON (the ``huggingface`` key holds the features HF decodes the labels with: class names
    reordered there would have HF read a red sample's label as another colour), or None."""
    g, w = got.metadata or {}, want.metadata or {}
    if set(g) != set(w):
        return f"its footer's metadata keys are {sorted(k.decode('latin-1')[:40] for k in g)}, not {sorted(k.decode() for k in w)}"
    for k in w:
        try:
            same = json.loads(g[k]) == json.loads(w[k])
        except ValueError:
            same = False
        if not same:
            return (f"its footer's {k.decode()!r} metadata is not the one mosaic writes for the spec (HF reads the features, "
                    "and so the class names of the labels, from it)")
    return None


def _schema_problem(got, want) -> str | None:
    """What differs between a shard's Arrow schema ``got`` and mosaic's ``want`` (names, order and
    types, then the schema metadata: :func:`_metadata_problem`), or None."""
    if got.equals(want, check_metadata=False):
        why = _metadata_problem(got, want)
        return None if why is None else f"shard is damaged: {why}"
    g, w = {f.name: f.type for f in got}, {f.name: f.type for f in want}
    parts = []
    if missing := [n for n in w if n not in g]:
        parts.append(f"no column {', '.join(missing)}")
    if extra := [n for n in g if n not in w]:
        parts.append(f"column(s) {', '.join(extra)} mosaic never writes")
    if typed := [f"{n} is {g[n]}, not {w[n]}" for n in w if n in g and g[n] != w[n]]:
        parts.append("; ".join(typed))
    if not parts:
        parts.append(f"its columns are in another order ({', '.join(g)})")
    return "shard is damaged: its schema is not mosaic's: " + "; ".join(parts)


def check_shards(root: Path, man: dict, deep: bool = False) -> list[tuple[str, str]]:
    """``(data/<shard>, message)`` for each shard a Parquet manifest lists that is missing, of
    another size, has an unreadable footer, another row count or another schema (columns and
    types) than mosaic writes for the spec, or (``deep``) another sha256, or a row that is not the
    one mosaic writes at its place (:func:`_shard_rows`)."""
    import pyarrow.parquet as pq

    image_size = spec_image_size(man)
    want = expected_schema(man)
    problems = []
    for split, lst in man.get("shards", {}).items():
        start = 0
        for s in lst:
            first, start = start, start + (s.get("rows") if isinstance(s.get("rows"), int) else 0)
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
                schema = f.schema_arrow
            except Exception as e:  # noqa: BLE001 - any unreadable footer is damage
                problems.append((where, f"shard is damaged: {e}"))
                continue
            if rows != s["rows"]:
                problems.append((where, f"shard is damaged: {rows} rows, the manifest records {s['rows']}"))
            elif want is not None and (why := _schema_problem(schema, want)) is not None:
                problems.append((where, why))
            elif image_size is not None and (why := _bound_problem(p, f.metadata, image_size)) is not None:
                problems.append((where, f"shard is damaged: {why}"))
            elif deep and digest_file(p)[0] != s["sha256"]:
                problems.append((where, "shard is damaged: its sha256 differs from the manifest's"))
            elif deep and image_size is not None:
                problems += _shard_rows(f, where, image_size, first)
    return problems


def _bound_problem(p: Path, meta, image_size: int) -> str | None:
    """:func:`mosaic.parquet_pages.shard_bound_problem` of the shard file ``p`` (page headers only)."""
    try:
        with open(p, "rb") as fh:
            return shard_bound_problem(fh, meta, image_size, MAX_GROUP_ROWS)
    except OSError as e:
        return f"it cannot be read ({e.strerror or e})"


def shard_bounds(root: Path, split: str, man: dict) -> None:
    """Refuse, before a reader reads any row of a Parquet split, a shard whose pages decompress to
    more than mosaic writes (:func:`mosaic.parquet_pages.shard_bound_problem`): the bound of every
    read, checked or not (``MosaicDataset(..., verify=False)``, :func:`mosaic.dataset.iter_metadata`).

    Raises:
        DatasetError: naming the shard, with the fix."""
    import pyarrow.parquet as pq

    image_size = spec_image_size(man)
    if image_size is None:
        return
    for s in man.get("shards", {}).get(split, []):
        p = Path(root) / "data" / str(s.get("name"))
        try:
            meta = pq.ParquetFile(p).metadata
        except Exception:  # noqa: BLE001 - a missing or unreadable shard is named by its reader
            continue
        if (why := _bound_problem(p, meta, image_size)) is not None:
            raise DatasetError([(f"{root}/data/{p.name}", f"shard is damaged: {why}"),
                                ("fix", f"regenerate the dataset (`mosaic generate {root} --out {root} --overwrite --format parquet`), "
                                        "or use a copy you trust")])


def _row_cell_problem(cell, index: int, image_size: int, kind: str) -> str | None:
    """What is wrong with one row's ``image`` or ``mask`` cell (``{"bytes", "path"}``), or None."""
    if not isinstance(cell, dict) or not isinstance(cell.get("bytes"), bytes):
        return f"its {kind} holds no PNG bytes"
    path, want = cell.get("path"), f"{'images' if kind == 'image' else 'masks'}/{index:06d}.png"
    if path is not None and path != want:  # another sample's name (cells swapped between rows) or not mosaic's
        return f"its {kind} path is {str(path)[:80]!r}, not {want!r}, the name mosaic gives sample {index}'s {kind}"
    return png_structure_problem(cell["bytes"], image_size, kind)


def _shard_rows(f, where: str, image_size: int, first: int, limit: int = 20) -> list[tuple[str, str]]:
    """Each row of an open Parquet shard ``f`` (``pyarrow.parquet.ParquetFile``, its schema already
    mosaic's) that is not the one mosaic writes at its place, rows rewritten together with the
    shard's sha256: row ``k`` must hold ``index == first + k`` (no row repeated, moved or renumbered;
    ``first`` is the rows of the split's earlier shards), its image (and mask) path, where stored, a
    sample's own name ``images/NNNNNN.png`` (``masks/NNNNNN.png``) of its index, its PNG bytes whole and in mosaic's form
    (:func:`mosaic.png.png_structure_problem`: size, format, chunks, pixel bytes; nothing decoded).
    At most ``limit`` named."""
    problems = []
    cols = [c for c in ("image", "mask") if c in f.schema_arrow.names]
    k = first
    for batch in f.iter_batches(batch_size=1024, columns=["index", *cols]):
        rows = batch.to_pydict()
        for i, index in enumerate(rows["index"]):
            if index != k:
                problems.append((f"{where} (row {k - first})", f"shard is damaged: the row at sample {k}'s place holds index "
                                 f"{index!r}: rows were repeated, moved or renumbered"))
            else:
                for c in cols:
                    if (why := _row_cell_problem(rows[c][i], index, image_size, c)) is not None:
                        problems.append((f"{where} (sample {index}, {c})", f"shard is damaged: {why}"))
                        break
            k += 1
            if len(problems) >= limit:
                return problems[:limit]
    return problems


def _positive(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def layout_problem(man: dict) -> str | None:
    """Why a Parquet manifest's ``parquet`` record (``shard_bytes``, ``row_group_rows``, ``rows_per_shard``:
    the layout ``verify --repair`` and a resumed ``generate`` write the shards again by) is not what mosaic
    writes, or None: each a whole number > 0, ``rows_per_shard`` a mapping of the manifest's splits, and the
    manifest's shard list of each split the one that layout gives (shard k holds ``min(r, count - k * r)`` rows).
    An edited ``rows_per_shard: -1`` had a repair delete the train shard and mark the dataset
    ``failed_leak_check``; ``0`` divided by zero; a string or null was a traceback (attack round 17)."""
    lay = man.get("parquet")
    if man.get("storage") == "parquet":  # null where mosaic writes a record was a traceback
        if ("shards" in man or man.get("status") == "complete") and not isinstance(man.get("shards"), dict):
            return f"its shards record is {str(man.get('shards'))[:40]!r}, not a mapping of split -> shard list"
        if lay is None:
            return "its parquet record (shard_bytes, row_group_rows, rows_per_shard) is missing or null"
    elif lay is None:
        return None
    if not isinstance(lay, dict):
        return f"its parquet record is {str(lay)[:40]!r}, not a mapping of shard_bytes, row_group_rows and rows_per_shard"
    if missing := [k for k in ("shard_bytes", "row_group_rows", "rows_per_shard") if k not in lay]:
        return f"its parquet record lacks {', '.join(missing)}"
    for key in ("shard_bytes", "row_group_rows"):
        if not _positive(lay[key]):
            return f"parquet.{key} is {str(lay[key])[:40]!r}, not a whole number > 0"
    plan = lay["rows_per_shard"]
    if not isinstance(plan, dict):
        return f"parquet.rows_per_shard is {str(plan)[:40]!r}, not a mapping of splits to rows per shard"
    for split, r in plan.items():
        if split not in man["splits"] or not _positive(r):
            return f"parquet.rows_per_shard[{str(split)[:40]!r}] is {str(r)[:40]!r}, not a whole number > 0 for a split of the manifest"
        lst = (man.get("shards") or {}).get(split)
        n = man["splits"][split].get("count", 0)
        if lst is not None and [s["rows"] for s in lst] != [min(r, n - k * r) for k in range(-(-n // r))]:
            return (f"parquet.rows_per_shard[{split!r}] is {r}, but the split's {len(lst)} shard(s) hold "
                    f"{[s['rows'] for s in lst][:5]} rows: not the layout mosaic wrote")
    return None


def tally_shards(root: Path, man: dict, spec) -> Tally:
    """The leak-check tally of a Parquet dataset's rows (``index`` and ``concepts`` columns only, a
    batch at a time), for the full check to compare with the manifest's ``leak_check``
    (:func:`mosaic.tally.leak_check_damage`; an edited count passed ``verify`` in full, attack round 24).
    The caller has checked the shards."""
    import pyarrow.parquet as pq

    tally = Tally(spec)
    for split in man["splits"]:
        tally.begin(split)
        for s in man.get("shards", {}).get(split, []):
            for batch in pq.ParquetFile(Path(root) / "data" / s["name"]).iter_batches(batch_size=4096, columns=["index", "concepts"]):
                for r in batch.to_pylist():
                    tally.add(split, r["index"], r["concepts"] or {})
    return tally


def shard_mb_text(shard_bytes) -> str:
    """The ``--shard-mb`` value that gives ``shard_bytes`` (the CLI takes ``int(MiB * 2**20)`` bytes), as
    short as it can be written: 1048 bytes is ``0.001``, never ``0.00099945068359375`` (below the option's least
    value, 0.001, so the command a message named could not be typed: attack round 24)."""
    if not isinstance(shard_bytes, int) or isinstance(shard_bytes, bool):
        return repr(shard_bytes)
    for digits in range(0, 18):
        text = f"{shard_bytes / 2**20:.{digits}f}".rstrip("0").rstrip(".") or "0"
        if int(float(text) * 2**20) == shard_bytes and float(text) >= 0.001:
            return text
    return format(shard_bytes / 2**20, ".17g")
