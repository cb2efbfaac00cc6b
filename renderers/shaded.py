"""Shaded 3-D backend: ray casting in numpy against CLEVR's solids and extruded prisms.

One primary ray per supersample (``supersample`` x ``supersample`` per pixel, box-averaged in
linear light), vectorised over the pixels of each object's screen rectangle (the projection of
its bounding box), so a frame costs the ground plane plus the objects' own pixels:

- **Geometry** (:mod:`mosaic.scene3d`): sphere, cylinder (side + top cap), and prisms (top cap by
  an even-odd point-in-polygon test, one vertical wall per footprint edge; the cube is the square
  prism). The ground plane ``z = 0`` is everything else.
- **Lights**: CLEVR's key, fill and back lamps (point lamps, Lambert), plus a sky term
  (hemispherical ambient). The key lamp casts shadows by shadow rays from every visible point,
  tested only against the objects whose shadow rectangle (the projection of the object and of its
  shadow on the ground) covers the point; each supersample takes its own point on a disk of the
  key lamp's ``radius``, so shadow edges are soft like an area lamp's.
- **Materials**: ``rubber`` is Lambert plus a weak broad highlight; ``metal`` is a tinted mirror of
  the environment (the ground, lit and unshadowed, below the horizon; a sky gradient above, so a
  metal sphere shows CLEVR's sharp horizon line), a little diffuse, and sharp Blinn-Phong
  highlights of the three lamps. Object-to-object reflections are not traced.
- **Colour**: sRGB colours are decoded to linear light, shaded, averaged over the supersamples and
  encoded back with a 16,384-entry lookup table.

Determinism: only +, -, *, /, sqrt and comparisons touch pixels (highlight exponents are powers
of two by repeated squaring; the sRGB curve is a table), all correctly rounded in IEEE float32,
and sums run in a fixed order; so a scene renders to the same bytes on every run, in any process,
and with any number of workers.

Masks: the instance mask is a separate pass with one ray through each pixel centre (value k > 0
is object k-1; no blending of ids), the pass the layout's visibility check counts on
(:func:`instance_mask`).
"""

from __future__ import annotations

import math

import numpy as np

from mosaic.scene3d import Scene3D
from renderers.base import Renderer
from renderers.shaded_geom import _INF, EPS, F, Plan, Solid, cast, cells, nearest, normals_at, rects  # noqa: F401  (EPS: re-exported)

AMBIENT = 0.16  # sky light, times (0.5 + 0.5 n_z)
SKY = np.array([0.62, 0.64, 0.68], F)  # linear sky radiance at the horizon (metal reflections, rays that miss)
_LUT_N = 16384


def _srgb_lut() -> np.ndarray:
    x = (np.arange(_LUT_N, dtype=np.float64) + 0.5) / _LUT_N
    y = np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1.0 / 2.4) - 0.055)
    return np.clip(np.floor(y * 255.0 + 0.5), 0, 255).astype(np.uint8)


_LUT = _srgb_lut()


def srgb_to_linear(rgb) -> np.ndarray:
    """sRGB bytes ``[..., 3]`` -> linear float32 ``[..., 3]`` in [0, 1] (IEC 61966-2-1)."""
    c = np.asarray(rgb, np.float64) / 255.0
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4).astype(F)


def _pow2k(x: np.ndarray, k: int) -> np.ndarray:
    for _ in range(k):
        x = x * x
    return x


# ----------------------------------------------------------------------------------------------
# camera rays
# ----------------------------------------------------------------------------------------------

class _Cam:
    """A view's camera as float32 vectors for one image side and supersampling factor."""

    def __init__(self, scene: Scene3D, s: int):
        v = scene.view
        f, r, u = v.basis()
        t = math.tan(math.radians(v.fov) / 2.0)
        self.side, self.s, self.n = scene.image_size, s, scene.image_size * s
        self.C = tuple(F(c) for c in v.camera)
        # direction of sample (i, j) of the n x n grid: f + ndc_x t r + ndc_y t u
        self.dx = r * t * 2.0 / self.n       # per sample column
        self.dy = -u * t * 2.0 / self.n      # per sample row
        self.d0 = f - r * t + u * t + (self.dx + self.dy) * 0.5  # sample (0, 0) centre
        self.view = v
        # world point -> (x / z, y / z, z) in the camera frame, scaled to sample units
        self._M = np.stack([r, u, f], 1)
        self._k = self.n / (2.0 * t)
        self._C64 = np.asarray(v.camera, np.float64)

    def rays(self, i0: int, i1: int, j0: int, j1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit directions of samples rows i0..i1-1, columns j0..j1-1 (may lie outside the frame):
        ``(dx, dy, dz)``, each float32 ``[i1-i0, j1-j0]``."""
        ii = np.arange(i0, i1, dtype=F)[:, None]
        jj = np.arange(j0, j1, dtype=F)[None, :]
        d = [F(self.d0[c]) + ii * F(self.dy[c]) + jj * F(self.dx[c]) for c in range(3)]
        inv = F(1) / np.sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2])
        return d[0] * inv, d[1] * inv, d[2] * inv

    def grid(self, rc: np.ndarray, q: bool = True, sub: bool = False) -> dict:
        """The samples of rectangles ``rc`` (:func:`~renderers.shaded_geom.cells`) with their unit ray
        directions ``D`` (the values :meth:`rays` gives: the per-row and per-column terms are summed
        per sample as there), their index ``q`` in the sample planes (:func:`_planes`; -1 outside
        the frame) and, with ``sub``, their supersample ``(i % s) * s + j % s``."""
        n, s, side = self.n, self.s, self.side
        lo, hi = min(0, int(rc[:, [0, 2]].min(initial=0))), max(n, int(rc[:, [1, 3]].max(initial=0)))
        k = np.arange(lo, hi, dtype=F)
        tabs = [(F(self.d0[c]) + k * F(self.dy[c]), k * F(self.dx[c]), lo) for c in range(3)]
        if q:
            i = np.arange(lo, hi)
            inside = (i >= 0) & (i < n)
            tabs.append((np.where(inside, (i % s) * s * side * side + (i // s) * side, -4 * n * n), np.where(inside, (i % s) * side * side + i // s, -4 * n * n), lo))
        if sub:
            i = np.arange(lo, hi)
            tabs.append(((i % s) * s, i % s, lo))
        out = cells(rc, tabs, coords=False)
        d = out[4:7]
        inv = F(1) / np.sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2])
        g = {"cnt": out[2], "seg": out[3], "D": (d[0] * inv, d[1] * inv, d[2] * inv)}
        if q:
            g["q"] = out[7]
        if sub:
            g["sub"] = out[-1]
        return g

    def no_sky(self) -> bool:
        """Whether every sample's ray goes down to the ground (checked at the frame's corners: the
        direction's z is a monotone sum of a row and a column term)."""
        n = self.n
        return all(F(self.d0[2]) + F(i) * F(self.dy[2]) + F(j) * F(self.dx[2]) < 0 for i in (0, n - 1) for j in (0, n - 1))


def _planes(a: np.ndarray, s: int) -> np.ndarray:
    """``[n, n]`` samples -> ``[s * s, side * side]``: plane ``a * s + b`` holds supersample (a, b) of
    every pixel, so a pixel's supersamples are summed plane by plane."""
    side = a.shape[0] // s
    return np.ascontiguousarray(a.reshape(side, s, side, s).transpose(1, 3, 0, 2)).reshape(s * s, side * side)


# ----------------------------------------------------------------------------------------------
# a scene's solids (renderers.shaded_geom), cached on its objects and on the scene
# ----------------------------------------------------------------------------------------------

def _plan(scene: Scene3D) -> Plan:
    """The scene's :class:`~renderers.shaded_geom.Plan`: one :class:`~renderers.shaded_geom.Solid` per
    object and geometry (cached on the object), reused by the mask, image and shadow passes and by
    the layout's tries (an object that did not move keeps its solid)."""
    if len(scene.objects) > 255:
        raise ValueError(f"a scene has {len(scene.objects)} objects; masks hold at most 255")
    if getattr(scene, "view", None) is None:
        raise ValueError("the shaded renderer needs a 3-D scene (mosaic.scene3d.Scene3D with a view): generate it from a spec "
                         "with image.renderer: shaded")
    out = []
    for o in scene.objects:
        key = (o.shape, o.size, tuple(o.center), o.rotation)
        c = o.__dict__.get("_solid")
        if c is None or c[0] != key:
            c = (key, Solid(o))
            o.__dict__["_solid"] = c
        out.append(c[1])
    plan = scene.__dict__.get("_plan")
    if plan is None or len(plan.solids) != len(out) or any(a is not b for a, b in zip(plan.solids, out)):
        plan = Plan(out)
        scene.__dict__["_plan"] = plan
    return plan


# ----------------------------------------------------------------------------------------------
# primary visibility and the instance mask
# ----------------------------------------------------------------------------------------------

def _primary(cam: _Cam, plan: Plan):
    """The objects' samples of the z-buffer: ``(q, ids, t, D, normals)``, each ``[N]`` for the N samples
    an object wins (``q`` their index in the sample planes, ``ids`` uint8 object + 1, ``t`` float32
    distance, ``D`` and ``normals`` float32 triples)."""
    g = cam.grid(rects(cam, plan.corners))
    D = g["D"]
    tk, code = cast(plan, g["cnt"], cam.C, D, normals="codes")
    h = np.flatnonzero(tk < _INF)
    q = g["q"][h]
    kid = (plan.order + 1).astype(np.uint8)[g["seg"][h]]
    dz = D[2][h]
    with np.errstate(divide="ignore"):
        tg = np.where(dz < 0, -cam.C[2] / dz, _INF).astype(F)
    w = nearest(cam.n * cam.n, q, tg, tk[h], kid)
    win = h[w]
    Dw = tuple(d[win] for d in D)
    # the winners' normals, from their hits and which surface each hit
    tw = tk[win]
    nw = normals_at(plan, g["seg"][win], cam.C, Dw, tw, code[win])
    return q[w], kid[w], tw, Dw, nw


def instance_mask(scene: Scene3D) -> tuple[np.ndarray, np.ndarray]:
    """The instance mask and each object's silhouette.

    Returns:
        mask: uint8 ``[H, W]``: k > 0 is object k-1 (one ray through each pixel centre), 0 ground.
        silhouette: int64 ``[n_objects]``: pixels the object would cover rendered alone, counting
            pixels outside the frame (so an object half out of the frame has visible fraction 1/2).
    """
    plan = _plan(scene)
    v = scene.view
    key = (plan, tuple(v.camera), tuple(v.look_at), v.fov, scene.image_size)
    cached = scene.__dict__.get("_mask")
    if cached is not None and cached[0] == key:  # the layout's check drew it (a copy: callers may write to theirs)
        return cached[1].copy(), cached[2].copy()
    mask, sil = _instance_mask(scene, plan)
    scene.__dict__["_mask"] = (key, mask.copy(), sil.copy())
    return mask, sil


def _instance_mask(scene: Scene3D, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    cam = _Cam(scene, 1)
    n = cam.n
    K = len(plan.solids)
    mask = np.zeros((n, n), np.uint8)
    sil = np.zeros(K, np.int64)
    if not K:
        return mask, sil
    g = cam.grid(rects(cam, plan.corners, clip=False))  # the silhouette runs out of the frame too
    D = g["D"]
    tk, _ = cast(plan, g["cnt"], cam.C, D)
    h = tk < _INF
    sil[plan.order] = np.bincount(g["seg"][h], minlength=K)
    h = np.flatnonzero(h & (g["q"] >= 0))
    if len(h):
        dz = D[2][h]
        with np.errstate(divide="ignore"):
            tg = np.where(dz < 0, -cam.C[2] / dz, _INF).astype(F)
        pix, kid = g["q"][h], (plan.order + 1).astype(np.uint8)[g["seg"][h]]
        w = nearest(n * n, pix, tg, tk[h], kid)
        mask.ravel()[pix[w]] = kid[w]
    return mask, sil


def visibility(scene: Scene3D) -> np.ndarray:
    """Fill each object's ``visible_pixels`` and ``visible_fraction`` in place (what the layout's
    occlusion check reads) and return the instance mask uint8 ``[H, W]``; :func:`annotate` adds the
    rest."""
    mask, sil = instance_mask(scene)
    counts = np.bincount(mask.ravel(), minlength=len(scene.objects) + 1).tolist()
    for k, (o, s_) in enumerate(zip(scene.objects, sil.tolist()), start=1):
        c = counts[k]
        o.visible_pixels = c
        o.visible_fraction = round(c / s_, 6) if s_ else 0.0  # rounded as stored: the scene round-trips
    return mask


def annotate_boxes(scene: Scene3D, mask: np.ndarray) -> None:
    """Fill each object's ``box`` (from the instance ``mask`` of :func:`visibility`) and ``pixel``
    (projected centre) in place."""
    side = scene.image_size
    K = len(scene.objects)
    rows_any = np.zeros((K + 1, side), bool)
    cols_any = np.zeros((K + 1, side), bool)
    ii, jj = np.nonzero(mask)
    kk = mask[ii, jj]
    rows_any[kk, ii] = True
    cols_any[kk, jj] = True
    # first and last row / column of each object (meaningful where it has a pixel)
    r0, r1 = rows_any.argmax(1).tolist(), (side - rows_any[:, ::-1].argmax(1)).tolist()
    c0, c1 = cols_any.argmax(1).tolist(), (side - cols_any[:, ::-1].argmax(1)).tolist()
    pos = np.array([o.position for o in scene.objects], np.float64).reshape(-1, 3)
    pix = scene.view.project(pos, side).tolist() if len(pos) else []
    for k, o in enumerate(scene.objects, start=1):
        o.box = (c0[k], r0[k], c1[k], r1[k]) if o.visible_pixels else None
        o.pixel = tuple(round(v, 4) for v in pix[k - 1])


def annotate(scene: Scene3D) -> np.ndarray:
    """Fill each object's mask-derived ground truth in place (``visible_pixels``,
    ``visible_fraction``, ``box``, ``pixel``) and return the instance mask uint8 ``[H, W]``."""
    mask = visibility(scene)
    annotate_boxes(scene, mask)
    return mask


# ----------------------------------------------------------------------------------------------
# shading
# ----------------------------------------------------------------------------------------------

_OFFSETS: dict = {}


def _light_offsets_xy(s: int, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_light_offsets` as two float32 ``[s * s]`` tables (x, y) by supersample, cached."""
    key = (s, radius)
    out = _OFFSETS.get(key)
    if out is None:
        off = _light_offsets(s, radius).reshape(s * s, 2)
        out = _OFFSETS[key] = (np.ascontiguousarray(off[:, 0]), np.ascontiguousarray(off[:, 1]))
        if len(_OFFSETS) > 64:
            _OFFSETS.clear()
    return out


def _light_offsets(s: int, radius: float) -> np.ndarray:
    """float32 ``[s, s, 2]``: points on a horizontal disk of ``radius`` (a Fibonacci spiral), one per
    supersample, scrambled so neighbouring supersamples take distant points."""
    k = np.arange(s * s, dtype=np.float64)
    rr = radius * np.sqrt((k + 0.5) / (s * s))
    a = k * math.pi * (3.0 - math.sqrt(5.0))
    off = np.stack([rr * np.cos(a), rr * np.sin(a)], -1).astype(F)
    order = np.array([(3 * i + 1) % (s * s) for i in range(s * s)]) if s * s > 2 else np.arange(s * s)
    return off[order].reshape(s, s, 2)


def _shade(scene: Scene3D, s: int) -> list[np.ndarray]:
    """Linear radiance ``[r, g, b]`` of the n = side * s samples, each float32 ``[s * s, side * side]``
    (:func:`_planes`: supersample planes)."""
    plan = _plan(scene)
    cam = _Cam(scene, s)
    n, side = cam.n, scene.image_size
    q_o, ids_o, to, (dx, dy, dz), (nx, ny, nz) = _primary(cam, plan)
    ids = np.zeros(n * n, np.uint8)  # object + 1 of each sample (plane layout), 0 ground or sky
    ids[q_o] = ids_o
    tz = np.empty(n * n, F)  # the objects' distances, where ids > 0
    tz[q_o] = to
    lights = [(np.asarray(p, np.float64), F(i), float(rad)) for _, p, i, rad in scene.view.lights]

    # ground irradiance, smooth: at pixel centres, the same for every supersample of a pixel
    cam1 = _Cam(scene, 1)
    D1 = cam1.rays(0, side, 0, side)
    with np.errstate(divide="ignore"):
        t1 = np.where(D1[2] < 0, -cam1.C[2] / D1[2], F(0))
    gx, gy = cam1.C[0] + t1 * D1[0], cam1.C[1] + t1 * D1[1]
    e_all = np.full((side, side), F(AMBIENT))
    e_key = None
    for li, (Lp, inten, _) in enumerate(lights):
        lx, ly, lz = F(Lp[0]) - gx, F(Lp[1]) - gy, F(Lp[2])
        e = inten * lz / np.sqrt(lx * lx + ly * ly + lz * lz)
        e_all += e
        if li == 0:
            e_key = e

    # key-lamp shadows: a shadow ray from every sample in each object's shadow rectangle (the projection
    # of its box and of the box's shadow on the ground from the four corners of the lamp's disk)
    shadowed = np.zeros(n * n, bool)
    key, _, krad = lights[0]
    if len(plan.solids):
        cor = plan.corners
        top = cor[:, 1::2]  # the corners at z = h
        Lc = key + np.array([[ox, oy, 0.0] for ox in (-krad, krad) for oy in (-krad, krad)])  # [4, 3]
        valid = Lc[None, :, 2] > top[:, :, 2].max(1)[:, None] + 1e-6  # the lamp corner above the top: a shadow on the ground
        with np.errstate(divide="ignore", invalid="ignore"):
            sh = Lc[None, :, None] + (top[:, None] - Lc[None, :, None]) * (Lc[None, :, None, 2] / (Lc[None, :, None, 2] - top[:, None, :, 2]))[..., None]
        sh = np.where(valid[:, :, None, None], sh, top[:, None])
        g = cam.grid(rects(cam, np.concatenate([cor, sh.reshape(len(cor), 16, 3)], 1)), sub=krad > 0)
        q, D = g["q"], g["D"]
        with np.errstate(divide="ignore"):
            tr = np.where(ids[q] > 0, tz[q], np.where(D[2] < 0, -cam.C[2] / D[2], F(0)))  # the sample's visible point
        P = tuple(cam.C[c_] + tr * D[c_] for c_ in range(3))
        lx = F(key[0]) - P[0]
        ly = F(key[1]) - P[1]
        if krad > 0:
            offx, offy = _light_offsets_xy(s, krad)  # the lamp point of each supersample
            lx = lx + offx.take(g["sub"])
            ly = ly + offy.take(g["sub"])
        lz = F(key[2]) - P[2]
        dist = np.sqrt(lx * lx + ly * ly + lz * lz)
        inv = F(1) / dist
        th, _ = cast(plan, g["cnt"], P, (lx * inv, ly * inv, lz * inv))
        shadowed[q[th < dist]] = True

    # the ground: lit, or lit less the key lamp where shadowed
    ground = srgb_to_linear(scene.background)
    sh2 = shadowed.reshape(s * s, side * side)
    e_sh = (e_all - e_key).ravel()
    e_all = e_all.ravel()
    col = [np.where(sh2, ground[c] * e_sh, ground[c] * e_all) for c in range(3)]

    # objects: full shading on their samples only
    if len(q_o):
        oid = ids_o
        alb_tab = np.concatenate([np.zeros((1, 3), F), srgb_to_linear([o.rgb for o in scene.objects]).reshape(-1, 3)]).astype(F)
        metal_tab = np.array([False] + [getattr(o, "material", "rubber") == "metal" for o in scene.objects])
        alb = alb_tab[oid]
        metal = metal_tab[oid]
        px, py, pz = cam.C[0] + to * dx, cam.C[1] + to * dy, cam.C[2] + to * dz
        sh = shadowed[q_o]
        N = len(q_o)
        diffuse = np.full(N, F(0))
        spec_rub = np.zeros(N, F)
        spec_met = np.zeros(N, F)
        for li, (Lp, inten, _) in enumerate(lights):
            lx, ly, lz = F(Lp[0]) - px, F(Lp[1]) - py, F(Lp[2]) - pz
            inv = F(1) / np.sqrt(lx * lx + ly * ly + lz * lz)
            lx, ly, lz = lx * inv, ly * inv, lz * inv
            ndl = np.maximum(nx * lx + ny * ly + nz * lz, F(0))
            if li == 0:
                ndl = np.where(sh, F(0), ndl)
            diffuse += inten * ndl
            hx, hy, hz = lx - dx, ly - dy, lz - dz
            ndh = np.maximum((nx * hx + ny * hy + nz * hz) / np.sqrt(hx * hx + hy * hy + hz * hz), F(0))
            ndh = np.where(ndl > 0, ndh, F(0))
            p16 = _pow2k(ndh, 4)
            spec_rub += inten * p16
            spec_met += inten * _pow2k(p16, 3)  # exponent 128
        irr = F(AMBIENT) * (F(0.5) + F(0.5) * nz) + diffuse
        oc = [alb[:, c] * irr + F(0.03) * spec_rub for c in range(3)]
        if metal.any():
            m = np.flatnonzero(metal)
            mdx, mdy, mdz, mnx, mny, mnz = dx[m], dy[m], dz[m], nx[m], ny[m], nz[m]
            dn = F(2) * (mdx * mnx + mdy * mny + mdz * mnz)
            rx, ry, rz = mdx - dn * mnx, mdy - dn * mny, mdz - dn * mnz
            down = rz < -1e-4
            with np.errstate(divide="ignore", invalid="ignore"):
                tg = np.where(down, -pz[m] / rz, F(0))
            gx_, gy_ = px[m] + tg * rx, py[m] + tg * ry
            gl = np.full(len(m), F(AMBIENT))
            for Lp, inten, _ in lights:
                lx, ly, lz = F(Lp[0]) - gx_, F(Lp[1]) - gy_, F(Lp[2])
                gl += inten * lz / np.sqrt(lx * lx + ly * ly + lz * lz)
            sky_k = F(0.7) + F(1.3) * np.maximum(rz, F(0))
            am = alb[m]
            for c in range(3):
                env = np.where(down, F(0.7) * ground[c] * gl, SKY[c] * sky_k)
                oc[c][m] = (am[:, c] * (F(0.9) * env + F(0.03) * irr[m]) + F(0.05) * env
                            + (F(0.5) + F(0.5) * am[:, c]) * (F(1.5) * spec_met[m] + F(0.25) * spec_rub[m]))
        for c in range(3):
            col[c].reshape(-1)[q_o] = oc[c]
    if not cam.no_sky():
        sky = _planes(~(cam.rays(0, n, 0, n)[2] < 0), s).ravel() & (ids == 0)
        for c in range(3):
            col[c].reshape(-1)[sky] = SKY[c]
    return col


def _encode(col, s: int) -> np.ndarray:
    """Box-average the supersamples of ``[r, g, b]`` (plane by plane: a fixed order of sums) and encode
    to sRGB uint8 ``[H, W, 3]``."""
    side = int(round(math.sqrt(col[0].shape[1])))
    chans = []
    for ch in col:
        acc = ch[0].copy()
        for k in range(1, s * s):
            acc = acc + ch[k]
        lin = acc * F(1.0 / (s * s)) if s > 1 else acc
        chans.append(_LUT[np.clip(lin * F(_LUT_N), 0, _LUT_N - 1).astype(np.int32)])
    return np.stack(chans, -1).reshape(side, side, 3)


class ShadedRenderer(Renderer):
    """Shaded 3-D rendering of :class:`mosaic.scene3d.Scene3D` scenes (module docstring).

    Args:
        supersample: rays per pixel side (2 = 4 rays a pixel; the spec's ``image.supersample``).
    """

    name = "shaded"

    def __init__(self, supersample: int = 2):
        if not 1 <= int(supersample) <= 16:
            raise ValueError(f"supersample must be 1..16, got {supersample}")
        self.supersample = int(supersample)

    def render_image(self, scene: Scene3D) -> np.ndarray:
        """sRGB uint8 ``[H, W, 3]``."""
        return _encode(_shade(scene, self.supersample), self.supersample)

    def render_one(self, scene: Scene3D) -> tuple[np.ndarray, np.ndarray]:
        """``(image uint8 [H, W, 3], instance mask uint8 [H, W])``."""
        img = self.render_image(scene)
        mask, _ = instance_mask(scene)
        return img, mask
