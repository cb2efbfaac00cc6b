"""``mosaic train ...`` (one command per model family) and ``mosaic sample RUN``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from mosaic.cli.common import finite_float, check_out, console, err_console, fail, resolve_device, set_option
from mosaic.errors import ConfigError, MosaicError
from mosaic.cli.evaluate import print_quality

class _TrainGroup(TyperGroup):
    """``mosaic train CONFIG`` (the family left out) names the two commands, not "No such command 'CONFIG'"."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and (args[0].endswith((".yaml", ".yml")) or Path(args[0]).is_file()):
            ctx.fail(f"{args[0]!r} is a config, not a trainer: give the model family first, "
                     f"`mosaic train diffusion {args[0]}` or `mosaic train transformer {args[0]}`")
        return super().resolve_command(ctx, args)


train_app = typer.Typer(cls=_TrainGroup, no_args_is_help=True, add_completion=False,
                        help="Train a model on a mosaic dataset (Accelerate; resumable run folders).")

SetOpt = set_option("config", "training.steps=200")
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="Run folder (default: the config's `out`, else data/runs/<name>)")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Validate everything and print the cost estimate (parameters, FLOPs, "
                                         "memory, time here and on GPUs); write nothing")]


def _print_check(check: dict | None) -> None:
    """One line on the evaluator's own accuracy; a warning when it is below its threshold."""
    from mosaic.evaluation.table import fmt_fraction

    if not check:
        return
    joint = check.get("joint_accuracy")
    line = f"evaluator {check.get('evaluator', '')} on {check.get('n')} fresh ground-truth renders: joint accuracy {fmt_fraction(joint)}"
    if check.get("passed") is False:
        console.print(f"[bold yellow]{line} — below its threshold ({', '.join(check.get('below_threshold', []))}): "
                      "the accuracies above are not reliable[/]")
    else:
        console.print(line)


def _train(config_cls, run, config: Path, set_, out, unit: str, inside: str = "", after: str = "", dry_run: bool = False,
           check=None) -> dict | None:
    """Load a lab config (``--set``, ``--out`` applied) and run it; print failures, the
    already-done notice and the training line (steps, time, ``unit``/s, processes, device, then
    ``inside`` formatted with the train metrics, final loss, then ``after`` formatted with the
    run's metrics). ``check(cfg)`` (optional) raises a ConfigError for what the config's models cannot
    see on their own, before anything runs. Returns the run's metrics, or None on a non-main process."""
    try:
        from mosaic.lab.config import load_config

        sets = list(set_ or [])
        check_out(out, run=True)  # a run's own folder may be given again (resume)
        if out is not None:
            sets.append(f"out={out}")
        cfg = load_config(config_cls, config, sets)
        if check is not None:
            check(cfg)
        if dry_run:  # validate everything and print the estimate (mosaic.lab.cost); nothing is written
            from mosaic.lab.cost import estimate_run
            from mosaic.lab.cost_table import print_estimate
            from mosaic.lab.run import check_batch, check_outputs, dataset_spec

            check_outputs(cfg)  # what a real run checks before generating: the run folder, the batch against the split
            check_batch(cfg, dataset_spec(cfg))

            console.print(f"measuring {cfg.name} (a few steps on this machine; nothing is written) ...", highlight=False)
            print_estimate(estimate_run(cfg), console)
            return None
        metrics = run(cfg, say=lambda s: console.print(s, highlight=False))
    except MosaicError as e:
        if isinstance(e, ConfigError) and e.source is None:  # found against the dataset: name the file
            e = ConfigError(e.problems, str(config) + (f" (with --set {' '.join(sets)})" if sets else ""))
        fail(e)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: rerun the same command to resume from the last checkpoint")
        raise typer.Exit(130)
    if "run" not in metrics:  # a non-main process of a multi-process run
        return None
    if metrics.get("already_done"):
        from mosaic.evaluation.trial_scores import check_run_scores
        from mosaic.lab.run import rerun_fix

        try:  # its figures are printed as the run's result: derived again, as under `mosaic report` (attack round 26)
            check_run_scores(Path(metrics["run"]), metrics, fix=rerun_fix(metrics["run"]))
        except MosaicError as e:
            fail(e)
        console.print(f"[green]already done[/]: {metrics['run']} (delete its DONE file or use another --out to train again)")
    tr = metrics["train"]
    console.print(f"trained {tr['steps']} steps in {tr['train_time_s']:.0f} s ({tr['images_per_s']:.0f} {unit}/s, "
                  f"{tr['processes']} process(es), {tr['device']}{inside.format(**tr)}); final loss {tr['final_loss']:.4f}"
                  + after.format(**metrics))
    return metrics


def _check_sampling(cfg) -> None:
    from mosaic.lab.diffusion.sampling import check_sampling

    check_sampling(cfg)


DiffusionConfigArg = Annotated[Path, typer.Argument(help="Diffusion config YAML, e.g. experiments/train/quickstart_cpu.yaml")]
TransformerConfigArg = Annotated[Path, typer.Argument(help="Transformer config YAML, e.g. experiments/train/classifier_coverage_tokens.yaml")]


@train_app.command("diffusion")
def diffusion(config: DiffusionConfigArg, set_: SetOpt = None, out: OutOpt = None, dry_run: DryRunOpt = False) -> None:
    """Train a conditional diffusion model (UNet or DiT) end to end: generate the dataset if the
    config names a spec, train (resuming an interrupted run), sample the test splits and score
    them with the evaluator. Prints the seen vs held-out accuracy table. A finished run is a no-op."""
    from mosaic.lab.diffusion import DiffusionConfig, run_diffusion

    metrics = _train(DiffusionConfig, run_diffusion, config, set_, out, "images", inside=", mixed_precision: {mixed_precision}", dry_run=dry_run,
                     check=_check_sampling)
    if metrics is not None:
        if metrics.get("table"):
            from mosaic.evaluation.table import print_table

            print_table(metrics["table"], console=console)
        _print_check(metrics.get("evaluator_check"))
        console.print(f"[green]done[/] {metrics['run']} in {metrics.get('time_s', 0):.0f} s (metrics.json, samples in {(metrics.get('samples') or {}).get('out')})")


@train_app.command("transformer")
def transformer(config: TransformerConfigArg, set_: SetOpt = None, out: OutOpt = None, dry_run: DryRunOpt = False) -> None:
    """Train a ViT or token encoder from scratch (multi-head concept classifier, or binding dual
    encoder) end to end: generate the dataset if the config names a spec, train (resuming an
    interrupted run), evaluate on the test splits (seen vs held-out accuracy, binding accuracy,
    linear factorization) and print the tables. A finished run is a no-op."""
    from mosaic.lab.transformer import TransformerConfig, report_tables, run_transformer

    metrics = _train(TransformerConfig, run_transformer, config, set_, out, "scenes", after="; evaluated the {checkpoint} weights",
                     dry_run=dry_run)
    if metrics is not None:
        for t in report_tables(metrics):
            console.print(t)
        console.print(f"[green]done[/] {metrics['run']} in {metrics.get('time_s', 0):.0f} s (metrics.json)")


def sample(
    run: Annotated[Path, typer.Argument(help="Run folder of a diffusion run (made by `mosaic train diffusion`)")],
    split: Annotated[Optional[list[str]], typer.Option("--split", help="Split(s) whose conditions to sample: test_id, test_ood (or test). Default: the run's evaluation splits")] = None,
    n_per_combination: Annotated[Optional[int], typer.Option("--n-per-combination", "-k", min=1, help="Images per combination (default: the config's sampling.n_per_combination)")] = None,
    guidance: Annotated[Optional[float], typer.Option("--guidance", "-g", parser=finite_float(0.0, 1000.0), help="Classifier-free guidance scale (default: the config's)")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", min=1, help="Sampler steps")] = None,
    sampler: Annotated[Optional[str], typer.Option("--sampler", help="ddim or dpm (DPM-Solver++); flow_euler for flow-matching runs")] = None,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="best (selected on val) or final")] = None,
    evaluator: Annotated[Optional[str], typer.Option("--evaluator", help="parser, or a trained evaluator directory")] = None,
    no_score: Annotated[bool, typer.Option("--no-score", help="Only write images and metadata.jsonl")] = False,
    no_abstain: Annotated[bool, typer.Option("--no-abstain", help="The parser credits the nearest allowed shape however poor the match (default: the config's evaluation.abstain)")] = False,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Output folder (default RUN/samples/<splits>_<checkpoint>_g<guidance>_<sampler><steps>_k<K>_s<seed>; a folder of other settings is refused)")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", min=1)] = None,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")] = "auto",
) -> None:
    """Generate images from a trained diffusion run for the conditions of test splits, write them with a
    metadata.jsonl of intended concept values, and score them with the evaluator (seen vs held-out)."""
    try:
        import torch

        from mosaic.lab.data import evaluation_splits
        from mosaic.evaluation.table import print_table, table_from_scores
        from mosaic.lab.diffusion import DiffusionTask, open_run, sample_and_score
        from mosaic.lab.diffusion.sampling import check_sampler_steps, repeated_splits
        from mosaic.lab.diffusion.scoring import refuse_linked_out

        check_out(out)
        refuse_linked_out(out)  # before the run is read or a lock file made
        cfg, folder, root = open_run(run)
        s = cfg.sampling
        if sampler is not None and sampler not in ("ddim", "dpm", "flow_euler"):
            raise MosaicError(f"--sampler {sampler!r}: use ddim or dpm (flow_euler for a flow-matching run)")
        if checkpoint is not None and checkpoint not in ("best", "final"):
            raise MosaicError(f"--checkpoint {checkpoint!r}: use best or final")
        dev = resolve_device(device)
        if cfg.training.threads:
            torch.set_num_threads(cfg.training.threads)
        twice = repeated_splits(list(split or []))
        if twice:  # refused, not de-duplicated: the same split twice is the same images twice
            raise MosaicError([("--split", f"{', '.join(map(repr, twice))} is given more than once: a split's conditions are "
                                "sampled with the same seeds each time, so the copies would be byte-identical images scored as "
                                "independent samples; give each split once (e.g. --split test_id --split test_ood)")])
        task = DiffusionTask(cfg, root, folder, train=False)
        check_sampler_steps(steps or s.steps, sampler or s.sampler, task.noise.config)
        splits = split or cfg.evaluation.splits or evaluation_splits(root)
        k = n_per_combination if n_per_combination is not None else s.n_per_combination
        from mosaic.locks import FolderLock

        # one writer of a samples folder at a time: a second `mosaic sample` into it stops, naming the first
        lock = FolderLock(out if out is not None else folder.root / "samples", MosaicError, "samples folder", wait=False)
        with lock:
            res = sample_and_score(task, folder, splits, n_per_combination=k, guidance=s.guidance if guidance is None else guidance,
                                   steps=steps or s.steps, sampler=sampler or s.sampler, checkpoint=checkpoint or s.checkpoint,
                                   score=not no_score and cfg.evaluation.enabled, out=out, batch_size=batch_size, device=dev,
                                   evaluator=evaluator, check_n=cfg.evaluation.check_n, say=lambda m: console.print(m, highlight=False),
                                   abstain=False if no_abstain else None)
    except MosaicError as e:
        fail(e)
    console.print(f"wrote {res['n']} images to {res['out']} in {res['seconds']:.1f} s")
    if res["metrics"] is not None:
        print_table(table_from_scores(res["metrics"]), console=console)
        _print_check(res["evaluator_check"])

        print_quality(res["metrics"].get("quality"))
        console.print(f"metrics.json, metrics.csv and the per-cell heatmap are in {res['out']}")

