"""Sampling and scoring: DDIM / DPM-Solver++ with classifier-free guidance, per-image seeds, the
conditions to sample, and a run's test splits generated and scored with the evaluator."""

from __future__ import annotations

import json
import os
import shutil
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from mosaic.errors import DatasetError, MosaicError, TrainingError
from mosaic.lab.data import step_seed, to_uint8
from mosaic.lab.diffusion.config import DiffusionConfig
from mosaic.lab.diffusion.model import DiffusionModel
from mosaic.lab.loop import RunFolder

if TYPE_CHECKING:
    from mosaic.lab.diffusion.task import DiffusionTask


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


def load_evaluator(spec, which: str, device: str = "cpu", abstain: bool = True):
    """``mosaic.evaluation.load_evaluator(spec, which, device, abstain)``; a clear error when it is unavailable."""
    try:
        from mosaic.evaluation import load_evaluator as _load
    except ImportError as e:
        raise MosaicError(f"the evaluator is not available ({e}); set evaluation.enabled: false and evaluation.select: loss "
                          "to train without scoring") from None
    return _load(spec, which, device=device, abstain=abstain)


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
    return cfg, run, run.dataset_root()


def samples_folder_name(splits: list[str], checkpoint: str, guidance: float, sampler: str, steps: int,
                        n_per_combination: int | None, seed: int) -> str:
    """``<splits joined by +>_<checkpoint>_g<guidance>_<sampler><steps>_k<K or all>_s<seed>``: every
    setting that changes the images is in the name."""
    k = f"k{n_per_combination}" if n_per_combination else "kall"
    return f"{'+'.join(splits)}_{checkpoint}_g{guidance:g}_{sampler}{steps}_{k}_s{seed}"


def refuse_other_samples(out: Path, key: dict) -> None:
    """Raise DatasetError when ``out`` holds samples made with other settings than ``key`` (or
    anything that is not a samples folder): earlier samples are never silently replaced. A folder
    made with the very same settings is made again (same images, same scores)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise DatasetError(f"--out {out} is a file: give a folder")
    if not any(out.iterdir()):
        return
    try:
        old = json.loads((out / "sampling.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise DatasetError(f"{out} exists and holds no readable sampling.json (not samples of this command, or damaged): "
                           "give another --out, or delete it") from None
    diff = [f"{k} {old.get(k)!r} -> {v!r}" for k, v in key.items() if old.get(k) != v]
    if diff:
        raise DatasetError(f"{out} holds samples made with other settings ({'; '.join(diff)}): they are kept; give another --out, "
                           "or delete that folder to replace them")


def sample_and_score(task: DiffusionTask, run: RunFolder, splits: list[str], *, n_per_combination: int | None, guidance: float,
                     steps: int, sampler: str, checkpoint: str, score: bool, out: Path | None = None, batch_size: int | None = None,
                     device=None, autocast: str = "no", evaluator: str | None = None, check_n: int = 0, say=print,
                     abstain: bool | None = None) -> dict:
    """Generate images for the records of ``splits`` and score them.

    Writes ``out`` (default ``RUN/samples/<splits joined by +>_<checkpoint>_g<guidance>_<sampler><steps>``):
    ``images/NNNNNN.png``, ``metadata.jsonl`` (``file_name``, ``index``, ``split``,
    ``source_index``, ``concepts``, ``combination``, ``held_out``, ``caption``, ``seed``),
    ``sampling.json`` (settings) and, when ``score``, the evaluator's ``metrics.json`` /
    ``metrics.csv`` / heatmap via ``mosaic.evaluation.metrics.write_metrics``, ``predictions.jsonl``
    and, with ``check_n``, ``evaluator_check.json`` (the evaluator's accuracy on ``check_n`` fresh
    ground-truth renders, ``mosaic.evaluation.check_evaluator``). ``abstain`` (default: the config's
    ``evaluation.abstain``) lets the parser read poor matches as unreadable; the scores then hold
    ``quality`` (:func:`mosaic.evaluation.quality.quality_summary`: mean match quality, verdicts
    abstention changed).

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
    seed = task.cfg.sampling.seed
    ev_name = str(evaluator or task.cfg.evaluation.evaluator) if score else None
    ab = (task.cfg.evaluation.abstain if abstain is None else abstain) if score else None
    # every setting that changes the images or their scores: two different samplings never share a folder
    key = {"splits": list(splits), "n_per_combination": n_per_combination, "guidance": guidance, "steps": steps, "sampler": sampler,
           "checkpoint": checkpoint, "seed": seed, "evaluator": ev_name, "abstain": ab}
    out = Path(out) if out is not None else run.root / "samples" / samples_folder_name(splits, checkpoint, guidance, sampler, steps,
                                                                                        n_per_combination, seed)
    refuse_other_samples(out, key)
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
                          device=device, autocast=autocast, progress=prog, space=getattr(task, "space", None))
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
    settings = {**key, "images": len(meta), "seconds": seconds}
    (tmp / "sampling.json").write_text(json.dumps(settings, indent=2) + "\n")
    result = {"out": str(out), "n": len(meta), "seconds": seconds, "metrics": None, "evaluator_check": None}
    preds = None
    if score and meta:
        from mosaic.evaluation import metrics as M

        ev = load_evaluator(task.spec, evaluator or task.cfg.evaluation.evaluator, device=str(device or "cpu"),
                            abstain=task.cfg.evaluation.abstain if abstain is None else abstain)
        images = np.concatenate(all_images)
        say(f"scoring {len(meta)} images with the {getattr(ev, 'name', 'evaluator')} evaluator")
        from mosaic.evaluation.quality import quality_summary, read_images

        preds, reads = read_images(ev, images)
        scores = M.score(meta, preds, task.spec)
        if reads is not None:
            scores["quality"] = quality_summary(meta, reads, task.spec, ev)
        from mosaic.evaluation import prediction_rows, write_prediction_rows

        write_prediction_rows(prediction_rows(meta, preds, task.spec, ev, images, reads=reads), tmp / "predictions.jsonl")
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
