"""``mosaic validate``, ``mosaic generate`` and ``mosaic preview``: a spec, checked, generated or looked at."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from mosaic.cli.common import SpecArg, console, err_console, fail, load, set_option
from mosaic.errors import MosaicError

SetOpt = set_option("spec", "splits.train=500")


def validate(spec: SpecArg, set_: SetOpt = None) -> None:
    """Check a spec and print a summary (concepts, domains, objects, sizes) without generating."""
    try:
        s = load(spec, set_)
        from mosaic.dataset import sample_record

        # a dry run of the layout search on a few samples of every split
        n_obj = []
        for split, n in s.split_sizes().items():
            for i in range(min(n, 16)):
                rec, _ = sample_record(s, split, i)
                n_obj.append(rec["num_objects"])
    except MosaicError as e:
        fail(e)
    console.print(f"[bold]{s.name}[/]  fingerprint {s.fingerprint()}  seed {s.seed}")
    if s.description:
        console.print(s.description)
    console.print(f"image {s.image.size}x{s.image.size} px, background {s.image.background}, supersample x{s.image.supersample}")
    t = Table(title="concepts")
    for col in ("concept", "role", "values", "distribution"):
        t.add_column(col)
    for name, c in s.concepts.items():
        p = c.probabilities()
        dist = c.distribution.kind + (" (reversed)" if c.distribution.reverse else "")
        if c.distribution.kind != "uniform":
            dist += f"  p = {', '.join(f'{x:.3f}' for x in p)}"
        t.add_row(name, s.roles[name], ", ".join(map(str, c.domain)), dist)
    console.print(t)
    t = Table(title="objects")
    for col in ("object", "kind", "shape", "color", "size", "repeat"):
        t.add_column(col)

    def rule(r):
        d = r.model_dump(mode="json")
        return str(d) if not isinstance(d, dict) else ", ".join(f"{k}: {v}" for k, v in d.items())

    for tmpl in s.templates:
        t.add_row(tmpl.name, "distractor" if s.is_distractor(tmpl.name) else "object", rule(tmpl.shape), rule(tmpl.color), rule(tmpl.size), rule(tmpl.repeat))
    console.print(t)
    for r in s.relations:
        console.print(f"relation: {r.subject} {rule(r.relation)} {r.object} (margin {r.margin})")
    for p in s.positions:
        console.print(f"position: {p.target} around {p.reference} -> concept {p.concept}")
    console.print("splits: " + ", ".join(f"{k} {v}" for k, v in s.split_sizes().items()))
    console.print(f"layout dry run: {len(n_obj)} scenes, {min(n_obj)}-{max(n_obj)} objects each  [green]OK[/]")


def generate(
    spec: SpecArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory")],
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Worker processes (output is identical for any number)")] = 1,
    set_: SetOpt = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing mosaic dataset at --out")] = False,
    masks: Annotated[bool, typer.Option("--masks", help="Also write instance-mask PNGs")] = False,
) -> None:
    """Generate a dataset: images, metadata.jsonl per split and manifest.json. Resumable."""
    try:
        s = load(spec, set_)
        from mosaic.dataset import generate as gen

        t0 = time.perf_counter()
        with Progress(TextColumn("[bold]generate[/] " + s.name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TimeRemainingColumn(), console=console, transient=False) as progress:
            task = progress.add_task("gen", total=None)

            def cb(done, total):
                progress.update(task, completed=done, total=total)

            man = gen(s, out, workers=workers, overwrite=overwrite, masks=masks, on_progress=cb)
        dt = time.perf_counter() - t0
    except MosaicError as e:
        fail(e)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]: rerun the same command to resume")
        raise typer.Exit(130)
    counts = ", ".join(f"{k} {v['count']}" for k, v in man["splits"].items())
    console.print(f"[green]done[/] {out}  ({counts}; {dt:.1f} s; fingerprint {man['fingerprint']})")


def preview(
    spec: SpecArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write")] = Path("preview.png"),
    n: Annotated[int, typer.Option("--n", min=1, max=400, help="Number of samples")] = 16,
    split: Annotated[str, typer.Option("--split", help="Split whose first samples are shown")] = "train",
    set_: SetOpt = None,
) -> None:
    """Render the first samples of a split to a contact sheet with captions (writes nothing else)."""
    try:
        s = load(spec, set_)
        from mosaic.dataset import sample_record
        from mosaic.preview import contact_sheet
        from renderers import get_renderer

        if split not in s.split_sizes():
            raise MosaicError(f"--split {split!r} is not a split of this spec; splits: {', '.join(s.split_sizes())}")
        recs, scenes = zip(*[sample_record(s, split, i) for i in range(n)])
        images, _ = get_renderer("pillow", supersample=s.image.supersample).render(list(scenes))
        path = contact_sheet(images, [r["caption"] for r in recs], out, title=f"{s.name} · {split} · first {n}")
    except MosaicError as e:
        fail(e)
    console.print(f"wrote {path}")
