"""A dataset folder being replaced: what counts as empty, and a delete that a rerun can always finish.

``generate``, ``export`` and their ``--overwrite`` create a dataset's folders before its first
``manifest.json`` is written, and delete a dataset before writing the new one. Interrupted in
between (a full disk at the first manifest, a Ctrl-C inside the delete), the folder was left in a
state no rerun accepted: empty folders without a manifest ("not empty and holds no manifest.json"),
or a dataset without its manifest ("not a mosaic dataset") (attack round 23). Here:

- :func:`holds_files`: a folder holding nothing but real, empty folders holds nothing of anyone's, so
  it is treated as empty (written to, or replaced);
- :func:`remove_dataset`: everything but ``manifest.json`` is deleted first and the manifest last, so
  an interrupted delete leaves a (damaged) mosaic dataset, which ``--overwrite`` replaces on the rerun.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mosaic.io import remove_path

MANIFEST = "manifest.json"


def holds_files(folder: str | Path) -> bool:
    """Whether anything but real, empty folders lies under ``folder`` (a file, a link, a FIFO ...;
    links are never followed). Stops at the first such entry."""
    stack = [os.fspath(folder)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                st = e.stat(follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    return True
                stack.append(e.path)
    return False


def remove_dataset(folder: str | Path) -> None:
    """Delete the dataset folder ``folder`` (the caller has checked that it may:
    :func:`mosaic.records.replaceable_or_raise`): everything in it, its ``manifest.json`` last; the empty
    folder stays (a mount point cannot be removed: EBUSY, attack round 24). Links inside are removed,
    never followed (:func:`mosaic.io.remove_path`)."""
    folder = Path(folder)
    with os.scandir(folder) as it:
        names = sorted(e.name for e in it if e.name != MANIFEST)
    for name in names:
        remove_path(folder / name)
    remove_path(folder / MANIFEST)  # the folder itself is kept (a mount point cannot be removed; the writer fills it again)
