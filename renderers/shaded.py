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

from mosaic.scene3d import Scene3D, SolidObject
from renderers.base import Renderer

F = np.float32
EPS = 1e-3  # world units: shadow-ray offset along the normal and minimum hit distance
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

    def rect(self, pts: np.ndarray, clip: bool = True) -> tuple[int, int, int, int] | None:
        """Sample rectangle ``(i0, i1, j0, j1)`` covering the projection of world points ``[M, 3]``
        (all in front of the camera), clipped to the frame (None when empty)."""
        q = (pts - self._C64) @ self._M
        z = q[:, 2]
        if z.min() <= 1e-6:
            i0, i1, j0, j1 = 0, self.n, 0, self.n
        else:
            x = q[:, 0] / z * self._k + self.n / 2.0
            y = self.n / 2.0 - q[:, 1] / z * self._k
            j0 = math.floor(x.min() - 0.5)
            j1 = math.ceil(x.max() + 0.5) + 1
            i0 = math.floor(y.min() - 0.5)
            i1 = math.ceil(y.max() + 0.5) + 1
        if clip:
            i0, j0, i1, j1 = max(i0, 0), max(j0, 0), min(i1, self.n), min(j1, self.n)
            if i1 <= i0 or j1 <= j0:
                return None
        return i0, i1, j0, j1


# ----------------------------------------------------------------------------------------------
# solids: bounding boxes and ray intersection (structure of arrays: x, y, z apart)
# ----------------------------------------------------------------------------------------------

_INF = F(np.inf)


class _Solid:
    """One object's geometry in float32 world coordinates."""

    def __init__(self, o: SolidObject):
        self.o = o
        x, y = o.position[0], o.position[1]
        self.x, self.y = F(x), F(y)
        self.r = F(o.radius_world)
        self.h = F(o.height)
        self.kind = "sphere" if o.shape == "sphere" else "cylinder" if o.shape in ("cylinder", "circle") else "prism"
        self.poly = o.footprint() if self.kind == "prism" else None
        self.planes = None
        if self.poly is not None:
            p = self.poly
            nxt = np.r_[1:len(p), 0]
            e = p[nxt] - p
            cross = e[:, 0] * e[nxt, 1] - e[:, 1] * e[nxt, 0]
            if np.all(cross > 0):  # convex: the solid is the intersection of its wall, top and ground half-spaces
                ln = np.hypot(e[:, 0], e[:, 1])
                nx, ny = e[:, 1] / ln, -e[:, 0] / ln
                c = nx * p[:, 0] + ny * p[:, 1]
                self.planes = [(F(a), F(b), F(0), F(d)) for a, b, d in zip(nx, ny, c)] + [(F(0), F(0), F(1), F(self.h))]
            self.poly = p.astype(F)

    def corners(self) -> np.ndarray:
        """The 8 corners float64 ``[8, 3]`` of the axis-aligned bounding box."""
        if self.poly is not None:
            x0, y0 = self.poly.min(0)
            x1, y1 = self.poly.max(0)
        else:
            x0, x1, y0, y1 = self.x - self.r, self.x + self.r, self.y - self.r, self.y + self.r
        return np.array([[a, b, c] for a in (x0, x1) for b in (y0, y1) for c in (0.0, float(self.h))], np.float64)

    def hit(self, O, D, normals: bool = True):
        """First hit of rays ``O + t D`` beyond ``EPS``: ``O`` and ``D`` are ``(x, y, z)`` triples of
        float32 arrays (or scalars for O), D unit. Returns ``t`` float32 (inf where missed) and the
        unit normal ``(nx, ny, nz)`` (None unless ``normals``)."""
        if self.kind == "sphere":
            return self._sphere(O, D, normals)
        if self.kind == "cylinder":
            return self._cylinder(O, D, normals)
        if self.planes is not None:
            return self._convex(O, D, normals)
        return self._prism(O, D, normals)

    def _convex(self, O, D, normals):
        """Cyrus-Beck clipping against the walls, the top (and the ground z >= 0): the entry point."""
        ox, oy, oz = O
        dx, dy, dz = D
        shape = np.broadcast_shapes(np.shape(ox), np.shape(dx))
        t_in = np.full(shape, -np.inf, F)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_out = np.where(dz < 0, -oz / dz, _INF)  # where the ray leaves z >= 0
        which = np.full(np.shape(dx), len(self.planes), np.int8) if normals else None
        for k, (a, b, c, d) in enumerate(self.planes):
            den = a * dx + b * dy + c * dz
            num = d - (a * ox + b * oy + c * oz)  # >= 0 inside the plane's half-space
            with np.errstate(divide="ignore", invalid="ignore"):
                t = num / den
            enter = den < 0
            upd = enter & (t > t_in)
            t_in = np.where(upd, t, t_in)
            if normals:
                which[upd] = k
            t_out = np.where(den > 0, np.minimum(t_out, t), t_out)
            t_out = np.where((den == 0) & (num < 0), F(-np.inf), t_out)  # parallel and outside
        ok = (t_in <= t_out) & (t_in > EPS)
        t = np.where(ok, t_in, _INF).astype(F)
        if not normals:
            return t, None
        wn = np.array([(a, b, c) for a, b, c, _ in self.planes] + [(0, 0, 1)], F)
        return t, (wn[which, 0], wn[which, 1], wn[which, 2])

    def _sphere(self, O, D, normals):
        ox, oy, oz = O[0] - self.x, O[1] - self.y, O[2] - self.r
        dx, dy, dz = D
        b = ox * dx + oy * dy + oz * dz
        cc = ox * ox + oy * oy + oz * oz - self.r * self.r
        disc = b * b - cc
        ok = disc >= 0
        t = -b - np.sqrt(np.maximum(disc, F(0)))
        t = np.where(ok & (t > EPS), t, _INF)
        if not normals:
            return t, None
        tt = np.where(ok, t, F(0))
        inv = F(1) / self.r
        return t, ((ox + tt * dx) * inv, (oy + tt * dy) * inv, (oz + tt * dz) * inv)

    def _cylinder(self, O, D, normals):
        ox, oy, oz = O[0] - self.x, O[1] - self.y, O[2]
        dx, dy, dz = D
        a = dx * dx + dy * dy
        b = ox * dx + oy * dy
        c = ox * ox + oy * oy - self.r * self.r
        disc = b * b - a * c
        ok = (disc >= 0) & (a > 1e-12)
        ts = (-b - np.sqrt(np.maximum(disc, F(0)))) / np.where(ok, a, F(1))
        zs = oz + ts * dz
        ts = np.where(ok & (ts > EPS) & (zs >= 0) & (zs <= self.h), ts, _INF)
        with np.errstate(divide="ignore", invalid="ignore"):
            tc = (self.h - oz) / dz
        xc, yc = ox + tc * dx, oy + tc * dy
        tc = np.where((tc > EPS) & (xc * xc + yc * yc <= self.r * self.r), tc, _INF)
        t = np.minimum(ts, tc)
        if not normals:
            return t, None
        side = ts < tc
        tt = np.where(side, ts, F(0))
        inv = F(1) / self.r
        return t, (np.where(side, (ox + tt * dx) * inv, F(0)), np.where(side, (oy + tt * dy) * inv, F(0)), np.where(side, F(0), F(1)))

    def _prism(self, O, D, normals):
        ox, oy, oz = O
        dx, dy, dz = D
        with np.errstate(divide="ignore", invalid="ignore"):
            tc = (self.h - oz) / dz
        px, py = ox + tc * dx, oy + tc * dy
        P = self.poly
        n_e = len(P)
        inside = None
        for k in range(n_e):  # top cap: even-odd point in polygon
            x1, y1 = P[k]
            x2, y2 = P[(k + 1) % n_e]
            if y1 == y2:
                continue
            c = ((y1 > py) != (y2 > py)) & (px < x1 + (py - y1) * F((x2 - x1) / (y2 - y1)))
            inside = c if inside is None else inside ^ c
        best = np.where(inside & (tc > EPS), tc, _INF)
        which = np.full(best.shape, n_e, np.int8) if normals else None  # n_e: cap, k: wall k
        wn = np.zeros((n_e + 1, 3), F)
        wn[n_e] = (0, 0, 1)
        for k in range(n_e):
            x1, y1 = P[k]
            x2, y2 = P[(k + 1) % n_e]
            ex, ey = float(x2 - x1), float(y2 - y1)
            ln = math.hypot(ex, ey)
            nx, ny = F(ey / ln), F(-ex / ln)  # outward for a counter-clockwise polygon
            wn[k] = (nx, ny, 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = (nx * (x1 - ox) + ny * (y1 - oy)) / (nx * dx + ny * dy)
            u = ((ox + t * dx - x1) * F(ex / (ln * ln)) + (oy + t * dy - y1) * F(ey / (ln * ln)))
            z = oz + t * dz
            ok = (t > EPS) & (t < best) & (u >= 0) & (u <= 1) & (z >= 0) & (z <= self.h)
            best = np.where(ok, t, best)
            if normals:
                which[ok] = k
        if not normals:
            return best, None
        return best, (wn[which, 0], wn[which, 1], wn[which, 2])


def _solids(scene: Scene3D) -> list[_Solid]:
    if len(scene.objects) > 255:
        raise ValueError(f"a scene has {len(scene.objects)} objects; masks hold at most 255")
    if getattr(scene, "view", None) is None:
        raise ValueError("the shaded renderer needs a 3-D scene (mosaic.scene3d.Scene3D with a view): generate it from a spec "
                         "with image.renderer: shaded")
    out = []
    for o in scene.objects:  # one _Solid per object and geometry, reused by the mask, image and shadow passes
        key = (o.shape, o.size, tuple(o.center), o.rotation)
        c = o.__dict__.get("_solid")
        if c is None or c[0] != key:
            c = (key, _Solid(o))
            o.__dict__["_solid"] = c
        out.append(c[1])
    return out


# ----------------------------------------------------------------------------------------------
# primary visibility
# ----------------------------------------------------------------------------------------------

def _primary(cam: _Cam, solids: list[_Solid], D, normals: bool = True):
    """z-buffer of the n x n samples: ``t`` float32 [n, n] (inf for sky), ``ids`` uint8 [n, n]
    (0 ground or sky), normals ``(nx, ny, nz)`` float32 [n, n] each (None unless asked)."""
    n = cam.n
    with np.errstate(divide="ignore"):
        t = np.where(D[2] < 0, -cam.C[2] / D[2], _INF).astype(F)
    ids = np.zeros((n, n), np.uint8)
    nrm = None
    if normals:
        nrm = (np.zeros((n, n), F), np.zeros((n, n), F), np.ones((n, n), F))
    for k, so in enumerate(solids, start=1):
        rc = cam.rect(so.corners())
        if rc is None:
            continue
        i0, i1, j0, j1 = rc
        tk, nk = so.hit(cam.C, tuple(d[i0:i1, j0:j1] for d in D), normals)
        tv = t[i0:i1, j0:j1]
        m = tk < tv
        tv[m] = tk[m]
        ids[i0:i1, j0:j1][m] = k
        if normals:
            for c in range(3):
                nrm[c][i0:i1, j0:j1][m] = nk[c][m]
    return t, ids, nrm


def instance_mask(scene: Scene3D) -> tuple[np.ndarray, np.ndarray]:
    """The instance mask and each object's silhouette.

    Returns:
        mask: uint8 ``[H, W]``: k > 0 is object k-1 (one ray through each pixel centre), 0 ground.
        silhouette: int64 ``[n_objects]``: pixels the object would cover rendered alone, counting
            pixels outside the frame (so an object half out of the frame has visible fraction 1/2).
    """
    solids = _solids(scene)
    cam = _Cam(scene, 1)
    n = cam.n
    D = cam.rays(0, n, 0, n)
    with np.errstate(divide="ignore"):
        t = np.where(D[2] < 0, -cam.C[2] / D[2], _INF).astype(F)
    mask = np.zeros((n, n), np.uint8)
    sil = np.zeros(len(solids), np.int64)
    for k, so in enumerate(solids, start=1):
        i0, i1, j0, j1 = cam.rect(so.corners(), clip=False)
        c0, c1, d0, d1 = max(i0, 0), min(i1, n), max(j0, 0), min(j1, n)
        if (c0, c1, d0, d1) == (i0, i1, j0, j1):  # inside the frame: one pass gives both
            tk, _ = so.hit(cam.C, tuple(d[i0:i1, j0:j1] for d in D), normals=False)
        else:  # the silhouette runs out of the frame: rays beyond it too
            tk, _ = so.hit(cam.C, cam.rays(i0, i1, j0, j1), normals=False)
        sil[k - 1] = int(np.isfinite(tk).sum())
        if c1 <= c0 or d1 <= d0:
            continue
        tk = tk[c0 - i0:c1 - i0, d0 - j0:d1 - j0]
        tv = t[c0:c1, d0:d1]
        m = tk < tv
        tv[m] = tk[m]
        mask[c0:c1, d0:d1][m] = k
    return mask, sil


def annotate(scene: Scene3D) -> np.ndarray:
    """Fill each object's mask-derived ground truth in place (``visible_pixels``,
    ``visible_fraction``, ``box``, ``pixel``) and return the instance mask uint8 ``[H, W]``."""
    mask, sil = instance_mask(scene)
    side = scene.image_size
    counts = np.bincount(mask.ravel(), minlength=len(scene.objects) + 1)
    rows_any = np.zeros((len(scene.objects) + 1, side), bool)
    cols_any = np.zeros((len(scene.objects) + 1, side), bool)
    ii, jj = np.nonzero(mask)
    rows_any[mask[ii, jj], ii] = True
    cols_any[mask[ii, jj], jj] = True
    pos = np.array([o.position for o in scene.objects], np.float64).reshape(-1, 3)
    pix = scene.view.project(pos, side) if len(pos) else np.zeros((0, 3))
    for k, o in enumerate(scene.objects, start=1):
        c = int(counts[k])
        o.visible_pixels = c
        o.visible_fraction = round(c / int(sil[k - 1]), 6) if sil[k - 1] else 0.0  # rounded as stored: the scene round-trips
        if c:
            r, q = np.nonzero(rows_any[k])[0], np.nonzero(cols_any[k])[0]
            o.box = (int(q[0]), int(r[0]), int(q[-1]) + 1, int(r[-1]) + 1)
        else:
            o.box = None
        o.pixel = tuple(round(float(v), 4) for v in pix[k - 1])
    return mask


# ----------------------------------------------------------------------------------------------
# shading
# ----------------------------------------------------------------------------------------------

def _light_offsets(s: int, radius: float) -> np.ndarray:
    """float32 ``[s, s, 2]``: points on a horizontal disk of ``radius`` (a Fibonacci spiral), one per
    supersample, scrambled so neighbouring supersamples take distant points."""
    k = np.arange(s * s, dtype=np.float64)
    rr = radius * np.sqrt((k + 0.5) / (s * s))
    a = k * math.pi * (3.0 - math.sqrt(5.0))
    off = np.stack([rr * np.cos(a), rr * np.sin(a)], -1).astype(F)
    order = np.array([(3 * i + 1) % (s * s) for i in range(s * s)]) if s * s > 2 else np.arange(s * s)
    return off[order].reshape(s, s, 2)


def _expand(a: np.ndarray, s: int) -> np.ndarray:
    """[H, W] -> [H*s, W*s], each value repeated over its s x s block."""
    if s == 1:
        return a.copy()
    H, W = a.shape
    return np.broadcast_to(a[:, None, :, None], (H, s, W, s)).reshape(H * s, W * s).copy()


def _shade(scene: Scene3D, s: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Linear radiance ``(r, g, b)``, each float32 ``[n, n]``, of the n = side * s samples."""
    solids = _solids(scene)
    cam = _Cam(scene, s)
    n, side = cam.n, scene.image_size
    D = cam.rays(0, n, 0, n)
    t, ids, N = _primary(cam, solids, D)
    lights = [(np.asarray(p, np.float64), F(i), float(rad)) for _, p, i, rad in scene.view.lights]

    # ground irradiance, smooth: at pixel centres, repeated over the supersamples
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
    e_all, e_key = _expand(e_all, s), _expand(e_key, s)

    # key-lamp shadows: a shadow ray from every sample in each object's shadow rectangle
    hit = np.isfinite(t)
    shadowed = np.zeros((n, n), bool)
    key, _, krad = lights[0]
    off = np.tile(_light_offsets(s, krad), (side, side, 1)) if krad > 0 else None
    for so in solids:
        c = so.corners()
        top = c[c[:, 2] > 0]
        pts = [c]
        for ox in (-krad, krad):
            for oy in (-krad, krad):
                Lc = key + np.array([ox, oy, 0.0])
                if Lc[2] > top[:, 2].max() + 1e-6:
                    pts.append(Lc + (top - Lc) * (Lc[2] / (Lc[2] - top[:, 2]))[:, None])
        rc = cam.rect(np.concatenate(pts))
        if rc is None:
            continue
        i0, i1, j0, j1 = rc
        tr = np.where(hit[i0:i1, j0:j1], t[i0:i1, j0:j1], F(0))
        P = tuple(cam.C[c_] + tr * D[c_][i0:i1, j0:j1] for c_ in range(3))
        lx = F(key[0]) - P[0]
        ly = F(key[1]) - P[1]
        if off is not None:
            lx = lx + off[i0:i1, j0:j1, 0]
            ly = ly + off[i0:i1, j0:j1, 1]
        lz = F(key[2]) - P[2]
        dist = np.sqrt(lx * lx + ly * ly + lz * lz)
        inv = F(1) / dist
        th, _ = so.hit(P, (lx * inv, ly * inv, lz * inv), normals=False)
        shadowed[i0:i1, j0:j1] |= th < dist

    ground = srgb_to_linear(scene.background)
    e = e_all - np.where(shadowed, e_key, F(0))
    col = [ground[c] * e for c in range(3)]

    # objects: full shading on their samples only
    idx = np.flatnonzero(ids)
    if len(idx):
        oid = ids.ravel()[idx]
        alb_tab = np.concatenate([np.zeros((1, 3), F), srgb_to_linear([o.rgb for o in scene.objects]).reshape(-1, 3)]).astype(F)
        metal_tab = np.array([False] + [getattr(o, "material", "rubber") == "metal" for o in scene.objects])
        alb = alb_tab[oid]
        metal = metal_tab[oid]
        dx, dy, dz = (d.ravel()[idx] for d in D)
        nx, ny, nz = (a.ravel()[idx] for a in N)
        to = t.ravel()[idx]
        px, py, pz = cam.C[0] + to * dx, cam.C[1] + to * dy, cam.C[2] + to * dz
        sh = shadowed.ravel()[idx]
        diffuse = np.full(len(idx), F(0))
        spec_rub = np.zeros(len(idx), F)
        spec_met = np.zeros(len(idx), F)
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
            col[c].ravel()[idx] = oc[c]
    sky = ~hit
    if sky.any():
        for c in range(3):
            col[c][sky] = SKY[c]
    return tuple(col)


def _encode(col, s: int) -> np.ndarray:
    """Box-average the supersamples of ``(r, g, b)`` (a fixed order of sums) and encode to sRGB uint8 ``[H, W, 3]``."""
    chans = []
    for ch in col:
        acc = None
        for a in range(s):
            for b in range(s):
                blk = ch[a::s, b::s]
                acc = blk.copy() if acc is None else acc + blk
        lin = acc * F(1.0 / (s * s)) if s > 1 else acc
        chans.append(_LUT[np.clip(lin * F(_LUT_N), 0, _LUT_N - 1).astype(np.int32)])
    return np.stack(chans, -1)


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
