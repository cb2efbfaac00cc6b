"""Checking a generated dataset against its manifest (the repair is :mod:`mosaic.repair`).

Both storage forms are covered by one :func:`verify`:

- **imagefolder**: at the end of generation :func:`write_checksums` reads every file back and
  writes ``OUT/checksums.sha256`` (``sha256sum`` format, paths relative to ``OUT``:
  ``sha256sum -c checksums.sha256`` works there); the manifest records that file's sha256, the
  number of files and the bytes per split (``manifest["checksums"]``).
- **parquet**: the manifest lists every shard with its rows, bytes and sha256
  (:mod:`mosaic.parquet`).

The **quick** check (what a rerun of ``mosaic generate`` on a finished dataset does) computes no
digest of an image: the manifest, each split's ``metadata.jsonl`` (line count, JSON, indices, each
record's own file names, its sha256), every image's and mask's presence and PNG form
(:func:`mosaic.png.png_structure_problem`) and the bytes per split; Parquet: every shard's
presence, size, footer, row count and schema, no row read. The **deep**
check (``mosaic verify``, ``mosaic generate --verify``) adds every file's sha256 and, for
metadata lines, a comparison with the record the spec produces.

:func:`mosaic.repair.repair` regenerates exactly the damaged samples (imagefolder) or shards (Parquet): samples
are pure functions of ``(spec, split, index)``, so the rewritten files are byte-identical to the
originals, which the recorded digests confirm.
"""

from __future__ import annotations


import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mosaic.checksums import (  # noqa: F401 - write_checksums, file_kind_problem re-exported
    file_kind_problem,
    CHECKSUMS, RecordedDigests, digest_file, lines_problem, metadata_lines, parse_record, scan_metadata, standard_names, vanished,
    write_checksums,
)
from mosaic.errors import DatasetError, MosaicError
from mosaic.grammar import fingerprint_of
from mosaic.io import loads_json, read_bounded, unreadable_path
from mosaic.png import HEADER_BYTES, SIGNATURE, max_png_bytes, png_header_problem, png_structure_problem
from mosaic.shard_checks import check_shards, layout_problem, spec_image_size, tally_shards  # noqa: F401 - check_shards re-exported
from mosaic.manifest_fields import fields_problem
from mosaic.tally import Tally, counting, leak_check_damage
from mosaic.card_check import card_problem
from mosaic.hf import CARD
from mosaic.records import count_problem, no_manifest, record_claims, sample_record, shards_problem, spec_from_data, spec_key, unfinished_hint

MANIFEST = "manifest.json"
CLAIMS = "contradicts its spec"  # a record whose held_out, split or labels its own concepts and spec do not give
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


@dataclass
class Damage:
    """One problem found: ``path`` relative to the dataset root, the ``split`` and sample ``index``
    it belongs to (None for whole files), what is wrong (``problem``: ``missing``, ``truncated``,
    ``undecodable``, ``altered``, ``metadata``, ``manifest``), and a human ``detail``."""

    path: str
    problem: str
    detail: str
    split: str | None = None
    index: int | None = None


@dataclass
class VerifyReport:
    """The result of :func:`verify`: ``root``, ``storage``, ``deep``, the number of ``files``
    checked and every :class:`Damage` found (``ok`` when none); ``finish`` says how to finish an
    unfinished dataset (:func:`mosaic.records.unfinished_hint`), None otherwise."""

    root: str
    storage: str
    deep: bool
    files: int = 0
    damage: list[Damage] = field(default_factory=list)
    repairable: bool = True
    finish: str | None = None

    @property
    def ok(self) -> bool:
        return not self.damage

    def problems(self) -> list[tuple[str, str]]:
        """``(path, message)`` pairs, one per damaged file or line."""
        return [(d.path, f"{d.problem}: {d.detail}") for d in self.damage]

    def to_dict(self) -> dict:
        return {"root": self.root, "storage": self.storage, "deep": self.deep, "files": self.files, "ok": self.ok,
                "damage": [d.__dict__ for d in self.damage]}


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def spec_fingerprint(spec_data: dict) -> str:
    """The fingerprint of a manifest's stored spec as :meth:`mosaic.spec.Spec.fingerprint` computed it at
    generation (:func:`mosaic.grammar.fingerprint_of`): any edit to it shows as another fingerprint.
    (It is not re-parsed: a later mosaic that adds defaulted fields still gets the recorded value.)"""
    return fingerprint_of(spec_data)


#: the most bytes of a manifest read (mosaic's are KB to a few MB: the spec, counts, the leak check's cells)
MANIFEST_LIMIT = 64 * 2**20


def read_manifest_checked(root: str | Path) -> dict:
    """The manifest of ``root``, or DatasetError naming the file and what to do (missing, larger than
    :data:`MANIFEST_LIMIT`, not UTF-8, not JSON, nested too deep, not a mapping, no spec)."""
    root = Path(root)
    path = root / MANIFEST
    try:
        is_dir = root.is_dir()
    except OSError as e:  # a name over 255 bytes: pathlib raises it (the CLI names it; the API readers here)
        raise DatasetError(f"{unreadable_path(root, e)}; give a dataset folder (made by `mosaic generate SPEC --out DIR`)") from None
    if not is_dir:
        raise DatasetError(f"{root} is not a directory: give a dataset folder (made by `mosaic generate SPEC --out DIR`)")
    if path.exists() and not path.is_file():
        raise DatasetError(f"{path} is damaged: {file_kind_problem(path)[1]}; restore the file from a copy, or regenerate the "
                           f"dataset with `mosaic generate SPEC --out {root} --overwrite`")
    if not path.is_file():
        raise no_manifest(root)
    try:
        man = loads_json(read_bounded(path, MANIFEST_LIMIT))  # a regular file, never more than the bound
    except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested 100k deep (mosaic.io.loads_json)
        raise DatasetError(f"{path} is damaged ({type(e).__name__}: {str(e)[:120]}): the dataset cannot be checked without it; "
                           f"regenerate it with `mosaic generate SPEC --out {root} --overwrite`, or restore the file from a copy") from None
    if not isinstance(man, dict) or not isinstance(man.get("spec"), dict) or not isinstance(man.get("splits"), dict):
        raise DatasetError(f"{path} is damaged (not a mosaic manifest: spec or splits missing): regenerate with "
                           f"`mosaic generate SPEC --out {root} --overwrite`, or restore the file from a copy")
    bad = [s for s, v in man["splits"].items()
           if not isinstance(v, dict) or not isinstance(v.get("count", 0), int) or isinstance(v.get("count", 0), bool) or v.get("count", 0) < 0]
    if bad:
        raise DatasetError(f"{path} is damaged (split {bad[0]!r}: its count is not a whole number >= 0): restore the file from a "
                           f"copy, or regenerate with `mosaic generate SPEC --out {root} --overwrite`")
    # a split is a folder name of this dataset: never a path (``../x``), a hidden name or empty
    odd = [sp for sp in man["splits"] if not sp or sp.startswith(".") or "/" in sp or "\\" in sp or "\x00" in sp]
    if odd:
        raise DatasetError(f"{path} is damaged (split name {odd[0]!r} is not a folder name of the dataset): restore the file from "
                           f"a copy, or regenerate with `mosaic generate SPEC --out {root} --overwrite`")
    why = count_problem(man) or shards_problem(man) or layout_problem(man)  # loops sized by the counts; shard names never paths
    if why:
        raise DatasetError(f"{path} is damaged ({why}): restore the file from a copy, or regenerate with `mosaic generate SPEC --out {root} --overwrite`")
    rec = man.get("checksums")
    if rec is not None and rec != {} and not (isinstance(rec, dict) and isinstance(rec.get("file", CHECKSUMS), str)
                                              and "/" not in rec.get("file", CHECKSUMS) and isinstance(rec.get("sha256"), str)):
        raise DatasetError(f"{path} is damaged (its checksums record is not a mapping naming {CHECKSUMS} and its sha256): restore "
                           f"the file from a copy, or regenerate with `mosaic generate SPEC --out {root} --overwrite`")
    if (why := _record_shape_problem(man)) is not None:  # what the checks below index and compare, of the types mosaic writes
        raise DatasetError(f"{path} is damaged ({why}): restore the file from a copy, or regenerate with "
                           f"`mosaic generate SPEC --out {root} --overwrite`")
    return man


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _record_shape_problem(man: dict) -> str | None:
    """Why the manifest's fields the checks read besides the spec and the counts are not of the types
    mosaic writes, or None: ``checksums.files`` a count, ``checksums.bytes`` a mapping of the manifest's
    splits to counts (``"bytes": 5`` was a TypeError traceback, exit 1), ``masks`` a boolean (``"no"``
    read as true), ``storage`` ``imagefolder`` or ``parquet``, ``status`` and ``fingerprint`` strings."""
    rec = man.get("checksums") or {}
    if "files" in rec and not _count(rec["files"]):
        return f"checksums.files is {str(rec['files'])[:40]!r}, not a number of files"
    b = rec.get("bytes", {})
    if not isinstance(b, dict) or any(k not in man["splits"] or not _count(v) for k, v in b.items()):
        return f"checksums.bytes is {str(b)[:60]!r}, not a mapping of the manifest's splits to byte counts"
    if not isinstance(man.get("masks", False), bool):
        return f"masks is {str(man.get('masks'))[:40]!r}, not true or false"
    if man.get("storage", "imagefolder") not in ("imagefolder", "parquet"):
        return f"storage is {str(man.get('storage'))[:40]!r}, not imagefolder or parquet"
    for key in ("status", "fingerprint"):
        if key in man and not isinstance(man[key], str):
            return f"{key} is {str(man[key])[:40]!r}, not a string"
    return fields_problem(man)  # the card's leak check and the renderer a repair draws with are read from it


# ------------------------------------------------------------------------------------------------
# checksums (imagefolder)
# ------------------------------------------------------------------------------------------------

def read_checksums(root: Path, man: dict, report: VerifyReport) -> RecordedDigests | None:
    """The recorded digests (read one line at a time, :class:`mosaic.checksums.RecordedDigests`) once the
    file's own sha256 matches the manifest's; None (and the damage noted) otherwise."""
    rec = man.get("checksums")
    if not rec:
        return None
    p = root / rec.get("file", CHECKSUMS)
    if not p.is_file():
        kind = file_kind_problem(p) or ("missing", "")
        report.damage.append(Damage(p.name, kind[0], f"{kind[1]}: the file digests are gone; samples can be checked for "
                                    "truncation only"))
        return None
    try:  # gone after the check above: a `generate --overwrite` racing this reader (named, never a FileNotFoundError)
        if digest_file(p)[0] != rec.get("sha256"):  # streamed: memory does not grow with the number of files
            report.damage.append(Damage(p.name, "altered", "the file digests differ from the manifest's record of them"))
            return None
        if (problem := lines_problem(p, man.get("splits") or {}, rec.get("files"))) is not None:  # names only the dataset's files
            report.damage.append(Damage(p.name, "foreign", f"{problem}: not the list mosaic wrote"))
            return None
    except OSError as e:
        raise vanished(p, e) from None
    return RecordedDigests(p)  # opened now, once (DatasetError when gone): every digest is read from this file


# ------------------------------------------------------------------------------------------------
# verify
# ------------------------------------------------------------------------------------------------

def verify(root: str | Path, deep: bool = False, manifest: dict | None = None, sample_fn=None) -> VerifyReport:
    """Check the dataset at ``root`` against its manifest (see the module docstring).

    Args:
        deep: also compare every file's sha256 (and, without recorded digests, every metadata line
            with the record the spec produces).
        sample_fn: ``(spec, split, index) -> (record, scene)`` of the generator that wrote the
            dataset (default :func:`mosaic.records.sample_record`).
    Returns:
        A :class:`VerifyReport` listing each missing, truncated, undecodable or altered file and each
        metadata line that does not match.
    Raises:
        DatasetError: ``root`` is not a dataset, or its manifest is missing or damaged.
    """
    root = Path(root)
    stamp = _stamp(root / MANIFEST)
    man = manifest or read_manifest_checked(root)
    report = _verify(root, deep, man, sample_fn)
    if _stamp(root / MANIFEST) != stamp:  # what was found is no state of either dataset: never "damaged" (rc 1) nor OK
        raise DatasetError([(str(root / MANIFEST), "was replaced or removed while the dataset was checked: the dataset changed "
                             "while being read (another process rewrites it, e.g. `mosaic generate --overwrite`); rerun when "
                             "that writer is done")])
    return report


def _stamp(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size


def _verify(root: Path, deep: bool, man: dict, sample_fn) -> VerifyReport:
    storage = man.get("storage", "imagefolder")
    report = VerifyReport(str(root), storage, deep)
    recorded, actual = man.get("fingerprint"), spec_fingerprint(man["spec"])
    if actual != recorded:  # the spec every sample is a function of was edited: no file can be trusted to match it
        report.damage.append(Damage(MANIFEST, "manifest", f"its spec hashes to fingerprint {actual}, but it records {recorded}: "
                                    "the spec (or the fingerprint) in manifest.json was edited after generation"))
        report.repairable = False
    if man.get("status") != "complete":
        report.finish = unfinished_hint(root, man)
        report.damage.append(Damage(MANIFEST, "incomplete", f"status {man.get('status')!r}: {report.finish}"))
        report.repairable = False
        return report
    if storage == "parquet":
        _verify_parquet(root, man, report)
        _leak_check_damage(man, report, tally_shards(root, man, spec_from_data(man["spec"])) if deep and not report.damage else None)
    else:
        _verify_imagefolder(root, man, report, sample_fn)
    report.damage += stray_entries(root, man)
    report.damage += card_damage(root, man)
    return report


def card_damage(root: str | Path, man: dict) -> list[Damage]:
    """The card (``README.md``) as HF reads it (:func:`mosaic.card_check.card_problem`): ``[]`` or one
    Damage (``card``, or ``link`` for a Parquet dataset's card); ``--repair`` (or a rerun of generate)
    writes the card again."""
    found = card_problem(root, man)
    return [] if found is None else [Damage(CARD, *found)]


#: names a dataset root may hold besides its splits (dot-names too: ``.mosaic``, a desktop's ``.DS_Store``)
_ROOT_NAMES = frozenset({MANIFEST, "README.md", CHECKSUMS})


def _standard_index(name: str, n: int) -> bool:
    stem, dot, ext = name.partition(".")
    return ext == "png" and stem.isdigit() and stem.isascii() and int(stem) < n and f"{int(stem):06d}" == stem


def stray_entries(root: str | Path, man: dict) -> list[Damage]:
    """Files and folders inside a dataset that mosaic did not write, and symbolic links standing
    where mosaic writes (a link is never followed by a repair or a rerun: it is replaced).

    Imagefolder: the root holds ``manifest.json``, ``README.md``, ``checksums.sha256``, the split
    folders and dot-names; a split folder holds ``metadata.jsonl``, ``images/`` and (with masks)
    ``masks/``; ``images/`` and ``masks/`` hold ``NNNNNN.png`` for the split's indices only.
    Parquet: the root holds ``manifest.json``, ``README.md``, ``data/`` and dot-names; ``data/``
    holds the shards the manifest lists only. Reads one directory listing per folder (about
    0.1 s per 100,000 names), no file.
    """
    root = Path(root)
    out: list[Damage] = []

    def listing(d: Path) -> list[os.DirEntry]:
        try:
            with os.scandir(d) as it:
                return list(it)
        except OSError:
            return []

    def link(rel: str) -> bool:
        if (root / rel).is_symlink():
            out.append(Damage(rel, "link", "a symbolic link stands where the dataset's own folder or file belongs: it is never "
                                           "followed; --repair (or a rerun of generate) replaces it"))
            return True
        return False

    if man.get("storage", "imagefolder") == "parquet":
        allowed_root = {MANIFEST, "README.md", "data"}
        for e in listing(root):
            if e.name not in allowed_root and not e.name.startswith("."):
                out.append(Damage(e.name, "stray", "not written by mosaic (a Parquet dataset holds manifest.json, README.md and data/)"))
        if link("data"):
            return out
        shards = {s.get("name") for lst in man.get("shards", {}).values() for s in lst if isinstance(s, dict)}
        for e in listing(root / "data"):
            if e.name not in shards:
                out.append(Damage(f"data/{e.name}", "stray", "a file the manifest does not list (no shard of this dataset)"))
            elif e.is_symlink():
                link(f"data/{e.name}")
        return out
    splits = man.get("splits", {})
    for e in listing(root):
        if e.name not in _ROOT_NAMES and e.name not in splits and not e.name.startswith("."):
            out.append(Damage(e.name, "stray", "not written by mosaic (not a split, manifest, card or checksums of this dataset)"))
        elif e.name in _ROOT_NAMES and e.is_symlink():
            link(e.name)
    masks = bool(man.get("masks"))
    for split, info in splits.items():
        n = int(info.get("count", 0)) if isinstance(info, dict) else 0
        if link(split) or not (root / split).is_dir():
            continue
        subs = {"metadata.jsonl", "images"} | ({"masks"} if masks else set())
        for e in listing(root / split):
            if e.name not in subs:  # a desktop's .DS_Store too: like any file mosaic did not write
                out.append(Damage(f"{split}/{e.name}", "stray", f"not written by mosaic (a split folder holds {', '.join(sorted(subs))})"))
            elif e.name == "metadata.jsonl" and e.is_symlink():
                link(f"{split}/{e.name}")
        for sub in sorted(subs - {"metadata.jsonl"}):
            if link(f"{split}/{sub}"):
                continue
            for e in listing(root / split / sub):
                if not _standard_index(e.name, n):
                    out.append(Damage(f"{split}/{sub}/{e.name}", "stray", f"not an image of this split (it holds {sub}/NNNNNN.png "
                                                                          f"for indices 0..{n - 1})"))
                elif e.is_symlink():
                    link(f"{split}/{sub}/{e.name}")
    return out


def fix_of(report: VerifyReport, root: str | Path | None = None) -> str:
    """The one line that says how to fix what ``report`` found (for ``mosaic verify`` and every reader)."""
    root = root or report.root
    if any(d.path == MANIFEST and d.problem in ("manifest", "leak_check") for d in report.damage):
        return (f"{MANIFEST} no longer describes the data it was written with, and --repair cannot tell which part is right: "
                f"restore it from a copy, or regenerate the dataset with `mosaic generate SPEC --out {root} --overwrite`")
    if any(d.path == CHECKSUMS for d in report.damage):
        return (f"{CHECKSUMS} (the recorded digests every file is checked against) is damaged, and --repair cannot rebuild it: "
                f"restore it from a copy (its sha256 is recorded in manifest.json), or regenerate the dataset with "
                f"`mosaic generate SPEC --out {root} --overwrite`")
    if any(d.problem == CLAIMS for d in report.damage):
        return (f"records claim what the dataset's own spec does not give (rewritten together with their digests, or by another "
                f"tool), which --repair cannot undo: regenerate it (`mosaic generate {root} --out {root} --overwrite"
                f"{' --format parquet' if report.storage == 'parquet' else ''}`), or use a copy you trust")
    if report.finish:
        return report.finish
    stray = [d.path for d in report.damage if d.problem == "stray"]
    if stray:
        return (f"move what mosaic did not write out of the dataset ({', '.join(stray[:3])}{' ...' if len(stray) > 3 else ''}): "
                "a reader (datasets.load_dataset among them) could take it for data"
                + ("; then repair the rest with `mosaic verify " + str(root) + " --repair`" if len(stray) < len(report.damage) else ""))
    if report.repairable:
        return ("rerun the same `mosaic generate` command (it regenerates the damaged samples byte-identically) or "
                f"`mosaic verify {root} --repair`")
    return "rerun the same `mosaic generate` command to finish it"


def check_before_read(root: str | Path, manifest: dict | None = None, shard_digests: bool = True) -> dict:
    """The quick check every reader runs before it uses a dataset (``MosaicDataset``,
    ``StreamingDataset`` on a dataset, ``mosaic train`` with ``dataset.path``, ``evaluate --spec
    DATASET``): the manifest's spec against its fingerprint, status, counts, metadata lines and
    their digest, every image's presence and PNG trailer, the bytes per split, stray files and
    links (:func:`stray_entries`), the card (:func:`card_damage`), and every file's sha256 against
    ``checksums.sha256`` (imagefolder); Parquet: every shard's size, footer, rows and
    (``shard_digests``) sha256. Returns the manifest. Cost: about 5 CPU s per 100,000 16 px images, 6 at 64 px (each PNG's form included).

    Raises:
        DatasetError: the damage, each item named (at most 20), and the fix (:func:`fix_of`).
    """
    root = Path(root)
    man = manifest or read_manifest_checked(root)
    # imagefolder with recorded digests: every file's sha256 (two images swapped within a split keep every size, name and
    # the split's byte total; the digests cost ~1 CPU s per 100k small images over the presence checks)
    report = verify(root, deep=bool(man.get("checksums")) and man.get("storage", "imagefolder") == "imagefolder", manifest=man)
    if report.ok and man.get("storage") == "parquet" and shard_digests:
        for path, msg in check_shards(root, man, deep=True):
            report.damage.append(Damage(path, "altered", msg))
    if report.ok:
        return man
    shown = report.problems()[:20]
    more = len(report.damage) - len(shown)
    raise DatasetError([("", f"{root} is damaged, so it is not read ({len(report.damage)} problem(s) found by its quick check):")]
                       + shown + ([("", f"... and {more} more")] if more else []) + [("fix", fix_of(report, root))],
                       source=str(root))


def _verify_parquet(root: Path, man: dict, report: VerifyReport) -> None:
    report.files = sum(len(v) for v in man.get("shards", {}).values())
    for path, msg in check_shards(root, man, report.deep):
        problem = ("missing" if "missing" in msg else "altered" if "sha256" in msg else "truncated" if "bytes" in msg
                   else "undecodable")
        report.damage.append(Damage(path, problem, msg))


def _png_state(p: str | Path, image_size: int | None, kind: str = "image",
               recorded: str | None = None) -> tuple[tuple[str, str] | None, bytes | None]:
    """``(None, data)`` when the file is whole (signature, IHDR, IEND trailer) and, where the spec
    gives ``image_size``, a PNG in the form mosaic writes a ``kind`` (``image`` or ``mask``) of
    that size (:func:`mosaic.png.png_structure_problem`: one IHDR, IDAT chunks only, CRCs, the exact
    pixel bytes), else ``((problem, detail), None)``. ``data`` is the file's bytes (for its sha256),
    None without ``image_size``. With ``recorded`` (the file's sha256 in ``checksums.sha256``), a
    whole file whose bytes differ from it is ``altered`` (changed after generation: ``--repair``
    rewrites it) before its form is judged; a file in another form under its own digest was
    rewritten together with the digests. A file larger than such a PNG can be (a decompression bomb among
    them) is refused from its size, unread; nothing is decoded."""
    not_file = file_kind_problem(p)
    if not_file is not None:
        return not_file, None
    data = None
    try:
        size = os.stat(p).st_size
        with open(p, "rb") as f:
            if image_size is not None and size <= max_png_bytes(image_size, kind):
                data = f.read()
                head, tail = data[:HEADER_BYTES], data[-12:]
            else:
                head = f.read(HEADER_BYTES)
                if size < 8 + 12:
                    return ("truncated", f"{size} bytes, too short for a PNG"), None
                f.seek(size - 12)
                tail = f.read(12)
    except FileNotFoundError:
        return ("missing", "file is missing"), None
    except OSError as e:
        return ("undecodable", f"cannot be read: {e.strerror}"), None
    if size < 8 + 12:
        return ("truncated", f"{size} bytes, too short for a PNG"), None
    if head[:8] != SIGNATURE:
        return ("undecodable", "not a PNG (wrong signature)"), None
    if size < 24 + 12:
        return ("truncated", f"{size} bytes, too short for a PNG"), None
    if tail != _PNG_END:
        return ("truncated", "the PNG ends early (no IEND chunk)"), None
    if image_size is None:
        return None, None
    if recorded is not None and data is not None and hashlib.sha256(data).hexdigest() != recorded:
        return ("altered", "its sha256 differs from the recorded one"), None
    if data is None:  # larger than mosaic's PNG can be: named by its header where that differs, unread
        return ("undecodable", png_header_problem(head, image_size, kind) or f"{size:,} bytes, more than a {image_size}x{image_size} "
                f"{kind} PNG mosaic writes can take: the file was replaced"), None
    if (why := png_structure_problem(data, image_size, kind)) is not None:  # the header check first, then the chunks
        return ("truncated" if "truncated" in why else "undecodable", why), None
    return None, data


def _verify_imagefolder(root: Path, man: dict, report: VerifyReport, sample_fn=None) -> None:
    sums = read_checksums(root, man, report)
    recorded_bytes = (man.get("checksums") or {}).get("bytes", {})
    image_size = spec_image_size(man)
    # parsed once (an edited spec, refused above, is no measure of the records); the leak check counted again from them
    spec = spec_from_data(man["spec"]) if report.repairable else None
    root_s = str(root)
    tally = Tally(spec) if spec is not None else None
    for split, info in man["splits"].items():
        if tally is not None:
            tally.begin(split)
        n = int(info.get("count", 0))
        meta = root / split / "metadata.jsonl"
        rel_meta = f"{split}/metadata.jsonl"
        masks = bool(man.get("masks"))
        scan = None  # what the streamed read of metadata.jsonl found (mosaic.checksums.scan_metadata)
        if not meta.is_file():
            if n or meta.exists() or meta.is_symlink():
                kind = file_kind_problem(meta) or ("missing", "")
                report.damage.append(Damage(rel_meta, kind[0], f"metadata of split {split!r}: {kind[1]}", split))
        else:
            report.files += 1
            # line by line, no record held; each record's claims against the spec (a leak past the holdout: ~5 us a record)
            try:  # gone after the check above: a writer racing this reader
                scan = scan_metadata(meta, masks, claims=None if spec is None else counting(record_claims(spec, split), tally, split),
                                     key=(spec_key(man["spec"]), split))
            except OSError as e:
                raise vanished(meta, e) from None
            altered = sums is not None and scan.sha256 != sums.get(rel_meta)
            for k, why in scan.claims:
                if altered:  # changed after generation (its digest no longer agrees): --repair writes the line again
                    report.damage.append(Damage(f"{rel_meta}:{k + 1}", "metadata", f"{why} (the file's sha256 differs from the "
                                                "recorded one)", split, k))
                    continue
                report.damage.append(Damage(f"{rel_meta}:{k + 1}", CLAIMS, why, split))
                report.repairable = False
            bad_lines = scan.bad_lines
            if scan.lines != n:
                report.damage.append(Damage(rel_meta, "truncated" if scan.lines < n else "altered",
                                            f"{scan.lines} lines, the manifest records {n} samples", split))
            for k in bad_lines:
                report.damage.append(Damage(f"{rel_meta}:{k + 1}", "metadata", f"line {k + 1} is not the record of sample {k}"
                                            + (f": {scan.why[k]}" if k in scan.why else ""), split, k))
            if (altered or report.deep and sums is None) and not bad_lines:
                spec = spec or spec_from_data(man["spec"])
                for k in _mismatched_lines(spec, split, meta, masks, sample_fn):
                    report.damage.append(Damage(f"{rel_meta}:{k + 1}", "metadata", f"line {k + 1} differs from the record the spec "
                                                f"gives sample {k}", split, k))
                if altered and not any(d.split == split and d.problem == "metadata" for d in report.damage):
                    report.damage.append(Damage(rel_meta, "altered", "its sha256 differs from the recorded one", split))
        total = 0
        for index in range(n):
            for j, name in enumerate(standard_names(index, masks)):
                if not name:
                    continue
                rel = f"{split}/{name}"
                p = os.path.join(root_s, rel)  # a string: pathlib would intern every name part, a table that grows with the files
                report.files += 1
                recorded = sums.get(rel) if report.deep and sums is not None else None  # asked once: the digest list is read forward
                state, data = _png_state(p, image_size, "image" if j == 0 else "mask", recorded)
                if state is not None:
                    report.damage.append(Damage(rel, state[0], state[1], split, index))
                    continue
                total += os.stat(p).st_size
                # with the bytes in hand _png_state has compared them with the recorded digest already (a file with no
                # recorded digest differs from it)
                if report.deep and sums is not None and (recorded is None or (data is None and sha256_file(p) != recorded)):
                    report.damage.append(Damage(rel, "altered", "its sha256 differs from the recorded one", split, index))
                elif report.deep and sums is None:
                    try:
                        from PIL import Image

                        with Image.open(p) as im:
                            im.load()
                    except Exception as e:  # noqa: BLE001 - any decoder failure is damage
                        report.damage.append(Damage(rel, "undecodable", f"{type(e).__name__}: {e}", split, index))
        if split in recorded_bytes and not any(d.split == split and d.index is not None for d in report.damage) \
                and total != recorded_bytes[split]:
            if sums is not None and not report.deep:  # some file changed size without losing its trailer: find it
                for index in range(n):
                    if scan is None or not scan.valid(index):
                        continue
                    for name in standard_names(index, masks):
                        if name:
                            rel = f"{split}/{name}"
                            if sha256_file(root / rel) != sums.get(rel):
                                report.damage.append(Damage(rel, "altered", "its sha256 differs from the recorded one", split, index))
            else:
                report.damage.append(Damage(split, "altered", f"images hold {total} bytes, the manifest records {recorded_bytes[split]}", split))
    _leak_check_damage(man, report, tally)


def _leak_check_damage(man: dict, report: VerifyReport, tally) -> None:
    """The stored leak check against the records' tally (imagefolder; every record read, none
    damaged) or against the spec (:func:`mosaic.tally.leak_check_damage`)."""
    if not report.repairable or any(".jsonl" in d.path or d.problem == CLAIMS for d in report.damage):
        return  # records missing or damaged: their tally is no measure (the damage is named already)
    why = leak_check_damage(man.get("leak_check", None), spec_from_data(man["spec"]),
                            {k: int(v.get("count", 0)) for k, v in man["splits"].items()}, tally)
    if why is not None:
        report.damage.append(Damage(MANIFEST, "leak_check", why))
        report.repairable = False


def _mismatched_lines(spec, split: str, meta: Path, masks: bool, sample_fn=None) -> list[int]:
    """Numbers of the lines of ``meta`` (every line a record of its index) that differ from the record
    the spec gives; the file is read one line at a time."""
    sample_fn = sample_fn or sample_record
    bad = []
    n = spec.split_sizes().get(split, 0)
    for k, line in enumerate(metadata_lines(meta)):
        if k >= n:  # lines past the manifest's count are named by the count check (another split's file swapped in)
            break
        rec = parse_record(line, k)
        want, _ = sample_fn(spec, split, k)
        if masks:
            want["mask_file_name"] = f"masks/{k:06d}.png"
        if json.loads(json.dumps(want, sort_keys=True)) != rec:
            bad.append(k)
    return bad
