"""Scene graphs: objects with attributes and positions, and geometric relation predicates.

Coordinates are fractions of the image side with the origin at the top-left corner, x to the
right and y downwards (image convention). Angles reported by :func:`angle_deg` are degrees
counter-clockwise from +x with y pointing *up*, as a viewer reads the image (MOSAIC's overhead
camera convention, Jeong et al. 2026 §1.3).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from mosaic.vocab import SHAPES

COORD_DECIMALS = 5  # centres, sizes and rotations are rounded so a scene round-trips through JSON exactly


def json_number(v) -> str:
    """JSON text of one value as ``json.dumps`` writes it (``repr`` of a finite float or an int; anything
    else through ``json.dumps``): the record lines written as text use it."""
    return repr(v) if (type(v) is float and v - v == 0) or type(v) is int else json.dumps(v)


@dataclass
class SceneObject:
    """One object of a scene.

    Attributes:
        shape: shape name (a key of :data:`mosaic.vocab.SHAPES`).
        color: colour name; ``rgb`` its sRGB bytes.
        size: diameter of the circumscribed circle, fraction of the image side.
        center: ``(x, y)`` fraction of the image side, y down.
        rotation: degrees, counter-clockwise as seen in the image.
        template: name of the spec template that produced the object (ground truth only; labels
            never read it), or None for a parsed object.
    """

    shape: str
    color: str
    rgb: tuple[int, int, int]
    size: float
    center: tuple[float, float]
    rotation: float = 0.0
    template: str | None = None

    @property
    def radius(self) -> float:
        return self.size / 2.0

    def vertices(self, side: float = 1.0) -> list[tuple[float, float]] | None:
        """Polygon vertices scaled to ``side`` (pixels for ``side=image size``), or None for a circle."""
        unit = SHAPES[self.shape]
        if unit is None:
            return None
        r = self.radius * side
        cx, cy = self.center[0] * side, self.center[1] * side
        a = math.radians(-self.rotation)  # counter-clockwise on screen = negative angle with y down
        ca, sa = math.cos(a), math.sin(a)
        return [(cx + r * (ux * ca - uy * sa), cy + r * (ux * sa + uy * ca)) for ux, uy in unit]

    def bbox(self, side: int) -> tuple[int, int, int, int]:
        """Pixel bounding box ``(x0, y0, x1, y1)`` (x1, y1 exclusive) in an image of ``side`` pixels."""
        v = self.vertices(side)
        if v is None:
            r = self.radius * side
            xs = (self.center[0] * side - r, self.center[0] * side + r)
            ys = (self.center[1] * side - r, self.center[1] * side + r)
        else:
            xs = (min(p[0] for p in v), max(p[0] for p in v))
            ys = (min(p[1] for p in v), max(p[1] for p in v))
        return (max(0, math.floor(xs[0])), max(0, math.floor(ys[0])), min(side, math.ceil(xs[1])), min(side, math.ceil(ys[1])))

    def to_dict(self, side: int | None = None) -> dict:
        d = {
            "shape": self.shape, "color": self.color, "rgb": list(self.rgb), "size": self.size,
            "center": list(self.center), "rotation": self.rotation, "template": self.template,
        }
        if side is not None:
            d["bbox"] = list(self.bbox(side))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SceneObject":
        return cls(
            shape=d["shape"], color=d["color"], rgb=tuple(d["rgb"]), size=float(d["size"]),
            center=(float(d["center"][0]), float(d["center"][1])), rotation=float(d.get("rotation", 0.0)),
            template=d.get("template"),
        )


@dataclass
class Scene:
    """An image's content: its size in pixels, background colour and objects (in template order)."""

    image_size: int
    background: tuple[int, int, int]
    objects: list[SceneObject] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready scene graph: objects (with pixel bounding boxes) and relations from geometry."""
        return {
            "image_size": self.image_size,
            "background": list(self.background),
            "objects": [o.to_dict(self.image_size) for o in self.objects],
            "relations": [{"subject": i, "relation": rel, "object": j} for i, rel, j in self.relations()],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Scene":
        return cls(int(d["image_size"]), tuple(d["background"]), [SceneObject.from_dict(o) for o in d["objects"]])

    def relation_of(self, a: "SceneObject", b: "SceneObject", margin: float = 0.0) -> str | None:
        """The relation of ``a`` to ``b`` in this scene's frame (:func:`relation` for a flat scene;
        :class:`mosaic.scene3d.Scene3D` reads it in its camera's frame)."""
        return relation(a, b, margin)

    def relations(self, margin: float = 0.0) -> list[tuple[int, str, int]]:
        """Every ordered pair ``(i, relation, j)`` with an unambiguous relation (see :func:`relation`)."""
        # relation() inlined over the centres: this runs for every ordered pair of every generated
        # scene (a tenth of the record-building time of a 10-object scene as a function call per pair)
        centres = [(o.center[0], o.center[1]) for o in self.objects]
        out = []
        for i, (ax, ay) in enumerate(centres):
            for j, (bx, by) in enumerate(centres):
                if i == j:
                    continue
                dx, dy = bx - ax, by - ay
                adx, ady = abs(dx), abs(dy)
                if adx >= ady + margin and adx > 0:
                    out.append((i, "left_of" if dx > 0 else "right_of", j))
                elif ady >= adx + margin and ady > 0:
                    out.append((i, "above" if dy > 0 else "below", j))
        return out


def relation(a: SceneObject, b: SceneObject, margin: float = 0.0) -> str | None:
    """The relation of ``a`` to ``b``: ``left_of``/``right_of``/``above``/``below``, or None.

    ``a`` is left of ``b`` when ``b.x - a.x >= |b.y - a.y| + margin`` (the dominant axis wins by
    ``margin``, a fraction of the image side); likewise for the other three. At most one holds.
    """
    dx = b.center[0] - a.center[0]
    dy = b.center[1] - a.center[1]
    if abs(dx) >= abs(dy) + margin and abs(dx) > 0:
        return "left_of" if dx > 0 else "right_of"
    if abs(dy) >= abs(dx) + margin and abs(dy) > 0:
        return "above" if dy > 0 else "below"
    return None


def angle_deg(reference: SceneObject, target: SceneObject) -> float:
    """Angle of ``target`` around ``reference`` in [0, 360) degrees, counter-clockwise from +x, y up."""
    dx = target.center[0] - reference.center[0]
    dy = reference.center[1] - target.center[1]
    return math.degrees(math.atan2(dy, dx)) % 360.0


def disks_overlap(a: SceneObject, b: SceneObject, gap: float = 0.0) -> bool:
    """True when the circumscribed disks of ``a`` and ``b`` are closer than ``gap`` (fraction of side)."""
    return math.dist(a.center, b.center) < a.radius + b.radius + gap
