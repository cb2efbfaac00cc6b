"""``mosaic audit`` (a person checks the evaluator's verdicts) and ``mosaic evaluator calibrate``
(the parser's abstention thresholds measured on degraded renders and synthetic bad renders)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from mosaic.cli.common import finite_float, SpecArg, check_out, console, fail, set_option
from mosaic.errors import MosaicError


def audit(
    run: Annotated[Path, typer.Argument(help="A run folder, a samples folder or a sweep folder holding scored samples (predictions.jsonl)")],
    n: Annotated[int, typer.Option("--n", help="Images in the audit (a seeded sample; all when fewer)")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Folder of audit.html (default RUN/audit)")] = None,
    import_: Annotated[Optional[Path], typer.Option("--import", help="Store an audit.json saved by the page (checked against this audit) as RUN/audit/audit.json")] = None,
    summary: Annotated[bool, typer.Option("--summary", help="Print the human-agreement rate of the saved audit.json and exit")] = False,
) -> None:
    """Write an HTML page of a seeded sample of generated images and the evaluator's verdicts, for a person to mark (then --import the saved audit.json)."""
    from mosaic.audit import AUDIT_DIR, audit_summary, import_audit, make_audit

    folder = out if out is not None else run / AUDIT_DIR
    try:
        check_out(out)
        if import_ is not None:
            dst = import_audit(run, import_, out=folder)
            console.print(f"stored {dst}")
            _print_summary(audit_summary(dst))
            return
        if summary:
            saved = folder / "audit.json"
            if not saved.is_file():
                raise MosaicError(f"{saved} is missing: mark the verdicts on {folder / 'audit.html'}, save audit.json and "
                                  f"run `mosaic audit {run} --import audit.json`")
            _print_summary(audit_summary(saved))
            return
        page = make_audit(run, n=n, seed=seed, out=folder)
    except MosaicError as e:
        fail(e)
    console.print(f"wrote {page}: open it in a browser (file:// works), mark each verdict, press 'Save audit.json', then "
                  f"`mosaic audit {run} --import ~/Downloads/audit.json`", highlight=False)


def _print_summary(s: dict) -> None:
    if not s["marked"]:
        console.print(f"{s['path']}: no verdict marked yet ({s['n']} images)")
        return
    lo, hi = s["interval"]
    console.print(f"human agreement with the evaluator: {s['agree']} of {s['marked']} verdicts correct = {100 * s['rate']:.1f}% "
                  f"(95% Wilson interval {100 * lo:.1f}-{100 * hi:.1f}%); {s['n'] - s['marked']} unmarked", highlight=False)
    for v, b in sorted(s["by_verdict"].items()):
        console.print(f"  verdict {v}: {b['agree']} of {b['marked']} correct", highlight=False)


def calibrate(
    spec: SpecArg,
    n: Annotated[int, typer.Option("--n", min=1, help="Ground-truth renders per degradation (split evaluator_check)")] = 1000,
    bad_n: Annotated[int, typer.Option("--bad-n", min=0, help="Scenes per synthetic failure mode (each clean and mildly degraded)")] = 100,
    target: Annotated[float, typer.Option("--target", parser=finite_float(0.0, 1.0), help="Largest acceptable share of degraded renders rejected")] = 0.005,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the report as JSON")] = None,
    set_: set_option("spec") = None,
) -> None:
    """Measure the parser's abstention thresholds: degraded ground-truth renders rejected (mild, strong) and synthetic bad renders rejected."""
    try:
        from mosaic.evaluation.quality import calibrate_abstention
        from mosaic.spec import load_spec

        check_out(json_out, "--json", kind="file")
        s = load_spec(spec, set_)
        r = calibrate_abstention(s, n=n, bad_n=bad_n, target=target)
    except MosaicError as e:
        fail(e)
    thr = ", ".join(f"{m} {v:.2f}" for m, v in r["thresholds"].items())
    t = Table(title=f"abstention on {s.name} (thresholds: {thr})")
    for col in ("renders", "n", "rejected", "credited without abstention", "credited with abstention"):
        t.add_column(col)
    for d, v in r["degraded"].items():
        ok = v["rejected_fraction"] <= target
        t.add_row(f"ground truth, {d}", str(v["n"]), f"[{'green' if ok else 'red'}]{v['rejected']} ({100 * v['rejected_fraction']:.2f}%)[/]",
                  f"{100 * v['accuracy_without_abstention']:.1f}%", "")
    def pct(x):  # None: no scene of that kind (--bad-n 0)
        return "-" if x is None else f"{100 * x:.0f}%"

    for k, v in r["bad"].items():
        t.add_row(f"bad: {k}", str(v["n"]), pct(v["rejected_fraction"]), pct(v["credited_without_abstention"]), pct(v["credited_with_abstention"]))
    console.print(t)
    console.print("suggested by the degraded renders alone (each measure at its " f"{100 * target / 3:.2f}% quantile): "
                  + ", ".join(f"{m} {v:.3f}" for m, v in r["suggested"].items()), highlight=False)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        __import__("mosaic.io").io.atomic_write(json_out, json.dumps(r, indent=2) + "\n")
        console.print(f"wrote {json_out}")
