"""Claims a sweep tests, checked on its results with a 95 % interval over seeds.

A sweep file states its claims under ``report.claims``, each a small structured form (or a
sentence parsed into one, :func:`parse_sentence`)::

    report:
      claims:
        - {kind: decreases, y: held_out.joint, x: spec.holdout.rule.n}
        - {kind: drop_exceeds, y: seen.count, than: [seen.color], x: spec.splits.train, from: max, to: min}
        - kind: drop_exceeds
          a: {y: seen.joint, from: {condition: baseline}, to: {condition: distractors}}
          b: {y: value.shape.cross, from: {condition: baseline}, to: {condition: skewed}}
        - {kind: exceeds, y: held_out.object_accuracy, a: {fraction: 0.3}, b: {fraction: 0.7}}
        - {kind: at_least, y: seen.joint, value: 0.9, where: {n: min}}
        - "held_out.joint decreases with spec.holdout.rule.n"

Kinds and their **effect** (computed per seed, then averaged; positive = the claimed direction):

- ``decreases`` / ``increases``: the least-squares slope of ``y`` against axis ``x`` (per unit of
  ``x``; against the value's rank when ``x`` is not numeric), negated for ``decreases``. Also
  reported: the change from the smallest to the largest ``x``.
- ``drop_exceeds``: ``drop(a) - drop(b)`` where ``drop = y(from) - y(to)``. The short form
  ``y, than, x, from, to`` means ``a = {y, from: {x: from}, to: {x: to}}`` and one ``b`` per column
  of ``than`` (same axis values); with several, the effect is the smallest margin (the claim must
  hold against every one).
- ``exceeds``: ``y(a) - y_b(b)`` (``y_b`` defaults to ``y``).
- ``at_least``: ``y - value`` (at ``where``).

Selectors (``where``, ``from``, ``to``, ``a``, ``b``) map axes to values, or to ``max`` / ``min``
(the axis's largest / smallest value: numeric order, else the sweep's grid order). An axis may be
named by its full name or by a unique ending of it (``n`` for ``spec.holdout.rule.n``,
``distractors`` for ``spec.distractors.0.repeat.range``). Axes a claim does not fix are averaged
over (within a seed), seeds are the replicates.

**Interval**: Student-t 95 % interval of the mean of the per-seed effects (``mean ± t(0.975, n-1)
· sd / sqrt(n)``); the t interval rather than a bootstrap because sweeps have 3-5 seeds, too few
for bootstrap quantiles. A claim **holds** when the interval's lower end is above ``min_effect``
(default 0), **does not hold** when its upper end is below it, and is **inconclusive** otherwise
(including fewer than 2 seeds).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal, Union

from pydantic import ConfigDict, Field, field_validator, model_validator

from mosaic.schema import StrictModel
from mosaic.plots import plot_claims
from mosaic.spec import load_spec
from mosaic.vocab import closest

VERDICTS = ("holds", "does not hold", "inconclusive")


class _Claim(StrictModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str | None = Field(None, description="a short name for the report (default: the claim's sentence)")
    paper: str | None = Field(None, description="the paper's statement this claim tests (or a key of the reproduce registry)")
    where: dict[str, Any] = Field(default_factory=dict, description="axis -> value|max|min: fix axes (others are averaged)")
    min_effect: float = Field(0.0, description="the effect must exceed this (in the effect's units) to hold")

    def columns(self) -> list[str]:
        raise NotImplementedError

    def axes(self) -> list[str]:
        raise NotImplementedError

    def selectors(self) -> list[tuple[str, dict]]:
        """``(field, {axis: value})`` of every selector the claim fixes axes with (``where``,
        ``from``, ``to``, ``a``, ``b``), for checking the values against the sweep's."""
        return [("where", self.where)]

    def sentence(self) -> str:
        raise NotImplementedError


class TrendClaim(_Claim):
    """``y`` decreases (or increases) with axis ``x``."""

    kind: Literal["decreases", "increases"]
    y: str
    x: str

    def columns(self):
        return [self.y]

    def axes(self):
        return [self.x, *self.where]

    def sentence(self):
        return f"{self.y} {self.kind} with {self.x}" + _where_text(self.where)


class DropSpec(StrictModel):
    """One drop: ``y`` at ``from`` minus ``y`` at ``to``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    y: str
    from_: dict[str, Any] = Field(alias="from")
    to: dict[str, Any]


class DropClaim(_Claim):
    """The drop of ``a`` exceeds the drop of ``b`` (of every ``b``)."""

    kind: Literal["drop_exceeds"]
    y: str | None = None
    than: list[str] | None = None
    x: str | None = None
    from_: Any = Field(None, alias="from")
    to: Any = None
    a: DropSpec | None = None
    b: list[DropSpec] | None = None

    @field_validator("than", "b", mode="before")
    @classmethod
    def _listify(cls, v):
        return [v] if isinstance(v, (str, dict)) else v

    @model_validator(mode="after")
    def _forms(self):
        short = [self.y, self.than, self.x]
        if self.a is None and self.b is None:
            if any(v is None for v in short) or self.from_ is None or self.to is None:
                raise ValueError("drop_exceeds needs either y, than, x, from, to (the short form) or a and b (two drops)")
            self.a = DropSpec(y=self.y, to={self.x: self.to}, **{"from": {self.x: self.from_}})
            self.b = [DropSpec(y=t, to={self.x: self.to}, **{"from": {self.x: self.from_}}) for t in self.than]
        elif self.a is None or not self.b:
            raise ValueError("drop_exceeds with two drops needs both a and b")
        elif any(v is not None for v in short):
            raise ValueError("drop_exceeds: give either y, than, x, from, to or a and b, not both")
        return self

    def columns(self):
        return [self.a.y] + [b.y for b in self.b]

    def selectors(self):
        drops = [("a", self.a)] + [(f"b[{i}]", b) for i, b in enumerate(self.b)]
        return [(f"{n}.{k}", getattr(d, f)) for n, d in drops for k, f in (("from", "from_"), ("to", "to"))] + [("where", self.where)]

    def axes(self):
        return list(dict.fromkeys([*self.a.from_, *self.a.to, *[k for b in self.b for k in (*b.from_, *b.to)], *self.where]))

    def sentence(self):
        if self.y is not None:
            return (f"the drop of {self.y} from the {_ext(self.from_)} to the {_ext(self.to)} {self.x} exceeds that of "
                    + " and of ".join(self.than) + _where_text(self.where))
        bs = " and ".join(_drop_text(b) for b in self.b)
        return f"the drop of {_drop_text(self.a)} exceeds that of {bs}" + _where_text(self.where)


class ExceedsClaim(_Claim):
    """``y`` at ``a`` exceeds ``y_b`` (default ``y``) at ``b``."""

    kind: Literal["exceeds"]
    y: str
    y_b: str | None = None
    a: dict[str, Any]
    b: dict[str, Any]

    def columns(self):
        return [self.y, self.y_b or self.y]

    def selectors(self):
        return [("a", self.a), ("b", self.b), ("where", self.where)]

    def axes(self):
        return list(dict.fromkeys([*self.a, *self.b, *self.where]))

    def sentence(self):
        return f"{self.y} at {_sel_text(self.a)} exceeds {self.y_b or self.y} at {_sel_text(self.b)}" + _where_text(self.where)


class AtLeastClaim(_Claim):
    """``y`` is at least ``value``."""

    kind: Literal["at_least"]
    y: str
    value: float

    def columns(self):
        return [self.y]

    def axes(self):
        return list(self.where)

    def sentence(self):
        return f"{self.y} is at least {self.value:g}" + _where_text(self.where)


Claim = Union[TrendClaim, DropClaim, ExceedsClaim, AtLeastClaim]
KINDS = {"decreases": TrendClaim, "increases": TrendClaim, "drop_exceeds": DropClaim, "exceeds": ExceedsClaim, "at_least": AtLeastClaim}


def _ext(v) -> str:
    return {"max": "largest", "min": "smallest"}.get(str(v), str(v))


def _sel_text(sel: dict) -> str:
    return ", ".join(f"{k} = {_ext(v)}" for k, v in sel.items()) or "every setting"


def _drop_text(d: DropSpec) -> str:
    return f"{d.y} from {_sel_text(d.from_)} to {_sel_text(d.to)}"


def _where_text(where: dict) -> str:
    return f" (at {_sel_text(where)})" if where else ""


# -- parsing -------------------------------------------------------------------------------------
_COL = r"([A-Za-z_][\w.\-]*)"
_SENTENCES = [
    (re.compile(rf"^{_COL}\s+(decreases|increases|falls|rises|grows)\s+(?:with|as)\s+{_COL}(?:\s+grows)?\.?$", re.I),
     lambda m: {"kind": {"falls": "decreases", "rises": "increases", "grows": "increases"}.get(m[2].lower(), m[2].lower()),
                "y": m[1], "x": m[3]}),
    (re.compile(rf"^the drop of {_COL} from the (largest|smallest) to the (largest|smallest) {_COL} exceeds that of "
                rf"((?:every one of )?{_COL}(?:\s*(?:,|and|and of)\s*{_COL})*)\.?$", re.I),
     lambda m: {"kind": "drop_exceeds", "y": m[1], "x": m[4], "from": "max" if m[2].lower() == "largest" else "min",
                "to": "max" if m[3].lower() == "largest" else "min",
                "than": [t for t in re.split(r"\s*(?:,|\band of\b|\band\b)\s*", re.sub(r"^every one of ", "", m[5], flags=re.I)) if t]}),
    (re.compile(rf"^{_COL} is at least (-?[0-9.]+)\.?$", re.I), lambda m: {"kind": "at_least", "y": m[1], "value": float(m[2])}),
]


def parse_sentence(text: str) -> dict:
    """The structured form of a claim sentence.

    Understood: ``"<y> decreases|increases with <x>"`` (also ``falls``/``rises``),
    ``"the drop of <y> from the largest|smallest to the largest|smallest <x> exceeds that of <z>[, <z2> and <z3>]"``,
    ``"<y> is at least <value>"``.

    Raises:
        ValueError: a sentence of none of these forms (lists them).
    """
    t = " ".join(str(text).split())
    for rx, build in _SENTENCES:
        m = rx.match(t)
        if m:
            return build(m)
    raise ValueError(f"claim {text!r} is not a sentence mosaic can read: write '<y> decreases with <x>', "
                     "'the drop of <y> from the largest to the smallest <x> exceeds that of <z>', '<y> is at least <v>', "
                     "or the structured form {kind: decreases, y: ..., x: ...}")


def parse_claim(raw: Any) -> Claim:
    """A claim from its structured form (a mapping with ``kind``) or a sentence.

    Raises:
        ValueError: an unknown kind (lists the kinds), a sentence that cannot be read, or invalid fields.
    """
    if isinstance(raw, (TrendClaim, DropClaim, ExceedsClaim, AtLeastClaim)):
        return raw
    if isinstance(raw, str):
        raw = parse_sentence(raw)
    if not isinstance(raw, dict) or "kind" not in raw:
        raise ValueError(f"a claim is a sentence or a mapping with 'kind' (one of {', '.join(KINDS)}), got {raw!r}")
    cls = KINDS.get(raw["kind"])
    if cls is None:
        close = closest(str(raw["kind"]), list(KINDS), cutoff=0.6)
        raise ValueError(f"claim kind {raw['kind']!r} is unknown: " + (f"did you mean {close!r}? " if close else "") + f"kinds: {', '.join(KINDS)}")
    return cls.model_validate(raw)


# -- validation against a sweep ----------------------------------------------------------------
def resolve_axis(name: str, axes: list[str]) -> str:
    """The axis ``name`` refers to: itself, the one axis ending with ``.name``, or the one axis
    holding ``name``'s dotted parts in a row (``distractors`` for ``spec.distractors.0.repeat.range``).

    Raises:
        ValueError: no axis, or several, match (names them and the closest).
    """
    if name in axes:
        return name
    hits = [a for a in axes if a.endswith("." + name)]
    if not hits:  # a run of the name's dotted parts inside the axis: "distractors" for spec.distractors.0.repeat.range
        part = name.split(".")
        hits = [a for a in axes if any(a.split(".")[i:i + len(part)] == part for i in range(len(a.split("."))))]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise ValueError(f"axis {name!r} is ambiguous: it ends {', '.join(hits)}; write the full name")

    close = closest(name, axes, cutoff=0.6)
    raise ValueError(f"axis {name!r} is not an axis of the sweep: " + (f"did you mean {close!r}? " if close else "") + f"axes: {', '.join(axes)}")


def claim_problems(claims: list[Claim], axes: list[str], columns: list[str] | None = None,
                   values: dict[str, list] | None = None) -> list[str]:
    """One message per axis (and, with ``columns``, results column) a claim names that the sweep
    does not have, and (with ``values``: axis -> the sweep's values of it) per selector value that
    is not ``max`` / ``min`` nor one of the axis's values (a misspelt ``condition: baselin`` would
    otherwise select no trial); the message names the claim (``report.claims[i]``), the name and
    the closest valid one."""

    out = []
    keys: dict[str, set] = {}  # axis -> the comparable keys of its values, computed once

    def short(v, n=60) -> str:
        t = repr(v)
        return t if len(t) <= n else t[:n] + "..."

    for i, c in enumerate(claims):
        for a in c.axes():
            try:
                resolve_axis(a, axes)
            except ValueError as e:
                out.append(f"report.claims[{i}] ({c.name or c.sentence()}): {e}")
        for field, sel in (c.selectors() if values is not None else []):
            for a, v in sel.items():
                try:
                    ax = resolve_axis(a, axes)
                except ValueError:
                    continue  # reported above
                if ax not in values or (isinstance(v, str) and v in ("max", "min")):
                    continue
                if ax not in keys:
                    keys[ax] = {_canon(x) for x in values[ax]}
                if _canon(v) not in keys[ax]:
                    shown = [str(_value(x)) for x in values[ax][:1000]]
                    close = closest(str(v)[:200], shown, cutoff=0.6)
                    listed = ", ".join(short(x, 40)[1:-1] if isinstance(x, str) else short(x, 40) for x in shown[:20])
                    more = f" and {len(values[ax]) - 20:,} more" if len(values[ax]) > 20 else ""
                    out.append(f"report.claims[{i}] ({short(c.name or c.sentence(), 120)}): {field}: {a} = {short(v)} is not a value of axis "
                               f"{ax!r}: " + (f"did you mean {close!r}? " if close else "") + f"its values: {listed}{more} (or max / min)")
        if columns is not None:
            for y in c.columns():
                if y not in columns:
                    close = closest(y, list(columns), cutoff=0.6)
                    out.append(f"report.claims[{i}] ({c.name or c.sentence()}): column {y!r} is not a results column of the sweep"
                               + (f": did you mean {close!r}?" if close else f"; columns: {', '.join(sorted(columns))}"))
    return out


# -- evaluation --------------------------------------------------------------------------------
def _canon(v) -> str:
    """A comparable key of an axis value, equal for ``[0, 2]`` from YAML and ``"[0, 2]"`` from a CSV."""
    if isinstance(v, str):
        import yaml

        try:
            v = yaml.safe_load(v)
        except yaml.YAMLError:
            return json.dumps(v)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, (list, tuple)):
        return json.dumps([json.loads(_canon(x)) for x in v])
    try:
        return json.dumps(v, sort_keys=True)
    except TypeError:
        return json.dumps(str(v))


def _value(v):
    return json.loads(_canon(v))


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


# -- report ------------------------------------------------------------------------------------
def sweep_axes(sweep: dict) -> tuple[list[str], dict[str, list]]:
    """A sweep's axes (``seed`` last) and each axis's values in file order, from its YAML mapping."""
    grid, zp = dict(sweep.get("grid") or {}), dict(sweep.get("zip") or {})
    return list(grid) + list(zp) + ["seed"], {**grid, **zp, "seed": list(sweep.get("seeds") or [])}


RAW = "raw"
"""Results columns ``<group>.raw.<metric>`` hold the evaluator's accuracy before abstention."""


def without_abstention(claim: Claim) -> Claim | None:
    """The same claim on the accuracy before abstention (every ``<group>.<metric>`` column read as
    ``<group>.raw.<metric>``), or None when it names no such column."""
    d = claim.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(claim, DropClaim) and claim.y is not None:  # the short form: rebuilt from a and b
        for k in ("y", "than", "x", "from", "to"):
            d.pop(k, None)
    changed = [False]

    def raw(col: str) -> str:
        parts = col.split(".")
        if len(parts) == 2 and parts[0] in ("seen", "held_out", "test"):
            changed[0] = True
            return f"{parts[0]}.{RAW}.{parts[1]}"
        return col

    for key in ("y", "y_b"):
        if isinstance(d.get(key), str):
            d[key] = raw(d[key])
    for key in ("a", "b"):
        items = d.get(key)
        if isinstance(items, dict) and "y" in items:
            items["y"] = raw(items["y"])
        elif isinstance(items, list):
            for it in items:
                it["y"] = raw(it["y"])
    d.pop("name", None)
    return parse_claim(d) if changed[0] else None


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


#: metrics of the seen / held-out table by trainer (besides the spec's concepts)
FAMILY_METRICS = {
    "diffusion": ["joint", "quality"],
    "classifier": ["joint"],
    "binding": ["object_accuracy", "object_accuracy_swap_scenes", "no_swap_fraction", "swap_accuracy", "concept_accuracy"],
}


def expected_columns(kind: str, concepts: list[str], objective: str | None = None,
                     domains: dict[str, list] | None = None) -> list[str]:
    """The results columns a sweep's trials will have (``metrics.*`` columns are not predicted:
    claims may name them freely): ``seen.`` / ``held_out.`` (+ ``test.`` for the transformer
    lab; diffusion scores a dataset without a holdout as ``seen``) + the concepts and the
    family's metrics (+ ``<group>.raw.*`` for diffusion), ``evaluator.joint``, ``time_s``,
    ``abstention.abstained``, ``abstention.verdicts_changed``, and for diffusion with ``domains``
    (concept -> values) ``value.<concept>.<value>`` (joint accuracy on the images of that value)."""
    fam = "diffusion" if kind == "diffusion" else (objective or "classifier")
    metrics = FAMILY_METRICS.get(fam, ["joint"])
    names = ([] if fam == "binding" else list(concepts)) + metrics
    # the diffusion lab scores generated images as seen / held-out only (a dataset without a
    # holdout: every image is seen); the transformer lab reports its test split as `test`
    groups = ("seen", "held_out") if kind == "diffusion" else ("seen", "held_out", "test")
    cols = [f"{g}.{m}" for g in groups for m in names]
    if kind == "diffusion":
        cols += [f"{g}.{RAW}.{m}" for g in groups for m in list(concepts) + ["joint"]]
        cols += ["abstention.abstained", "abstention.verdicts_changed"]
        cols += [f"value.{c}.{v}" for c, vals in (domains or {}).items() for v in vals]
    return cols + ["evaluator.joint", "time_s"]


def sweep_claim_problems(claims: list, trials: list[dict], kind: str) -> list[str]:
    """The problems of a sweep's claims against the columns its planned trials will have
    (:func:`expected_columns` of each distinct dataset spec; ``trials`` as from
    :func:`mosaic.sweep.plan`, with ``cfg``); ``metrics.*`` columns are not checked."""
    if not claims:
        return []
    from mosaic.lab.data import load_dataset_spec

    cols: set[str] = set()
    seen: set[str] = set()
    for t in trials:
        ds = t["cfg"].dataset
        key = json.dumps(ds.model_dump(mode="json"), sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        if ds.spec is not None:
            spec = load_dataset_spec(ds)
        else:
            spec = load_spec(ds.path)
        cols |= set(expected_columns(kind, list(spec.concepts), getattr(t["cfg"], "objective", None),
                                     {c: [str(v) for v in spec.domain(c)] for c in spec.concepts}))
    parsed = [parse_claim(c) for c in claims]
    axes = list(trials[0]["values"]) if trials else []
    unchecked = {y for c in parsed for y in c.columns() if y.startswith("metrics.")}
    return claim_problems(parsed, axes, sorted(cols | unchecked))


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
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    __import__("mosaic.io").io.atomic_write(out / "claims.json", json.dumps({"claims": results}, indent=2, default=str) + "\n")
    fig = plot_claims(results, out / "claims.png", title=f"{title}: effect and 95 % interval over seeds") if results else None
    name = fig.name if fig else None
    return name, claims_html(results, name)
