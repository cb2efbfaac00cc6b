"""The parts of a finished run's ``metrics.json`` that describe the run, derived again from the files they come from.

``mosaic report`` puts a run's numeric record into a sweep's ``results.csv`` (``metrics.*`` columns) and a rerun of
``mosaic train`` on a finished run prints it. Edited in ``metrics.json`` alone, these fields were shown as the run's
(attack round 27). :func:`record_problem` compares each with its source:

========================  ==================================================================================
field                     derived from
========================  ==================================================================================
``params``,               the number of values of the run's exported weights (``RUN/final``, else ``RUN/best``:
``train.params``          every ``*.safetensors`` tensor, read from the headers, nothing loaded)
``train.best``            the last row of ``RUN/val.jsonl`` marked ``best``: its step and the value of the metric
``train.val``             the last row of ``RUN/val.jsonl`` (its metrics)
``train.processes``,      the run's last checkpoint (``checkpoints/*/checkpoint.json``: ``processes``, and
``train.device``          ``device`` when it records one); ``global_batch`` is ``training.batch_size x
``train.global_batch``    training.grad_accum x processes`` of the run's config
``dataset``               the run's copy of its dataset's manifest (``RUN/dataset_manifest.json``): its name,
                          fingerprint, split counts and sha256 (the ``path`` aside: a moved run keeps its record)
========================  ==================================================================================

A source that is gone (weights deleted to save space, checkpoints pruned by hand) leaves its fields unchecked; a
source that is there and disagrees is a problem. Costs a few ms: headers and small JSON files only.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from mosaic.io import MAX_JSON_BYTES, loads_json, read_bounded, read_json


def _close(a, b) -> bool:
    """Equal values of a record: numbers within 1e-9 relative (a bool is no number), anything else equal."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def weights_params(folder: Path) -> int | None:
    """The number of values of every tensor in the ``*.safetensors`` files under ``folder`` (read from the headers
    by ``safetensors.safe_open``; nothing is loaded), or None when it holds none or one cannot be read."""
    from safetensors import safe_open

    files = sorted(p for p in Path(folder).rglob("*.safetensors") if p.is_file() and not p.is_symlink()) if Path(folder).is_dir() else []
    if not files:
        return None
    total = 0
    try:
        for p in files:
            with safe_open(str(p), "numpy") as f:
                total += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    except Exception:  # noqa: BLE001 - a damaged header: the weights' own check names it where they are loaded
        return None
    return total


def _val_rows(run: Path) -> list[dict] | None:
    p = run / "val.jsonl"
    if not p.is_file():
        return None
    try:
        rows = [loads_json(line) for line in read_bounded(p, 64 << 20).decode("utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return [{}]  # unreadable: no row can give the recorded best
    return [r for r in rows if isinstance(r, dict)]


def _last_checkpoint_record(run: Path) -> dict | None:
    from mosaic.lab.run_folder import RunFolder

    ck = RunFolder(run).latest_checkpoint()
    if ck is None or not (ck / "checkpoint.json").is_file():
        return None
    try:
        rec = loads_json(read_bounded(ck / "checkpoint.json", MAX_JSON_BYTES))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def record_problem(run: Path, metrics: dict, cfg: dict | None) -> tuple[Path, str] | None:
    """``(file, why)`` for the first field of a finished run's ``metrics`` (its ``metrics.json``) that is not what its
    source gives (see the module docstring), or None."""
    run = Path(run)
    mpath = run / "metrics.json"
    tr = metrics.get("train") if isinstance(metrics.get("train"), dict) else {}
    n = next((c for c in (weights_params(run / "final"), weights_params(run / "best")) if c is not None), None)
    for where, got in (("params", metrics.get("params", n)), ("train.params", tr.get("params", n))):
        if n is not None and not _close(got, n):
            return mpath, f"its {where} is {got!r}, but the run's exported weights hold {n:,} values"
    rows = _val_rows(run)
    best = tr.get("best")
    if rows is not None and isinstance(best, dict) and best.get("metric") is not None:
        marked = [r for r in rows if r.get("best") is True]
        last = marked[-1] if marked else {}
        want = {"metric": best.get("metric"), "step": last.get("step"), "value": last.get(best.get("metric"))}
        if not all(_close(best.get(k), v) for k, v in want.items()):
            return mpath, (f"its train.best is {best!r}, but the last best row of its val.jsonl gives step {want['step']!r}, "
                           f"value {want['value']!r}")
    if rows and isinstance(tr.get("val"), dict):
        last = {k: v for k, v in rows[-1].items() if k not in ("step", "best")}
        if set(last) != set(tr["val"]) or not all(_close(tr["val"][k], last[k]) for k in last):
            return mpath, "its train.val is not the last row of its val.jsonl"
    ck = _last_checkpoint_record(run)
    if ck is not None:
        for k in ("processes", "device"):
            if k in ck and k in tr and not _close(tr[k], ck[k]):
                return mpath, f"its train.{k} is {tr[k]!r}, but the run's last checkpoint records {ck[k]!r}"
    training = (cfg or {}).get("training") if isinstance(cfg, dict) else None
    if isinstance(training, dict) and "global_batch" in tr and "processes" in tr:
        want = training.get("batch_size", 0) * training.get("grad_accum", 1) * tr["processes"] \
            if all(isinstance(training.get(k, 1), int) for k in ("batch_size", "grad_accum")) and isinstance(tr["processes"], int) else None
        if want is not None and not _close(tr["global_batch"], want):
            return mpath, (f"its train.global_batch is {tr['global_batch']!r}, but its config's batch_size x grad_accum x its "
                           f"processes is {want!r}")
    ds = metrics.get("dataset")
    if isinstance(ds, dict) and (run / "dataset_manifest.json").is_file():
        try:
            raw = read_bounded(run / "dataset_manifest.json", MAX_JSON_BYTES)
            man = read_json(run / "dataset_manifest.json")
        except (OSError, ValueError):
            return run / "dataset_manifest.json", "cannot be read, so the run's dataset record cannot be checked"
        splits = man.get("splits") if isinstance(man, dict) and isinstance(man.get("splits"), dict) else {}
        want = {"name": man.get("name") if isinstance(man, dict) else None, "fingerprint": man.get("fingerprint") if isinstance(man, dict) else None,
                "splits": {k: v.get("count") if isinstance(v, dict) else None for k, v in splits.items()},
                "manifest_sha256": hashlib.sha256(raw).hexdigest()}
        for k, v in want.items():
            if k in ds and ds[k] != v:
                return mpath, f"its dataset.{k} is {str(ds[k])[:80]}, but the run's copy of its dataset's manifest gives {str(v)[:80]}"
    return None
