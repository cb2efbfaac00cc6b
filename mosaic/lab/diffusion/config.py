"""The diffusion config: backbone, conditioning, noise schedule, sampling and evaluation sections
on top of the lab's run, dataset and training sections (:mod:`mosaic.lab.config`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from mosaic.diagnostics.config import AnalysisSection
from mosaic.lab.config import RunConfig, _Base
from mosaic.schema import Seed

#: bounds on model shape (README "What is rejected"): channel/token widths and depths
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


class TextSection(_Base):
    """The caption encoder (``model.conditioning: caption``), trained jointly."""

    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1, le=1024)
    max_len: int = Field(32, ge=4)
    dropout: float = Field(0.0, ge=0, lt=1)


class ScheduleSection(_Base):
    """DDPM noise schedule and training target."""

    num_train_timesteps: int = Field(1000, ge=10, le=100_000)
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear", "sigmoid"] = "squaredcos_cap_v2"
    prediction_type: Literal["epsilon", "v_prediction"] = "epsilon"
    snr_gamma: float | None = Field(None, gt=0, description="Min-SNR-gamma loss weighting (Hang et al. 2023), e.g. 5; null: plain MSE")


class DiffusionModelSection(_Base):
    """Backbone, conditioning and noise schedule."""

    backbone: Literal["unet", "dit"] = "unet"
    conditioning: Literal["factorized", "caption", "combination"] = Field(
        "factorized", description="factorized: one token per concept; caption: text encoder; combination: baseline only")
    cond_dim: int = Field(64, ge=8, le=MAX_WIDTH, description="condition token width")
    cond_dropout: float = Field(0.1, ge=0, lt=1, description="per-sample probability of the null condition (classifier-free guidance)")
    unet: UNetSection = Field(default_factory=UNetSection)
    dit: DiTSection = Field(default_factory=DiTSection)
    text: TextSection = Field(default_factory=TextSection)
    schedule: ScheduleSection = Field(default_factory=ScheduleSection)


class SamplingSection(_Base):
    """How test images are generated after training and by ``mosaic sample``."""

    sampler: Literal["ddim", "dpm"] = "ddim"
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
    splits: list[str] | None = Field(None, description="test splits sampled after training; default test_id + test_ood, or test")
    check_n: int = Field(200, ge=0, description="fresh ground-truth renders to measure the evaluator on (0: skip)")
    val_samples: int = Field(64, ge=0, description="images generated for each validation (conditions of the first val records)")
    val_steps: int = Field(25, ge=1, description="sampler steps during validation")
    select: Literal["joint_accuracy", "loss"] = Field("joint_accuracy", description="val metric that selects the best checkpoint")

    @model_validator(mode="after")
    def _select(self):
        if self.select == "joint_accuracy" and (not self.enabled or self.val_samples == 0):
            raise ValueError("select: joint_accuracy needs the evaluator (enabled: true) and val_samples > 0; or use select: loss")
        return self


class DiffusionConfig(RunConfig):
    """A diffusion run: ``name``, ``out``, ``dataset``, ``model``, ``training``, ``sampling``,
    ``evaluation`` (see README, "Training lab")."""

    model: DiffusionModelSection = Field(default_factory=DiffusionModelSection)
    sampling: SamplingSection = Field(default_factory=SamplingSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)
    analysis: AnalysisSection | None = Field(None, description="representation diagnostics after training (mosaic.diagnostics; README, Diagnostics)")
