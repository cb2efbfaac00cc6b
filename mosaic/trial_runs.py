"""Whether the run inside a sweep's trial folder is that trial's (:func:`foreign_run`): another trial's
run copied or swapped in is never reported, resumed or counted as this trial's. Used by
:func:`mosaic.trials.check_trial_folders` on every ``mosaic sweep`` rerun and ``mosaic report``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mosaic.errors import MosaicError, SweepError
from mosaic.evaluation.trial_scores import seconds_ok
from mosaic.io import read_bounded, read_json
from mosaic.overrides import MAX_YAML_BYTES
from mosaic.lab.config import config_diff, read_config_yaml, validate_config
from mosaic.sweep import LABEL, SweepSpec, trial_config


def _leaves(d: dict, prefix: tuple = ()):
    """``(path tuple, value)`` of every leaf of a nested mapping (keys may hold dots: a path is a tuple)."""
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


_MISSING = object()


def _at(cfg: dict, keys: tuple):
    """The value at the path ``keys`` of a nested mapping, or :data:`_MISSING`."""
    for k in keys:
        cfg = cfg.get(k, _MISSING) if isinstance(cfg, dict) else _MISSING
    return cfg


def _same_value(node, want) -> bool:
    """Whether a run's config value is the trial's: equal, or the number a YAML string of the trial's
    reads as (PyYAML reads ``1e-3`` as a string, the run's validated config holds 0.001)."""
    if isinstance(node, bool) != isinstance(want, bool):  # YAML `true` is no 1 (attack round 27)
        return False
    if node == want:
        return True
    if isinstance(want, str) and isinstance(node, (int, float)) and not isinstance(node, bool):
        try:
            return float(want) == float(node)
        except ValueError:
            return False
    return False


def foreign_run(tdir: Path, sweep: SweepSpec | None, values: dict) -> str | None:
    """Why the run inside a trial folder is not that trial's (another trial's run copied in: its
    seed or axis values differ), or None (no run there yet). Every field the trial's own config (the
    folder's ``config.yaml``; else the one ``sweep`` gives the trial) sets must have the same value in
    the run's ``config.yaml``; ``out`` and ``dataset.path`` aside (a moved sweep folder resumes), and a
    field the run's config lacks (a run of an older mosaic) is not compared, except the sweep's own
    axes and seed (``values``), which tell the trials apart. The run's ``dataset.json`` (else its
    ``dataset_manifest.json``) must name the trial's dataset (:func:`_run_dataset_problem`: a spec
    axis changes only the dataset). A run folder without its config, or a trial whose config can be
    read from nowhere, cannot be told from another trial's and is refused (attack rounds 23-24: runs
    swapped with those files removed or damaged were reported under each other's values)."""
    run = tdir / "run"
    path = run / "config.yaml"
    if not path.is_file():
        if run.is_dir() and not run.is_symlink() and any(os.path.lexists(run / n) for n in ("DONE", "metrics.json", "best", "final",
                                                                                          "checkpoints")):
            return "its run folder holds a run's results but no readable config.yaml, so nothing says which trial's run it is"
        return None
    try:
        run_cfg = read_config_yaml(path)
    except (MosaicError, OSError, ValueError) as e:
        return f"its run's config.yaml cannot be read ({str(e)[:120]})"
    if not isinstance(run_cfg, dict):
        return "its run's config.yaml is no mapping"
    # the trial's config as the sweep wrote it (its config file may have changed since); else the sweep's now
    trial_cfg = None
    try:
        trial_cfg = read_config_yaml(tdir / "config.yaml") if (tdir / "config.yaml").is_file() else None
    except (MosaicError, OSError, ValueError):
        trial_cfg = None
    if not isinstance(trial_cfg, dict) and sweep is not None:
        try:
            trial_cfg = trial_config(sweep, values)
        except (MosaicError, OSError, ValueError):
            trial_cfg = None
    if not isinstance(trial_cfg, dict):
        return ("its config.yaml is missing or damaged, and the sweep's sweep.yaml does not give it, so its run cannot be told "
                "from another trial's; restore them, or delete the trial folder and rerun `mosaic sweep`")
    axes = {tuple(k.split(".")) for k in values if k != "seed" and not k.startswith((LABEL, "spec"))}
    axes.add(tuple((sweep.seed_key if sweep is not None else "training.seed").split(".")))
    differs = []
    for keys, want in _leaves(trial_cfg):
        if keys[0] == "out" or keys[:2] == ("dataset", "path"):
            continue
        node = _at(run_cfg, keys)
        if node is _MISSING and keys in axes:
            differs.append(f"{'.'.join(map(str, keys))} missing (the trial's: {want!r})")
        elif node is not _MISSING and not _same_value(node, want):
            differs.append(f"{'.'.join(map(str, keys))} {node!r} (the trial's: {want!r})")
    if not differs:
        differs = _default_differs(trial_cfg, run_cfg, sweep)
    if differs:
        return (f"its run was trained with another config, so it is another trial's run: {'; '.join(differs[:4])[:300]}; "
                "delete that trial's run folder and rerun `mosaic sweep` to train it")
    return _run_dataset_problem(tdir, trial_cfg)


def _default_differs(trial_cfg: dict, run_cfg: dict, sweep: SweepSpec | None) -> list[str]:
    """The fields a trial's config leaves to their defaults (``sampling.guidance`` when the sweep's config does not
    set it) where the run's ``config.yaml`` holds another value: the run's config is the trial's validated, so the
    two agree on every field of an honest run; a run config edited to another sampling's settings passed the
    samples check (attack round 25). The trial's config validated by its family's class (the sweep's ``kind``, else
    the run config's: ``objective`` is a transformer's); a config that no longer validates is compared as written
    only. Fields the run's config lacks (an older mosaic) and ``out`` / ``dataset`` are not compared."""
    family = sweep.kind if sweep is not None else ("transformer" if "objective" in run_cfg else "diffusion")
    full = _validated(trial_cfg, family)
    if full is None:
        return []
    differs = []
    for keys, want in _leaves(full):
        if keys[0] in ("out", "dataset"):
            continue
        node = _at(run_cfg, keys)
        if node is not _MISSING and not _same_value(node, want):
            differs.append(f"{'.'.join(map(str, keys))} {node!r} (the trial's: {want!r}, its default)")
    return differs


def _validated(cfg: dict, family: str) -> dict | None:
    """A raw training config validated by its family's class, every default filled in (JSON form), or None when it no
    longer validates."""
    from mosaic.lab.diffusion.config import DiffusionConfig
    from mosaic.lab.transformer.config import TransformerConfig

    try:
        return validate_config(TransformerConfig if family == "transformer" else DiffusionConfig, cfg).model_dump(mode="json")
    except (MosaicError, ValueError, TypeError):
        return None


def _run_dataset_problem(tdir: Path, trial_cfg: dict) -> str | None:
    """Why the run in ``tdir`` was not trained on the trial's dataset (``dataset.path`` of the trial's
    config), or None: the spec fingerprint its ``dataset.json`` (else its copy of the dataset's manifest,
    ``dataset_manifest.json``) records must be the one of the dataset's manifest, or, where that dataset
    is not there (a moved sweep), the dataset folders' names (``<spec name>-<fingerprint>``) must agree."""
    ds = trial_cfg.get("dataset")
    want = ds.get("path") if isinstance(ds, dict) else None
    if not isinstance(want, str):
        return None
    fix = "delete that trial's run folder and rerun `mosaic sweep` to train it"
    rec = None
    for name in ("dataset.json", "dataset_manifest.json"):
        try:
            rec = read_json(tdir / "run" / name)
            break
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            return f"its run's {name} cannot be read ({str(e)[:120]}); {fix}"
    if rec is None:
        return f"its run holds neither dataset.json nor dataset_manifest.json, so nothing says which dataset it was trained on; {fix}"
    if not isinstance(rec, dict):
        return f"its run's record of its dataset is no mapping; {fix}"
    try:
        man = read_json(Path(want) / "manifest.json")
    except (OSError, ValueError):
        man = None
    if isinstance(man, dict) and isinstance(man.get("fingerprint"), str):
        if rec.get("fingerprint") != man["fingerprint"]:
            return (f"its run was trained on another dataset (spec fingerprint {str(rec.get('fingerprint'))[:20]!r}; the trial's "
                    f"dataset {want} has {man['fingerprint']!r}), so it is another trial's run; {fix}")
    elif isinstance(rec.get("path"), str) and Path(rec["path"]).name != Path(want).name:
        return f"its run was trained on the dataset {Path(rec['path']).name!r}, not the trial's {Path(want).name!r}; {fix}"
    return None


#: the copy of a sweep's training config that ``mosaic sweep`` keeps in the sweep folder (its trials were made from it)
SWEEP_CONFIG = "sweep_config.yaml"


def sweep_base_config(out: Path, sweep: SweepSpec | None) -> tuple[dict | None, str | None]:
    """The training config a sweep folder's trials were made from, and the sha256 of its file: its own copy
    (:data:`SWEEP_CONFIG`, written by ``mosaic sweep`` since 2026-12-06, whose digest each trial's ``trial.json``
    records as ``sweep_config``), else ``(None, None)`` (no sweep, a folder of an older mosaic: not compared). The config
    file the sweep names is never read for this: a relative name read from another folder, or a config edited since,
    refused honest trials (attack round 29).

    Raises:
        SweepError: the copy is there but damaged (names it and the fix)."""
    p = Path(out) / SWEEP_CONFIG
    if sweep is None or not os.path.lexists(p):
        return None, None
    try:
        digest = hashlib.sha256(read_bounded(p, MAX_YAML_BYTES)).hexdigest()
        base = read_config_yaml(p)
        if not isinstance(base, dict):
            raise MosaicError(f"a {type(base).__name__}, not a mapping")
    except (MosaicError, OSError, ValueError) as e:
        raise SweepError([(str(p), f"damaged ({str(e).splitlines()[0][:120]}): it is the training config the sweep's trials "
                                   "were made from; restore it, or rerun the sweep into a new folder (--out)")]) from None
    return base, digest


def copy_problem(st: dict, digest: str | None) -> str | None:
    """Why a trial cannot be compared with the sweep folder's copy of its training config: its ``trial.json`` records
    that it was made from one (``sweep_config``, the copy's sha256 then), which is gone; or None. Deleted, the copy turned
    the trial-config comparison off (attack round 30). A copy rewritten by a later rerun of the sweep (the config's
    ``out`` or dataset location edited, which no trial differs in) is compared by content, not by this digest."""
    want = st.get("sweep_config")
    if not isinstance(want, str) or digest is not None:
        return None
    return (f"its trial.json records that it was made from the sweep's {SWEEP_CONFIG} (sha256 {want[:12]}...), which is gone, "
            "so its config cannot be compared with the sweep's: restore that file, or rerun the sweep into a new folder (--out)")


def changed_trial_config(tdir: Path, sweep: SweepSpec, values: dict, base: dict | None) -> str | None:
    """Why a trial folder's ``config.yaml`` is not the config the sweep gives that trial (its ``sweep.yaml`` with the
    sweep folder's copy of its training config ``base``, :func:`mosaic.sweep.trial_config`), or None (the same; no base to compare with; no
    readable config there, which :func:`foreign_run` names). Where the run and its dataset lie is no difference, and
    the dataset is compared through the run's (:func:`_run_dataset_problem`). A trial's and its run's config both
    edited to ``evaluation.check_n: 1`` were reported (attack round 27): the sweep's own expansion was never compared."""
    p = tdir / "config.yaml"
    if base is None or not p.is_file():
        return None
    try:
        have, want = read_config_yaml(p), trial_config(sweep, values, base)
    except (MosaicError, OSError, ValueError):
        return None
    if isinstance(have, dict):  # a default written out with its own value is the same config (both validated, or neither)
        full_have, full_want = _validated(have, sweep.kind), _validated(want, sweep.kind)
        if full_have is not None and full_want is not None:
            have, want = full_have, full_want
    diff = [d for d in config_diff(have, want) if d != "out" and d.split(".")[0] != "dataset"]
    if not diff:
        return None
    return (f"its config.yaml is not the config the sweep gives this trial ({', '.join(diff[:6])[:200]} differ from the "
            f"sweep's {SWEEP_CONFIG} with its sweep.yaml): restore the trial's config, or delete the trial folder and rerun "
            "`mosaic sweep` (or run the sweep into a new folder, --out)")


def trial_time_problem(st: dict, tdir: Path) -> str | None:
    """Why a trial's ``time_s`` is not the time its ``trial.json`` and run give, or None: it must be at most its own
    ``finished - started`` (wall clock, 2 s or 5 % of slack; the wall clock may run further, never shorter: a laptop
    suspended during a trial counts the sleep there, not in ``time_s``, round 32), and its run's ``metrics.json``
    ``time_s`` (the training command inside the trial) at most it. Edited alone, either went into the results
    (attack round 31)."""
    t_s, a, b = st.get("time_s"), st.get("started"), st.get("finished")
    if not seconds_ok(t_s):
        return None
    if seconds_ok(a) and seconds_ok(b) and b >= a and t_s > (b - a) + max(2.0, 0.05 * (b - a)):
        return f"time_s is {t_s!r}, longer than its started and finished are apart ({b - a:.3g} s)"
    try:
        run_t = read_json(tdir / "run" / "metrics.json").get("time_s") if (tdir / "run" / "metrics.json").is_file() else None
    except (OSError, ValueError, AttributeError):
        return None  # named where the run's metrics are read
    if st.get("status") == "done" and seconds_ok(run_t) and run_t > t_s + max(2.0, 0.05 * t_s):
        return f"time_s is {t_s!r}, shorter than its run's training command ({tdir / 'run' / 'metrics.json'} time_s {run_t:.3g})"
    return None
