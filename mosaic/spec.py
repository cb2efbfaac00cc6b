"""The scene grammar: a YAML spec validated into a :class:`Spec` (pydantic, ``extra="forbid"``).

A spec says which **concepts** label a scene (each with a domain of values and a sampling
distribution), which **objects** a scene holds (templates whose attributes are fixed, bound to a
concept, or drawn from a set), which **distractors** add scene complexity, which spatial
constraints (pairwise **relations**, MOSAIC-style angle **positions**) hold, the image, the split
sizes and the **holdout** of combinations.

Units: sizes are the diameter of an object's circumscribed circle as a fraction of the image
side; distances and margins are fractions of the image side; angles are degrees, counter-clockwise
from the +x axis with y pointing up (as a viewer reads the image).

Every problem found in a spec is reported at once, each with its field path and a fix
(:class:`mosaic.errors.SpecError`).
"""


from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, TypeVar

from pydantic import ValidationError, model_validator

from mosaic.errors import SpecError
from mosaic.grammar import (  # re-exported: mosaic.spec is the public home of specs
    MAX_CANVAS, MAX_DOMAIN, MAX_GRID_CELLS, MAX_SPLIT, ROLES, AngleBins, Concept, Distribution, ImageSpec, LayoutSpec,
    ObjectTemplate, Position, Relation, Rule, SpecFields, Splits, Value,
)
from mosaic.cellsets import HELD_OUT
from mosaic.holdout_rules import grid_of
from mosaic.overrides import apply_overrides as _apply_overrides
from mosaic.overrides import read_yaml_file, validation_problems
from mosaic.splits import marginal_quotas, split_cells
from mosaic.scene3d import CAMERA_RELATIONS, MATERIALS, SOLIDS
from mosaic.vocab import RELATIONS, SHAPES, delta_e, unknown_name_message
from mosaic.kinds import check_kind
from mosaic.io import read_json

T = TypeVar("T")

__all__ = [
    "MAX_CANVAS", "MAX_DOMAIN", "MAX_GRID_CELLS", "MAX_SPLIT", "ROLES", "AngleBins", "Concept", "Distribution",
    "ImageSpec", "LayoutSpec", "ObjectTemplate", "Position", "Relation", "Rule", "SpecFields", "Splits", "Value",
    "Spec", "allowed_values", "template_sets", "repeat_bounds", "interchangeable", "SIZE_TOLERANCE", "MAX_COVER",
    "parse_spec", "read_yaml", "apply_overrides", "load_spec",
]


class Spec(SpecFields):
    """A complete, cross-checked dataset spec. Build it with :func:`load_spec` or
    :func:`parse_spec`; both raise :class:`~mosaic.errors.SpecError` listing every problem."""

    # the fields and their own checks are mosaic.grammar.SpecFields; this class adds the cross-checks

    @model_validator(mode="after")
    def _cross_check(self):
        problems = _cross_check(self)
        if problems:
            raise _CrossCheckFailed(problems)
        return self


class _CrossCheckFailed(ValueError):
    def __init__(self, problems):
        self.problems = problems
        super().__init__("; ".join(f"{p}: {m}" for p, m in problems))


# ----------------------------------------------------------------------------------------------
# Cross checks: everything a field validator cannot see alone
# ----------------------------------------------------------------------------------------------

def _template_paths(spec: Spec):
    for i, t in enumerate(spec.objects):
        yield f"objects[{i}]", t
    for i, t in enumerate(spec.distractors):
        yield f"distractors[{i}]", t


def allowed_values(spec: Spec, rule: Rule) -> list | tuple[float, float]:
    """Every value a rule can produce: a list, or a ``(lo, hi)`` tuple for a numeric range."""
    if rule.kind == "value":
        return [rule.value]
    if rule.kind == "concept":
        return spec.concepts[rule.concept].domain if rule.concept in spec.concepts else []
    if rule.kind == "choice":
        return list(rule.choice)
    return tuple(rule.range)


def _cross_check(spec: Spec) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    add = lambda path, msg: problems.append((path, msg))  # noqa: E731
    palette = spec.palette
    size_names = spec.size_names
    roles: dict[str, tuple[str, str]] = {}  # concept -> (role, first path)
    count_bindings: dict[str, list[str]] = {}

    def bind(concept: str, role: str, path: str):
        if concept not in spec.concepts:
            add(path, unknown_name_message("concept", concept, spec.concepts, " Declare it under concepts."))
            return False
        if concept in roles and roles[concept][0] != role:
            add(path, f"concept {concept!r} is used as a {role} here but as a {roles[concept][0]} at {roles[concept][1]}: use two concepts")
            return False
        roles.setdefault(concept, (role, path))
        return True

    def check_names(values, vocab, kind, path, hint):
        for v in values:
            if not isinstance(v, str) or v not in vocab:
                add(path, unknown_name_message(kind, v, vocab, hint))

    color_hint = " Or define it under colors: {name: [r, g, b]}."
    shaded = spec.image.renderer == "shaded"
    shape_vocab = {**SHAPES, **{k: None for k in SOLIDS}} if shaded else SHAPES
    solid_hint = "" if shaded else f" ({', '.join(SOLIDS)} are solids of the shaded renderer: add image.renderer: shaded)"
    relation_vocab = CAMERA_RELATIONS[spec.image.camera or "mosaic"] if shaded else RELATIONS
    relation_hint = (f" (camera {spec.image.camera or 'mosaic'}: in_front_of / behind are the clevr camera's, above / below "
                     "the flat and mosaic ones')") if shaded else " (in_front_of / behind need image.renderer: shaded and image.camera: clevr)"
    size_hint = " Or give a fraction of the image side, or define it under sizes: {name: fraction}."
    names = [t.name for t in spec.templates]
    for path, t in _template_paths(spec):
        if names.count(t.name) > 1:
            add(f"{path}.name", f"object name {t.name!r} is used twice: names must be unique")
        # shape
        r = t.shape
        if r.kind == "range":
            add(f"{path}.shape", "a shape cannot be a numeric range: give a name, {concept: C} or {choice: [...]}")
        elif r.kind == "concept":
            bind(r.concept, "shape", f"{path}.shape")
        else:
            check_names(allowed_values(spec, r), shape_vocab, "shape", f"{path}.shape", solid_hint)
        # material (shaded renderer only)
        r = t.material
        if r is not None:
            if not shaded:
                add(f"{path}.material", "a material needs the shaded renderer: add image.renderer: shaded, or drop material")
            elif r.kind == "range":
                add(f"{path}.material", "a material cannot be a numeric range: give rubber, metal, {concept: C} or {choice: [...]}")
            elif r.kind == "concept":
                bind(r.concept, "material", f"{path}.material")
            else:
                check_names(allowed_values(spec, r), MATERIALS, "material", f"{path}.material", "")
        # colour
        r = t.color
        if r.kind == "range":
            add(f"{path}.color", "a colour cannot be a numeric range: give a name, {concept: C} or {choice: [...]}")
        elif r.kind == "concept":
            bind(r.concept, "color", f"{path}.color")
        else:
            check_names(allowed_values(spec, r), palette, "colour", f"{path}.color", color_hint)
        # size
        r = t.size
        if r.kind == "concept":
            bind(r.concept, "size", f"{path}.size")
        else:
            vals = allowed_values(spec, r)
            for v in (vals if isinstance(vals, list) else list(vals)):
                _check_size(v, size_names, f"{path}.size", add, size_hint)
        # rotation
        r = t.rotation
        if r.kind == "concept":
            add(f"{path}.rotation", "rotation cannot be bound to a concept: give degrees, {choice: [...]} or {range: [lo, hi]}")
        elif r.kind in ("value", "choice") and not all(isinstance(v, (int, float)) for v in allowed_values(spec, r)):
            add(f"{path}.rotation", f"rotation must be degrees (numbers), got {allowed_values(spec, r)}")
        # repeat
        r = t.repeat
        if r.kind == "concept":
            if bind(r.concept, "count", f"{path}.repeat"):
                count_bindings.setdefault(r.concept, []).append(f"{path}.repeat")
        elif r.kind == "choice":
            add(f"{path}.repeat", "repeat takes an integer, {concept: C} or {range: [min, max]}")
        else:
            vals = allowed_values(spec, r)
            vals = list(vals) if isinstance(vals, tuple) else vals
            if not all(isinstance(v, int) or (isinstance(v, float) and v.is_integer()) for v in vals) or min(vals) < 0:
                add(f"{path}.repeat", f"repeat must be a whole number >= 0, got {vals}")

    single = {t.name for t in spec.objects if t.repeat.kind == "value" and t.repeat.value == 1}
    constrained: set[str] = set()

    def check_single(name, path):
        if name not in names:
            add(path, unknown_name_message("object", name, names, " Name an entry of objects."))
        elif name not in single:
            add(path, f"{name!r} must be an entry of objects with repeat 1 to take part in a relation or position")
        constrained.add(name)

    for i, rel in enumerate(spec.relations):
        p = f"relations[{i}]"
        check_single(rel.subject, f"{p}.subject")
        check_single(rel.object, f"{p}.object")
        if rel.subject == rel.object:
            add(p, f"subject and object are both {rel.subject!r}: relate two different objects")
        if rel.relation.kind == "concept":
            bind(rel.relation.concept, "relation", f"{p}.relation")
        elif rel.relation.kind == "value":
            check_names([rel.relation.value], relation_vocab, "relation", f"{p}.relation", relation_hint)
        else:
            add(f"{p}.relation", "a relation is a name or {concept: C}")

    for i, pos in enumerate(spec.positions):
        p = f"positions[{i}]"
        check_single(pos.target, f"{p}.target")
        check_single(pos.reference, f"{p}.reference")
        if pos.target == pos.reference:
            add(p, f"target and reference are both {pos.target!r}: use two different objects")
        if bind(pos.concept, "position", f"{p}.concept") and spec.concepts[pos.concept].angle_bins is None:
            add(f"concepts.{pos.concept}", "a position concept needs angle_bins: {n, width, gap, start}")

    # concept domains by role
    for cname, concept in spec.concepts.items():
        p = f"concepts.{cname}"
        if cname not in roles:
            if concept.angle_bins is not None:
                example = f"positions: [{{target: A, reference: B, concept: {cname}}}]"
            elif concept.values is not None and all(isinstance(v, str) and v in (*RELATIONS, "in_front_of", "behind") for v in concept.values):
                example = f"relations: [{{subject: A, relation: {{concept: {cname}}}, object: B}}]"
            elif concept.range is not None:
                example = f"repeat: {{concept: {cname}}} on an object"
            else:
                example = f"color: {{concept: {cname}}} on an object"
            add(p, f"concept {cname!r} is not used: bind it (e.g. {example}) or remove it")
            continue
        role = roles[cname][0]
        dom = concept.domain
        if concept.angle_bins is not None and role != "position":
            add(p, f"angle_bins define position classes, but {cname!r} is used as a {role}")
            continue
        if role == "color":
            check_names(dom, palette, "colour", f"{p}.values", color_hint)
        elif role == "shape":
            check_names(dom, shape_vocab, "shape", f"{p}.values", solid_hint)
        elif role == "size":
            for v in dom:
                _check_size(v, size_names, f"{p}.values", add, size_hint)
        elif role == "count":
            if not all(isinstance(v, int) and v >= 1 for v in dom):
                add(f"{p}.values", f"a count concept takes whole numbers >= 1, got {dom}")
            if len(count_bindings.get(cname, [])) > 1:
                add(p, f"count concept {cname!r} is bound to several repeats ({count_bindings[cname]}): use one concept each")
        elif role == "relation":
            check_names(dom, relation_vocab, "relation", f"{p}.values", relation_hint)
        elif role == "material":
            check_names(dom, MATERIALS, "material", f"{p}.values", "")

    # background against object colours
    bg = spec.image.background
    if isinstance(bg, str) and bg not in palette:
        add("image.background", unknown_name_message("colour", bg, palette, color_hint))
    elif not problems:
        bg_rgb = spec.background_rgb()
        for path, t in _template_paths(spec):
            for c in allowed_values(spec, t.color):
                if c in palette and delta_e(palette[c], bg_rgb) < 12.0:
                    add(f"{path}.color", f"colour {c!r} is too close to the background {bg!r} (Delta E < 12): "
                        "objects would be invisible; change image.background or the colour")

    _check_splits(spec, add)
    if not problems:
        spec._roles = {c: r for c, (r, _) in roles.items()}
        _check_distinguishable(spec, constrained, add)
        _check_room(spec, add)
    if not problems and spec.holdout is not None:
        _check_holdout(spec, add)
    if not problems:
        _check_quotas(spec, add)
    return problems


def _check_quotas(spec: Spec, add):
    """Every value of every concept outside the grid must get training samples.

    The rule for ``splits.train`` (the same with or without a holdout): 0 means no training split
    (a dataset for evaluation only); any other number must give every value, and with a holdout
    every seen combination, at least one training sample."""
    if not spec.splits.train:
        return
    grid = set(spec.holdout.concepts) if spec.holdout is not None else set()
    for name, c in spec.concepts.items():
        if name in grid:
            continue
        q = marginal_quotas(spec, "train", name)
        if q.min() == 0:
            lost = [v for v, n in zip(c.domain, q) if n == 0]
            add("splits.train", (
                f"splits.train = {spec.splits.train} gives no training sample to value(s) {lost} of concept {name!r} "
                f"under its distribution: raise splits.train (to at least {len(c.domain)}, more for skewed distributions) "
                "or flatten the distribution (splits.train is 0, for no training split, or gives every value a training sample)"
            ))


def _check_splits(spec: Spec, add):
    sp = spec.splits
    if spec.holdout is None:
        for k in ("test_id", "test_ood"):
            if getattr(sp, k) is not None:
                add(f"splits.{k}", f"{k} needs a holdout: without one use splits.test, or add a holdout section")
        if sp.test is None:
            sp.test = 100
    else:
        if sp.test is not None:
            add("splits.test", "with a holdout the test splits are test_id (seen combinations) and test_ood (held-out): rename test")
        sp.test_id = 100 if sp.test_id is None else sp.test_id
        sp.test_ood = 100 if sp.test_ood is None else sp.test_ood
    sizes = {k: getattr(sp, k) for k in sp.names()}
    if not any(sizes.values()):
        add("splits", f"every split is 0 ({', '.join(f'{k}: {n}' for k, n in sizes.items())}): a dataset needs at least one "
            "sample; set splits.train (e.g. 1000) and the test split(s)")


def _check_holdout(spec: Spec, add):
    h = spec.holdout
    ok = True
    for n, c in enumerate(h.concepts):
        if c not in spec.concepts:
            add(f"holdout.concepts[{n}]", unknown_name_message("concept", c, spec.concepts, " Name concepts of the spec."))
            ok = False
    if len(set(h.concepts)) != len(h.concepts):
        add("holdout.concepts", f"{h.concepts} names a concept twice")
        ok = False
    if not ok:
        return
    cells = 1
    for c in h.concepts:
        cells *= len(spec.concepts[c].domain)
    if cells > MAX_GRID_CELLS:  # bound before build_grid allocates one cell per combination
        add("holdout.concepts", f"{' x '.join(str(len(spec.concepts[c].domain)) for c in h.concepts)} = {cells:,} combinations: "
            f"a combination grid holds at most {MAX_GRID_CELLS:,}; hold out over fewer concepts or smaller domains")
        return
    grid = grid_of(h, [spec.concepts[c].domain for c in h.concepts], spec.seed)
    for p in grid.problems:
        add(*p)
    if grid.problems:
        return
    spec._grid = grid
    n_held = grid.count(HELD_OUT)
    if n_held == 0 and spec.splits.test_ood:
        add("splits.test_ood", f"the holdout rule holds out no combination, so test_ood = {spec.splits.test_ood} cannot be filled: set it to 0")
    if not spec.splits.train:  # no training split (a dataset for evaluation only): nothing to cover
        return
    cells, quotas = split_cells(spec, "train")
    if len(cells) and quotas.min() == 0:
        empty = [grid.values_of(c) for c, q in zip(cells, quotas) if q == 0]
        add("splits.train", (
            f"splits.train = {spec.splits.train} leaves {len(empty)} of {len(cells)} seen combinations without a training "
            f"sample (e.g. {list(empty[0])}): raise splits.train to at least {len(cells)} (or more with skewed "
            "distributions), or use splits.per: combination (splits.train is 0, for no training split, or gives every seen "
            "combination a training sample)"
        ))


def _check_size(v, size_names, path, add, hint):
    if isinstance(v, str):
        if v not in size_names:
            add(path, unknown_name_message("size", v, size_names, hint))
    elif not isinstance(v, (int, float)) or not 0 < v <= 1:
        add(path, f"size {v!r} must be a fraction of the image side in (0, 1] (e.g. 0.15)")


def template_sets(spec: Spec, t: ObjectTemplate) -> tuple[set, set, tuple[float, float]]:
    """(possible shapes, possible colours, (min size, max size) as fractions) of a template."""
    shapes = set(allowed_values(spec, t.shape))
    colors = set(allowed_values(spec, t.color))
    sv = allowed_values(spec, t.size)
    fr = [spec.size_fraction(v) for v in (sv if isinstance(sv, list) else list(sv))]
    return shapes, colors, (min(fr), max(fr))


def repeat_bounds(spec: Spec, t: ObjectTemplate) -> tuple[int, int]:
    """(min, max) number of objects a template puts in a scene."""
    vals = allowed_values(spec, t.repeat)
    vals = list(vals) if isinstance(vals, tuple) else vals
    return int(min(vals)), int(max(vals))


SIZE_TOLERANCE = 0.15  # relative: two size sets closer than this cannot be told apart in an image


def interchangeable(spec: Spec, a: ObjectTemplate, b: ObjectTemplate) -> bool:
    """Two templates whose objects look alike; labels order them left to right."""
    return template_sets(spec, a) == template_sets(spec, b)


def _check_distinguishable(spec: Spec, constrained: set[str], add):
    paths = dict((t.name, p) for p, t in _template_paths(spec))
    ts = spec.templates
    for i in range(len(ts)):
        for j in range(i + 1, len(ts)):
            a, b = ts[i], ts[j]
            sa, ca, za = template_sets(spec, a)
            sb, cb, zb = template_sets(spec, b)
            if not (sa & sb) or not (ca & cb):
                continue
            if za[1] * (1 + SIZE_TOLERANCE) < zb[0] or zb[1] * (1 + SIZE_TOLERANCE) < za[0]:
                continue
            ok = (
                interchangeable(spec, a, b)
                and not spec.is_distractor(a.name) and not spec.is_distractor(b.name)
                and repeat_bounds(spec, a) == (1, 1) == repeat_bounds(spec, b)
                and a.name not in constrained and b.name not in constrained
            )
            if not ok:
                add(paths[b.name], (
                    f"{b.name!r} and {a.name!r} ({paths[a.name]}) can have the same shape, colour and size, so labels "
                    "cannot tell their objects apart in an image: give them a different fixed shape or colour, "
                    f"disjoint colour/shape sets, or sizes more than {int(SIZE_TOLERANCE * 100)}% apart"
                ))


MAX_COVER = 0.5  # fraction of the frame the object disks may cover at most


def _check_room(spec: Spec, add):
    gap = spec.layout.min_gap
    side_px = spec.image.size
    total, parts = 0.0, []
    for path, t in _template_paths(spec):
        _, _, (zmin, zmax) = template_sets(spec, t)
        if zmax + 2 * gap > 1.0:
            add(f"{path}.size", f"size {zmax:g} plus layout.min_gap {gap:g} on both sides does not fit in the frame: use a size <= {1 - 2 * gap:g}")
        if zmin * side_px < 3:
            add(f"{path}.size", f"size {zmin:g} is {zmin * side_px:.1f} px at image.size {side_px}: use a size >= {3 / side_px:.3f} or a larger image")
        n = repeat_bounds(spec, t)[1]
        area = n * math.pi * ((zmax + gap) / 2) ** 2
        total += area
        if n:
            parts.append(f"{path}.repeat up to {n} x size {zmax:g}")
    if total > MAX_COVER:
        add("objects", (
            f"cannot lay out the largest scene: {', '.join(parts)} with layout.min_gap {gap:g} cover {total:.0%} of the "
            f"image, more than the {MAX_COVER:.0%} a random layout can fill; lower the repeat counts, sizes or min_gap"
        ))


# ----------------------------------------------------------------------------------------------
# Loading, overrides
# ----------------------------------------------------------------------------------------------

def _loc_path(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after[_cross_check()]",):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def parse_spec(data: Any, source: str | None = None) -> Spec:
    """Validate spec data (a dict as from YAML) into a :class:`Spec`.

    Raises:
        SpecError: listing every problem as ``(field path, message)``.
    """
    if not isinstance(data, dict):
        raise SpecError(f"a spec is a YAML mapping (name:, concepts:, objects: ...), got {type(data).__name__}", source)
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        def own(err):
            exc = (err.get("ctx") or {}).get("error")
            return exc.problems if isinstance(exc, _CrossCheckFailed) else None

        def path_of(loc):
            return _loc_path([p for p in loc if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "tuple[int, int, int]")))])

        uniq = validation_problems(e, path_of, own, model=Spec)
        raise SpecError(uniq, source) from None


def _spec_error(path: str, message: str) -> SpecError:
    return SpecError([(path, message)] if path == "--set" else message, None if path == "--set" else path)


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file. Raises SpecError naming the file, line and column of a syntax error."""
    return read_yaml_file(path, _spec_error, kind="spec file")


def apply_overrides(data: dict, overrides: list[str] | None) -> dict:
    """Apply ``key.path=value`` overrides to raw spec data (a deep copy is returned).

    The value is parsed as YAML (``3``, ``0.5``, ``red``, ``[1, 2]``); list items are addressed
    by index (``objects.0.size=0.2``). Raises SpecError for a malformed override or a path through a
    missing list index or a scalar.
    """
    return _apply_overrides(data, overrides, _spec_error)


def load_spec(path: str | Path, overrides: list[str] | None = None) -> Spec:
    """Read, override and validate a spec: a YAML file, or a generated dataset (its directory or
    its ``manifest.json``), whose resolved spec is used.

    Paths are relative to the current directory.

    Raises:
        SpecError: YAML syntax errors (with line and column) and every validation problem; the
            message says when ``--set`` overrides were applied.
    """
    path = Path(path)
    manifest = path / "manifest.json" if path.is_dir() else path
    if manifest.name == "manifest.json" and manifest.is_file():
        try:
            data = read_json(manifest)
        except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested too deep (mosaic.io.read_json)
            raise SpecError(f"{manifest} is damaged ({type(e).__name__}: {str(e)[:120]}): restore it from a copy, or regenerate the "
                            f"dataset with `mosaic generate SPEC --out {manifest.parent} --overwrite`", str(manifest)) from None
        data = data.get("spec") if isinstance(data, dict) else None
        if not isinstance(data, dict):
            raise SpecError(f"{manifest} holds no spec: is it a mosaic dataset manifest? If it is damaged, restore it from a copy or regenerate the dataset with --overwrite", str(manifest))
    elif manifest.name == "manifest.json" and manifest.is_dir():
        raise SpecError(f"{manifest} is damaged (a folder stands where the manifest file belongs): restore the file from a copy, "
                        f"or regenerate the dataset with `mosaic generate SPEC --out {manifest.parent} --overwrite`", str(manifest))
    elif path.is_dir():
        what = ("a sweep folder (it holds sweep.yaml; its trials name their datasets under trials/*/config.yaml)"
                if (path / "sweep.yaml").is_file() else
                "a run folder (it holds config.yaml; its dataset is the one config.yaml names)" if (path / "config.yaml").is_file()
                else "a directory without manifest.json")
        raise SpecError(f"{path} is {what}: give a spec YAML file or a mosaic dataset", str(path))
    else:
        data = read_yaml(path)

        check_kind(data, "spec", str(path), lambda m: SpecError(m, str(path)))
    if isinstance(data, dict):
        data = apply_overrides(data, overrides)
    source = str(path) + (f" (with --set {' '.join(overrides)})" if overrides else "")
    return parse_spec(data, source=source)


def per_spec(build: Callable[[Spec], T], size: int = 64) -> Callable[[Spec], T]:
    """``spec -> build(spec)``, cached per spec object (by identity, the object kept alive beside its
    value so an id is never reused for another spec); at most ``size`` are kept, the oldest dropped.
    For plans derived once per spec (labels, record lines)."""
    cache: dict[int, tuple[Spec, T]] = {}

    def get(spec: Spec) -> T:
        hit = cache.get(id(spec))
        if hit is not None and hit[0] is spec:
            return hit[1]
        if len(cache) >= size:
            cache.pop(next(iter(cache)))
        value = build(spec)
        cache[id(spec)] = (spec, value)
        return value

    get.__doc__ = f"The {getattr(build, '__name__', 'plan')} of a spec, built once per spec object (:func:`mosaic.spec.per_spec`)."
    return get
