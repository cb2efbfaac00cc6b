"""3-D scene graphs for the shaded renderer (``image.renderer: shaded``): solid objects standing on a
ground plane, a camera and three lamps, and CLEVR's camera-frame relations.

World frame: metres-like units, z up, the ground plane is ``z = 0``. An object's ``center`` (the
2-D grammar's fractions of the image side, y down) is its ground-contact point: the fraction square
``[0, 1]^2`` covers the ground square ``[-WORLD/2, WORLD/2]^2`` (CLEVR places objects in
``[-3, 3]^2``), ``X = (cx - 0.5) * WORLD`` and ``Y = (0.5 - cy) * WORLD``. So ``size`` keeps its
meaning (diameter of the footprint's circumscribed circle, fraction of that square): ``large`` 0.24
is a sphere of radius 0.72, CLEVR's large 0.7; ``small`` 0.12 is CLEVR's small 0.35.

Solids (CLEVR's): ``sphere`` (radius r), ``cylinder`` (radius r, height 2r), ``cube`` (side
r*sqrt(2), so its footprint's circumscribed circle has radius r, as CLEVR scales its cube by
1/sqrt(2)). Every 2-D shape is an extruded prism of its footprint polygon (``circle``: a disk),
height r*sqrt(2). Rotation is degrees about +z (counter-clockwise seen from above, which is
counter-clockwise in a top-down image).

This module holds data and geometry only (no rendering): :class:`View` (camera, lamps, directions,
projection), :class:`SolidObject`, :class:`Scene3D`. :mod:`renderers.shaded` renders them;
:func:`mosaic.sampling.solid_scene` lays them out.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from mosaic.scene import COORD_DECIMALS, Scene, SceneObject, json_number

WORLD = 6.0
#: CLEVR's solids (a shape name of the grammar when ``image.renderer`` is ``shaded``).
SOLIDS = ("sphere", "cube", "cylinder")
#: CLEVR's materials: rubber (matte) and metal (mirror-like, tinted).
MATERIALS = ("rubber", "metal")
#: Camera presets.
CAMERAS = ("clevr", "mosaic")
#: Relation names per camera preset, in the order (j lies right, left, behind, in front of i): the
#: second axis is depth for the oblique camera (CLEVR's front / behind) and image up / down for the
#: top-down one (the flat grammar's below / above).
CAMERA_RELATIONS = {"clevr": ("left_of", "right_of", "in_front_of", "behind"), "mosaic": ("left_of", "right_of", "below", "above")}
#: Default jitter (uniform in +-L per axis, world units) of each preset: CLEVR's camera 0.5, lamps 1.0;
#: MOSAIC's overhead camera and lamps are fixed.
JITTER = {"clevr": (0.5, 1.0), "mosaic": (0.0, 0.0)}

_SQRT2 = math.sqrt(2.0)


def world_xy(center: tuple[float, float]) -> tuple[float, float]:
    """Ground point (X, Y) of a centre given as fractions (x right, y down)."""
    return ((center[0] - 0.5) * WORLD, (0.5 - center[1]) * WORLD)


def solid_height(shape: str, size: float) -> float:
    """Height (world units) of a solid of ``shape`` and ``size`` (fraction)."""
    r = size / 2.0 * WORLD
    return 2.0 * r if shape in ("sphere", "cylinder") else r * _SQRT2


@dataclass
class View:
    """A camera, three lamps and the ground colour.

    Attributes:
        preset: ``clevr`` or ``mosaic``.
        camera: camera position (world units). look_at: the point it looks at.
        fov: full field of view of the square image, degrees.
        lights: ``[(name, (x, y, z), intensity, radius)]``: key, fill, back. The key lamp casts
            shadows; ``radius`` (world units) spreads its position over the supersamples (soft edges).
    """

    preset: str
    camera: tuple[float, float, float]
    look_at: tuple[float, float, float]
    fov: float
    lights: list[tuple[str, tuple[float, float, float], float, float]]

    def basis(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit vectors ``(forward, right, up)`` float64 ``[3]`` of the camera (computed once per
        camera position)."""
        key = (tuple(self.camera), tuple(self.look_at))
        cached = self.__dict__.get("_basis")
        if cached is not None and cached[0] == key:
            return cached[1]
        f = [b - a for a, b in zip(self.camera, self.look_at)]
        ln = math.sqrt(sum(x * x for x in f))
        f = [x / ln for x in f]
        hint = (0.0, 1.0, 0.0) if abs(f[2]) > 0.99 else (0.0, 0.0, 1.0)

        def cross(a, b):
            return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]

        r = cross(f, hint)
        ln = math.sqrt(sum(x * x for x in r))
        r = [x / ln for x in r]
        u = cross(r, f)
        out = (np.array(f), np.array(r), np.array(u))
        self.__dict__["_basis"] = (key, out)
        return out

    def directions(self) -> dict[str, list[float]]:
        """CLEVR's ``directions``: unit vectors on the ground plane from the camera (``behind`` is the
        camera's forward projected on the plane, ``right`` its right), plus ``above``/``below``
        (computed once per camera position; a new dict each call)."""
        key = (tuple(self.camera), tuple(self.look_at))
        cached = self.__dict__.get("_dirs")
        if cached is not None and cached[0] == key:
            return {k: list(v) for k, v in cached[1].items()}
        f, r, _ = self.basis()
        if abs(f[2]) > 0.99:  # looking straight down: "behind" is image up
            _, _, u = self.basis()
            b = np.array([u[0], u[1], 0.0])
        else:
            b = np.array([f[0], f[1], 0.0])
        b /= math.sqrt(float(b @ b))
        rr = np.array([r[0], r[1], 0.0])
        rr /= math.sqrt(float(rr @ rr))
        rd = lambda v: [round(float(x), 6) for x in v]  # noqa: E731
        out = {"behind": rd(b), "front": rd(-b), "right": rd(rr), "left": rd(-rr), "above": [0.0, 0.0, 1.0], "below": [0.0, 0.0, -1.0]}
        self.__dict__["_dirs"] = (key, out)
        return {k: list(v) for k, v in out.items()}

    def project(self, points: np.ndarray, side: int) -> np.ndarray:
        """Pixel coordinates of world points: float64 ``[N, 3]`` -> ``[N, 3]`` of (u px right, v px
        down, depth along the camera axis in world units), for a ``side`` px square image."""
        f, r, u = self.basis()
        d = np.asarray(points, np.float64) - np.asarray(self.camera, np.float64)
        z = d @ f
        t = math.tan(math.radians(self.fov) / 2.0)
        x = (d @ r) / (z * t)
        y = (d @ u) / (z * t)
        return np.stack([(x + 1.0) * side / 2.0, (1.0 - y) * side / 2.0, z], axis=1)

    def to_dict(self) -> dict:
        rd = lambda v: [round(float(x), 6) for x in v]  # noqa: E731
        return {
            "preset": self.preset, "camera": rd(self.camera), "look_at": rd(self.look_at), "fov": round(float(self.fov), 6),
            "lights": [{"name": n, "position": rd(p), "intensity": float(i), "radius": float(rad)} for n, p, i, rad in self.lights],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "View":
        return cls(d["preset"], tuple(d["camera"]), tuple(d["look_at"]), float(d["fov"]),
                   [(x["name"], tuple(x["position"]), float(x["intensity"]), float(x["radius"])) for x in d["lights"]])


def preset_view(preset: str, rng: np.random.Generator | None = None, camera_jitter: float | None = None,
                light_jitter: float | None = None) -> View:
    """The view of a camera preset, jittered with ``rng`` (uniform in +-jitter per axis, world units;
    None = the preset's default, :data:`JITTER`). CLEVR's camera and lamps from ``base_scene.blend``,
    rotated about z so the camera looks along +y (its right is +x, so ``center`` x reads left to right):
    camera 10.1 units away horizontally and 4.96 up, looking at the origin; key lamp front-right and
    high, fill lamp left and low, back lamp behind. MOSAIC's: overhead at ``[0, 0, 10]``, the ground
    square filling the frame."""
    cj, lj = JITTER[preset]
    cj = cj if camera_jitter is None else camera_jitter
    lj = lj if light_jitter is None else light_jitter

    def jit(p, amount):
        if rng is None or amount == 0:
            return tuple(float(x) for x in p)
        return tuple(round(float(x) + float(rng.uniform(-amount, amount)), COORD_DECIMALS) for x in p)

    if preset == "clevr":
        cam = jit((0.0, -10.11, 4.96), cj)
        lights = [("key", jit((2.30, -6.68, 4.28), lj), 1.1, 0.45), ("fill", jit((-6.12, 0.64, 3.01), lj), 0.30, 0.0),
                  ("back", jit((1.11, 2.68, 5.82), lj), 0.35, 0.0)]
        return View("clevr", cam, (0.0, 0.0, 0.0), 34.0, lights)
    if preset == "mosaic":
        cam = jit((0.0, 0.0, 10.0), cj)
        lights = [("key", jit((-3.0, 3.0, 9.0), lj), 1.0, 0.35), ("fill", jit((5.0, 1.0, 6.0), lj), 0.30, 0.0),
                  ("back", jit((1.0, 5.0, 7.0), lj), 0.30, 0.0)]
        return View("mosaic", cam, (cam[0], cam[1], 0.0), round(2.0 * math.degrees(math.atan(WORLD / 2.0 / 10.0)), 6), lights)
    raise ValueError(f"unknown camera preset {preset!r}; known: {', '.join(CAMERAS)}")


@dataclass
class SolidObject(SceneObject):
    """A solid on the ground plane (see the module docstring for shapes and units).

    Attributes (beyond :class:`~mosaic.scene.SceneObject`):
        material: ``rubber`` or ``metal``; None for a template without a material rule (rendered as
            rubber, and captions name no material).
        visible_fraction: pixels of the object in the instance mask / pixels of its silhouette
            rendered alone (in [0, 1]; CLEVR's occlusion check counts the former).
        visible_pixels: pixels of the object in the instance mask.
        box: ``(x0, y0, x1, y1)`` px (x1, y1 exclusive) of the object in the instance mask, or None
            when no pixel is visible.
        pixel: ``(u, v, depth)``: the projected centre of the object (px, px, world units), CLEVR's
            ``pixel_coords``.
    """

    material: str | None = "rubber"
    visible_fraction: float = 1.0
    visible_pixels: int = 0
    box: tuple[int, int, int, int] | None = None
    pixel: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def radius_world(self) -> float:
        return self.size / 2.0 * WORLD

    @property
    def height(self) -> float:
        return solid_height(self.shape, self.size)

    @property
    def position(self) -> tuple[float, float, float]:
        """The centre of the solid's bounding box, world units (x, y on the ground; z half the height)."""
        x, y = world_xy(self.center)
        return (x, y, self.height / 2.0)

    @property
    def dims(self) -> tuple[float, float, float]:
        """(width, depth, height) in world units: the cube's side, else the footprint's circumscribed diameter."""
        if self.shape == "cube":
            s = self.radius_world * _SQRT2
            return (s, s, s)
        d = 2.0 * self.radius_world
        return (d, d, self.height)

    def footprint(self) -> np.ndarray | None:
        """The footprint polygon in world (x, y), float64 ``[n, 2]`` counter-clockwise seen from
        above, or None for a round solid (sphere, cylinder, circle prism)."""
        shape = "square" if self.shape == "cube" else self.shape
        if shape in ("sphere", "cylinder", "circle"):
            return None
        v = SceneObject(shape, self.color, self.rgb, self.size, self.center, self.rotation).vertices(1.0)
        p = [world_xy(q) for q in v]
        # the shoelace sum's sign (a polygon's area is far from the rounding of any order of the sum)
        if sum(a[0] * b[1] - b[0] * a[1] for a, b in zip(p, p[1:] + p[:1])) < 0:
            p.reverse()
        return np.array(p, np.float64)

    def vertices(self, side: float = 1.0):
        shape = "square" if self.shape == "cube" else self.shape
        if shape in ("sphere", "cylinder"):
            return None
        return SceneObject(shape, self.color, self.rgb, self.size, self.center, self.rotation).vertices(side)

    def bbox(self, side: int) -> tuple[int, int, int, int]:
        """The 2-D box from the instance mask (``(0, 0, 0, 0)`` when nothing is visible)."""
        return tuple(self.box) if self.box is not None else (0, 0, 0, 0)

    def to_dict(self, side: int | None = None) -> dict:
        d = super().to_dict(side)
        d.update({
            "material": self.material,
            "position_3d": [round(float(v), 6) for v in self.position],
            "size_3d": [round(float(v), 6) for v in self.dims],
            "rotation_3d": [0.0, 0.0, float(self.rotation)],
            "pixel_coords": [round(float(v), 4) for v in self.pixel],
            "visible_fraction": round(float(self.visible_fraction), 6),
            "visible_pixels": int(self.visible_pixels),
        })
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "SolidObject":
        b = SceneObject.from_dict(d)
        box = d.get("bbox")
        return cls(b.shape, b.color, b.rgb, b.size, b.center, b.rotation, b.template, material=d.get("material"),
                   visible_fraction=float(d.get("visible_fraction", 1.0)), visible_pixels=int(d.get("visible_pixels", 0)),
                   box=tuple(box) if box and box[2] > box[0] else None, pixel=tuple(d.get("pixel_coords", (0.0, 0.0, 0.0))))


def camera_relation(view: View, a: SceneObject, b: SceneObject, margin: float = 0.0) -> str | None:
    """The relation of ``a`` to ``b`` in the camera frame, the flat grammar's dominant-axis rule on the
    ground plane: with ``d`` = b - a projected on the camera's right and behind directions (world units
    / :data:`WORLD`, so ``margin`` is a fraction of the ground square as in 2-D), ``a`` is ``left_of``
    ``b`` when ``d_right >= |d_behind| + margin``; ``behind`` (clevr) / ``above`` (mosaic) when b is in
    front of a by the margin; ``in_front_of`` / ``below`` the other way. None when neither dominates."""
    d = view.__dict__.get("_dirs")
    dirs = d[1] if d is not None and d[0] == (tuple(view.camera), tuple(view.look_at)) else view.directions()
    # (b - a) in world units / WORLD: the centres' fraction offsets with y flipped
    dx, dy = b.center[0] - a.center[0], a.center[1] - b.center[1]
    dr = dx * dirs["right"][0] + dy * dirs["right"][1]
    db = dx * dirs["behind"][0] + dy * dirs["behind"][1]
    names = CAMERA_RELATIONS[view.preset]
    if abs(dr) >= abs(db) + margin and abs(dr) > 0:
        return names[0] if dr > 0 else names[1]
    if abs(db) >= abs(dr) + margin and abs(db) > 0:
        return names[2] if db > 0 else names[3]
    return None


def camera_relation_of(view: View):
    """:func:`camera_relation` of ``view`` as a function ``(a, b, margin) -> str | None`` (the layout
    search reads it many times per scene; the same arithmetic, with the directions read once)."""
    dirs = view.directions()
    r0, r1 = dirs["right"][:2]
    b0, b1 = dirs["behind"][:2]
    n0, n1, n2, n3 = CAMERA_RELATIONS[view.preset]  # j to the right, left, behind, in front of i

    def relate(a: SceneObject, b: SceneObject, margin: float = 0.0) -> str | None:
        ac, bc = a.center, b.center
        dx, dy = bc[0] - ac[0], ac[1] - bc[1]
        dr = dx * r0 + dy * r1
        db = dx * b0 + dy * b1
        adr, adb = abs(dr), abs(db)
        if adr >= adb + margin and adr > 0:
            return n0 if dr > 0 else n1
        if adb >= adr + margin and adb > 0:
            return n2 if db > 0 else n3
        return None

    relate.axes = (r0, r1, b0, b1, (n0, n1, n2, n3))  # read by mosaic.sampling's screen of layout proposals
    return relate


@dataclass
class Scene3D(Scene):
    """A scene of :class:`SolidObject` s seen through a :class:`View`."""

    view: View | None = None

    def relation_of(self, a: SceneObject, b: SceneObject, margin: float = 0.0) -> str | None:
        """The spec-level relation of ``a`` to ``b`` (:func:`camera_relation`)."""
        return camera_relation(self.view, a, b, margin)

    def relations(self, margin: float = 0.0) -> list[tuple[int, str, int]]:
        """CLEVR's ``relationships`` from 3-D positions: ``(i, rel, j)`` for every ordered pair and each
        of the four ground directions in which j lies from i, by the sign of the dot product of the
        position difference with the camera's direction (CLEVR's rule; several hold at once). Names are
        :data:`CAMERA_RELATIONS` of the preset, read "i rel j" (i ``left_of`` j: j lies to i's right)."""
        dirs = self.view.directions()
        names = CAMERA_RELATIONS[self.view.preset]
        pos = [world_xy(o.center) for o in self.objects]
        out = []
        eps = margin * WORLD
        for i, (ax, ay) in enumerate(pos):
            for j, (bx, by) in enumerate(pos):
                if i == j:
                    continue
                dr = (bx - ax) * dirs["right"][0] + (by - ay) * dirs["right"][1]
                db = (bx - ax) * dirs["behind"][0] + (by - ay) * dirs["behind"][1]
                if dr > eps:
                    out.append((i, names[0], j))
                elif dr < -eps:
                    out.append((i, names[1], j))
                if db > eps:
                    out.append((i, names[2], j))
                elif db < -eps:
                    out.append((i, names[3], j))
        return out

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["view"] = self.view.to_dict()
        d["directions"] = self.view.directions()
        return d

    def graph_json(self) -> str:
        """``json.dumps(self.to_dict(), sort_keys=True)``, byte for byte, written as text (the objects'
        and relations' parts without building their dicts: a record's largest part)."""
        side = self.image_size
        objs = []
        for o in self.objects:
            head = _OBJ_TEXT.get((o.color, tuple(o.rgb), o.shape, o.template, o.material))
            if head is None:
                head = _obj_text(o)
            pos, dims = o.position, o.dims
            box = o.bbox(side)
            objs.append(f'{{"bbox": [{box[0]}, {box[1]}, {box[2]}, {box[3]}], "center": [{json_number(o.center[0])}, {json_number(o.center[1])}], '
                        f'{head[0]}"pixel_coords": [{", ".join(json_number(round(float(v), 4)) for v in o.pixel)}], '
                        f'"position_3d": [{", ".join(json_number(round(float(v), 6)) for v in pos)}], {head[1]}"rotation": {json_number(o.rotation)}, '
                        f'"rotation_3d": [0.0, 0.0, {json_number(float(o.rotation))}], {head[2]}"size": {json_number(o.size)}, '
                        f'"size_3d": [{", ".join(json_number(round(float(v), 6)) for v in dims)}], {head[3]}'
                        f'"visible_fraction": {json_number(round(float(o.visible_fraction), 6))}, "visible_pixels": {int(o.visible_pixels)}}}')
        rels = ", ".join([f'{{"object": {j}, "relation": "{r}", "subject": {i}}}' for i, r, j in self.relations()])
        return (f'{{"background": {json.dumps(list(self.background))}, "directions": {json.dumps(self.view.directions(), sort_keys=True)}, '
                f'"image_size": {json.dumps(side)}, "objects": [{", ".join(objs)}], "relations": [{rels}], '
                f'"view": {json.dumps(self.view.to_dict(), sort_keys=True)}}}')

    @classmethod
    def from_dict(cls, d: dict) -> "Scene3D":
        return cls(int(d["image_size"]), tuple(d["background"]), [SolidObject.from_dict(o) for o in d["objects"]],
                   View.from_dict(d["view"]))


_OBJ_TEXT: dict[tuple, tuple[str, str, str, str]] = {}  # an object's look -> the JSON text of its fixed fields


def _obj_text(o) -> tuple[str, str, str, str]:
    """The text of an object's fields that depend only on its look (colour, rgb, shape, template,
    material), in :meth:`Scene3D.graph_json`'s four places, cached."""
    d = json.dumps
    t = (f'"color": {d(o.color)}, "material": {d(o.material)}, ', f'"rgb": {d(list(o.rgb))}, ', f'"shape": {d(o.shape)}, ',
         f'"template": {d(o.template)}, ')
    if len(_OBJ_TEXT) < 100_000:
        _OBJ_TEXT[(o.color, tuple(o.rgb), o.shape, o.template, o.material)] = t
    return t


def scene_from_dict(d: dict) -> Scene:
    """A flat :class:`~mosaic.scene.Scene` or a :class:`Scene3D` (when ``d`` has a ``view``)."""
    return Scene3D.from_dict(d) if "view" in d else Scene.from_dict(d)


__all__ = ["WORLD", "SOLIDS", "MATERIALS", "CAMERAS", "CAMERA_RELATIONS", "View", "SolidObject", "Scene3D", "preset_view",
           "camera_relation", "camera_relation_of", "world_xy", "solid_height", "scene_from_dict"]
