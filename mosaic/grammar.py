"""The scene grammar's models: the sections of a spec (concepts, distributions, object templates,
relations, positions, image, layout, splits), each validated on its own, and :class:`SpecFields`,
the fields of a whole spec.

The cross-checks between fields, and loading, are :mod:`mosaic.spec` (the public home of specs:
every name here is importable from it); this module sits below :mod:`mosaic.splits` and
:mod:`mosaic.holdout`, which read a spec's fields.

Units: sizes are the diameter of an object's circumscribed circle as a fraction of the image
side; distances and margins are fractions of the image side; angles are degrees, counter-clockwise
from the +x axis with y pointing up (as a viewer reads the image).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

import numpy as np
from pydantic import Field, PrivateAttr, field_validator, model_serializer, model_validator

from mosaic.cellsets import HELD_OUT, SEEN, Grid
from mosaic.holdout_rules import Holdout
from mosaic.schema import SafeName, Seed, StrictModel
from mosaic.spec_names import MAX_NAME, RESERVED_CONCEPTS, _names_problem, name_problem  # noqa: F401 (public here too)
from mosaic.vocab import COLORS, SIZES

Value = str | int | float


def domain_index(domain: list, value) -> int | None:
    """Index of ``value`` in a concept's ``domain`` when it is that value, else None.

    A number (int or float, numpy's too, never a bool) matches an equal numeric value (3 and 3.0
    are the count 3); a string matches the same string (``"0-18"``). Nothing is converted: JSON
    keeps 3 a number and "0-18" a string, so a record whose count is ``true`` (``True == 1`` in
    Python) or ``"1"`` is damaged or foreign, and every reader (scoring, training conditioning)
    refuses it by name instead of taking it for the count 1.
    """
    if value is None or isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, str):
        return next((k for k, d in enumerate(domain) if isinstance(d, str) and d == value), None)
    if not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    return next((k for k, d in enumerate(domain)
                 if isinstance(d, (int, float)) and not isinstance(d, bool) and d == value), None)
ROLES = ("color", "shape", "size", "count", "position", "relation", "material")


#: bounds on user numbers that size memory, checked before anything is allocated (docs/faults.md, "What is rejected")
MAX_SPLIT = 10_000_000     # samples per split (the split plan holds an index table per split)
MAX_DOMAIN = 10_000        # values per concept
MAX_GRID_CELLS = 1_000_000  # combinations in a holdout's grid
MAX_CANVAS = 8192          # image.size x image.supersample, px a side of the drawing canvas


# ----------------------------------------------------------------------------------------------
# Distributions
# ----------------------------------------------------------------------------------------------


class Distribution(StrictModel):
    """Sampling distribution over a concept's values, in domain order.

    ``uniform``; ``geometric`` (weight of the k-th value = ``ratio**k``; MOSAIC's skew is
    ratio 0.8, head/tail about 7.5 over ten values, Jeong et al. 2026 old ``data.py``); ``zipf``
    (weight ``1/(k+1)**exponent``); ``weights`` (explicit, one per value). ``reverse: true`` flips
    the order, so the tail value becomes the head. Written as a bare string for ``uniform``.
    """

    kind: Literal["uniform", "geometric", "zipf", "weights"] = "uniform"
    ratio: float | None = Field(None, gt=0, description="geometric decay per value")
    exponent: float | None = Field(None, ge=0, description="Zipf exponent s")
    weights: list[float] | None = None
    reverse: bool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v):
        if isinstance(v, str):
            return {"kind": v}
        return v

    @model_validator(mode="after")
    def _params(self):
        need = {"geometric": "ratio", "zipf": "exponent", "weights": "weights"}.get(self.kind)
        for name in ("ratio", "exponent", "weights"):
            if name == need and getattr(self, name) is None:
                raise ValueError(f"distribution kind {self.kind!r} needs the field {name!r}")
            if name != need and getattr(self, name) is not None:
                raise ValueError(f"field {name!r} does not apply to distribution kind {self.kind!r}")
        if self.weights is not None:
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        return self

    def probabilities(self, n: int) -> np.ndarray:
        """Probabilities ``[n]`` float64 (sum 1) over a domain of ``n`` values, in domain order."""
        k = np.arange(n, dtype=np.float64)
        if self.kind == "uniform":
            w = np.ones(n)
        elif self.kind == "geometric":
            w = float(self.ratio) ** k
        elif self.kind == "zipf":
            w = 1.0 / (k + 1.0) ** float(self.exponent)
        else:
            w = np.asarray(self.weights, dtype=np.float64)
        if self.reverse:
            w = w[::-1]
        return w / w.sum()


# ----------------------------------------------------------------------------------------------
# Concepts
# ----------------------------------------------------------------------------------------------


class AngleBins(StrictModel):
    """MOSAIC-style position classes: ``n`` angle bins of ``width`` degrees separated by ``gap``.

    Bin k covers ``[start + k*(width+gap), start + k*(width+gap) + width)`` degrees. MOSAIC uses
    n=10, width=18, gap=18, start=0 (Jeong et al. 2026, ``dataset_generators.py``). Sampling keeps
    ``margin`` degrees away from each bin edge so labels stay unambiguous.
    """

    n: int = Field(ge=2, le=72)
    width: float = Field(gt=0, le=360)
    gap: float = Field(0.0, ge=0)
    start: float = 0.0
    margin: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _fits(self):
        if self.n * (self.width + self.gap) > 360.0 + 1e-9:
            raise ValueError(
                f"{self.n} bins of width {self.width} + gap {self.gap} need {self.n * (self.width + self.gap)} degrees, "
                "more than 360: lower n, width or gap"
            )
        if 2 * self.margin >= self.width:
            raise ValueError(f"margin {self.margin} leaves nothing of a {self.width}-degree bin: use margin < width/2")
        return self

    def bins(self) -> list[tuple[float, float]]:
        """``[(lo, hi)]`` degrees of each bin, lo in [0, 360)."""
        step = self.width + self.gap
        return [((self.start + k * step) % 360.0, (self.start + k * step) % 360.0 + self.width) for k in range(self.n)]

    def names(self) -> list[str]:
        """Value names of the bins, e.g. ``"36-54"``."""
        return [f"{lo:g}-{hi:g}" for lo, hi in self.bins()]

    def bin_of(self, angle_deg: float) -> int | None:
        """Index of the bin holding ``angle_deg`` (any real), or None when it falls in a gap."""
        a = angle_deg % 360.0
        for k, (lo, hi) in enumerate(self.bins()):
            if lo <= a < hi or lo <= a + 360.0 < hi:
                return k
        return None

    def nearest(self, angle_deg: float) -> int:
        """Index of the bin holding ``angle_deg``, or else of the bin whose nearer edge is closest
        (a forced choice, as a classifier trained on the bins reads an angle in a gap: MOSAIC scores
        position with a 10-way classifier). Ties go to the lower index."""
        k = self.bin_of(angle_deg)
        if k is not None:
            return k
        a = angle_deg % 360.0

        def dist(lo_hi):
            lo, hi = lo_hi
            return min(abs((a - lo + 180.0) % 360.0 - 180.0), abs((a - hi + 180.0) % 360.0 - 180.0))

        return min(range(self.n), key=lambda i: dist(self.bins()[i]))


#: How a read angle becomes a position value: ``strict`` (an angle in a gap between bins is
#: unreadable, the labels' rule) or ``nearest`` (the nearest bin, a classifier's forced choice).
POSITION_BINS = ("strict", "nearest")


class Concept(StrictModel):
    """A factor of variation that labels scenes.

    Give the domain as exactly one of ``values`` (a list of names or integers), ``range``
    (inclusive integer bounds, for counts) or ``angle_bins`` (position classes). What the values
    mean follows from where the concept is bound (an object's colour, shape, size or repeat count,
    a relation, or a position).
    """

    values: list[Value] | None = None
    range: tuple[int, int] | None = None
    angle_bins: AngleBins | None = None
    distribution: Distribution = Field(default_factory=Distribution)

    @model_validator(mode="after")
    def _one_domain(self):
        given = [k for k in ("values", "range", "angle_bins") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of values, range, angle_bins (got {given or 'none'})")
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError(f"range min {self.range[0]} > max {self.range[1]}: swap them")
        if self.range is not None and self.range[1] - self.range[0] + 1 > MAX_DOMAIN:  # before domain lists it
            raise ValueError(f"range {list(self.range)} holds {self.range[1] - self.range[0] + 1:,} values: a concept has at most "
                             f"{MAX_DOMAIN:,}; narrow the range")
        if self.values is not None and len(self.values) > MAX_DOMAIN:
            raise ValueError(f"{len(self.values):,} values: a concept has at most {MAX_DOMAIN:,}")
        if self.values is not None:
            if not self.values:
                raise ValueError("values is empty: list at least one value")
            if len({type(v) for v in self.values}) > 1:
                raise ValueError(f"values mix types ({self.values}): use all names or all integers")
            if len(set(self.values)) != len(self.values):
                raise ValueError(f"values repeat an entry: {self.values}")
        n = len(self.domain)
        if self.distribution.kind == "weights" and len(self.distribution.weights) != n:
            raise ValueError(f"distribution has {len(self.distribution.weights)} weights for {n} values: give one per value")
        with np.errstate(all="ignore"):
            p = self.distribution.probabilities(n)
        if not np.all(np.isfinite(p)) or (self.distribution.kind in ("geometric", "zipf") and p.min() <= 0):
            if self.distribution.kind == "weights":
                raise ValueError("the weights overflow when summed: scale them down (only their ratios matter)")
            what = f"ratio {self.distribution.ratio}" if self.distribution.kind == "geometric" else f"exponent {self.distribution.exponent}"
            raise ValueError(f"distribution {self.distribution.kind} with {what} gives some of the {n} values probability 0 "
                             "(floating-point underflow or overflow): use a ratio nearer 1 or a smaller exponent")
        return self

    @property
    def domain(self) -> list[Value]:
        """The values, in order (the order distributions and combination grids use)."""
        if self.values is not None:
            return list(self.values)
        if self.range is not None:
            return list(range(self.range[0], self.range[1] + 1))
        return self.angle_bins.names()

    def probabilities(self) -> np.ndarray:
        """Sampling probabilities ``[len(domain)]`` float64."""
        return self.distribution.probabilities(len(self.domain))


# ----------------------------------------------------------------------------------------------
# Attribute rules
# ----------------------------------------------------------------------------------------------


class Rule(StrictModel):
    """How an object attribute is chosen: a fixed ``value``, bound to a ``concept``, drawn uniformly
    from a ``choice`` list, or drawn uniformly from a numeric ``range``.

    YAML: ``color: red`` (fixed), ``color: {concept: color}``, ``color: {choice: [red, blue]}``,
    ``rotation: {range: [0, 360]}``, ``repeat: {range: [0, 8]}``.
    """

    value: str | int | float | None = None
    concept: str | None = None
    choice: list[str | int | float] | None = None
    range: tuple[float, float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v):
        if isinstance(v, (str, int, float)) and not isinstance(v, bool):
            return {"value": v}
        if isinstance(v, (dict, Rule)):
            return v
        hint = " (a list: did you mean {choice: [A, B]} or {range: [LO, HI]}?)" if isinstance(v, (list, tuple)) else ""
        raise ValueError(f"not a rule{hint}: give a value (e.g. red or 0.4), or one of {{concept: NAME}}, "
                         "{choice: [A, B]}, {range: [LO, HI]}")

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("value", "concept", "choice", "range") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of a value, concept, choice, range (got {given or 'none'})")
        if self.choice is not None and not self.choice:
            raise ValueError("choice is empty: list at least one option")
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError(f"range min {self.range[0]} > max {self.range[1]}: swap them")
        return self

    @property
    def kind(self) -> str:
        for k in ("value", "concept", "choice", "range"):
            if getattr(self, k) is not None:
                return k
        raise AssertionError

    @model_serializer(mode="wrap")
    def _ser(self, handler):
        if self.value is not None:
            return self.value
        return {k: v for k, v in handler(self).items() if v is not None}


class ObjectTemplate(StrictModel):
    """One object (or a group of ``repeat`` identical-rule objects) of every scene.

    Attributes are :class:`Rule` s. ``repeat`` is an integer, ``{concept: C}`` (counting: the
    number of objects is a label) or ``{range: [min, max]}`` (uniform, e.g. distractors).
    Objects of one template share a concept-bound value; ``choice`` and ``range`` draw per object.
    """

    name: str = Field(min_length=1)
    shape: Rule
    color: Rule
    size: Rule = Field(default_factory=lambda: Rule(value="medium"))
    rotation: Rule = Field(default_factory=lambda: Rule(value=0.0))
    repeat: Rule = Field(default_factory=lambda: Rule(value=1))
    material: Rule | None = Field(None, description=(
        "surface of the object's solids: rubber (matte) or metal (mirror-like); a name, {concept: C} (CLEVR's material "
        "concept) or {choice: [rubber, metal]}. Needs image.renderer: shaded; unset = rubber"))


class Relation(StrictModel):
    """A pairwise spatial relation ``subject <relation> object``.

    ``relation`` is one of left_of / right_of / above / below, or ``{concept: C}``. The relation
    holds when the centre offset along its axis exceeds the offset along the other axis by at least
    ``margin`` (fraction of the image side), so at most one relation holds for a pair.
    """

    subject: str
    relation: Rule
    object: str
    margin: float = Field(0.05, ge=0, le=0.5)


class Position(StrictModel):
    """A MOSAIC position class: the angle of ``target`` around ``reference`` is binned by the
    ``angle_bins`` of ``concept``. ``distance`` bounds the centre-to-centre distance (fraction of
    the image side); its minimum defaults to the two radii plus ``layout.min_gap``.
    """

    target: str
    reference: str
    concept: str
    distance: tuple[float, float] | None = None

    @field_validator("distance")
    @classmethod
    def _dist(cls, v):
        if v is not None and not (0 <= v[0] <= v[1]):
            raise ValueError(f"distance {list(v)} must satisfy 0 <= min <= max")
        return v


class ImageSpec(StrictModel):
    """Square image: ``size`` pixels a side, ``background`` colour (name or [r, g, b]),
    ``supersample`` factor for anti-aliasing (draw at size*supersample, box-reduce)."""

    size: int = Field(64, ge=8, le=2048)
    background: str | tuple[int, int, int] = "dark_slate"
    supersample: int = Field(4, ge=1, le=16)
    renderer: Literal["flat", "shaded"] | None = Field(None, description=(
        "flat (the default: anti-aliased 2-D shapes) or shaded (ray-cast 3-D solids on a ground plane with lamps, shadows "
        "and materials; docs/rendering-3d.md). With shaded, background is the ground plane's colour and supersample the "
        "rays per pixel side (2 is a good choice)"))
    camera: Literal["clevr", "mosaic"] | None = Field(None, description=(
        "shaded renderer's camera preset: clevr (oblique, CLEVR's camera and lamps with their per-image jitter; relations "
        "left_of/right_of/in_front_of/behind) or mosaic (MOSAIC's overhead camera, fixed; relations left_of/right_of/above/"
        "below). Unset = mosaic"))
    camera_jitter: float | None = Field(None, ge=0, le=2, description=(
        "per-image camera position jitter, uniform in +-this per axis (world units; the ground square is 6 a side). "
        "Unset = the preset's (clevr 0.5, CLEVR's; mosaic 0)"))
    light_jitter: float | None = Field(None, ge=0, le=4, description=(
        "per-image jitter of each lamp's position, uniform in +-this per axis (world units). Unset = the preset's "
        "(clevr 1.0, CLEVR's; mosaic 0)"))

    @field_validator("renderer")
    @classmethod
    def _flat_is_default(cls, v):
        return None if v == "flat" else v  # flat is the default: the same resolved spec and fingerprint as leaving it out

    @model_validator(mode="after")
    def _shaded_fields(self):
        if self.renderer != "shaded":
            for name in ("camera", "camera_jitter", "light_jitter"):
                if getattr(self, name) is not None:
                    raise ValueError(f"image.{name} applies to the shaded renderer only: add image.renderer: shaded or drop image.{name}")
        return self

    @model_validator(mode="after")
    def _canvas(self):
        if self.size * self.supersample > MAX_CANVAS:
            raise ValueError(f"image.size {self.size} x image.supersample {self.supersample} = {self.size * self.supersample} px: the "
                             f"drawing canvas is at most {MAX_CANVAS} px a side; lower image.supersample")
        return self

    @field_validator("background")
    @classmethod
    def _bg(cls, v):
        if isinstance(v, tuple) and not all(0 <= c <= 255 for c in v):
            raise ValueError(f"background {list(v)} must be three integers 0-255")
        return v


class LayoutSpec(StrictModel):
    """Bounded layout search: ``min_gap`` between object disks and the frame (fraction of the
    side), ``max_tries`` proposals per object, ``max_restarts`` whole-scene restarts."""

    min_gap: float = Field(0.02, ge=0, le=0.5)
    max_tries: int = Field(200, ge=1, le=100_000)
    max_restarts: int = Field(50, ge=1, le=10_000)
    min_visible_fraction: float | None = Field(None, ge=0, le=1, description=(
        "shaded renderer: the least fraction of each object's silhouette that must stay visible in the instance mask "
        "(CLEVR's occlusion check); a scene that fails is laid out again. Unset = 0.25"))
    objects_min_visible_fraction: float | None = Field(None, ge=0, le=1, description=(
        "shaded renderer: the least visible fraction of the spec's objects (those the labels describe), where it should "
        "differ from the distractors' min_visible_fraction, e.g. so that a labelled material stays readable. Unset = "
        "min_visible_fraction"))
    min_visible_pixels: int | None = Field(None, ge=0, le=1_000_000, description=(
        "shaded renderer: the least number of visible pixels of each object in the instance mask (CLEVR asks 200 of "
        "320 x 240). Unset = 8"))
    visibility_retries: int | None = Field(None, ge=1, le=10_000, description=(
        "shaded renderer: whole-scene layouts tried before a scene whose objects stay hidden is an error. Unset = 50"))


class Splits(StrictModel):
    """Samples per split.

    Without a holdout the splits are ``train``/``val``/``test``; with one, ``train``/``val``
    (seen combinations), ``test_id`` (seen, fresh samples) and ``test_ood`` (held-out only).
    ``per: total`` (default) makes each number a split total, spread over its combinations (so the
    total stays fixed as the held-out fraction changes); ``per: combination`` makes it a count per
    combination. ``balanced_tests`` keeps test splits uniform over values when concepts are skewed.
    """

    train: int = Field(1000, ge=0, le=MAX_SPLIT)
    val: int = Field(100, ge=0, le=MAX_SPLIT)
    test: int | None = Field(None, ge=0, le=MAX_SPLIT)
    test_id: int | None = Field(None, ge=0, le=MAX_SPLIT)
    test_ood: int | None = Field(None, ge=0, le=MAX_SPLIT)
    per: Literal["total", "combination"] = "total"
    balanced_tests: bool = True

    def names(self) -> list[str]:
        """The split names in use, in generation order."""
        return [k for k in ("train", "val", "test", "test_id", "test_ood") if getattr(self, k) is not None]


class SpecFields(StrictModel):
    """A spec's fields, each validated on its own. The cross-checks between them (names bound to
    concepts, quotas, the holdout's grid, room in the frame) are :class:`mosaic.spec.Spec`'s, the
    class every spec is: build one with :func:`mosaic.spec.load_spec` or
    :func:`mosaic.spec.parse_spec`."""

    name: SafeName = Field(description="dataset name; generated datasets go to <root>/<name>-<fingerprint> (no '/', '..')")
    description: str = ""
    seed: Seed = 0
    image: ImageSpec = Field(default_factory=ImageSpec)
    colors: dict[str, tuple[int, int, int]] = Field(default_factory=dict, description="user colours, sRGB 0-255")
    sizes: dict[str, float] = Field(default_factory=dict, description="user size names, fraction of the side")
    concepts: dict[str, Concept] = Field(default_factory=dict)
    objects: list[ObjectTemplate] = Field(min_length=1)
    distractors: list[ObjectTemplate] = Field(default_factory=list)
    relations: list[Relation] = Field(default_factory=list)
    positions: list[Position] = Field(default_factory=list)
    layout: LayoutSpec = Field(default_factory=LayoutSpec)
    splits: Splits = Field(default_factory=Splits)
    holdout: Holdout | None = None

    _roles: dict[str, str] = PrivateAttr(default_factory=dict)
    _grid: Any = PrivateAttr(default=None)
    _fp: str | None = PrivateAttr(default=None)

    @field_validator("concepts")
    @classmethod
    def _concept_names(cls, v):
        why = _names_problem(v, "concept name", concept=True)
        for name, c in v.items():
            why = why or _names_problem(c.values or [], f"concept {name!r}: value")
        if why:
            raise ValueError(why)
        return v

    @field_validator("objects", "distractors")
    @classmethod
    def _object_names(cls, v, info):
        """Object names (relations and positions name objects by them): one text each, and no two that look one."""
        known = [t.name for t in info.data.get("objects") or []] if info.field_name == "distractors" else []
        if (why := _names_problem([t.name for t in v], "object name", known=known)) is not None:
            raise ValueError(why)
        return v

    @field_validator("colors")
    @classmethod
    def _colors(cls, v):
        if (why := _names_problem(v, "colour name", known=COLORS)) is not None:
            raise ValueError(why)
        for name, rgb in v.items():
            if not all(0 <= c <= 255 for c in rgb):
                raise ValueError(f"colour {name!r}: {list(rgb)} must be three integers 0-255")
        return v

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, v):
        if (why := _names_problem(v, "size name", known=SIZES)) is not None:
            raise ValueError(why)
        for name, s in v.items():
            if not 0 < s <= 1:
                raise ValueError(f"size {name!r}: {s} must be a fraction of the image side in (0, 1]")
        return v

    # -- vocabulary -----------------------------------------------------------------------------
    @property
    def palette(self) -> dict[str, tuple[int, int, int]]:
        """Every colour name this spec can use -> sRGB (built-ins plus ``colors``)."""
        return {**COLORS, **{k: tuple(v) for k, v in self.colors.items()}}

    @property
    def size_names(self) -> dict[str, float]:
        return {**SIZES, **self.sizes}

    def rgb(self, color: str) -> tuple[int, int, int]:
        """sRGB of a colour name. Raises KeyError for unknown names (validation prevents them)."""
        return self.palette[color]

    def background_rgb(self) -> tuple[int, int, int]:
        bg = self.image.background
        return tuple(bg) if not isinstance(bg, str) else self.palette[bg]

    def size_fraction(self, v: str | float) -> float:
        """A size value (a name or a number) as a fraction of the image side."""
        return float(self.size_names[v]) if isinstance(v, str) else float(v)

    # -- structure ------------------------------------------------------------------------------
    @property
    def roles(self) -> dict[str, str]:
        """Concept name -> role (``color``, ``shape``, ``size``, ``count``, ``position``, ``relation``)."""
        return dict(self._roles)

    @property
    def templates(self) -> list[ObjectTemplate]:
        """Objects then distractors, the order labels and scene graphs use."""
        return list(self.objects) + list(self.distractors)

    def template(self, name: str) -> ObjectTemplate:
        for t in self.templates:
            if t.name == name:
                return t
        raise KeyError(name)

    def is_distractor(self, name: str) -> bool:
        return any(t.name == name for t in self.distractors)

    def domain(self, concept: str) -> list[Value]:
        return self.concepts[concept].domain

    @property
    def grid(self) -> Grid | None:
        """The holdout's :class:`~mosaic.cellsets.Grid` (None without a holdout)."""
        return self._grid

    def split_sizes(self) -> dict[str, int]:
        """Split name -> number of samples, in generation order (``per: combination`` multiplied out)."""
        out = {}
        for name in self.splits.names():
            n = getattr(self.splits, name)
            if self.holdout is not None and self.splits.per == "combination" and name != "test":
                n *= self._grid.count(HELD_OUT if name == "test_ood" else SEEN)
            out[name] = int(n)
        return out

    # -- serialisation --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The resolved spec (defaults filled in) as JSON-ready data."""
        return self.model_dump(mode="json", exclude_none=True)

    def fingerprint(self) -> str:
        """:func:`fingerprint_of` the resolved spec (computed once: a validated spec is not meant to be
        mutated; derive a new one with :func:`apply_overrides`)."""
        if self._fp is None:
            self._fp = fingerprint_of(self.to_dict())
        return self._fp


def fingerprint_of(spec_data: dict) -> str:
    """sha256 (16 hex digits) of the canonical JSON of resolved spec data (sorted keys, no spaces),
    followed, where the concepts are not in sorted order, by their order: sampling draws the concepts
    in that order, so two specs that differ only in it make other datasets and must not share a
    fingerprint (nor the caches keyed by it). A spec whose concepts are in sorted order keeps the
    fingerprint it always had."""
    text = json.dumps(spec_data, sort_keys=True, separators=(",", ":"))
    concepts = spec_data.get("concepts") if isinstance(spec_data, dict) else None
    if isinstance(concepts, dict) and list(concepts) != sorted(concepts):
        text += "\nconcept order:" + json.dumps(list(concepts))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
