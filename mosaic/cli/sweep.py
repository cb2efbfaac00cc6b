"""``mosaic sweep`` (run a sweep of trials) and ``mosaic report`` (its HTML page)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from mosaic.cli.common import console, fail, set_option
from mosaic.errors import MosaicError

SetOpt = set_option("sweep")


def sweep_command(
    sweep: Annotated[Path, typer.Argument(help="Sweep YAML, e.g. experiments/sweeps/composition_cpu.yaml")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Sweep folder (default data/sweeps/<name>)")] = None,
    backend: Annotated[str, typer.Option("--backend", help="local (process pool) or ray")] = "local",
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Trials at a time (local: one GPU each where GPUs exist)")] = 1,
    address: Annotated[Optional[str], typer.Option("--address", help="Ray cluster address (ray://host:10001 or auto); default: a local Ray instance")] = None,
    set_: SetOpt = None,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report at the end")] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate every trial's config and spec and list the trials; run nothing")] = False,
) -> None:
    """Run a sweep: every trial (generate, train, sample, evaluate) in its own subprocess and run folder.
    Resumable: finished trials are skipped; failed ones are recorded and do not stop the others."""
    from mosaic.sweep import check_sweep_options, expand, load_sweep, plan, run_sweep

    try:
        check_sweep_options(backend, workers, address)  # before anything is read or written
        s = load_sweep(sweep, set_)
        folder = out or Path("data") / "sweeps" / s.name
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
            return
        console.print(f"[bold]{s.name}[/]: {n} trials ({' x '.join(s.axes())}), backend {backend}, {workers} at a time -> {folder}")
        counter = {"done": 0, "failed": 0}

        def on_done(st):
            counter[st["status"] if st["status"] in counter else "failed"] += 1
            mark = "[green]done[/]" if st["status"] == "done" else "[red]FAILED[/]"
            console.print(f"  {mark} {st.get('id')} ({st.get('time_s', 0):.0f} s)  [{counter['done'] + counter['failed']}/{n}]")

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
        from mosaic.report import make_report

        console.print(f"report: {make_report(folder, warn=lambda m: console.print(f'[yellow]warning[/] {escape(m)}'))}")
    if len(failed):
        raise typer.Exit(1)


def report_command(
    sweep_dir: Annotated[Path, typer.Argument(help="Sweep folder (made by `mosaic sweep`)")],
) -> None:
    """Write a sweep's report: accuracy curves, per-cell heatmaps and sample grids on an HTML page."""
    from mosaic.report import make_report
    from mosaic.sweep import collect

    try:
        if (sweep_dir / "trials").is_dir():
            collect(sweep_dir)
        page = make_report(sweep_dir, warn=lambda m: console.print(f"[yellow]warning[/] {escape(m)}"))
    except MosaicError as e:
        fail(e)
    print_claims(page.parent / "claims.json")
    console.print(f"wrote {page}")


def print_claims(path: Path) -> None:
    """One line per checked claim of a report's ``claims.json`` (nothing when there is none)."""
    import json

    from mosaic.claims import fmt_effect

    if not path.is_file():
        return
    colors = {"holds": "green", "does not hold": "red", "inconclusive": "yellow"}
    for c in json.loads(path.read_text()).get("claims", []):
        e, iv = fmt_effect(c)
        extra = ""
        if c.get("changed_by_abstention"):
            extra = f" (without abstention: {c['without_abstention']['verdict']})"
        console.print(f"[{colors.get(c['verdict'], 'white')}]{c['verdict']}[/]: {escape(c['name'])} — effect {e}, 95% interval {iv}, "
                      f"{c['seeds']} seeds{escape(extra)}", highlight=False)

