"""The diffusion family's plug-in to the run driver (:mod:`mosaic.lab.run`): build the task, keep
the caption vocabulary, and after training sample the test splits and score them."""

from __future__ import annotations

from pathlib import Path

from mosaic.lab.diffusion.config import DiffusionConfig
from mosaic.lab.diffusion.model import check_model_fits, count_params
from mosaic.lab.diffusion.sampling import check_sampling
from mosaic.lab.diffusion.scoring import sample_and_score
from mosaic.lab.diffusion.task import DiffusionTask
from mosaic.lab.loop import resolve_precision
from mosaic.lab.run_folder import RunFolder
from mosaic.lab.run import Family, RunContext, pick_checkpoint
from mosaic.lab.run import run as run_with
from mosaic.diagnostics.analyze import analyze_after_training
from mosaic.diagnostics.applies import check_analysis
from mosaic.errors import ConfigError
from mosaic.evaluation.table import table_from_scores
from mosaic.lab.autoencoder import check_fits
from mosaic.lab.data import evaluation_splits


class DiffusionFamily(Family):
    """Conditional diffusion in pixel or latent space (see :mod:`mosaic.lab.diffusion`)."""

    def build_task(self, cfg: DiffusionConfig, root: Path, run: RunFolder) -> DiffusionTask:
        return DiffusionTask(cfg, root, run)

    def check(self, cfg: DiffusionConfig, spec) -> None:
        """The backbone against the spec's image size, and the evaluator, before anything is written.

        Raises:
            ConfigError: see :func:`mosaic.lab.diffusion.model.check_model_fits`; an evaluator that is
                neither ``parser`` nor a directory made by ``mosaic evaluator train``.
        """

        m = cfg.model
        size = spec.image.size
        if m.latent is not None:
            check_fits(m.latent.autoencoder, size)
            size //= m.latent.autoencoder.factor  # the backbone's input: the latent side
            if cfg.dataset.stream:
                raise ConfigError([("dataset.stream", "true, but latent diffusion (model.latent) trains on the cached latents of "
                                    "the dataset's train split: set dataset.stream: false")])
        check_model_fits(m, size)
        if cfg.analysis is not None and (m.latent is not None or m.schedule.flow_matching or m.backbone == "mmdit"):
            raise ConfigError([("analysis", "the representation diagnostics read pixel-space DDPM models (UNet / PixArt DiT "
                                "features, the DDPM diffusion classifier); this run is " + ", ".join(
                                    w for w, on in (("latent (model.latent)", m.latent is not None),
                                                    ("flow matching", m.schedule.flow_matching),
                                                    ("an MMDiT", m.backbone == "mmdit")) if on)
                                + ": remove the analysis section")])
        ev = cfg.evaluation
        have = spec.split_sizes()
        unknown = [s for s in (ev.splits or []) if s not in have]
        if unknown:
            raise ConfigError([("evaluation.splits", f"{unknown} are not splits of the dataset's spec; splits: {', '.join(have)}")])
        if ev.enabled and str(ev.evaluator) != "parser" and not (Path(ev.evaluator) / "config.json").is_file():
            raise ConfigError([("evaluation.evaluator", f"{str(ev.evaluator)!r} is neither 'parser' nor a directory made by "
                                "`mosaic evaluator train SPEC --out DIR` (no config.json there)")])
        vev = ev.val_evaluator
        if ev.enabled and vev is not None and str(vev) != "parser" and not (Path(vev) / "config.json").is_file():
            raise ConfigError([("evaluation.val_evaluator", f"{str(vev)!r} is neither 'parser' nor a directory made by "
                                "`mosaic evaluator train SPEC --out DIR` (no config.json there): train one, or drop "
                                "val_evaluator to validate with evaluation.evaluator")])

        check_analysis(cfg, "diffusion", spec)  # analysis.what names only diagnostics that apply
        check_sampling(cfg)  # sampler steps and evaluation splits, before training rather than after it

    def opened(self, cfg: DiffusionConfig, task: DiffusionTask, ctx: RunContext) -> None:
        if ctx.accelerator.is_main_process:
            task.keep_vocab(ctx.run)

    def describe(self, cfg: DiffusionConfig, task: DiffusionTask, status: str, ctx: RunContext) -> str:
        return (f"{super().describe(cfg, task, status, ctx)}\n{cfg.model.backbone} with {cfg.model.conditioning} conditioning: "
                f"{count_params(task.model) / 1e6:.2f} M parameters ({count_params(task.model.conditioner) / 1e6:.3f} M in the "
                f"conditioner); {len(task.train_source) if task.train_source is not None else len(task.train_data['latent' if task.space is not None else 'image'])} training images "
                f"of {task.image_size} px" + (" (streamed)" if task.train_source is not None else "")
                + (f", as {task.model_channels} x {task.model_size} x {task.model_size} latents of {task.space.folder}"
                   if task.space is not None else "")
                + (", flow matching" if cfg.model.schedule.flow_matching else ""))

    def results(self, cfg: DiffusionConfig, task: DiffusionTask, ctx: RunContext) -> dict:
        """``generate_s``, ``samples`` (path, images, seconds, checkpoint, splits) and, when scored,
        ``scores`` (the evaluator's score dict), ``table`` (:func:`mosaic.evaluation.table.table_from_scores`)
        and ``evaluator_check``."""

        run, accelerator, say = ctx.run, ctx.accelerator, ctx.say
        ev, s = cfg.evaluation, cfg.sampling
        splits = ev.splits or evaluation_splits(ctx.root)
        checkpoint = pick_checkpoint(run, s.checkpoint)
        if checkpoint != s.checkpoint:
            say("no best checkpoint was selected (no validation metric); sampling the final weights")
        res = sample_and_score(task, run, splits, n_per_combination=s.n_per_combination, guidance=s.guidance, steps=s.steps,
                               sampler=s.sampler, checkpoint=checkpoint, score=ev.enabled, device=accelerator.device,
                               check_n=ev.check_n, say=say,
                               autocast=resolve_precision(cfg.training) if accelerator.device.type == "cuda" else "no")
        out = {"generate_s": ctx.generate_s,
               "samples": {"out": res["out"], "images": res["n"], "seconds": res["seconds"], "checkpoint": checkpoint, "splits": splits}}
        if res["metrics"] is not None:
            out["scores"] = res["metrics"]
            out["table"] = table_from_scores(res["metrics"])
            if res["evaluator_check"] is not None:
                out["evaluator_check"] = res["evaluator_check"]
        if cfg.analysis is not None:  # the representation diagnostics on the sampled weights

            out["analysis"] = analyze_after_training("diffusion", cfg, task, run.root, accelerator.device, out, say)
        return out


def run_diffusion(cfg: DiffusionConfig, say=print, on_generate=None) -> dict:
    """Generate the dataset if needed, train (or resume), sample the test splits and score them.

    Re-running a finished run (``RUN/DONE``) returns its ``metrics.json`` without doing anything;
    an interrupted one resumes from its latest checkpoint. Works under ``torchrun`` /
    ``accelerate launch``: every process trains, the main one samples and scores.

    Returns:
        The run's metrics (also in ``RUN/metrics.json``): ``run``, ``name``, ``dataset``, ``train`` (see
        :func:`mosaic.lab.loop.train`), ``params``, ``generate_s``, ``samples`` (path, images, seconds),
        ``scores`` (the evaluator's score dict), ``table`` (the seen / held-out table,
        :mod:`mosaic.evaluation.table`), ``evaluator_check``, ``time_s``; ``already_done`` when
        nothing was left to do.
    Raises:
        ConfigError, DatasetError, SpecError, TrainingError (all MosaicError).
    """
    return run_with(cfg, DiffusionFamily(), say, on_generate)
