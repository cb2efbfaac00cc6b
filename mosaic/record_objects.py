"""A record's scene-graph objects against the spec's object rules, and the error of a folder that holds
no dataset.

:func:`object_rules` is part of the quick check of every record (:func:`mosaic.records.scene_record_check`):
each object of a record's scene graph must name one of the spec's templates (``objects`` then
``distractors``) and have a shape and size that template's rules can draw. Without it a manifest whose
spec was edited (an object's size 0.16 -> 0.4) and whose fingerprint was recomputed passed ``verify``
once the card was rewritten: the records' colours, image size and background were compared with the
spec, their objects' shapes and sizes were not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mosaic.grammar import Rule
from mosaic.scene import COORD_DECIMALS, Scene
from mosaic.spec import Spec

_EPS = 10.0 ** -COORD_DECIMALS  # a drawn size is rounded to COORD_DECIMALS


def _allowed(spec: Spec, rule: Rule, size: bool):
    """What ``rule`` can draw: a set of values (sizes as rounded fractions), a ``(lo, hi)`` size range,
    or None (anything: a range of a non-size attribute is not checked here)."""
    if rule.range is not None:
        return (spec.size_fraction(rule.range[0]) - _EPS, spec.size_fraction(rule.range[1]) + _EPS) if size else None
    if rule.value is not None:
        vals = [rule.value]
    elif rule.choice is not None:
        vals = list(rule.choice)
    else:
        vals = list(spec.concepts[rule.concept].values)
    return {round(spec.size_fraction(v), COORD_DECIMALS) for v in vals} if size else {str(v) for v in vals}


def object_rules(spec: Spec) -> Callable[[Scene], str | None]:
    """``check(scene)``: why an object of ``scene`` is not one the spec's templates draw (its colour's RGB,
    template, shape or size), or None. Built once per spec; a few microseconds an object."""
    rules = {t.name: (_allowed(spec, t.shape, False), _allowed(spec, t.size, True)) for t in spec.templates}
    palette = spec.palette

    def check(scene: Scene) -> str | None:
        for i, o in enumerate(scene.objects):
            if o.color not in palette or list(o.rgb) != list(palette[o.color]):  # the colour a name is drawn in is the spec's
                return (f"its scene graph's scene.objects.{i}.rgb is {str(list(o.rgb))[:40]}, not the spec's for colour {str(o.color)[:40]!r} "
                        f"({list(palette[o.color]) if o.color in palette else 'no such colour'})")
            if o.template not in rules:
                return (f"its scene graph's scene.objects.{i}.template is {str(o.template)[:40]!r}, not one of the spec's "
                        f"objects or distractors ({', '.join(rules)})")
            shapes, sizes = rules[o.template]
            if shapes is not None and o.shape not in shapes:
                return (f"its scene graph's scene.objects.{i}.shape is {str(o.shape)[:40]!r}, not a shape the spec's "
                        f"{o.template!r} draws ({', '.join(sorted(shapes))})")
            ok = (sizes[0] <= o.size <= sizes[1]) if isinstance(sizes, tuple) else round(o.size, COORD_DECIMALS) in sizes
            if not ok:
                said = f"{sizes[0] + _EPS:g}-{sizes[1] - _EPS:g}" if isinstance(sizes, tuple) else ", ".join(f"{v:g}" for v in sorted(sizes))
                return (f"its scene graph's scene.objects.{i}.size is {o.size!r}, not a size the spec's {o.template!r} "
                        f"draws ({said})")
        return None

    return check


def not_a_dataset_message(root: str | Path, manifest: str) -> str:
    """The message for a folder without ``manifest`` that is no other kind of mosaic folder: generating
    there is the fix only where the folder is empty or missing; a folder of other files is named as such."""
    p = Path(root)
    try:
        others = p.is_dir() and any(p.iterdir())
    except OSError:
        others = True
    if others:
        return (f"{root} is not a mosaic dataset: it holds no {manifest} but other files. Give a dataset's own folder "
                f"(the one holding {manifest}), or make a dataset in a new folder: `mosaic generate SPEC --out NEW_FOLDER`")
    return f"{root} is not a mosaic dataset: {manifest} is missing (make one with `mosaic generate SPEC --out {root}`)"
