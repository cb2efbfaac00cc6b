"""Sharded Parquet datasets: writing, reading and verifying (converting to and from imagefolder: :mod:`mosaic.export`).

Layout of a Parquet dataset directory ``OUT``::

    OUT/manifest.json                                  as for imagefolder, plus ``storage: parquet``,
                                                       the shard plan and, once complete, every shard's
                                                       name, rows, bytes and sha256
    OUT/README.md                                      dataset card (``datasets.load_dataset(OUT)``)
    OUT/data/<split>-NNNNN-of-MMMMM.parquet            the shards (HF Hub layout)
    OUT/.mosaic/shards/<split>-NNNNN.json              resume state: one file per finished shard

Each row is one sample: ``image`` (and ``mask``) in the HF ``Image`` struct ``{bytes: PNG, path}``
plus the record of :func:`mosaic.hf.hf_record`; the schema carries the HF features in its
``huggingface`` metadata, so ``datasets`` decodes the images and the ``ClassLabel`` columns, and
plain ``pyarrow.parquet`` reads it too.

Shards hold about ``shard_bytes`` (256 MB by default): a split's rows per shard are planned from
the encoded size of its first samples (deterministic: the same spec plans the same shards), and each
shard is written in row groups of at most :data:`ROW_GROUP_ROWS` rows. Row groups are rendered by
worker processes and written by the main process in index order, so any number of workers gives the
same bytes. A shard is written to a hidden temporary file and renamed when complete; a rerun after a
kill redoes only the shards without a finished-shard record.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from mosaic.checksums import clear_root_temps
from mosaic.errors import DatasetError, MosaicError
from mosaic.executors import check_backend, make_executor
from mosaic.hf import arrow_schema, feature_tree, hf_record, present_splits, write_card
from mosaic.io import TEMP_GLOB, atomic_write_json, new_temp_file, own_folders, read_json
from mosaic.locks import FolderLock
from mosaic.manifest_io import write_manifest
from mosaic.records import FORMAT, MANIFEST, base_manifest, check_out_dir, png_bytes, read_manifest, sample_record, spec_from_data
from mosaic.repair import check_repaired_shards, mark_shards_for_regeneration
from mosaic.sampling import prefetch_scenes
from mosaic.spec import Spec
from mosaic.tally import Tally
from mosaic.shard_checks import check_shards, layout_problem, shard_mb_text
from mosaic.verify import verify as verify_dataset
from renderers import RENDER_CHUNK, backend_of, get_renderer

DEFAULT_SHARD_BYTES = 256 * 2**20
ROW_GROUP_ROWS = 1024
ESTIMATE_SAMPLES = 32
STORAGES = ("imagefolder", "parquet")
_IMAGE_COLS = ("image", "mask")


def shard_name(split: str, k: int, n: int) -> str:
    """File name of shard ``k`` of ``n`` of a split (HF's ``<split>-00000-of-00004.parquet``)."""
    return f"{split}-{k:05d}-of-{n:05d}.parquet"


def storage_of(manifest: dict) -> str:
    """``imagefolder`` or ``parquet`` (manifests of mosaic-dataset/1 are imagefolder)."""
    return manifest.get("storage", "imagefolder")


def check_format(fmt: str) -> str:
    """Return ``fmt`` when it is a storage form; raise DatasetError naming the choices otherwise."""
    if fmt not in STORAGES:
        raise DatasetError([("--format", f"unknown format {fmt!r}: use one of {', '.join(STORAGES)}")])
    return fmt


# ----------------------------------------------------------------------------------------------
# rows
# ----------------------------------------------------------------------------------------------

def row_schema(spec: Spec, masks: bool) -> pa.Schema:
    return arrow_schema(feature_tree(spec, masks))


def row_of(spec: Spec, rec: dict, image_png: bytes, mask_png: bytes | None) -> dict:
    """The Parquet row of a generator record and its PNG bytes."""
    row = hf_record(spec, rec)
    fn = row.pop("file_name")
    mfn = row.pop("mask_file_name", None)
    row["image"] = {"bytes": image_png, "path": fn}
    if mask_png is not None:
        row["mask"] = {"bytes": mask_png, "path": mfn or fn.replace("images/", "masks/")}
    return row


def render_rows(spec_data: dict, split: str, start: int, stop: int, masks: bool, renderer: str = "pillow") -> pa.Table:
    """Samples ``start..stop-1`` of ``split`` as a Parquet-ready table (a pure function of its
    arguments; run in worker processes)."""
    spec = spec_from_data(spec_data)
    rend = get_renderer(backend_of(spec, renderer), supersample=spec.image.supersample)
    rows = []
    for a in range(start, stop, RENDER_CHUNK):  # laid out, then rendered together (the shaded renderer batches them)
        prefetch_scenes(spec, split, range(a, min(stop, a + RENDER_CHUNK)))  # occlusion checks in batches (shaded specs)
        recs = [sample_record(spec, split, index) for index in range(a, min(stop, a + RENDER_CHUNK))]
        for (rec, _), (image, mask) in zip(recs, rend.render_batch([r[1] for r in recs], masks)):  # no mask drawn unless stored
            rows.append(row_of(spec, rec, png_bytes(image), png_bytes(mask) if masks else None))
    return pa.Table.from_pylist(rows, schema=row_schema(spec, masks))


def plan_rows_per_shard(table: pa.Table, shard_bytes: int) -> int:
    """Rows per shard so a shard holds about ``shard_bytes`` on disk, from a split's first rows:
    they are written to memory with the shard writer's own settings (PNG bytes stored as they
    are, zstd on the metadata) and the bytes per row of that file set the plan."""
    if table.num_rows == 0:
        return 1

    def size(copies: int) -> int:  # the file with the rows written `copies` times, one row group each
        sink = pa.BufferOutputStream()
        with _writer_with(sink, table.schema) as w:
            for _ in range(copies):
                w.write_table(table)
        return sink.getvalue().size

    per_row = max(1, (size(2) - size(1)) // table.num_rows)  # the difference leaves out the file's fixed header and footer
    return max(1, int(shard_bytes) // per_row)


def _estimate(spec: Spec, split: str, n: int, masks: bool, renderer: str, shard_bytes: int) -> int:
    t = render_rows(spec.to_dict(), split, 0, min(n, ESTIMATE_SAMPLES), masks, renderer)
    return plan_rows_per_shard(t, shard_bytes)


# ----------------------------------------------------------------------------------------------
# the shard writer
# ----------------------------------------------------------------------------------------------

def _writer_with(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    # PNG bytes are already compressed: store them as they are; zstd for the metadata columns.
    # No statistics on the images (their min/max would copy whole PNGs into the footer).
    leaves = _leaf_paths(schema)
    compression = {p: ("NONE" if p.split(".")[0] in _IMAGE_COLS and p.endswith(".bytes") else "ZSTD") for p in leaves}
    return pq.ParquetWriter(path, schema, compression=compression, use_dictionary=["split"], write_statistics=["index"])


def _leaf_paths(schema: pa.Schema) -> list[str]:
    out = []

    def walk(prefix: str, t: pa.DataType):
        if pa.types.is_struct(t):
            for f in t:
                walk(f"{prefix}.{f.name}", f.type)
        elif pa.types.is_list(t):
            walk(f"{prefix}.list.element", t.value_type)
        else:
            out.append(prefix)

    for f in schema:
        walk(f.name, f.type)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _shard_record_path(out: Path, split: str, k: int) -> Path:
    return out / ".mosaic" / "shards" / f"{split}-{k:05d}.json"


def _shard_done(out: Path, split: str, k: int, name: str, rows: int) -> dict | None:
    p = _shard_record_path(out, split, k)
    if not p.is_file():
        return None
    try:
        info = read_json(p)
    except (OSError, ValueError):  # damaged (not UTF-8, not JSON, nested too deep): the shard is written again
        return None
    f = out / "data" / name
    if p.is_symlink() or f.is_symlink() or not isinstance(info, dict):  # a link is never a finished shard: it is rewritten
        return None
    if info.get("name") != name or info.get("rows") != rows or not f.is_file() or f.stat().st_size != info.get("bytes"):
        return None
    return info


def write_shards(
    spec: Spec,
    out: Path,
    plan: dict[str, int],
    masks: bool,
    make_table: Callable[..., pa.Table],
    task_args: Callable[[str, int, int], tuple],
    executor,
    on_progress: Callable[[int, int], None] | None = None,
) -> None:
    """Write every unfinished shard of ``plan`` (split -> rows per shard), row group by row group.

    ``make_table(*task_args(split, start, stop))`` gives the rows ``start..stop-1`` of a split as a
    table; ``executor`` runs it (``submit``/``result``/``window``). Tables are written in index order
    whatever order they finish in.
    """

    sizes = spec.split_sizes()
    schema = row_schema(spec, masks)
    total = sum(sizes.values())
    done = 0
    jobs = []  # (split, k, n_shards, name, start, stop)
    for split, n in sizes.items():
        if n == 0:
            continue
        rps = plan[split]
        n_shards = -(-n // rps)
        for k in range(n_shards):
            start, stop = k * rps, min(n, (k + 1) * rps)
            name = shard_name(split, k, n_shards)
            if _shard_done(out, split, k, name, stop - start):
                done += stop - start
            else:
                jobs.append((split, k, name, start, stop))
    if on_progress:
        on_progress(done, total)
    def row_groups():  # (job, group_start, group_stop) in write order, made on the fly (no list of all groups)
        for job in jobs:
            start, stop = job[3], job[4]
            rg = min(ROW_GROUP_ROWS, stop - start)
            for a in range(start, stop, rg):
                yield job, a, min(stop, a + rg)

    groups = row_groups()
    pending: deque = deque()
    writer = None
    sink = None
    tmp: Path | None = None
    current = None
    try:
        while True:
            while len(pending) < executor.window and (g := next(groups, None)) is not None:
                job, a, b = g
                pending.append((job, a, b, executor.submit(make_table, *task_args(job[0], a, b))))
            if not pending:
                break
            job, a, b, fut = pending.popleft()
            table = executor.result(fut)
            split, k, name, start, stop = job
            if current is not job:
                if writer is not None:
                    raise AssertionError("shard writer left open")  # pragma: no cover
                # a new temporary file (unique, O_EXCL | O_NOFOLLOW): a link planted at its name or at the
                # shard's is never written through; the shard's name is replaced by it, not followed
                tmp, fd = new_temp_file(out / "data" / name)
                sink = os.fdopen(fd, "wb")
                writer = _writer_with(sink, schema)
                current = job
            writer.write_table(table, row_group_size=len(table))
            done += len(table)
            if b == stop:
                writer.close()
                writer = None
                sink.close()
                sink = None
                final = out / "data" / name
                os.replace(tmp, final)  # a link standing at `final` is replaced, never followed
                tmp = None
                info = {"name": name, "split": split, "shard": k, "rows": stop - start, "bytes": final.stat().st_size, "sha256": _sha256(final)}
                atomic_write_json(_shard_record_path(out, split, k), info)
                current = None
            if on_progress:
                on_progress(done, total)
    finally:
        if writer is not None:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the error that stopped the write is the one raised
                pass
        if sink is not None:
            sink.close()
        if tmp is not None:
            tmp.unlink(missing_ok=True)  # an unfinished shard never outlives its writer


def _clear_partial(out: Path) -> None:
    """Remove the temporary shard files an interrupted (killed) writer left in ``out/data``."""
    for p in (out / "data").glob(TEMP_GLOB):
        if p.is_file() or p.is_symlink():
            p.unlink()


def own_parquet_folders(out: Path) -> None:
    """Make ``out/data`` and ``out/.mosaic/shards`` real folders of ``out``: a symbolic link standing
    at either (or at ``.mosaic``) is removed, never written through (what it points to belongs to
    someone else), as :func:`mosaic.io.own_folders` does for the imagefolder writers."""

    own_folders(out, ["data", ".mosaic/shards"])


# ----------------------------------------------------------------------------------------------
# generate
# ----------------------------------------------------------------------------------------------

def parquet_manifest(spec: Spec, masks: bool, renderer: str, status: str, plan: dict, shard_bytes: int) -> dict:
    man = base_manifest(spec, masks, renderer, status, "parquet")
    man.update({
        "parquet": {"shard_bytes": int(shard_bytes), "rows_per_shard": plan, "row_group_rows": ROW_GROUP_ROWS},
    })
    return man


def generate_parquet(
    spec: Spec,
    out: str | Path,
    workers: int = 1,
    overwrite: bool = False,
    masks: bool = False,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    renderer: str = "pillow",
    on_progress: Callable[[int, int], None] | None = None,
    backend: str = "local",
    address: str | None = None,
    verify: bool = False,
) -> dict:
    """Generate the dataset of ``spec`` into ``out`` as Parquet shards; resume an interrupted run.

    On a finished dataset it runs a quick check (every shard present, of the recorded size, its
    footer and rows; ``verify``: also every shard's sha256) and rewrites the damaged shards,
    byte-identically (:func:`mosaic.repair.check_and_repair`); the returned manifest then lists them
    under ``repaired`` (not written to disk). The folder is locked while this runs
    (:class:`mosaic.locks.FolderLock`): a second generation of the same spec waits for this one (then
    finds the dataset complete); ``--overwrite`` of it from another process stops, naming this one.

    Args:
        workers: processes rendering row groups (1 = in this process). The bytes do not depend on it.
        overwrite: replace an existing mosaic dataset at ``out``.
        masks: also store instance masks (``mask`` column, PNG).
        shard_bytes: target shard size in bytes (default 256 MiB).
        on_progress: called as ``on_progress(done, total)`` after each row group.
        backend: ``local`` (a process pool of ``workers``) or ``ray`` (Ray tasks; ``address`` of a
            running cluster, or a local instance of ``workers`` CPUs). Ray workers return the row
            groups to this process, which alone writes files: the nodes need no shared file system.
    Returns:
        The final manifest (``status: complete``, ``shards`` listed per split).
    Raises:
        DatasetError: ``out`` holds another spec's dataset, foreign files, or the other storage form;
            the leak check failed.
        LayoutError: the layout search failed (checked on a few samples before anything is written).
    """
    out = Path(out)
    check_backend(backend)
    if shard_bytes < 1:
        raise DatasetError([("--shard-mb", f"shard size {shard_bytes} bytes must be positive, e.g. --shard-mb 256 (268435456 bytes)")])
    sizes = spec.split_sizes()
    for split, n in sizes.items():
        for i in range(min(n, 4)):
            sample_record(spec, split, i)
    with FolderLock(out, DatasetError, "dataset", wait=not overwrite):  # as mosaic.dataset.generate
        return _generate_parquet_locked(spec, out, workers, overwrite, masks, shard_bytes, renderer, on_progress, backend, address,
                                        verify, sizes)


def _generate_parquet_locked(spec, out, workers, overwrite, masks, shard_bytes, renderer, on_progress, backend, address, verify,
                             sizes) -> dict:
    existing = check_out_dir(out, spec, masks, overwrite, "parquet")
    clear_root_temps(out)  # a killed writer's .manifest.json.tmp<pid>.<hex> (this process holds the dataset's lock)
    repaired: list[str] = []
    if existing is not None and existing.get("status") == "complete":
        report = verify_dataset(out, deep=verify, manifest=existing)  # quick check (verify: every shard's sha256)
        if report.ok:
            if on_progress:
                on_progress(sum(sizes.values()), sum(sizes.values()))
            return existing
        repaired = [d.path for d in report.damage]
        mark_shards_for_regeneration(out, report)  # then resume below: exactly those shards are written again
        existing = read_manifest(out)
    if existing is not None:
        if (why := layout_problem(existing)) is not None or not isinstance(existing.get("parquet"), dict):
            raise DatasetError(f"{out}/{MANIFEST} is damaged ({why or 'no parquet record'}): the shards cannot be written again by "
                               f"its layout; rerun with --overwrite to start again")  # resumed by an edited layout: deleted shards
        was = existing.get("parquet", {}).get("shard_bytes")
        if was != int(shard_bytes):
            raise DatasetError([("--shard-mb", f"{out} was started with shard size {shard_mb_text(was)} MiB ({was} bytes), not "
                                 f"{shard_mb_text(int(shard_bytes))} MiB: rerun with --shard-mb {shard_mb_text(was)} to resume, or "
                                 "--overwrite to start again")])
        plan = {s: int(r) for s, r in existing["parquet"]["rows_per_shard"].items()}
    else:
        plan = {s: _estimate(spec, s, n, masks, renderer, shard_bytes) for s, n in sizes.items() if n > 0}
    executor = make_executor(backend, workers, address)
    own_parquet_folders(out)
    _clear_partial(out)
    keep = {"repairing": existing["repairing"]} if existing is not None and existing.get("repairing") else {}  # stopped, still a repair
    write_manifest(out / MANIFEST, {**parquet_manifest(spec, masks, renderer, "incomplete", plan, shard_bytes), **keep})
    spec_data = spec.to_dict()
    try:
        write_shards(spec, out, plan, masks, render_rows, lambda s, a, b: (spec_data, s, a, b, masks, renderer), executor, on_progress)
    except BaseException as e:
        executor.close(cancel=True)
        if isinstance(e, (KeyboardInterrupt, MosaicError)):
            raise
        raise DatasetError(f"generation stopped: {e}. Rerun the same command to resume.") from e
    executor.close()
    if existing is not None and existing.get("repairing"):  # before the manifest says complete (attack round 24)
        check_repaired_shards(out, existing)
    man = finalize_parquet(spec, out, masks, renderer, plan, shard_bytes)
    if existing is not None and existing.get("repairing"):
        return {**man, "repaired": repaired or existing["repairing"]["shards"]}
    return man


def finalize_parquet(spec: Spec, out: Path, masks: bool, renderer: str, plan: dict, shard_bytes: int) -> dict:
    """Check every shard, run the leak check streaming over the shards, write manifest and card."""
    man = parquet_manifest(spec, masks, renderer, "incomplete", plan, shard_bytes)
    shards: dict[str, list] = {}
    for split, n in spec.split_sizes().items():
        shards[split] = []
        if n == 0:
            continue
        n_shards = -(-n // plan[split])
        for k in range(n_shards):
            name = shard_name(split, k, n_shards)
            info = _shard_done(out, split, k, name, min(n, (k + 1) * plan[split]) - k * plan[split])
            if info is None:
                raise DatasetError(f"shard data/{name} is missing or incomplete: rerun the same command to resume")
            shards[split].append({x: info[x] for x in ("name", "rows", "bytes", "sha256")})
    man["shards"] = shards
    tally = Tally(spec)
    for split in spec.split_sizes():
        tally.begin(split)
        expect = 0
        for rec in iter_records(out, split, columns=["index", "concepts"], manifest=man):
            if rec["index"] != expect:
                raise DatasetError(f"split {split!r}: shard rows are out of order at index {expect}; rerun with --overwrite")
            tally.add(split, rec["index"], rec["concepts"])
            expect += 1
    man["leak_check"] = tally.report()
    if not man["leak_check"]["passed"]:
        man["status"] = "failed_leak_check"
        write_manifest(out / MANIFEST, man)
        failed = [k for k, c in man["leak_check"]["checks"].items() if not c["passed"]]
        raise DatasetError(f"the generated dataset at {out} failed its leak check ({', '.join(failed)}); see manifest.json")
    man["status"] = "complete"
    write_card(out, spec, man, "parquet")  # the card first: a failure here leaves the dataset unfinished, so a rerun finishes it
    write_manifest(out / MANIFEST, man)
    return man


# ----------------------------------------------------------------------------------------------
# reading and verifying
# ----------------------------------------------------------------------------------------------

def shard_paths(out: str | Path, split: str, manifest: dict | None = None) -> list[Path]:
    """The shard files of a split, in index order (from the manifest)."""
    man = manifest or read_manifest(out)
    return [Path(out) / "data" / s["name"] for s in man.get("shards", {}).get(split, [])]


def verify_parquet(out: str | Path, manifest: dict | None = None, deep: bool = False) -> None:
    """Check that every shard of a Parquet dataset is present and whole.

    Checks each shard listed in the manifest: the file exists, has the recorded size, its footer
    reads and holds the recorded rows; with ``deep`` also its sha256 and each row's image and mask
    PNG header against the spec's ``image.size``.

    Raises:
        DatasetError: listing every missing or damaged shard by name (``data/<name>``).
    """
    out = Path(out)
    man = manifest or read_manifest(out)
    problems = check_shards(out, man, deep)  # the one shard check (mosaic.shard_checks), shared with `mosaic verify`
    if problems:
        problems.append(("", f"regenerate the dataset (`mosaic generate ... --format parquet --out {out} --overwrite`) or restore the shards"))
        raise DatasetError(problems, source=str(out))


def iter_records(out: str | Path, split: str, columns: list[str] | None = None, manifest: dict | None = None,
                 batch_rows: int = 1024) -> Iterator[dict]:
    """The rows of one split of a Parquet dataset, in index order, as dicts (``columns``: a subset).

    Memory: one batch of ``batch_rows`` rows at a time. Images are ``{"bytes", "path"}`` dicts.
    Raises DatasetError naming a missing or damaged shard.
    """
    for p in shard_paths(out, split, manifest):
        try:
            f = pq.ParquetFile(p)
            for batch in f.iter_batches(batch_size=batch_rows, columns=columns):
                yield from batch.to_pylist()
        except FileNotFoundError:
            raise DatasetError(f"shard data/{p.name} of {out} is missing: regenerate the dataset or restore the shard") from None
        except (OSError, pa.ArrowException) as e:
            raise DatasetError(f"shard data/{p.name} of {out} is damaged ({e}): regenerate the dataset or restore the shard") from None


__all__ = [
    "DEFAULT_SHARD_BYTES", "FORMAT", "STORAGES", "check_format", "finalize_parquet", "generate_parquet",
    "iter_records", "present_splits", "shard_name", "shard_paths", "storage_of", "verify_parquet",
]
