"""Writing a dataset manifest with its spec's concept order kept.

A manifest is JSON with sorted keys (stable bytes, readable diffs), but one mapping of the spec is
data, not a set: the order of ``spec.concepts``. Sampling draws the concepts in that order, labels
and caches follow it, so the spec read back from a manifest whose concepts were sorted makes
other samples than the ones on disk (``verify --against-spec``, ``--repair``, ``StreamingDataset`` and
``export`` of a spec such as ``relation`` or ``clevr_cogent`` saw every sample as forged).
:func:`manifest_text` sorts every mapping as ``json.dumps(sort_keys=True)`` does except that one, so
the manifest of a spec whose concepts are already in sorted order is byte for byte what it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mosaic.io import atomic_write


def _sorted(obj: Any, keep: bool = False) -> Any:
    """``obj`` with every mapping's keys in sorted order (that of ``json.dumps(sort_keys=True)``), except
    this mapping's own when ``keep``."""
    if isinstance(obj, dict):
        return {k: _sorted(v) for k, v in (obj.items() if keep else sorted(obj.items()))}
    if isinstance(obj, (list, tuple)):
        return [_sorted(v) for v in obj]
    return obj


def manifest_text(man: dict) -> str:
    """The manifest as written: indented JSON (2 spaces, a final newline), keys sorted at every depth
    except the keys of ``spec.concepts``, which keep the spec's order."""
    out = _sorted(man)
    spec = man.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("concepts"), dict):
        out["spec"]["concepts"] = _sorted(spec["concepts"], keep=True)
    return json.dumps(out, indent=2) + "\n"


def write_manifest(path: str | Path, man: dict) -> Path:
    """Write ``man`` to ``path`` atomically as :func:`manifest_text`; returns the path."""
    return atomic_write(path, manifest_text(man))
