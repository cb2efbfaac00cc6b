"""``mosaic evaluator train|check`` and ``mosaic evaluate``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mosaic.cli.common import MAX_CHECK_N, MAX_WORKERS, SpecArg, check_out, console, fail, note_workers, set_option
from mosaic.errors import MosaicError

evaluator_app = typer.Typer(no_args_is_help=True, help="Train a learned evaluator, or check an evaluator's accuracy on fresh ground-truth renders.")

SetOpt = set_option("spec")
EvalOpt = Annotated[str, typer.Option("--evaluator", "-e", help="'parser' (the scene parser) or a directory made by `mosaic evaluator train`")]
WorkersOpt = Annotated[int, typer.Option("--workers", "-w", min=1, max=MAX_WORKERS, help=(
    "Processes the scene parser reads in (the same verdicts; 2 on 2 cores reads about twice as fast from a few hundred images on)"))]
BinsOpt = Annotated[str, typer.Option("--position-bins", help=(
    "How the parser reads a position concept: strict (an angle between two bins is unreadable) or nearest (the nearer "
    "bin, as MOSAIC's position classifier answers)"))]


def _spec_of_folder(images_dir: Path) -> Path:
    """The spec ``evaluate`` reads ``images_dir`` against when ``--spec`` is not given: the dataset
    whose split folder it is (the dataset stands for its spec, checked before it is read); any other
    folder is a named error saying what to give (it was click's bare "Missing option '--spec'")."""
    parent = images_dir.resolve().parent  # through a link or "images/..": its own dataset (attack round 23)
    if images_dir.is_dir() and (parent / "manifest.json").is_file():
        return parent
    from mosaic.folder_kinds import kind_hint

    if hint := kind_hint(images_dir, "images"):  # a dataset or a run given for its images
        raise MosaicError(hint)
    where = (f"{images_dir} is a samples folder: give --spec with its run's dataset (the folder RUN/dataset.json names), "
             "which stands for its spec" if (images_dir / "sampling.json").is_file()
             else "give --spec SPEC.yaml, the spec the images were meant to follow, or a dataset (its folder) standing for its spec")
    raise MosaicError([("--spec", f"missing: only a split folder of a mosaic dataset (DATASET/test_ood) is read against its own "
                        f"dataset without it; {where}")])


def _progress(label: str) -> Progress:
    return Progress(TextColumn(f"[bold]{label}[/] " + "{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.2f}%"


def print_check(report: dict) -> None:
    """Print a check report: per-concept accuracy, unreadable share, top confusions, joint accuracy."""
    deg = report["degradation"]["name"]
    t = Table(title=f"evaluator {report['evaluator']} on {report['n']} fresh renders of {report['spec']} "
                    f"({report['split']}, degradation: {deg})")
    for col in ("concept", "accuracy", "unreadable", "seen", "held-out", "most frequent errors (intended -> read x count)"):
        t.add_column(col, overflow="fold")
    thr = report["threshold"]
    for c, acc in report["accuracy"].items():
        ok = acc is not None and acc >= thr
        conf = ", ".join(f"{e['intended']}->{e['read']} x{e['count']}" for e in report["confusion"][c][:3]) or "-"
        t.add_row(c, f"[{'green' if ok else 'red'}]{_pct(acc)}[/]", _pct(report["unreadable"][c]),
                  _pct(report["seen"]["accuracy"].get(c) if report["seen"]["n"] else None),
                  _pct(report["held_out"]["accuracy"].get(c) if report["held_out"]["n"] else None), conf)
    t.add_row("[bold]joint[/]", _pct(report["joint_accuracy"]), "", _pct(report["seen"]["joint_accuracy"]),
              _pct(report["held_out"]["joint_accuracy"]), "")
    console.print(t)
    for f in report.get("failures", [])[:3]:
        console.print(f"  e.g. index {f['index']}: intended {f['intended']}, read {f['read']}; " + "; ".join(f["reasons"]), highlight=False)
    if report.get("abstained") is not None:
        console.print(f"abstention: {report['abstained']} of {report['n']} reads below the parser's quality thresholds "
                      f"({100 * report['abstained'] / report['n']:.2f}%), counted unreadable", highlight=False)
    speed = report.get("images_per_second")
    verdict = "[green]passes[/]" if report["passed"] else f"[bold red]BELOW THRESHOLD[/] on {', '.join(report['below_threshold'])}"
    console.print(f"threshold {thr:.1%} per concept: {verdict}" + (f"   ({speed:.0f} images/s)" if speed else ""))


def print_quality(q: dict | None) -> None:
    """One line on the parser's match quality and abstention (nothing for other evaluators)."""
    if not q:
        return
    g = {k: q[k] for k in ("seen", "held_out") if q[k]["n"]}
    mean = ", ".join(f"{k} {v['quality']:.3f}" for k, v in g.items())
    state = "on" if q["abstain"] else "off"
    console.print(f"match quality (mean, 1 = clean render): {mean}; abstention {state}: {q['abstained']} read(s) below the thresholds, "
                  f"{q['verdicts_changed']} verdict(s) {'changed' if q['abstain'] else 'would change'} from right to unreadable", highlight=False)


def print_agreement(a: dict | None) -> None:
    """Cohen's kappa between two evaluators and the first disagreements."""
    if not a:
        return
    x, y = a["evaluators"]
    kap = ", ".join(f"{c} {'n/a' if v is None else f'{v:.3f}'}" for c, v in a["kappa"].items())
    console.print(f"agreement {x} vs {y} on {a['n']} images: Cohen's kappa {kap}; {a['disagreements_total']} image(s) read differently", highlight=False)
    for d in a["disagreements"][:5]:
        console.print(f"  {d['file_name']}: intended {d['intended']}, {x} {d[x]} ({d['verdicts'][x]}), {y} {d[y]} ({d['verdicts'][y]})", highlight=False)


@evaluator_app.command("check")
def check_command(
    spec: SpecArg,
    evaluator: EvalOpt = "parser",
    n: Annotated[int, typer.Option("--n", min=1, max=MAX_CHECK_N, help="Fresh ground-truth renders (split evaluator_check)")] = 2000,
    degrade: Annotated[str, typer.Option("--degrade", help="none, mild (blur 0.7 px, noise 6, colour shift 3%) or strong")] = "none",
    position_bins: BinsOpt = "strict",
    workers: WorkersOpt = 1,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the report as JSON")] = None,
    set_: SetOpt = None,
) -> None:
    """Accuracy of an evaluator on fresh renders (a seed distinct from every dataset), per concept and joint."""
    try:
        from mosaic.evaluation import check_evaluator, load_evaluator
        from mosaic.spec import load_spec

        check_out(json_out, "--json", kind="file")
        s = load_spec(spec, set_)
        note_workers(workers)
        ev = load_evaluator(s, evaluator, position_bins=position_bins, workers=workers)
        with _progress("check") as progress:
            task = progress.add_task(f"{ev.name} on {s.name}", total=n)
            report = check_evaluator(s, ev, n=n, degrade=degrade, on_progress=lambda a, b: progress.update(task, completed=a))
    except MosaicError as e:
        fail(e)
    print_check(report)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        __import__("mosaic.io").io.atomic_write(json_out, json.dumps(report, indent=2) + "\n")
        console.print(f"wrote {json_out}")


@evaluator_app.command("train")
def train_command(
    spec: SpecArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for config.json, model.safetensors, report.json")],
    steps: Annotated[Optional[int], typer.Option("--steps", min=1, help="Optimizer steps (default 1500)")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", min=1, help="Images per step (default 128)")] = None,
    input_size: Annotated[Optional[int], typer.Option("--input-size", min=8, help="Side the model sees, px (default 32)")] = None,
    n_train: Annotated[Optional[int], typer.Option("--n-train", min=1, help="Distinct training renders (default 20000)")] = None,
    width: Annotated[Optional[int], typer.Option("--width", min=4, help="Channels of the first stage (default 16)")] = None,
    check_n: Annotated[Optional[int], typer.Option("--check-n", min=0, max=MAX_CHECK_N, help="Fresh renders for the accuracy report (default 1000)")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Training seed (default 0)")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", min=1, help="torch CPU threads (default: auto, 1 on a busy machine)")] = None,
    set_: SetOpt = None,
) -> None:
    """Train a learned evaluator (small CNN, one head per concept) on augmented renders of every combination."""
    try:
        from mosaic.evaluation.learned import LearnedConfig, train_evaluator
        from mosaic.spec import load_spec

        check_out(out)
        s = load_spec(spec, set_)
        given = {"steps": steps, "batch_size": batch_size, "input_size": input_size, "n_train": n_train, "width": width,
                 "check_n": check_n, "seed": seed, "threads": threads}
        cfg = LearnedConfig(**{k: v for k, v in given.items() if v is not None})
        console.print(f"training a learned evaluator for {s.name}: {cfg.steps} steps x {cfg.batch_size} images at "
                      f"{cfg.input_size} px, pool of {cfg.n_train} renders")
        with _progress("evaluator") as progress:
            tasks = {}

            def on_progress(phase, done, total):
                if phase not in tasks:
                    tasks[phase] = progress.add_task(phase, total=total)
                progress.update(tasks[phase], completed=done)

            def on_log(rec):
                progress.console.print(f"  step {rec['step']:>6}  loss {rec['loss']:.4f}  batch accuracy {rec['batch_accuracy']:.3f}  "
                                       f"{rec['seconds']:.0f} s", highlight=False)

            ev = train_evaluator(s, out, cfg, on_log=on_log, on_progress=on_progress)
    except MosaicError as e:
        fail(e)
    except ValueError as e:  # pydantic validation of the options
        fail(MosaicError(str(e)))
    r = ev.report
    console.print(f"rendered {cfg.n_train} images in {r['render_seconds']:.1f} s, trained in {r['train_seconds']:.1f} s "
                  f"({r['steps_per_second']:.1f} steps/s on {r['device']})")
    for key in ("check_clean", "check_mild"):
        if key in r:
            print_check(r[key])
    console.print(f"[green]saved[/] {out}")


#: what `mosaic evaluate --out` writes (and replaces on a rerun)
EVALUATE_OUTPUTS = ("metrics.json", "metrics.csv", "heatmap.png", "predictions.jsonl")


def _is_evaluation(m) -> bool:
    """``metrics.json`` of an evaluation, or the placeholder of one stopped while it wrote its files
    (a rerun replaces them)."""
    return isinstance(m, dict) and ({"overall", "seen", "held_out", "evaluator"} <= set(m)
                                    or (m.get("status") == "incomplete" and m.get("written_by") == "mosaic evaluate"))


def evaluate(
    images_dir: Annotated[Path, typer.Argument(help="Folder with images and a metadata.jsonl (file_name, concepts, optional held_out)")],
    spec: Annotated[Optional[Path], typer.Option("--spec", help="Spec the images were meant to follow (a spec YAML, or a dataset standing for its spec; default for a dataset's split folder: that dataset)")] = None,
    evaluator: EvalOpt = "parser",
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write metrics.json, metrics.csv, heatmap.png, predictions.jsonl here")] = None,
    check_n: Annotated[int, typer.Option("--check-n", min=0, max=MAX_CHECK_N, help="Fresh renders to check the evaluator on (a learned evaluator's saved report is used when it matches the spec)")] = 500,
    no_abstain: Annotated[bool, typer.Option("--no-abstain", help="The parser credits the nearest allowed shape however poor the match (default: it abstains below its calibrated quality thresholds)")] = False,
    compare: Annotated[Optional[str], typer.Option("--compare", help="A second evaluator (a learned evaluator directory, or 'parser'): Cohen's kappa with it, and the disagreements")] = None,
    position_bins: BinsOpt = "strict",
    workers: WorkersOpt = 1,
    copies: Annotated[Optional[Path], typer.Option("--copies", help="The dataset the model trained on: also measure how many seen samples are near-copies of its training images (nearest-image RMSE against fresh renders)")] = None,
    set_: SetOpt = None,
) -> None:
    """Score any model's images: read their concepts and compare with the intended ones (seen vs held-out, per cell)."""
    try:
        from mosaic.evaluation import evaluate_folder, load_evaluator
        from mosaic.spec import load_spec

        check_out(out)
        spec = spec if spec is not None else _spec_of_folder(images_dir)
        if out is not None and out.is_dir():  # a user's metrics.json or heatmap.png there is never overwritten
            from mosaic.foreign_names import refuse_foreign_outputs

            refuse_foreign_outputs(out, EVALUATE_OUTPUTS, "metrics.json", _is_evaluation, "mosaic evaluate", "an evaluation")
        if (spec / "manifest.json").is_file() or spec.name == "manifest.json":  # a dataset standing for its spec: checked first
            from mosaic.verify import check_before_read

            check_before_read(spec if spec.is_dir() else spec.parent)
        s = load_spec(spec, set_)
        note_workers(workers)
        ev = load_evaluator(s, evaluator, abstain=not no_abstain, position_bins=position_bins, workers=workers)
        other = load_evaluator(s, compare, abstain=not no_abstain, position_bins=position_bins, workers=workers) if compare is not None else None
        import contextlib

        from mosaic.locks import FolderLock

        # one writer of an --out folder at a time: a second evaluate into it stops, naming the first
        with FolderLock(out, MosaicError, "evaluation folder", wait=False) if out is not None else contextlib.nullcontext():
            m = evaluate_folder(images_dir, s, ev, out=out, check_n=check_n, compare=other, copies_of=copies)
    except MosaicError as e:
        fail(e)
    t = Table(title=f"{m['n']} images of {images_dir} read by {ev.name}")
    t.add_column("concept")
    from mosaic.evaluation.table import fmt_fraction  # the format and labels of the table `mosaic train` prints

    for g in ("overall", "seen", "held_out"):
        t.add_column(f"{g.replace('_', '-')} (n={m[g]['n']})", justify="right")
    for c in m["concepts"]:
        t.add_row(c, *[fmt_fraction(m[g]["accuracy"][c]) for g in ("overall", "seen", "held_out")])
    t.add_row("[bold]joint[/]", *[fmt_fraction(m[g]["joint_accuracy"]) for g in ("overall", "seen", "held_out")])
    for key, label in (("count_mae", "count MAE"), ("position_distance", "bin distance")):
        for c in (m["overall"].get(key) or {}):
            t.add_row(f"{c} {label}", *["n/a" if m[g].get(key, {}).get(c) is None else f"{m[g][key][c]:.3f}" for g in ("overall", "seen", "held_out")])
    console.print(t)
    chk = m["evaluator"]["check"]
    if chk:
        console.print(f"evaluator {ev.name}: " + ", ".join(f"{c} {_pct(v)}" for c, v in chk["accuracy"].items())
                      + f" on {chk['n']} fresh renders ({chk['source']})", highlight=False)
    print_quality(m.get("quality"))
    print_agreement(m.get("agreement"))
    if m.get("copies"):
        c = m["copies"]
        share = "n/a" if c["samples"]["copy_share"] is None else _pct(c["samples"]["copy_share"])
        console.print(f"copies: {share} of {c['samples']['n']} seen samples are closer to a training image than 95 % of "
                      f"{c['reference']['n']} fresh {c['reference']['split']} renders (about 5 % without memorisation); "
                      f"median nearest-image RMSE {c['samples']['median_rmse']:.1f} vs {c['reference']['median_rmse']:.1f} "
                      f"({c['train']['n']} training images)" + (f"; {c['note']}" if c.get("note") else ""), highlight=False)
    if m["flagged"]:
        console.print(f"[bold red]FLAGGED[/]: {m['flag_reason']}")
    if out is not None:
        console.print(f"wrote {out}/metrics.json, metrics.csv, heatmap.png, predictions.jsonl")

