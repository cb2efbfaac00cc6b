"""The ``analysis:`` section of a lab config (both families), also the options of ``mosaic analyze``.

A config with an ``analysis:`` section runs the diagnostics at the end of training and writes them
into ``metrics.json`` under ``analysis``; ``mosaic analyze RUN`` runs them on a finished run with the
same options (its own flags override ``what``). Absent (``null``, the default), nothing runs, and
the config of a run trained before this section existed compares equal.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mosaic.schema import StrictModel

Diagnostic = Literal["probes", "layers", "factorization", "rank", "binding-complexity", "interventions", "diffusion-classifier"]


class ProbeOptions(StrictModel):
    """Linear-probe training (:class:`mosaic.diagnostics.probes.ProbeConfig`; defaults: the
    reference's, except ``max_train``). Held-out probe accuracy still rises between 200 and 500
    epochs on mosaic's embeddings, so fewer epochs understate it."""

    epochs: int = Field(500, ge=1, le=100_000, description="passes over the training samples (reference 500)")
    batch_size: int = Field(256, ge=1, le=1_000_000)
    lr: float = Field(1e-2, gt=0, le=1000, description="Adam learning rate, cosine-annealed to 0")
    val_fraction: float = Field(0.05, ge=0, lt=1, description="share of the train split that selects each head's best state")
    max_train: int | None = Field(4000, ge=10, description="train-split samples the probes see (a seeded subset; null: all)")
    seed: int = Field(0, ge=0)


class DiffusionClassifierOptions(StrictModel):
    """The diffusion classifier (:mod:`mosaic.diagnostics.diffusion_classifier`)."""

    timesteps: Literal["li", "linspace", "later"] = Field("li", description="li: Li et al.'s odd-grid slice; linspace; later: upper half")
    n_timesteps: int = Field(20, ge=1, le=1000, description="timesteps per image and candidate")
    weighting: Literal["uniform", "min_snr"] = "uniform"
    n_trials: int = Field(1, ge=1, le=1000, description="noises per timestep")
    norm: Literal["mse", "l2", "l1"] = Field("mse", description="mse: Li et al.; l2: Self-Bench's unsquared norm")
    target: Literal["epsilon", "model"] = Field("epsilon", description="score the noise error (v-models converted) or the model's own target")
    stages: list[tuple[int, int]] | None = Field(None, description="adaptive elimination [(n_timesteps, keep), ...]; null: score every candidate fully")
    per_concept: Literal["mean", "min", "logsumexp"] = Field("mean", description="how per-concept predictions marginalise the other concepts")
    images_per_split: int | None = Field(64, ge=1, description="test images classified per split (evenly over its records); null: all")
    max_candidates: int = Field(4096, ge=1, le=1_000_000, description="refuse grids with more combinations than this")
    batch_size: int = Field(256, ge=1, le=1_000_000, description="(image, candidate) pairs per denoiser call")
    seed: int = Field(0, ge=0)


class BindingComplexityOptions(StrictModel):
    """Binding-function complexity (:mod:`mosaic.diagnostics.binding_complexity`; reference:
    hidden [1024], Adam lr 1e-2 constant, 4000 full-batch epochs). Fewer epochs by default: see
    docs/diagnostics.md (``binding-complexity``) for the measured cost and how R² moves with epochs."""

    families: list[Literal["regular_mlp", "mult_linear", "sum_mult_linear"]] = Field(
        default_factory=lambda: ["regular_mlp", "mult_linear", "sum_mult_linear"], min_length=1,
        description="approximator families fitted")
    hidden: list[int] = Field(default_factory=lambda: [1024], min_length=1, max_length=16,
                              description="regular_mlp hidden widths, each 1-16,384 (reference [1024])")
    epochs: int = Field(1000, ge=1, le=100_000, description="full-batch Adam steps (reference 4000)")
    lr: float = Field(1e-2, gt=0, le=1000, description="Adam learning rate, constant (reference 1e-2)")
    max_train: int | None = Field(4000, ge=10, description="train-split scenes fitted (a seeded subset; null: all)")
    probes: bool = Field(True, description="score the concept probes (trained on the train split) on the predicted embeddings")
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _check(self):
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"families lists a family twice: {self.families}")
        if any(not 1 <= h <= 16_384 for h in self.hidden):
            raise ValueError(f"hidden widths must be 1-16,384 (the labs' width bound), got {self.hidden}")
        return self


class InterventionOptions(StrictModel):
    """Colour interventions (:mod:`mosaic.diagnostics.interventions`; reference: one target colour
    per base, seed 42, strength 1)."""

    strength: float = Field(1.0, gt=0, le=100, description="k in z - k (u(a,o) - u(t,o)), in (0, 100] (reference 1)")
    bank: Literal["objects", "positions"] = Field(
        "objects", description="objects: u(colour, shape) over either slot (reference default); positions: one entry per slot")
    targets: Literal["any", "banked"] = Field(
        "any", description="any: t from every other colour, base skipped when u(t, o) is missing (reference); banked: t from colours with both entries")
    gallery: Literal["all", "test"] = Field("all", description="scenes retrieved from: all: train + test_id + test_ood; test: the test splits only")
    max_bases: int | None = Field(None, ge=1, description="base scenes edited per test split (a seeded subset; null: all)")
    max_train: int | None = Field(None, ge=10, description="train-split scenes in the bank and gallery (a seeded subset; null: all)")
    seed: int = Field(42, ge=0)

    @model_validator(mode="after")
    def _finite(self):
        import math

        if not math.isfinite(self.strength):
            raise ValueError(f"strength {self.strength} must be a finite number")
        return self


class AnalysisSection(StrictModel):
    """Which diagnostics run after training (or with ``mosaic analyze``) and how."""

    what: list[Diagnostic] | None = Field(None, description="diagnostics to run; null: every one that applies to the run")
    checkpoint: Literal["final", "best"] | None = Field(None, description="weights to analyse (default: the ones the run evaluated)")
    probes: ProbeOptions = Field(default_factory=ProbeOptions)
    pool: Literal["own", "mean"] = Field("own", description="transformer tokens per block: the encoder's own readout token, or their mean")
    feature_timestep: int = Field(100, ge=0, description="diffusion: the timestep at which UNet/DiT block features are read")
    diffusion_classifier: DiffusionClassifierOptions = Field(default_factory=DiffusionClassifierOptions)
    binding_complexity: BindingComplexityOptions = Field(default_factory=BindingComplexityOptions)
    interventions: InterventionOptions = Field(default_factory=InterventionOptions)
    figures: bool = Field(True, description="draw RUN/analysis/*.png")

    @model_validator(mode="after")
    def _unique(self):
        if self.what is not None and len(set(self.what)) != len(self.what):
            raise ValueError(f"what lists a diagnostic twice: {self.what}")
        return self
