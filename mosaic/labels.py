"""``labels(scene)``: concept values and captions as a pure function of a scene graph.

The generator applies it to the scenes it samples, and the evaluator to the scene graphs it
parses from images, so ground truth and measurement cannot drift (DESIGN.md). Labels never read
``SceneObject.template``: objects are matched to the spec's templates by what an image shows
(shape and colour, then size), and look-alike templates are ordered left to right.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mosaic.scene import Scene, SceneObject, angle_deg
from mosaic.spec import ObjectTemplate, Spec, Value, allowed_values, interchangeable, per_spec, template_sets
from mosaic.vocab import number_word, plural


@dataclass
class LabelReading:
    """Concept values read from a scene; a value is None when the scene does not show it, and
    ``problems`` says why (e.g. ``"count: found 4 objects of 'ball'"``)."""

    values: dict[str, Value | None]
    groups: dict[str, list[int]]  # template name -> object indices
    problems: list[str] = field(default_factory=list)


class _Plan:
    """What labels need of a spec, computed once per spec object (a validated spec is not mutated,
    :meth:`mosaic.spec.Spec.fingerprint`): template sets, the templates an object's look can match,
    each concept's role and template, domains and size fractions."""

    def __init__(self, spec: Spec):
        self.templates = spec.templates
        self.names = [t.name for t in self.templates]
        self.sets = [template_sets(spec, t) for t in self.templates]
        self.looks: dict[tuple, list[int]] = {}  # (shape, colour) -> candidate template indices, filled as met
        self.roles = list(spec.roles.items())
        self.domains = {c: spec.domain(c) for c in spec.concepts}
        self.domain_sets = {c: set(d) for c, d in self.domains.items()}
        self.fractions = {}  # size concept -> [(value, fraction)] in domain order
        self.template_of: dict[str, ObjectTemplate] = {}  # concept of a colour / shape / size / count / material role -> template
        for cname, role in self.roles:
            if role in ("color", "shape", "size", "count", "material"):
                attr = "repeat" if role == "count" else role
                self.template_of[cname] = next(t for t in self.templates if (r := getattr(t, attr)) is not None
                                               and r.kind == "concept" and r.concept == cname)
            if role == "size":
                self.fractions[cname] = [(v, spec.size_fraction(v)) for v in self.domains[cname]]

    def candidates(self, shape, color) -> list[int]:
        key = (shape, color)
        c = self.looks.get(key)
        if c is None:
            c = self.looks[key] = [k for k, (sh, co, _) in enumerate(self.sets) if shape in sh and color in co]
        return c


#: the :class:`_Plan` of a spec, built once per spec object
_plan = per_spec(_Plan)


def assign_templates(scene: Scene, spec: Spec) -> tuple[dict[str, list[int]], list[int]]:
    """Match each object to the template that could have produced it.

    Returns ``(groups, unmatched)``: template name -> object indices (left to right within a group
    of look-alike templates), and the indices no template explains.
    """
    plan = _plan(spec)
    sets, names = plan.sets, plan.names
    groups: dict[str, list[int]] = {n: [] for n in names}
    unmatched: list[int] = []
    pending: dict[tuple, list[int]] = {}  # look-alike template names -> objects
    looks = plan.looks
    for i, o in enumerate(scene.objects):
        cand = looks.get((o.shape, o.color))
        if cand is None:
            cand = plan.candidates(o.shape, o.color)
        if len(cand) == 1:  # one template has this look (most objects): no size to compare
            groups[names[cand[0]]].append(i)
            continue
        if len(cand) > 1:
            # templates told apart by size only: take the nearest size interval
            def dist(k):
                lo, hi = sets[k][2]
                return 0.0 if lo <= o.size <= hi else min(abs(o.size - lo), abs(o.size - hi)) / max(hi, 1e-9)
            best = min(dist(k) for k in cand)
            cand = [k for k in cand if dist(k) == best]
        if not cand:
            unmatched.append(i)
        elif len(cand) == 1:
            groups[names[cand[0]]].append(i)
        else:
            key = tuple(names[k] for k in cand)
            pending.setdefault(key, []).append(i)
    for tnames, idx in pending.items():
        idx = sorted(idx, key=lambda i: (scene.objects[i].center[0], scene.objects[i].center[1]))
        for name, i in zip(tnames, idx):
            groups[name].append(i)
        unmatched.extend(idx[len(tnames):])
    return groups, sorted(unmatched)


def _nearest_size(spec: Spec, domain: list, size: float) -> Value:
    return min(domain, key=lambda v: abs(spec.size_fraction(v) - size))


def _nearest_of(fractions: list[tuple], size: float) -> Value:
    """:func:`_nearest_size` over precomputed ``[(value, fraction)]`` (the first nearest, as ``min``)."""
    best, bd = None, None
    for v, f in fractions:
        d = abs(f - size)
        if bd is None or d < bd:
            best, bd = v, d
    return best


def read_labels(scene: Scene, spec: Spec, position_bins: str = "strict") -> LabelReading:
    """Every concept's value in ``scene``, with the reason for each value that cannot be read.

    ``position_bins`` (:data:`mosaic.grammar.POSITION_BINS`): ``strict`` reads an angle in a gap
    between a position concept's bins as unreadable (the rule labels are made by); ``nearest``
    reads it as the nearest bin (what a classifier trained on the bins answers; the evaluator's
    option, never the generator's)."""
    return _read_labels(scene, spec, assign_templates(scene, spec), position_bins)


def _read_labels(scene: Scene, spec: Spec, assigned: tuple[dict[str, list[int]], list[int]],
                 position_bins: str = "strict") -> LabelReading:
    """:func:`read_labels` given the scene's :func:`assign_templates` (computed once per scene by the generator)."""
    plan = _plan(spec)
    groups, unmatched = assigned
    values: dict[str, Value | None] = {}
    problems: list[str] = []
    if unmatched:
        problems.append(f"{len(unmatched)} object(s) match no template of the spec")
    objs = scene.objects

    def one(name: str, concept: str) -> SceneObject | None:
        idx = groups.get(name, [])
        if len(idx) != 1:
            problems.append(f"{concept}: found {len(idx)} objects of {name!r}, expected 1")
            return None
        return objs[idx[0]]

    for cname, role in plan.roles:
        values[cname] = None
        if role in ("color", "shape", "size", "count", "material"):
            t = plan.template_of[cname]
            idx = groups[t.name]
            if role == "count":
                values[cname] = len(idx)
                if len(idx) not in plan.domain_sets[cname]:
                    problems.append(f"{cname}: found {len(idx)} objects of {t.name!r}, not a value of the concept")
                continue
            if not idx:
                problems.append(f"{cname}: no object of {t.name!r} found")
                continue
            if role == "size":
                vals = {_nearest_of(plan.fractions[cname], objs[i].size) for i in idx}
            else:
                vals = {getattr(objs[i], role) for i in idx}
            if len(vals) > 1:
                problems.append(f"{cname}: objects of {t.name!r} disagree ({sorted(map(str, vals))})")
                continue
            values[cname] = vals.pop()
        elif role == "position":
            pos = next(p for p in spec.positions if p.concept == cname)
            tgt, ref = one(pos.target, cname), one(pos.reference, cname)
            if tgt is None or ref is None:
                continue
            bins = spec.concepts[cname].angle_bins
            a = angle_deg(ref, tgt)
            k = bins.nearest(a) if position_bins == "nearest" else bins.bin_of(a)
            if k is None:
                problems.append(f"{cname}: angle {a:.1f} degrees falls between bins")
            else:
                values[cname] = bins.names()[k]
        elif role == "relation":
            rel = next(r for r in spec.relations if r.relation.kind == "concept" and r.relation.concept == cname)
            s, o = one(rel.subject, cname), one(rel.object, cname)
            if s is None or o is None:
                continue
            r = scene.relation_of(s, o)
            if r is None or r not in plan.domain_sets[cname]:
                problems.append(f"{cname}: relation of {rel.subject!r} to {rel.object!r} is {r}, not a value of the concept")
            else:
                values[cname] = r
    return LabelReading(values, groups, problems)


def labels(scene: Scene, spec: Spec) -> dict[str, Value | None]:
    """Concept name -> value of ``scene`` (None where the scene does not show a value)."""
    return read_labels(scene, spec).values


def _noun_phrase(objs: list[SceneObject], spec: Spec, size_concept: str | None = None) -> str:
    """``"a red circle"``, ``"three red circles"``, ``"two red circles and a blue square"``."""
    if not objs:
        return "no objects"
    kinds: dict[tuple, int] = {}
    for o in objs:
        # a solid's material is a word of its own, CLEVR's order: "a large red metal sphere"
        key = (o.color, o.shape) if getattr(o, "material", None) is None else (f"{o.color} {o.material}", o.shape)
        kinds[key] = kinds.get(key, 0) + 1
    parts = []
    for (color, shape), n in kinds.items():
        size_word = ""
        if size_concept is not None:
            sv = _nearest_of(_plan(spec).fractions[size_concept], objs[0].size)
            size_word = f"{sv} " if isinstance(sv, str) else f"size-{sv:g} "
        rest = f"{size_word}{color} {shape if n == 1 else plural(shape)}"
        parts.append(f"{_article(rest) if n == 1 else number_word(n)} {rest}")
    return _join(parts)


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def caption(scene: Scene, spec: Spec) -> str:
    """A caption of the scene's labelled content, built from its scene graph.

    Positions read ``"a red circle at 36-54 degrees from a brown circle"``, relations ``"a blue
    square left of a red circle"``, other objects ``"three red circles"``. Distractors are left out.
    """
    return _caption(scene, spec, assign_templates(scene, spec)[0])


def _merged(spec: Spec, plan: _Plan, used: frozenset) -> list[list[str]]:
    """The objects' templates not in ``used``, look-alike ones merged (cached per ``used`` set)."""
    key = ("merged", used)
    m = plan.looks.get(key)
    if m is None:
        m = []
        for name in [t.name for t in spec.objects if t.name not in used]:
            for g in m:
                if interchangeable(spec, spec.template(g[0]), spec.template(name)):
                    g.append(name)
                    break
            else:
                m.append([name])
        plan.looks[key] = m
    return m


def _caption(scene: Scene, spec: Spec, groups: dict[str, list[int]]) -> str:
    """:func:`caption` given the scene's template groups (:func:`assign_templates`)."""
    objs = scene.objects

    def np_(name):
        t = spec.template(name)
        sc = t.size.concept if t.size.kind == "concept" else None
        return _noun_phrase([objs[i] for i in groups[name]], spec, sc)

    parts, used = [], set()
    for pos in spec.positions:
        g_t, g_r = groups[pos.target], groups[pos.reference]
        if len(g_t) == 1 and len(g_r) == 1:
            bins = spec.concepts[pos.concept].angle_bins
            k = bins.bin_of(angle_deg(objs[g_r[0]], objs[g_t[0]]))
            where = f"at {bins.names()[k]} degrees from" if k is not None else "near"
            parts.append(f"{np_(pos.target)} {where} {np_(pos.reference)}")
            used |= {pos.target, pos.reference}
    for rel in spec.relations:
        g_s, g_o = groups[rel.subject], groups[rel.object]
        if len(g_s) == 1 and len(g_o) == 1:
            r = scene.relation_of(objs[g_s[0]], objs[g_o[0]])
            words = (r or "near").replace("_", " ")
            parts.append(f"{np_(rel.subject)} {words} {np_(rel.object)}")
            used |= {rel.subject, rel.object}
    # templates that share a look (a free scene's objects) are described together
    for m in _merged(spec, _plan(spec), frozenset(used)):
        idx = [i for name in m for i in groups[name]]
        t = spec.template(m[0])
        sc = t.size.concept if t.size.kind == "concept" else None
        parts.append(_noun_phrase([objs[i] for i in idx], spec, sc))
    return _join(parts) if parts else "an empty scene"


__all__ = ["LabelReading", "assign_templates", "read_labels", "labels", "caption", "allowed_values"]
