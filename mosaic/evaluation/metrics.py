"""Scores of predicted concept values against intended ones, for every trainer and evaluator.

:func:`score` gives, overall and split into **seen** and **held-out** combinations (a record's
``held_out`` flag; a record without one takes the spec's):

- per-concept accuracy, and **joint accuracy** (every concept right);
- the fraction of unreadable predictions (None) per concept, counted as wrong;
- **count MAE** (mean absolute error of the number, readable predictions only) for count concepts;
- **circular bin distance** for position concepts: ``min(|i - j|, n - |i - j|)`` between bin
  indices (0 = right bin, 1 = a neighbour...), mean over readable predictions;
- per **cell** of the combination grid (the holdout's concepts, :func:`mosaic.holdout.grid_concepts`;
  without a holdout the first two concepts): n, joint accuracy and per-concept accuracy.

:func:`write_metrics` writes ``metrics.json``, ``metrics.csv`` (long format) and ``heatmap.png``
(joint accuracy per cell; held-out cells outlined).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from itertools import product
from pathlib import Path

import numpy as np

from mosaic.errors import MosaicError
from mosaic.holdout import STATUS_NAMES, is_held_out
from mosaic.io import atomic_text_writer, atomic_write, make_output_dir
from mosaic.plots import plot_cell_heatmap
from mosaic.grammar import domain_index
from mosaic.spec import Spec

GROUPS = ("overall", "seen", "held_out")


def grid_of(spec: Spec) -> tuple[list[str], dict[tuple, str] | None]:
    """The concepts of the per-cell breakdown and, with a holdout, each cell's status.

    Returns ``(concepts, status)``: the holdout's grid concepts and ``{combination: "seen" |
    "held_out" | "excluded"}`` (every cell, in grid order; :meth:`mosaic.holdout.Grid.status_of`);
    without a holdout the first two concepts and None.
    """
    g = spec.grid
    if g is None:
        return list(spec.concepts)[:2], None
    return list(g.concepts), {combo: STATUS_NAMES[g.status_of(combo)] for combo in product(*g.domains)}


def _summary(mask: np.ndarray, T, P, raw, spec: Spec, concepts: list[str]) -> dict:
    n = int(mask.sum())
    out: dict = {"n": n}
    if n == 0:
        out.update({"accuracy": {c: None for c in concepts}, "joint_accuracy": None, "unreadable": {c: None for c in concepts}})
        return out
    right = (P[mask] == T[mask])  # [n, C]; -1 (unreadable) never equals a true index
    out["accuracy"] = {c: float(right[:, j].mean()) for j, c in enumerate(concepts)}
    out["joint_accuracy"] = float(right.all(1).mean())
    out["unreadable"] = {c: float((P[mask][:, j] < 0).mean() if not _is_count(spec, c) else np.isnan(raw[mask][:, j]).mean())
                         for j, c in enumerate(concepts)}
    for j, c in enumerate(concepts):
        role = spec.roles.get(c)
        if role == "count":
            dom = spec.domain(c)
            t = np.array([float(dom[k]) for k in T[mask][:, j]])
            p = raw[mask][:, j]
            ok = ~np.isnan(p)
            out.setdefault("count_mae", {})[c] = float(np.abs(p[ok] - t[ok]).mean()) if ok.any() else None
        elif role == "position":
            nb = len(spec.domain(c))
            t, p = T[mask][:, j], P[mask][:, j]
            ok = p >= 0
            d = np.abs(p[ok] - t[ok])
            out.setdefault("position_distance", {})[c] = float(np.minimum(d, nb - d).mean()) if ok.any() else None
    return out


def _is_count(spec: Spec, c: str) -> bool:
    return spec.roles.get(c) == "count"


def score(records: list[dict], predictions: list[dict], spec: Spec) -> dict:
    """Score predicted concept values against the intended ones.

    Args:
        records: one dict per image with ``concepts`` (concept -> intended value) and optionally
            ``held_out`` (bool; absent or null: the spec's holdout decides), as in a dataset's ``metadata.jsonl``.
        predictions: one dict per image, concept -> predicted value or None (unreadable).
        spec: the spec (concept domains and roles, holdout grid).
    Returns:
        ``{"n", "concepts", "overall", "seen", "held_out", "grid"}``; each group holds ``n``,
        ``accuracy`` (concept -> fraction), ``joint_accuracy``, ``unreadable``, and where the spec
        has them ``count_mae`` and ``position_distance`` (mean circular bin distance); a group
        without samples has None values. ``grid`` holds ``concepts``, ``domains`` and ``cells``:
        per observed combination ``combination``, ``status`` (seen / held_out / excluded), ``n``,
        ``joint_accuracy`` and ``accuracy``. ``by_value`` holds, per concept and per value of its
        domain present in the records, ``{"n", "joint_accuracy", "accuracy"}`` over every image
        whose intended value it is (seen and held-out together): the accuracy on a concept's tail
        values under a skewed training distribution (MOSAIC's imbalance study, Jeong et al. 2026)
        is read from here.
    Raises:
        MosaicError: different lengths, or a record whose intended value is missing or not in the
            concept's domain (names the record and the concept).
    """
    if len(records) != len(predictions):
        raise MosaicError(f"score(): {len(records)} records but {len(predictions)} predictions; give one prediction per record")
    concepts = list(spec.concepts)
    N, C = len(records), len(concepts)
    T = np.full((N, C), -1, np.int64)
    P = np.full((N, C), -1, np.int64)
    raw = np.full((N, C), np.nan)  # numeric predictions of count concepts (may be outside the domain)
    held = np.zeros(N, bool)
    for i, (r, p) in enumerate(zip(records, predictions)):
        conc = r.get("concepts")
        if not isinstance(conc, dict):
            raise MosaicError(f"record {i} ({r.get('file_name', '?')}) has no 'concepts' mapping of intended values")
        held[i] = r.get("held_out") is True  # a JSON boolean only: "false" (a string) is not held out
        for j, c in enumerate(concepts):
            dom = spec.domain(c)
            if c not in conc:
                raise MosaicError(f"record {i} ({r.get('file_name', '?')}): concept {c!r} is missing from 'concepts'; "
                                  f"give its intended value (one of {dom})")
            k = domain_index(dom, conc[c])
            if k is None:
                raise MosaicError(f"record {i} ({r.get('file_name', '?')}): intended {c} = {conc[c]!r} ({type(conc[c]).__name__}) is not a value "
                                  f"of the concept ({dom}; a count is a JSON number, not true or \"1\"); is the spec the one "
                                  "the images were made for?")
            T[i, j] = k
            pv = (p or {}).get(c)
            kp = domain_index(dom, pv)
            P[i, j] = -1 if kp is None else kp
            if _is_count(spec, c) and pv is not None:
                try:
                    raw[i, j] = float(pv)
                except (TypeError, ValueError):
                    pass
        if r.get("held_out") is None and spec.holdout is not None:  # no flag: the spec decides (never seen for want of one)
            held[i] = bool(is_held_out(spec, conc))
    out = {"n": N, "concepts": concepts}
    for name, mask in (("overall", np.ones(N, bool)), ("seen", ~held), ("held_out", held)):
        out[name] = _summary(mask, T, P, raw, spec, concepts)

    by_value: dict = {}
    for j, c in enumerate(concepts):
        dom = spec.domain(c)
        for k in sorted(set(int(t) for t in T[:, j])):
            s = _summary(T[:, j] == k, T, P, raw, spec, concepts)
            by_value.setdefault(c, {})[str(dom[k])] = {"n": s["n"], "joint_accuracy": s["joint_accuracy"], "accuracy": s["accuracy"]}
    out["by_value"] = by_value

    gconcepts, status = grid_of(spec)
    gidx = [concepts.index(c) for c in gconcepts]
    cells = defaultdict(list)
    for i in range(N):
        cells[tuple(int(T[i, j]) for j in gidx)].append(i)
    rows = []
    for key in sorted(cells):
        m = np.zeros(N, bool)
        m[cells[key]] = True
        combo = [spec.domain(c)[k] for c, k in zip(gconcepts, key)]
        st = status.get(tuple(combo)) if status else None
        if st is None:
            st = "held_out" if held[m].any() else "seen"
        s = _summary(m, T, P, raw, spec, concepts)
        rows.append({"combination": combo, "status": st, "n": s["n"], "joint_accuracy": s["joint_accuracy"], "accuracy": s["accuracy"]})
    out["grid"] = {
        "concepts": gconcepts,
        "domains": {c: list(spec.domain(c)) for c in gconcepts},
        "status": [[list(k), v] for k, v in status.items()] if status else None,
        "cells": rows,
    }
    return out


def write_metrics(metrics: dict, out_dir: str | Path, spec: Spec, title: str | None = None) -> dict[str, Path]:
    """Write ``metrics.json``, ``metrics.csv`` and ``heatmap.png`` (joint accuracy per cell).

    The CSV is long format: ``group, combination, concept, metric, value, n`` with group
    ``overall`` / ``seen`` / ``held_out`` / ``cell`` (combination ``v1|v2`` for cells) and concept
    ``*`` for joint metrics. ``metrics.json`` is written last (each file atomically). Returns the paths written.
    """
    out = make_output_dir(out_dir, "out")  # never into a dataset, a file or an unwritable place
    paths = {"json": out / "metrics.json", "csv": out / "metrics.csv", "heatmap": out / "heatmap.png"}
    with atomic_text_writer(paths["csv"], newline="") as f:
        w = csv.writer(f)
        w.writerow(["group", "combination", "concept", "metric", "value", "n"])
        for g in GROUPS:
            s = metrics.get(g) or {}
            n = s.get("n", 0)
            w.writerow([g, "", "*", "joint_accuracy", _fmt(s.get("joint_accuracy")), n])
            for key in ("accuracy", "unreadable", "count_mae", "position_distance"):
                for c, v in (s.get(key) or {}).items():
                    w.writerow([g, "", c, key, _fmt(v), n])
        for cell in metrics.get("grid", {}).get("cells", []):
            combo = "|".join(map(str, cell["combination"]))
            w.writerow(["cell", combo, "*", "joint_accuracy", _fmt(cell["joint_accuracy"]), cell["n"]])
            for c, v in cell["accuracy"].items():
                w.writerow(["cell", combo, c, "accuracy", _fmt(v), cell["n"]])
    plot_cell_heatmap(metrics, paths["heatmap"], spec, title=title)
    # last: a whole metrics.json stands beside the CSV and heatmap of its own evaluation, never an earlier one's
    atomic_write(paths["json"], json.dumps(metrics, indent=2, default=_json_default) + "\n")
    return paths


def _fmt(v):
    return "" if v is None else (f"{v:.6g}" if isinstance(v, float) else v)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
