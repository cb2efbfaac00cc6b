"""``mosaic reproduce {mosaic,binding,coverage}``: run a paper's sweeps at a scale and write one
report of its claims next to the paper's statements.

The registry (:data:`REGISTRY_FILE`, ``experiments/reproduce.yaml``) names, per paper, its title,
the statements it makes (quoted; keys that claims refer to with ``paper: <key>``) and, per scale
(``cpu``, ``gpu``), the sweep files (``experiments/sweeps/<name>.yaml``) that test them. Each sweep
runs into ``OUT/<sweep name>/`` as :func:`mosaic.trials.run_sweep` would (resumable: finished trials
are skipped), the trials of all the sweeps through one pool of workers, in the sweeps' order; each
sweep gets its own report as soon as its last trial has run (:func:`mosaic.report.make_report`), and its claims
(:mod:`mosaic.claims`) are gathered into ``OUT/index.html``, ``OUT/claims.json`` and
``OUT/claims.png``. ``dry_run`` plans every trial (configs and specs validated, nothing written)
and estimates the time with :func:`mosaic.lab.cost.estimate_run` (once per distinct config; seeds
cost the same).
"""

from __future__ import annotations

import contextlib
import html
import json
import time
from pathlib import Path
from urllib.parse import quote
from typing import Callable

from mosaic.errors import MosaicError, SweepError
from mosaic.verdicts import check_sweep_claims, claims_html, fmt_effect, write_claims
from mosaic.overrides import read_yaml_file
from mosaic.report import make_report, read_sweep_yaml
from mosaic.sweep import load_sweep
from mosaic.locks import FolderLock
from mosaic.trials import (check_sweep_options, collect, cpu_slots, plan, pool_wall_seconds, prepare_todo, read_status,
                            run_pool)
from mosaic.io import atomic_write, make_output_dir, own_folders

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_FILE = ROOT / "experiments" / "reproduce.yaml"
SWEEPS_DIR = ROOT / "experiments" / "sweeps"
SCALES = ("cpu", "gpu")


def load_registry(path: str | Path | None = None) -> dict:
    """The reproduce registry (``{paper: {"title", "source", "statements", "scales": {scale: [sweep names]}}}``).

    Raises:
        MosaicError: the file is missing or malformed (names the paper and field).
    """
    p = Path(path) if path is not None else REGISTRY_FILE
    if not p.exists():
        raise MosaicError(f"the reproduce registry {p} is missing")

    data = read_yaml_file(p, lambda where, msg: MosaicError(f"the reproduce registry {msg}"), kind="registry") or {}
    if not isinstance(data, dict):
        raise MosaicError(f"{p}: the reproduce registry must map a paper to its entry")
    for paper, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("scales"), dict):
            raise MosaicError(f"{p}: {paper}.scales must map a scale (cpu, gpu) to a list of sweep names")
        for scale, names in entry["scales"].items():
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise MosaicError(f"{p}: {paper}.scales.{scale} must be a list of sweep names, got {names!r}")
    return data


def sweeps_of(paper: str, scale: str, registry: dict | None = None, sweeps_dir: str | Path | None = None) -> tuple[list[Path], list[str]]:
    """The sweep files of a paper at a scale, and the registered names that have no file.

    Raises:
        MosaicError: an unknown paper or scale (lists the known ones).
    """
    reg = registry if registry is not None else load_registry()
    if paper not in reg:
        raise MosaicError(f"unknown paper {paper!r}: use one of {', '.join(reg)}")
    scales = reg[paper]["scales"]
    if scale not in scales:
        raise MosaicError(f"paper {paper!r} has no {scale!r} scale: use one of {', '.join(scales)}")
    d = Path(sweeps_dir) if sweeps_dir is not None else SWEEPS_DIR
    found, missing = [], []
    for name in scales[scale]:
        p = d / f"{name}.yaml"
        (found if p.is_file() else missing).append(p if p.is_file() else name)
    return found, missing


def _estimate(cfg, scale: str, side: int = 1, shapes: dict | None = None) -> dict:
    """Seconds a trial takes: measured on this CPU (``cpu`` scale; with ``side - 1`` other processes
    training the same model, as ``side`` trials run at once) or projected on the fastest accelerator
    whose memory fits it (``gpu``); ``{"seconds", "where"}`` or ``{"error"}``. ``shapes``: the
    measurements shared between the trials of a sweep (``estimate_run``'s ``cache``)."""
    try:
        from mosaic.lab.cost import estimate_run
    except ImportError:
        return {"error": "no cost model (mosaic.lab.cost)"}
    try:
        est = estimate_run(cfg, time_cpu=scale == "cpu", check_device_present=False, side_by_side=side if scale == "cpu" else 1,
                           cache=shapes)
    except Exception as e:  # an estimate must not stop a dry run
        return {"error": f"{type(e).__name__}: {e}"}
    if scale == "cpu":
        where = f"this CPU ({est.cpu_threads} thread(s), {side} side by side, load {est.cpu_load:.1f})"
        return {"seconds": est.cpu_total_s, "where": where,
                "threads": est.cpu_threads}
    rows = [a for a in est.accelerators if a.fits]
    if not rows:
        return {"error": "fits no accelerator of the table"}
    best = min(rows, key=lambda a: a.total_s)
    return {"seconds": best.total_s, "where": best.name}


def plan_reproduction(paper: str, scale: str, out: str | Path, workers: int = 1, registry: dict | None = None,
                      sweeps_dir: str | Path | None = None, estimate: bool = True) -> dict:
    """Every sweep and trial a reproduction would run, and its estimated time. Writes nothing.

    Returns:
        ``{"paper", "scale", "sweeps": [{"name", "path", "folder", "trials": [{"id", "values", "done",
        "estimate"}], "seconds", "wall_seconds"}], "missing", "trials", "todo", "seconds" (sum of the
        trials still to run), "wall_seconds"}``. A sweep's wall time is its trials run through a pool of
        ``workers`` (at CPU scale no more side by side than there are cores for their threads;
        :func:`mosaic.trials.pool_wall_seconds`), as if it ran alone; the reproduction runs every
        sweep's trials through one pool, in the sweeps' order, so its ``wall_seconds`` is that pool's
        makespan (at most the sum of the sweeps').
    Raises:
        SweepError / SpecError / ConfigError: an invalid sweep, config or spec (before anything runs).
    """
    from mosaic.lab.data import load_dataset_spec

    paths, missing = sweeps_of(paper, scale, registry, sweeps_dir)
    out = Path(out)
    res = {"paper": paper, "scale": scale, "sweeps": [], "missing": missing, "trials": 0, "todo": 0, "seconds": 0.0, "wall_seconds": 0.0}
    all_s, all_threads = [], 1
    for p in paths:
        s = load_sweep(p)
        folder = out / s.name
        trials = plan(s, folder)
        cache: dict[str, dict] = {}
        shapes: dict = {}
        rows, todo_s, threads = [], [], 1
        for t in trials:
            if t["cfg"].dataset.spec is not None:
                load_dataset_spec(t["cfg"].dataset)
            done = read_status(t["dir"]).get("status") == "done"
            est = None
            if estimate and not done:
                key = json.dumps({k: v for k, v in t["values"].items() if k != "seed"}, sort_keys=True, default=str)
                if key not in cache:
                    side = cpu_slots(workers, t["cfg"].training.threads or 1) if scale == "cpu" else 1
                    cache[key] = _estimate(t["cfg"], scale, side, shapes)
                est = cache[key]
                todo_s.append(est.get("seconds") or 0.0)
                threads = max(threads, est.get("threads") or 1)
            rows.append({"id": t["id"], "values": t["values"], "done": done, "estimate": est})
        slots = cpu_slots(workers, threads) if scale == "cpu" else max(1, workers)
        wall, total = pool_wall_seconds(todo_s, slots), sum(todo_s)
        all_s += todo_s
        all_threads = max(all_threads, threads)
        res["sweeps"].append({"name": s.name, "path": str(p), "folder": str(folder), "trials": rows, "seconds": total, "wall_seconds": wall,
                              "claims": len(s.report.claims) if hasattr(s.report, "claims") else 0})
        res["trials"] += len(rows)
        res["todo"] += sum(not r["done"] for r in rows)
        res["seconds"] += total
    res["wall_seconds"] = pool_wall_seconds(all_s, cpu_slots(workers, all_threads) if scale == "cpu" else max(1, workers))
    return res


def reproduce(paper: str, scale: str, out: str | Path, workers: int = 1, backend: str = "local", address: str | None = None,
              registry: dict | None = None, sweeps_dir: str | Path | None = None,
              on_progress: Callable[[str], None] | None = None, on_done: Callable[[dict], None] | None = None) -> dict:
    """Run a paper's sweeps at a scale (resumably) and write its report.

    Returns:
        ``{"paper", "scale", "out", "page" (OUT/index.html), "claims" (every claim checked, with
        the paper's statement), "sweeps": [{"name", "folder", "report", "trials", "done", "failed",
        "seconds"}], "missing", "seconds"}``.
    Raises:
        MosaicError: an unknown paper or scale, or no sweep file of it; SweepError & co.: an invalid
            sweep (before anything runs).
    """

    reg = registry if registry is not None else load_registry()
    paths, missing = sweeps_of(paper, scale, reg, sweeps_dir)
    if not paths:
        raise MosaicError(f"none of {paper}'s {scale} sweeps exists ({', '.join(missing)} under {sweeps_dir or SWEEPS_DIR}): "
                          f"add them, or edit {REGISTRY_FILE}")
    out = Path(out)
    sweeps = [load_sweep(p) for p in paths]
    for s in sweeps:  # validate every trial of every sweep before running any
        plan(s, out / s.name)
    if len({s.name for s in sweeps}) < len(sweeps):
        raise MosaicError(f"two of {paper}'s {scale} sweeps have one name ({', '.join(s.name for s in sweeps)}): each writes "
                          f"OUT/<name>; give each sweep file its own name")
    check_sweep_options(backend, workers, address)
    statements = (reg[paper].get("statements") or {})
    t0 = time.perf_counter()
    finished: dict[str, tuple[dict, list]] = {}

    def finish(s) -> None:  # a sweep whose trials have all run: its results, report and claims
        folder = out / s.name
        df = collect(folder)
        page = make_report(folder)
        sweep_claims = check_sweep_claims(read_sweep_yaml(folder), df, statements)  # sweep.yaml read bounded, named when damaged
        st = df["status"] if "status" in df.columns else None
        finished[s.name] = ({"name": s.name, "folder": str(folder), "report": str(page), "trials": len(df),
                             "done": int((st == "done").sum()) if st is not None else len(df),
                             "failed": int((st == "failed").sum()) if st is not None else 0,
                             "seconds": time.perf_counter() - t0}, sweep_claims)
        if on_progress:
            on_progress(f"sweep {s.name}: all trials run, report {page}")

    make_output_dir(out, "--out")
    for s in sweeps:  # a file standing there is a person's: named, never deleted
        if not (out / s.name).is_symlink() and (out / s.name).exists() and not (out / s.name).is_dir():
            raise SweepError(f"{out / s.name} is not a folder: the reproduction runs sweep {s.name} there; move it away, or give another --out")
    own_folders(out, [s.name for s in sweeps])  # a link planted at OUT/<sweep> is removed: a sweep is never run into another folder
    with contextlib.ExitStack() as locks:  # every sweep folder's lock, as mosaic sweep holds its own
        for s in sweeps:
            locks.enter_context(FolderLock(out / s.name, SweepError, "sweep folder", wait=False))
        left, todo = {}, []
        for s in sweeps:
            if on_progress:
                on_progress(f"sweep {s.name} -> {out / s.name}")
            _, mine = prepare_todo(s, out / s.name, on_progress)
            left[s.name] = len(mine)
            todo += mine
        by_name = {s.name: s for s in sweeps}

        def done(st: dict) -> None:
            if on_done:
                on_done(st)
            name = st.get("sweep")
            if name in left:
                left[name] -= 1
                if left[name] == 0:
                    finish(by_name[name])

        for s in sweeps:
            if not left[s.name]:
                finish(s)
        # one pool for the trials of every sweep, in the sweeps' order: a slot freed at the end of one sweep takes the
        # next sweep's first trial (9 trials on 2 workers no longer leave a core idle for a round at every sweep's end)
        if todo:
            run_pool(backend, sweeps[0].kind, todo, workers, address, None, done)
        for s in sweeps:
            if s.name not in finished:  # a trial whose status lost its sweep's name: reported all the same
                finish(s)
    results = [finished[s.name][0] for s in sweeps]
    claims = [c for s in sweeps for c in finished[s.name][1]]
    res = {"paper": paper, "scale": scale, "title": reg[paper].get("title", paper), "source": reg[paper].get("source"),
           "statements": statements, "out": str(out), "sweeps": results, "missing": missing, "claims": claims,
           "seconds": time.perf_counter() - t0}
    res["page"] = str(write_reproduction_report(res, out))
    return res


def _href(rel: Path) -> str:
    """A link to the relative path ``rel``, percent-encoded after ``./``: a sweep folder named
    ``javascript:alert(1)`` is a path, never a URL scheme the browser runs."""
    return html.escape("./" + quote(rel.as_posix(), safe="/"))


def write_reproduction_report(res: dict, out: str | Path) -> Path:
    """``OUT/index.html``, ``OUT/claims.json`` and ``OUT/claims.png``: per statement of the paper,
    the claims that test it (effect, interval, verdict); claims without a statement; links to each
    sweep's report. Returns the page's path."""

    out = Path(out)
    fig, _ = write_claims(res["claims"], out, title=f"{res['paper']} ({res['scale']})")
    atomic_write(out / "claims.json", json.dumps({k: res[k] for k in ("paper", "scale", "title", "source", "statements", "missing",
                                                                     "sweeps", "claims", "seconds")}, indent=2, default=str) + "\n")
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'>", f"<title>{e(res['title'])}: reproduction ({e(res['scale'])})</title>",
             "<style>body{font-family:sans-serif;margin:24px;max-width:1300px}table.results{border-collapse:collapse;font-size:13px}"
             "table.results td,table.results th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}blockquote{color:#333;"
             "border-left:4px solid #aac;margin:8px 0;padding:4px 12px;background:#f4f4fa}img{max-width:100%}</style></head><body>",
             f"<h1>{e(res['title'])}</h1><p>Scale <b>{e(res['scale'])}</b>; {len(res['sweeps'])} sweep(s) in "
             f"{res['seconds'] / 60:.1f} min (finished trials of an earlier run are not re-run).</p>"]
    if res.get("source"):
        parts.append(f"<p><small>Statements: {e(res['source'])}.</small></p>")
    if res["missing"]:
        parts.append(f"<p style='color:#b00'>Registered sweeps without a file (skipped): {e(', '.join(res['missing']))}.</p>")
    for key, text in (res.get("statements") or {}).items():
        tested = [c for c in res["claims"] if c.get("paper_key") == key]
        parts.append(f"<h2>{e(key)}</h2><blockquote>“{e(text)}”</blockquote>")
        if not tested:
            parts.append("<p><i>No claim of these sweeps tests this statement (give a claim <code>paper: "
                         f"{e(key)}</code>).</i></p>")
        for c in tested:
            eff, iv = fmt_effect(c)
            parts.append(f"<p>{e(c['sweep'] or '')}: <b>{e(c['name'])}</b> — effect {eff}, 95 % interval {iv}, "
                         f"{c['seeds']} seeds: <b>{e(c['verdict'])}</b> ({e(c.get('why') or '')})</p>")
    parts.append(claims_html(res["claims"], fig))
    parts.append("<h2>Sweeps</h2><ul>" + "".join(
        f"<li><a href='{_href(Path(s['report']).relative_to(out))}'>{e(s['name'])}</a>: {s['done']} of {s['trials']} trials done, "
        f"{s['failed']} failed, {s['seconds'] / 60:.1f} min</li>" for s in res["sweeps"]) + "</ul></body></html>")
    page = out / "index.html"
    atomic_write(page, "\n".join(parts))
    return page
