"""``mosaic report SWEEP_DIR``: curves, per-cell heatmaps and sample grids of a sweep, on one HTML page."""

from __future__ import annotations

import html
import io
import os
from pathlib import Path
from typing import Callable

from mosaic.errors import MosaicError
from mosaic.folder_kinds import kind_hint
from mosaic.plots import plot_cell_heatmap, plot_curves
from mosaic.records import spec_from_data
from mosaic.audit import audit_summary, find_audit_files, linked_part
from mosaic.verdicts import check_sweep_claims, write_claims
from mosaic.evaluation.agreement import wilson_interval
from mosaic.evaluation.trial_scores import scored_samples
from mosaic.io import atomic_write, discard, own_folders, read_bounded, read_json, read_own_file
from mosaic.png import png_size
from pydantic import ValidationError

from mosaic.overrides import read_yaml_file, validation_problems
from mosaic.sweep import ReportSection
from mosaic.locks import FolderLock
from mosaic.preview import sample_sheet
from mosaic.vocab import closest


#: the most pixels a figure copied onto the page may have (mosaic's own figures are at most a few megapixels)
FIGURE_PIXELS = 4096 * 4096


#: ``held_out.<name>`` results columns that are no concept's accuracy
NOT_CONCEPTS = ("joint", "quality", "n", "unreadable")


def concept_columns(columns) -> list[str]:
    """The results columns of each concept's held-out accuracy (``held_out.<concept>``), sorted: one panel each in
    ``concepts_held_out.png``; not the joint, the match quality or the reads before abstention (``held_out.raw.*``),
    which made a strip of 6 panels titled "accuracy per concept" (a new user's trial, 2026-12-06)."""
    return sorted(c for c in columns if c.startswith("held_out.") and c.count(".") == 1 and c.split(".", 1)[1] not in NOT_CONCEPTS)


def _refuse(reason: str) -> MosaicError:
    return MosaicError(f"{reason}: `mosaic report` copies only the sweep's own figures and samples onto its page; remove it (or "
                       "put back what mosaic wrote there), then rerun")


def _refuse_link(root: Path, path: Path) -> None:
    """Refuse ``path`` (below ``root``) when it, or a folder between them, is a symbolic link: someone else's files."""
    if (link := linked_part(root, path)) is not None:
        raise _refuse(f"{link} is a symbolic link (to {os.readlink(link)!r})")


def _redraw_heatmap(run: Path, scored: Path, path: Path) -> None:
    """A trial's per-cell heatmap drawn again from its scored samples' ``metrics.json`` (checked against its
    predictions and images by the results pass, :func:`mosaic.evaluation.trial_scores.check_run_scores`) and the
    run's spec: the folder's ``heatmap.png`` replaced by another picture was shown as the trial's (attack round 27)."""
    try:
        metrics, spec = read_json(scored / "metrics.json"), spec_from_data(read_json(run / "dataset_manifest.json")["spec"])
    except (OSError, ValueError, KeyError, TypeError, MosaicError) as e:
        raise MosaicError([(str(scored / "metrics.json"), f"its heatmap cannot be drawn ({str(e)[:120]}): restore the run's files, or "
                                                          "delete the trial folder and rerun `mosaic sweep`")]) from None
    plot_cell_heatmap(metrics, path, spec)


def _own_figure(path: Path, root: Path) -> bytes:
    """The bytes of the sweep's own PNG figure ``path`` (below ``root``).

    Raises:
        MosaicError: a symbolic link on its path, not a regular file with one name (:func:`read_own_file`:
            a hard link, a FIFO), not a PNG (an SVG with a script renamed .png), or more than
            :data:`FIGURE_PIXELS` pixels by its header (a decompression bomb is never copied for a
            browser to decode)."""
    _refuse_link(root, path)
    try:
        data = read_own_file(path)
    except OSError as e:
        raise _refuse(f"{path} cannot be read as a file of the sweep's own ({e.strerror or e})") from None
    size = png_size(data[:24])
    if size is None:
        raise _refuse(f"{path} is not a PNG file")
    if size[0] * size[1] > FIGURE_PIXELS:
        raise _refuse(f"{path} claims {size[0]} x {size[1]} pixels, more than a figure of mosaic's ({FIGURE_PIXELS:,})")
    return data


def _scored_folder(run: Path) -> Path | None:
    """The samples folder the run's figures were scored on (:func:`mosaic.evaluation.trial_scores.scored_samples`),
    else its first samples folder (a run of an older mosaic), else None."""
    try:
        m = read_json(run / "metrics.json")
    except (OSError, ValueError):
        m = None
    folder = scored_samples(run, m) if isinstance(m, dict) else None
    if folder is not None and (folder / "metadata.jsonl").is_file():
        return folder
    return next((meta.parent for meta in sorted(run.glob("samples/*/metadata.jsonl"))), None)


def _sample_sheet(run: Path, out: Path, root: Path, n: int = 16) -> Path | None:
    """A contact sheet of the samples the run's figures were scored on (held-out combinations first;
    another samples folder, made later with other settings, is never shown beside those figures).
    Raises MosaicError: the samples folder is reached through a symbolic link."""
    folder = _scored_folder(run)
    if folder is None:
        return None
    _refuse_link(root, folder / "metadata.jsonl")
    return sample_sheet(folder, out, n=n)


def missing_columns(ys: list[str], columns) -> list[str]:
    """One warning per ``report.y`` name that is not a results column, with the closest column."""

    cols = [str(c) for c in columns]
    out = []
    for y in ys:
        if y not in cols:
            close = closest(y, cols, cutoff=0.6)
            out.append(f"report.y {y!r} is not a results column" + (f": did you mean {close!r}?" if close else
                       f"; columns: {', '.join(c for c in cols if c.startswith(('seen.', 'held_out.', 'test.')))}"))
    return out


def _audit_section(root: Path) -> str:
    """The human audits saved under ``root`` (``mosaic audit``): agreement rate and 95 % Wilson
    interval per audit and pooled; empty when there is none."""

    rows, k, n = [], 0, 0
    for p in find_audit_files(root):
        try:
            s = audit_summary(p)
        except (MosaicError, ValueError, KeyError):
            continue
        k, n = k + s["agree"], n + s["marked"]
        iv = s["interval"]
        rows.append(f"<tr><td>{html.escape(str(p.relative_to(root)))}</td><td>{s['marked']} of {s['n']}</td><td>{s['agree']}</td>"
                    + (f"<td>{100 * s['rate']:.1f}%</td><td>{100 * iv[0]:.1f}-{100 * iv[1]:.1f}%</td>" if iv else "<td>-</td><td>-</td>") + "</tr>")
    if not rows:
        return ""
    iv = wilson_interval(k, n)
    pooled = f"{k} of {n} verdicts correct, {100 * k / n:.1f}% (95% Wilson interval {100 * iv[0]:.1f}-{100 * iv[1]:.1f}%)" if n else "nothing marked"
    return ("<h2>Human audit of the evaluator</h2><p>Verdicts a person marked correct on <code>mosaic audit</code> pages: "
            f"{pooled}.</p><table class='results'><tr><th>audit</th><th>marked</th><th>correct</th><th>agreement</th>"
            "<th>95% Wilson interval</th></tr>" + "".join(rows) + "</table>")


#: the most bytes of a sweep's results.csv mosaic reads (a row a trial: a few KB, so 100,000 trials fit)
MAX_RESULTS_BYTES = 1 << 30


def _has_files(folder: Path) -> bool:
    try:
        return folder.is_dir() and any(True for _ in os.scandir(folder))
    except OSError:
        return False


def read_sweep_yaml(sweep_dir: str | Path) -> dict:
    """A sweep folder's ``sweep.yaml`` as a mapping, read as every user YAML file is
    (:func:`mosaic.overrides.read_yaml_file`: a regular file, bounded, UTF-8, aliases bounded, no key twice).

    Raises:
        MosaicError: damaged (each of those), naming the file, with "restore it, or rerun the sweep into a new folder".
    """
    p = Path(sweep_dir) / "sweep.yaml"
    fix = "restore it, or rerun the sweep into a new folder"

    def damaged(where, msg):
        return MosaicError(f"{where} is damaged ({msg}): {fix}")

    sweep = read_yaml_file(p, damaged, kind="sweep file")
    if not isinstance(sweep, dict):
        raise MosaicError(f"{p} is damaged (not a mapping): {fix}")
    for key in ("grid", "zip"):  # what the report reads, of the types `mosaic sweep` writes (`report: [1]` was a traceback)
        if sweep.get(key) is not None and not isinstance(sweep[key], dict):
            raise MosaicError(f"{p} is damaged ({key}: a {type(sweep[key]).__name__}, not a mapping of axes to values): {fix}")
    try:
        ReportSection.model_validate(sweep.get("report") or {})
    except ValidationError as e:
        what = "; ".join(f"report.{loc}: {msg}" if loc else f"report: {msg}" for loc, msg in validation_problems(e, model=ReportSection)[:3])
        raise MosaicError(f"{p} is damaged ({what[:400]}): {fix}") from None
    return sweep


def make_report(sweep_dir: str | Path, warn: Callable[[str], None] | None = None) -> Path:
    """:func:`write_report`, holding the report folder's lock (``mosaic.locks.FolderLock``: one
    writer at a time). ``SWEEP_DIR/report`` is made a real folder of the sweep first: a symbolic
    link standing there is removed, never written through (``mosaic.io.own_folders``).

    Raises:
        MosaicError: as :func:`write_report`; another process writes the report.
    """
    out = Path(sweep_dir) / "report"
    if not (Path(sweep_dir) / "results.csv").is_file():
        return write_report(sweep_dir, warn)  # not a sweep folder (yet): named there, before any lock file is made
    with FolderLock(out, MosaicError, "report folder", wait=False):
        return write_report(sweep_dir, warn)


def write_report(sweep_dir: str | Path, warn: Callable[[str], None] | None = None) -> Path:
    """Write ``SWEEP_DIR/report/``: curve PNGs, per-trial heatmaps and sample grids, ``index.html``,
    and, when the sweep states claims (``report.claims``), ``claims.json`` and ``claims.png`` with a
    claims table on the page (:mod:`mosaic.claims`); saved human audits (``mosaic audit``) show their
    agreement rate.

    ``warn(message)`` receives one line per ``report.y`` name that is not a results column (it is
    left out of the curves, and listed on the page).
    Raises MosaicError when the folder holds no sweep results (run ``mosaic sweep`` first).
    """
    import pandas as pd

    sweep_dir = Path(sweep_dir)
    res = sweep_dir / "results.csv"
    if not res.is_file():
        if Path(sweep_dir).exists() and not Path(sweep_dir).is_dir():
            raise MosaicError(f"{sweep_dir} is a file, not a sweep folder: give the folder `mosaic sweep SWEEP.yaml --out DIR` wrote")
        if os.path.lexists(res):  # a folder (or a dangling link, a FIFO) where the results belong: not "no results"
            raise MosaicError(f"{res} is damaged (not a regular file: a folder or something else stands there): move it away, then "
                              f"rebuild it with `mosaic report {sweep_dir}` (it collects the trials again)")
        if (hint := kind_hint(sweep_dir, "sweep")) is None and not os.path.lexists(sweep_dir / "sweep.yaml") and _has_files(sweep_dir):
            # a folder of other files (/, a home folder): never told to run a sweep into it
            hint = (f"{sweep_dir} is not a sweep folder (no sweep.yaml or results.csv; it holds other files): give the folder "
                    "`mosaic sweep SWEEP.yaml --out DIR` wrote")
        raise MosaicError(hint or f"{sweep_dir} has no results.csv: run `mosaic sweep SWEEP.yaml --out {sweep_dir}` first")
    sweep = read_sweep_yaml(sweep_dir) if os.path.lexists(sweep_dir / "sweep.yaml") else {}
    try:
        df = pd.read_csv(io.BytesIO(read_bounded(res, MAX_RESULTS_BYTES)))  # a regular file, never more than the bound
    except (ValueError, UnicodeDecodeError, OSError) as e:
        raise MosaicError(f"{res} is damaged ({type(e).__name__}: {str(e)[:100]}): rebuild it with `mosaic report {sweep_dir}` "
                          "(it collects the trials again)") from None
    rep = sweep.get("report") or {}
    axes = list((sweep.get("grid") or {})) + list((sweep.get("zip") or {}))
    order = [c for c in axes + ["seed"] if c in df.columns]
    if order:
        df = df.sort_values(order, kind="stable").reset_index(drop=True)
    x = rep.get("x") or (axes[0] if axes else "seed")
    zipped = list((sweep.get("zip") or {}))
    tied = zipped if x in zipped else [x]  # axes zipped with x vary with it: never one line per value
    lines = rep.get("lines") or (next((a for a in axes if a not in tied), None))
    ys = rep.get("y") or ["held_out.joint", "seen.joint"]
    problems = missing_columns(ys, df.columns)
    for msg in problems:
        (warn or print)(msg)
    ys = [y for y in ys if y in df.columns]
    out = sweep_dir / "report"
    own_folders(sweep_dir, ["report"])  # a link at report/ is removed: the report never writes into another folder
    done = df[df["status"] == "done"] if "status" in df.columns else df
    figures = []
    p = plot_curves(done, x, lines, ys, out / "curves.png", title=f"{sweep.get('name', sweep_dir.name)}: accuracy vs {rep.get('x_label') or x.split('.')[-1]}", x_label=rep.get("x_label"),
                    x_scale=rep.get("x_scale") or "linear")
    if p:
        figures.append(("Seen vs held-out accuracy", p.name))
    concept_cols = concept_columns(done.columns)
    if concept_cols:
        p = plot_curves(done, x, lines, concept_cols, out / "concepts_held_out.png", title="held-out accuracy per concept", x_label=rep.get("x_label"),
                        x_scale=rep.get("x_scale") or "linear")
        if p:
            figures.append(("Held-out accuracy per concept", p.name))

    claims = check_sweep_claims(sweep, df)
    claims_fig, claims_section = write_claims(claims, out, title=str(sweep.get("name", sweep_dir.name))) if claims else (None, "")
    if not claims:  # an earlier report's claims are not this one's (`mosaic report` prints claims.json)
        discard(out / "claims.json")
        discard(out / "claims.png")
    for c in claims:
        if c.get("error"):
            (warn or print)(f"claim {c['name']!r}: {c['error']}")
    audit_section = _audit_section(sweep_dir)
    trials = []
    for tdir in sorted((sweep_dir / "trials").iterdir()) if (sweep_dir / "trials").is_dir() else []:
        run = tdir / "run"
        item = {"id": tdir.name, "heatmaps": [], "samples": None}
        _refuse_link(sweep_dir, run)  # a linked trial or run folder
        scored = _scored_folder(run)  # heatmaps of other samples folders are not these figures'
        maps = [hm for hm in sorted(run.glob("**/*heatmap*.png"))
                if "samples" not in hm.relative_to(run).parts[:1] or (scored is not None and hm.parent == scored)]
        own = [(f"{tdir.name}-heatmap{k}.png", hm) for k, hm in enumerate(maps[:2])]
        own += [(f"{tdir.name}-analysis-{fig.stem}.png", fig) for fig in sorted((run / "analysis").glob("*.png"))[:4]]  # mosaic analyze's
        for name, src in own:
            if scored is not None and src == scored / "heatmap.png":  # drawn again from its checked scores (attack round 27)
                _redraw_heatmap(run, scored, out / name)
            else:
                atomic_write(out / name, _own_figure(src, sweep_dir))
            item["heatmaps"].append(name)
        sheet = _sample_sheet(run, out / f"{tdir.name}-samples.png", sweep_dir)
        if sheet:
            item["samples"] = sheet.name
        if item["heatmaps"] or item["samples"]:
            trials.append(item)
    axes_cols = [c for c in axes + ["seed"] if c in df.columns]
    show = ["trial", "status"] + axes_cols + sorted(c for c in df.columns if c.startswith(("seen.", "held_out."))) + [
        c for c in ("evaluator.joint", "time_s") if c in df.columns]
    table_html = df[[c for c in show if c in df.columns]].to_html(index=False, float_format=lambda v: f"{v:.3f}", na_rep="-", border=0, classes="results")
    failed = df[df["status"] == "failed"] if "status" in df.columns else df.iloc[0:0]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(str(sweep.get('name', 'sweep')))} - mosaic report</title>",
        "<style>body{font-family:sans-serif;margin:24px;max-width:1400px}table.results{border-collapse:collapse;font-size:12px}"
        "table.results td,table.results th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "img{max-width:100%;border:1px solid #ddd;margin:4px}.trial{display:inline-block;vertical-align:top;margin:8px;max-width:460px}"
        ".fail{color:#b00}</style></head><body>",
        f"<h1>{html.escape(str(sweep.get('name', sweep_dir.name)))}</h1>",
        f"<p>{html.escape(str(sweep.get('description', '')))}</p>",
        f"<p>{len(df)} trials: {int((df['status'] == 'done').sum()) if 'status' in df else len(df)} done, {len(failed)} failed. "
        f"Trainer: {html.escape(str(sweep.get('kind', '')))}, config {html.escape(str(sweep.get('config', '')))}.</p>",
    ]
    for msg in problems:
        parts.append(f"<p class='fail'>{html.escape(msg)}</p>")
    if "evaluator.joint" in df.columns and df["evaluator.joint"].notna().any():
        parts.append(f"<p>Evaluator accuracy on fresh ground-truth renders (joint): min {df['evaluator.joint'].min():.3f}.</p>")
    parts.append(claims_section)
    for title, name in figures:
        parts.append(f"<h2>{html.escape(title)}</h2><img src='{html.escape(name)}' alt='{html.escape(title)}'>")
    parts.append(audit_section)
    parts.append("<h2>Results</h2><p>Every column, including all run metrics: <a href='../results.csv'>results.csv</a>, "
                 "<a href='../results.parquet'>results.parquet</a>.</p>" + table_html)
    if len(failed):
        parts.append("<h2 class='fail'>Failed trials</h2><ul>" + "".join(
            f"<li class='fail'><b>{html.escape(str(r['trial']))}</b>: <pre>{html.escape(str(r.get('error', '')))}</pre></li>" for _, r in failed.iterrows()) + "</ul>")
    if trials:
        parts.append("<h2>Per-trial heatmaps and samples</h2>")
        for t in trials:
            parts.append(f"<div class='trial'><h3>{html.escape(t['id'])}</h3>" + "".join(
                f"<img src='{html.escape(h)}' alt='per-cell accuracy'>" for h in t["heatmaps"]) + (
                f"<img src='{html.escape(t['samples'])}' alt='samples'>" if t["samples"] else "") + "</div>")
    parts.append("</body></html>")
    page = out / "index.html"

    atomic_write(page, "\n".join(parts))
    return page
