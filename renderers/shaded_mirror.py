"""The metal material's mirror in the shaded renderer (:mod:`renderers.shaded`): one bounce of the
mirror ray against the scene's other objects, and the key lamp's shadow on the ground a mirror shows.

Both are traced once per pixel and object (:func:`pixel_reps`), for the rays that pass near an
object's bounding sphere only (:func:`_by_object`), with the same float32 operations per ray whatever
the batch of scenes around it, so images stay byte-identical alone and batched.
"""

from __future__ import annotations

import numpy as np

from renderers.shaded_geom import _INF, F, Plan, cast


def _at_scene(values, rs: np.ndarray | None):
    """float32 ``[B]`` per-scene ``values`` as each ray's: the scalar for one scene (``rs`` None)."""
    return values[0] if rs is None else values.take(rs)


def _by_object(plan: Plan, B: int, rs: np.ndarray | None, O, D, own: np.ndarray | None = None) -> tuple:
    """Rays ``0..n-1`` (origins ``O``, unit directions ``D``: float32 triples ``[n]``; scene ``rs``,
    None for one scene) laid out as :func:`~renderers.shaded_geom.cast` takes them: for each object
    in cast order, the rays of its scene that pass near enough to hit it (the ray's line within the
    radius of the sphere around the object's bounding box, not wholly behind the origin), less the
    ray's own object (``own``: object + 1 in its scene). Returns ``(ray [L], counts [K], object
    [L], O [L], D [L])``: the ray, the cast position, the origin and direction of each of the L = sum of
    counts entries (a scalar origin coordinate stays a scalar)."""
    K = len(plan.scene)
    counts = np.bincount(plan.scene, minlength=B)
    grouped = np.argsort(plan.scene, kind="stable")  # the cast positions, scene by scene
    slot = np.arange(K) - np.repeat(np.cumsum(counts) - counts, counts)
    tab = np.full((B, max(int(counts.max(initial=0)), 1)), K, np.intp)  # [B, W]: each scene's positions, K = none
    tab[plan.scene[grouped], slot] = grouped
    cen = plan.corners.mean(1)
    rad2 = np.append(((plan.corners - cen[:, None]) ** 2).sum(2).max(1) * 1.0001 + 1e-6, -1.0).astype(F)
    cen = np.append(cen, np.zeros((1, 3)), 0).astype(F)
    # per scene [B, W] tables, read a row per ray: each object's bounding-sphere centre, radius^2, mask id
    tabs = [cen[:, 0][tab], cen[:, 1][tab], cen[:, 2][tab], rad2[tab]] + ([np.append(plan.kid, 0)[tab]] if own is not None else [])
    rows = [t[:1] if rs is None else t.take(rs, 0) for t in tabs]
    col = [(o if np.ndim(o) == 0 else o[:, None]) for o in O]
    vx, vy, vz = rows[0] - col[0], rows[1] - col[1], rows[2] - col[2]
    along = vx * D[0][:, None] + vy * D[1][:, None] + vz * D[2][:, None]
    a2 = along * along
    r2 = rows[3]
    keep = (vx * vx + vy * vy + vz * vz - a2 <= r2) & ((along > 0) | (a2 <= r2))
    if own is not None:
        keep &= rows[4] != own[:, None]
    ri, si = np.nonzero(keep)
    pos = tab[0].take(si) if rs is None else tab[rs.take(ri), si]
    o = np.lexsort((ri, pos))
    ray, pos = ri.take(o), pos.take(o)
    return ray, np.bincount(pos, minlength=K), pos, tuple(x if np.ndim(x) == 0 else x.take(ray) for x in O), \
        tuple(d.take(ray) for d in D)


def pixel_reps(q: np.ndarray, ids: np.ndarray, nn: int, pp: int) -> tuple[np.ndarray, np.ndarray]:
    """Samples (plane index ``q`` in a batch of ``nn`` samples a scene, ``pp`` pixels a scene; object
    ``ids``) grouped by pixel and object: ``(rep [G], group [n])``, each group's sample of least ``q``
    and each sample's group. Independent of the samples' order and of the batch around a scene."""
    key = ((q // nn) * pp + (q % nn) % pp) * 256 + ids
    o = np.lexsort((q, key))
    ks = key[o]
    first = np.ones(len(o), bool)
    first[1:] = ks[1:] != ks[:-1]
    inv = np.empty(len(o), np.intp)
    inv[o] = np.cumsum(first) - 1
    return o[first], inv


def _first(ray: np.ndarray, t: np.ndarray, n: int, tie: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nearest of each ray's entries: ``(t [n], entry [n])`` (inf and -1 where none); on a tie
    the lower ``tie`` (the object's index in its scene) wins, so the result does not depend on how a
    batch was formed."""
    best = np.full(n, _INF, F)
    at = np.full(n, -1, np.intp)
    o = np.lexsort((tie, t))
    o = o[t[o] < _INF]
    first = np.unique(ray[o], return_index=True)[1]
    sel = o[first]
    best[ray[sel]] = t[sel]
    at[ray[sel]] = sel
    return best, at


def mirror_hits(plan: Plan, B: int, rm, own: np.ndarray, P, N, R, alb_tab, LPf, INT, ambient: float):
    """One bounce for the metal samples: their mirror rays ``R`` (unit float32 triples ``[M]``) from
    their points ``P`` (normals ``N``, object ``own`` + 1) against the other objects of their scene.
    Returns ``(hit bool [M], colour [r, g, b] float32 [M] each, t float32 [M])``: the nearest object
    hit, Lambert-lit by the three lamps plus the sky term ``ambient`` (no shadows, no further bounce)."""
    M = len(own)
    Om = tuple(P[c] + F(1e-4) * N[c] for c in range(3))
    ray, cnt, pos, O, D = _by_object(plan, B, rm, Om, R, own)
    t, nrm = cast(plan, cnt, O, D, normals=True)
    t = np.where(t > F(0), t, _INF).astype(F)
    tb, at = _first(ray, t, M, plan.kid[pos])
    hit = at >= 0
    e = at[hit]
    k = pos[e]
    hx, hy, hz = (O[c][e] + t[e] * D[c][e] for c in range(3))
    nx, ny, nz = (nrm[c][e] for c in range(3))
    rh = plan.scene[k]
    irr = F(ambient) * (F(0.5) + F(0.5) * nz)
    for li in range(3):
        lx, ly, lz = LPf[rh, li, 0] - hx, LPf[rh, li, 1] - hy, LPf[rh, li, 2] - hz
        irr = irr + INT[rh, li] * np.maximum(nx * lx + ny * ly + nz * lz, F(0)) / np.sqrt(lx * lx + ly * ly + lz * lz)
    rows_per = np.bincount(plan.scene, minlength=B) + 1  # alb_tab: a row for the ground, then each object, scene by scene
    offs = np.cumsum(rows_per) - rows_per
    a = alb_tab[offs[rh] + plan.kid[k].astype(np.intp)]
    col = [np.zeros(M, F) for _ in range(3)]
    for c in range(3):
        col[c][hit] = a[:, c] * irr
    return hit, col, tb


def in_key_shadow(plan: Plan, B: int, rm, which: np.ndarray, gx, gy, LPf) -> np.ndarray:
    """Whether the ground points ``(gx, gy, 0)`` float32 ``[M]`` (only where ``which``) lie in the key
    lamp's shadow (a ray to the lamp's centre; bool ``[M]``)."""
    out = np.zeros(len(which), bool)
    w = np.flatnonzero(which)
    if not len(w):
        return out
    rw = None if rm is None else rm[w]
    lx, ly, lz = _at_scene(LPf[:, 0, 0], rw) - gx[w], _at_scene(LPf[:, 0, 1], rw) - gy[w], _at_scene(LPf[:, 0, 2], rw)
    dist = np.sqrt(lx * lx + ly * ly + lz * lz)
    inv = F(1) / dist
    Dw = (lx * inv, ly * inv, lz * inv)
    Ow = (gx[w], gy[w], F(1e-4))
    ray, cnt, _, O, D = _by_object(plan, B, rw, Ow, Dw)
    t, _ = cast(plan, cnt, O, D)
    out[w[np.unique(ray[t < dist[ray]])]] = True
    return out
