"""``mosaic splits``: show a spec's combination grid (seen / held-out / counts) without generating."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from mosaic.cli.common import check_out, console, fail, load, set_option, spec_argument
from mosaic.errors import MosaicError

SpecArg = spec_argument("Spec YAML file")
SetOpt = set_option("spec")


def splits(
    spec: SpecArg,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Also draw the grid as a heatmap PNG")] = None,
    set_: SetOpt = None,
) -> None:
    """Print the combination grid (seen / held-out / per-split counts) without generating; --out draws it."""
    try:
        check_out(out, kind="file")
        if out is not None and out.suffix.lower() != ".png":  # matplotlib picks the format from the name: '.yaml' was a traceback
            raise MosaicError([("--out", f"{str(out)!r} does not end in .png: the grid is drawn as a PNG file; give a path such as "
                                         "data/grid.png")])
        import numpy as np

        from mosaic.holdout import EXCLUDED, HELD_OUT, SEEN
        from mosaic.plots import object_type_grid, plot_split_grid
        from mosaic.splits import split_cells

        s = load(spec, set_)
        g = s.grid
        if g is None:
            raise MosaicError(f"{spec} has no holdout section: every combination is seen. Add holdout: {{concepts: [...], rule: ...}}")
        console.print(f"[bold]{s.name}[/]: holdout over {' x '.join(g.concepts)} ({' x '.join(map(str, g.shape))} = {g.status.size} combinations), rule {s.holdout.rule.kind}")
        n_seen, n_held, n_ex = (g.count(k) for k in (SEEN, HELD_OUT, EXCLUDED))
        console.print(f"seen {n_seen}, held out {n_held}" + (f", excluded (mixed) {n_ex}" if n_ex else "")
                      + f"; coverage {g.coverage:.1%}; seen combinations connected: {'yes' if g.connected else 'no'}")
        sizes = s.split_sizes()
        # split_sizes() are totals whichever way the spec counts them (splits.per only says how they were given)
        console.print("splits (samples in all): " + ", ".join(f"{k} {v}" for k, v in sizes.items())
                      + ("  (the spec gives them per combination)" if s.splits.per == "combination" else ""))
        if len(g.shape) == 2:
            cells, quotas = split_cells(s, "train")
            tq = {tuple(c): int(q) for c, q in zip(cells, quotas)}
            ocells, oq = split_cells(s, "test_ood")
            hq = {tuple(c): int(q) for c, q in zip(ocells, oq)}
            t = Table(title="training samples per combination; [red]Hn[/] = held out (n test_ood samples)")
            t.add_column(f"{g.concepts[0]} \\ {g.concepts[1]}")
            for v in g.domains[1]:
                t.add_column(str(v), justify="right")
            for i, v in enumerate(g.domains[0]):
                row = []
                for j in range(g.shape[1]):
                    st = g.status_of((v, g.domains[1][j]))
                    row.append(f"[red]H{hq.get((i, j), 0)}[/]" if st == HELD_OUT else ("x" if st == EXCLUDED else str(tq.get((i, j), 0))))
                t.add_row(str(v), *row)
            console.print(t)
        else:
            ov = object_type_grid(s, g)
            if ov is not None:
                slot, doms, held = ov
                types = [tuple(doms[a][i] for a, i in enumerate(idx)) for idx in np.argwhere(held)]
                console.print(f"held-out object types ({' x '.join(slot)}): " + ", ".join("(" + ", ".join(map(str, t)) + ")" for t in types))
            else:
                console.print("held-out combinations: " + "; ".join(", ".join(map(str, c)) for c in g.cells(HELD_OUT)[:40])
                              + (" ..." if n_held > 40 else ""))
        if out is not None:
            path = plot_split_grid(s, out)
            console.print(f"wrote {path}")
    except MosaicError as e:
        fail(e)
