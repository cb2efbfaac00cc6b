"""Claims a sweep tests: their forms, parsing, and checks against the sweep's axes and columns.

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

Checking a claim on a sweep's results (the effect per seed, its 95 % interval over seeds, the
verdict) is :mod:`mosaic.verdicts`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Literal, Mapping, Union

from pydantic import ConfigDict, Field, field_validator, model_validator

from mosaic.evaluation.cell_sets import cell_set_problems
from mosaic.overrides import load_yaml_text
from mosaic.schema import StrictModel
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


# -- axis values -------------------------------------------------------------------------------
#: a number in exponent form that YAML 1.1 reads as text (no dot, or no sign): ``1e-3``, ``1.5e3``
_EXPONENT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")


def _canon(v) -> str:
    """A comparable key of an axis value, equal for ``[0, 2]`` from YAML and ``"[0, 2]"`` from a CSV."""
    if isinstance(v, str) and _EXPONENT.fullmatch(v.strip()):  # "1e-3": YAML 1.1 text, the number 0.001 to every config reader
        v = float(v)
    if isinstance(v, str):
        try:  # bounded as every user YAML text is: a value that is a "billion laughs" or 100,000-deep YAML text hung or
            # crashed `mosaic sweep` (and `report` on a results table holding one); such a value stays the text it is
            v = load_yaml_text(v, "an axis value", lambda where, msg: ValueError(msg))
        except ValueError:
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


# -- the same claims before abstention ---------------------------------------------------------
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


#: metrics of the seen / held-out table by trainer (besides the spec's concepts)
FAMILY_METRICS = {
    "diffusion": ["joint", "quality"],
    "classifier": ["joint"],
    "binding": ["object_accuracy", "object_accuracy_swap_scenes", "no_swap_fraction", "swap_accuracy", "concept_accuracy"],
}


def expected_columns(kind: str, concepts: list[str], objective: str | None = None,
                     domains: dict[str, list] | None = None, cells: Iterable[str] = (),
                     grid_concepts: Iterable[str] = ()) -> list[str]:
    """The results columns a sweep's trials will have (``metrics.*`` columns are not predicted:
    claims may name them freely): ``seen.`` / ``held_out.`` (+ ``test.`` for the transformer
    lab; diffusion scores a dataset without a holdout as ``seen``) + the concepts and the
    family's metrics (+ ``<group>.raw.*`` for diffusion), ``evaluator.joint``, ``time_s``,
    ``abstention.abstained``, ``abstention.verdicts_changed``, and for diffusion with ``domains``
    (concept -> values) ``value.<concept>.<value>`` (joint accuracy on the images of that value), and for
    each name of ``cells`` (the sweep's ``report.cells``) ``cells.<name>.joint`` / ``.n`` / ``.held_out`` /
    ``.<concept>`` of ``grid_concepts`` (:mod:`mosaic.evaluation.cell_sets`)."""
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
        cols += [f"cells.{n}.{m}" for n in cells for m in ["joint", "n", "held_out", *grid_concepts]]
    return cols + ["evaluator.joint", "time_s"]


def sweep_claim_problems(claims: list, trials: list[dict], kind: str, cells: Mapping | None = None) -> list[str]:
    """The problems of a sweep's claims against the columns its planned trials will have
    (:func:`expected_columns` of each distinct dataset spec; ``trials`` as from
    :func:`mosaic.trials.plan`, with ``cfg``); ``metrics.*`` columns are not checked. With
    ``cells`` (the sweep's ``report.cells``: name -> holdout rule), also each cell set's problems
    on every distinct spec's holdout grid (:func:`mosaic.evaluation.cell_sets.cell_set_problems`)."""
    if not claims and not cells:
        return []
    from mosaic.lab.data import load_dataset_spec

    cols: set[str] = set()
    seen: set[str] = set()
    cell_problems: list[str] = []
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
        grid_concepts = list(spec.holdout.concepts) if spec.holdout is not None else []
        if cells and kind != "diffusion":
            cell_problems.append("report.cells: scored for diffusion sweeps only (from the generated images' per-combination scores)")
        elif cells and not grid_concepts:
            cell_problems.append(f"report.cells: spec {spec.name!r} has no holdout grid to take the cells from: give it a holdout (rule none scores every cell)")
        elif cells:
            cell_problems += [p for p in cell_set_problems(cells, grid_concepts, [spec.domain(c) for c in grid_concepts])
                              if p not in cell_problems]
        cols |= set(expected_columns(kind, list(spec.concepts), getattr(t["cfg"], "objective", None),
                                     {c: [str(v) for v in spec.domain(c)] for c in spec.concepts}, cells or (), grid_concepts))
    parsed = [parse_claim(c) for c in claims]
    axes = list(trials[0]["values"]) if trials else []
    unchecked = {y for c in parsed for y in c.columns() if y.startswith("metrics.")}
    return cell_problems + claim_problems(parsed, axes, sorted(cols | unchecked))

