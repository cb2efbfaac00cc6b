"""Conditional diffusion in pixel space: config, backbones, the training objective, sampling and
scoring — the main experiment of MOSAIC (Jeong et al. 2026, §2 of our reference notes).

- **Backbones** (diffusers, from scratch, 16-64 px RGB, no VAE): ``UNet2DConditionModel`` with
  cross-attention, or ``PixArtTransformer2DModel`` (a DiT with cross-attention, AdaLN-single
  timestep conditioning; Chen et al. 2023). The condition reaches both through cross-attention
  tokens (:mod:`mosaic.lab.conditioning`); MOSAIC's DiT likewise saw its condition only through
  joint-attention tokens.
- **Objective**: DDPM (Ho et al. 2020) with a cosine schedule by default (``squaredcos_cap_v2``,
  Nichol & Dhariwal 2021), epsilon or v prediction (Salimans & Ho 2022), MSE; classifier-free
  guidance by per-sample condition dropout to learned null tokens.
- **Sampling**: DDIM (Song et al. 2021, eta 0) or DPM-Solver++ (Lu et al. 2022), "trailing"
  timestep spacing, guidance ``u + g (c - u)``; each image's initial noise is seeded by
  ``(sampling.seed, split, index)`` so results do not depend on the batch size.
- **Scoring**: the images and a ``metadata.jsonl`` of intended concept values (the generator's
  schema) go to the evaluator (:mod:`mosaic.evaluation`): per-concept and joint accuracy for seen
  vs held-out combinations and a per-cell heatmap. Checkpoints are selected on ``val`` (seen
  combinations) only.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import zlib
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from torch import nn

from mosaic.errors import DatasetError, MosaicError
from mosaic.lab.config import ConfigError, RunConfig, TrainingError, _Base
from mosaic.lab.data import evaluation_splits, manifest_fingerprint, resolve_dataset, step_seed, to_float, to_uint8
from mosaic.lab.loop import RunFolder, Task

# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------


class UNetSection(_Base):
    """``UNet2DConditionModel`` shape. One entry per resolution level in ``block_out_channels`` and
    ``cross_attention`` (does the level's block attend to the condition tokens); the mid block
    always does. Every level but the last halves the resolution."""

    block_out_channels: list[int] = Field(default_factory=lambda: [32, 64, 64], min_length=1)
    cross_attention: list[bool] = Field(default_factory=lambda: [False, True, True])
    layers_per_block: int = Field(1, ge=1)
    heads: int = Field(4, ge=1, description="attention heads (diffusers calls it attention_head_dim)")
    norm_num_groups: int = Field(8, ge=1)
    transformer_layers_per_block: int = Field(1, ge=1)

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
    num_layers: int = Field(4, ge=1)
    heads: int = Field(4, ge=1)
    head_dim: int = Field(32, ge=8)
    dropout: float = Field(0.0, ge=0, lt=1)


class TextSection(_Base):
    """The caption encoder (``model.conditioning: caption``), trained jointly."""

    layers: int = Field(2, ge=1)
    heads: int = Field(4, ge=1)
    max_len: int = Field(32, ge=4)
    dropout: float = Field(0.0, ge=0, lt=1)


class ScheduleSection(_Base):
    """DDPM noise schedule and training target."""

    num_train_timesteps: int = Field(1000, ge=10)
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear", "sigmoid"] = "squaredcos_cap_v2"
    prediction_type: Literal["epsilon", "v_prediction"] = "epsilon"
    snr_gamma: float | None = Field(None, gt=0, description="Min-SNR-gamma loss weighting (Hang et al. 2023), e.g. 5; null: plain MSE")


class DiffusionModelSection(_Base):
    """Backbone, conditioning and noise schedule."""

    backbone: Literal["unet", "dit"] = "unet"
    conditioning: Literal["factorized", "caption", "combination"] = Field(
        "factorized", description="factorized: one token per concept; caption: text encoder; combination: baseline only")
    cond_dim: int = Field(64, ge=8, description="condition token width")
    cond_dropout: float = Field(0.1, ge=0, lt=1, description="per-sample probability of the null condition (classifier-free guidance)")
    unet: UNetSection = Field(default_factory=UNetSection)
    dit: DiTSection = Field(default_factory=DiTSection)
    text: TextSection = Field(default_factory=TextSection)
    schedule: ScheduleSection = Field(default_factory=ScheduleSection)


class SamplingSection(_Base):
    """How test images are generated after training and by ``mosaic sample``."""

    sampler: Literal["ddim", "dpm"] = "ddim"
    steps: int = Field(50, ge=1, le=1000)
    guidance: float = Field(2.0, ge=0, description="classifier-free guidance scale (1: plain conditional, 0: unconditional)")
    n_per_combination: int | None = Field(8, ge=1, description="images per combination; null: one per record of the split")
    batch_size: int = Field(256, ge=1)
    seed: int = Field(0, ge=0)
    checkpoint: Literal["best", "final"] = Field("best", description="best: selected on val; final: the last weights")


class EvaluationSection(_Base):
    """Scoring with the evaluator, and validation on ``val`` (seen combinations only)."""

    enabled: bool = Field(True, description="score samples with the evaluator")
    evaluator: str = Field("parser", description="'parser' (the scene parser) or a trained evaluator directory")
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


# ----------------------------------------------------------------------------------------------
# backbones
# ----------------------------------------------------------------------------------------------


def check_model_fits(m: DiffusionModelSection, image_size: int) -> None:
    """Refuse a backbone that does not fit the image size or is internally inconsistent.

    Raises:
        ConfigError: a UNet with more downsampling levels than the image allows (the lowest level
        must be at least 2 px and every level an integer size), channels not divisible by
        ``norm_num_groups`` or ``heads``; a DiT whose ``patch_size`` does not divide the image or
        leaves fewer than 2x2 tokens. Each names the field, the value and a fix.
    """
    problems = []
    if m.backbone == "unet":
        u = m.unet
        levels = len(u.block_out_channels)
        down = 2 ** (levels - 1)
        if image_size % down or image_size // down < 2:
            fit = max(1, int(math.log2(max(image_size // 2, 1))) + 1)
            while fit > 1 and image_size % (2 ** (fit - 1)):
                fit -= 1
            problems.append(("model.unet.block_out_channels",
                             f"{levels} levels downsample {image_size} px by {down} to {image_size / down:g} px: the model is too large "
                             f"for {image_size} px images; use at most {fit} levels, or a larger image.size"))
        for ch in u.block_out_channels:
            if ch % u.norm_num_groups:
                problems.append(("model.unet.norm_num_groups", f"{u.norm_num_groups} does not divide the channel count {ch}"))
                break
        attn = [ch for ch, a in zip(u.block_out_channels, u.cross_attention) if a] + [u.block_out_channels[-1]]
        for ch in attn:
            if ch % u.heads:
                problems.append(("model.unet.heads", f"{u.heads} heads do not divide the channel count {ch} of an attention level"))
                break
    else:
        d = m.dit
        if image_size % d.patch_size or image_size // d.patch_size < 2:
            problems.append(("model.dit.patch_size",
                             f"{d.patch_size} px patches do not tile {image_size} px images into at least 2x2 tokens: the model is too "
                             f"large for the image; use a patch_size that divides {image_size} and is at most {image_size // 2}"))
    if m.conditioning == "caption" and m.cond_dim % m.text.heads:
        problems.append(("model.text.heads", f"{m.text.heads} heads do not divide model.cond_dim {m.cond_dim}"))
    if problems:
        raise ConfigError(problems)


def build_backbone(m: DiffusionModelSection, image_size: int) -> nn.Module:
    """The denoiser: ``forward`` takes ``x [B, 3, S, S]``, timesteps ``[B]`` and condition tokens
    ``[B, L, m.cond_dim]``. Raises ConfigError (see :func:`check_model_fits`)."""
    check_model_fits(m, image_size)
    if m.backbone == "unet":
        from diffusers import UNet2DConditionModel

        u = m.unet
        n = len(u.block_out_channels)
        down = ["CrossAttnDownBlock2D" if a else "DownBlock2D" for a in u.cross_attention]
        up = ["CrossAttnUpBlock2D" if u.cross_attention[n - 1 - j] else "UpBlock2D" for j in range(n)]
        return UNet2DConditionModel(
            sample_size=image_size, in_channels=3, out_channels=3,
            down_block_types=tuple(down), up_block_types=tuple(up), mid_block_type="UNetMidBlock2DCrossAttn",
            block_out_channels=tuple(u.block_out_channels), layers_per_block=u.layers_per_block,
            attention_head_dim=u.heads, norm_num_groups=u.norm_num_groups, cross_attention_dim=m.cond_dim,
            transformer_layers_per_block=u.transformer_layers_per_block,
        )
    from diffusers import PixArtTransformer2DModel

    d = m.dit
    return PixArtTransformer2DModel(
        num_attention_heads=d.heads, attention_head_dim=d.head_dim, in_channels=3, out_channels=3, num_layers=d.num_layers,
        dropout=d.dropout, cross_attention_dim=d.heads * d.head_dim, sample_size=image_size, patch_size=d.patch_size,
        caption_channels=m.cond_dim, use_additional_conditions=False,
    )


_NO_ADDED = {"resolution": None, "aspect_ratio": None}


class DiffusionModel(nn.Module):
    """Conditioner + denoiser as one module (one ``forward`` for DDP, one state for checkpoints).

    ``forward(x [B,3,S,S] float, t [B] int64, cond int64 [B, ...], drop bool [B] | None)``
    returns the prediction ``[B, 3, S, S]`` (noise or velocity, per the schedule).
    """

    def __init__(self, backbone: nn.Module, conditioner: nn.Module, kind: str):
        super().__init__()
        self.backbone, self.conditioner, self.kind = backbone, conditioner, kind

    def forward(self, x, t, cond, drop=None):
        tokens, mask = self.conditioner(cond, drop)
        if self.kind == "unet":
            return self.backbone(x, t, encoder_hidden_states=tokens, encoder_attention_mask=mask).sample
        return self.backbone(x, encoder_hidden_states=tokens, timestep=t, added_cond_kwargs=_NO_ADDED,
                             encoder_attention_mask=mask).sample


def count_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ----------------------------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------------------------


def make_sampler(kind: str, train_config):
    """A fresh DDIM (eta 0) or DPM-Solver++ (2nd order) scheduler from the training schedule."""
    from diffusers import DDIMScheduler, DPMSolverMultistepScheduler

    if kind == "ddim":
        return DDIMScheduler.from_config(train_config, timestep_spacing="trailing")
    return DPMSolverMultistepScheduler.from_config(train_config, algorithm_type="dpmsolver++", solver_order=2, timestep_spacing="trailing")


def sample_seeds(seed: int, split: str, n: int) -> list[int]:
    """Per-image noise seeds: a pure function of ``(seed, split, index)``."""
    tag = zlib.crc32(split.encode())
    return [step_seed(seed, tag, i) for i in range(n)]


@torch.no_grad()
def generate(model: DiffusionModel, train_config, cond: torch.Tensor, seeds: list[int], *, image_size: int, guidance: float,
             steps: int, sampler: str = "ddim", batch_size: int = 256, device=None, autocast: str = "no", progress=None) -> np.ndarray:
    """Generate one image per condition with classifier-free guidance.

    Args:
        model: the trained model (eval mode).
        train_config: the training noise scheduler's config (``DDPMScheduler.config``).
        cond: int64 ``[N, ...]`` encoded conditions (``conditioner.encode(records)``).
        seeds: ``N`` ints: image i starts from ``randn`` seeded by ``seeds[i]``.
        guidance: ``g`` in ``u + g (c - u)``; 1 runs the conditional model only, 0 the null one.
        steps: sampler steps; sampler: ``ddim`` or ``dpm``.
        autocast: ``bf16`` / ``fp16`` to run the model under autocast on a GPU.
        progress: called with the number of images done after each batch.
    Returns:
        uint8 ``[N, S, S, 3]``.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    out = []
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)
    for start in range(0, len(seeds), batch_size):
        c = cond[start:start + batch_size].to(device)
        b = len(c)
        x = torch.stack([torch.randn(3, image_size, image_size, generator=torch.Generator().manual_seed(s))
                         for s in seeds[start:start + batch_size]]).to(device)
        sched = make_sampler(sampler, train_config)
        sched.set_timesteps(steps, device=device)
        x = x * sched.init_noise_sigma
        ones = torch.ones(b, dtype=torch.bool, device=device)
        for t in sched.timesteps:
            xin = sched.scale_model_input(x, t)
            tt = t.to(device).expand(b)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                if guidance == 1.0:
                    pred = model(xin, tt, c, ~ones)
                elif guidance == 0.0:
                    pred = model(xin, tt, c, ones)
                else:
                    both = model(torch.cat([xin, xin]), torch.cat([tt, tt]), torch.cat([c, c]), torch.cat([~ones, ones]))
                    pc, pu = both.float().chunk(2)
                    pred = pu + guidance * (pc - pu)
            x = sched.step(pred.float(), t, x).prev_sample
        out.append(to_uint8(x))
        if progress:
            progress(min(start + batch_size, len(seeds)))
    return np.concatenate(out) if out else np.zeros((0, image_size, image_size, 3), np.uint8)


def combination_key(record: dict, concepts: list[str]) -> tuple:
    """The cell of a record: its ``combination`` (holdout grid) when set, else all concept values."""
    if record.get("combination") is not None:
        return tuple(record["combination"])
    return tuple(record["concepts"].get(c) for c in concepts)


def choose_records(records: list[dict], concepts: list[str], n_per_combination: int | None) -> list[dict]:
    """The conditions to sample: every record once (``None``), or ``K`` per combination of the
    split, cycling through each combination's records (in order of first appearance)."""
    if n_per_combination is None:
        return list(records)
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(combination_key(r, concepts), []).append(r)
    return [g[k % len(g)] for g in groups.values() for k in range(n_per_combination)]


# ----------------------------------------------------------------------------------------------
# the task
# ----------------------------------------------------------------------------------------------


class DiffusionTask(Task):
    """The diffusion objective on a mosaic dataset (see the module docstring).

    Args:
        cfg: the run's config.
        dataset_root: a complete dataset directory.
        run: the run folder (the caption vocabulary is kept there), or None.
        train: load the train split into memory (False for sampling only).
    Raises:
        ConfigError: a model that does not fit the image size.
        DatasetError: missing splits.
    """

    def __init__(self, cfg: DiffusionConfig, dataset_root: Path, run: RunFolder | None = None, train: bool = True):
        from diffusers import DDPMScheduler

        from mosaic.dataset import read_metadata, spec_of

        self.cfg, self.root, self.run = cfg, Path(dataset_root), run
        self.spec = spec_of(self.root)
        self.image_size = self.spec.image.size
        self.concepts = list(self.spec.concepts)
        check_model_fits(cfg.model, self.image_size)
        m = cfg.model
        self.noise = DDPMScheduler(num_train_timesteps=m.schedule.num_train_timesteps, beta_schedule=m.schedule.beta_schedule,
                                   prediction_type=m.schedule.prediction_type, clip_sample=True, clip_sample_range=1.0)
        self.conditioner = self._conditioner()
        self.model = DiffusionModel(build_backbone(m, self.image_size), self.conditioner, m.backbone)
        self.train_data = {}
        if train:
            from mosaic.torch_data import MosaicDataset

            ds = MosaicDataset(self.root, "train")
            self.train_data = {"image": ds.images, "cond": self.conditioner.encode(ds.records)}
        splits = self.spec.split_sizes()
        self.val_records = read_metadata(self.root, "val") if splits.get("val") else []
        self._val_images = None
        self._evaluator = None
        self._device = "cpu"
        self.selection = ("val/joint_accuracy", "max") if cfg.evaluation.select == "joint_accuracy" else ("val/loss", "min")

    # -- conditioning ------------------------------------------------------------------------------
    def _conditioner(self):
        from mosaic.lab.conditioning import CaptionConditioner, CombinationConditioner, FactorizedConditioner, build_vocab

        m = self.cfg.model
        domains = {c: self.spec.domain(c) for c in self.concepts}
        if m.conditioning == "factorized":
            return FactorizedConditioner(domains, m.cond_dim)
        if m.conditioning == "combination":
            return CombinationConditioner(domains, m.cond_dim)
        vocab_file = self.run.root / "vocab.json" if self.run is not None else None
        if vocab_file is not None and vocab_file.is_file():
            vocab = json.loads(vocab_file.read_text())
        else:
            from mosaic.dataset import read_metadata

            vocab = build_vocab(r["caption"] for s in self.spec.split_sizes() for r in read_metadata(self.root, s))
            if vocab_file is not None and vocab_file.parent.is_dir():
                from mosaic.lab.loop import _atomic_write

                _atomic_write(vocab_file, json.dumps(vocab) + "\n")
        t = m.text
        return CaptionConditioner(vocab, m.cond_dim, layers=t.layers, heads=t.heads, max_len=t.max_len, dropout=t.dropout)

    def encode(self, records: list[dict]) -> torch.Tensor:
        """Encoded conditions int64 ``[N, ...]`` of records (``concepts``, ``caption``)."""
        return self.conditioner.encode(records)

    # -- training -----------------------------------------------------------------------------------
    def loss(self, model, batch, generator):
        """DDPM loss of one micro-batch: MSE between the prediction and the noise (or velocity)
        at uniform timesteps, with per-sample condition dropout (optionally Min-SNR weighted)."""
        x0 = to_float(batch["image"])
        b = x0.shape[0]
        dev = x0.device
        noise = torch.randn(x0.shape, generator=generator, device=dev)
        t = torch.randint(0, self.noise.config.num_train_timesteps, (b,), generator=generator, device=dev)
        drop = torch.rand(b, generator=generator, device=dev) < self.cfg.model.cond_dropout
        xt = self.noise.add_noise(x0, noise, t)
        target = noise if self.noise.config.prediction_type == "epsilon" else self.noise.get_velocity(x0, noise, t)
        pred = model(xt, t, batch["cond"], drop)
        gamma = self.cfg.model.schedule.snr_gamma
        if gamma is None:
            return F.mse_loss(pred.float(), target)
        # Min-SNR-gamma (Hang et al. 2023): weight min(SNR, gamma) / SNR for epsilon, / (SNR + 1) for v
        from diffusers.training_utils import compute_snr

        snr = compute_snr(self.noise, t)
        w = snr.clamp(max=gamma) / (snr if self.noise.config.prediction_type == "epsilon" else snr + 1)
        per_sample = F.mse_loss(pred.float(), target, reduction="none").mean(dim=(1, 2, 3))
        return (per_sample * w).mean()

    def evaluator(self):
        if self._evaluator is None:
            self._evaluator = load_evaluator(self.spec, self.cfg.evaluation.evaluator, device=self._device)
        return self._evaluator

    def validate(self, model, accelerator) -> dict[str, float]:
        """``val/loss`` (fixed noise and evenly spaced timesteps over up to 256 val images) and,
        with the evaluator, ``val/joint_accuracy`` and ``val/acc/<concept>`` of images generated
        for the first ``evaluation.val_samples`` val records (seen combinations only)."""
        from accelerate.utils import gather_object

        if not self.val_records:
            return {}
        dev = accelerator.device
        self._device = str(dev)
        out = {}
        if self._val_images is None:
            from mosaic.torch_data import MosaicDataset

            ds = MosaicDataset(self.root, "val")
            n = min(256, len(ds))
            self._val_images = (ds.images[:n], self.encode(ds.records[:n]))
        imgs, cond = self._val_images
        g = torch.Generator().manual_seed(1234)
        total, count = 0.0, 0
        T = self.noise.config.num_train_timesteps
        for s in range(0, len(imgs), 64):
            x0 = to_float(imgs[s:s + 64]).to(dev)
            b = len(x0)
            noise = torch.randn(x0.shape, generator=g).to(dev)
            t = (torch.arange(s, s + b) * T // max(len(imgs), 1)).clamp(max=T - 1).to(dev)
            xt = self.noise.add_noise(x0, noise, t)
            target = noise if self.noise.config.prediction_type == "epsilon" else self.noise.get_velocity(x0, noise, t)
            pred = model(xt, t, cond[s:s + 64].to(dev))
            total += F.mse_loss(pred.float(), target, reduction="sum").item() / x0[0].numel()
            count += b
        out["val/loss"] = total / count
        ev = self.cfg.evaluation
        if ev.enabled and ev.val_samples:
            recs = self.val_records[: ev.val_samples]
            seeds = sample_seeds(self.cfg.sampling.seed, "val", len(recs))
            with accelerator.split_between_processes(list(range(len(recs)))) as mine:
                images = generate(model, self.noise.config, self.encode([recs[i] for i in mine]), [seeds[i] for i in mine],
                                  image_size=self.image_size, guidance=self.cfg.sampling.guidance, steps=ev.val_steps,
                                  sampler=self.cfg.sampling.sampler, batch_size=self.cfg.sampling.batch_size, device=dev,
                                  autocast=accelerator.mixed_precision)
                preds = self.evaluator().predict(images) if len(images) else []
                mine_preds = list(zip(mine, preds))
            got = dict(gather_object(mine_preds)) if accelerator.num_processes > 1 else dict(mine_preds)
            preds = [got[i] for i in range(len(recs))]
            ok = {c: [p.get(c) == r["concepts"].get(c) for p, r in zip(preds, recs)] for c in self.concepts}
            for c in self.concepts:
                out[f"val/acc/{c}"] = float(np.mean(ok[c]))
            out["val/joint_accuracy"] = float(np.mean([all(ok[c][i] for c in self.concepts) for i in range(len(recs))]))
        return out

    def export(self, model, out_dir: Path) -> None:
        """``out_dir/backbone`` (diffusers ``save_pretrained``) and ``out_dir/conditioner.safetensors``."""
        from safetensors.torch import save_file

        out_dir.mkdir(parents=True, exist_ok=True)
        model.backbone.save_pretrained(out_dir / "backbone")
        save_file({k: v.detach().cpu().contiguous() for k, v in model.conditioner.state_dict().items()}, str(out_dir / "conditioner.safetensors"))

    def load_weights(self, weights_dir: Path) -> None:
        """Load weights written by :meth:`export` into ``self.model``.

        Raises:
            TrainingError: the folder is missing or holds other shapes.
        """
        from safetensors.torch import load_file

        bb = weights_dir / "backbone" / "diffusion_pytorch_model.safetensors"
        cf = weights_dir / "conditioner.safetensors"
        if not bb.is_file() or not cf.is_file():
            raise TrainingError(f"no exported weights in {weights_dir} (expected backbone/ and conditioner.safetensors)")
        try:
            self.model.backbone.load_state_dict(load_file(str(bb)))
            self.model.conditioner.load_state_dict(load_file(str(cf)))
        except RuntimeError as e:
            raise TrainingError(f"weights in {weights_dir} do not fit the run's model config: {str(e).splitlines()[0]}") from None


# ----------------------------------------------------------------------------------------------
# evaluator (contract: mosaic.evaluation)
# ----------------------------------------------------------------------------------------------


def load_evaluator(spec, which: str, device: str = "cpu"):
    """``mosaic.evaluation.load_evaluator(spec, which, device)``; a clear error when it is unavailable."""
    try:
        from mosaic.evaluation import load_evaluator as _load
    except ImportError as e:
        raise MosaicError(f"the evaluator is not available ({e}); set evaluation.enabled: false and evaluation.select: loss "
                          "to train without scoring") from None
    return _load(spec, which, device=device)


# ----------------------------------------------------------------------------------------------
# sampling + scoring a run
# ----------------------------------------------------------------------------------------------


def open_run(run_dir: str | Path) -> tuple[DiffusionConfig, RunFolder, Path]:
    """Config, folder and dataset root of an existing diffusion run; checks the dataset fingerprint.

    Raises:
        TrainingError: not a run folder; DatasetError: the dataset is gone or changed.
    """
    from mosaic.lab.config import validate_config

    run = RunFolder(run_dir)
    raw = run.read_config()
    if isinstance(raw, dict) and "objective" in raw and "model" in raw and "backbone" not in (raw.get("model") or {}):
        raise TrainingError(f"{run_dir} is a transformer run ({raw.get('objective')}): `mosaic sample` generates images from "
                            "diffusion runs only; a transformer run's results are in its metrics.json")
    cfg = validate_config(DiffusionConfig, raw, source=str(run.config))
    rec = run.read_dataset()
    root = Path(rec["path"])
    if not (root / "manifest.json").is_file():
        raise DatasetError(f"the dataset of run {run_dir} is gone: {root} holds no manifest.json (regenerate it, or restore it)")
    cur = manifest_fingerprint(root)
    if cur["fingerprint"] != rec["fingerprint"] or cur["manifest_sha256"] != rec["manifest_sha256"]:
        raise DatasetError(f"the dataset {root} changed since run {run_dir} was trained (fingerprint {rec['fingerprint']} -> "
                           f"{cur['fingerprint']}): restore it, or train a new run")
    return cfg, run, root


def sample_and_score(task: DiffusionTask, run: RunFolder, splits: list[str], *, n_per_combination: int | None, guidance: float,
                     steps: int, sampler: str, checkpoint: str, score: bool, out: Path | None = None, batch_size: int | None = None,
                     device=None, autocast: str = "no", evaluator: str | None = None, check_n: int = 0, say=print) -> dict:
    """Generate images for the records of ``splits`` and score them.

    Writes ``out`` (default ``RUN/samples/<splits joined by +>_<checkpoint>_g<guidance>_<sampler><steps>``):
    ``images/NNNNNN.png``, ``metadata.jsonl`` (``file_name``, ``index``, ``split``,
    ``source_index``, ``concepts``, ``combination``, ``held_out``, ``caption``, ``seed``),
    ``sampling.json`` (settings) and, when ``score``, the evaluator's ``metrics.json`` /
    ``metrics.csv`` / heatmap via ``mosaic.evaluation.metrics.write_metrics``, ``predictions.jsonl``
    and, with ``check_n``, ``evaluator_check.json`` (the evaluator's accuracy on ``check_n`` fresh
    ground-truth renders, ``mosaic.evaluation.check_evaluator``).

    Returns:
        ``{"out": path, "n": images, "seconds": s, "metrics": score dict or None, "evaluator_check": dict or None}``.
    Raises:
        DatasetError: a split the dataset does not have; TrainingError: missing weights.
    """
    from mosaic.dataset import read_metadata

    have = task.spec.split_sizes()
    for s in splits:
        if s not in have:
            raise DatasetError(f"--split {s!r} is not a split of the run's dataset; splits: {', '.join(have)}")
    weights = run.best if checkpoint == "best" else run.final
    if not weights.is_dir():
        alt = "final" if checkpoint == "best" else "best"
        raise TrainingError(f"run {run.root} has no {checkpoint} weights ({weights} is missing): finish training, or use --checkpoint {alt}")
    task.load_weights(weights)
    model = task.model.to(device or "cpu").eval()
    records = []
    for s in splits:
        recs = choose_records(read_metadata(task.root, s), task.concepts, n_per_combination)
        records += [(s, i, r) for i, r in enumerate(recs)]
    out = Path(out) if out is not None else run.root / "samples" / f"{'+'.join(splits)}_{checkpoint}_g{guidance:g}_{sampler}{steps}"
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "images").mkdir(parents=True)
    t0 = time.perf_counter()
    from tqdm.auto import tqdm

    from mosaic.dataset import png_bytes
    from mosaic.lab.loop import progress_kwargs

    meta, all_images = [], []
    bar = tqdm(total=len(records), desc="sample", **progress_kwargs())
    k = 0
    for s in splits:
        part = [(i, r) for (sp, i, r) in records if sp == s]
        seeds = sample_seeds(task.cfg.sampling.seed, s, len(part))
        done = [0]

        def prog(n, done=done):
            bar.update(n - done[0])
            done[0] = n

        images = generate(model, task.noise.config, task.encode([r for _, r in part]), seeds, image_size=task.image_size,
                          guidance=guidance, steps=steps, sampler=sampler, batch_size=batch_size or task.cfg.sampling.batch_size,
                          device=device, autocast=autocast, progress=prog)
        for (i, r), img, seed in zip(part, images, seeds):
            name = f"images/{k:06d}.png"
            (tmp / name).write_bytes(png_bytes(img))
            meta.append({"file_name": name, "index": k, "split": s, "source_index": r.get("index"), "concepts": r["concepts"],
                         "combination": r.get("combination"), "held_out": bool(r.get("held_out", False)),
                         "caption": r.get("caption"), "seed": seed})
            k += 1
        all_images.append(images)
    bar.close()
    seconds = time.perf_counter() - t0
    with (tmp / "metadata.jsonl").open("w") as f:
        for m in meta:
            f.write(json.dumps(m, sort_keys=True) + "\n")
    settings = {"splits": splits, "n_per_combination": n_per_combination, "guidance": guidance, "steps": steps, "sampler": sampler,
                "checkpoint": checkpoint, "seed": task.cfg.sampling.seed, "images": len(meta), "seconds": seconds}
    (tmp / "sampling.json").write_text(json.dumps(settings, indent=2) + "\n")
    result = {"out": str(out), "n": len(meta), "seconds": seconds, "metrics": None, "evaluator_check": None}
    preds = None
    if score and meta:
        from mosaic.evaluation import metrics as M

        ev = load_evaluator(task.spec, evaluator or task.cfg.evaluation.evaluator, device=str(device or "cpu"))
        images = np.concatenate(all_images)
        say(f"scoring {len(meta)} images with the {getattr(ev, 'name', 'evaluator')} evaluator")
        preds = ev.predict(images)
        scores = M.score(meta, preds, task.spec)
        from mosaic.evaluation import prediction_rows, write_prediction_rows

        write_prediction_rows(prediction_rows(meta, preds, task.spec, ev, images), tmp / "predictions.jsonl")
        M.write_metrics(scores, tmp, task.spec)
        result["metrics"] = scores
        if check_n:
            from mosaic.evaluation import check_evaluator

            say(f"measuring the evaluator on {check_n} fresh ground-truth renders")
            chk = check_evaluator(task.spec, ev, n=check_n)
            chk.pop("failures", None)
            (tmp / "evaluator_check.json").write_text(json.dumps(chk, indent=2, sort_keys=True, default=str) + "\n")
            result["evaluator_check"] = chk
    if meta:
        from mosaic.preview import sample_sheet

        sample_sheet(tmp, tmp / "samples.png", predictions=preds)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return result


# ----------------------------------------------------------------------------------------------
# one run end to end
# ----------------------------------------------------------------------------------------------


def table_from_scores(scores: dict) -> dict:
    """The seen vs held-out table of an evaluator score dict (``mosaic.evaluation.metrics.score``):
    ``{"seen": {concept: accuracy, "joint": joint accuracy, "n": images}, "held_out": {...}}``
    (a group without images is left out)."""
    out = {}
    for name in ("seen", "held_out"):
        g = scores.get(name) or {}
        if not g.get("n"):
            continue
        out[name] = {**(g.get("accuracy") or {}), "joint": g.get("joint_accuracy"), "n": g["n"]}
    return out


def run_diffusion(cfg: DiffusionConfig, say=print, on_generate=None) -> dict:
    """Generate the dataset if needed, train (or resume), sample the test splits and score them.

    Re-running a finished run (``RUN/DONE``) returns its ``metrics.json`` without doing anything;
    an interrupted one resumes from its latest checkpoint. Works under ``torchrun`` /
    ``accelerate launch``: every process trains, the main one samples and scores.

    Returns:
        The run's metrics (also in ``RUN/metrics.json``): ``run``, ``dataset``, ``train`` (see
        :func:`mosaic.lab.loop.train`), ``params``, ``samples`` (path, images, seconds),
        ``scores`` (the evaluator's score dict), ``table`` (:func:`table_from_scores`),
        ``evaluator_check``, ``time_s``; ``already_done`` when nothing was left to do.
    Raises:
        ConfigError, DatasetError, SpecError, TrainingError (all MosaicError).
    """
    from mosaic.lab.loop import torch_threads_restored

    with torch_threads_restored():  # training.threads applies to this run only
        return _run_diffusion(cfg, say, on_generate)


def _run_diffusion(cfg: DiffusionConfig, say, on_generate) -> dict:
    from mosaic.lab.loop import make_accelerator, resolve_precision, train

    t_start = time.perf_counter()
    run_dir = cfg.run_dir()
    run = RunFolder(run_dir)
    if run.is_done() and run.metrics.is_file():
        # cheap path: a finished run with the same config is a no-op
        from mosaic.lab.config import config_diff

        diff = [d for d in config_diff(run.read_config(), cfg.model_dump(mode="json")) if d != "out"]
        if not diff:
            m = json.loads(run.metrics.read_text())
            m["already_done"] = True
            return m
    accelerator = make_accelerator(cfg.training, run_dir)
    t0 = time.perf_counter()
    # the main process generates first; then one process per node (a node without the shared file system makes its own copy)
    with accelerator.main_process_first(), accelerator.local_main_process_first():
        root = resolve_dataset(cfg.dataset, generate=True, on_progress=on_generate if accelerator.is_main_process else None)
    gen_s = time.perf_counter() - t0
    from mosaic.dataset import spec_of

    check_model_fits(cfg.model, spec_of(root).image.size)  # before the run folder is touched
    with accelerator.main_process_first():
        status = run.open(cfg.model_dump(mode="json"), root, accelerator.is_main_process)
    if status == "done" and run.metrics.is_file():
        m = json.loads(run.metrics.read_text())
        m["already_done"] = True
        return m
    say(f"run {run_dir} ({status}), dataset {root}")
    torch.manual_seed(cfg.training.seed)  # the initial weights follow training.seed (a resumed run loads its checkpoint)
    task = DiffusionTask(cfg, root, run)
    n_params = count_params(task.model)
    say(f"{cfg.model.backbone} with {cfg.model.conditioning} conditioning: {n_params / 1e6:.2f} M parameters "
        f"({count_params(task.model.conditioner) / 1e6:.3f} M in the conditioner); {len(task.train_data['image'])} training images "
        f"of {task.image_size} px")
    summary = train(task, cfg.training, run, accelerator, on_log=say)
    if not accelerator.is_main_process:
        return {"train": summary}
    metrics = {"run": str(run_dir), "name": cfg.name, "dataset": manifest_fingerprint(root), "params": n_params,
               "train": summary, "generate_s": gen_s}
    ev = cfg.evaluation
    splits = ev.splits or evaluation_splits(root)
    s = cfg.sampling
    checkpoint = s.checkpoint if run.best.is_dir() or s.checkpoint == "final" else "final"
    if checkpoint != s.checkpoint:
        say("no best checkpoint was selected (no validation metric); sampling the final weights")
    res = sample_and_score(task, run, splits, n_per_combination=s.n_per_combination, guidance=s.guidance, steps=s.steps,
                           sampler=s.sampler, checkpoint=checkpoint, score=ev.enabled, device=accelerator.device, check_n=ev.check_n,
                           autocast=resolve_precision(cfg.training) if accelerator.device.type == "cuda" else "no", say=say)
    metrics["samples"] = {"out": res["out"], "images": res["n"], "seconds": res["seconds"], "checkpoint": checkpoint,
                          "splits": splits}
    if res["metrics"] is not None:
        metrics["scores"] = res["metrics"]
        metrics["table"] = table_from_scores(res["metrics"])
        if res["evaluator_check"] is not None:
            metrics["evaluator_check"] = res["evaluator_check"]
    metrics["time_s"] = time.perf_counter() - t_start
    run.write_metrics(metrics)
    run.mark_done()
    return metrics
