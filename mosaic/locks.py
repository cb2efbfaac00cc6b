"""Process safety for folders that one process writes at a time (datasets, run folders), and worker
processes that never outlive the process that started them.

:class:`FolderLock` is an exclusive ``fcntl.flock`` on a lock file *next to* the folder
(``<parent>/.<name>.lock``, so ``--overwrite`` can delete the folder while holding it, and a new run
folder stays empty). The kernel releases a ``flock`` when its process dies, even by ``kill -9``: a
lock left by a dead process is stale by construction and is taken over, never waited for. The file
holds the owner's pid, host and start time, for the message a second process gets::

    another process (pid 4242 on host1, since 2026-12-01 07:12:03) is writing data/count: wait for
    it to finish or stop it; a lock held by a dead process is taken over by itself

:func:`die_with_parent` is the initializer of every worker pool: on Linux it asks the kernel to
send the worker SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``), and everywhere a daemon
thread polls the parent pid, so killing the main process (even with ``kill -9``) leaves no worker
behind.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: locks are advisory files only
    fcntl = None

from mosaic.errors import MosaicError
from mosaic.io import file_kind, loads_json, open_own, read_bounded


def lock_path(folder: str | Path) -> Path:
    """The lock file of ``folder``: ``<parent>/.<name>.lock`` of the folder's real place (symbolic
    links resolved), so a folder named through a link (``out -> runs/a``) and by its own path takes
    one lock: two writers of one folder never hold two locks."""
    folder = Path(os.path.realpath(Path(folder).absolute()))
    return folder.parent / f".{folder.name}.lock"


def lock_owner(folder: str | Path) -> dict | None:
    """The owner record (``pid``, ``host``, ``since``) of a live lock on ``folder``, or None when
    nobody holds it (no file, or a stale file left by a dead process)."""
    p = lock_path(folder)
    if fcntl is None or not p.is_file():
        return None
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_owner(p)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_owner(p: Path) -> dict:
    try:
        return loads_json(read_bounded(p, 1 << 20) or b"{}")  # a lock's owner record is a line
    except (OSError, ValueError):
        return {}


def _not_a_lock(fd: int) -> str | None:
    """Why the open file ``fd`` is not a lock file mosaic writes (empty, or one JSON owner record with
    ``pid`` and ``host``), or None."""
    head = os.pread(fd, 4097, 0)
    if not head:
        return None
    try:
        rec = loads_json(head) if len(head) <= 4096 else None
    except ValueError:
        rec = None
    if isinstance(rec, dict) and isinstance(rec.get("pid"), int) and isinstance(rec.get("host"), str):
        return None
    return f"a file of {os.fstat(fd).st_size:,} bytes that is no lock record"


class FolderLock:
    """An exclusive, crash-safe lock on a folder (see the module docstring).

    Args:
        folder: the folder to protect (need not exist yet; its parent is created).
        error: the MosaicError class raised when another live process holds the lock.
        what: how the folder is named in the message (``dataset``, ``run folder``).
        wait: block until a live holder releases the lock instead of raising (two identical
            generations into one folder: the second waits, then finds the dataset complete).
        reader: the caller only reads the folder (``mosaic export``'s source, every dataset reader:
            ``MosaicDataset``, ``mosaic.hf_load``, ``evaluate`` on a split): a *shared* lock, held
            with other readers, never with a writer, so a ``generate --overwrite`` can neither
            start nor finish between a reader's check and its last read (old labels were paired
            with new images). The last reader out removes the lock file (:meth:`release`).
            Where the lock file cannot be made because its place is read-only, no writer can hold
            it, and the folder is read without one (a live holder's lock file is still refused).

    Use as a context manager, or :meth:`acquire` / :meth:`release`. Re-entrant within a process
    (a nested acquire of a folder this process already holds is a no-op).

    Raises:
        error: another live process holds the lock (message: its pid, host and start time).
        error: the lock file cannot be created (unwritable parent folder).
    """

    _held: dict[str, int] = {}  # lock path -> depth, per process

    def __init__(self, folder: str | Path, error: type[MosaicError] = MosaicError, what: str = "folder", wait: bool = False,
                 reader: bool = False):
        self.folder = Path(folder)
        self.path = lock_path(folder)
        self.error, self.what, self.wait, self.reader = error, what, wait, reader
        self.fd: int | None = None

    def acquire(self) -> "FolderLock":
        key = str(self.path)
        if FolderLock._held.get(key):
            FolderLock._held[key] += 1
            return self
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self.error(f"cannot create {self.path.parent} for {self.what} {self.folder}: {e.strerror}; "
                             "give a writable location") from None
        self._refuse_special()
        while True:
            try:
                fd = open_own(self.path, os.O_RDWR)  # a link planted at the lock's name is replaced, never written through
            except OSError as e:
                if self.reader and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                    # a reader of a folder on a read-only place: no writer can make the lock file there either, so
                    # none runs; a lock file that stands there (a live writer's) is still honoured
                    check_unlocked(self.folder, self.error, self.what)
                    FolderLock._held[key] = 1
                    return self
                raise self.error(f"cannot write the lock file {self.path} of {self.what} {self.folder}: {e.strerror}; "
                                 "give a writable location") from None
            if fcntl is not None:
                flags = fcntl.LOCK_SH if self.reader else fcntl.LOCK_EX
                try:
                    fcntl.flock(fd, flags | fcntl.LOCK_NB)
                except BlockingIOError:
                    if self.wait:  # said once, then waited for: a wait of minutes was silent (attack round 33)
                        owner = _read_owner(self.path)
                        sys.stderr.write(f"waiting for another process (pid {owner.get('pid', '?')} on {owner.get('host', '?')}), which "
                                         f"is {'reading' if owner.get('reader') else 'writing'} {self.what} {self.folder}, to finish ...\n")
                        sys.stderr.flush()
                        fcntl.flock(fd, flags)
                    else:
                        os.close(fd)
                        raise self._busy() from None
            # the file may have been unlinked by its previous owner between our open and flock
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        if (why := _not_a_lock(fd)) is not None:  # a person's file at the lock's name: kept, never truncated or deleted
            os.close(fd)
            raise self.error(f"{self.path} is {why}, not a lock file of mosaic's, and {self.what} {self.folder} is locked by "
                             "a file of that name: move it away (mosaic never deletes it), then rerun")
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                                 **({"reader": True} if self.reader else {})}).encode())
        self.fd = fd
        FolderLock._held[key] = 1
        return self

    def _refuse_special(self) -> None:
        """A FIFO, socket or device at the lock's name is someone's, never removed (attack round 23): refused."""
        import stat

        try:
            st = os.lstat(self.path)
        except OSError:
            return
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise self.error(f"{self.path} is {file_kind(st.st_mode)} standing at the name of the lock file of {self.what} "
                             f"{self.folder}: move it away (mosaic never deletes it), then rerun")

    def release(self) -> None:
        key = str(self.path)
        depth = FolderLock._held.get(key, 0)
        if depth > 1:
            FolderLock._held[key] = depth - 1
            return
        FolderLock._held.pop(key, None)
        if self.fd is not None:
            alone = True
            if self.reader and fcntl is not None:  # the file may be another reader's lock still: removed only when none holds it
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    alone = False
            if alone:
                try:
                    self.path.unlink()
                except OSError:
                    pass
            os.close(self.fd)  # closing releases the flock
            self.fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    def _busy(self) -> MosaicError:
        """The error of a lock a live process holds: who, since when, and the fix."""
        owner = _read_owner(self.path)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner["since"])) if "since" in owner else "?"
        return self.error(
            f"another process (pid {owner.get('pid', '?')} on {owner.get('host', '?')}, since {since}) is "
            f"{'writing' if self.reader or not owner.get('reader') else 'reading'} "
            f"{self.what} {self.folder}: wait for it to finish or stop it (a lock held by a process that died "
            f"is taken over by itself; the lock file is {self.path})")


def reading(folder: str | Path, error: type[MosaicError] = MosaicError) -> FolderLock:
    """The shared lock a reader of the dataset ``folder`` holds from its check to its last read
    (:class:`FolderLock` with ``reader=True``, waiting for a writer to finish, as a second
    generation waits for the first)."""
    return FolderLock(folder, error, "dataset", wait=True, reader=True)


def check_unlocked(folder: str | Path, error: type[MosaicError] = MosaicError, what: str = "folder") -> None:
    """Raise ``error`` when another live process holds the lock of ``folder`` (this process's own
    lock does not count)."""
    if FolderLock._held.get(str(lock_path(folder))):
        return
    owner = lock_owner(folder)
    if owner is not None:
        raise error(f"another process (pid {owner.get('pid', '?')} on {owner.get('host', '?')}) is writing {what} {folder}: "
                    "wait for it to finish or stop it")


# ------------------------------------------------------------------------------------------------
# workers die with their parent
# ------------------------------------------------------------------------------------------------

def die_with_parent() -> None:
    """Initializer of worker processes: end this process when its parent dies (see the module
    docstring). Safe to call more than once."""
    parent = os.getppid()
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the watchdog thread alone
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="mosaic-parent-watch", daemon=True).start()
