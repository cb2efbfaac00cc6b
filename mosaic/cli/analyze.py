"""``mosaic analyze RUN``: the representation diagnostics (:mod:`mosaic.diagnostics`) on a finished run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from mosaic.cli.common import console, fail, resolve_device, set_option
from mosaic.errors import MosaicError

WHAT_HELP = ("Comma-separated diagnostics: probes, layers, factorization, rank, binding-complexity, interventions, diffusion-classifier "
             "(default: every one that applies to the run; one that does not apply is an error)")


def _pct(x) -> str:
    return "-" if not isinstance(x, (int, float)) or x != x else f"{100 * x:.1f}%"


def _num(x, fmt=".3f") -> str:
    return "-" if not isinstance(x, (int, float)) else format(x, fmt)


def analyze(
    run: Annotated[Path, typer.Argument(help="Run folder of a finished run (made by `mosaic train diffusion|transformer`)")],
    what: Annotated[Optional[str], typer.Option("--what", "-w", help=WHAT_HELP)] = None,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="final or best (default: the weights the run evaluated)")] = None,
    set_: set_option("analysis option", "probes.epochs=200") = None,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, cuda:1 ... (default: cuda when available)")] = "auto",
    no_write: Annotated[bool, typer.Option("--no-write", help="Print only: leave metrics.json and RUN/analysis/ untouched")] = False,
) -> None:
    """Run the representation diagnostics on a finished run: linear probes (per concept and
    binding), per-layer probe accuracy, factorization extras (whitened R², k95, probe-span R²),
    rank axes of ordinal concepts, binding-function complexity and colour interventions (2-object
    colour/shape scenes), and the diffusion classifier (diffusion runs). Probes train on
    the train split only and are scored on seen (test_id) and held-out (test_ood) combinations.
    Results go into RUN/metrics.json under `analysis`, figures into RUN/analysis/."""
    try:
        import torch

        from mosaic.diagnostics.runs import analyze_run, open_any_run
        from mosaic.diagnostics.config import AnalysisSection
        from mosaic.lab.config import apply_sets, validate_config

        if checkpoint is not None and checkpoint not in ("best", "final"):
            raise MosaicError(f"--checkpoint {checkpoint!r}: use best or final")
        names = None
        if what is not None:
            names = [w.strip() for w in what.split(",") if w.strip()]
            if not names:
                raise MosaicError("--what is empty: give diagnostics separated by commas, e.g. --what probes,layers")
        family, cfg, folder, _ = open_any_run(run)
        base = getattr(cfg, "analysis", None)
        data = base.model_dump(mode="json") if base is not None else {}
        opts = validate_config(AnalysisSection, apply_sets(data, set_), source="--set") if set_ else (base or AnalysisSection())
        dev = resolve_device(device)
        if family == "transformer" or cfg.training.threads:
            torch.set_num_threads(cfg.training.threads or torch.get_num_threads())
        out = analyze_run(run, what=names, options=opts, checkpoint=checkpoint, device=dev, write=not no_write,
                          say=lambda s: console.print(s, highlight=False))
    except MosaicError as e:
        fail(e)
    from mosaic.io import read_json

    try:  # read again after analyze_run wrote it (or checked it, with --no-write)
        metrics = read_json(folder.metrics) if folder.metrics.is_file() else {}
    except (OSError, ValueError):
        metrics = {}
    metrics = metrics if isinstance(metrics, dict) else {}
    for t in report_tables(out, metrics.get("table") or {}):
        console.print(t)
    for d, why in (out.get("skipped") or {}).items():
        console.print(f"[dim]skipped {d}: {why}[/]", highlight=False)
    secs = ", ".join(f"{k} {v:.1f} s" for k, v in (out.get("seconds") or {}).items())
    where = "" if no_write else f"; metrics.json updated, figures in {folder.root / 'analysis'}"
    console.print(f"[green]done[/] {folder.root} ({out.get('checkpoint')} weights): {secs}{where}")


def report_tables(a: dict, task_table: dict) -> list[Table]:
    """Rich tables of an ``analysis`` result (:func:`mosaic.diagnostics.analyze.analyze_task`)."""
    tables = []
    p = a.get("probes")
    if p:
        c = p.get("concept") or {}
        t = Table(title=f"linear probes on {p.get('layer')} (trained on train, seen combinations only)")
        t.add_column("probe")
        groups = [("test_id", "seen"), ("test_ood", "held_out"), ("test", "test")]
        groups = [g for g in groups if g[0] in c]
        for split, group in groups:
            t.add_column(f"{split} (n={c[split].get('n')})", justify="right")
            if group in task_table:
                t.add_column(f"task {group.replace('_', '-')}", justify="right")
        for concept in [k for k in (c.get("train") or {})]:
            row = [concept]
            for split, group in groups:
                row.append(_pct(c[split].get(concept)))
                if group in task_table:
                    row.append(_pct(task_table[group].get(concept)))
            t.add_row(*row)
        for name, key, label in (("slots", "object_accuracy", "slot-wise binding (object)"), ("binding", "accuracy", None)):
            b = p.get(name)
            if not b:
                continue
            label = label or f"keyed binding ({b.get('target')} | {b.get('key')})"
            row = [label]
            for split, group in groups:
                row.append(_pct((b.get(split) or {}).get(key)))
                if group in task_table:
                    row.append(_pct(task_table[group].get("object_accuracy")) if name == "slots" else "")
            t.add_row(*row)
        sp = p.get("set")
        if sp:
            for key, label in (("concept_mean", "set probe: concepts (order-free)"), ("object", "set probe: objects (trained types)")):
                row = [label]
                for split, group in groups:
                    row.append(_pct((sp.get(split) or {}).get(key)))
                    if group in task_table:
                        row.append("")
                t.add_row(*row)
        tables.append(t)
    lay = a.get("layers")
    if lay:
        t = Table(title=f"probe accuracy per layer (mean over concepts); best by validation: {lay.get('best_by_val')}")
        for col in ("layer", "seen", "held-out", "validation"):
            t.add_column(col, justify="left" if col == "layer" else "right")
        for i, name in enumerate(lay["layers"]):
            mark = " (last)" if name == lay.get("last") else ""
            t.add_row(name + mark, _pct(lay["seen"][i]), _pct(lay["held_out"][i]), _pct(lay["val"][i]))
        t.caption = (f"held-out: best layer {lay.get('best_held_out_layer')} {_pct(lay.get('best_held_out'))} (chosen on held-out), "
                     f"last {_pct(lay.get('last_held_out'))}; gain of the validation-selected layer over the last "
                     f"{_num(100 * lay['gain_over_last'], '+.1f') if isinstance(lay.get('gain_over_last'), (int, float)) else '-'} points")
        tables.append(t)
    f = a.get("factorization")
    if f:
        t = Table(title=f"linear factorization ({f.get('embedding')}, n={f.get('n')})")
        cols = [("R²", f.get("r2")), ("R² whitened", f.get("r2_whitened")), ("R² least squares", f.get("r2_lstsq")),
                ("R² held-out", (f.get("heldout") or {}).get("r2")), ("probe-span R²", (f.get("probe_span_r2") or {}).get("mean")),
                ("cross |cos|", (f.get("abs_cos") or {}).get("cross")), ("within |cos|", (f.get("abs_cos") or {}).get("within"))]
        for name, _ in cols:
            t.add_column(name, justify="right")
        t.add_row(*[_num(v) for _, v in cols])
        t.caption = "k95 (components for 95 % of the concept means' variance): " + ", ".join(f"{k} {v}" for k, v in (f.get("k95") or {}).items())
        tables.append(t)
    for concept, r in (a.get("rank") or {}).items():
        t = Table(title=f"rank axes of {concept} (Spearman ρ of the projection)")
        t.add_column("axis")
        splits = [s for s in ("train", "test_id", "test_ood", "test") if s in (r.get("fitted") or {})]
        for s in splits:
            t.add_column(s, justify="right")
        for axis in ("extremes", "fitted"):
            t.add_row(axis, *[_num((r.get(axis) or {}).get(s, {}).get("spearman")) for s in splits])
        tables.append(t)
    bc = a.get("binding_complexity")
    if bc:
        fams = bc.get("families") or {}
        splits = [s for s in ("train", "test_id", "test_ood", "test") if any(s in r for r in fams.values())]
        t = Table(title=f"binding-function complexity: g(labels) -> scene embedding, fitted on {bc['n'].get('train')} train scenes "
                        f"({next(iter(fams.values()), {}).get('epochs')} epochs, final)")
        t.add_column("family")
        probes = bool(bc.get("probe_true"))
        for s in splits:
            t.add_column(f"R² {s} (n={bc['n'].get(s)})", justify="right")
        tests = [s for s in splits if s != "train"]
        if probes:
            t.add_column(f"probe concept ({' / '.join(tests)})", justify="right")
            t.add_column(f"probe object ({' / '.join(tests)})", justify="right")

        def probe_cols(get):
            return [" / ".join(_pct((get(s) or {}).get(k)) for s in tests) for k in ("probe_concept", "probe_object")] if probes else []

        if probes:
            t.add_row("true embedding", *[""] * len(splits), *probe_cols(bc["probe_true"].get))
        for fam, r in fams.items():
            t.add_row(fam, *[_num((r.get(s) or {}).get("r2")) for s in splits], *probe_cols(r.get))
        t.caption = ("R²: SST around the mean of all scored scenes; probe object: the set probe ranks both object types above "
                     "all others (- where a scene holds a held-out type: its class was never trained)")
        tables.append(t)
    iv = a.get("interventions")
    if iv:
        splits = [s for s in ("test_id", "test_ood", "test") if isinstance(iv.get(s), dict)]
        t = Table(title=f"colour interventions ({iv.get('bank')} bank of {iv.get('bank_entries')} train entries, gallery of {iv.get('gallery')} scenes)")
        for col in ("bases", "edits", "skipped (no bank entry / no control / same shape)", "hit", "same colour", "different colour",
                    "hit (either order)", "hit (first-indexed rule)"):
            t.add_column(col, justify="left" if col == "bases" else "right")
        for s in splits:
            r = iv[s]
            t.add_row(f"{s} (n={r['n_bases']})", str(r["n_edits"]),
                      f"{r['skipped_missing_bank']} / {r['skipped_missing_control']} / {r['skipped_same_shape']}", _pct(r.get("hit")),
                      _pct((r.get("same_color") or {}).get("hit")), _pct((r.get("different_color") or {}).get("hit")),
                      _pct(r.get("hit_unordered")), _pct(r.get("hit_first_indexed")))
        t.caption = (f"hit: the cosine top-1 of the edited embedding is a scene of the edited pair in its order (any render); "
                     f"targets: {iv.get('targets')}")
        tables.append(t)
    dc = a.get("diffusion_classifier")
    if dc:
        t = Table(title=f"diffusion classifier over {dc.get('candidates')} combinations ({len(dc.get('timesteps', []))} timesteps, "
                        f"{dc.get('norm')}, {dc.get('weighting')}; {_num(dc.get('images_per_s'), '.2f')} images/s)")
        t.add_column("accuracy")
        groups = [g for g in ("seen", "held_out") if g in dc]
        for g in groups:
            t.add_column(f"{g.replace('_', '-')} (n={dc[g]['n']})", justify="right")
        keys = [k for k in dc[groups[0]] if k not in ("n", "wrong_by_concept", "marginal", "picked_held_out", "joint")] if groups else []
        for k in keys:
            t.add_row(k, *[_pct(dc[g].get(k)) for g in groups])
        t.add_row("[bold]joint[/]", *[_pct(dc[g].get("joint")) for g in groups])
        t.add_row("picked a held-out cell", *[_pct(dc[g].get("picked_held_out")) for g in groups])
        gen = dc.get("generation") or {}
        if gen:
            t.add_row("generation joint (evaluator)", *[_pct((gen.get(g) or {}).get("joint")) for g in groups])
        tables.append(t)
    return tables
