"""The one atomic file writer: a reader never sees a half-written file.

The data goes to a hidden temporary file next to the target (``.<name>.tmp<pid>``, so concurrent
processes never share one), which then replaces the target with :func:`os.replace` (atomic on
POSIX and Windows within one file system).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def atomic_write(path: str | Path, data: str | bytes) -> Path:
    """Write ``data`` (str as UTF-8 text, or bytes) to ``path`` atomically; returns the path.

    Raises:
        OSError: the folder does not exist or is not writable.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if isinstance(data, str):
        tmp.write_text(data, encoding="utf-8")
    else:
        tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def atomic_write_json(path: str | Path, obj: Any, *, sort_keys: bool = True, default=None) -> Path:
    """Write ``obj`` as indented JSON (2 spaces, a final newline) atomically; returns the path."""
    return atomic_write(path, json.dumps(obj, indent=2, sort_keys=sort_keys, default=default) + "\n")
