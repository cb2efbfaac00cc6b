"""The file digests of an imagefolder dataset (``checksums.sha256``), written and read in memory
independent of the dataset's size.

``checksums.sha256`` is in ``sha256sum`` format (``<hex>  <path>`` per line, paths relative to the
dataset root, so ``sha256sum -c checksums.sha256`` works there). Its lines are in generation order,
which is deterministic without sorting: split by split (in the spec's order), each split's
``metadata.jsonl`` first, then for each sample in index order its image and (with masks) its mask.

- :func:`write_checksums` reads every file back in that order and writes each line as soon as the
  file is hashed (files are read in 1 MiB blocks), so it holds one line and one block at a time,
  never the list of files nor the file.
- :class:`RecordedDigests` answers ``get(path)`` by reading the file forward from where the last
  answer was found (verification and repair ask in that same order), so it holds one line at a
  time, not a dict of every file; a question out of order rescans from the start.
- :func:`scan_metadata` checks a split's ``metadata.jsonl`` line by line (JSON, index, file names)
  and digests it, keeping only the numbers of bad lines and the file names that differ from the
  standard ``images/NNNNNN.png`` ones (none in a generated dataset).

``tests/test_checksums.py`` checks with :mod:`tracemalloc` that the peak memory of writing and of
reading the digests does not grow between 200 and 2,000 files.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from mosaic.errors import DatasetError
from mosaic.io import atomic_writer, clear_temps

CHECKSUMS = "checksums.sha256"
BLOCK = 1 << 20  # bytes read at a time when hashing a file
#: the files a dataset's writer puts in its root (each through a temporary file beside it: mosaic.io.atomic_writer)
ROOT_FILES = ("manifest.json", "README.md", CHECKSUMS)


def clear_root_temps(root: str | Path) -> list[Path]:
    """Remove the temporary files a killed writer left beside the dataset's root files (:data:`ROOT_FILES`:
    ``.manifest.json.tmp<pid>.<hex>``, ...): only mosaic's own temporary names (:func:`mosaic.io.clear_temps`), and
    only by a writer holding the dataset's lock (generate, its rerun, --repair), so no other writer's file is in
    progress. A kill while finalize wrote the checksums or the manifest left them, and every later run kept them."""
    return [p for name in ROOT_FILES for p in clear_temps(Path(root) / name)]


def digest_file(path: str | Path, buffer: bytearray | None = None) -> tuple[str, int]:
    """``(hex sha256, size in bytes)`` of a file, read into ``buffer`` (a reused ``bytearray``; by
    default a new one of :data:`BLOCK` bytes), so memory is the buffer whatever the file's size.

    Raises:
        OSError: the file cannot be read (FileNotFoundError when it is missing)."""
    buf = buffer if buffer is not None else bytearray(BLOCK)
    view = memoryview(buf)
    h = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return h.hexdigest(), size


def sample_paths(split: str, records: Iterable[dict]) -> Iterator[str]:
    """The image (and mask) paths of a split's records, relative to the dataset root, in record
    order (``records``: dicts with ``file_name`` and optional ``mask_file_name``; any iterable)."""
    for r in records:
        yield f"{split}/{r['file_name']}"
        if r.get("mask_file_name"):
            yield f"{split}/{r['mask_file_name']}"


def write_checksums(root: str | Path, records: dict[str, Iterable[dict]], expected: dict[str, Iterable] | None = None) -> dict:
    """Read every file of an imagefolder dataset back and write ``root/checksums.sha256``.

    Streams: each line is written (and added to the file's own digest) as soon as its file is
    hashed, so memory does not depend on the number of files; the bytes are those of joining all
    lines with newlines (one final newline), as before.

    Args:
        expected: split -> the ``(sha256, part file)`` of each image and mask as rendered (or None),
            in file order: a file on disk with another digest is refused, never digested as the dataset's.
        records: split -> its records (dicts with ``file_name``, optional ``mask_file_name``) in
            index order; any iterable, e.g. one that makes the names on the fly.
    Returns:
        The manifest entry: ``{"file", "sha256", "files", "bytes": {split: total bytes of its images and masks}}``.
    Raises:
        OSError: a file cannot be read (FileNotFoundError names it); nothing is written then.
        DatasetError: a file is not the one ``expected`` gives; nothing is written then.
    """
    root = Path(root)
    whole = hashlib.sha256()
    per_split: dict[str, int] = {}
    files = 0
    buf = bytearray(BLOCK)  # one read buffer for every file
    with atomic_writer(root / CHECKSUMS) as out:
        for split, recs in records.items():
            total = 0
            want = iter((expected or {}).get(split, ()))
            for k, rel in enumerate(chain([f"{split}/metadata.jsonl"], sample_paths(split, recs))):
                digest, size = digest_file(root / rel, buf)
                if k:  # the split's bytes are its images' and masks'
                    total += size
                    rec = next(want, None)
                    if rec is not None and rec[0] != digest:
                        raise DatasetError(f"{root / rel} is not the file mosaic rendered for it (its sha256 differs from the one "
                                           f"{rec[1]} recorded when it was rendered: replaced while the dataset was unfinished); "
                                           f"delete {rec[1]} and rerun the same command (that shard is rendered again)")
                line = f"{digest}  {rel}\n".encode()
                out.write(line)
                whole.update(line)
                files += 1
            per_split[split] = total
        if not files:  # "\n".join([]) + "\n", as the format has always written an empty list
            out.write(b"\n")
            whole.update(b"\n")
    return {"file": CHECKSUMS, "sha256": whole.hexdigest(), "files": files, "bytes": per_split}


def vanished(path: str | Path, e: OSError) -> DatasetError:
    """The error of a dataset file that was there when the dataset was opened and is gone (or unreadable) when read:
    another process changed or removed the dataset (``mosaic generate --overwrite``) while this one read it."""
    if not isinstance(e, FileNotFoundError):
        return DatasetError([(str(path), f"cannot be read ({e.strerror or type(e).__name__}): make it readable, or restore the "
                              "dataset")])
    return DatasetError([(str(path), "vanished while the dataset was read: the dataset changed or was removed while being "
                          "read (another process rewrites it, e.g. `mosaic generate --overwrite`); rerun when that writer is done")])


class RecordedDigests:
    """The digests recorded in a ``checksums.sha256`` file, looked up one at a time.

    ``get(path)`` reads the file forward from the last line it answered with, so asking in the
    file's order (split by split, metadata, then each sample's image and mask: what verification
    and repair do) reads the file once in all; a path behind the last answer makes it read again
    from the start. Memory: one line. Call :meth:`close` (or use ``with``) when done.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._f: BinaryIO | None = None
        self._f = self._open()  # once, now: a rescan seeks back, so the file read is the one checked, whatever replaces it

    def _open(self) -> BinaryIO:
        """The file opened for reading.

        Raises:
            DatasetError: it is gone (a ``generate --overwrite`` of the folder racing this reader): named, exit status 2,
                never a FileNotFoundError traceback (rc 1, which ``mosaic verify`` uses for "damaged")."""
        try:
            return open(self.path, "rb")
        except OSError as e:
            raise vanished(self.path, e) from None

    def get(self, rel: str, default: str | None = None) -> str | None:
        """The recorded hex sha256 of ``rel`` (a path relative to the dataset root), or ``default``."""
        if self._f is None:  # closed: opened again
            self._f = self._open()
        for _ in range(2):  # forward from the last answer, then once from the start
            restarted = self._f.tell() == 0
            for raw in bounded_lines(self._f, limit=4096):
                digest, _, name = raw.decode("utf-8", errors="replace").rstrip("\r\n").partition("  ")
                if name == rel:
                    return digest
            self._f.seek(0)
            if restarted:
                break
        return default

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> "RecordedDigests":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # pragma: no cover - a safety net; callers close
        self.close()


@dataclass
class MetadataScan:
    """What :func:`scan_metadata` found in one ``metadata.jsonl``: ``lines`` (count), ``sha256`` of
    the file, ``bad_lines`` (0-based numbers of lines that are not the JSON record of their index
    with its own file names (:func:`standard_names`), a ``mask_file_name`` exactly when the dataset has
    masks); ``why`` says, for some of them, what is wrong."""

    lines: int = 0
    sha256: str = ""
    bad_lines: list[int] = field(default_factory=list)
    claims: list[tuple[int, str]] = field(default_factory=list)  # (line, why): records that contradict the spec (``claims``)
    why: dict[int, str] = field(default_factory=dict)  # line -> why, for bad lines that parse as records (at most 20)

    def valid(self, index: int) -> bool:
        """Whether line ``index`` is the record of sample ``index``."""
        return index < self.lines and index not in self._bad

    def __post_init__(self):
        self._bad = set(self.bad_lines)


def standard_names(index: int, masks: bool) -> tuple:
    """``(file_name, mask_file_name)`` that generation gives sample ``index`` (mask None without masks)."""
    return f"images/{index:06d}.png", (f"masks/{index:06d}.png" if masks else None)


#: the longest line of a ``metadata.jsonl`` or ``checksums.sha256`` read (a record of mosaic's is a few KB, its scene
#: graph included): a longer line is damage, skipped in blocks and never held (a sparse file of one 20 GB line took
#: that much memory to read)
MAX_LINE_BYTES = 16 << 20
#: what :func:`bounded_lines` gives for a line longer than :data:`MAX_LINE_BYTES`: not UTF-8, so every check of a line
#: calls it damaged
TOO_LONG = b"\xff(a line longer than MAX_LINE_BYTES, not read)"


def bounded_lines(f: BinaryIO, h=None, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of the binary file ``f`` with their newlines, as iterating it gives them, none longer than
    ``limit`` bytes: a longer one is read on in blocks without being kept and given as :data:`TOO_LONG`.
    ``h``, a hash, is updated with every byte read."""
    while line := f.readline(limit + 1):
        if h is not None:
            h.update(line)
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        while not line.endswith(b"\n") and (line := f.readline(BLOCK)):
            if h is not None:
                h.update(line)
        yield TOO_LONG


def metadata_lines(path: str | Path) -> Iterator[bytes]:
    """The lines of a ``metadata.jsonl`` without their newline, as ``bytes.split(b"\\n")`` gives them
    less a final empty piece (so an empty line in the middle is a line), one at a time; a line longer
    than :data:`MAX_LINE_BYTES` is :data:`TOO_LONG`."""
    with open(path, "rb") as f:
        for line in bounded_lines(f):
            yield line[:-1] if line.endswith(b"\n") else line


def parse_record(line: bytes, index: int) -> dict | None:
    """The record on a metadata line when it is a JSON object with ``index == index``, the file
    names generation gives that sample (:func:`standard_names`: ``images/NNNNNN.png`` and, when
    present, ``masks/NNNNNN.png``) and, when present, a boolean ``held_out``; else None (a line
    nested too deep for the JSON parser too). A record naming another sample's image would be
    read under its own labels, so no other name is a record of this sample."""
    rec = _json_record(line, index)
    return rec if rec is not None and name_problem(rec, index) is None else None


def _json_record(line: bytes, index: int) -> dict | None:
    """:func:`parse_record` without the file-name check."""
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(rec, dict) or type(rec.get("index")) is not int or rec["index"] != index:  # not True for 1
        return None
    if "held_out" in rec and not isinstance(rec["held_out"], bool):
        return None
    return rec


def text_problem(text: str, rec: dict) -> str | None:
    """Why the line ``text`` (without its newline) is not the text mosaic writes for the record it
    parses to, ``json.dumps(rec, sort_keys=True)``, or None. Catches what parsing hides: a key given
    twice (``json.loads`` keeps the last one; a reader that keeps the first would see another
    record), a number that is not finite (``NaN``, ``Infinity``, ``1e400``), and any change of key
    order, spacing or number form. One C-speed encode a record."""
    try:
        canon = json.dumps(rec, sort_keys=True, allow_nan=False)
    except ValueError:
        return "it holds a number that is not finite (NaN, Infinity, or beyond a double such as 1e400), which mosaic never writes"
    if canon != text:
        return ("its text is not the JSON mosaic writes for it (json.dumps with sorted keys): a key given twice, "
                "keys reordered, or spacing or a number's form changed")
    return None


def name_problem(rec: dict, index: int) -> str | None:
    """Why record ``rec`` of sample ``index`` names files other than its own (:func:`standard_names`),
    or None. A ``mask_file_name`` may be absent or null (whether the dataset has masks is checked
    against its manifest elsewhere)."""
    image, mask = standard_names(index, True)
    if rec.get("file_name") != image:
        return f"its file_name is {str(rec.get('file_name'))[:80]!r}, not {image!r}, the name mosaic gives sample {index}'s image"
    if rec.get("mask_file_name") not in (None, mask):
        return f"its mask_file_name is {str(rec.get('mask_file_name'))[:80]!r}, not {mask!r}, the name mosaic gives sample {index}'s mask"
    return None


def lines_problem(path: str | Path, splits: Iterable[str], files) -> str | None:
    """Why ``checksums.sha256`` at ``path`` is not a list mosaic wrote, or None: every line must be
    ``<64 hex digits>  <split>/<name>`` with a safe relative name (:func:`safe_name`) in one of the
    manifest's ``splits``, ``files`` lines in all (the manifest's count). A line naming
    ``../../etc/passwd`` would have ``sha256sum -c checksums.sha256`` read a file outside the
    dataset. One streamed pass; memory is one line."""
    splits = set(splits)
    n = 0
    with open(path, "rb") as f:
        for ln, raw in enumerate(bounded_lines(f, limit=4096), start=1):  # a digest and a path: never 4 KB
            line = raw.rstrip(b"\n")
            if not line and n == 0 and files == 0:
                continue  # an empty dataset's file is one newline
            try:
                digest, sep, name = line.decode("utf-8").partition("  ")
            except UnicodeDecodeError:
                return f"line {ln} is not UTF-8 text"
            if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                return f"line {ln} is not '<sha256>  <path>'"
            if not safe_name(name) or name.split("/", 1)[0] not in splits or "/" not in name:
                return f"line {ln} names {name[:80]!r}, not a file of this dataset's splits"
            n += 1
    if isinstance(files, int) and n != files:
        return f"it lists {n} files, but the manifest records {files}"
    return None


def safe_name(name) -> bool:
    """Whether ``name`` is a file name a record may carry: a relative path string inside its split
    folder (no ``..`` part, not absolute, no backslash or control characters, at most 255
    characters), so no record reaches outside the dataset."""
    if not isinstance(name, str) or not name or len(name) > 255 or not name.isprintable() or "\\" in name:
        return False
    return not name.startswith("/") and all(p not in ("", ".", "..") for p in name.split("/"))


#: ``(sha256 of a metadata.jsonl's bytes, masks, key)`` whose every line passed :func:`scan_metadata`'s
#: checks and its ``claims`` for ``key`` (the spec's :func:`mosaic.records.spec_key` and the split) -> the
#: file's size, most recent last; a reader that holds bytes of that digest skips those checks (:func:`metadata_checked`)
_CHECKED: OrderedDict[tuple[str, bool, tuple], int] = OrderedDict()
_CHECKED_MAX = 1024


def metadata_checked(sha256: str, masks: bool, key: tuple) -> bool:
    """Whether bytes of digest ``sha256`` were checked by :func:`scan_metadata` in this process, line by
    line with the record claims of ``key``, and found clean: the checks are functions of the bytes,
    the spec and the split, so the same bytes need not be checked again (the quick check, then
    :func:`mosaic.dataset.iter_metadata` on the same read)."""
    return (sha256, masks, key) in _CHECKED


def metadata_size_checked(size: int, masks: bool, key: tuple) -> bool:
    """Whether a file of ``size`` bytes was found clean for ``key`` (:func:`metadata_checked`): a reader
    reads a file whole to know its digest only when it can be one it need not check."""
    return any(v == size and k[1:] == (masks, key) for k, v in _CHECKED.items())


class _Counted:
    """A hash that also counts the bytes it is given (``n``)."""

    def __init__(self, h):
        self.h, self.n = h, 0

    def update(self, data: bytes) -> None:
        self.n += len(data)
        self.h.update(data)

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def scan_metadata(path: str | Path, masks: bool, claims=None, key: tuple | None = None) -> MetadataScan:
    """Check and digest a split's ``metadata.jsonl`` line by line (see :class:`MetadataScan`);
    ``claims(rec)``, when given, says why a parsed record contradicts its spec (at most 20 kept).
    With ``claims`` and ``key`` (what ``claims`` was built from), a file found clean is remembered by
    its digest (:func:`metadata_checked`).

    Memory: one line, plus the bad lines' numbers.

    Raises:
        OSError: the file cannot be read.
    """
    scan = MetadataScan()
    h = _Counted(hashlib.sha256())
    with open(path, "rb") as f:
        for k, line in enumerate(bounded_lines(f, h)):
            scan.lines = k + 1
            text = line[:-1] if line.endswith(b"\n") else line
            rec = _json_record(text, k)
            why = None if rec is None else name_problem(rec, k) or text_problem(text.decode("utf-8"), rec)
            if line is TOO_LONG:
                why = f"longer than {MAX_LINE_BYTES:,} bytes, which no record of mosaic's is (not read)"
            # a dataset with masks names each record's mask; one without names none (a missing or null name would
            # leave the mask unchecked and unread)
            if why is None and rec is not None and (isinstance(rec.get("mask_file_name"), str) != masks or (not masks and "mask_file_name" in rec)):
                why = ("it names no mask (mask_file_name missing or not a string), but the dataset has masks" if masks
                       else "it names a mask (mask_file_name), but the dataset has none")
            if rec is None or why is not None:
                scan.bad_lines.append(k)
                if why is not None and len(scan.why) < 20:
                    scan.why[k] = why
                continue
            if claims is not None and len(scan.claims) < 20 and (why := claims(rec)) is not None:
                scan.claims.append((k, why))
    scan.sha256 = h.hexdigest()
    scan._bad = set(scan.bad_lines)
    if claims is not None and key is not None and not scan.bad_lines and not scan.claims:
        _CHECKED[(scan.sha256, masks, key)] = h.n
        _CHECKED.move_to_end((scan.sha256, masks, key))
        while len(_CHECKED) > _CHECKED_MAX:
            _CHECKED.popitem(last=False)
    return scan


def file_kind_problem(p: str | Path) -> tuple[str, str] | None:
    """None when ``p`` is a regular file, else ``(problem, detail)``: ``missing`` (absent, a folder
    standing where the file belongs, or a file standing where one of its folders belongs) or
    ``undecodable`` (a device, FIFO or socket, which is never opened: a FIFO would block)."""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return "missing", "file is missing"
    except NotADirectoryError:
        return "missing", "file is missing: a file stands where one of its folders belongs"
    except OSError as e:
        return "undecodable", f"cannot be read: {e.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return "missing", "a folder stands where this file belongs"
    if not stat.S_ISREG(st.st_mode):
        return "undecodable", "not a regular file (a device, FIFO or socket stands where this file belongs)"
    return None
