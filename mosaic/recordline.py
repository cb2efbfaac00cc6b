"""The record of a generated flat scene and its JSON line, written once per scene from a plan
compiled once per spec (issue 27).

:func:`record_line` gives what :func:`mosaic.records.sample_line` returns, byte for byte: the
labels (a pure function of the scene, read as :func:`mosaic.labels.read_labels` reads them), the
caption (:func:`mosaic.labels.caption`), the scene graph (:meth:`mosaic.scene.Scene.to_dict`) and
``json.dumps(record, sort_keys=True)``. Nothing is built as a dict to be encoded: the line is
joined from text.

What repeats across scenes is computed once and looked up (bounded caches, :data:`CACHE_MAX`
entries each): per spec, each concept's reader, the positions, relations and merged templates of
the caption with their size concepts; per combination of concept values, the JSON text of
``combination``, ``concepts``, ``held_out`` and ``labels``; per look and pose of an object
(colour, rgb, shape, template, rotation, size), the extremes of its rotated unit polygon and the
JSON text after its centre (keyed by value, so rotation and size must be floats; a sampled
rotation is in ``[0, 360)``, never ``-0.0``); per noun phrase (colour, shape, count, size word),
its words; per number of objects, the JSON text of every relation. Of an object only the centre
(and so its box) is written anew.

Bounding boxes: :meth:`mosaic.scene.SceneObject.bbox` takes the minimum over the vertices of
``cx + r * a_k`` with ``a_k = ux * cos - uy * sin``. With ``r >= 0``, float multiplication by
``r`` and addition of ``cx`` are monotonic (correctly rounded), so that minimum is
``cx + r * min(a_k)``, the same float; only the extremes of ``a_k`` are kept per pose. A circle's
``cx - r`` is ``cx + r * -1.0`` exactly.

Whatever this fast path does not cover returns None, and the caller builds the record the general
way (:mod:`mosaic.records`): a scene that is not a flat :class:`~mosaic.scene.Scene`, a concept
role without a reader here (material), labels that do not read back cleanly (the general way
words the problem), numbers that are not finite floats or ints.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _json_str

from mosaic.hf import labels_of
from mosaic.holdout import combination_of, is_held_out
from mosaic.labels import _merged, _nearest_of, _plan as _label_plan, assign_templates
from mosaic.scene import Scene, angle_deg, relation
from mosaic.spec import Spec, per_spec
from mosaic.vocab import SHAPES, number_word, plural

#: most entries a cache of a plan holds (past that, misses are computed and not kept)
CACHE_MAX = 100_000
#: most poses (look, rotation, size) a plan keeps (a free rotation makes most of them new)
POSES = 20_000

_COLOR, _SHAPE, _SIZE, _COUNT, _POSITION, _RELATION = range(6)
_REL_NAMES = ("left_of", "right_of", "above", "below")
_CIRCLE = (-1.0, 1.0, -1.0, 1.0)


def extents(shape: str, rotation: float) -> tuple[float, float, float, float]:
    """``(min a, max a, min b, max b)`` over the unit vertices of ``shape`` rotated by ``rotation``
    degrees (``a = ux cos - uy sin``, ``b = ux sin + uy cos``, the floats of
    :meth:`~mosaic.scene.SceneObject.vertices`); ``(-1, 1, -1, 1)`` for a circle."""
    unit = SHAPES[shape]
    if unit is None:
        return _CIRCLE
    a = math.radians(-rotation)
    ca, sa = math.cos(a), math.sin(a)
    xs = [ux * ca - uy * sa for ux, uy in unit]
    ys = [ux * sa + uy * ca for ux, uy in unit]
    return min(xs), max(xs), min(ys), max(ys)


def box(o, side: int, ext: tuple[float, float, float, float]) -> tuple[int, int, int, int]:
    """:meth:`mosaic.scene.SceneObject.bbox` of ``o`` from its :func:`extents` ``ext``."""
    r = o.size / 2.0 * side
    cx, cy = o.center[0] * side, o.center[1] * side
    x0, y0 = math.floor(cx + r * ext[0]), math.floor(cy + r * ext[2])
    x1, y1 = math.ceil(cx + r * ext[1]), math.ceil(cy + r * ext[3])
    return max(0, x0), max(0, y0), min(side, x1), min(side, y1)


def _bin(bins: list[tuple[float, float]], angle: float) -> int | None:
    """:meth:`mosaic.spec.AngleBins.bin_of` over the bins' precomputed ``(lo, hi)``."""
    a = angle % 360.0
    for k, (lo, hi) in enumerate(bins):
        if lo <= a < hi or lo <= a + 360.0 < hi:
            return k
    return None


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


class LinePlan:
    """What :func:`record_line` needs of one spec, and its caches (see the module docstring)."""

    def __init__(self, spec: Spec):
        lp = _label_plan(spec)
        self.spec, self.lp = spec, lp
        fast = spec.image.renderer != "shaded"

        def size_of(name):  # the size concept's (value, fraction) list of a template, or None
            nonlocal fast
            t = spec.template(name)
            if t.size.kind != "concept":
                return None
            if t.size.concept not in lp.fractions:
                fast = False
                return None
            return t.size.concept, lp.fractions[t.size.concept]

        self.readers = []  # (concept, kind, template name(s), what the kind needs)
        for cname, role in lp.roles:
            if role in ("color", "shape", "size", "count"):
                kind = {"color": _COLOR, "shape": _SHAPE, "size": _SIZE, "count": _COUNT}[role]
                arg = lp.fractions[cname] if role == "size" else lp.domain_sets[cname] if role == "count" else None
                self.readers.append((cname, kind, lp.template_of[cname].name, arg))
            elif role == "position":
                pos = next(p for p in spec.positions if p.concept == cname)
                bins = spec.concepts[cname].angle_bins
                self.readers.append((cname, _POSITION, (pos.target, pos.reference), (bins.bins(), bins.names())))
            elif role == "relation":
                rel = next(r for r in spec.relations if r.relation.kind == "concept" and r.relation.concept == cname)
                self.readers.append((cname, _RELATION, (rel.subject, rel.object), lp.domain_sets[cname]))
            else:  # material (a flat scene has none) or a role without a reader: the general way
                fast = False
        self.positions = []
        for p in spec.positions:
            bins = spec.concepts[p.concept].angle_bins
            self.positions.append((p.target, p.reference, bins.bins(), bins.names(), size_of(p.target), size_of(p.reference)))
        self.relations = [(r.subject, r.object, size_of(r.subject), size_of(r.object)) for r in spec.relations]
        self.fast = fast
        self.merged: dict[tuple, list] = {}  # positions / relations described -> [(template names, size)]
        self.values: dict[tuple, tuple] = {}
        self.phrases: dict[tuple, str] = {}
        self.size_words: dict[tuple, str] = {}
        self.looks: dict[tuple, tuple[tuple, str]] = {}  # look and pose -> (extents, text)
        self.look_text: dict[tuple, tuple[str, str, str]] = {}  # look -> JSON text around rotation and size
        self.rel_text: dict[int, list] = {}
        self.json_text: dict = {}

    # -- labels ---------------------------------------------------------------------------------
    def read(self, objs: list, groups: dict[str, list[int]]) -> dict | None:
        """The concept values :func:`mosaic.labels._read_labels` reads when it finds no problem;
        None where it would find one (or might: the general reading then decides)."""
        values = {}
        for cname, kind, name, arg in self.readers:
            if kind <= _SIZE:
                idx = groups[name]
                if not idx:
                    return None
                if kind == _SIZE:
                    v = _nearest_of(arg, objs[idx[0]].size)
                    for i in idx[1:]:
                        if _nearest_of(arg, objs[i].size) != v:
                            return None
                else:
                    attr = "color" if kind == _COLOR else "shape"
                    v = getattr(objs[idx[0]], attr)
                    for i in idx[1:]:
                        if getattr(objs[i], attr) != v:
                            return None
                values[cname] = v
            elif kind == _COUNT:
                n = len(groups[name])
                if n not in arg:
                    return None
                values[cname] = n
            else:
                a, b = groups.get(name[0], ()), groups.get(name[1], ())
                if len(a) != 1 or len(b) != 1:
                    return None
                if kind == _POSITION:
                    k = _bin(arg[0], angle_deg(objs[b[0]], objs[a[0]]))
                    if k is None:
                        return None
                    values[cname] = arg[1][k]
                else:
                    r = relation(objs[a[0]], objs[b[0]])
                    if r is None or r not in arg:
                        return None
                    values[cname] = r
        return values

    def value_text(self, values: dict) -> tuple:
        """``(text before the file name's number, text between the file name and the index, text
        of labels, labels, combination, held_out)`` of a combination of concept values."""
        key = tuple(values.values())
        hit = self.values.get(key)
        if hit is not None:
            return hit
        spec = self.spec
        combo = combination_of(spec, values)
        combination = [str(v) for v in combo] if combo is not None else None
        held = is_held_out(spec, values)
        labels = labels_of(spec, values)
        d = json.dumps
        hit = (f'"combination": {d(combination)}, "concepts": {d(values, sort_keys=True)}, "file_name": "images/',
               f'.png", "held_out": {d(held)}, "index": ', f', "labels": {d(labels, sort_keys=True)}, ', labels, combination, held)
        if len(self.values) < CACHE_MAX:
            self.values[key] = hit
        return hit

    # -- caption --------------------------------------------------------------------------------
    def phrase(self, objs: list, idx: list[int], size) -> str:
        """:func:`mosaic.labels._noun_phrase` of ``objs[i] for i in idx`` (``size``: the template's
        size concept and its fractions, or None)."""
        if not idx:
            return "no objects"
        if size is None:
            sw = ""
        else:
            s = objs[idx[0]].size
            sw = self.size_words.get((size[0], s))
            if sw is None:
                sv = _nearest_of(size[1], s)
                sw = f"{sv} " if isinstance(sv, str) else f"size-{sv:g} "
                if len(self.size_words) < CACHE_MAX:
                    self.size_words[(size[0], s)] = sw
        kinds: dict[tuple, int] = {}
        for i in idx:
            o = objs[i]
            k = (o.color, o.shape)
            kinds[k] = kinds.get(k, 0) + 1
        parts = []
        phrases = self.phrases
        for (color, shape), n in kinds.items():
            key = (color, shape, n, sw)
            p = phrases.get(key)
            if p is None:
                rest = f"{sw}{color} {shape if n == 1 else plural(shape)}"
                p = f"{('an' if rest[:1].lower() in 'aeiou' else 'a') if n == 1 else number_word(n)} {rest}"
                if len(phrases) < CACHE_MAX:
                    phrases[key] = p
            parts.append(p)
        return _join(parts)

    def caption(self, objs: list, groups: dict[str, list[int]]) -> str:
        """:func:`mosaic.labels._caption` of a flat scene's objects."""
        parts, said = [], []
        for tgt, ref, bins, names, st, sr in self.positions:
            g_t, g_r = groups[tgt], groups[ref]
            ok = len(g_t) == 1 and len(g_r) == 1
            said.append(ok)
            if ok:
                k = _bin(bins, angle_deg(objs[g_r[0]], objs[g_t[0]]))
                where = f"at {names[k]} degrees from" if k is not None else "near"
                parts.append(f"{self.phrase(objs, g_t, st)} {where} {self.phrase(objs, g_r, sr)}")
        for subj, obj, ss, so in self.relations:
            g_s, g_o = groups[subj], groups[obj]
            ok = len(g_s) == 1 and len(g_o) == 1
            said.append(ok)
            if ok:
                words = (relation(objs[g_s[0]], objs[g_o[0]]) or "near").replace("_", " ")
                parts.append(f"{self.phrase(objs, g_s, ss)} {words} {self.phrase(objs, g_o, so)}")
        key = tuple(said)
        merged = self.merged.get(key)
        if merged is None:
            used = set()
            for ok, (a, b, *_) in zip(said, self.positions + self.relations):
                if ok:
                    used |= {a, b}
            merged = self.merged[key] = []
            for m in _merged(self.spec, self.lp, frozenset(used)):
                t = self.spec.template(m[0])
                sc = t.size.concept if t.size.kind == "concept" else None
                merged.append((m, None if sc is None else (sc, self.lp.fractions[sc])))
        for m, size in merged:
            idx = groups[m[0]] if len(m) == 1 else [i for name in m for i in groups[name]]
            parts.append(self.phrase(objs, idx, size))
        return _join(parts) if parts else "an empty scene"

    # -- scene graph ----------------------------------------------------------------------------
    def _look(self, o) -> tuple[tuple, str]:
        """``(extents, JSON text of the object after its centre)`` of a look and pose (colour,
        rgb, shape, template, rotation, size), cached (at most :data:`POSES` of them)."""
        look = (o.color, o.rgb, o.shape, o.template)
        t = self.look_text.get(look)
        if t is None:
            d = json.dumps
            t = (f'"color": {d(o.color)}, "rgb": {d(list(o.rgb))}, "rotation": ', f', "shape": {d(o.shape)}, "size": ',
                 f', "template": {d(o.template)}}}')
            if len(self.look_text) < CACHE_MAX:
                self.look_text[look] = t
        hit = (extents(o.shape, o.rotation), f"{t[0]}{o.rotation!r}{t[1]}{o.size!r}{t[2]}")
        if len(self.looks) < POSES:
            self.looks[(*look, o.rotation, o.size)] = hit
        return hit

    def _relations(self, n: int) -> list:
        t = self.rel_text.get(n)
        if t is None:
            t = self.rel_text[n] = [[[f'{{"object": {j}, "relation": "{r}", "subject": {i}}}' for r in _REL_NAMES]
                                     for j in range(n)] for i in range(n)]
        return t

    def graph_text(self, scene: Scene, objs: list) -> str | None:
        """``json.dumps(scene.to_dict(), sort_keys=True)``; None when a number of an object is not a
        finite float or int (the general way encodes it)."""
        side = scene.image_size
        looks = self.looks
        floor, ceil = math.floor, math.ceil
        parts = []
        check = 0.0
        for o in objs:
            rot, size = o.rotation, o.size
            if type(rot) is not float or type(size) is not float:  # the cached text is keyed by value: 0 == 0.0
                return None
            cx, cy = o.center
            check += cx + cy + rot + size
            e, tail = looks.get((o.color, o.rgb, o.shape, o.template, rot, size)) or self._look(o)
            r = size / 2.0 * side
            px, py = cx * side, cy * side
            x0, y0, x1, y1 = floor(px + r * e[0]), floor(py + r * e[2]), ceil(px + r * e[1]), ceil(py + r * e[3])
            if x0 < 0:
                x0 = 0
            if y0 < 0:
                y0 = 0
            if x1 > side:
                x1 = side
            if y1 > side:
                y1 = side
            parts.append(f'{{"bbox": [{x0}, {y0}, {x1}, {y1}], "center": [{cx!r}, {cy!r}], {tail}')
        if type(check) is not float or check - check != 0.0:
            return None
        n = len(objs)
        table = self._relations(n)
        rels = []
        for i in range(n):
            ax, ay = objs[i].center
            row = table[i]
            for j in range(n):
                if i == j:
                    continue
                bx, by = objs[j].center
                dx, dy = bx - ax, by - ay
                adx, ady = abs(dx), abs(dy)
                if adx >= ady and adx > 0:
                    rels.append(row[j][0 if dx > 0 else 1])
                elif ady >= adx and ady > 0:
                    rels.append(row[j][2 if dy > 0 else 3])
        bg = self.text(scene.background, list)
        return f'{{"background": {bg}, "image_size": {side}, "objects": [{", ".join(parts)}], "relations": [{", ".join(rels)}]}}'

    def text(self, v, conv=None) -> str:
        """``json.dumps`` of ``v`` (of ``conv(v)`` when given), cached by ``v``."""
        t = self.json_text.get(v)
        if t is None:
            t = json.dumps(conv(v) if conv is not None else v)
            if len(self.json_text) < 1000:
                self.json_text[v] = t
        return t


#: the :class:`LinePlan` of a spec, built once per spec object
line_plan = per_spec(LinePlan)


def record_line(spec: Spec, scene, values: dict, split: str, index: int, mask_file_name: str | None = None,
                graph: bool = True) -> tuple[str | None, dict] | None:
    """``(JSON line, record without its scene graph)`` of a sampled scene and its sampled concept
    values, as :func:`mosaic.records.sample_line` gives them (the line is None when ``graph`` is
    false: the caller builds the graph as a dict); None where the fast path does not apply (see the
    module docstring) or the labels do not read back as sampled."""
    plan = line_plan(spec)
    if not plan.fast or type(scene) is not Scene or type(index) is not int or type(scene.image_size) is not int:
        return None
    objs = scene.objects
    groups, unmatched = assign_templates(scene, spec)
    if unmatched:
        return None
    vals = plan.read(objs, groups)
    if vals is None or vals != values:
        return None
    head, mid, lab, labels, combination, held = plan.value_text(vals)
    caption = plan.caption(objs, groups)
    rec = {"file_name": f"images/{index:06d}.png", "index": index, "split": split, "concepts": vals,
           "combination": list(combination) if combination is not None else None, "held_out": held, "caption": caption,
           "num_objects": len(objs), "labels": dict(labels)}
    if mask_file_name is not None:
        rec["mask_file_name"] = mask_file_name
    if not graph:
        return None, rec
    g = plan.graph_text(scene, objs)
    if g is None:
        return None
    mask = "" if mask_file_name is None else f'"mask_file_name": {_json_str(mask_file_name)}, '
    line = (f'{{"caption": {_json_str(caption)}, {head}{index:06d}{mid}{index}{lab}{mask}"num_objects": {len(objs)}, '
            f'"scene": {g}, "split": {plan.text(split)}}}')
    return line, rec
