"""Every matplotlib figure mosaic draws, and the one helper that saves them.

- :func:`plot_split_grid` — a spec's combination grid (``mosaic splits --out``): seen cells
  coloured by their training count, held-out cells marked.
- :func:`plot_cell_heatmap` — joint accuracy per cell of the combination grid (``heatmap.png``
  of every scored run and of ``mosaic evaluate --out``).
- :func:`plot_curves` — metrics against a sweep axis, mean and standard deviation over seeds
  (``mosaic report``).
- :func:`plot_layer_curve`, :func:`plot_rank_scatter`, :func:`plot_probe_vs_task`,
  :func:`plot_generative_vs_discriminative` — the representation diagnostics' figures
  (``RUN/analysis/*.png``, :mod:`mosaic.diagnostics.analyze`).

matplotlib is imported inside the functions (Agg backend), so importing this module is cheap.
Contact sheets of images are PIL, not matplotlib: :mod:`mosaic.preview`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mosaic.errors import MosaicError
from mosaic.holdout import HELD_OUT, SEEN
from mosaic.io import atomic_writer
from mosaic.splits import split_cells


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (no display needed). Every text is drawn
    as written: mathtext is off (``text.parse_math``), so a name holding ``$`` (a label axis value, an
    ``x_label``, a concept value) is never parsed as TeX (``$\\bad{$`` was a ParseFatalException)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Lay out ``fig`` tightly, write it to ``path`` (format from the suffix, parent folders
    created) and close it. Returns the path written."""
    plt = pyplot()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as f:
        fig.savefig(f, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    return path


def object_type_grid(spec, grid):
    """For an object-level holdout rule (``kind: objects``): ``(slot concepts, their domains,
    held-out mask bool [len(domain) for each concept])`` — an object type is held out when a
    held-out cell of the combination grid has it in its first slot. None for other rules."""

    rule = spec.holdout.rule
    if rule.kind != "objects":
        return None
    slot = rule.slots[0]
    doms = [spec.domain(c) for c in slot]
    axes = [grid.concepts.index(c) for c in slot]
    held = np.zeros(tuple(len(d) for d in doms), bool)
    for idx in grid.index_cells(HELD_OUT):
        held[tuple(idx[a] for a in axes)] = True
    return slot, doms, held


def plot_split_grid(spec, out: str | Path) -> Path:
    """Heatmap PNG of the combination grid: seen cells coloured by their training count,
    held-out cells marked (object-level rules: the grid of object types).

    Raises MosaicError when the spec has no holdout.
    """
    from matplotlib.colors import ListedColormap

    plt = pyplot()
    g = spec.grid
    if g is None:
        raise MosaicError("this spec has no holdout section, so there is no combination grid to draw")
    ov = object_type_grid(spec, g)
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
        n_held = g.count(HELD_OUT)
        ax.set_title(f"{spec.name}: {spec.holdout.rule.kind} holdout, {n_held} of {g.status.size} held out (H)\n"
                     f"coverage {g.coverage:.0%}; numbers = training samples", fontsize=9)
    return save_figure(fig, out)


def plot_cell_heatmap(metrics: dict, path: str | Path, spec, title: str | None = None) -> Path:
    """Heatmap PNG of joint accuracy per cell of the combination grid (``metrics`` as returned by
    :func:`mosaic.evaluation.metrics.score`).

    Two grid concepts: rows = the first, columns = the second. More: rows = the product of the
    first half of the grid concepts, columns = the product of the rest (binding: left object type x
    right object type). One concept: a single row. Held-out cells are outlined in black and marked
    with a dot before the number; cells without samples are gray.
    """
    import itertools
    import math

    import matplotlib
    from matplotlib.patches import Rectangle

    plt = pyplot()
    grid = metrics["grid"]
    gc = grid["concepts"]
    doms = [grid["domains"][c] for c in gc]
    half = max(1, math.ceil(len(gc) / 2)) if len(gc) > 1 else 1
    row_c, col_c = gc[:half], gc[half:]
    row_d, col_d = doms[:half], doms[half:]
    rows = list(itertools.product(*row_d)) if row_d else [()]
    cols = list(itertools.product(*col_d)) if col_d else [()]
    ri = {r: k for k, r in enumerate(rows)}
    ci = {c: k for k, c in enumerate(cols)}
    acc = np.full((len(rows), len(cols)), np.nan)
    nn = np.zeros((len(rows), len(cols)), int)
    status = np.full((len(rows), len(cols)), "", dtype=object)
    for combo, st in grid.get("status") or []:
        combo = tuple(combo)
        status[ri[combo[:half]], ci[combo[half:]]] = st
    for cell in grid["cells"]:
        combo = tuple(cell["combination"])
        i, j = ri[combo[:half]], ci[combo[half:]]
        acc[i, j] = np.nan if cell["joint_accuracy"] is None else cell["joint_accuracy"]
        nn[i, j] = cell["n"]
        status[i, j] = cell["status"]

    def lab(t):
        return "/".join(map(str, t)) if t else ""

    nr, ncol = len(rows), len(cols)
    cw = 0.55 if ncol <= 12 else 0.32
    fig, ax = plt.subplots(figsize=(max(5.0, 2.2 + cw * ncol), max(2.6, 1.6 + cw * 0.85 * nr)), dpi=120)
    cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#d0d0d0")
    im = ax.imshow(np.ma.masked_invalid(acc), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    annotate = nr * ncol <= 200
    for i in range(nr):
        for j in range(ncol):
            st = status[i, j]
            if st == "held_out":
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=1.6))
            if annotate and not np.isnan(acc[i, j]):
                txt = f"{100 * acc[i, j]:.0f}"
                ax.text(j, i, txt, ha="center", va="center", fontsize=7 if ncol <= 12 else 5, color="black")
                if st == "held_out":  # the marker in the cell's corner, apart from the number ("•0" read as one token)
                    ax.text(j - 0.44, i - 0.47, "•", ha="left", va="top", fontsize=11 if ncol <= 12 else 7, color="black")
            elif annotate and st == "excluded":
                ax.text(j, i, "x", ha="center", va="center", fontsize=6, color="#707070")
    fs = 8 if max(nr, ncol) <= 12 else 5
    ax.set_yticks(range(nr), [lab(r) for r in rows], fontsize=fs)
    xl = [lab(c) for c in cols]
    tilt = ncol * max(map(len, xl)) > 40  # long labels: tilt them
    ax.set_xticks(range(ncol), xl, rotation=60 if tilt else 0, ha="right" if tilt else "center", fontsize=fs)
    ax.set_ylabel(" / ".join(row_c) if row_c else "")
    ax.set_xlabel(" / ".join(col_c) if col_c else "")
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02, label="joint accuracy")

    def pct(g):
        v = (metrics.get(g) or {}).get("joint_accuracy")
        return "n/a" if v is None else f"{100 * v:.1f}%"

    head = title or f"{spec.name}: joint accuracy per combination"
    ax.set_title(f"{head}\nseen {pct('seen')} (n={metrics['seen']['n']}), held-out {pct('held_out')} "
                 f"(n={metrics['held_out']['n']}); outlined • = held-out, gray = no samples", fontsize=8)
    return save_figure(fig, path)


def _metric_label(col: str) -> str:
    return {"held_out.joint": "held-out joint accuracy", "seen.joint": "seen joint accuracy"}.get(
        col, col.replace("held_out.", "held-out ").replace("seen.", "seen ").replace("_", " "))


def plot_curves(df, x: str, lines: str | None, ys: list[str], out: Path, title: str = "", x_label: str | None = None,
                x_scale: str = "linear") -> Path | None:
    """Line plot of metrics ``ys`` (columns of the results table ``df``, a pandas DataFrame)
    against axis ``x``, one line per value of ``lines``, mean and standard deviation over the
    remaining rows (seeds) as error bars; one panel per metric, y from 0 to 1; ``x_scale`` "log" puts
    a numeric, positive x axis on a log scale (ticks still at the axis values). Returns the path,
    or None if nothing to plot."""
    import pandas as pd

    ys = [y for y in ys if y in df.columns and df[y].notna().any()]
    if not ys or x not in df.columns:
        return None
    plt = pyplot()
    ncols = min(len(ys), 3)  # at most 3 panels a row: 6 panels in one row were a strip too wide to read
    nrows = -(-len(ys) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.6 * nrows), dpi=120, squeeze=False)
    for ax in axes.flat[len(ys):]:
        ax.set_visible(False)
    groups = sorted(df[lines].dropna().unique(), key=lambda v: (str(type(v)), v)) if lines and lines in df.columns else [None]
    for ax, y in zip(axes.flat, ys):
        for g in groups:
            sub = df if g is None else df[df[lines] == g]
            stats = sub.groupby(x)[y].agg(["mean", "std", "count"]).reset_index().sort_values(x)
            if stats.empty:
                continue
            lab = None if g is None else f"{lines.split('.')[-1]} = {g}"
            ax.errorbar(stats[x].astype(float) if pd.api.types.is_numeric_dtype(stats[x]) else stats[x].astype(str),
                        stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3, label=lab)
        xs = sorted(df[x].dropna().unique())
        numeric = all(isinstance(v, (int, float, np.integer, np.floating)) for v in xs)
        if x_scale == "log" and numeric and xs and min(xs) > 0:
            ax.set_xscale("log")
            ax.minorticks_off()
        if len(xs) <= 12 and numeric:
            ax.set_xticks([float(v) for v in xs], [f"{v:g}" for v in xs])
        ax.set_xlabel(x_label or x.split(".")[-1])
        ax.set_ylabel(_metric_label(y))
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if groups != [None]:
            ax.legend(fontsize=8, loc="best", framealpha=0.7)
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, out)


# ----------------------------------------------------------------------------------------------
# representation diagnostics (mosaic.diagnostics; `mosaic analyze`, an `analysis:` config section)
# ----------------------------------------------------------------------------------------------


def plot_layer_curve(curve: dict, path: str | Path, title: str = "linear probes per layer") -> Path:
    """Per-layer generalization (:func:`mosaic.diagnostics.probes.layer_curve`): mean concept-probe
    accuracy on seen (``test_id``) and held-out (``test_ood``) combinations for each layer, the
    last layer and the best layer by validation marked."""
    plt = pyplot()
    names = curve["layers"]
    xs = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 + 0.7 * len(names)), 3.4), dpi=120)
    for key, label, style in (("seen", "seen (test_id)", "o-"), ("held_out", "held-out (test_ood)", "s-")):
        ys = [np.nan if v is None else v for v in curve.get(key, [])]
        if ys and not all(np.isnan(ys)):
            ax.plot(xs, ys, style, label=label)
    best = curve.get("best_by_val")
    if best in names:
        ax.axvline(names.index(best), color="gray", ls=":", lw=1, label=f"best by validation: {best}")
    ax.set_xticks(xs, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("probe accuracy (mean over concepts)")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.7)
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def plot_rank_scatter(rank: dict, path: str | Path) -> Path:
    """Rank axes of one ordinal concept (:func:`mosaic.diagnostics.rank.rank_axes`): the projection
    of each test sample on the two-extremes and the fitted axis against its value, seen and
    held-out, with Spearman ρ in the titles."""
    plt = pyplot()
    axes_ = [a for a in ("extremes", "fitted") if a in rank]
    fig, axs = plt.subplots(1, len(axes_), figsize=(4.4 * len(axes_), 3.4), dpi=120, squeeze=False)
    for ax, name in zip(axs[0], axes_):
        r = rank[name]
        parts = []
        for split, marker in (("test_id", "o"), ("test_ood", "x"), ("test", "o")):
            pts = np.asarray(r.get("points", {}).get(split) or [], dtype=float).reshape(-1, 2)
            if len(pts):
                rho = (r.get(split) or {}).get("spearman")
                ax.scatter(pts[:, 0], pts[:, 1], s=10, marker=marker, alpha=0.6,
                           label=f"{split} (ρ = {rho:.2f})" if isinstance(rho, (int, float)) else split)
                parts.append(split)
        ax.set_xlabel(f"{rank.get('concept', 'value')} (rank)")
        ax.set_ylabel("projection on the axis")
        ax.set_title(f"{name} axis", fontsize=10)
        ax.grid(alpha=0.3)
        if parts:
            ax.legend(fontsize=8, framealpha=0.7)
    return save_figure(fig, path)


def plot_probe_vs_task(probes: dict, table: dict, path: str | Path) -> Path | None:
    """Linear-probe accuracy next to the model's own task accuracy, seen vs held-out, per concept
    (classifier: its heads; binding: its object accuracy next to the binding probe). None when
    the run's table has no comparable row."""
    plt = pyplot()
    concept = probes.get("concept") or {}
    rows = []  # (label, task seen, task held-out, probe seen, probe held-out)
    for c in [k for k in (table.get("seen") or {}) if k not in ("n", "joint")]:
        ps, ph = (concept.get("test_id") or {}).get(c), (concept.get("test_ood") or {}).get(c)
        if ps is not None or ph is not None:
            rows.append((c, table.get("seen", {}).get(c), table.get("held_out", {}).get(c), ps, ph))
    b = probes.get("binding") or {}
    if "object_accuracy" in (table.get("seen") or {}) and b:
        rows.append((f"binding ({b.get('target')} | {b.get('key')})", table["seen"].get("object_accuracy"),
                     (table.get("held_out") or {}).get("object_accuracy"), (b.get("test_id") or {}).get("accuracy"),
                     (b.get("test_ood") or {}).get("accuracy")))
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(5.0, 1.5 + 1.3 * len(rows)), 3.6), dpi=120)
    xs = np.arange(len(rows))
    wd = 0.2
    labels = ("task, seen", "task, held-out", "probe, seen", "probe, held-out")
    for j, lab in enumerate(labels):
        vals = [np.nan if r[j + 1] is None else r[j + 1] for r in rows]
        ax.bar(xs + (j - 1.5) * wd, vals, wd, label=lab, hatch="//" if "probe" in lab else None, alpha=0.85)
    ax.set_xticks(xs, [r[0] for r in rows], fontsize=8)
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, ncol=2, framealpha=0.7)
    ax.set_title("linear probe vs the model's task accuracy", fontsize=10)
    return save_figure(fig, path)


def plot_generative_vs_discriminative(dc: dict, path: str | Path) -> Path:
    """Joint accuracy of the model's generated images (evaluator) next to the same model used as
    a diffusion classifier on real test images, seen vs held-out combinations."""
    plt = pyplot()
    groups = [g for g in ("seen", "held_out") if g in dc or g in (dc.get("generation") or {})]
    gen = [((dc.get("generation") or {}).get(g) or {}).get("joint") for g in groups]
    dis = [(dc.get(g) or {}).get("joint") for g in groups]
    fig, ax = plt.subplots(figsize=(4.6, 3.4), dpi=120)
    xs = np.arange(len(groups))
    ax.bar(xs - 0.18, [np.nan if v is None else v for v in gen], 0.36, label="generation (evaluator)")
    ax.bar(xs + 0.18, [np.nan if v is None else v for v in dis], 0.36, label="diffusion classifier", hatch="//")
    ax.set_xticks(xs, [g.replace("_", "-") for g in groups])
    ax.set_ylabel("joint accuracy")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, framealpha=0.7)
    ax.set_title("generative vs discriminative accuracy", fontsize=10)
    return save_figure(fig, path)


def plot_binding_complexity(bc: dict, path: str | Path) -> Path:
    """Binding-function complexity (:func:`mosaic.diagnostics.binding_complexity.binding_complexity`):
    R² of each approximator family's predicted scene embeddings on seen (``test_id``) and
    held-out (``test_ood``) object types, at the final epoch (bars below 0 clipped at -0.5)."""
    plt = pyplot()
    fams = list((bc.get("families") or {}))
    splits = [s for s in ("train", "test_id", "test_ood", "test") if any(s in bc["families"][f] for f in fams)]
    fig, ax = plt.subplots(figsize=(max(4.6, 1.6 * len(fams) + 1.5), 3.4), dpi=120)
    xs = np.arange(len(fams))
    w = 0.8 / max(1, len(splits))
    label = {"train": "train (fitted)", "test_id": "seen types (test_id)", "test_ood": "held-out types (test_ood)", "test": "test"}
    for i, s in enumerate(splits):
        raw = [((bc["families"][f].get(s) or {}).get("r2")) for f in fams]
        ys = [np.nan if v is None else max(v, -0.5) for v in raw]
        x = xs + (i - (len(splits) - 1) / 2) * w
        ax.bar(x, ys, w, label=label[s], hatch="//" if s == "test_ood" else None)
        for xi, v in zip(x, raw):                       # the value on each bar (the true one where clipped)
            if v is not None:
                ax.text(xi, max(v, -0.5) + (0.02 if v >= 0 else -0.02), f"{v:.2f}" if v > -10 else f"{v:.0f}", ha="center",
                        va="bottom" if v >= 0 else "top", fontsize=6.5)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(xs, fams)
    ax.set_ylabel("R² of the predicted scene embedding")
    ax.set_ylim(-0.62, 1.1)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, framealpha=0.7, ncol=len(splits), loc="upper center", bbox_to_anchor=(0.5, -0.1))
    ep = next((bc["families"][f].get("epochs") for f in fams), None)
    ax.set_title(f"binding-function complexity ({ep} epochs, final)", fontsize=10)
    return save_figure(fig, path)


#: verdict -> colour of the claims figure
CLAIM_COLORS = {"holds": "#2a8a2a", "does not hold": "#c02020", "inconclusive": "#c08000"}


def plot_claims(results: list[dict], path: str | Path, title: str = "claims: effect and 95 % interval over seeds") -> Path | None:
    """Forest plot of checked claims (:func:`mosaic.verdicts.evaluate_claim` results): one row per
    claim, its mean effect (dot) and interval (bar), the ``min_effect`` line, coloured by verdict.
    Effects are in each claim's own units (positive = the claimed direction). Returns the path, or
    None when no claim has an effect."""
    rows = [r for r in results if r.get("effect") is not None]
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * len(rows) + 1.2), dpi=120)
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        c = CLAIM_COLORS.get(r["verdict"], "#555555")
        if r.get("interval"):
            ax.plot(r["interval"], [y, y], color=c, lw=2.5)
        ax.plot([r["effect"]], [y], "o", color=c, ms=7)
        ax.axvline(r.get("min_effect", 0.0), color="#888888", lw=0.8, ls="--")
    labels = [(r["name"] if len(r["name"]) <= 60 else r["name"][:57] + "...") + f"\n[{r['verdict']}, {r['seeds']} seeds]" for r in rows]
    ax.set_yticks(range(len(rows)), labels[::-1], fontsize=7)
    ax.set_xlabel("effect (claimed direction > 0)")
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)
