"""Sweep files: many (spec override x training override x seed) trials, locally or on a Ray cluster.

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

This module is the sweep file: its model (:class:`SweepSpec`), loading with overrides, the trials it
expands to and each trial's config. Running them is :mod:`mosaic.trials`.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import subprocess
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from mosaic.errors import MosaicError, SweepError
from mosaic.schema import SafeName, Seed
from mosaic.schema import StrictModel as _Base
from mosaic.claims import _canon, claim_problems, parse_claim
from mosaic.holdout_rules import HoldoutRule
from mosaic.kinds import check_family, check_kind
from mosaic.lab.config import _config_error, read_config_yaml, set_path
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
    x_scale: Literal["linear", "log"] = Field("linear", description="scale of the x axis of the curves: 'log' for axes such as training sizes that span orders of magnitude (numeric, positive values)")
    claims: list[Any] = Field(default_factory=list, max_length=1000, description="claims the sweep tests (mosaic.claims): structured mappings or sentences, at most 1,000")
    cells: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")], HoldoutRule] = Field(
        default_factory=dict, max_length=100,
        description="fixed cell sets scored in every trial whatever its holdout: name -> a holdout rule whose held-out cells are the set "
                    "(e.g. same_colour: {kind: diagonal, n: 1}); gives columns cells.<name>.joint / .<concept> / .n / .held_out "
                    "(mosaic.evaluation.cell_sets)")

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
                if any(_sets_key(key, v, "out") for v in vals):  # an axis of `out` gave conditions that differ by nothing
                    raise ValueError(f"{section}.{key} sets out, the run folder, which the sweep sets to each trial's own "
                                     "(<sweep folder>/trials/<id>/run) in every trial; give the sweep's folder with --out")
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
        twice = sorted({s for s in self.seeds if self.seeds.count(s) > 1})
        if twice:  # one trial id, one folder: the copy would be counted as another seed's result (n and intervals wrong)
            raise ValueError(f"seeds: {', '.join(map(str, twice))} listed more than once: a seed names one trial (its folder and "
                             "its results row); list each seed once")
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
        raise SweepError(f"invalid sweep {path}\n  config: no such training config {str(spec.config)!r}"
                         + (f" (a relative path is read from the current folder {Path.cwd()}: run from the folder the sweep's paths "
                            "start at, e.g. the project folder holding experiments/)" if not spec.config.is_absolute() else ""))

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


def trial_id(values: dict[str, Any], legacy: bool = False) -> str:
    """A readable, stable folder name for a trial: ``n=3_train=1000_seed=0-1a2b3c`` (the hash of
    every value makes it unique). A label over 80 characters is cut before its ``_seed=N``, so the
    seed stays readable (``..._distribution=weights-2255-1795-14_seed=1-ca8e52``); ``legacy`` gives
    the name sweeps made before that (cut after 80 characters, seed and all), which a sweep folder
    made then still uses (:func:`mosaic.trials.plan` resumes it under its old name)."""
    h = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:6]

    def safe(text: str) -> str:
        return "".join(ch if ch.isalnum() or ch in "=_-." else "-" for ch in text)

    label = safe("_".join(f"{_short(k)}={_fmt(v)}" for k, v in values.items()))
    if len(label) > 80 and not legacy and "seed" in values:
        tail = safe(f"_seed={_fmt(values['seed'])}")
        head = safe("_".join(f"{_short(k)}={_fmt(v)}" for k, v in values.items() if k != "seed"))
        label = head[:max(0, 80 - len(tail))] + tail
    label = label[:80]
    if _nbytes(label) > MAX_LABEL_BYTES:  # a file name holds 255 bytes, not 80 letters of any size: cut by bytes, seed kept
        tail = safe(f"_seed={_fmt(values['seed'])}") if "seed" in values and not legacy else ""
        tail = tail if _nbytes(tail) <= MAX_LABEL_BYTES // 2 else ""
        head = label[:-len(tail)] if tail and label.endswith(tail) else label
        while head and _nbytes(head) > MAX_LABEL_BYTES - _nbytes(tail):
            head = head[:-1]
        label = head + tail
    return f"{label}-{h}"


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


#: the most UTF-8 bytes of a trial id's label: a file name holds at most 255 bytes, and the report names files after the
#: trial (``.<id>-heatmap0.png.tmp<pid>.<hex>``, 45 bytes more); 80 letters of 4 (or 3) bytes each did not fit
MAX_LABEL_BYTES = 180


LABEL = "label."
"""Axes named ``label.<name>`` set nothing: they name a trial's condition (e.g. ``label.condition:
[baseline, distractors, skewed]`` zipped with the axes that make each condition), so results and
claims can select it (``where: {condition: baseline}``)."""


def trial_config(sweep: SweepSpec, values: dict[str, Any], base: dict | None = None) -> dict:
    """The raw training config of a trial: the sweep's config (``base``: that file read once for every
    trial of a plan, so an edit while the sweep is planned never gives two trials two configs, and
    100,000 trials do not parse it 100,000 times) with ``set`` and the trial's axis values applied
    (``spec.`` keys into ``dataset.overrides``) and the seed at ``seed_key``."""

    raw = copy.deepcopy(base) if base is not None else read_config_yaml(sweep.config)
    if not isinstance(raw, dict):  # /etc/passwd (a YAML string) was named as "--set: 'training.lr': '' is a value"
        raise SweepError([("config", f"{sweep.config} is not a training config: a config is a YAML mapping, got "
                           f"{type(raw).__name__}; give the YAML file of `mosaic train` (e.g. experiments/train/*.yaml)")])
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
        elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
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
