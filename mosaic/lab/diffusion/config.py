"""The diffusion config: backbone, conditioning, noise schedule, sampling and evaluation sections
on top of the lab's run, dataset and training sections (:mod:`mosaic.lab.config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from mosaic.diagnostics.config import AnalysisSection
from mosaic.lab.autoencoder import AutoencoderSection
from mosaic.lab.config import RunConfig, _Base
from mosaic.schema import Seed

#: bounds on model shape (docs/faults.md, "What is rejected"): channel/token widths and depths
MAX_WIDTH = 16384
MAX_DEPTH = 256


class UNetSection(_Base):
    """``UNet2DConditionModel`` shape. One entry per resolution level in ``block_out_channels`` and
    ``cross_attention`` (does the level's block attend to the condition tokens); the mid block
    always does. Every level but the last halves the resolution."""

    block_out_channels: list[Annotated[int, Field(ge=1, le=MAX_WIDTH)]] = Field(default_factory=lambda: [32, 64, 64], min_length=1, max_length=8)
    cross_attention: list[bool] = Field(default_factory=lambda: [False, True, True])
    layers_per_block: int = Field(1, ge=1, le=MAX_DEPTH)
    heads: int = Field(4, ge=1, le=1024, description="attention heads (diffusers calls it attention_head_dim)")
    norm_num_groups: int = Field(8, ge=1)
    transformer_layers_per_block: int = Field(1, ge=1, le=MAX_DEPTH)
    time_condition: bool = Field(False, description=(
        "also add the pooled condition (mean of the condition tokens) to the timestep embedding through a learned "
        "projection (diffusers class_embed_type='projection'), so every ResNet block at every resolution sees it, "
        "not only the cross-attention levels"))

    @model_validator(mode="after")
    def _levels(self):
        if len(self.cross_attention) != len(self.block_out_channels):
            raise ValueError(f"cross_attention has {len(self.cross_attention)} entries for {len(self.block_out_channels)} levels "
                             "(block_out_channels): give one per level")
        return self


class DiTSection(_Base):
    """``PixArtTransformer2DModel`` shape: ``size / patch_size`` squared image tokens of width
    ``heads * head_dim``, ``num_layers`` blocks (self-attention, cross-attention, MLP)."""

    patch_size: int = Field(4, ge=1)
    num_layers: int = Field(4, ge=1, le=MAX_DEPTH)
    heads: int = Field(4, ge=1, le=1024)
    head_dim: int = Field(32, ge=8, le=MAX_WIDTH)
    dropout: float = Field(0.0, ge=0, lt=1)


class MMDiTSection(_Base):
    """``SD3Transformer2DModel`` (MMDiT, Esser et al. 2024) shape, MOSAIC's DiT: ``num_layers``
    joint-attention blocks of width ``heads * head_dim`` over ``(size / patch_size)^2`` latent
    tokens and the condition tokens (``joint_attention_dim = model.cond_dim``).

    Stock diffusers needs a pooled text projection (``pooled_projections``); MOSAIC patched
    ``CombinedTimestepTextProjEmbeddings`` to accept None. mosaic does not patch diffusers: it
    passes a supported tensor instead (``pooled``)."""

    patch_size: int = Field(2, ge=1)
    num_layers: int = Field(10, ge=1, le=MAX_DEPTH)
    heads: int = Field(16, ge=1, le=1024)
    head_dim: int = Field(32, ge=8, le=MAX_WIDTH)
    pooled: Literal["zeros", "condition"] = Field("zeros", description=(
        "what goes into pooled_projections: zeros (MOSAIC: the condition reaches the model only through the joint-attention "
        "tokens; the pooled embedder then adds a learned constant to the timestep embedding) or condition (the mean of the "
        "condition tokens, as SD3 feeds its pooled CLIP vector)"))


class OneHotSection(_Base):
    """MOSAIC's condition encoders (``model.conditioning: onehot``): each concept's one-hot (all
    zeros for the null condition and for a concept the scene does not show) through an MLP of
    Linear + ReLU + Dropout layers (after every layer, the last included, as in MOSAIC's
    ``model.py``), giving one token per concept (``tokens: per_concept``; MOSAIC's two-token
    encoder for two concepts) or one token from the concatenated one-hots (``tokens: one``;
    MOSAIC's single-token encoder for one concept)."""

    tokens: Literal["per_concept", "one"] = "per_concept"
    hidden: list[Annotated[int, Field(ge=1, le=MAX_WIDTH)]] = Field(
        default_factory=list, max_length=16,
        description="hidden widths before the output width model.cond_dim: [] (MOSAIC's UNet: Linear 10 -> 64) or "
                    "[64, 128, 256] (MOSAIC's DiT: 10 -> 64 -> 128 -> 256 -> 512)")
    dropout: float = Field(0.1, ge=0, lt=1, description="Dropout after every ReLU (MOSAIC's --condition_encoder_drop_rate)")


class FlowSection(_Base):
    """Rectified flow matching as in SD3 / MOSAIC's DiT (``model.schedule.objective: flow_matching``):
    ``x_t = (1 - s) x0 + s noise`` with the shifted sigmas of diffusers'
    ``FlowMatchEulerDiscreteScheduler``; timesteps drawn by ``weighting`` (diffusers
    ``compute_density_for_timestep_sampling``), the loss weighted by
    ``compute_loss_weighting_for_sd3`` (uniform for ``logit_normal``)."""

    shift: float = Field(3.0, gt=0, le=100, description="SD3's timestep shift (stable-diffusion-3-medium: 3.0)")
    weighting: Literal["logit_normal", "mode", "sigma_sqrt", "cosmap", "none"] = Field(
        "logit_normal", description="timestep density and SD3 loss weighting scheme (diffusers' weighting_scheme)")
    logit_mean: float = Field(0.0, ge=-10, le=10)
    logit_std: float = Field(1.0, gt=0, le=10)
    mode_scale: float = Field(1.29, ge=0, le=10)
    precondition_outputs: bool = Field(True, description="MOSAIC's precondition_outputs=1: the loss compares x0 = x_t - s * "
                                                         "output with x0; false: the output with the velocity noise - x0")


class TextSection(_Base):
    """The caption encoder (``model.conditioning: caption``), trained jointly."""

    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1, le=1024)
    max_len: int = Field(32, ge=4)
    dropout: float = Field(0.0, ge=0, lt=1)


class ScheduleSection(_Base):
    """The training objective: DDPM noise schedule and target (default), or flow matching."""

    objective: Literal["ddpm", "flow_matching"] | None = Field(None, description=(
        "null or ddpm: DDPM with beta_schedule / prediction_type; flow_matching: rectified flow with diffusers' "
        "FlowMatchEulerDiscreteScheduler (MOSAIC's DiT objective; `flow`), sampled with sampling.sampler: flow_euler"))
    num_train_timesteps: int = Field(1000, ge=10, le=100_000)
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear", "sigmoid"] = "squaredcos_cap_v2"
    beta_start: float | None = Field(None, gt=0, lt=1, description="null: diffusers' default 1e-4 (SD2-base: 0.00085)")
    beta_end: float | None = Field(None, gt=0, lt=1, description="null: diffusers' default 0.02 (SD2-base: 0.012)")
    prediction_type: Literal["epsilon", "v_prediction"] = "epsilon"
    snr_gamma: float | None = Field(None, gt=0, description="Min-SNR-gamma loss weighting (Hang et al. 2023), e.g. 5; null: plain MSE")
    flow: FlowSection | None = Field(None, description="flow-matching settings (objective: flow_matching); null: the SD3 defaults")

    @property
    def flow_matching(self) -> bool:
        return self.objective == "flow_matching"

    @model_validator(mode="after")
    def _objective(self):
        if self.flow is not None and not self.flow_matching:
            raise ValueError("flow applies to objective: flow_matching only; set objective: flow_matching or remove flow")
        if self.flow_matching and self.snr_gamma is not None:
            raise ValueError("snr_gamma is a DDPM weighting; flow matching uses flow.weighting: set snr_gamma: null")
        return self


class LatentSection(_Base):
    """Latent diffusion (``model.latent``): the denoiser works on the 4-channel latents of an
    autoencoder trained from scratch on the spec's renders (:mod:`mosaic.lab.autoencoder`); the
    latents of the dataset are cached; samples are decoded before the evaluator reads them."""

    autoencoder: AutoencoderSection = Field(default_factory=AutoencoderSection, description=(
        "the autoencoder's shape and training (see docs/latent.md); trained on first use and cached by the spec's "
        "fingerprint and this section under `root`"))
    path: Path | None = Field(None, description="a trained autoencoder folder (`mosaic autoencoder train`) to use instead of the cache")
    root: Path = Field(Path("data/autoencoders"), description="where autoencoders are cached: <root>/<spec>-<fingerprint>-ae<hash>/")


class DiffusionModelSection(_Base):
    """Backbone, conditioning and noise schedule."""

    backbone: Literal["unet", "dit", "mmdit"] = Field("unet", description=(
        "unet: UNet2DConditionModel; dit: PixArtTransformer2DModel (cross-attention); mmdit: SD3Transformer2DModel (MOSAIC's DiT)"))
    conditioning: Literal["factorized", "caption", "combination", "onehot"] = Field(
        "factorized", description="factorized: one learned token per concept value; onehot: MOSAIC's one-hot MLP encoders "
                                  "(`onehot`); caption: text encoder; combination: baseline only")
    cond_dim: int = Field(64, ge=8, le=MAX_WIDTH, description="condition token width")
    cond_dropout: float = Field(0.1, ge=0, lt=1, description="per-sample probability of the null condition (classifier-free guidance)")
    unet: UNetSection = Field(default_factory=UNetSection)
    dit: DiTSection = Field(default_factory=DiTSection)
    mmdit: MMDiTSection | None = Field(None, description="backbone: mmdit's shape; null: MOSAIC's (10 layers, 16 x 32 heads, patch 2)")
    onehot: OneHotSection | None = Field(None, description="conditioning: onehot's encoder; null: one token per concept, Linear, dropout 0.1")
    text: TextSection = Field(default_factory=TextSection)
    schedule: ScheduleSection = Field(default_factory=ScheduleSection)
    latent: LatentSection | None = Field(None, description="latent diffusion on a from-scratch autoencoder's latents; null: pixel space")

    @property
    def mmdit_(self) -> MMDiTSection:
        return self.mmdit or MMDiTSection()

    @property
    def onehot_(self) -> OneHotSection:
        return self.onehot or OneHotSection()

    @property
    def flow_(self) -> FlowSection:
        return self.schedule.flow or FlowSection()


class SamplingSection(_Base):
    """How test images are generated after training and by ``mosaic sample``."""

    sampler: Literal["ddim", "dpm", "flow_euler"] = Field("ddim", description=(
        "ddim / dpm for DDPM models; flow_euler (diffusers FlowMatchEulerDiscreteScheduler) for model.schedule.objective: flow_matching"))
    steps: int = Field(50, ge=1, le=1000)
    guidance: float = Field(2.0, ge=0, le=1000, description="classifier-free guidance scale (1: plain conditional, 0: unconditional)")
    n_per_combination: int | None = Field(8, ge=1, le=100_000, description="images per combination; null: one per record of the split")
    batch_size: int = Field(256, ge=1, le=2**20)
    seed: Seed = 0
    checkpoint: Literal["best", "final"] = Field("best", description="best: selected on val; final: the last weights")


class EvaluationSection(_Base):
    """Scoring with the evaluator, and validation on ``val`` (seen combinations only)."""

    enabled: bool = Field(True, description="score samples with the evaluator")
    evaluator: str = Field("parser", description="'parser' (the scene parser) or a trained evaluator directory")
    abstain: bool = Field(True, description="the parser reads an image whose match quality is below its calibrated thresholds as unreadable (counted wrong); false: it credits the nearest allowed shape")
    position_bins: Literal["strict", "nearest"] = Field("strict", description=(
        "how the parser reads a position concept: strict = an angle between two bins is unreadable (counted wrong); "
        "nearest = the nearer bin, the forced choice of MOSAIC's 10-way position classifier"))
    splits: list[str] | None = Field(None, description="test splits sampled after training; default test_id + test_ood, or test")
    check_n: int = Field(200, ge=0, le=10**6, description="fresh ground-truth renders to measure the evaluator on (0: skip)")
    val_samples: int = Field(64, ge=0, description="images generated for each validation (conditions of the first val records)")
    val_steps: int = Field(25, ge=1, description="sampler steps during validation")
    val_evaluator: str | None = Field(None, description=(
        "the evaluator of validation images only: unset = evaluator; a trained evaluator directory (mosaic evaluator "
        "train) scores them batched on the training device, so a GPU run does not wait on the CPU scene parser "
        "(test splits are still scored by evaluator)"))
    select: Literal["joint_accuracy", "loss"] = Field("joint_accuracy", description="val metric that selects the best checkpoint")

    @model_validator(mode="after")
    def _select(self):
        if self.select == "joint_accuracy" and (not self.enabled or self.val_samples == 0):
            raise ValueError("select: joint_accuracy needs the evaluator (enabled: true) and val_samples > 0; or use select: loss")
        return self


class DiffusionConfig(RunConfig):
    """A diffusion run: ``name``, ``out``, ``dataset``, ``model``, ``training``, ``sampling``,
    ``evaluation`` (docs/training-diffusion.md, "Config")."""

    model: DiffusionModelSection = Field(default_factory=DiffusionModelSection)
    sampling: SamplingSection = Field(default_factory=SamplingSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)
    analysis: AnalysisSection | None = Field(None, description="representation diagnostics after training (mosaic.diagnostics; docs/diagnostics.md)")

    @model_validator(mode="after")
    def _sampler_fits_objective(self):
        flow = self.model.schedule.flow_matching
        if flow and self.sampling.sampler != "flow_euler":
            raise ValueError(f"sampling.sampler {self.sampling.sampler!r} is a DDPM sampler, but model.schedule.objective is "
                             "flow_matching: set sampling.sampler: flow_euler")
        if not flow and self.sampling.sampler == "flow_euler":
            raise ValueError("sampling.sampler flow_euler samples flow-matching models: set model.schedule.objective: flow_matching, "
                             "or use ddim / dpm")
        return self
