"""Sampling: DDIM / DPM-Solver++ with classifier-free guidance, per-image seeds, the conditions to
sample, the records to sample for, the evaluator and a trained run to score with
(:mod:`mosaic.lab.diffusion.scoring` generates a run's test splits and scores them)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import torch

from mosaic.errors import ConfigError, MosaicError, TrainingError
from mosaic.evaluation import load_evaluator as _load_evaluator
from mosaic.lab.data import step_seed, to_uint8
from mosaic.lab.diffusion.config import DiffusionConfig
from mosaic.lab.diffusion.model import DiffusionModel
from mosaic.lab.run_folder import RunFolder
from mosaic.lab.config import validate_config


def make_sampler(kind: str, train_config):
    """A fresh DDIM (eta 0), DPM-Solver++ (2nd order) or flow-matching Euler
    (``FlowMatchEulerDiscreteScheduler``, ``flow_euler``) scheduler from the training schedule.

    Raises:
        MosaicError: a DDPM sampler for a flow-matching model or the other way round.
    """
    from diffusers import DDIMScheduler, DPMSolverMultistepScheduler

    flow = train_config.get("_class_name") == "FlowMatchEulerDiscreteScheduler" or "shift" in train_config
    if flow != (kind == "flow_euler"):
        raise MosaicError(f"sampler {kind!r} does not sample a {'flow-matching' if flow else 'DDPM'} model: use "
                          f"{'flow_euler' if flow else 'ddim or dpm'} (--sampler / sampling.sampler)")
    if flow:
        from diffusers import FlowMatchEulerDiscreteScheduler

        return FlowMatchEulerDiscreteScheduler.from_config(train_config)
    if kind == "ddim":
        return DDIMScheduler.from_config(train_config, timestep_spacing="trailing")
    return DPMSolverMultistepScheduler.from_config(train_config, algorithm_type="dpmsolver++", solver_order=2, timestep_spacing="trailing")


def check_sampler_steps(steps: int, sampler: str, train_config, name: str = "--steps") -> None:
    """Refuse more DDIM / DPM-Solver steps than the model's training timesteps before anything runs:
    DDIM's ``set_timesteps`` raises a ValueError (a traceback after the weights are loaded), DPM-Solver
    repeats timesteps. Flow matching (``flow_euler``) samples continuous times: any number of steps.

    Raises:
        MosaicError: naming ``name``, the steps and the run's ``num_train_timesteps``.
    """
    if sampler == "flow_euler":
        return
    total = int(train_config.get("num_train_timesteps") or 0)
    if total and steps > total:
        raise MosaicError([(name, f"{steps} sampler steps: at most the run's {total} training timesteps "
                                  f"(model.schedule.num_train_timesteps) with the {sampler} sampler: give {name} {total} or fewer")])


def check_sampling(cfg: DiffusionConfig) -> None:
    """``sampling.steps`` within the run's training timesteps (DDIM / DPM), and no split twice in
    ``evaluation.splits``: found before training (``mosaic train diffusion``, its ``--dry-run``, and
    :func:`mosaic.lab.diffusion.run_diffusion` itself), not when the finished run samples.

    Raises:
        ConfigError: naming ``evaluation.splits`` or ``sampling.steps``.
    """
    twice = repeated_splits(list(cfg.evaluation.splits or []))
    if twice:
        raise ConfigError([("evaluation.splits", f"{', '.join(map(repr, twice))} is listed more than once: a split sampled twice "
                            "gives the same images twice, scored as independent samples; list each split once")])
    try:
        check_sampler_steps(cfg.sampling.steps, cfg.sampling.sampler,
                            {"num_train_timesteps": cfg.model.schedule.num_train_timesteps}, name="sampling.steps")
    except MosaicError as e:
        raise ConfigError(e.problems) from None


def repeated_splits(splits: list[str]) -> list[str]:
    """The split names ``splits`` gives more than once (each once, in order): a split sampled twice
    draws its conditions with the same seeds, so its images are byte-identical copies that scoring
    would count as independent samples."""
    return list(dict.fromkeys(s for i, s in enumerate(splits) if s in splits[:i]))


def sample_seeds(seed: int, split: str, n: int) -> list[int]:
    """Per-image noise seeds: a pure function of ``(seed, split, index)``."""
    tag = zlib.crc32(split.encode())
    return [step_seed(seed, tag, i) for i in range(n)]


@torch.no_grad()
def generate(model: DiffusionModel, train_config, cond: torch.Tensor, seeds: list[int], *, image_size: int, guidance: float,
             steps: int, sampler: str = "ddim", batch_size: int = 256, device=None, autocast: str = "no", progress=None,
             space=None) -> np.ndarray:
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
        space: a :class:`mosaic.lab.autoencoder.LatentSpace`: denoise latents ``[C, S/f, S/f]`` and
            decode them (latent diffusion); None: pixels ``[3, S, S]``.
    Returns:
        uint8 ``[N, S, S, 3]``.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    out = []
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(autocast)
    shape = (space.channels, space.size(image_size), space.size(image_size)) if space is not None else (3, image_size, image_size)
    if space is not None:
        space.to(device)
    for start in range(0, len(seeds), batch_size):
        c = cond[start:start + batch_size].to(device)
        b = len(c)
        x = torch.stack([torch.randn(*shape, generator=torch.Generator().manual_seed(s))
                         for s in seeds[start:start + batch_size]]).to(device)
        sched = make_sampler(sampler, train_config)
        sched.set_timesteps(steps, device=device)
        x = x * getattr(sched, "init_noise_sigma", 1.0)  # flow matching starts from unit noise
        ones = torch.ones(b, dtype=torch.bool, device=device)
        for t in sched.timesteps:
            xin = sched.scale_model_input(x, t) if hasattr(sched, "scale_model_input") else x
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
        out.append(to_uint8(space.decode(x) if space is not None else x))
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


def load_evaluator(spec, which: str, device: str = "cpu", abstain: bool = True, position_bins: str = "strict"):
    """``mosaic.evaluation.load_evaluator(spec, which, device, abstain, position_bins)``."""
    return _load_evaluator(spec, which, device=device, abstain=abstain, position_bins=position_bins)


def open_run(run_dir: str | Path) -> tuple[DiffusionConfig, RunFolder, Path]:
    """Config, folder and dataset root of an existing diffusion run; checks the dataset fingerprint.

    Raises:
        TrainingError: not a run folder; DatasetError: the dataset is gone or changed.
    """

    run = RunFolder(run_dir)
    raw = run.read_config()
    if isinstance(raw, dict) and "objective" in raw and "model" in raw and "backbone" not in (raw.get("model") or {}):
        raise TrainingError(f"{run_dir} is a transformer run ({raw.get('objective')}): `mosaic sample` generates images from "
                            "diffusion runs only; a transformer run's results are in its metrics.json")
    cfg = validate_config(DiffusionConfig, raw, source=str(run.config))
    return cfg, run, run.dataset_root()
