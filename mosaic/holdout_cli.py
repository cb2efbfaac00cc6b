"""``mosaic splits``: show a spec's combination grid (seen / held-out / counts) without generating."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from mosaic.errors import MosaicError

console = Console()


def _object_view(spec, grid):
    """For an object-level rule: (attribute concepts, object domains, held-out type mask) or None."""
    rule = spec.holdout.rule
    if rule.kind != "objects":
        return None
    slot = rule.slots[0]
    doms = [spec.domain(c) for c in slot]
    axes = [grid.concepts.index(c) for c in slot]
    # an object type is held out when the all-held-out cell of that type in every slot exists
    held = np.zeros(tuple(len(d) for d in doms), bool)
    for idx in np.argwhere(grid.status == 1):
        held[tuple(idx[a] for a in axes)] = True
    return slot, doms, held


def plot_split_grid(spec, out: str | Path) -> Path:
    """Heatmap PNG of the combination grid: seen cells coloured by their training count,
    held-out cells marked (object-level rules: the grid of object types).

    Raises MosaicError when the spec has no holdout.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    from mosaic.holdout import HELD_OUT, SEEN, split_cells

    g = spec.grid
    if g is None:
        raise MosaicError("this spec has no holdout section, so there is no combination grid to draw")
    ov = _object_view(spec, g)
    if ov is not None:
        slot, doms, held = ov
        if held.ndim == 1:
            held, doms, slot = held[:, None], [doms[0], ["-"]], [slot[0], ""]
        fig, ax = plt.subplots(figsize=(max(4.5, 1.5 + 0.7 * len(doms[1])), 1.4 + 0.45 * len(doms[0])), dpi=120)
        ax.imshow(held.astype(float), cmap=ListedColormap(["#4c9be8", "#e8604c"]), vmin=0, vmax=1, aspect="auto")
        for (i, j), h in np.ndenumerate(held):
            ax.text(j, i, "H" if h else "seen", ha="center", va="center", fontsize=8, color="white")
        ax.set_yticks(range(len(doms[0])), [str(v) for v in doms[0]])
        ax.set_xticks(range(len(doms[1])), [str(v) for v in doms[1]], rotation=45, ha="right")
        ax.set_ylabel(slot[0])
        ax.set_xlabel(slot[1])
        ax.set_title(f"{spec.name}: object types, {int(held.sum())} of {held.size} held out (H)\n"
                     f"test_ood scenes hold only H types; coverage {g.coverage:.0%}", fontsize=9)
    else:
        if len(g.shape) != 2:
            # project a k-D grid onto its first two concepts: fraction of held-out cells
            frac = (g.status == HELD_OUT).mean(axis=tuple(range(2, len(g.shape))))
            counts, labels = frac, "fraction held out"
        else:
            counts = np.zeros(g.shape)
            cells, quotas = split_cells(spec, "train")
            for c, q in zip(cells, quotas):
                counts[tuple(c)] = q
            labels = "training samples per combination"
        fig, ax = plt.subplots(figsize=(1.6 + 0.5 * g.shape[1], 1.2 + 0.45 * g.shape[0]), dpi=120)
        shown = np.ma.masked_where(g.status != SEEN, counts) if len(g.shape) == 2 else counts
        im = ax.imshow(shown, cmap="Blues", vmin=0)
        if len(g.shape) == 2:
            held = g.status == HELD_OUT
            ax.imshow(np.ma.masked_where(~held, np.ones(g.shape)), cmap=ListedColormap(["#e8604c"]), vmin=0, vmax=1)
            vmax = counts.max() or 1
            for (i, j), st in np.ndenumerate(g.status):
                txt = "H" if st == HELD_OUT else ("x" if st != SEEN else f"{int(counts[i, j])}")
                color = "white" if st == HELD_OUT or counts[i, j] > 0.6 * vmax else "black"
                ax.text(j, i, txt, ha="center", va="center", fontsize=7, color=color)
        fig.colorbar(im, ax=ax, fraction=0.04, label=labels)
        ax.set_yticks(range(g.shape[0]), [str(v) for v in g.domains[0]])
        ax.set_xticks(range(g.shape[1]), [str(v) for v in g.domains[1]], rotation=45, ha="right")
        ax.set_ylabel(g.concepts[0])
        ax.set_xlabel(g.concepts[1])
        n_held = int((g.status == HELD_OUT).sum())
        ax.set_title(f"{spec.name}: {spec.holdout.rule.kind} holdout, {n_held} of {g.status.size} held out (H)\n"
                     f"coverage {g.coverage:.0%}; numbers = training samples", fontsize=9)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def splits_command(
    spec: Annotated[Path, typer.Argument(help="Spec YAML file")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Also draw the grid as a heatmap PNG")] = None,
    set_: Annotated[Optional[list[str]], typer.Option("--set", help="Override a spec field: key.path=value (repeatable)")] = None,
) -> None:
    """Print the combination grid (seen / held-out / per-split counts) without generating; --out draws it."""
    from mosaic.cli import _fail, _load
    from mosaic.holdout import EXCLUDED, HELD_OUT, SEEN, _connected, split_cells

    try:
        s = _load(spec, set_)
        g = s.grid
        if g is None:
            raise MosaicError(f"{spec} has no holdout section: every combination is seen. Add holdout: {{concepts: [...], rule: ...}}")
        console.print(f"[bold]{s.name}[/]: holdout over {' x '.join(g.concepts)} ({' x '.join(map(str, g.shape))} = {g.status.size} combinations), rule {s.holdout.rule.kind}")
        n_seen, n_held, n_ex = (int((g.status == k).sum()) for k in (SEEN, HELD_OUT, EXCLUDED))
        console.print(f"seen {n_seen}, held out {n_held}" + (f", excluded (mixed) {n_ex}" if n_ex else "")
                      + f"; coverage {g.coverage:.1%}; seen combinations connected: {'yes' if _connected(g.index_cells(SEEN), g.shape) else 'no'}")
        sizes = s.split_sizes()
        console.print("splits: " + ", ".join(f"{k} {v}" for k, v in sizes.items()) + f"  (per {s.splits.per})")
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
                    st = g.status[i, j]
                    row.append(f"[red]H{hq.get((i, j), 0)}[/]" if st == HELD_OUT else ("x" if st == EXCLUDED else str(tq.get((i, j), 0))))
                t.add_row(str(v), *row)
            console.print(t)
        else:
            ov = _object_view(s, g)
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
        _fail(e)


def register(app: typer.Typer) -> None:
    app.command("splits")(splits_command)
