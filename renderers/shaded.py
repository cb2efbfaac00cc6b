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
  the environment, a little diffuse, and sharp Blinn-Phong highlights of the three lamps. The mirror
  traces one bounce (:mod:`renderers.shaded_mirror`): the other objects, Lambert-lit; else the
  ground, lit and with the key lamp's shadow, below the horizon; else a studio sky that darkens
  towards the zenith (CLEVR's dark world), so a metal sphere shows CLEVR's sharp horizon line and a
  metal cube's top is darker than a rubber one's. The bounce is traced once per pixel and object
  and shared by that object's supersamples in the pixel.
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
from renderers.shaded_cam import Cams
from renderers.shaded_geom import _INF, EPS, F, Plan, Solid, cast, nearest, normals_at  # noqa: F401  (EPS: re-exported)
from renderers.shaded_mirror import in_key_shadow, mirror_hits, pixel_reps

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


_LINEAR: dict[tuple, np.ndarray] = {}
_ZERO3 = np.zeros(3, F)


def _linear(rgb) -> np.ndarray:
    """:func:`srgb_to_linear` of one colour, float32 ``[3]``, cached by its bytes (the same values)."""
    key = tuple(rgb)
    out = _LINEAR.get(key)
    if out is None:
        out = srgb_to_linear(key)
        if len(_LINEAR) < 4096:
            _LINEAR[key] = out
    return out


def _pow2k(x: np.ndarray, k: int) -> np.ndarray:
    for _ in range(k):
        x = x * x
    return x


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
    out = _solids(scene)
    plan = scene.__dict__.get("_plan")
    if plan is None or len(plan.solids) != len(out) or any(a is not b for a, b in zip(plan.solids, out)):
        plan = Plan(out)
        scene.__dict__["_plan"] = plan
    return plan


def _solids(scene: Scene3D) -> list[Solid]:
    """The :class:`~renderers.shaded_geom.Solid` of each object, cached on the object (an object that
    did not move keeps its solid)."""
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
    return out


def _plan_of(scenes: list[Scene3D]) -> Plan:
    """One :class:`~renderers.shaded_geom.Plan` of the objects of a batch of scenes (each object's
    solid is its scene's, :func:`_solids`), with each object's scene and mask id."""
    if len(scenes) == 1:
        return _plan(scenes[0])
    sols = [_solids(sc) for sc in scenes]
    return Plan([so for ss in sols for so in ss], [b for b, ss in enumerate(sols) for _ in ss], [k for ss in sols for k in range(len(ss))])


# ----------------------------------------------------------------------------------------------
# primary visibility and the instance mask
# ----------------------------------------------------------------------------------------------

def _primary(cam: Cams, plan: Plan):
    """The objects' samples of the z-buffer: ``(q, ids, t, D, normals, rs)``, each ``[N]`` for the N
    samples an object wins (``q`` their index in the sample planes of the batch, ``ids`` uint8 object
    + 1 in its scene, ``t`` float32 distance, ``D`` and ``normals`` float32 triples, ``rs`` their
    scene: None for one scene)."""
    g = cam.grid(cam.rects(plan, plan.corners), plan)
    D, rs = g["D"], g["rs"]
    O = cam.origins(rs)
    tk, code = cast(plan, g["cnt"], O, D, normals="codes")
    h = np.flatnonzero(tk < _INF)
    q = g["q"][h]
    kid = plan.kid[g["seg"][h]]
    dz = D[2][h]
    with np.errstate(divide="ignore"):
        tg = np.where(dz < 0, -(O[2] if rs is None else O[2][h]) / dz, _INF).astype(F)
    w = nearest(cam.B * cam.n * cam.n, q, tg, tk[h], kid)
    win = h[w]
    Dw = tuple(d[win] for d in D)
    # the winners' normals, from their hits and which surface each hit
    tw = tk[win]
    rw = None if rs is None else rs[win]
    nw = normals_at(plan, g["seg"][win], O if rs is None else tuple(o[win] for o in O), Dw, tw, code[win])
    return q[w], kid[w], tw, Dw, nw, rw


def _mask_key(scene: Scene3D) -> tuple:
    """What a scene's instance mask depends on: its objects' solids (by identity), camera and size."""
    v = scene.view
    return (tuple(_solids(scene)), tuple(v.camera), tuple(v.look_at), v.fov, scene.image_size)


def instance_mask(scene: Scene3D) -> tuple[np.ndarray, np.ndarray]:
    """The instance mask and each object's silhouette.

    Returns:
        mask: uint8 ``[H, W]``: k > 0 is object k-1 (one ray through each pixel centre), 0 ground.
        silhouette: int64 ``[n_objects]``: pixels the object would cover rendered alone, counting
            pixels outside the frame (so an object half out of the frame has visible fraction 1/2).
    """
    key = _mask_key(scene)
    cached = scene.__dict__.get("_mask")
    if cached is not None and cached[0] == key:  # the layout's check drew it (a copy: callers may write to theirs)
        return cached[1].copy(), cached[2].copy()
    (mask,), (sil,) = _instance_masks([scene], _plan(scene))
    scene.__dict__["_mask"] = (key, mask.copy(), sil.copy())
    return mask, sil


def prime_masks(scenes: list[Scene3D]) -> None:
    """Draw the instance masks of those of ``scenes`` (one image side) without one, in one batched pass,
    and keep them on the scenes for :func:`instance_mask` (the same masks it draws one at a time): the
    layout's occlusion checks of several samples (:func:`mosaic.sampling.sample_scenes`)."""
    todo = []
    for sc in scenes:
        cached = sc.__dict__.get("_mask")
        if cached is None or cached[0] != _mask_key(sc):
            todo.append(sc)
    if len(todo) < 2 or len({sc.image_size for sc in todo}) != 1:
        return
    masks, sils = _instance_masks(todo, _plan_of(todo))
    for sc, mask, sil in zip(todo, masks, sils):
        sc.__dict__["_mask"] = (_mask_key(sc), mask, sil)


def _instance_masks(scenes: list[Scene3D], plan: Plan) -> tuple[np.ndarray, list[np.ndarray]]:
    """The instance masks uint8 ``[B, H, W]`` and silhouettes (int64 ``[n_objects]`` each) of a batch of
    scenes whose objects ``plan`` holds (:func:`_plan_of`)."""
    cam = Cams(scenes, 1)
    n, B = cam.n, cam.B
    K = len(plan.solids)
    masks = np.zeros((B, n, n), np.uint8)
    sil = np.zeros(K, np.int64)
    if K:
        g = cam.grid(cam.rects(plan, plan.corners, clip=False), plan)  # the silhouette runs out of the frame too
        D, rs = g["D"], g["rs"]
        O = cam.origins(rs)
        tk, _ = cast(plan, g["cnt"], O, D)
        h = tk < _INF
        sil[plan.order] = np.bincount(g["seg"][h], minlength=K)
        h = np.flatnonzero(h & (g["q"] >= 0))
        if len(h):
            dz = D[2][h]
            with np.errstate(divide="ignore"):
                tg = np.where(dz < 0, -(O[2] if rs is None else O[2][h]) / dz, _INF).astype(F)
            pix, kid = g["q"][h], plan.kid[g["seg"][h]]
            w = nearest(B * n * n, pix, tg, tk[h], kid)
            masks.ravel()[pix[w]] = kid[w]
    ends = np.cumsum([len(sc.objects) for sc in scenes]).tolist()
    return masks, [sil[a:b] for a, b in zip([0] + ends[:-1], ends)]


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


#: :func:`annotate_boxes` compares the mask with every id at once up to this many (ids x pixels)
_BOX_DENSE = 1 << 22


def annotate_boxes(scene: Scene3D, mask: np.ndarray) -> None:
    """Fill each object's ``box`` (from the instance ``mask`` of :func:`visibility`) and ``pixel``
    (projected centre) in place."""
    side = scene.image_size
    K = len(scene.objects)
    if (K + 1) * side * side <= _BOX_DENSE:  # one comparison per id and pixel: [K + 1, H, W] bool
        eq = mask == np.arange(K + 1, dtype=np.uint8)[:, None, None]
        rows_any, cols_any = eq.any(2), eq.any(1)
    else:  # many objects on a large image: by the object pixels
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


def _per_scene(values, rs: np.ndarray | None):
    """float32 ``[B]`` per-scene ``values`` as each sample's: the scalar for one scene (``rs`` None),
    else read at ``rs``, each sample's scene (the same float32 values either way)."""
    return values[0] if rs is None else values.take(rs)


def _shade(scenes: list[Scene3D], s: int) -> list[np.ndarray]:
    """Linear radiance ``[r, g, b]`` of the n = side * s samples of each of B scenes (one image side, one
    key-lamp radius), each float32 ``[B, s * s, side * side]`` (:func:`_planes`: supersample planes).
    Every sample takes the same float32 operations with the same values as when its scene is
    rendered alone (:mod:`renderers.shaded_cam`)."""
    plan = _plan_of(scenes)
    cam = Cams(scenes, s)
    B, n, side = cam.B, cam.n, cam.side
    nn = n * n
    q_o, ids_o, to, (dx, dy, dz), (nx, ny, nz), rs_o = _primary(cam, plan)
    ids = np.zeros(B * nn, np.uint8)  # object + 1 of each sample (plane layout, scene after scene), 0 ground or sky
    ids[q_o] = ids_o
    tz = np.empty(B * nn, F)  # the objects' distances, where ids > 0
    tz[q_o] = to
    # the lamps of each scene: positions float64 [B, 3 lamps, 3] (and as float32), intensities float32 [B, 3]
    LP = np.array([[p for _, p, _, _ in sc.view.lights] for sc in scenes], np.float64)
    LPf = LP.astype(F)
    INT = np.array([[i for _, _, i, _ in sc.view.lights] for sc in scenes], np.float64).astype(F)
    krad = float(scenes[0].view.lights[0][3])

    # ground irradiance, smooth: at pixel centres, the same for every supersample of a pixel
    cam1 = Cams(scenes, 1)
    D1 = cam1.rays(0, side, 0, side)
    C1 = [cam1.C[:, c, None, None] for c in range(3)]
    with np.errstate(divide="ignore"):
        t1 = np.where(D1[2] < 0, -C1[2] / D1[2], F(0))
    gx, gy = C1[0] + t1 * D1[0], C1[1] + t1 * D1[1]
    e_all = np.full((B, side, side), F(AMBIENT))
    e_key = None
    for li in range(3):
        lx, ly, lz = LPf[:, li, 0, None, None] - gx, LPf[:, li, 1, None, None] - gy, LPf[:, li, 2, None, None]
        e = INT[:, li, None, None] * lz / np.sqrt(lx * lx + ly * ly + lz * lz)
        e_all += e
        if li == 0:
            e_key = e

    # key-lamp shadows: a shadow ray from every sample in each object's shadow rectangle (the projection
    # of its box and of the box's shadow on the ground from the four corners of the lamp's disk)
    shadowed = np.zeros(B * nn, bool)
    if len(plan.solids):
        cor = plan.corners
        top = cor[:, 1::2]  # the corners at z = h
        off = np.array([[ox, oy, 0.0] for ox in (-krad, krad) for oy in (-krad, krad)])
        Lc = LP[plan.scene, 0][:, None, :] + off[None]  # [K, 4, 3]: each object's key lamp's corners
        valid = Lc[:, :, 2] > top[:, :, 2].max(1)[:, None] + 1e-6  # the lamp corner above the top: a shadow on the ground
        with np.errstate(divide="ignore", invalid="ignore"):
            sh = Lc[:, :, None] + (top[:, None] - Lc[:, :, None]) * (Lc[:, :, None, 2] / (Lc[:, :, None, 2] - top[:, None, :, 2]))[..., None]
        sh = np.where(valid[:, :, None, None], sh, top[:, None])
        g = cam.grid(cam.rects(plan, np.concatenate([cor, sh.reshape(len(cor), 16, 3)], 1)), plan, sub=krad > 0)
        q, D, rs = g["q"], g["D"], g["rs"]
        O = cam.origins(rs)
        with np.errstate(divide="ignore"):
            tr = np.where(ids[q] > 0, tz[q], np.where(D[2] < 0, -O[2] / D[2], F(0)))  # the sample's visible point
        P = tuple(O[c_] + tr * D[c_] for c_ in range(3))
        lx = _per_scene(LPf[:, 0, 0], rs) - P[0]
        ly = _per_scene(LPf[:, 0, 1], rs) - P[1]
        if krad > 0:
            offx, offy = _light_offsets_xy(s, krad)  # the lamp point of each supersample
            lx = lx + offx.take(g["sub"])
            ly = ly + offy.take(g["sub"])
        lz = _per_scene(LPf[:, 0, 2], rs) - P[2]
        dist = np.sqrt(lx * lx + ly * ly + lz * lz)
        inv = F(1) / dist
        th, _ = cast(plan, g["cnt"], P, (lx * inv, ly * inv, lz * inv))
        shadowed[q[th < dist]] = True

    # the ground: lit, or lit less the key lamp where shadowed
    ground = np.array([_linear(sc.background) for sc in scenes], F)  # [B, 3]
    sh2 = shadowed.reshape(B, s * s, side * side)
    e_sh = (e_all - e_key).reshape(B, 1, side * side)
    e_all = e_all.reshape(B, 1, side * side)
    col = [np.where(sh2, ground[:, c, None, None] * e_sh, ground[:, c, None, None] * e_all) for c in range(3)]

    # objects: full shading on their samples only
    if len(q_o):
        # albedo and metal of each object + 1 of each scene, each scene's table after the previous one's
        alb_tab = np.array([v for sc in scenes for v in [_ZERO3] + [_linear(o.rgb) for o in sc.objects]], F)
        metal_tab = np.array([v for sc in scenes for v in [False] + [getattr(o, "material", "rubber") == "metal" for o in sc.objects]])
        oid = ids_o.astype(np.intp)
        if rs_o is not None:
            oid += np.cumsum([0] + [len(sc.objects) + 1 for sc in scenes[:-1]])[rs_o]
        alb = alb_tab[oid]
        metal = metal_tab[oid]
        Ox, Oy, Oz = cam.origins(rs_o)
        px, py, pz = Ox + to * dx, Oy + to * dy, Oz + to * dz
        sh = shadowed[q_o]
        N = len(q_o)
        diffuse = np.full(N, F(0))
        spec_rub = np.zeros(N, F)
        spec_met = np.zeros(N, F)
        for li in range(3):
            inten = _per_scene(INT[:, li], rs_o)
            lx, ly, lz = _per_scene(LPf[:, li, 0], rs_o) - px, _per_scene(LPf[:, li, 1], rs_o) - py, _per_scene(LPf[:, li, 2], rs_o) - pz
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
            rm = None if rs_o is None else rs_o[m]
            mdx, mdy, mdz, mnx, mny, mnz = dx[m], dy[m], dz[m], nx[m], ny[m], nz[m]
            dn = F(2) * (mdx * mnx + mdy * mny + mdz * mnz)
            rx, ry, rz = mdx - dn * mnx, mdy - dn * mny, mdz - dn * mnz
            down = rz < -1e-4
            with np.errstate(divide="ignore", invalid="ignore"):
                tg = np.where(down, -pz[m] / rz, F(0))
            gx_, gy_ = px[m] + tg * rx, py[m] + tg * ry
            # the mirror's one bounce and the shadow it sees, traced once per pixel and object (the first
            # supersample of each) and shared by that object's supersamples in the pixel
            rep, inv = pixel_reps(q_o[m], ids_o[m], nn, side * side)
            rr = None if rm is None else rm[rep]
            hit, hcol, hk = mirror_hits(plan, B, rr, ids_o[m][rep], (px[m][rep], py[m][rep], pz[m][rep]),
                                        (mnx[rep], mny[rep], mnz[rep]), (rx[rep], ry[rep], rz[rep]), alb_tab, LPf, INT, AMBIENT)
            hit, hk, hcol = hit[inv], hk[inv], [h[inv] for h in hcol]
            hit &= ~down | (hk < tg)  # an object nearer than the ground the ray would reach
            gnd = down & ~hit
            in_sh = in_key_shadow(plan, B, rr, gnd[rep], gx_[rep], gy_[rep], LPf)[inv]
            gl = np.full(len(m), F(AMBIENT))
            for li in range(3):
                lx, ly, lz = _per_scene(LPf[:, li, 0], rm) - gx_, _per_scene(LPf[:, li, 1], rm) - gy_, _per_scene(LPf[:, li, 2], rm)
                e = _per_scene(INT[:, li], rm) * lz / np.sqrt(lx * lx + ly * ly + lz * lz)
                if li == 0:  # the key lamp's shadow on the mirrored ground
                    e = np.where(in_sh & gnd, F(0), e)
                gl += e
            sky_k = F(1) / (F(1) + F(6) * np.maximum(rz, F(0)))  # a studio sky: darker towards the zenith, as CLEVR's
            am = alb[m]
            for c in range(3):
                env = np.where(down, F(0.7) * _per_scene(ground[:, c], rm) * gl, SKY[c] * sky_k)
                env = np.where(hit, hcol[c], env)
                oc[c][m] = (am[:, c] * (F(0.9) * env + F(0.03) * irr[m]) + F(0.05) * env
                            + (F(0.5) + F(0.5) * am[:, c]) * (F(1.5) * spec_met[m] + F(0.25) * spec_rub[m]))
        for c in range(3):
            col[c].reshape(-1)[q_o] = oc[c]
    for b in range(B):
        if not cam.no_sky(b):
            sky = _planes(~(cam.rays(0, n, 0, n)[2][b] < 0), s).ravel() & (ids[b * nn:(b + 1) * nn] == 0)
            for c in range(3):
                col[c][b].reshape(-1)[sky] = SKY[c]
    return col


def _encode(col, s: int) -> np.ndarray:
    """Box-average the supersamples of ``[r, g, b]``, each ``[B, s * s, side * side]`` (plane by plane: a
    fixed order of sums), and encode to sRGB uint8 ``[B, H, W, 3]``."""
    B, side = col[0].shape[0], int(round(math.sqrt(col[0].shape[2])))
    chans = []
    for ch in col:
        acc = ch[:, 0].copy()
        for k in range(1, s * s):
            acc = acc + ch[:, k]
        lin = acc * F(1.0 / (s * s)) if s > 1 else acc
        chans.append(_LUT[np.clip(lin * F(_LUT_N), 0, _LUT_N - 1).astype(np.int32)])
    return np.stack(chans, -1).reshape(B, side, side, 3)


#: scenes shaded in one set of array operations by :meth:`ShadedRenderer.render_images`: at most this
#: many, and at most :data:`BATCH_SAMPLES` samples in all (larger arrays leave the caches: at 128 px,
#: supersample 2, 4 scenes a batch are faster than 8)
BATCH = 16
BATCH_SAMPLES = 1 << 18


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
        return _encode(_shade([scene], self.supersample), self.supersample)[0]

    def render_images(self, scenes) -> list[np.ndarray]:
        """sRGB uint8 ``[H, W, 3]`` of each scene, the same pixels as :meth:`render_image` of each: up to
        :data:`BATCH` consecutive scenes of one image side and key-lamp radius are shaded together
        (per-image costs of a pass are paid once a batch)."""
        out: list[np.ndarray] = []
        s, i = self.supersample, 0
        while i < len(scenes):
            kind = _batch_kind(scenes[i])
            most = max(1, min(BATCH, BATCH_SAMPLES // (scenes[i].image_size * s) ** 2))
            j = i + 1
            while j < len(scenes) and j - i < most and _batch_kind(scenes[j]) == kind:
                j += 1
            out.extend(_encode(_shade(list(scenes[i:j]), s), s))
            i = j
        return out

    def render_one(self, scene: Scene3D) -> tuple[np.ndarray, np.ndarray]:
        """``(image uint8 [H, W, 3], instance mask uint8 [H, W])``."""
        img = self.render_image(scene)
        mask, _ = instance_mask(scene)
        return img, mask

    def render_batch(self, scenes, masks: bool = False) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """:meth:`~renderers.base.Renderer.render_batch`: the images by :meth:`render_images`, the masks
        from :func:`instance_mask` (the layout's, cached on the scene)."""
        return [(im, instance_mask(sc)[0] if masks else None) for sc, im in zip(scenes, self.render_images(scenes))]

    def render(self, scenes) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`~renderers.base.Renderer.render`: the images by :meth:`render_images`."""
        if not scenes:
            return super().render(scenes)
        if len({sc.image_size for sc in scenes}) != 1:
            raise ValueError(f"render() needs scenes of one image size, got {sorted({sc.image_size for sc in scenes})}")
        images = self.render_images(scenes)
        return np.stack(images), np.stack([instance_mask(sc)[0] for sc in scenes])


def _batch_kind(scene: Scene3D):
    """What the scenes of one batch share: the image side and the key lamp's radius (``_plan`` checks the rest)."""
    v = getattr(scene, "view", None)
    return (scene.image_size, None if v is None else float(v.lights[0][3]))
