"""The one atomic file writer: a reader never sees a half-written file.

The data goes to a hidden temporary file next to the target (``.<name>.tmp<pid>.<random>``, made new with
``O_EXCL``, so concurrent writers never share one and a planted link is never followed), which then replaces
the target with :func:`os.replace` (atomic on POSIX and Windows within one file system; a link standing at
the target is replaced, not written through). And the bounded readers of every file mosaic reads from a folder.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from mosaic.errors import MosaicError
from mosaic.folder_kinds import owned_folder


def new_temp_file(path: str | Path) -> tuple[Path, int]:
    """A new hidden temporary file beside ``path`` for a writer that replaces ``path`` with it
    (:func:`os.replace`) when it is whole: ``.<name>.tmp<pid>.<random>``, unique per writer
    (process and call), created new (``O_EXCL | O_NOFOLLOW``), so a file or link planted at the
    name is never written through and two writers never share one.

    Returns:
        (the temporary path, an open write-only file descriptor the caller closes).
    Raises:
        OSError: the folder does not exist or is not writable.
    """
    path = Path(path)
    tmp = _temp_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    return tmp, fd


#: the glob of the temporary files of :func:`new_temp_file` for target names matching ``*``
TEMP_GLOB = ".*.tmp*"


def _temp_name(path: Path) -> Path:
    import secrets

    return path.with_name(f".{path.name}.tmp{os.getpid()}.{secrets.token_hex(4)}")


def new_temp_dir(path: str | Path) -> Path:
    """A new hidden temporary folder beside ``path`` (``.<name>.tmp<pid>.<random>``) for a writer
    that fills it and then puts it at ``path`` (:func:`replace_path`): unique per writer (process
    and call) and made with :func:`os.mkdir`, which never follows a link and fails when anything
    stands at the name, so a link planted there is never written through.

    Raises:
        OSError: the parent folder does not exist or is not writable.
    """
    path = Path(path)
    for _ in range(16):
        tmp = _temp_name(path)
        try:
            os.mkdir(tmp, 0o755)
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot make a temporary folder beside {path}")


def remove_path(path: str | Path) -> None:
    """Remove whatever stands at ``path`` without following a link: a symbolic link, file, FIFO
    or socket is unlinked (the link itself, never what it points to), a real folder is removed
    with its contents (:func:`shutil.rmtree` never follows the links inside). Nothing there is
    no error. Every other error is raised, never ignored (``rmtree(ignore_errors=True)`` leaves
    a link in place without a word, and the next write goes through it).
    """
    import shutil
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def discard(path: str | Path) -> None:
    """:func:`remove_path` for cleaning up after an error that is being raised: a failure to
    remove is not allowed to hide that error."""
    try:
        remove_path(path)
    except OSError:
        pass


def replace_path(tmp: str | Path, path: str | Path) -> Path:
    """Put the finished temporary file or folder ``tmp`` at ``path``: whatever stands at ``path``
    (an older folder, a link planted there) is removed first without being followed
    (:func:`remove_path`), then :func:`os.replace` renames ``tmp``. Returns ``path``."""
    remove_path(path)
    os.replace(tmp, path)
    return Path(path)


def clear_temps(path: str | Path) -> list[Path]:
    """Remove the temporary files and folders an interrupted writer left beside ``path``:
    ``.<name>.tmp<pid>.<random>`` (:func:`new_temp_file`, :func:`new_temp_dir`) and the fixed
    names older mosaic versions used (``<name>.tmp``, ``.<name>.tmp``), links planted at those
    names included (removed, never followed). Only for a writer that holds the lock of ``path``'s
    folder: no other writer's temporary file can be in progress. Returns what was removed."""
    import re

    path = Path(path)
    pat = re.compile(rf"\.{re.escape(path.name)}\.tmp\d+\.[0-9a-f]{{8}}")
    legacy = {f"{path.name}.tmp", f".{path.name}.tmp"}
    removed = []
    try:
        names = os.listdir(path.parent)
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for name in names:
        if name in legacy or pat.fullmatch(name):
            remove_path(path.parent / name)
            removed.append(path.parent / name)
    return removed


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """A folder filled in the ``with`` block that replaces ``path`` when the block ends without an
    error (a checkpoint, exported weights, a samples folder): the block writes into a new
    temporary folder (:func:`new_temp_dir`), which then replaces whatever stood at ``path``
    (:func:`replace_path`: a link there is removed, never followed). On any error (a full disk,
    an interruption) the temporary folder is removed and ``path`` is untouched.
    """
    path = Path(path)
    tmp = new_temp_dir(path)
    try:
        yield tmp
        replace_path(tmp, path)
    except BaseException:
        discard(tmp)
        raise


@contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file written piece by piece that replaces ``path`` atomically when the ``with``
    block ends without an error (for data too large to hold: checksums, merged metadata). On any
    error (a full disk, an interruption) the temporary file
    ``.<name>.tmp<pid>.<random>`` is removed and ``path`` is untouched.

    Raises:
        OSError: the folder does not exist or is not writable.
        FolderInTheWayError: a folder stands at ``path`` (a MosaicError: named, exit status 2).
    """
    path = Path(path)
    _refuse_folder(path)  # before any byte is written: the same refusal as at the replace below
    tmp, fd = new_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        try:
            os.replace(tmp, path)  # a link standing at path is replaced, not followed
        except IsADirectoryError:  # a folder made at path while the file was written
            _refuse_folder(path)
            raise
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


class FolderInTheWayError(MosaicError, RuntimeError):
    """A real folder stands where mosaic writes one of its files (:func:`atomic_writer`): never
    removed (what is in it is not mosaic's to delete); the message names the file and the fix."""


def _refuse_folder(path: Path) -> None:
    """Raise :class:`FolderInTheWayError` when a real folder (not a link: a link is replaced) stands at ``path``."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        raise FolderInTheWayError([(str(path), "a folder stands where mosaic writes this file: move the folder away (or "
                                    "remove it), then rerun; mosaic never deletes a folder it did not write")])


@contextmanager
def atomic_text_writer(path: str | Path, newline: str | None = None) -> Iterator[Any]:
    """:func:`atomic_writer` as UTF-8 text (a CSV, a YAML file written piece by piece): the
    target is replaced only when the ``with`` block ends without an error; on any error (ENOSPC
    mid-write included) the old file stays as it was and no temporary file is left.
    ``newline=""`` for :mod:`csv`."""
    import io

    with atomic_writer(path) as raw:
        f = io.TextIOWrapper(raw, encoding="utf-8", newline=newline)
        try:
            yield f
            f.flush()
        finally:
            f.detach()  # the binary file is closed by atomic_writer


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (str as UTF-8 text, or bytes) to ``path`` atomically; returns the path
    (:func:`atomic_writer` with one write: the temporary file never outlives a failure).

    Raises:
        OSError: the folder does not exist or is not writable.
        FolderInTheWayError: a folder stands at ``path``.
    """
    with atomic_writer(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def atomic_write_json(path: str | Path, obj: Any, *, sort_keys: bool = True, default=None) -> Path:
    """Write ``obj`` as indented JSON (2 spaces, a final newline) atomically; returns the path."""
    return atomic_write(path, json.dumps(obj, indent=2, sort_keys=sort_keys, default=default) + "\n")


#: the most bytes of a JSON file mosaic reads from a folder (its own are KB to a few MB)
MAX_JSON_BYTES = 64 << 20


class FileReadError(ValueError):
    """A file mosaic reads from a folder that is not one it could have written: not a regular file
    (a FIFO, a device, a folder) or larger than the bound its reader gives (:func:`read_bounded`).
    ``kind`` says what stands there (``"a FIFO (named pipe)"``, ``"a folder"``), or is None when the
    file is too large."""

    def __init__(self, message: str, kind: str | None = None):
        super().__init__(message)
        self.kind = kind


class JSONReadError(FileReadError):
    """A JSON file or text that cannot be read as JSON: not UTF-8, not JSON, nested deeper than the
    parser reads, too large or not a regular file. A ValueError, so ``except ValueError`` catches it."""


def read_bounded(path: str | Path, max_bytes: int = MAX_JSON_BYTES, error: type[FileReadError] = FileReadError) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes``: the one reader of every JSON,
    YAML, CSV and text file mosaic reads from a user's folder. Opened ``O_NONBLOCK`` (a FIFO at the
    name is refused, never waited on), its kind and size taken from the open file (``fstat``), and
    never more than ``max_bytes`` read, so a file grown or swapped after the check is refused too.

    Raises:
        FileNotFoundError: missing (an OSError); OSError: unreadable;
        ``error``: not a regular file, or more than ``max_bytes``.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else file_kind(st.st_mode)
            raise error(f"{kind}, not a file of mosaic's", kind)
        if st.st_size > max_bytes:
            raise error(f"{st.st_size:,} bytes, more than the {max_bytes:,} such a file of mosaic's holds")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise error(f"more than the {max_bytes:,} bytes such a file of mosaic's holds (it grew while read)")
        return data
    finally:
        os.close(fd)


def loads_json(data: str | bytes) -> Any:
    """Parse JSON text (bytes must be UTF-8): the one JSON parser of files mosaic reads from folders (run,
    sweep, evaluator, dataset, checkpoint). Raises :class:`JSONReadError` (a ValueError, never RecursionError)
    for text not UTF-8, not JSON, nested too deep (100,000 deep) or giving a key twice in an object
    (``json.loads`` keeps its last value, other readers the first; mosaic never writes one)."""
    try:
        return json.loads(data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data, object_pairs_hook=_one_each)
    except RecursionError:
        raise JSONReadError("nested too deep to be one of mosaic's files") from None
    except UnicodeDecodeError as e:
        raise JSONReadError(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except ValueError as e:
        raise JSONReadError(str(e)[:100] if isinstance(e, JSONReadError) else f"not JSON ({str(e)[:100]})") from None


def _one_each(pairs: list) -> dict:
    if len(d := dict(pairs)) != len(pairs):
        raise JSONReadError(f"a key given twice in an object ({sorted({k for k, _ in pairs if sum(k == j for j, _ in pairs) > 1})[:3]})")
    return d


def read_json(path: str | Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """The JSON content of the regular file ``path`` (:func:`loads_json`) of at most ``max_bytes``.

    Raises:
        FileNotFoundError: missing (an OSError); OSError: unreadable;
        JSONReadError: not a regular file (a FIFO is never waited on), too large, not UTF-8, not
            JSON, nested too deep.
    """
    return loads_json(read_bounded(path, max_bytes, JSONReadError))


def _own(st: os.stat_result) -> bool:
    """A regular file with one name: mosaic's own, not a link planted at its name."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def open_own(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """A descriptor of ``path`` opened with ``flags`` (created when missing) that is a file of its
    own: opened ``O_NOFOLLOW``; a symlink, a hard link or a non-regular file standing at the name is
    removed (the link itself, never what it points to) and the file created afresh
    (``O_EXCL | O_NOFOLLOW``). A regular, singly-linked file already there is opened as it is
    (a lock file two processes share, a log appended to).

    Raises:
        OSError: the folder does not exist or is not writable; a folder stands at ``path``; the
            name keeps being replaced by a link.
    """
    import errno

    nofollow = getattr(os, "O_NOFOLLOW", 0)
    for _ in range(8):
        try:
            fd = os.open(path, flags | os.O_CREAT | nofollow, mode)
        except OSError as e:
            if e.errno != errno.ELOOP:  # ELOOP: a symlink at the name (O_NOFOLLOW)
                raise
        else:
            if _own(os.fstat(fd)):
                return fd
            os.close(fd)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL | nofollow, mode)
        except FileExistsError:
            continue  # another process created it first: open that one
    raise OSError(errno.ELOOP, f"{path} keeps being replaced by a link", str(path))


def read_own_file(path: str | Path) -> bytes:
    """The bytes of ``path`` when it is a regular file with one name (opened ``O_NOFOLLOW``), for
    copying a run's own file elsewhere: a symlink or hard link planted in a run folder never pulls
    an outside file into a report or a run.

    Raises:
        OSError: missing, a symlink (ELOOP), a hard link or not a regular file (EPERM).
    """
    import errno

    # O_NONBLOCK: a FIFO at the name is opened without waiting for a writer, then refused below
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not _own(st):
            raise OSError(errno.EPERM, f"{path} is {'a hard link' if st.st_nlink > 1 else file_kind(st.st_mode)}, "
                                       "not a file of mosaic's own", str(path))
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def atomic_copy(src: str | Path, dst: str | Path) -> Path:
    """Copy ``src`` (:func:`read_own_file`) to ``dst`` atomically (:func:`atomic_write`: a link at
    ``dst`` is replaced, not written through). Returns ``dst``."""
    return atomic_write(dst, read_own_file(src))


def open_append(path: str | Path) -> BinaryIO:
    """``path`` opened to append bytes (a log), created when missing, never through a link (:func:`open_own`), so the
    log of one run never grows another file. Raises OSError: the folder does not exist or is not writable."""
    return os.fdopen(open_own(path, os.O_WRONLY | os.O_APPEND), "ab")


def own_folders(out: str | Path, rels) -> None:
    """Make each folder ``out/rel`` a real folder of ``out``: a symbolic link standing at it or at
    one of its parents inside ``out`` is removed (never followed: what a link points to belongs to
    someone else), a regular file there is refused (a person's: it was deleted), then the folder is created."""
    for rel in rels:
        node = Path(out)
        for part in Path(rel).parts:
            node = node / part
            if node.is_symlink() or (node.exists() and not node.is_dir()):
                if not node.is_symlink() and node.is_file():
                    raise MosaicError(f"{node} is a file where mosaic makes its folder {part}/: move the file away, then rerun")
                node.unlink()
        node.mkdir(parents=True, exist_ok=True)


def file_kind(mode: int) -> str:
    return ("a regular file" if stat.S_ISREG(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a folder")


#: most bytes of a manifest.json read to tell whether a folder is a mosaic dataset
_MAX_MANIFEST_PEEK = 64 << 20


def _is_dataset(folder: str) -> bool:
    """Whether ``folder`` holds the ``manifest.json`` of a mosaic dataset (format
    ``mosaic-dataset/N``; a damaged one that still names that format counts)."""
    path = os.path.join(folder, "manifest.json")
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_MANIFEST_PEEK:
            return False
        with open(path, "rb") as f:
            data = f.read(_MAX_MANIFEST_PEEK)
    except OSError:
        return False
    try:
        man = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return b'"mosaic-dataset/' in data
    return isinstance(man, dict) and str(man.get("format", "")).startswith("mosaic-dataset/")


def dataset_around(path: str | Path) -> Path | None:
    """The mosaic dataset that ``path`` is or lies inside (links resolved): the nearest of ``path``
    and its existing ancestors holding a mosaic dataset's ``manifest.json``; None when there is
    none."""
    p = Path(os.path.realpath(os.path.abspath(path)))
    for folder in (p, *p.parents):
        if folder.is_dir() and _is_dataset(str(folder)):
            return folder
    return None


#: the parts of a training run folder that hold its own weights: nothing else is ever written into them
RUN_WEIGHTS = ("checkpoints", "best", "final")


def run_around(path: str | Path) -> tuple[Path, tuple[str, ...]] | None:
    """The training run folder that ``path`` is or lies inside (links resolved; the nearest of it
    and its ancestors holding a ``run.json`` file), with ``path``'s parts below it; None outside
    any run."""
    p = Path(os.path.realpath(os.path.abspath(path)))
    for folder in (p, *p.parents):
        if (folder / "run.json").is_file():
            return folder, p.relative_to(folder).parts
    return None


def output_dir_problem(path: str | Path, *, dataset: bool = False, run: bool = False) -> str | None:
    """Why ``path`` cannot be (or be created as) a writable folder, or None when it can.

    Checked without writing anything: an existing ``path`` must be a folder (not a regular file,
    device such as ``/dev/null``, FIFO or socket) that this process may write; a missing one must
    not lie under a file, and its nearest existing ancestor must be a writable folder. It must not
    be, or lie inside, a mosaic dataset (:func:`dataset_around`): a dataset holds only what
    ``generate`` wrote, and a file written into it (an evaluation's metrics, a run) makes ``verify``
    and every reader refuse it. ``dataset=True`` (``generate``, ``export``: writers of a dataset)
    allows ``path`` itself to be a dataset, not a folder inside another. Nor may it be a training run's
    folder (:func:`run_around`: its ``metrics.json`` and weights are the run's own) unless
    ``run=True`` (``mosaic train``: the run itself), nor lie inside the run's weights
    (:data:`RUN_WEIGHTS`: ``checkpoints``, ``best``, ``final``) for any writer; a folder elsewhere
    in a run (``RUN/samples/NAME``, ``RUN/audit``) is fine. The one check of every output folder
    (``--out`` of each command, a config's ``out``, a dataset root).
    """
    p = Path(path)
    if str(p) == "" or "\x00" in str(p):
        return "is not a path"
    long = _long_name(p)
    if long:
        return long
    if p.is_symlink():  # what it points to is someone else's folder (attack round 23: evaluate --out wrote its files there)
        return f"is a symbolic link (to {os.readlink(p)[:120]}): an output is never written through a link; give the real folder {os.path.realpath(p)[:200]}"
    ds = dataset_around(p)
    is_ds = ds is not None and ds == Path(os.path.realpath(os.path.abspath(p)))
    if ds is not None and not (dataset and is_ds):
        where = "is the mosaic dataset" if is_ds else f"lies inside the mosaic dataset {ds}"
        return (f"{where} (it holds that dataset's manifest.json): a dataset holds only what `mosaic generate` wrote, and any "
                "other file in it makes `mosaic verify` and every reader refuse it; give another folder, outside the dataset")
    rr = run_around(p)
    if rr is not None:
        root, parts = rr
        if parts and parts[0] in RUN_WEIGHTS:
            return (f"lies inside {root / parts[0]}, the weights of the training run {root}: a file written there makes the run "
                    "refuse its own checkpoint or weights; give a folder outside them, e.g. " + str(root / "samples" / "NAME"))
        if not parts and not run:
            return (f"is the training run folder {root} (it holds run.json): its metrics.json and weights are the run's own and "
                    "would be overwritten; give a folder outside it, or under it such as " + str(root / "samples" / "NAME"))
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        st = None  # an ancestor is not a folder: found below
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            return f"is {file_kind(st.st_mode)}, not a folder"
        if not os.access(p, os.W_OK | os.X_OK):
            return "is a folder this process may not write (permissions or a read-only file system)"
        return None
    if p.is_symlink():
        return "is a broken symbolic link"
    anc = p.absolute().parent
    while True:
        try:
            st = anc.stat()
            break
        except (FileNotFoundError, NotADirectoryError):
            if anc.parent == anc:
                return "cannot be created"
            anc = anc.parent
        except OSError as e:
            return f"cannot be created: {anc}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"lies under {anc}, which is {file_kind(st.st_mode)}, not a folder"
    if not os.access(anc, os.W_OK | os.X_OK):
        return f"cannot be created: {anc} is a folder this process may not write"
    return None


def check_output_dir(path: str | Path, field: str = "out", *, dataset: bool = False, run: bool = False) -> Path:
    """Refuse an output folder :func:`output_dir_problem` finds a problem with, before anything is
    read or written; returns ``Path(path)``. The one check of every output folder, from the CLI
    (``--out``) and from the Python API alike.

    Raises:
        mosaic.errors.MosaicError: naming ``field`` (``--out``, ``out``), the value and the fix.
    """
    problem = output_dir_problem(path, dataset=dataset, run=run)
    if problem:
        raise MosaicError([(field, f"{str(path)!r} {problem}: give a folder (created if missing) in a writable place")])
    return Path(path)


def make_output_dir(path: str | Path, field: str = "out", *, dataset: bool = False, run: bool = False) -> Path:
    """:func:`check_output_dir`, then create the folder (and its parents). Returns ``Path(path)``.

    Raises:
        mosaic.errors.MosaicError: as :func:`check_output_dir`.
    """
    out = check_output_dir(path, field, dataset=dataset, run=run)
    out.mkdir(parents=True, exist_ok=True)
    return out


def unreadable_path(p, e: OSError) -> str:
    """A path that pathlib cannot even look at (``is_dir`` raised ``e``), named: its first 120
    characters and the system's reason, a name over 255 bytes said so."""
    s = str(p)
    return (f"{s[:120]}{'...' if len(s) > 120 else ''} cannot be read: {e.strerror}"
            + (" (a name in it is longer than a file name can be: 255 bytes)" if e.errno == errno.ENAMETOOLONG else ""))


def _long_name(p: Path) -> str | None:
    """Why a name on ``p`` cannot be a file name (255 bytes; its last part 225, for the lock and
    temporary files mosaic makes beside it, ``.<name>.lock`` and ``.<name>.tmp<pid>.<random>``), or None."""
    parts = Path(os.path.abspath(p)).parts
    for k, part in enumerate(parts):
        n = len(part.encode("utf-8", "surrogateescape")) if part != "/" else 0
        if n > (225 if k == len(parts) - 1 else 255):
            return (f"has a name of {n} bytes ({part[:30]!r}...): a file name holds 255 bytes, and mosaic makes its lock and "
                    "temporary files beside it under longer names; give a name of at most 225 bytes")
    return None


def output_file_problem(path: str | Path) -> str | None:
    """Why a file cannot be written at ``path`` (a PNG, a report), or None: an existing ``path``
    must be a regular file (a folder, device such as ``/dev/null``, FIFO or socket is refused: an
    atomic replace would put a file in its place) outside every folder mosaic wrote (:func:`owned_folder`:
    a run's, a samples folder's, a sweep's or trial's records are never replaced by another command's
    file); its folder is checked as :func:`output_dir_problem`."""
    p = Path(path)
    long = _long_name(p)
    if long:
        return long
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        return f"cannot be read: {e.strerror}"
    if st is not None and not stat.S_ISREG(st.st_mode):
        return "is a folder, not a file" if stat.S_ISDIR(st.st_mode) else f"is {file_kind(st.st_mode)}, not a regular file"
    parent = p.absolute().parent
    problem = output_dir_problem(parent)
    if problem is not None:
        return f"cannot be written: its folder {parent} {problem}"
    owner = owned_folder(parent) if st is not None else None
    if owner is not None:  # `schema -o RUN/samples/S/metrics.json` replaced a record of a run (attack round 27)
        return (f"is a file of {owner} (a folder mosaic wrote: its records are written by the command that made it, never "
                "replaced by another); give a path outside it")
    return None
