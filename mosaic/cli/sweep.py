"""``mosaic sweep`` (run a sweep of trials) and ``mosaic report`` (its HTML page)."""

from __future__ import annotations

import os

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from mosaic.cli.common import MAX_WORKERS, check_out, console, fail, set_option
from mosaic.errors import MosaicError, SweepError

SetOpt = set_option("sweep")


def _print_estimates(name: str, trials: list[dict], workers: int) -> None:
    """The cost of every trial (:func:`mosaic.lab.cost.estimate_run`, measured once per distinct model
    shape): FLOPs, peak memory per process, time on this machine (trials with ``training.device:
    cpu``) and on the first accelerators of the table, and the totals."""
    from mosaic.lab.cost import estimate_run
    from mosaic.trials import cpu_slots, pool_wall_seconds
    from mosaic.lab.cost_table import fmt_bytes, fmt_flops, fmt_seconds

    cache: dict = {}
    rows, warnings = [], {}
    for t in trials:
        cfg = t["cfg"]
        cpu = cfg.training.device == "cpu"
        est = estimate_run(cfg, time_cpu=cpu, check_device_present=False, cache=cache,
                           side_by_side=cpu_slots(workers, cfg.training.threads or 1) if cpu else 1)
        rows.append((t["id"], est, cpu))
        for w in est.warnings:
            warnings.setdefault(w, t["id"])
    accs = [a.name for a in rows[0][1].accelerators[:2]] if rows else []
    table = Table(title=f"{name}: cost estimate per trial ({len({k for k in cache if k[0] == 'shape'})} distinct model shape(s) "
                        f"measured; accelerators at {100 * rows[0][1].assumed_mfu:.0f} % MFU)" if rows else name)
    for col in ["trial", "params", "FLOPs", "peak memory", "this machine"] + accs:
        table.add_column(col, justify="left" if col == "trial" else "right", overflow="fold" if col == "trial" else "ellipsis")
    tot_flops, tot_cpu, tot_acc = 0.0, 0.0, [0.0] * len(accs)
    for tid, est, cpu in rows:
        cells = [tid, f"{est.params / 1e6:.2f} M", fmt_flops(est.flops_total), fmt_bytes(est.peak_bytes_gpu),
                 fmt_seconds(est.cpu_total_s) if cpu else "-"]
        for k, a in enumerate(est.accelerators[:len(accs)]):
            cells.append(fmt_seconds(a.total_s) + ("" if a.fits else " [red](does not fit)[/]"))
            tot_acc[k] += a.total_s
        tot_flops += est.flops_total
        tot_cpu += est.cpu_total_s if cpu else 0.0
        table.add_row(*cells)
    if rows:
        table.add_row(f"[bold]total ({len(rows)} trials)[/]", "", fmt_flops(tot_flops), "",
                      fmt_seconds(tot_cpu) if tot_cpu else "-", *[fmt_seconds(x) for x in tot_acc])
        console.print(table)
        if tot_cpu:
            side = cpu_slots(workers, max(r[1].cpu_threads for r in rows))
            wall = pool_wall_seconds([est.cpu_total_s for _, est, cpu in rows if cpu], side)
            console.print(f"this machine: about {fmt_seconds(tot_cpu)} one trial at a time, a core per thread (measured at load "
                          f"{rows[0][1].cpu_load:.1f}, scaled to an idle machine by the step's process CPU time); "
                          + (f"--workers {workers}: about {fmt_seconds(wall)} wall, {side} trials side by side on "
                             f"{os.cpu_count()} cores, each worker taking the next trial when it is free" if workers > 1
                             else "--workers 1 runs them one at a time"))
    for w, tid in warnings.items():
        console.print(f"[yellow]warning[/] {escape(w)} (trial {tid} and others of its shape)")


def sweep_command(
    sweep: Annotated[Path, typer.Argument(help="Sweep YAML, e.g. experiments/sweeps/composition_cpu.yaml")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Sweep folder (default data/sweeps/<name>)")] = None,
    backend: Annotated[str, typer.Option("--backend", help="local (process pool) or ray")] = "local",
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, max=MAX_WORKERS, help="Trials at a time (local: one GPU each where GPUs exist)")] = 1,
    address: Annotated[Optional[str], typer.Option("--address", help="Ray cluster address (ray://host:10001 or auto); default: a local Ray instance")] = None,
    set_: SetOpt = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report at the end")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate every trial's config and spec and list the trials; run nothing")] = False,
) -> None:
    """Run a sweep: every trial (generate, train, sample, evaluate) in its own subprocess and run folder.
    Resumable: finished trials are skipped; failed ones are recorded and do not stop the others."""
    from mosaic.sweep import expand, load_sweep
    from mosaic.trials import check_sweep_options, plan, run_sweep

    try:
        check_sweep_options(backend, workers, address)  # before anything is read or written
        s = load_sweep(sweep, set_)
        folder = out or Path("data") / "sweeps" / s.name
        check_out(folder, "--out" if out is not None else "the default folder")
        n = len(expand(s))
        if dry_run:
            from mosaic.lab.data import load_dataset_spec

            trials = plan(s, folder)
            for t in trials:
                if t["cfg"].dataset.spec is not None:
                    load_dataset_spec(t["cfg"].dataset)  # the trial's spec, overrides applied, must validate
            console.print(f"[bold]{s.name}[/]: {n} trials, {len({str(t['dataset']) for t in trials})} datasets; every config and spec is valid")
            for t in trials:
                console.print(f"  {t['id']}  data {t['dataset']}")
            _print_estimates(s.name, trials, workers)
            return
        console.print(f"[bold]{s.name}[/]: {n} trials ({' x '.join(s.axes())}), backend {backend}, {workers} at a time -> {folder}")
        counter = {"done": 0, "failed": 0}

        def on_done(st):
            counter[st["status"] if st["status"] in counter else "failed"] += 1
            mark = "[green]done[/]" if st["status"] == "done" else "[red]FAILED[/]"
            console.print(f"  {mark} {st.get('id')} ({trial_time_text(st)})  [{counter['done'] + counter['failed']}/{n}]")

        trials, df = run_sweep(s, folder, backend=backend, workers=workers, address=address,
                               on_progress=lambda m: console.print(f"  preparing {m}"), on_done=on_done)
    except MosaicError as e:
        fail(e)
    t = Table(title=f"{s.name}: results ({folder / 'results.csv'})")
    shown = list(dict.fromkeys(list(s.grid) + list(s.zip) + ["seed", "status"] + list(s.report.y) + ["evaluator.joint", "time_s"]))
    cols = [c for c in shown if c in df.columns]
    for c in cols:
        t.add_column(c.split(".")[-1] if c.startswith("spec.") else c, justify="right")
    for _, r in df.iterrows():
        t.add_row(*[f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols])
    console.print(t)
    failed = df[df["status"] != "done"] if "status" in df.columns else df.iloc[0:0]
    for _, r in failed.iterrows():
        console.print(f"[red]failed[/] {r['trial']}: {str(r.get('error'))[-300:]}")
    if report:
        try:
            page = _collect_and_report(folder, collect_first=False)
        except MosaicError as e:
            fail(e)
        print_claims(page.parent / "claims.json")
        console.print(f"report: {page}")
    if len(failed):
        raise typer.Exit(1)


def trial_time_text(st: dict) -> str:
    """A finished trial's time as printed: its seconds, or "time lost" (a run finished by a call killed before it
    recorded the trial's time: ``mosaic.trials.run_trial``)."""
    t = st.get("time_s")
    return f"{t:.0f} s" if isinstance(t, (int, float)) and not isinstance(t, bool) else "time lost"


def _collect_and_report(sweep_dir: Path, collect_first: bool) -> Path:
    """Gather the trials into ``results.csv`` (``collect_first``) and write the report, holding the
    sweep folder's lock (:class:`mosaic.locks.FolderLock`, never waiting): a report asked for while a
    sweep runs into the folder is refused, naming that sweep, instead of writing ``results.csv`` beside
    it. A path that is no folder makes no lock file and is named by :func:`mosaic.report.make_report`."""
    from contextlib import nullcontext

    from mosaic.locks import FolderLock
    from mosaic.report import make_report
    from mosaic.trials import collect

    lock = FolderLock(sweep_dir, SweepError, "sweep folder", wait=False) if sweep_dir.is_dir() else nullcontext()
    with lock:
        if collect_first and (sweep_dir / "trials").is_dir():
            collect(sweep_dir)
        return make_report(sweep_dir, warn=lambda m: console.print(f"[yellow]warning[/] {escape(m)}"))


def report_command(
    sweep_dir: Annotated[Path, typer.Argument(help="Sweep folder (made by `mosaic sweep`)")],
) -> None:
    """Write a sweep's report: accuracy curves, per-cell heatmaps and sample grids on an HTML page.
    Refused while a sweep runs into the folder (it writes the report itself when it ends)."""
    try:
        page = _collect_and_report(sweep_dir, collect_first=True)
    except MosaicError as e:
        fail(e)
    print_claims(page.parent / "claims.json")
    console.print(f"wrote {page}")


def print_claims(path: Path) -> None:
    """One line per checked claim of a report's ``claims.json`` (nothing when there is none)."""
    from mosaic.io import read_json
    from mosaic.verdicts import fmt_effect

    if not path.is_file():
        return
    colors = {"holds": "green", "does not hold": "red", "inconclusive": "yellow"}
    try:
        claims = read_json(path).get("claims", [])
    except (OSError, ValueError, AttributeError) as e:  # written by this report: damaged only when something else wrote it
        fail(MosaicError(f"{path} is damaged ({str(e)[:100]}): run `mosaic report` again, it writes the file afresh"))
    for c in claims:
        e, iv = fmt_effect(c)
        extra = ""
        if c.get("changed_by_abstention"):
            extra = f" (without abstention: {c['without_abstention']['verdict']})"
        console.print(f"[{colors.get(c['verdict'], 'white')}]{c['verdict']}[/]: {escape(c['name'])} — effect {e}, 95% interval {iv}, "
                      f"{c['seeds']} seeds{escape(extra)}", highlight=False)

