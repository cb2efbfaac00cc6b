"""``mosaic reproduce {mosaic,binding,coverage}``: one command per paper."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from mosaic.cli.common import MAX_WORKERS, check_out, console, fail
from mosaic.cli.sweep import trial_time_text
from mosaic.errors import MosaicError


def _fmt_s(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 5400 else f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def reproduce_command(
    paper: Annotated[str, typer.Argument(help="mosaic, binding or coverage (experiments/reproduce.yaml)")],
    scale: Annotated[str, typer.Option("--scale", help="cpu (the CPU-sized sweeps) or gpu (the papers' scale)")] = "cpu",
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Folder of the sweeps and the report (default data/reproduce/<paper>_<scale> in the project folder)")] = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, max=MAX_WORKERS, help="Trials at a time")] = 1,
    backend: Annotated[str, typer.Option("--backend", help="local (process pool) or ray")] = "local",
    address: Annotated[Optional[str], typer.Option("--address", help="Ray cluster address (with --backend ray)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the trials and an estimated time; run nothing")] = False,
) -> None:
    """Run a paper's sweeps at a scale (resumable) and write one report: each claim, its effect and 95 % interval, and the paper's statement."""
    from mosaic.reproduce import ROOT

    # the registry's sweeps name their configs, specs and datasets relative to the project folder (experiments/...,
    # data/...): run from elsewhere, they are read and written there, never half found (attack round 24a)
    folder = out.resolve() if out is not None else ROOT / "data" / "reproduce" / f"{paper}_{scale}"
    try:
        here = Path.cwd()
    except OSError:  # the current folder was deleted: there is nowhere to come back to (attack round 29)
        here = ROOT
    if here.resolve() != ROOT.resolve() and (ROOT / "experiments").is_dir():
        console.print(f"the registry's sweeps name their files relative to the project folder {ROOT}: reading and writing "
                      f"there (datasets under {ROOT / 'data'})", highlight=False)
        os.chdir(ROOT)
    try:
        _reproduce(paper, scale, out, folder, workers, backend, address, dry_run)
    finally:
        try:
            os.chdir(here)
        except OSError:
            pass


def _reproduce(paper: str, scale: str, out: Path | None, folder: Path, workers: int, backend: str, address: str | None,
               dry_run: bool) -> None:
    from mosaic.reproduce import SCALES, plan_reproduction, reproduce

    try:
        if scale not in SCALES:
            raise MosaicError(f"--scale {scale!r}: use one of {', '.join(SCALES)}")
        if backend not in ("local", "ray"):
            raise MosaicError(f"--backend {backend!r}: use local or ray")
        check_out(folder, "--out" if out is not None else "the default folder")
        if dry_run:
            console.print(f"planning {paper} --scale {scale}: validating every trial and timing each distinct model shape "
                          + ("on this machine (a few minutes on 2 cores)" if scale == "cpu" else "(its FLOPs)") + " ...", highlight=False)
            plan = plan_reproduction(paper, scale, folder, workers=workers)
            for s in plan["sweeps"]:
                t = Table(title=f"{s['name']} ({s['path']}): {len(s['trials'])} trials, {s['claims']} claim(s) -> {s['folder']}; "
                                f"about {_fmt_s(s['wall_seconds'])} with {workers} worker(s) if run alone")
                for col in ("trial", "status", "estimate"):  # a trial name folds, never cut: its seed must stay readable
                    t.add_column(col, overflow="fold", min_width=len("trial") if col != "trial" else 24, ratio=None)
                for r in s["trials"]:
                    est = r["estimate"]
                    txt = "-" if est is None else (est.get("error") or f"{_fmt_s(est['seconds'])} ({est['where'].split(' (')[0]})")
                    t.add_row(escape(r["id"]), "done" if r["done"] else "to run", escape(txt))
                console.print(t)
            for m in plan["missing"]:
                console.print(f"[yellow]missing[/] sweep {m} (registered in experiments/reproduce.yaml, no file): skipped")
            console.print(f"{plan['todo']} of {plan['trials']} trials to run; estimated {_fmt_s(plan['seconds'])} of trial time, "
                          f"about {_fmt_s(plan['wall_seconds'])} with {workers} worker(s)" + (" (this machine, every sweep's trials through one pool, a core per trial thread: measured now beside as many trials as run at once, scaled to an idle machine)" if scale == "cpu" else " (projected on an accelerator)"),
                          highlight=False)
            return

        def on_done(st):
            mark = "[green]done[/]" if st["status"] == "done" else "[red]FAILED[/]"
            console.print(f"  {mark} {st.get('id')} ({trial_time_text(st)})")

        res = reproduce(paper, scale, folder, workers=workers, backend=backend, address=address,
                        on_progress=lambda m: console.print(f"  {escape(m)}"), on_done=on_done)
    except MosaicError as e:
        fail(e)
    t = Table(title=f"{res['title']} ({scale}): claims")
    for col in ("sweep", "claim", "effect", "95% interval", "seeds", "verdict"):
        t.add_column(col, overflow="fold")
    colors = {"holds": "green", "does not hold": "red", "inconclusive": "yellow"}
    from mosaic.verdicts import fmt_effect

    for c in res["claims"]:
        e, iv = fmt_effect(c)
        t.add_row(c.get("sweep") or "", escape(c["name"]), e, iv, str(c["seeds"]), f"[{colors.get(c['verdict'], 'white')}]{c['verdict']}[/]")
    console.print(t)
    for m in res["missing"]:
        console.print(f"[yellow]missing[/] sweep {m}: skipped")
    console.print(f"report: {res['page']} ({_fmt_s(res['seconds'])})")
    if any(s["failed"] for s in res["sweeps"]):
        raise typer.Exit(1)
