"""Conditional diffusion in pixel space: config, backbones, the training objective, sampling and
scoring — the main experiment of MOSAIC (Jeong et al. 2026, §2 of our reference notes).

- **Backbones** (diffusers, from scratch, 16-64 px RGB, no VAE): ``UNet2DConditionModel`` with
  cross-attention, or ``PixArtTransformer2DModel`` (a DiT with cross-attention, AdaLN-single
  timestep conditioning; Chen et al. 2023). The condition reaches both through cross-attention
  tokens (:mod:`mosaic.lab.diffusion.conditioning`); MOSAIC's DiT likewise saw its condition only through
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

Modules: :mod:`~mosaic.lab.diffusion.config` (the config sections), :mod:`~mosaic.lab.diffusion.model`
(backbones), :mod:`~mosaic.lab.diffusion.conditioning` (conditioners),
:mod:`~mosaic.lab.diffusion.task` (the objective as a :class:`~mosaic.lab.loop.Task`),
:mod:`~mosaic.lab.diffusion.sampling` (sampling and scoring), :mod:`~mosaic.lab.diffusion.family`
(the plug-in to the run driver :mod:`mosaic.lab.run`, and :func:`run_diffusion`).
"""

from mosaic.evaluation.table import table_from_scores
from mosaic.lab.diffusion.config import (
    DiffusionConfig, DiffusionModelSection, DiTSection, EvaluationSection, SamplingSection, ScheduleSection, TextSection, UNetSection,
)
from mosaic.lab.diffusion.family import DiffusionFamily, run_diffusion
from mosaic.lab.diffusion.model import DiffusionModel, build_backbone, check_model_fits, count_params
from mosaic.lab.diffusion.sampling import (
    choose_records, combination_key, generate, load_evaluator, make_sampler, open_run, sample_seeds,
)
from mosaic.lab.diffusion.scoring import sample_and_score
from mosaic.lab.diffusion.task import DiffusionTask

__all__ = [
    "DiffusionConfig", "DiffusionModelSection", "DiTSection", "EvaluationSection", "SamplingSection", "ScheduleSection",
    "TextSection", "UNetSection", "DiffusionFamily", "run_diffusion", "DiffusionModel", "build_backbone", "check_model_fits",
    "count_params", "choose_records", "combination_key", "generate", "load_evaluator", "make_sampler", "open_run",
    "sample_and_score", "sample_seeds", "DiffusionTask", "table_from_scores",
]
