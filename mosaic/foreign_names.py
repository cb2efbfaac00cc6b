"""What ``--overwrite`` may delete: the names mosaic writes inside a dataset folder.

``generate --overwrite`` and ``export --overwrite`` delete the folder they replace. A folder whose
manifest says it is a mosaic dataset may still hold what a person put there (notebooks under
``DS/analysis/``, notes in ``DS/train/``, a ``.git``): those are never deleted. This module lists
every name under a dataset folder that mosaic did not write, by the shape of mosaic's own names
(independent of the manifest, which may be of another spec or damaged): the root's manifest, card,
checksums, split folders, ``data/`` and ``.mosaic/``; a split folder's ``metadata.jsonl``,
``images/`` and ``masks/``; ``NNNNNN.png`` in ``images/`` and ``masks/``; ``<split>-NNNNN-of-NNNNN.parquet``
in ``data/``; and the temporary names an interrupted writer of any of them leaves
(:func:`mosaic.io.new_temp_file`'s ``.<name>.tmp<pid>.<random>`` and the older fixed names
``<name>.tmp``, ``.<name>.tmp``, for those names only).
``.mosaic/`` is mosaic's work folder and is not looked into. Given the folder's own mosaic manifest, the
shape is narrowed to what that manifest lists (attack round 22: a person's ``train/images/999999.png`` in an
8-image dataset was deleted): an image's index must be below its split's recorded ``count``, and a finished
Parquet dataset's shards must be the ones its ``shards`` record names.

:func:`refuse_foreign_outputs` is the same rule for an ``--out`` folder (``evaluate``, ``audit``): files of the
names a command writes there are replaced only when its own marker file says they are its own.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mosaic.errors import MosaicError
from mosaic.io import read_json

SPLIT_NAMES = frozenset({"train", "val", "test", "test_id", "test_ood"})
ROOT_NAMES = frozenset({"manifest.json", "README.md", "checksums.sha256", "data", ".mosaic"}) | SPLIT_NAMES
_TEMP = re.compile(r"\.?(.+)\.tmp(?:\d+\.[A-Za-z0-9_]{8})?")
#: a split's merged metadata being written at the root (``.<split>.metadata.jsonl.tmp<pid>.<random>``, mosaic.repair)
_ROOT_METADATA = re.compile(r"(?:(?:train|val|test|test_id|test_ood)\.)?metadata\.jsonl")
_ROOT_FILES = frozenset({"manifest.json", "README.md", "checksums.sha256"})
_IMAGE = re.compile(r"[0-9]{6,}\.png")
_SHARD = re.compile(r"(train|val|test|test_id|test_ood)-([0-9]{5})-of-([0-9]{5})\.parquet")


def _split_counts(man) -> dict[str, int]:
    """``{split: count}`` of a manifest's ``splits`` record, for the counts that are plain integers."""
    splits = man.get("splits") if isinstance(man, dict) else None
    if not isinstance(splits, dict):
        return {}
    return {k: v["count"] for k, v in splits.items() if isinstance(v, dict) and type(v.get("count")) is int}


def _listed_shards(man) -> set[str] | None:
    """The shard names a finished Parquet manifest lists; None when it lists none (unfinished, imagefolder)."""
    shards = man.get("shards") if isinstance(man, dict) and man.get("status") == "complete" else None
    if not isinstance(shards, dict):
        return None
    return {s["name"] for lst in shards.values() if isinstance(lst, list) for s in lst
            if isinstance(s, dict) and isinstance(s.get("name"), str)}


def _listing(d: Path) -> list[os.DirEntry] | None:
    try:
        with os.scandir(d) as it:
            return list(it)
    except (NotADirectoryError, FileNotFoundError):
        return None


def foreign_names(root: str | Path, limit: int = 20, manifest: dict | None = None) -> list[str]:
    """Up to ``limit`` paths (relative to ``root``) of files and folders under the dataset folder
    ``root`` whose names mosaic never writes there; ``manifest``: the folder's own mosaic manifest,
    which narrows the names to those it lists (image indices below each split's count, a finished
    Parquet dataset's listed shards, the root names of its storage form: no ``data/`` in an
    imagefolder dataset, no split folders in a Parquet one; only its own splits, and ``masks/`` only
    in a dataset made with masks). A link is judged by its own name, never followed. Raises
    OSError when a folder cannot be listed (the caller names it)."""
    root = Path(root)
    out: list[str] = []
    counts, listed = _split_counts(manifest), _listed_shards(manifest)

    def image_of(split: str):
        n = counts.get(split)
        return lambda name: bool(_IMAGE.fullmatch(name)) and (n is None or int(name[:-4]) < n)

    def shard(name: str) -> bool:
        m = _SHARD.fullmatch(name)
        if not m or int(m.group(2)) >= int(m.group(3)):
            return False
        return name in listed if listed is not None else (not counts or m.group(1) in counts)

    def walk(rel: str, allowed, temp_of=None, files=lambda n: True) -> list[os.DirEntry]:
        temp_of = temp_of or allowed
        entries = _listing(root / rel if rel else root) or []
        kept = []
        for e in entries:
            temp = _TEMP.fullmatch(e.name)  # a temporary file of one of mosaic's own names
            if allowed(e.name) or (temp and temp_of(temp.group(1))):
                kept.append(e)
                # a folder holding files where mosaic writes a file (train/metadata.jsonl/notes.txt) is a person's,
                # never deleted (attack round 17: --overwrite deleted it); an empty one is mosaic's to replace
                # and a folder at a temporary name holding anything (mosaic's temporary names are files: a person's
                # train.tmp/notes.txt was deleted, attack round 24)
                if (files(e.name) or temp) and not e.is_symlink() and e.is_dir(follow_symlinks=False) \
                        and _listing(Path(e.path)) and len(out) < limit:
                    out.append(f"{rel}/{e.name}/" if rel else f"{e.name}/")
            elif len(out) < limit:
                out.append(f"{rel}/{e.name}" if rel else e.name)
        return kept

    storage = manifest.get("storage") if isinstance(manifest, dict) else None  # an imagefolder has no data/, Parquet no split folders
    names = ROOT_NAMES - ({"data"} if storage == "imagefolder" else SPLIT_NAMES if storage == "parquet" else set())
    splits = manifest.get("splits") if isinstance(manifest, dict) else None
    if isinstance(splits, dict) and splits:  # only the manifest's own splits (a person's test/ beside train/val/test_id/test_ood, round 25)
        names = names - (SPLIT_NAMES - set(splits))
    subs = ("metadata.jsonl", "images") if isinstance(manifest, dict) and manifest.get("masks") is False else ("metadata.jsonl", "images", "masks")
    for e in walk("", names.__contains__, lambda n: n in names or bool(_ROOT_METADATA.fullmatch(n)), _ROOT_FILES.__contains__):
        if e.is_symlink() or not e.is_dir(follow_symlinks=False):
            continue
        if e.name == "data":
            walk("data", shard)
        elif e.name in SPLIT_NAMES:
            for s in walk(e.name, subs.__contains__, files="metadata.jsonl".__eq__):
                if s.name in ("images", "masks") and not s.is_symlink() and s.is_dir(follow_symlinks=False):
                    walk(f"{e.name}/{s.name}", image_of(e.name))
    return out


def refuse_foreign_outputs(out: Path, names, marker: str, ours, command: str, what: str) -> None:
    """An ``--out`` folder that already holds files of ``names`` (what ``command`` writes there and
    replaces on a rerun) must hold ``command``'s own ``marker`` file (``ours(json)`` is true): a
    person's files of those names are never overwritten. Other files are left alone.
    (``mosaic evaluate --out``: ``metrics.json``; ``mosaic audit --out``: ``items.json``.)

    Raises:
        MosaicError: naming ``--out``, the files and the fix."""
    present = [n for n in names if os.path.lexists(out / n)]
    if not present:
        return
    try:
        data = read_json(out / marker)
    except (OSError, ValueError):  # missing, not a regular file, not JSON
        data = None
    if ours(data):
        return
    raise MosaicError([("--out", f"{str(out)!r} holds {', '.join(present)}, which {command} did not write (no {marker} of "
                                 f"{what} among them): give another --out (a new or empty folder), or move those files away")])
