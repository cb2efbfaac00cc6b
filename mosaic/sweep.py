"""Sweeps: many (spec override x training override x seed) trials, locally or on a Ray cluster.

A sweep YAML names a training config, the axes to vary and how to report them::

    name: composition_cpu
    kind: diffusion                       # the trainer: `mosaic train <kind>`
    config: experiments/train/quickstart_cpu.yaml
    set: {training.steps: 300}            # overrides of every trial's config
    grid:                                 # Cartesian product of axes
      spec.holdout.rule.n: [1, 3, 5, 8]   # `spec.` keys override the dataset spec
      spec.splits.train: [1000, 4000]
    zip: {}                               # axes of equal length varied together, crossed with grid
                                          # (`label.<name>` axes only name the trials' condition)
    seeds: [0, 1]                         # crossed with everything; sets training.seed
    report: {x: spec.holdout.rule.n, lines: spec.splits.train}

Each trial is its own run folder ``SWEEP_DIR/trials/<id>/`` (resolved ``config.yaml``,
``trial.json`` status, ``log.txt``, ``run/``) and runs as its own subprocess (Accelerate keeps one
state per process). Datasets are generated first, once per distinct spec (cached by fingerprint
in the config's ``dataset.root`` and shared between trials). A finished trial is skipped on rerun;
a failed one is recorded with its error and does not stop the others. Results go to
``results.csv`` and ``results.parquet``, one row per trial.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from mosaic.errors import MosaicError, SweepError
from mosaic.io import atomic_write, atomic_writer, open_append
from mosaic.schema import SafeName, Seed
from mosaic.schema import StrictModel as _Base
from mosaic.claims import _canon, claim_problems, parse_claim, sweep_claim_problems
from mosaic.diagnostics.columns import analysis_columns
from mosaic.evaluation.table import check_row, table_columns
from mosaic.kinds import check_family, check_kind
from mosaic.lab.config import _config_error, config_diff, read_config_yaml, set_path, validate_config
from mosaic.overrides import apply_overrides, validation_problems
from mosaic.vocab import closest

#: keys of these sections hold dots themselves (``set.training.steps``: the key ``training.steps`` of ``set``)
FLAT_SECTIONS = ("set.", "grid.", "zip.")


def _first_error(e: Exception) -> str:
    """The first problem of a claim's validation error (pydantic's list, or the message)."""
    errs = getattr(e, "errors", None)
    if callable(errs):
        first = errs()[0]
        return f"{'.'.join(str(x) for x in first.get('loc', ()))}: {first.get('msg')}".strip(": ")
    return str(e).splitlines()[0]


class ReportSection(_Base):
    """What ``mosaic report`` plots: ``y`` metrics (result columns) against axis ``x``, one line per
    value of axis ``lines``, error bars over seeds."""

    x: str | None = Field(None, description="axis on the x axis (default: the first grid axis)")
    lines: str | None = Field(None, description="axis giving one line per value (default: the second grid axis)")
    y: list[str] = Field(default_factory=lambda: ["held_out.joint", "seen.joint"], description="result columns to plot")
    x_label: str | None = None
    claims: list[Any] = Field(default_factory=list, max_length=1000, description="claims the sweep tests (mosaic.claims): structured mappings or sentences, at most 1,000")

    @field_validator("claims")
    @classmethod
    def _claims(cls, v):
        for i, c in enumerate(v):
            try:
                parse_claim(c)
            except ValueError as e:
                raise ValueError(f"claims[{i}]: {_first_error(e)}") from None
        return v


class SweepSpec(_Base):
    """A sweep file (see the module docstring)."""

    name: SafeName = Field(description="sweep name; the folder defaults to data/sweeps/<name> (no '/', '..')")
    description: str = ""
    kind: Literal["diffusion", "transformer"]
    config: Path
    set: dict[str, Any] = Field(default_factory=dict, description="overrides of every trial (`spec.` keys: the dataset spec)")
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    zip: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: list[Seed] = Field(default_factory=lambda: [0], min_length=1)
    seed_key: str = "training.seed"
    timeout_s: float | None = Field(None, gt=0, le=10**7, description="per-trial time limit")
    report: ReportSection = Field(default_factory=ReportSection)

    @model_validator(mode="after")
    def _axes(self):
        for name, vals in {**self.grid, **self.zip}.items():
            if not vals:
                raise ValueError(f"axis {name!r} has no values")
        lens = {len(v) for v in self.zip.values()}
        if len(lens) > 1:
            raise ValueError(f"zip axes must have equal lengths, got {({k: len(v) for k, v in self.zip.items()})}")
        both = set(self.grid) & set(self.zip)
        if both:
            raise ValueError(f"axes {sorted(both)} are in both grid and zip: keep each axis in one")
        for section, entries in (("grid", self.grid), ("zip", self.zip), ("set", {k: [v] for k, v in self.set.items()})):
            for key, vals in entries.items():
                if not key.startswith(LABEL) and any(_sets_key(key, v, self.seed_key) for v in vals):
                    raise ValueError(f"{section}.{key} sets {self.seed_key}, which `seeds:` overwrites in every trial: list the "
                                     f"seeds under `seeds:` instead (e.g. seeds: [0, 1, 2])")
        for key in self.set:
            if key.startswith(LABEL):
                raise ValueError(f"set.{key}: a label axis names the conditions of grid or zip; in `set` it would name nothing")
        for key, vals in {**self.grid, **self.zip}.items():
            if key.startswith(LABEL):
                name = key[len(LABEL):]
                if not name or not name.replace("_", "").isalnum() or name == "seed":
                    raise ValueError(f"{key}: a label axis is `label.<name>` with a name of letters, digits and _ (not 'seed')")
                if not all(isinstance(v, str) and v for v in vals) or len(set(vals)) != len(vals):
                    raise ValueError(f"{key}: label values must be distinct non-empty strings, got {vals!r}")
                if {"max", "min"} & set(vals):
                    raise ValueError(f"{key}: 'max' and 'min' are claim selectors (the largest / smallest value), not label values: "
                                     "choose other names")

        # claims and reports tell conditions apart by this key: grid values and label values must differ by it (a zip
        # axis may repeat a value across conditions: its label axis, or another zip axis, tells them apart)
        for key, vals in {**self.grid, **{k: v for k, v in self.zip.items() if k.startswith(LABEL)}}.items():
            seen: dict[str, Any] = {}
            for v in vals:
                k = _canon(v)
                if k in seen:
                    raise ValueError(f"{key}: values {seen[k]!r} and {v!r} are the same value where results are compared "
                                     f"(both read as {json.loads(k)!r}): use distinct values")
                seen[k] = v
        n = n_trials(self)
        if n > MAX_TRIALS:  # bounded before expand() builds one dict per trial
            sizes = [f"{k} {len(v)}" for k, v in self.grid.items()] + ([f"zip {len(next(iter(self.zip.values())))}"] if self.zip else [])
            raise ValueError(f"grid x zip x seeds: {' x '.join(sizes + [f'seeds {len(self.seeds)}'])} = {n:,} trials: a sweep holds at most "
                             f"{MAX_TRIALS:,}; split it into several sweeps, or use fewer values per axis")

        for field in ("x", "lines"):
            name = getattr(self.report, field)
            if name is not None and name not in self.axes():
                close = closest(name, self.axes(), cutoff=0.6)
                hint = f"did you mean {close!r}? " if close else ""
                raise ValueError(f"report.{field} {name!r} is not an axis of the sweep: {hint}axes: {', '.join(self.axes())}")

        problems = claim_problems([parse_claim(c) for c in self.report.claims], self.axes(),
                                  values={**self.grid, **self.zip, "seed": list(self.seeds)})
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def axes(self) -> list[str]:
        return list(self.grid) + list(self.zip) + ["seed"]


#: most trials one sweep may have (product of the grid axes' lengths x the zip length x seeds),
#: checked before any trial list is built
MAX_TRIALS = 100_000


def n_trials(sweep: SweepSpec) -> int:
    """The number of trials :func:`expand` gives, computed without expanding (exact integer)."""
    import math

    zip_len = len(next(iter(sweep.zip.values()))) if sweep.zip else 1
    return math.prod(len(v) for v in sweep.grid.values()) * zip_len * len(sweep.seeds)


def _sets_key(key: str, value: Any, target: str) -> bool:
    """Whether overriding ``key`` with ``value`` sets the dotted field ``target``: ``key`` is it, or a
    section above it given as a mapping that reaches it (``training: {seed: 3}``)."""
    if key == target:
        return True
    if isinstance(value, dict) and target.startswith(key + "."):
        rest = target[len(key) + 1:]
        return any(_sets_key(str(k), v, rest) for k, v in value.items())
    return False


def load_sweep(path: str | Path, sets: list[str] | None = None) -> SweepSpec:
    """Read and validate a sweep YAML. Raises SweepError naming the field."""
    from pydantic import ValidationError

    path = Path(path)
    try:
        data = read_config_yaml(path)
        check_kind(data, "sweep", str(path), SweepError)
        if not isinstance(data, dict):
            raise SweepError(f"a sweep is a YAML mapping (name:, kind:, config:, grid: ...), got {type(data).__name__}")
        # `set.`, `grid.` and `zip.` keys take the rest of the path as one key: --set set.training.steps=5
        # replaces that one override and keeps the rest of `set`
        data = apply_overrides(data, sets, _config_error, example="set.training.steps=5", flat_prefixes=FLAT_SECTIONS,
                               container="section")
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        lines = [f"  {loc}: {msg}" if loc else f"  {msg}" for loc, msg in validation_problems(e, model=SweepSpec)]
        raise SweepError(f"invalid sweep {path}\n" + "\n".join(lines)) from None
    except MosaicError as e:
        raise SweepError(f"invalid sweep {path}: {e}") from None
    if not spec.config.is_file():
        raise SweepError(f"invalid sweep {path}\n  config: no such training config {str(spec.config)!r}")

    try:
        raw = read_config_yaml(spec.config)
    except MosaicError as e:
        raise SweepError(f"invalid sweep {path}\n  config: {e}") from None
    check_family(raw, spec.kind, str(spec.config),
                 lambda m: SweepError(f"invalid sweep {path}\n  config: {m} (this sweep has kind: {spec.kind})"))
    return spec


def expand(sweep: SweepSpec) -> list[dict[str, Any]]:
    """Every trial's axis values (``{axis: value}``, with ``seed``), grid-major, seeds innermost.

    Raises:
        SweepError: more than :data:`MAX_TRIALS` trials (a SweepSpec built without validation).
    """
    if n_trials(sweep) > MAX_TRIALS:
        raise SweepError(f"sweep {sweep.name} has {n_trials(sweep):,} trials: a sweep holds at most {MAX_TRIALS:,}")
    grid_keys = list(sweep.grid)
    zip_rows = [dict(zip(sweep.zip, vals)) for vals in zip(*sweep.zip.values())] if sweep.zip else [{}]
    out = []
    for combo in itertools.product(*[sweep.grid[k] for k in grid_keys]):
        for z in zip_rows:
            for seed in sweep.seeds:
                out.append({**dict(zip(grid_keys, combo)), **z, "seed": seed})
    return out


def _short(key: str) -> str:
    return key.split(".")[-1]


def _fmt(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "-".join(_fmt(x) for x in v)
    if isinstance(v, dict):
        return "-".join([_fmt(x) for x in v.values() if not isinstance(x, bool)] + [k for k, x in v.items() if x is True])
    return str(v)


def trial_id(values: dict[str, Any]) -> str:
    """A readable, stable folder name for a trial: ``n=3_train=1000_seed=0-1a2b3c``."""
    h = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:6]
    label = "_".join(f"{_short(k)}={_fmt(v)}" for k, v in values.items())
    safe = "".join(ch if ch.isalnum() or ch in "=_-." else "-" for ch in label)[:80]
    return f"{safe}-{h}"


LABEL = "label."
"""Axes named ``label.<name>`` set nothing: they name a trial's condition (e.g. ``label.condition:
[baseline, distractors, skewed]`` zipped with the axes that make each condition), so results and
claims can select it (``where: {condition: baseline}``)."""


def trial_config(sweep: SweepSpec, values: dict[str, Any]) -> dict:
    """The raw training config of a trial: the sweep's config with ``set`` and the trial's axis
    values applied (``spec.`` keys into ``dataset.overrides``) and the seed at ``seed_key``."""

    raw = read_config_yaml(sweep.config)
    overrides = list(sweep.set.items()) + [(k, v) for k, v in values.items() if k != "seed"]
    for key, value in overrides:
        if key.startswith(LABEL):  # a label axis only names the condition (results column, claims)
            continue
        if key == "spec" and isinstance(value, dict):  # `set: {spec: {holdout.rule.n: 3}}`
            overrides += [(f"spec.{k}", v) for k, v in value.items()]
            continue
        if key.startswith("spec."):
            ds = raw.setdefault("dataset", {})
            if ds.get("spec") is None:
                raise SweepError(f"axis {key!r} overrides the dataset spec, but {sweep.config} has no dataset.spec (it uses dataset.path)")
            ds.setdefault("overrides", {})
            ds["overrides"] = {**(ds["overrides"] or {}), key[len("spec."):]: value}
        elif isinstance(value, dict) and isinstance(_get_path(raw, key), dict):
            raw = set_path(raw, key, _merged(_get_path(raw, key), value))  # a mapping merges into the section it names
        else:
            raw = set_path(raw, key, value)
    raw = set_path(raw, sweep.seed_key, values["seed"])
    return raw


def _get_path(data: dict, key: str):
    node = data
    for part in key.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _merged(base: dict, over: dict) -> dict:
    """``base`` with ``over`` merged in, recursively (``over`` wins; keys are taken literally, so the
    flat ``key.path`` entries of ``dataset.overrides`` stay flat)."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merged(out[k], v)
        else:
            out[k] = v
    return out


def _trainer(kind: str):
    """(config class, DatasetSection accessor) of a trainer kind."""
    if kind == "diffusion":
        from mosaic.lab.diffusion import DiffusionConfig

        return DiffusionConfig
    from mosaic.lab.transformer import TransformerConfig

    return TransformerConfig


def plan(sweep: SweepSpec, out: Path) -> list[dict]:
    """Every trial's id, axis values, folder, validated config and dataset folder, writing nothing.

    Raises: SweepError / SpecError / ConfigError for a trial whose config or spec is invalid
    (checked for every trial before anything runs).
    """
    from mosaic.lab.data import resolve_dataset

    cls = _trainer(sweep.kind)
    trials, datasets = [], {}
    for values in expand(sweep):
        raw = trial_config(sweep, values)
        tid = trial_id(values)
        cfg = validate_config(cls, raw, source=f"trial {tid}")
        key = json.dumps(cfg.dataset.model_dump(mode="json"), sort_keys=True)
        if key not in datasets:
            datasets[key] = resolve_dataset(cfg.dataset, generate=False)
        trials.append({"id": tid, "values": values, "dir": out / "trials" / tid, "dataset": datasets[key], "raw": raw, "cfg": cfg})
    if sweep.report.claims:  # a claim naming a column the trials will not have is an error now, not after the run

        problems = sweep_claim_problems(sweep.report.claims, trials, sweep.kind)
        if problems:
            raise SweepError(f"invalid sweep {sweep.name}\n" + "\n".join(f"  {p}" for p in problems))
    return trials


def prepare(sweep: SweepSpec, out: Path, on_progress: Callable[[str], None] | None = None) -> list[dict]:
    """Write every trial's folder and config, and generate the datasets they need (once per spec).

    Returns the trials as dicts: ``id``, ``values``, ``dir``, ``dataset``.
    Raises: as :func:`plan`, before anything is written.
    """
    from mosaic.lab.data import resolve_dataset

    trials = plan(sweep, out)
    _refuse_changed_trials(trials)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "sweep.yaml", yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False))
    # generate each distinct dataset once, before any trial trains on it
    done_roots = set()
    for t in trials:
        root = Path(t["dataset"])
        if root in done_roots:
            continue
        if on_progress:
            on_progress(f"dataset {root}")
        resolve_dataset(t["cfg"].dataset, generate=True)
        done_roots.add(root)
    for t in trials:
        raw = _trial_raw(t)
        t.pop("raw")
        t.pop("cfg")
        t["dir"].mkdir(parents=True, exist_ok=True)
        atomic_write(t["dir"] / "config.yaml", yaml.safe_dump(raw, sort_keys=False))
        status = read_status(t["dir"])
        if status.get("status") != "done":
            write_status(t["dir"], {"id": t["id"], "values": t["values"], "status": "pending", "dataset": str(t["dataset"])})
    return trials


def _trial_raw(t: dict) -> dict:
    """The config a trial's folder holds: its raw config with the dataset and run paths resolved."""
    raw = copy.deepcopy(t["raw"])
    raw["dataset"] = {"path": str(Path(t["dataset"]).resolve())}
    raw["out"] = str((t["dir"] / "run").resolve())
    return raw


def _refuse_changed_trials(trials: list[dict]) -> None:
    """A trial folder left by an earlier run of the sweep must hold the same config: a finished
    trial would otherwise be skipped and its old results reported under the new config.

    Raises:
        SweepError: naming each such trial and the fields that differ.
    """

    changed = []
    for t in trials:
        p = t["dir"] / "config.yaml"
        if not p.is_file():
            continue
        # where the run folder and its dataset lie is no difference: a moved or copied sweep folder resumes (the
        # run checks its dataset's identity itself, mosaic.lab.loop.RunFolder.open)
        diff = [d for d in config_diff(yaml.safe_load(p.read_text()), _trial_raw(t)) if d not in ("out", "dataset.path")]
        if diff:
            changed.append(f"  {t['id']} ({read_status(t['dir']).get('status', 'unknown')}): {', '.join(diff[:6])}")
    if changed:
        out = trials[0]["dir"].parent.parent
        raise SweepError(
            f"sweep folder {out} holds trials run with another config:\n" + "\n".join(changed)
            + f"\nrun the changed sweep into a new folder (--out), or delete those trial folders under {out / 'trials'} to rerun them"
        )


def _trial_file(p: Path) -> dict:
    """A trial's JSON file (``trial.json``, ``run/metrics.json``) as a mapping, or SweepError naming
    the file and the fix (not UTF-8, not JSON, nested too deep, not a mapping)."""
    try:
        data = json.loads(p.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise SweepError([(str(p), f"damaged ({type(e).__name__}: {str(e)[:100]}): restore it, or delete the trial folder "
                                   f"{p.parent if p.name == 'trial.json' else p.parent.parent} and rerun `mosaic sweep` to redo the trial")]) from None
    if not isinstance(data, dict):
        raise SweepError([(str(p), f"damaged (a {type(data).__name__}, not a mapping): restore it, or delete the trial folder and rerun "
                                   "`mosaic sweep` to redo the trial")])
    return data


def read_status(tdir: Path) -> dict:
    p = Path(tdir) / "trial.json"
    return _trial_file(p) if p.is_file() else {}


def write_status(tdir: Path, status: dict) -> None:
    p = Path(tdir) / "trial.json"
    atomic_write(p, json.dumps(status, indent=2, default=str))


def trial_command(kind: str, tdir: Path) -> list[str]:
    """The subprocess that runs one trial (train, sample, evaluate)."""
    return [sys.executable, "-m", "mosaic.cli", "train", kind, str(Path(tdir) / "config.yaml")]


def run_trial(kind: str, tdir: str, env: dict | None = None, timeout_s: float | None = None) -> dict:
    """Run one trial in a subprocess, logging to ``log.txt``; record the outcome in ``trial.json``.

    Pure in the trial folder, so it runs the same in a local pool and on a Ray worker (which must
    see the sweep directory, e.g. on a shared file system). Returns the final status dict.
    """
    tdir = Path(tdir)
    status = read_status(tdir)
    if status.get("status") == "done" and (tdir / "run" / "metrics.json").is_file():
        return status
    status.update(status="running", started=time.time(), host=os.uname().nodename, error=None)
    write_status(tdir, status)
    t0 = time.perf_counter()
    full_env = {**os.environ, **(env or {}), "MOSAIC_DIE_WITH_PARENT": "1"}  # the trial ends if this process dies
    with open_append(tdir / "log.txt") as log:  # never through a link planted in the trial folder
        try:
            proc = subprocess.run(trial_command(status.get("kind", kind), tdir), stdout=log, stderr=subprocess.STDOUT,
                                  env=full_env, timeout=timeout_s, cwd=os.getcwd())
            rc = proc.returncode
            err = None
        except subprocess.TimeoutExpired:
            rc, err = -1, f"timed out after {timeout_s} s"
    status["time_s"] = time.perf_counter() - t0
    status["finished"] = time.time()
    metrics = tdir / "run" / "metrics.json"
    if rc == 0 and metrics.is_file():
        status.update(status="done", returncode=0)
    else:
        tail = (tdir / "log.txt").read_text(errors="replace").strip().splitlines()[-15:]
        status.update(status="failed", returncode=rc, error=err or ("\n".join(tail) or f"exit code {rc}"))
    write_status(tdir, status)
    return status


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # pragma: no cover - torch is a dependency
        return 0


def run_local(kind: str, trials: list[dict], workers: int, timeout_s: float | None,
              on_done: Callable[[dict], None] | None = None) -> list[dict]:
    """Run trials in a local pool of ``workers`` slots. With GPUs, each slot owns one GPU
    (``CUDA_VISIBLE_DEVICES``); on CPU the cores are shared out (``OMP_NUM_THREADS``)."""
    gpus = _gpu_count()
    slots = list(range(workers))
    free = list(slots)
    results = []
    threads = max(1, (os.cpu_count() or 1) // workers)

    def job(t):
        slot = free.pop()
        try:
            env = {"CUDA_VISIBLE_DEVICES": str(slot % gpus)} if gpus else {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads)}
            return run_trial(kind, str(t["dir"]), env, timeout_s)
        finally:
            free.append(slot)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(job, t): t for t in trials}
        for f in as_completed(futures):
            st = f.result()
            results.append(st)
            if on_done:
                on_done(st)
    return results


def run_ray(kind: str, trials: list[dict], address: str | None, timeout_s: float | None,
            on_done: Callable[[dict], None] | None = None, num_cpus: int | None = None) -> list[dict]:
    """Run trials as Ray tasks (one GPU each where the cluster has GPUs). ``address`` connects to
    a running cluster (``ray://...`` or ``auto``); None starts a local Ray instance. Every node must
    see the sweep directory and the datasets at the same paths (a shared file system)."""
    try:
        import ray
    except ImportError:
        raise SweepError("--backend ray needs Ray: pip install 'mosaic[ray]'") from None
    started = False
    if not ray.is_initialized():
        kw = {"address": address} if address else {"num_cpus": num_cpus}
        ray.init(include_dashboard=False, log_to_driver=False, **kw)
        started = True
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        remote = ray.remote(num_gpus=1 if gpus else 0, num_cpus=1)(run_trial)
        refs = {remote.remote(kind, str(t["dir"].resolve()), {"OMP_NUM_THREADS": "1"} if not gpus else None, timeout_s): t for t in trials}
        results = []
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            st = ray.get(ready[0])
            results.append(st)
            if on_done:
                on_done(st)
        return results
    finally:
        if started:
            ray.shutdown()


# ----------------------------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------------------------

def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, (int, float, str, bool)) or d is None:
        out[prefix] = d
    return out


def result_row(tdir: Path) -> dict:
    """One results row: the trial's axis values, status, run time, and its metrics (flattened).

    Standard columns (when the run reports them): ``seen.<metric>`` and ``held_out.<metric>``,
    the run's seen / held-out table (:func:`mosaic.evaluation.table.table_columns`; e.g.
    ``seen.<concept>``, ``held_out.joint``), and ``evaluator.joint`` (the evaluator's own joint
    accuracy, :func:`mosaic.evaluation.table.check_row`), and ``analysis.<...>``, the run's
    representation diagnostics (:func:`mosaic.diagnostics.columns.analysis_columns`), and
    ``value.<concept>.<value>``, the joint accuracy over every test image whose intended value of
    the concept is that value (diffusion; :func:`mosaic.evaluation.metrics.score`'s ``by_value``):
    e.g. ``value.shape.cross`` scores the tail value of a skewed shape distribution.
    """
    st = read_status(tdir)
    row: dict[str, Any] = {"trial": st.get("id", tdir.name), "status": st.get("status"), "time_s": st.get("time_s"),
                           "error": (st.get("error") or "")[-500:] or None}
    row.update(st.get("values", {}))
    mpath = tdir / "run" / "metrics.json"
    if mpath.is_file():
        m = _trial_file(mpath)

        row.update(table_columns(m.get("table")))
        # the parser's match quality and abstention (diffusion; mosaic.evaluation.quality.quality_summary):
        # <group>.quality, <group>.raw.<concept> / .raw.joint (accuracy before abstention), abstention.*
        q = (m.get("scores") or {}).get("quality") or {}
        for g in ("seen", "held_out"):
            qg = q.get(g) or {}
            if qg.get("quality") is not None:
                row[f"{g}.quality"] = qg["quality"]
                row[f"{g}.raw.joint"] = qg["joint_accuracy_without_abstention"]
                row.update({f"{g}.raw.{c}": v for c, v in (qg.get("accuracy_without_abstention") or {}).items()})
        for c, vals in ((m.get("scores") or {}).get("by_value") or {}).items():
            for v, r in vals.items():
                if isinstance(r.get("joint_accuracy"), (int, float)):
                    row[f"value.{c}.{v}"] = r["joint_accuracy"]
        if "verdicts_changed" in q:
            row["abstention.abstained"] = q["abstained"]
            row["abstention.verdicts_changed"] = q["verdicts_changed"]

        row.update(analysis_columns(m.get("analysis")))  # the representation diagnostics (mosaic analyze)
        joint = check_row(m.get("evaluator_check")).get("joint")
        if isinstance(joint, (int, float)):
            row["evaluator.joint"] = joint
        for k, v in _flatten({k: v for k, v in m.items() if k not in ("table", "evaluator_check", "analysis")}).items():
            if k.startswith("scores.by_value."):
                continue  # already the value.* columns
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row.setdefault(f"metrics.{k}", v)
    return row


def collect(out: Path) -> "pd.DataFrame":  # noqa: F821
    """Gather every trial of a sweep folder into ``results.csv`` and ``results.parquet``."""
    import pandas as pd

    rows = [result_row(d) for d in sorted((out / "trials").iterdir()) if d.is_dir()] if (out / "trials").is_dir() else []
    df = pd.DataFrame(rows)
    axes = [c for c in df.columns if c.startswith(("spec.", "training.", "model.", "dataset.", LABEL)) or c == "seed"]
    sortable = [c for c in axes if df[c].map(lambda v: isinstance(v, (int, float))).all()]
    if sortable:
        df = df.sort_values(sortable, kind="stable").reset_index(drop=True)
    atomic_write(out / "results.csv", df.to_csv(index=False))  # whole or not replaced
    # an axis whose values mix strings and mappings (`distribution: [uniform, {kind: geometric}]`)
    # has no Arrow type: such columns go to Parquet as JSON text (the returned frame keeps the values)
    mixed = [c for c in df.columns if df[c].map(lambda v: isinstance(v, (dict, list, tuple))).any()]
    with atomic_writer(out / "results.parquet") as f:
        df.assign(**{c: df[c].map(lambda v: json.dumps(v, sort_keys=True, default=str)) for c in mixed}).to_parquet(f, index=False)
    return df


MAX_SWEEP_WORKERS = 1024  # trials at a time (threads or Ray tasks in flight)


def check_sweep_options(backend: str, workers: int = 1, address: str | None = None) -> None:
    """Validate the run options before anything is written. Raises SweepError naming the option."""
    problems = []
    if backend not in ("local", "ray"):
        close = closest(backend, ["local", "ray"], cutoff=0.6)
        problems.append(("--backend", f"{backend!r} is not one of local, ray" + (f": did you mean {close!r}?" if close else "")))
    if not isinstance(workers, int) or not 1 <= workers <= MAX_SWEEP_WORKERS:
        problems.append(("--workers", f"{workers!r}: give 1 to {MAX_SWEEP_WORKERS} trials at a time"))
    if address and backend != "ray":
        problems.append(("--address", f"{address!r} applies to --backend ray only: drop it or add --backend ray"))
    if backend == "ray" and not problems:
        try:
            import ray  # noqa: F401
        except ImportError:
            problems.append(("--backend", "ray needs Ray: pip install 'mosaic[ray]' (or use --backend local)"))
    if problems:
        raise SweepError(problems)


def run_sweep(sweep: SweepSpec, out: Path, backend: str = "local", workers: int = 1, address: str | None = None,
              on_progress: Callable[[str], None] | None = None, on_done: Callable[[dict], None] | None = None):
    """Prepare, run (skipping finished trials) and collect a sweep. Returns ``(trials, results DataFrame)``."""
    check_sweep_options(backend, workers, address)
    trials = prepare(sweep, out, on_progress)
    todo = [t for t in trials if read_status(t["dir"]).get("status") != "done"]
    for t in todo:
        st = read_status(t["dir"])
        st["kind"] = sweep.kind
        write_status(t["dir"], st)
    if backend == "local":
        run_local(sweep.kind, todo, workers, sweep.timeout_s, on_done)
    elif backend == "ray":
        run_ray(sweep.kind, todo, address, sweep.timeout_s, on_done, num_cpus=workers)
    else:
        raise SweepError(f"--backend {backend!r}: use local or ray")
    return trials, collect(out)
