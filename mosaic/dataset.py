"""Writing and reading mosaic datasets.

Layout of a dataset directory ``OUT``::

    OUT/manifest.json                resolved spec, fingerprint, versions, per-split counts, leak check, status
    OUT/README.md                    dataset card: ``datasets.load_dataset(OUT)`` gives exactly the splits
    OUT/<split>/metadata.jsonl       one JSON object per sample, in index order
    OUT/<split>/images/NNNNNN.png    sRGB images, uint8
    OUT/<split>/masks/NNNNNN.png     instance masks (optional): 0 background, k = object k-1
    OUT/.mosaic/parts/               per-shard metadata while generating (resume state)

That is the ``imagefolder`` form; ``format="parquet"`` writes sharded Parquet instead
(:mod:`mosaic.parquet`), and :func:`mosaic.export.export` converts between the two. Both load with
``datasets.load_dataset(OUT)`` (through the card, :mod:`mosaic.hf`) and with
:class:`mosaic.torch_data.MosaicDataset`; :func:`read_metadata` / :func:`iter_metadata` read the
records of either form.

Generation is sharded; a shard is a pure function of ``(spec, split, shard)``, so any number of
workers (local processes or Ray tasks) gives the same bytes and an interrupted run resumes by
redoing only the shards without a finished part file. Whole-dataset steps (merging the metadata,
the leak check, the counts) stream the records and keep only per-cell and per-value counts
(:class:`mosaic.tally.Tally`), so memory does not grow with the dataset.

Format ``mosaic-dataset/2`` (this version): records carry ``labels`` (concept -> value index) and
``combination`` as text (:func:`mosaic.hf.hf_record`), and PNGs are written by
:func:`mosaic.png.encode_png` (same pixels as version 1, other bytes).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections import deque
from pathlib import Path
from typing import Callable, Iterator

from mosaic.against_spec import regenerate_command
from mosaic.checksums import (
    MAX_LINE_BYTES, TOO_LONG, bounded_lines, clear_root_temps, metadata_checked, metadata_size_checked, name_problem, text_problem,
    write_checksums,
)
from mosaic.errors import DatasetError, MosaicError
from mosaic.executors import LocalExecutor, check_backend, make_executor
from mosaic.hf import mosaic_split, write_card
from mosaic.io import (atomic_write, atomic_writer, clear_temps, open_own,
                       output_dir_problem, own_folders)
from mosaic.locks import FolderLock
from mosaic.manifest_io import write_manifest
from mosaic.part_files import check_part_record, check_resumed_record, part_files as _part_files, part_head, rendered_digests
from mosaic.png import encode_png
from mosaic.records import (  # noqa: F401 - re-exported: the dataset API of mosaic.dataset
    FORMAT, MANIFEST, base_manifest, check_out_dir, package_versions, png_bytes, read_manifest, record_claims, sample_line, sample_record,
    spec_from_data, spec_key, spec_of,
)
from mosaic.repair import check_and_repair, mark_shards_for_regeneration, repair
from mosaic.shard_checks import shard_bounds
from mosaic.sampling import prefetch_scenes
from mosaic.spec import Spec
from mosaic.tally import Tally
from mosaic.verify import VerifyReport, read_manifest_checked, verify as verify_dataset
from renderers import RENDER_CHUNK, backend_of, get_renderer

DEFAULT_SHARD_SIZE = 256
#: a split's ``metadata.jsonl`` up to this size is read whole by :func:`iter_metadata`, so that bytes the quick
#: check found clean are known by their digest and not checked again; a larger one is checked line by line
CHECKED_READ_BYTES = 512 << 20


# ----------------------------------------------------------------------------------------------
# small file helpers
# ----------------------------------------------------------------------------------------------

def resolve_split(root: str | Path, split: str, manifest: dict | None = None) -> str:
    """The split of a dataset that ``split`` names (``validation`` and ``val`` are the same split).

    Raises:
        DatasetError: the dataset has no such split; the message lists the splits it has.
    """
    man = manifest or read_manifest(root)
    name = mosaic_split(split)
    if not isinstance(name, str) or name not in man.get("splits", {}):  # a list of splits was a TypeError (unhashable)
        order = ["train", "val", "test", "test_id", "test_ood"]
        splits = sorted(man.get("splits", {}).items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0]))
        have = ", ".join(f"{s} ({v['count']})" for s, v in splits)
        raise DatasetError([("split", f"{root} has no split {split!r}; its splits: {have or 'none'}"
                             + (" (val is also called validation)" if "val" in man.get("splits", {}) else ""))])
    return name


def iter_metadata(root: str | Path, split: str, manifest: dict | None = None) -> Iterator[dict]:
    """The per-sample records of one split, in index order, one at a time (either storage form).

    Parquet rows come without their image bytes; ``file_name`` (and ``mask_file_name``) name the
    image as in the imagefolder form.

    Raises:
        DatasetError: no such split (the splits that exist are listed), a missing metadata file or shard.
    """
    from mosaic.parquet import iter_records, storage_of

    if manifest is None and not (Path(root) / MANIFEST).is_file():  # a bare folder of images + metadata.jsonl
        man = {"splits": {split: {"count": None}}}
    else:
        man = manifest or read_manifest(root)
    split = resolve_split(root, split, man)
    claims = _claims_check(root, split, man)
    if storage_of(man) == "parquet":
        shard_bounds(root, split, man)  # no page decompresses to more than mosaic writes (a bomb is refused unread)
        cols = [c for c in ("index", "split", "concepts", "labels", "combination", "held_out", "caption", "num_objects", "scene")]
        for rec in iter_records(root, split, columns=cols, manifest=man):
            rec["file_name"] = f"images/{rec.get('index')!s:0>6}.png"  # the record's form, as the imagefolder one
            if man.get("masks"):
                rec["mask_file_name"] = f"masks/{rec.get('index')!s:0>6}.png"
            claims(rec, f"{root}/data ({split} sample {rec.get('index')})")
            yield rec
        return
    path = Path(root) / split / "metadata.jsonl"
    if not path.is_file():
        raise DatasetError(f"split {split!r} of {root}: {path} is missing; regenerate the dataset (`mosaic generate ... --overwrite`)")
    own = manifest is not None or (Path(root) / MANIFEST).is_file()  # a mosaic dataset: each record names its own files
    with path.open("rb") as f:
        lines, checked = f, False
        key, masks = ((spec_key(man["spec"]), split), bool(man.get("masks"))) if isinstance(man.get("spec"), dict) else (None, False)
        if own and key and metadata_size_checked(size := os.fstat(f.fileno()).st_size, masks, key) and size <= CHECKED_READ_BYTES:
            # the very bytes read, whole (only a file of a size the quick check found clean): when the quick check found
            # bytes of this digest clean (every line's text, file names and record claims for this spec and split), they
            # are parsed only, not checked a second time
            data = f.read(size + 1)
            if len(data) > size:  # mosaic's writers replace a file whole: this one grows in place
                raise DatasetError(f"{path} grew while it was read (another program writes it): read the dataset when it is done")
            checked = metadata_checked(hashlib.sha256(data).hexdigest(), masks, key)
            lines = io.BytesIO(data)
        for k, line in enumerate(bounded_lines(lines), start=1):
            if checked:
                yield json.loads(line)
                continue
            if line is TOO_LONG:
                raise DatasetError([(f"{path}:{k}", f"longer than {MAX_LINE_BYTES:,} bytes, which no record is (not read): the file "
                                     f"is damaged; `mosaic verify {root}` names every damaged line, `--repair` rewrites them")])
            if not line.strip() and not own:
                continue
            try:
                rec = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                raise DatasetError([(f"{path}:{k}", f"not a JSON record ({type(e).__name__}: {str(e)[:80]}): the file is damaged; "
                                     f"`mosaic verify {root}` names every damaged line, `--repair` rewrites them")]) from None
            if not isinstance(rec, dict):
                raise DatasetError([(f"{path}:{k}", f"a {type(rec).__name__}, not a record: the file is damaged; `mosaic verify {root} --repair`")])
            if own and (why := (f"its index is {str(rec.get('index'))[:40]!r}, not {k - 1}" if type(rec.get("index")) is not int or rec["index"] != k - 1
                                else name_problem(rec, k - 1) or text_problem(line.decode("utf-8").removesuffix("\n"), rec))) is not None:
                raise DatasetError([(f"{path}:{k}", f"not the record of sample {k - 1}: {why}; `mosaic verify {root}` names every "
                                     "damaged line, `--repair` rewrites them")])
            claims(rec, f"{path}:{k}")
            yield rec


def _claims_check(root, split: str, man: dict):
    """``check(rec, where)``: raise DatasetError when a record of ``split`` claims what its concepts
    and the manifest's spec do not give (:func:`mosaic.records.record_claims`: a held-out
    combination in a seen split, a ``held_out`` flag or ``labels`` not its concepts'); a no-op for a
    bare folder (no spec)."""

    if not isinstance(man.get("spec"), dict):
        return lambda rec, where: None
    claims = record_claims(spec_from_data(man["spec"]), split)

    def check(rec: dict, where: str) -> None:
        why = claims(rec)
        if why is not None:
            raise DatasetError([(where, f"{why}: the record contradicts the dataset's own spec, so it is never read (files "
                                        f"rewritten together with their digests, or by another tool). Regenerate the dataset "
                                        f"(`{regenerate_command(root, man)}`), or use a copy you trust")])
    return check


def read_metadata(root: str | Path, split: str) -> list[dict]:
    """The per-sample records of one split, in index order (a list: :func:`iter_metadata` streams).

    Raises:
        DatasetError: no such split (the splits that exist are listed), a missing metadata file or shard.
    """
    return list(iter_metadata(root, split))


def _write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path``, a file of the dataset's own (:func:`mosaic.io.open_own`): a symbolic
    link or a hard link to a file outside the dataset standing at that name is unlinked first, never
    written through; a rerun's own old file is truncated and written again."""
    fd = open_own(path, os.O_WRONLY)  # no O_TRUNC in the open: it would empty a hard link's outside file before the check
    try:
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _rendered(spec: Spec, rend, split: str, start: int, stop: int, masks: bool):
    """``(index, (line, record, scene), (image, mask or None))`` of samples ``start..stop-1`` of ``split``, in
    order: :func:`sample_line` and the renderer's image (and mask with ``masks``), ``RENDER_CHUNK`` at a time
    (:meth:`renderers.base.Renderer.render_batch`: the shaded renderer shades them in one set of array operations)."""
    for a in range(start, stop, RENDER_CHUNK):
        idx = range(a, min(stop, a + RENDER_CHUNK))
        prefetch_scenes(spec, split, idx)  # their layouts' occlusion checks in batches (shaded specs)
        rows = [sample_line(spec, split, i, f"masks/{i:06d}.png" if masks else None) for i in idx]
        yield from zip(idx, rows, rend.render_batch([r[2] for r in rows], masks))


def render_shard(spec_data: dict, out: str, split: str, shard: int, start: int, stop: int, masks: bool, renderer: str = "pillow") -> int:
    """Render samples ``start..stop-1`` of ``split`` into ``out`` and write the shard's part file.

    The part file (``.mosaic/parts/<split>-NNNNNN.jsonl``, written last and atomically: it marks the
    shard finished) starts with a header line ``{"start", "stop", "concepts"}`` (each sample's
    concept values, in concept order, for the leak check) followed by the records. Pure in
    ``(spec, split, shard)``: rerunning it rewrites identical bytes. Returns the number of samples
    written.

    Without ``masks`` no instance mask is drawn (:meth:`renderers.base.Renderer.render_image`).
    """
    spec = spec_from_data(spec_data)
    rend = get_renderer(backend_of(spec, renderer), supersample=spec.image.supersample)
    img_dir = os.path.join(out, split, "images")
    mask_dir = os.path.join(out, split, "masks")
    names = list(spec.concepts)
    lines, concepts, digests = [], [], []
    for index, (line, rec, _scene), (image, mask) in _rendered(spec, rend, split, start, stop, masks):
        # plain writes: a shard's images count only once its part file exists (written last,
        # atomically), and a resumed run rewrites every image of an unfinished shard
        png = encode_png(image)
        _write_file(os.path.join(img_dir, f"{index:06d}.png"), png)
        digests.append(hashlib.sha256(png).hexdigest())  # finalize digests the files against these (a file swapped meanwhile)
        if masks:
            png = encode_png(mask)
            _write_file(os.path.join(mask_dir, f"{index:06d}.png"), png)
            digests.append(hashlib.sha256(png).hexdigest())
        lines.append(line)  # json.dumps(record, sort_keys=True), written straight from the scene
        concepts.append([rec["concepts"].get(c) for c in names])
    header = json.dumps({"start": start, "stop": stop, "concepts": concepts, "sha256": digests})
    part = Path(out) / ".mosaic" / "parts" / f"{split}-{shard:06d}.jsonl"
    atomic_write(part, (header + "\n" + "".join(ln + "\n" for ln in lines)).encode())
    return stop - start


def generate(
    spec: Spec,
    out: str | Path,
    workers: int = 1,
    overwrite: bool = False,
    masks: bool = False,
    shard_size: int = DEFAULT_SHARD_SIZE,
    renderer: str = "pillow",
    on_progress: Callable[[int, int], None] | None = None,
    format: str = "imagefolder",
    backend: str = "local",
    address: str | None = None,
    shard_bytes: int | None = None,
    splits: list[str] | None = None,
    verify: bool = False,
) -> dict:
    """Generate the dataset of ``spec`` into ``out``; resume an interrupted run of the same spec.

    On a finished dataset it runs a quick check (counts, presence, PNG trailers, sizes; ``verify``:
    every file's sha256) and regenerates exactly the damaged samples, byte-identically
    (:func:`mosaic.repair.check_and_repair`); the returned manifest then lists them under
    ``repaired`` (not written to disk). The folder is locked while this runs
    (:class:`mosaic.locks.FolderLock`): a second generation of the same spec waits for this one (then
    finds the dataset complete); ``--overwrite`` of it from another process stops, naming this one;
    worker processes end with this one.

    Args:
        workers: processes (1 = in this process), or CPUs of a local Ray instance. The output does
            not depend on it.
        overwrite: replace an existing mosaic dataset at ``out``.
        masks: also write instance-mask PNGs.
        shard_size: samples per task of the imagefolder form (resume granularity).
        on_progress: called as ``on_progress(done, total)`` after each shard (row group for Parquet).
        format: ``imagefolder`` (PNG files + ``metadata.jsonl``) or ``parquet`` (sharded Parquet,
            :func:`mosaic.parquet.generate_parquet`, shards of about ``shard_bytes``, 256 MiB by default).
        backend: ``local`` (a process pool) or ``ray`` (Ray tasks on the cluster at ``address``, or
            a local Ray instance of ``workers`` CPUs). With Ray, imagefolder tasks write their files
            themselves, so every node must see ``out`` at the same path; Parquet tasks return their
            rows to this process, which alone writes.
        splits: write only these splits (imagefolder form; e.g. all but ``train`` when training
            streams it, :mod:`mosaic.stream`); the manifest lists the others under ``not_written``.
    Returns:
        The final manifest (``status: complete``).
    Raises:
        DatasetError: an unknown format or backend, ``--address`` without Ray (all before anything
            is written); ``out`` holds another spec's dataset, the other storage form or foreign
            files; the leak check failed.
        LayoutError: the layout search failed (checked on a few samples before anything is written).
    """
    from mosaic.parquet import DEFAULT_SHARD_BYTES, check_format, generate_parquet

    check_format(format)
    check_backend(backend)
    dataset_out_check(out)
    if address and backend != "ray":
        raise DatasetError([("--address", f"--address {address!r} applies to --backend ray only: drop it or add --backend ray")])
    if splits is not None:
        unknown = [x for x in splits if x not in spec.split_sizes()]
        if unknown or format != "imagefolder":
            raise DatasetError([("splits", f"{unknown} are not splits of the spec ({', '.join(spec.split_sizes())})" if unknown
                                 else "writing a subset of the splits needs format imagefolder")])
    if format == "parquet":
        return generate_parquet(spec, out, workers=workers, overwrite=overwrite, masks=masks,
                                shard_bytes=shard_bytes or DEFAULT_SHARD_BYTES, renderer=renderer,
                                on_progress=on_progress, backend=backend, address=address, verify=verify)
    out = Path(out)
    sizes = {k: n for k, n in spec.split_sizes().items() if splits is None or k in splits}
    # fail before writing anything when the first scenes of a split cannot be laid out
    for split, n in sizes.items():
        for i in range(min(n, 4)):
            sample_record(spec, split, i)
    # one writer at a time: a second generation of this spec waits for the first (then finds it complete);
    # --overwrite never waits: it stops, naming the process that writes the folder
    with FolderLock(out, DatasetError, "dataset", wait=not overwrite):
        return _generate_locked(spec, out, workers, overwrite, masks, shard_size, renderer, on_progress, verify, sizes,
                                backend, address)


def refuse_linked_root(root: str | Path, field: str = "out") -> None:
    """A dataset is written (generated, repaired, exported to) only at its real folder: a symbolic link
    given as the folder is refused, naming its target (``generate --out LINK`` of a finished dataset and
    ``verify LINK --repair`` wrote through it; ``export --out LINK`` said "not empty")."""
    if os.path.islink(root):
        raise DatasetError([(field, f"{str(root)!r} is a symbolic link (to {os.readlink(root)}): a dataset is written only at its "
                             f"real folder, never through a link; give {os.path.realpath(root)}")])


def dataset_out_check(out: str | Path, field: str = "out") -> None:
    """The output check of a dataset writer's API (``generate``, ``export``, a training config's
    ``dataset.root``), as the CLI's ``--out`` (:func:`mosaic.io.output_dir_problem` with ``dataset=True``):
    ``out`` may be a dataset, never a folder inside another (a run's ``dataset.root: data/count`` generated
    its dataset inside ``data/count``, which every reader then refused), a file or an unwritable place.

    Raises:
        DatasetError: naming ``out`` and why."""
    refuse_linked_root(out, field)
    problem = output_dir_problem(out, dataset=True)
    if problem:
        raise DatasetError([(field, f"{str(out)!r} {problem}: give a folder (created if missing) in a writable place")])


def _generate_locked(spec, out, workers, overwrite, masks, shard_size, renderer, on_progress, verify, sizes, backend, address) -> dict:
    existing = check_out_dir(out, spec, masks, overwrite, "imagefolder")
    clear_root_temps(out)  # a killed writer's .manifest.json.tmp<pid>.<hex> (this process holds the dataset's lock)
    if existing is not None and set(existing["splits"]) != set(sizes):
        raise DatasetError(f"{out} holds the splits {', '.join(existing['splits'])}, not {', '.join(sizes)}: use another --out, or --overwrite")
    if existing is not None and existing.get("status") == "complete":
        report = check_and_repair(out, deep=verify, sample_fn=sample_record, png_fn=png_bytes)
        if on_progress:
            total = sum(sizes.values())
            on_progress(total, total)
        if not report.ok:
            return {**read_manifest(out), "repaired": [d.path for d in report.damage]}
        return existing

    def unfinished():  # (split, shard, start, stop) of each shard without a part file, made on the fly (no list)
        for split, n in sizes.items():
            for shard, start in enumerate(range(0, n, shard_size)):
                if not (out / ".mosaic" / "parts" / f"{split}-{shard:06d}.jsonl").is_file():
                    yield split, shard, start, min(n, start + shard_size)

    total = sum(sizes.values())
    n_tasks = todo_samples = 0
    todo_parts = set()
    for t in unfinished():
        n_tasks += 1
        todo_samples += t[3] - t[2]
        todo_parts.add(f"{t[0]}-{t[1]:06d}.jsonl")
    done = total - todo_samples
    executor = make_executor(backend, workers, address) if backend != "local" or n_tasks > 1 else LocalExecutor(1)
    try:
        if out.is_symlink():
            raise DatasetError([("--out", f"{out} is a symbolic link: a dataset is never written through a link; give the real folder")])
        own_folders(out, [".mosaic/parts"] + [f"{split}/{sub}" for split in sizes for sub in (("images", "masks") if masks else ("images",))])
    except OSError as e:
        executor.close(cancel=True)
        raise DatasetError([("--out", f"cannot write {out}: {e.strerror}; give a writable folder")]) from None
    except DatasetError:
        executor.close(cancel=True)
        raise
    write_manifest(out / MANIFEST, _imagefolder_manifest(spec, masks, renderer, "incomplete", sizes))
    if on_progress:
        on_progress(done, total)
    spec_data, root = spec.to_dict(), str(out.resolve())
    todo, pending = unfinished(), deque()
    try:
        while True:
            while len(pending) < executor.window and (t := next(todo, None)) is not None:
                pending.append(executor.submit(render_shard, spec_data, root, *t, masks, renderer))
            if not pending:
                break
            done += executor.result(pending.popleft())
            if on_progress:
                on_progress(done, total)
    except BaseException as e:
        executor.close(cancel=True)
        if isinstance(e, (KeyboardInterrupt, MosaicError)):
            raise
        raise DatasetError(f"generation stopped after {done} of {total} samples: {e}. Rerun the same command to resume.") from e
    executor.close()
    return finalize(spec, out, masks, renderer, list(sizes), written=todo_parts)


def _imagefolder_manifest(spec: Spec, masks: bool, renderer: str, status: str, sizes: dict) -> dict:
    man = base_manifest(spec, masks, renderer, status, "imagefolder")
    man["splits"] = {k: {"count": n} for k, n in sizes.items()}
    not_written = {k: n for k, n in spec.split_sizes().items() if k not in sizes}
    if not_written:
        man["not_written"] = not_written
    return man


def finalize(spec: Spec, out: Path, masks: bool, renderer: str = "pillow", splits: list[str] | None = None,
             written: set[str] | None = None) -> dict:
    """Merge shard part files into each split's ``metadata.jsonl``, run the leak check, write the
    manifest (``status: complete``) and the dataset card.

    ``written``: the names of the part files this process wrote (None: all of them). Every record of
    any other part file (left by an interrupted run, or put there) is compared byte for byte with the
    record the spec gives its index (:func:`sample_line`: 0.08 CPU ms a flat record, 1.6 a shaded one), so a resumed
    dataset holds only the spec's records (attack round 22: labels swapped between two samples,
    header and all, were merged).

    Streams: the records are copied part file by part file, and the leak check counts the concept
    values of each part's header (:class:`mosaic.tally.Tally`), so memory does not grow with the
    dataset.

    Raises:
        DatasetError: a missing or inconsistent part file; the leak check failed.
    """
    sizes = {k: n for k, n in spec.split_sizes().items() if splits is None or k in splits}
    parts = out / ".mosaic" / "parts"
    man = _imagefolder_manifest(spec, masks, renderer, "incomplete", sizes)
    names = list(spec.concepts)
    tally = Tally(spec)
    for split, n in sizes.items():
        tally.begin(split)
        target = out / split / "metadata.jsonl"
        clear_temps(target)  # an interrupted finalize's temporary file, or a link planted at its name (removed, not followed)
        expect = 0
        # a unique temporary file (O_EXCL | O_NOFOLLOW) renamed over metadata.jsonl; removed on any error (a full disk)
        with atomic_writer(target) as dst:
            for part in _part_files(parts, split):
                with part.open("rb") as src:
                    head = part_head(part, split, src.readline(MAX_LINE_BYTES + 1))
                    if head.get("start") != expect:
                        raise DatasetError(f"split {split!r}: part file {part.name} starts at index {head.get('start')}, "
                                           f"expected {expect}; rerun with --overwrite")
                    if len(head["concepts"]) != head["stop"] - head["start"]:
                        raise DatasetError(f"split {split!r}: part file {part.name} is damaged; delete it and rerun the same command")
                    # line by line (each at most MAX_LINE_BYTES, never the whole body held): a planted part file of one
                    # 20 GB line, sparse on disk, was read whole on the rerun
                    lines = bounded_lines(src)
                    resumed = written is not None and part.name not in written
                    for i, vals in enumerate(head["concepts"], start=head["start"]):
                        line = next(lines, b"")
                        check_part_record(spec, split, part, i, line, vals, names)  # the records the leak check counts
                        if resumed:
                            if (i - head["start"]) % RENDER_CHUNK == 0:  # shaded layouts sampled together (-20 %)
                                prefetch_scenes(spec, split, range(i, min(head["stop"], i + RENDER_CHUNK)))
                            check_resumed_record(spec, split, part, i, line, masks)
                        tally.add(split, i, dict(zip(names, vals)))
                        dst.write(line)
                    if next(lines, None) is not None:
                        raise DatasetError(f"split {split!r}: part file {part.name} holds more records than its header gives; "
                                           "delete it and rerun the same command")
                expect = head["stop"]
            if expect != n:
                raise DatasetError(f"split {split!r}: {expect} records on disk, expected {n}; rerun the same command to resume")
        man["splits"][split] = {"count": n}
    man["leak_check"] = tally.report()
    if not man["leak_check"]["passed"]:
        man["status"] = "failed_leak_check"
        write_manifest(out / MANIFEST, man)
        failed = [k for k, c in man["leak_check"]["checks"].items() if not c["passed"]]
        raise DatasetError(f"the generated dataset at {out} failed its leak check ({', '.join(failed)}); see manifest.json")
    # every file read back and digested (mosaic verify), one line written per file as it is hashed; the
    # records are file names only, made on the fly: nothing here grows with the dataset
    man["checksums"] = write_checksums(out, {k: _file_names(k, n, masks) for k, n in sizes.items()},
                                       expected={k: rendered_digests(parts, k, masks) for k in sizes})
    man["status"] = "complete"
    write_card(out, spec, man, "imagefolder")  # the card first: a failure here (a full disk) leaves the dataset unfinished, so a rerun finishes it
    write_manifest(out / MANIFEST, man)
    return man


class _file_names:
    """The file names of a split's records (``file_name``, ``mask_file_name``), generated, not stored."""

    def __init__(self, split: str, n: int, masks: bool):
        self.n, self.masks = n, masks

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            r = {"file_name": f"images/{i:06d}.png"}
            if self.masks:
                r["mask_file_name"] = f"masks/{i:06d}.png"
            yield r


# ----------------------------------------------------------------------------------------------
# repair (either storage form)
# ----------------------------------------------------------------------------------------------

def repair_dataset(root: str | Path, report: VerifyReport) -> VerifyReport:
    """Repair what ``report`` (:func:`mosaic.verify.verify`) found and return a new check of the
    same depth (``mosaic verify --repair``), byte-identically: an imagefolder dataset gets its damaged
    samples rendered again with the generator's own record and PNG functions
    (:func:`mosaic.repair.repair`); a Parquet dataset gets its damaged shards written again by
    :func:`mosaic.parquet.generate_parquet`, which resumes.

    Raises:
        DatasetError: see :func:`mosaic.repair.repair`; a Parquet shard that regenerates to other bytes.
    """
    root = Path(root)
    refuse_linked_root(root, "DIR")
    with FolderLock(root, DatasetError, "dataset", wait=True):
        man = read_manifest_checked(root)
        clear_root_temps(root)
        if report.ok:
            return report
        if man.get("storage", "imagefolder") == "imagefolder":
            return repair(root, report, sample_fn=sample_record, png_fn=png_bytes)
        from mosaic.parquet import generate_parquet

        if man.get("repairing") and man.get("status") == "incomplete":
            pass  # a repair that was stopped: resumed (generate_parquet writes the marked shards), never sent elsewhere
        elif not report.repairable:
            raise DatasetError(report.problems(), source=str(root))
        else:
            mark_shards_for_regeneration(root, report)
        generate_parquet(spec_from_data(man["spec"]), root, masks=bool(man.get("masks")), shard_bytes=man["parquet"]["shard_bytes"],
                         renderer=man.get("renderer", {}).get("name", "pillow"))
        return verify_dataset(root, deep=report.deep)
