"""Configuration shared by the lab's model families (pydantic, ``extra="forbid"``).

A lab config is one YAML file with the sections ``dataset`` and ``training`` (this module) plus
the family's own (``model``, ``sampling``, ``evaluation`` for diffusion). ``--set key.path=value``
overrides any field (the value is parsed as YAML). Every problem is reported at once with its
field path (:class:`ConfigError`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, model_validator

from mosaic.errors import ConfigError, TrainingError  # noqa: F401  (re-exported: tests and lab modules import them here)
from mosaic.overrides import apply_overrides, missing_file_hint, read_yaml_file, set_in_place, validation_problems
from mosaic.schema import SafeName, Seed, StrictModel
from mosaic.kinds import check_family, check_kind, family_of

#: bounds on user numbers that size loops and tensors (docs/faults.md, "What is rejected")
MAX_STEPS = 10**9
MAX_BATCH = 2**20

_Base = StrictModel  # the one strict base (mosaic.schema); the family configs subclass it


class DatasetSection(_Base):
    """Where the training data comes from: an existing dataset directory (``path``) or a spec
    (``spec`` + ``overrides``) generated on demand into ``root/<spec name>-<fingerprint>``, so one
    config runs end to end and a second run of the same spec reuses the generated data."""

    path: Path | None = Field(None, description="existing dataset directory (made by `mosaic generate`)")
    spec: Path | None = Field(None, description="spec YAML generated on demand when `path` is not given")
    overrides: dict[str, Any] = Field(default_factory=dict, description="spec overrides {key.path: value}, e.g. {image.size: 32}")
    root: Path = Field(Path("data"), description="parent directory of datasets generated from `spec`")
    workers: int = Field(2, ge=1, le=1024, description="generation worker processes (and, with `stream`, DataLoader workers rendering the training batches)")
    stream: bool = Field(False, description="train from mosaic.stream.StreamSource: training images are sampled and rendered on "
                                            "the fly (the same images as on disk), so only the other splits are written")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.spec is None):
            raise ValueError("give exactly one of dataset.path (an existing dataset) or dataset.spec (generated on demand)")
        if self.path is not None and self.overrides:
            raise ValueError("dataset.overrides apply to dataset.spec only; a dataset at dataset.path is used as it is")
        return self


class EMASection(_Base):
    """Exponential moving average of the weights (diffusers ``EMAModel``). With ``warmup`` the decay
    grows as ``1 - (1 + step) ** -power`` up to ``decay`` (Karras et al. 2022 style warm-up), which
    keeps EMA useful for short runs."""

    enabled: bool = True
    decay: float = Field(0.9999, gt=0, lt=1)
    warmup: bool = True
    power: float = Field(0.75, gt=0, le=100)
    update_after_step: int = Field(0, ge=0, le=10**9)


class TrainingSection(_Base):
    """Optimisation and run-keeping. ``batch_size`` is per process and micro-step; one optimizer
    step sees ``batch_size * grad_accum * processes`` images. ``steps`` counts optimizer steps."""

    steps: int = Field(1000, ge=1, le=MAX_STEPS)
    batch_size: int = Field(64, ge=1, le=MAX_BATCH)
    grad_accum: int = Field(1, ge=1, le=MAX_BATCH)
    lr: float = Field(1e-4, gt=0, le=1e3, description="AdamW learning rate (finite, > 0)")
    lr_schedule: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = Field(0, ge=0, le=MAX_STEPS)
    weight_decay: float = Field(0.01, ge=0, le=1e3)
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW (beta1, beta2), each in [0, 1)")
    eps: float = Field(1e-8, gt=0, le=1.0, description="AdamW epsilon (> 0)")
    grad_clip: float | None = Field(1.0, gt=0, le=1e6, description="max global grad norm; null disables clipping")
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = Field("auto", description="auto: bf16 on a GPU that supports it, else fp32")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: a GPU when there is one, else the CPU; cuda: a GPU "
                                                   "(an error without one); cpu")
    threads: int | None = Field(None, ge=1, le=1024, description="torch CPU threads per process (default: torch's)")
    seed: Seed = 0
    ema: EMASection = Field(default_factory=EMASection)
    checkpoint_every: int = Field(500, ge=1, le=MAX_STEPS)
    keep_checkpoints: int = Field(2, ge=1, le=10**6)
    log_every: int = Field(20, ge=1, le=MAX_STEPS)
    val_every: int = Field(500, ge=0, le=MAX_STEPS, description="validate on `val` every N steps and at the end (0: only at the end)")
    tensorboard: bool = Field(False, description="also log to RUN/tensorboard (needs `pip install tensorboard`)")

    @model_validator(mode="after")
    def _optimizer(self):
        for k, b in enumerate(self.betas):
            if not 0 <= b < 1:
                raise ValueError(f"training.betas[{k}] is {b}: AdamW needs each beta in [0, 1), e.g. [0.9, 0.999]")
        return self


class RunConfig(_Base):
    """Base of a lab config: run name, run directory, dataset and training sections."""

    name: SafeName = Field(description="run name; the run folder defaults to data/runs/<name> (no '/', '..')")
    out: Path | None = Field(None, description="run folder (default data/runs/<name>)")
    dataset: DatasetSection
    training: TrainingSection = Field(default_factory=TrainingSection)

    def run_dir(self) -> Path:
        """The run folder: ``out`` or ``data/runs/<name>``."""
        return Path(self.out) if self.out is not None else Path("data") / "runs" / self.name


C = TypeVar("C", bound=BaseModel)


def _loc(loc) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and ("[" in p or "function" in p)))


def validate_config(cls: type[C], data: Any, source: str | None = None) -> C:
    """Validate raw config data into ``cls``. Raises :class:`ConfigError` listing every problem."""
    if not isinstance(data, dict):
        raise ConfigError(f"a config is a YAML mapping (name:, dataset:, model:, training: ...), got {type(data).__name__}", source)
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        problems = validation_problems(e, _loc, model=cls)
        raise ConfigError(problems, source) from None


def _config_error(path: str, message: str) -> ConfigError:
    return ConfigError([(path, message)] if path == "--set" else message, None if path == "--set" else path)


def set_path(data: dict, key: str, value: Any) -> dict:
    """``data`` with ``key.path`` set to ``value`` (a deep copy). Creates missing mappings; list
    items are addressed by index. Raises ConfigError for a path through a scalar."""
    data = copy.deepcopy(data)
    set_in_place(data, key, value, _config_error, container="section")
    return data


OVERRIDES_PREFIX = "dataset.overrides."


def apply_sets(data: dict, sets: list[str] | None) -> dict:
    """Apply ``key.path=value`` strings (values parsed as YAML) to raw config data (a deep copy).

    ``dataset.overrides.<spec key.path>=value`` adds one flat entry to ``dataset.overrides`` (the
    spec overrides), e.g. ``dataset.overrides.holdout.rule.n=3``.
    """
    return apply_overrides(data, sets, _config_error, example="training.steps=200", flat_prefixes=(OVERRIDES_PREFIX,), container="section")


def read_config_yaml(path: str | Path) -> dict:
    """Raw YAML of a config file. Raises ConfigError for a missing file or a syntax error."""
    data = read_yaml_file(path, _config_error, kind="config file")
    return data if data is not None else {}


def load_config(cls: type[C], path: str | Path, sets: list[str] | None = None) -> C:
    """Read a config YAML, apply ``--set`` overrides and validate it into ``cls``.

    Raises:
        ConfigError: missing file, YAML syntax error, malformed override, or invalid fields.
    """

    data = read_config_yaml(path)
    check_kind(data, "training config", str(path), lambda m: ConfigError(m, str(path)))
    check_family(data, family_of(getattr(cls, "model_fields", {})), str(path), lambda m: ConfigError(m, str(path)))
    if not isinstance(data, dict):
        raise ConfigError(f"a config is a YAML mapping, got {type(data).__name__}", str(path))
    cfg = validate_config(cls, apply_sets(data, sets), source=str(path))
    ds = getattr(cfg, "dataset", None)
    spec = getattr(ds, "spec", None)
    if spec is not None and not Path(spec).exists():  # named with the config file and the field, before anything runs
        import os

        hint = missing_file_hint(spec) if Path(spec).parent.is_dir() else ""
        raise ConfigError([("dataset.spec", f"{str(spec)!r}: no such spec file{hint} (a relative path is read from the current "
                            f"folder {os.getcwd()}: run from the folder the config's paths start at, e.g. the project folder "
                            "holding experiments/); give the path of a spec YAML or a dataset folder, or set dataset.path to a "
                            "generated dataset instead")], str(path))
    return cfg


def config_diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Field paths where two dumped configs differ (for "this run folder holds another config")."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            out += config_diff(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [prefix or "<root>"]
