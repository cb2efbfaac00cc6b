"""Geometry of the shaded renderer (:mod:`renderers.shaded`): solids, their screen rectangles, and
ray casting batched over the objects of a scene.

A pass (instance mask, primary visibility, key-lamp shadows) casts the rays of every object's
screen rectangle. Rather than one set of numpy calls per object, the samples of all rectangles
are laid end to end (:func:`cells`), objects of one kind next to each other, and each kind is
intersected in one set of array operations whose per-object constants (centre, radius, height,
wall planes) are repeated over the object's samples (:func:`cast`). Every sample goes through the
same float32 operations, in the same order, with the same constants as when each object was cast
alone, so the results are the same bits; the z-buffer keeps, per sample, the nearest hit and on a
tie the lowest object index (the ground before any object), as casting the objects one after
another with a strict ``<`` did (:func:`nearest`).

Kinds: ``sphere``, ``cylinder`` (also the ``circle`` prism), convex prisms (Cyrus-Beck clipping
against their wall and top planes; one kind per number of planes: the cube is 5), and non-convex
prisms (``star``, ``cross``: an even-odd test of the top cap and one wall per edge), cast one
object at a time.
"""

from __future__ import annotations

import math

import numpy as np

from mosaic.scene3d import SolidObject

F = np.float32
EPS = 1e-3  # world units: shadow-ray offset along the normal and minimum hit distance
_INF = F(np.inf)


class Solid:
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
            # in Python floats (a few vertices): the float64 operations numpy would do element by element
            v = p.tolist()
            m = len(v)
            e = [(v[(k + 1) % m][0] - v[k][0], v[(k + 1) % m][1] - v[k][1]) for k in range(m)]  # edge k: vertex k -> k + 1
            if all(e[k][0] * e[(k + 1) % m][1] - e[k][1] * e[(k + 1) % m][0] > 0 for k in range(m)):
                # convex: the solid is the intersection of its wall, top and ground half-spaces
                ln = np.hypot([a for a, _ in e], [b for _, b in e]).tolist()  # libm's hypot, as before
                rows = []
                for (ex, ey), lk, (px, py) in zip(e, ln, v):
                    nx, ny = ey / lk, -ex / lk
                    rows.append((nx, ny, 0.0, nx * px + ny * py))
                rows.append((0.0, 0.0, 1.0, float(self.h)))
                self.planes = np.array(rows, np.float64).astype(F)  # [P, 4]: (a, b, c, d) of a x + b y + c z <= d
            self.poly = p.astype(F)
        self.group = self.kind if self.kind != "prism" else ("convex", len(self.planes)) if self.planes is not None else ("prism", id(self))
        if self.poly is not None:
            (x0, y0), (x1, y1) = self.poly.min(0).tolist(), self.poly.max(0).tolist()
        else:
            x0, x1, y0, y1 = (float(v) for v in (self.x - self.r, self.x + self.r, self.y - self.r, self.y + self.r))
        h = float(self.h)
        self._corners = np.array([[x0, y0, 0.0], [x0, y0, h], [x0, y1, 0.0], [x0, y1, h],
                                  [x1, y0, 0.0], [x1, y0, h], [x1, y1, 0.0], [x1, y1, h]], np.float64)

    def corners(self) -> np.ndarray:
        """The 8 corners float64 ``[8, 3]`` of the axis-aligned bounding box."""
        return self._corners

    def hit(self, O, D, normals: bool = True):
        """First hit of rays ``O + t D`` beyond ``EPS`` (one object; :func:`cast` batches): ``O`` and ``D``
        are ``(x, y, z)`` triples of float32 arrays (or scalars for O), D unit. Returns ``t`` float32 (inf
        where missed) and the unit normal ``(nx, ny, nz)`` (None unless ``normals``)."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._hit(O, D, normals)

    def _hit(self, O, D, normals):
        if self.kind == "sphere":
            return _sphere(O, D, self.x, self.y, self.r, normals)
        if self.kind == "cylinder":
            return _cylinder(O, D, self.x, self.y, self.r, self.h, normals)
        if self.planes is not None:
            return _convex(O, D, self.planes.T[:, :, None], None, normals)
        return self._prism(O, D, normals)

    def _prism(self, O, D, normals):
        ox, oy, oz = O
        dx, dy, dz = D
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
            t = (nx * (x1 - ox) + ny * (y1 - oy)) / (nx * dx + ny * dy)
            u = ((ox + t * dx - x1) * F(ex / (ln * ln)) + (oy + t * dy - y1) * F(ey / (ln * ln)))
            z = oz + t * dz
            ok = (t > EPS) & (t < best) & (u >= 0) & (u <= 1) & (z >= 0) & (z <= self.h)
            best = np.where(ok, t, best)
            if normals:
                which[ok] = k
        self._wn = wn  # the normal of each code of ``which`` (normals_at)
        if not normals:
            return best, None
        if normals == "codes":
            return best, which
        return best, (wn[which, 0], wn[which, 1], wn[which, 2])


# ----------------------------------------------------------------------------------------------
# one kind of solid over many rays: per-object constants are scalars (one object) or arrays
# repeated over each object's rays (a batch); the float32 operations are the same either way
# ----------------------------------------------------------------------------------------------

def _sphere(O, D, X, Y, R, normals):
    ox, oy, oz = O[0] - X, O[1] - Y, O[2] - R
    dx, dy, dz = D
    b = ox * dx + oy * dy + oz * dz
    cc = ox * ox + oy * oy + oz * oz - R * R
    disc = b * b - cc
    ok = disc >= 0
    t = -b - np.sqrt(np.maximum(disc, F(0)))
    t = np.where(ok & (t > EPS), t, _INF)
    if not normals:
        return t, None
    tt = np.where(ok, t, F(0))
    inv = F(1) / R
    return t, ((ox + tt * dx) * inv, (oy + tt * dy) * inv, (oz + tt * dz) * inv)


def _cylinder(O, D, X, Y, R, H, normals):
    ox, oy, oz = O[0] - X, O[1] - Y, O[2]
    dx, dy, dz = D
    a = dx * dx + dy * dy
    b = ox * dx + oy * dy
    rr = R * R
    c = ox * ox + oy * oy - rr
    disc = b * b - a * c
    ok = (disc >= 0) & (a > 1e-12)
    ts = (-b - np.sqrt(np.maximum(disc, F(0)))) / np.where(ok, a, F(1))
    zs = oz + ts * dz
    ts = np.where(ok & (ts > EPS) & (zs >= 0) & (zs <= H), ts, _INF)
    tc = (H - oz) / dz
    xc, yc = ox + tc * dx, oy + tc * dy
    tc = np.where((tc > EPS) & (xc * xc + yc * yc <= rr), tc, _INF)
    t = np.minimum(ts, tc)
    if not normals:
        return t, None
    side = ts < tc
    if normals == "codes":
        return t, side.view(np.int8)
    tt = np.where(side, ts, F(0))
    inv = F(1) / R
    return t, (np.where(side, (ox + tt * dx) * inv, F(0)), np.where(side, (oy + tt * dy) * inv, F(0)), np.where(side, F(0), F(1)))


def _convex(O, D, pl, seg, normals):
    """Cyrus-Beck clipping against the walls, the top (and the ground z >= 0): the entry point.
    ``pl`` float32 ``[4, P, m]``: plane ``k`` of object ``q`` is ``a x + b y + c z <= d`` with
    ``(a, b, c, d) = pl[:, k, q]``; ``seg`` int ``[L]``: the object of each ray, or None for one
    object (m = 1; its constants are then scalars)."""
    ox, oy, oz = O
    dx, dy, dz = D
    shape = np.broadcast_shapes(np.shape(ox), np.shape(dx))
    t_in = np.full(shape, -np.inf, F)
    t_out = np.where(dz < 0, -oz / dz, _INF)  # where the ray leaves z >= 0
    P = pl.shape[1]
    per = pl[:, :, 0] if seg is None else pl[:, :, seg]  # [4, P] scalars, or [4, P, L] repeated over the rays
    which = np.full(np.shape(dx), P, np.int8) if normals else None
    for k in range(P):
        a, b, c, d = per[0, k], per[1, k], per[2, k], per[3, k]
        den = a * dx + b * dy + c * dz
        num = d - (a * ox + b * oy + c * oz)  # >= 0 inside the plane's half-space
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
    # the normal of the plane the ray entered by (the top's is (0, 0, 1), as is the default)
    wn = np.concatenate([pl[:3], np.broadcast_to(np.array([0, 0, 1], F)[:, None, None], (3, 1, pl.shape[2]))], 1)
    col = 0 if seg is None else seg
    return t, tuple(wn[c, which, col] for c in range(3))


def _convex_batch(O, D, pl, cnt, normals):
    """:func:`_convex` of ``m`` objects at once, object ``q`` taking ``cnt[q]`` consecutive rays: the
    same float32 values. Walls are ``a x + b y <= d`` (``c = 0``) and the last plane is the top
    ``z <= h`` (``a = b = 0, c = 1``) by construction (:class:`Solid`), so the terms that
    :func:`_convex` multiplies by 0 (a signed zero) or 1 are left out: they change no value but
    the sign of a zero ``den`` or ``num``, and a zero ``den`` takes neither the entering nor the
    leaving branch, and a zero ``num`` never makes ``t > EPS``. A ray parallel to a plane and
    outside it (``t_out = -inf`` in :func:`_convex`, which no later plane raises) is kept as a
    flag and applied at the end."""
    ox, oy, oz = O
    dx, dy, dz = D
    scalar_o = not np.ndim(ox)
    L = len(dx)
    t_in = np.full(L, -np.inf, F)
    t_out = np.where(dz < 0, -oz / dz, _INF)  # where the ray leaves z >= 0
    out_par = np.zeros(L, bool)
    P = pl.shape[1]
    which = np.full(L, P, np.int8) if normals else None
    for k in range(P):
        a_, b_, d_ = pl[0, k], pl[1, k], pl[3, k]
        if k < P - 1:  # a wall
            a, b = np.repeat(a_, cnt), np.repeat(b_, cnt)
            den = a * dx
            den += b * dy
            if scalar_o:
                num = np.repeat(d_ - (a_ * ox + b_ * oy), cnt)
            else:
                num = a * ox
                num += b * oy
                np.subtract(np.repeat(d_, cnt), num, out=num)
        else:  # the top
            den = dz
            num = np.repeat(d_ - oz, cnt) if scalar_o else np.repeat(d_, cnt) - oz
        t = num / den
        upd = den < 0
        upd &= t > t_in
        np.copyto(t_in, t, where=upd)
        if normals:
            which[upd] = k
        np.minimum(t_out, t, out=t_out, where=den > 0)
        par = den == 0
        par &= num < 0
        out_par |= par
    ok = t_in <= t_out
    ok &= t_in > EPS
    ok &= ~out_par
    t = np.where(ok, t_in, _INF)
    if not normals:
        return t, None
    if normals == "codes":
        return t, which
    wn = np.concatenate([pl[:3], np.broadcast_to(np.array([0, 0, 1], F)[:, None, None], (3, 1, pl.shape[2]))], 1)
    seg = np.repeat(np.arange(pl.shape[2]), cnt)
    return t, tuple(wn[c, which, seg] for c in range(3))


# ----------------------------------------------------------------------------------------------
# a scene's solids, grouped by kind
# ----------------------------------------------------------------------------------------------

class Plan:
    """The solids of a scene in cast order (kinds together) with each kind's constants.

    Attributes:
        solids: per object (scene order; a batch: scene after scene). order: int ``[K]``: the objects in
            cast order. scene: int ``[K]``: the scene of each (cast order; ``scene`` given per object,
            else 0). kid: uint8 ``[K]``: its mask id, its index in its scene + 1 (``local`` per object).
        corners: float64 ``[K, 8, 3]``: bounding-box corners, cast order.
        groups: ``[(kind, lo, hi, consts)]``: cast-order positions ``lo..hi-1`` are one kind.
    """

    def __init__(self, solids: list[Solid], scene=None, local=None):
        self.solids = solids
        by: dict = {}
        for k, so in enumerate(solids):
            by.setdefault(so.group, []).append(k)
        order, self.groups = [], []
        for key, ks in by.items():
            lo = len(order)
            order += ks
            ss = [solids[k] for k in ks]
            if key == "sphere":
                consts = tuple(np.array([getattr(s, a) for s in ss], F) for a in ("x", "y", "r"))
            elif key == "cylinder":
                consts = tuple(np.array([getattr(s, a) for s in ss], F) for a in ("x", "y", "r", "h"))
            elif key[0] == "convex":
                consts = np.ascontiguousarray(np.array([s.planes for s in ss], F).transpose(2, 1, 0))  # [4, P, m]
            else:
                consts = ss[0]
            self.groups.append((key, lo, len(order), consts))
        self.order = np.array(order, np.intp)
        self.corners = np.array([solids[k].corners() for k in order], np.float64).reshape(-1, 8, 3)
        # the scene of each cast position (a batch of scenes: :class:`renderers.shaded_cam.Cams`) and its
        # object's id in the mask (its index in its scene + 1)
        self.scene = np.zeros(len(order), np.intp) if scene is None else np.asarray(scene, np.intp)[self.order]
        self.kid = ((self.order if local is None else np.asarray(local, np.intp)[self.order]) + 1).astype(np.uint8)


def cells(rects: np.ndarray, tabs=(), coords: bool = True, scene: np.ndarray | None = None) -> tuple:
    """The samples of rectangles ``rects`` int ``[m, 4]`` (``i0, i1, j0, j1``; empty ones allowed) end
    to end, row-major within each: ``(rows, cols, counts [m], seg, *extra)`` with ``seg`` the rectangle
    of each sample and, for each ``(row_table, col_table, lo)`` of ``tabs``, ``row_table[i - lo] +
    col_table[j - lo]`` per sample (an index computed per row and per column, not per sample). A
    table may be 2-D, ``[B, R]``, one row per scene of a batch: rectangle ``k`` then reads row
    ``scene[k]`` of it. Without ``coords``, ``rows`` and ``cols`` are None (not built)."""
    i0, i1, j0, j1 = rects.T
    w = np.maximum(j1 - j0, 0)
    h = np.where(w > 0, np.maximum(i1 - i0, 0), 0)
    cnt = h * w
    rseg = np.repeat(np.arange(len(cnt)), h)  # the rectangle of each row
    ri = np.arange(len(rseg)) - (np.cumsum(h) - h)[rseg] + i0[rseg]  # each row's index
    rw = w[rseg]
    j0r = j0[rseg]
    L = int(cnt.sum())
    jj = np.arange(L) - np.repeat(np.cumsum(rw) - rw - j0r, rw)
    out = [np.repeat(ri, rw) if coords else None, jj if coords else None, cnt, np.repeat(rseg, rw)]
    shifted: dict = {}
    base: dict = {}  # R -> (row base, sample base): the offset of each row's / sample's scene in a [B, R] table
    for rt, ct, lo in tabs:
        if lo not in shifted:
            shifted[lo] = (ri - lo, jj - lo)
        r_, j_ = shifted[lo]
        for t in (rt, ct):
            if t.ndim == 2 and t.shape[1] not in base:
                b = scene[rseg] * t.shape[1]
                base[t.shape[1]] = (b, np.repeat(b, rw))
        if rt.ndim == 2:
            rt, r_ = rt.ravel(), r_ + base[rt.shape[1]][0]
        if ct.ndim == 2:
            ct, j_ = ct.ravel(), j_ + base[ct.shape[1]][1]
        out.append(np.repeat(rt.take(r_), rw) + ct.take(j_))
    return tuple(out)


def cast(plan: Plan, cnt: np.ndarray, O, D, normals: bool | str = False):
    """First hits of rays laid out as :func:`cells` of one rectangle per object in cast order (``cnt``
    samples each): ``O`` a triple of scalars or float32 ``[L]`` arrays, ``D`` of float32 ``[L]``.
    Returns ``t`` float32 ``[L]`` (inf where missed) and the normals (None unless ``normals``; with
    ``normals="codes"``, int8 ``[L]``: which surface of its solid a ray hit, for :func:`normals_at`)."""
    L = int(cnt.sum())
    end = np.cumsum(cnt)
    t = np.empty(L, F)
    codes = normals == "codes"
    nrm = (np.zeros(L, np.int8) if codes else tuple(np.empty(L, F) for _ in range(3))) if normals else None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for key, lo, hi, consts in plan.groups:
            a, b = (int(end[lo - 1]) if lo else 0), int(end[hi - 1])
            if a == b:
                continue
            Og = tuple(o[a:b] if np.ndim(o) else o for o in O)
            Dg = tuple(d[a:b] for d in D)
            c = cnt[lo:hi]
            if key == "sphere":
                tg, ng = _sphere(Og, Dg, *(np.repeat(v, c) for v in consts), normals and not codes)  # no codes: one surface
            elif key == "cylinder":
                tg, ng = _cylinder(Og, Dg, *(np.repeat(v, c) for v in consts), normals)
            elif key[0] == "convex":
                tg, ng = _convex_batch(Og, Dg, consts, c, normals)
            else:
                tg, ng = consts._prism(Og, Dg, normals)
            t[a:b] = tg
            if codes:
                if ng is not None:
                    nrm[a:b] = ng
            elif normals:
                for q in range(3):
                    nrm[q][a:b] = ng[q]
    return t, nrm


def normals_at(plan: Plan, seg: np.ndarray, O_all, D, t: np.ndarray, code: np.ndarray) -> tuple:
    """The unit normals at hits ``t`` (finite) of rays ``O + t D`` (``O`` a triple of scalars or of float32 ``[N]``, ``D`` of
    float32 ``[N]``) on the objects ``seg`` (cast order, ascending), with the ``code`` of each hit
    (:func:`cast` with ``normals="codes"``): the values :func:`cast` with ``normals=True`` gives
    for the same rays, from the same float32 operations, without intersecting them again."""
    N = len(t)
    nrm = tuple(np.empty(N, F) for _ in range(3))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for key, lo, hi, consts in plan.groups:
            a, b = np.searchsorted(seg, (lo, hi))
            if a == b:
                continue
            loc = seg[a:b] - lo
            O_ = tuple(o[a:b] if np.ndim(o) else o for o in O_all)
            dx, dy, dz = (d[a:b] for d in D)
            tg = t[a:b]
            if key == "sphere":
                X, Y, R = (v[loc] for v in consts)
                inv = F(1) / R
                ng = (((O_[0] - X) + tg * dx) * inv, ((O_[1] - Y) + tg * dy) * inv, ((O_[2] - R) + tg * dz) * inv)
            elif key == "cylinder":
                X, Y, R = (v[loc] for v in consts[:3])
                side = code[a:b].view(bool)
                tt = np.where(side, tg, F(0))
                inv = F(1) / R
                ng = (np.where(side, ((O_[0] - X) + tt * dx) * inv, F(0)), np.where(side, ((O_[1] - Y) + tt * dy) * inv, F(0)),
                      np.where(side, F(0), F(1)))
            elif key[0] == "convex":
                wn = np.concatenate([consts[:3], np.broadcast_to(np.array([0, 0, 1], F)[:, None, None], (3, 1, consts.shape[2]))], 1)
                ng = tuple(wn[c, code[a:b], loc] for c in range(3))
            else:
                wn = consts._wn
                ng = tuple(wn[code[a:b], c] for c in range(3))
            for q in range(3):
                nrm[q][a:b] = ng[q]
    return nrm


def _order_key(t: np.ndarray) -> np.ndarray:
    """int64 keys ordered as the float32 values ``t`` (no NaN), shifted left by 8 bits."""
    b = t.view(np.int32).astype(np.int64)
    return np.where(b < 0, b ^ 0x7FFFFFFF, b) << 8


def nearest(size: int, pix: np.ndarray, t_ground: np.ndarray, t: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Which candidate hits win the z-buffer: ``pix`` int ``[L]`` sample indices (each object at most
    once per sample), ``t`` float32 ``[L]`` their finite distances, ``ids`` their objects (1..255),
    ``t_ground`` float32 ``[L]`` the ground's (or sky's, inf) distance at ``pix``. A hit wins where it
    is nearer than the ground and every other hit of its sample, ties going to the ground, then to
    the lowest id (a sequential z-buffer with ``<``). Returns bool ``[L]``."""
    key = _order_key(t) | ids.astype(np.int64)
    buf = np.empty(size, np.int64)
    buf[pix] = _order_key(t_ground)
    np.minimum.at(buf, pix, key)
    return buf[pix] == key


def rects(cam, pts: np.ndarray, clip: bool = True) -> np.ndarray:
    """Sample rectangles int64 ``[m, 4]`` (``i0, i1, j0, j1``) covering the projections of each of ``m``
    point sets ``pts`` float64 ``[m, M, 3]`` (in front of the camera; a set reaching behind it takes
    the whole frame), clipped to the frame (empty where nothing is left) unless not ``clip``. One
    sample (half a sample each side, plus the end column / row) beyond the projection, so a hit is
    never outside its rectangle."""
    n = cam.n
    q = (pts - cam._C64) @ cam._M
    z = q[..., 2]
    zs = np.where(z > 1e-6, z, 1.0)
    x = q[..., 0] / zs * cam._k + n / 2.0
    y = n / 2.0 - q[..., 1] / zs * cam._k
    out = np.stack([np.floor(y.min(1) - 0.5), np.ceil(y.max(1) + 0.5) + 1,
                    np.floor(x.min(1) - 0.5), np.ceil(x.max(1) + 0.5) + 1], 1).astype(np.int64)
    out[z.min(1) <= 1e-6] = (0, n, 0, n)
    if clip:
        out = np.clip(out, 0, n)
        empty = (out[:, 1] <= out[:, 0]) | (out[:, 3] <= out[:, 2])
        out[empty] = 0
    return out
