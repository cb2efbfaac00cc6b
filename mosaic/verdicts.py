"""Checking a sweep's claims (:mod:`mosaic.claims`) on its results: the effect per seed, a 95 %
interval over seeds, the verdict, and the claims section of a report.

Each kind's effect is defined in :mod:`mosaic.claims`; it is computed per seed (axes the claim
does not fix averaged within a seed), seeds being the replicates.

**Interval**: Student-t 95 % interval of the mean of the per-seed effects (``mean ± t(0.975, n-1)
· sd / sqrt(n)``); the t interval rather than a bootstrap because sweeps have 3-5 seeds, too few
for bootstrap quantiles. A claim **holds** when the interval's lower end is above ``min_effect``
(default 0), **does not hold** when its upper end is below it, and is **inconclusive** otherwise
(including fewer than 2 seeds).
"""

from __future__ import annotations

import json
import math

from mosaic.claims import (
    Claim, DropClaim, DropSpec, ExceedsClaim, TrendClaim, _canon, _value, parse_claim, resolve_axis, without_abstention,
)
from mosaic.io import atomic_write, make_output_dir
from mosaic.plots import plot_claims


def _num(v) -> float | None:
    x = _value(v)
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


class _Table:
    """The results rows of finished trials, with axis values made comparable."""

    def __init__(self, rows: list[dict], axes: list[str], order: dict[str, list] | None = None):
        self.rows = rows
        self.axes = axes
        self.order = order or {}

    def values(self, axis: str) -> list:
        """The distinct values of an axis, smallest first (numeric, else the sweep's order)."""
        seen = {}
        for r in self.rows:
            if axis in r:
                seen.setdefault(_canon(r[axis]), r[axis])
        keys = list(seen)
        nums = [_num(seen[k]) for k in keys]
        if all(n is not None for n in nums):
            return [seen[k] for _, k in sorted(zip(nums, keys))]
        grid = [_canon(v) for v in self.order.get(axis, [])]
        return [seen[k] for k in sorted(keys, key=lambda k: (grid.index(k) if k in grid else len(grid), k))]

    def pick(self, axis: str, v):
        if isinstance(v, str) and v in ("max", "min"):
            vals = self.values(axis)
            if not vals:
                raise ValueError(f"axis {axis!r} has no values in the results")
            return vals[-1] if v == "max" else vals[0]
        return v

    def select(self, sel: dict) -> list[dict]:
        keys = {resolve_axis(a, self.axes): a for a in sel}
        want = {ax: _canon(self.pick(ax, sel[a])) for ax, a in keys.items()}
        return [r for r in self.rows if all(_canon(r.get(ax)) == w for ax, w in want.items())]


def _per_seed(rows: list[dict], y: str) -> dict:
    """Mean of column ``y`` per seed over ``rows`` (other axes averaged), NaNs left out."""
    acc: dict = {}
    for r in rows:
        v = r.get(y)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        acc.setdefault(_canon(r.get("seed")), []).append(float(v))
    return {s: sum(v) / len(v) for s, v in acc.items()}


def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean of ``values`` (None with fewer than 2)."""
    from scipy import stats

    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    h = stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return (mean - h, mean + h)


def _effects(claim: Claim, tab: _Table) -> tuple[dict, dict]:
    """Per-seed effects ``{seed: effect}`` and extra numbers for the report."""
    base = tab.select(claim.where) if claim.where else tab.rows
    sub = _Table(base, tab.axes, tab.order)
    if isinstance(claim, TrendClaim):
        x = resolve_axis(claim.x, tab.axes)
        xs = sub.values(x)
        if len(xs) < 2:
            raise ValueError(f"{x} takes {len(xs)} value(s) in the finished trials; a trend needs at least 2")
        nums = [_num(v) for v in xs]
        pos = nums if all(n is not None for n in nums) else list(range(len(xs)))
        curves = [_per_seed(sub.select({x: v}), claim.y) for v in xs]
        seeds = set.intersection(*[set(c) for c in curves])
        sign = -1.0 if claim.kind == "decreases" else 1.0
        eff, change = {}, {}
        mx = sum(pos) / len(pos)
        sxx = sum((p - mx) ** 2 for p in pos)
        for s in seeds:
            ys = [c[s] for c in curves]
            my = sum(ys) / len(ys)
            slope = sum((p - mx) * (yv - my) for p, yv in zip(pos, ys)) / sxx
            eff[s] = sign * slope
            change[s] = ys[-1] - ys[0]
        means = [sum(c[s] for s in seeds) / len(seeds) if seeds else None for c in curves]
        return eff, {"units": f"{claim.y} per unit of {x}" if nums[0] is not None else f"{claim.y} per step of {x}",
                     "x_values": [_value(v) for v in xs], "y_means": means,
                     "change_first_to_last": _mean(list(change.values()))}
    if isinstance(claim, DropClaim):
        def drop(d: DropSpec):
            hi = _per_seed(_Table(sub.select(d.from_), tab.axes, tab.order).rows, d.y)
            lo = _per_seed(_Table(sub.select(d.to), tab.axes, tab.order).rows, d.y)
            return {s: hi[s] - lo[s] for s in set(hi) & set(lo)}
        da = drop(claim.a)
        dbs = [drop(b) for b in claim.b]
        seeds = set(da).intersection(*[set(d) for d in dbs])
        eff = {s: min(da[s] - d[s] for d in dbs) for s in seeds}
        return eff, {"units": "difference of drops", "drop_a": _mean([da[s] for s in seeds]),
                     "drop_b": [_mean([d[s] for s in seeds]) for d in dbs]}
    if isinstance(claim, ExceedsClaim):
        ya = _per_seed(sub.select(claim.a), claim.y)
        yb = _per_seed(sub.select(claim.b), claim.y_b or claim.y)
        seeds = set(ya) & set(yb)
        return {s: ya[s] - yb[s] for s in seeds}, {"units": "difference", "a": _mean([ya[s] for s in seeds]),
                                                   "b": _mean([yb[s] for s in seeds])}
    ys = _per_seed(sub.rows, claim.y)
    return {s: v - claim.value for s, v in ys.items()}, {"units": f"{claim.y} above {claim.value:g}", "mean": _mean(list(ys.values()))}


def _mean(v: list[float]) -> float | None:
    return sum(v) / len(v) if v else None


def evaluate_claim(claim: Claim | dict | str, rows: list[dict], axes: list[str], order: dict[str, list] | None = None,
                   level: float = 0.95) -> dict:
    """Check one claim on results rows (one per finished trial, with its axis values and columns).

    Args:
        claim: a claim (or its structured or sentence form).
        rows: results rows (e.g. ``results.csv`` records of finished trials), with a ``seed`` column.
        axes: the sweep's axes (``seed`` included).
        order: axis -> its values in the sweep file's order (for ``max``/``min`` of non-numeric axes).
        level: the interval's coverage.
    Returns:
        ``{"claim" (its sentence), "name", "kind", "spec" (the structured form), "paper", "effect" (mean
        of per-seed effects), "interval" ([low, high], t interval; None with < 2 seeds), "seeds" (how
        many), "per_seed", "verdict" (holds / does not hold / inconclusive), "why", "min_effect",
        "method", "details"}``; a claim that cannot be evaluated (a missing column, too few values)
        gets verdict ``inconclusive`` and the reason in ``error``.
    """
    c = parse_claim(claim)
    out = {"claim": c.sentence(), "name": c.name or c.sentence(), "kind": c.kind,
           "spec": c.model_dump(mode="json", by_alias=True, exclude_none=True), "paper": c.paper, "min_effect": c.min_effect,
           "method": f"mean of per-seed effects, Student-t {int(level * 100)} % interval over seeds", "effect": None,
           "interval": None, "seeds": 0, "per_seed": {}, "details": {}, "error": None}
    cols = set().union(*[set(r) for r in rows]) if rows else set()
    missing = [y for y in c.columns() if y not in cols]
    if missing:
        out.update(verdict="inconclusive", why=f"no results column {', '.join(missing)}", error=f"missing column(s) {missing}")
        return out
    try:
        eff, details = _effects(c, _Table(rows, axes, order))
    except ValueError as e:
        out.update(verdict="inconclusive", why=str(e), error=str(e))
        return out
    vals = [eff[s] for s in sorted(eff)]
    out["per_seed"] = {str(_value(s)): eff[s] for s in sorted(eff)}
    out["seeds"] = len(vals)
    out["details"] = details
    if not vals:
        out.update(verdict="inconclusive", why="no seed has every value the claim compares")
        return out
    out["effect"] = sum(vals) / len(vals)
    iv = t_interval(vals, level)
    out["interval"] = list(iv) if iv else None
    if iv is None:
        out.update(verdict="inconclusive", why="one seed: no interval")
    elif iv[0] > c.min_effect:
        out.update(verdict="holds", why=f"the interval lies above {c.min_effect:g}")
    elif iv[1] < c.min_effect:
        out.update(verdict="does not hold", why=f"the interval lies below {c.min_effect:g}")
    else:
        out.update(verdict="inconclusive", why=f"the interval contains {c.min_effect:g}")
    return out


def evaluate_claims(claims: list, rows: list[dict], axes: list[str], order: dict[str, list] | None = None) -> list[dict]:
    """:func:`evaluate_claim` for each claim."""
    return [evaluate_claim(c, rows, axes, order) for c in claims]


def finished_rows(df) -> list[dict]:
    """The rows of finished trials of a results table (pandas DataFrame) as dicts."""
    done = df[df["status"] == "done"] if "status" in df.columns else df
    return done.to_dict("records")


def sweep_axes(sweep: dict) -> tuple[list[str], dict[str, list]]:
    """A sweep's axes (``seed`` last) and each axis's values in file order, from its YAML mapping."""
    grid, zp = dict(sweep.get("grid") or {}), dict(sweep.get("zip") or {})
    return list(grid) + list(zp) + ["seed"], {**grid, **zp, "seed": list(sweep.get("seeds") or [])}


def all_statements() -> dict[str, str]:
    """Every paper statement of the reproduce registry by key (:mod:`mosaic.reproduce`); empty
    when the registry cannot be read."""
    from pathlib import Path

    import yaml

    try:  # read directly (mosaic.reproduce imports this module)
        reg = yaml.safe_load((Path(__file__).resolve().parents[1] / "experiments" / "reproduce.yaml").read_text()) or {}
        return {k: str(v) for entry in reg.values() if isinstance(entry, dict) for k, v in (entry.get("statements") or {}).items()}
    except (OSError, yaml.YAMLError, AttributeError):  # the report does not depend on the registry
        return {}


def check_sweep_claims(sweep: dict, df, statements: dict[str, str] | None = None) -> list[dict]:
    """Every claim of a sweep (its ``report.claims``) checked on its results table ``df`` (finished
    trials only); ``statements`` resolves a claim's ``paper`` key to the paper's words. When the
    results hold the accuracy before abstention (``<group>.raw.<metric>`` columns), each result also
    gets ``without_abstention`` (``{"effect", "interval", "verdict"}`` of the same claim on them) and
    ``changed_by_abstention`` (the verdicts differ)."""
    claims = ((sweep.get("report") or {}).get("claims")) or []
    if statements is None:
        statements = all_statements()
    axes, order = sweep_axes(sweep)
    rows = finished_rows(df)
    out = []
    for c in claims:
        r = evaluate_claim(c, rows, axes, order)
        alt = without_abstention(parse_claim(c))
        if alt is not None and all(col in df.columns for col in alt.columns()):
            w = evaluate_claim(alt, rows, axes, order)
            r["without_abstention"] = {k: w[k] for k in ("effect", "interval", "verdict")}
            r["changed_by_abstention"] = w["verdict"] != r["verdict"]
        if statements and r.get("paper") in statements:
            r["paper_key"] = r["paper"]
            r["paper"] = statements[r["paper"]]
        r["sweep"] = sweep.get("name")
        out.append(r)
    return out


def fmt_effect(r: dict) -> tuple[str, str]:
    """``(effect, interval)`` as text (3 decimals)."""
    e = "-" if r.get("effect") is None else f"{r['effect']:+.3f}"
    iv = "-" if not r.get("interval") else f"[{r['interval'][0]:+.3f}, {r['interval'][1]:+.3f}]"
    return e, iv


def claims_html(results: list[dict], figure: str | None = None) -> str:
    """The claims section of a report page: one row per claim (claim, paper's statement, effect,
    95 % interval, seeds, verdict, why) and the summary figure."""
    import html as H

    if not results:
        return ""
    colors = {"holds": "#1a7a1a", "does not hold": "#b01010", "inconclusive": "#a06000"}
    rows = []
    raw = any("without_abstention" in r for r in results)
    for r in results:
        e, iv = fmt_effect(r)
        cells = [H.escape(r["name"]) + (f"<br><small>{H.escape(r['claim'])}</small>" if r["name"] != r["claim"] else ""),
                 H.escape(r.get("paper") or ""), e, iv, r.get("seeds", 0),
                 f"<b style='color:{colors.get(r['verdict'], '#333')}'>{H.escape(r['verdict'])}</b>", H.escape(r.get("why") or "")]
        if raw:
            w = r.get("without_abstention")
            cells.append("-" if not w else f"{H.escape(w['verdict'])} ({fmt_effect(w)[0]}, {fmt_effect(w)[1]})"
                         + (" <b>changed</b>" if r.get("changed_by_abstention") else ""))
        rows.append("<tr>" + "".join(f"<td style='text-align:left'>{x}</td>" for x in cells) + "</tr>")
    parts = ["<h2>Claims</h2><p>Effect: mean over seeds of each seed's effect, positive in the claimed direction; "
             "interval: Student-t 95 % over seeds. A claim holds when the interval lies above its minimum effect (0 unless "
             "stated), does not hold when it lies below, and is inconclusive otherwise. Also in <a href='claims.json'>claims.json</a>.</p>",
             "<table class='results'><tr><th>claim</th><th>paper's statement</th><th>effect</th><th>95 % interval</th><th>seeds</th>"
             "<th>verdict</th><th>why</th>" + ("<th>without abstention</th>" if raw else "") + "</tr>", *rows, "</table>"]
    if figure:
        parts.append(f"<img src='{figure}' alt='claims: effects and intervals'>")
    return "\n".join(parts)


def write_claims(results: list[dict], out_dir, title: str = "claims") -> tuple[str | None, str]:
    """Write ``claims.json`` and ``claims.png`` (:func:`mosaic.plots.plot_claims`) into ``out_dir``;
    returns ``(figure file name or None, HTML section)``."""
    out = make_output_dir(out_dir, "out")
    atomic_write(out / "claims.json", json.dumps({"claims": results}, indent=2, default=str) + "\n")
    fig = plot_claims(results, out / "claims.png", title=f"{title}: effect and 95 % interval over seeds") if results else None
    name = fig.name if fig else None
    return name, claims_html(results, name)
