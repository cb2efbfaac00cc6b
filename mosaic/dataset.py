"""Writing and reading mosaic datasets.

Layout of a dataset directory ``OUT``::

    OUT/manifest.json                resolved spec, fingerprint, versions, per-split counts, status
    OUT/<split>/metadata.jsonl       one JSON object per sample, in index order
    OUT/<split>/images/NNNNNN.png    sRGB images, uint8
    OUT/<split>/masks/NNNNNN.png     instance masks (optional): 0 background, k = object k-1
    OUT/.mosaic/parts/               per-shard metadata while generating (resume state)

It loads with ``datasets.load_dataset("imagefolder", data_dir=OUT)`` and with
:class:`mosaic.torch_data.MosaicDataset` (torch). Generation is sharded; a shard is a pure function of
``(spec, split, shard)``, so any number of workers gives the same bytes and an interrupted run
resumes by redoing only the shards without a finished part file.
"""

from __future__ import annotations

import io
import json
import platform
import shutil
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from importlib import metadata as importlib_metadata
from multiprocessing import get_context
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from mosaic.errors import DatasetError, LayoutError
from mosaic.io import atomic_write, atomic_write_json
from mosaic.holdout import combination_of, is_held_out, leak_check
from mosaic.labels import caption, read_labels
from mosaic.sampling import sample_scene
from mosaic.spec import Spec, parse_spec

FORMAT = "mosaic-dataset/1"
MANIFEST = "manifest.json"
PNG_COMPRESS_LEVEL = 1  # fast zlib level; lossless, so images are identical at any level
DEFAULT_SHARD_SIZE = 128


# ----------------------------------------------------------------------------------------------
# small file helpers
# ----------------------------------------------------------------------------------------------

def png_bytes(array: np.ndarray) -> bytes:
    """PNG encoding of a uint8 ``[H, W, 3]`` (RGB) or ``[H, W]`` (L) array."""
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buf.getvalue()


def package_versions() -> dict[str, str]:
    """Versions of the packages that determine a dataset's bytes."""
    out = {"python": platform.python_version()}
    for name in ("mosaic", "numpy", "pillow", "pydantic"):
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            out[name] = "unknown"
    return out


def read_manifest(root: str | Path) -> dict:
    """The manifest of a dataset directory. Raises DatasetError when missing or unreadable."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        raise DatasetError(f"{root} is not a mosaic dataset: {MANIFEST} is missing (make one with `mosaic generate SPEC --out {root}`)")
    try:
        man = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:  # not UTF-8, not JSON (truncated, overwritten)
        raise DatasetError(f"{path} is damaged ({type(e).__name__}: {str(e)[:120]}): restore it from a copy, or regenerate the "
                           f"dataset with `mosaic generate SPEC --out {root} --overwrite`") from None
    if not isinstance(man, dict):
        raise DatasetError(f"{path} is damaged (not a mapping): restore it from a copy, or regenerate the dataset with "
                           f"`mosaic generate SPEC --out {root} --overwrite`")
    return man


def read_metadata(root: str | Path, split: str) -> list[dict]:
    """The per-sample records of one split, in index order."""
    path = Path(root) / split / "metadata.jsonl"
    if not path.is_file():
        raise DatasetError(f"no split {split!r} in {root}: {path} is missing")
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def spec_of(root: str | Path) -> Spec:
    """The spec a dataset was generated from (from its manifest)."""
    return parse_spec(read_manifest(root)["spec"], source=f"{root}/{MANIFEST}")


# ----------------------------------------------------------------------------------------------
# generation
# ----------------------------------------------------------------------------------------------

def sample_record(spec: Spec, split: str, index: int) -> tuple[dict, "object"]:
    """The metadata record and scene of one sample (no image)."""
    scene, values = sample_scene(spec, split, index)
    reading = read_labels(scene, spec)
    if reading.problems or reading.values != values:  # labels(scene) must give back what was sampled
        raise LayoutError(
            f"sample {split}/{index}: labels do not read back ({'; '.join(reading.problems) or reading.values} "
            f"vs sampled {values}); this is a bug in mosaic, please report it with the spec"
        )
    combo = combination_of(spec, reading.values)
    rec = {
        "file_name": f"images/{index:06d}.png",
        "index": index,
        "split": split,
        "concepts": reading.values,
        "combination": list(combo) if combo is not None else None,
        "held_out": is_held_out(spec, reading.values),
        "caption": caption(scene, spec),
        "num_objects": len(scene.objects),
        "scene": scene.to_dict(),
    }
    return rec, scene


_SPEC_CACHE: dict[str, Spec] = {}


def _spec_from(spec_data: dict) -> Spec:
    key = json.dumps(spec_data, sort_keys=True)
    if key not in _SPEC_CACHE:
        _SPEC_CACHE[key] = parse_spec(spec_data)
    return _SPEC_CACHE[key]


def render_shard(spec_data: dict, out: str, split: str, shard: int, start: int, stop: int, masks: bool, renderer: str = "pillow") -> int:
    """Render samples ``start..stop-1`` of ``split`` into ``out`` and write the shard's part file.

    Pure in ``(spec, split, shard)``: rerunning it rewrites identical bytes. Returns the number of
    samples written.
    """
    from renderers import get_renderer

    spec = _spec_from(spec_data)
    rend = get_renderer(renderer, supersample=spec.image.supersample)
    root = Path(out)
    img_dir = root / split / "images"
    mask_dir = root / split / "masks"
    lines = []
    for index in range(start, stop):
        rec, scene = sample_record(spec, split, index)
        image, mask = rend.render_one(scene)
        # plain writes: a shard's images count only once its part file exists (written last,
        # atomically), and a resumed run rewrites every image of an unfinished shard
        (img_dir / f"{index:06d}.png").write_bytes(png_bytes(image))
        if masks:
            (mask_dir / f"{index:06d}.png").write_bytes(png_bytes(mask))
            rec["mask_file_name"] = f"masks/{index:06d}.png"
        lines.append(json.dumps(rec, sort_keys=True))
    part = root / ".mosaic" / "parts" / f"{split}-{shard:06d}.jsonl"
    atomic_write(part, ("\n".join(lines) + "\n").encode() if lines else b"")
    return stop - start


def _check_out_dir(out: Path, spec: Spec, masks: bool, overwrite: bool) -> dict | None:
    """Decide what to do with an existing ``out``: returns the manifest to resume, or None to start fresh."""
    if not out.exists():
        return None
    if out.is_file():
        raise DatasetError(f"--out {out} is a file: give a directory")
    has_manifest = (out / MANIFEST).is_file()
    if overwrite:
        if has_manifest or not any(out.iterdir()):
            shutil.rmtree(out)
            return None
        raise DatasetError(f"refusing to --overwrite {out}: it is not a mosaic dataset (no {MANIFEST}) and not empty; give another --out")
    if not has_manifest:
        if any(out.iterdir()):
            raise DatasetError(f"{out} exists, is not empty and holds no {MANIFEST}: give an empty or new --out directory")
        return None
    man = read_manifest(out)
    if man.get("fingerprint") != spec.fingerprint():
        raise DatasetError(
            f"{out} was generated from spec {man.get('name')!r} with fingerprint {man.get('fingerprint')}, but this spec "
            f"({spec.name!r}) has fingerprint {spec.fingerprint()}: use another --out, or --overwrite to replace it"
        )
    if bool(man.get("masks")) != bool(masks):
        raise DatasetError(f"{out} was generated {'with' if man.get('masks') else 'without'} masks: rerun with the same --masks setting, or --overwrite")
    return man


def _manifest(spec: Spec, masks: bool, renderer: str, status: str) -> dict:
    return {
        "format": FORMAT,
        "name": spec.name,
        "fingerprint": spec.fingerprint(),
        "status": status,
        "spec": spec.to_dict(),
        "renderer": {"name": renderer, "supersample": spec.image.supersample},
        "masks": masks,
        "versions": package_versions(),
        "splits": {k: {"count": n} for k, n in spec.split_sizes().items()},
    }


def generate(
    spec: Spec,
    out: str | Path,
    workers: int = 1,
    overwrite: bool = False,
    masks: bool = False,
    shard_size: int = DEFAULT_SHARD_SIZE,
    renderer: str = "pillow",
    on_progress: Callable[[int, int], None] | None = None,
    verify: bool = False,
) -> dict:
    """Generate the dataset of ``spec`` into ``out``; resume an interrupted run of the same spec.

    On a finished dataset it runs a quick check (counts, presence, PNG trailers, sizes; ``verify``:
    every file's sha256) and regenerates exactly the damaged samples, byte-identically
    (:func:`mosaic.verify.check_and_repair`); the returned manifest then lists them under
    ``repaired`` (not written to disk). The folder is locked while this runs
    (:class:`mosaic.locks.FolderLock`): a second generation of the same spec waits for this one (then
    finds the dataset complete); ``--overwrite`` of it from another process stops, naming this one; worker processes end with this one.

    Args:
        workers: processes (1 = in this process). The output does not depend on it.
        overwrite: replace an existing mosaic dataset at ``out``.
        masks: also write instance-mask PNGs.
        on_progress: called as ``on_progress(done, total)`` after each shard.
    Returns:
        The final manifest (``status: complete``).
    Raises:
        DatasetError: ``out`` holds another spec's dataset or foreign files.
        LayoutError: the layout search failed (checked on a few samples before anything is written).
    """
    out = Path(out)
    sizes = spec.split_sizes()
    # fail before writing anything when the first scenes of a split cannot be laid out
    for split, n in sizes.items():
        for i in range(min(n, 4)):
            sample_record(spec, split, i)
    from mosaic.locks import FolderLock

    # one writer at a time: a second generation of this spec waits for the first (then finds it complete);
    # --overwrite never waits: it stops, naming the process that writes the folder
    with FolderLock(out, DatasetError, "dataset", wait=not overwrite):
        return _generate_locked(spec, out, workers, overwrite, masks, shard_size, renderer, on_progress, verify, sizes)


def _generate_locked(spec, out, workers, overwrite, masks, shard_size, renderer, on_progress, verify, sizes) -> dict:
    existing = _check_out_dir(out, spec, masks, overwrite)
    if existing is not None and existing.get("status") == "complete":
        from mosaic.verify import check_and_repair

        report = check_and_repair(out, deep=verify, sample_fn=sample_record, png_fn=png_bytes)
        if on_progress:
            total = sum(sizes.values())
            on_progress(total, total)
        if not report.ok:
            return {**read_manifest(out), "repaired": [d.path for d in report.damage]}
        return existing

    parts = out / ".mosaic" / "parts"
    try:
        parts.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatasetError([("--out", f"cannot write {out}: {e.strerror}; give a writable folder")]) from None
    for split in sizes:
        (out / split / "images").mkdir(parents=True, exist_ok=True)
        if masks:
            (out / split / "masks").mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / MANIFEST, _manifest(spec, masks, renderer, "incomplete"))

    tasks, done = [], 0
    for split, n in sizes.items():
        for shard, start in enumerate(range(0, n, shard_size)):
            stop = min(n, start + shard_size)
            if (parts / f"{split}-{shard:06d}.jsonl").is_file():
                done += stop - start
            else:
                tasks.append((split, shard, start, stop))
    total = sum(sizes.values())
    if on_progress:
        on_progress(done, total)
    spec_data = spec.to_dict()
    args = [(spec_data, str(out), s, k, a, b, masks, renderer) for s, k, a, b in tasks]
    try:
        if workers <= 1 or len(tasks) <= 1:
            for a in args:
                done += render_shard(*a)
                if on_progress:
                    on_progress(done, total)
        else:
            from mosaic.locks import die_with_parent

            # workers end with this process, even when it is killed with SIGKILL (no orphans)
            with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=die_with_parent) as pool:
                futures = {pool.submit(render_shard, *a) for a in args}
                while futures:
                    finished, futures = wait(futures, return_when=FIRST_EXCEPTION)
                    for f in finished:
                        done += f.result()
                        if on_progress:
                            on_progress(done, total)
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, LayoutError, DatasetError)):
            raise
        raise DatasetError(f"generation stopped after {done} of {total} samples: {e}. Rerun the same command to resume.") from e
    return finalize(spec, out, masks, renderer)


def finalize(spec: Spec, out: Path, masks: bool, renderer: str = "pillow") -> dict:
    """Merge shard part files into each split's ``metadata.jsonl``, verify, and mark complete."""
    sizes = spec.split_sizes()
    parts = out / ".mosaic" / "parts"
    man = _manifest(spec, masks, renderer, "incomplete")
    by_split = {}
    for split, n in sizes.items():
        files = sorted(parts.glob(f"{split}-*.jsonl"))
        lines = [ln for f in files for ln in f.read_text().splitlines() if ln.strip()]
        if len(lines) != n:
            raise DatasetError(f"split {split!r}: {len(lines)} records on disk, expected {n}; rerun the same command to resume")
        recs = [json.loads(ln) for ln in lines]
        if [r["index"] for r in recs] != list(range(n)):
            raise DatasetError(f"split {split!r}: shard records are out of order or duplicated; rerun with --overwrite")
        atomic_write(out / split / "metadata.jsonl", ("\n".join(lines) + "\n").encode() if lines else b"")
        man["splits"][split] = {"count": n}
        by_split[split] = recs
    man["leak_check"] = leak_check(spec, by_split)
    if not man["leak_check"]["passed"]:
        man["status"] = "failed_leak_check"
        atomic_write_json(out / MANIFEST, man)
        failed = [k for k, c in man["leak_check"]["checks"].items() if not c["passed"]]
        raise DatasetError(f"the generated dataset at {out} failed its leak check ({', '.join(failed)}); see manifest.json")
    from mosaic.verify import write_checksums

    man["checksums"] = write_checksums(out, by_split)  # every file read back and digested (mosaic verify)
    man["status"] = "complete"
    atomic_write_json(out / MANIFEST, man)
    return man
