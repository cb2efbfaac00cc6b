"""Whether the run inside a sweep's trial folder is that trial's (:func:`foreign_run`): another trial's
run copied or swapped in is never reported, resumed or counted as this trial's. Used by
:func:`mosaic.trials.check_trial_folders` on every ``mosaic sweep`` rerun and ``mosaic report``.
"""

from __future__ import annotations

from pathlib import Path

from mosaic.errors import MosaicError
from mosaic.io import read_json
from mosaic.lab.config import read_config_yaml
from mosaic.sweep import LABEL, SweepSpec, trial_config


def _leaves(d: dict, prefix: tuple = ()):
    """``(path tuple, value)`` of every leaf of a nested mapping (keys may hold dots: a path is a tuple)."""
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


_MISSING = object()


def foreign_run(tdir: Path, sweep: SweepSpec, values: dict) -> str | None:
    """Why the run inside a trial folder is not that trial's (another trial's run copied in: its
    seed or axis values differ), or None. Every field the trial's own config (the folder's
    ``config.yaml``) sets must have the same value in the run's ``config.yaml``; ``out`` and
    ``dataset.path`` aside (a moved sweep folder resumes), and a field the run's config lacks (a run
    of an older mosaic) is not compared, except the sweep's own axes and seed, which tell the
    trials apart (attack round 23: runs swapped between trials, the axis removed from their configs).
    The run's ``dataset.json`` must name the trial's dataset (:func:`_run_dataset_problem`: a spec
    axis changes only the dataset)."""
    path = tdir / "run" / "config.yaml"
    if not path.is_file():
        return None
    try:
        run_cfg = read_config_yaml(path)
    except (MosaicError, OSError, ValueError) as e:
        return f"its run's config.yaml cannot be read ({str(e)[:120]})"
    if not isinstance(run_cfg, dict):
        return "its run's config.yaml is no mapping"
    # the trial's config as the sweep wrote it (its config file may have changed since); else the sweep's now
    try:
        trial_cfg = read_config_yaml(tdir / "config.yaml") if (tdir / "config.yaml").is_file() else trial_config(sweep, values)
    except (MosaicError, OSError, ValueError):
        return None  # nothing to compare with: check_trial_folders' name and trial.json checks stand alone
    if not isinstance(trial_cfg, dict):
        return None
    axes = {tuple(k.split(".")) for k in values if k != "seed" and not k.startswith((LABEL, "spec"))}
    axes.add(tuple(sweep.seed_key.split(".")))
    differs = []
    for keys, want in _leaves(trial_cfg):
        if keys[0] == "out" or keys[:2] == ("dataset", "path"):
            continue
        node = run_cfg
        for k in keys:
            node = node.get(k, _MISSING) if isinstance(node, dict) else _MISSING
        if node is _MISSING and keys in axes:
            differs.append(f"{'.'.join(map(str, keys))} missing (the trial's: {want!r})")
        elif node is not _MISSING and node != want:
            differs.append(f"{'.'.join(map(str, keys))} {node!r} (the trial's: {want!r})")
    if differs:
        return (f"its run was trained with another config, so it is another trial's run: {'; '.join(differs[:4])[:300]}; "
                "delete that trial's run folder and rerun `mosaic sweep` to train it")
    return _run_dataset_problem(tdir, trial_cfg)


def _run_dataset_problem(tdir: Path, trial_cfg: dict) -> str | None:
    """Why the run in ``tdir`` was not trained on the trial's dataset (``dataset.path`` of the trial's
    config), or None: the spec fingerprint its ``dataset.json`` records must be the one of the
    dataset's manifest, or, where that dataset is not there (a moved sweep), the dataset folders'
    names (``<spec name>-<fingerprint>``) must agree."""
    ds = trial_cfg.get("dataset")
    want = ds.get("path") if isinstance(ds, dict) else None
    rec_path = tdir / "run" / "dataset.json"
    if not isinstance(want, str) or not rec_path.is_file():
        return None
    try:
        rec = read_json(rec_path)
    except (OSError, ValueError) as e:
        return f"its run's dataset.json cannot be read ({str(e)[:120]})"
    if not isinstance(rec, dict):
        return "its run's dataset.json is no mapping"
    try:
        man = read_json(Path(want) / "manifest.json")
    except (OSError, ValueError):
        man = None
    fix = "delete that trial's run folder and rerun `mosaic sweep` to train it"
    if isinstance(man, dict) and isinstance(man.get("fingerprint"), str):
        if rec.get("fingerprint") != man["fingerprint"]:
            return (f"its run was trained on another dataset (spec fingerprint {str(rec.get('fingerprint'))[:20]!r}; the trial's "
                    f"dataset {want} has {man['fingerprint']!r}), so it is another trial's run; {fix}")
    elif isinstance(rec.get("path"), str) and Path(rec["path"]).name != Path(want).name:
        return f"its run was trained on the dataset {Path(rec['path']).name!r}, not the trial's {Path(want).name!r}; {fix}"
    return None
