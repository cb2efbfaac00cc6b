"""The cameras of a batch of scenes for the shaded renderer (:mod:`renderers.shaded`).

A pass casts the rays of every object's screen rectangle of every scene of a batch in one set of
array operations (:func:`renderers.shaded_geom.cells`, :func:`renderers.shaded_geom.cast`): a
scene's own values (its camera, its lamps) are read per rectangle, per row or per ray from arrays
indexed by the scene, so each ray goes through the same float32 operations with the same values
as when its scene is rendered alone. The sample planes of the batch lie scene after scene: sample
``q`` of scene ``b`` is ``b * n * n + q``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from renderers.shaded_geom import F, cells, rects


class Cams:
    """The cameras of ``scenes`` (one image side) for ``s`` x ``s`` supersamples a pixel.

    Attributes:
        B: scenes. side, s, n: image side, supersampling factor, samples a side (``side * s``).
        C: float32 ``[B, 3]``: camera positions. d0, dx, dy: float64 ``[B, 3]``: the direction of
            sample (0, 0) and its step per sample column and row; ``d0f``, ``dxf``, ``dyf`` as float32.
        one: per scene, what :func:`~renderers.shaded_geom.rects` reads (``n``, ``_C64``, ``_M``, ``_k``).
    """

    def __init__(self, scenes, s: int):
        side = scenes[0].image_size
        self.B = len(scenes)
        self.side, self.s, self.n = side, s, side * s
        C, d0, dx, dy, self.one = [], [], [], [], []
        for sc in scenes:
            v = sc.view
            f, r, u = v.basis()
            t = math.tan(math.radians(v.fov) / 2.0)
            ddx = r * t * 2.0 / self.n       # per sample column
            ddy = -u * t * 2.0 / self.n      # per sample row
            d0.append(f - r * t + u * t + (ddx + ddy) * 0.5)  # sample (0, 0) centre
            dx.append(ddx)
            dy.append(ddy)
            C.append(v.camera)
            # world point -> (x / z, y / z, z) in the camera frame, scaled to sample units
            self.one.append(SimpleNamespace(n=self.n, _M=np.stack([r, u, f], 1), _k=self.n / (2.0 * t), _C64=np.asarray(v.camera, np.float64)))
        # every scene's camera as arrays, one row per scene (:meth:`rects` of a batch reads each object's row)
        self._stack = SimpleNamespace(_M=np.stack([o._M for o in self.one]), _k=np.array([o._k for o in self.one]),
                                      _C64=np.stack([o._C64 for o in self.one]))
        self.C = np.array(C, np.float64).astype(F)
        self.d0, self.dx, self.dy = np.array(d0), np.array(dx), np.array(dy)
        self.d0f, self.dxf, self.dyf = self.d0.astype(F), self.dx.astype(F), self.dy.astype(F)

    def origins(self, rs: np.ndarray | None) -> tuple:
        """The camera position of each ray, ``(x, y, z)``: float32 scalars for one scene, else float32
        arrays read at ``rs``, the scene of each ray."""
        if self.B == 1:
            return tuple(self.C[0, c] for c in range(3))
        return tuple(self.C[:, c].take(rs) for c in range(3))

    def rects(self, plan, pts: np.ndarray, clip: bool = True) -> np.ndarray:
        """:func:`~renderers.shaded_geom.rects` of the point sets ``pts`` ``[K, M, 3]`` of the objects of
        ``plan`` (cast order), each through its own scene's camera."""
        if self.B == 1:
            return rects(self.one[0], pts, clip)
        st, sc = self._stack, plan.scene
        return rects(SimpleNamespace(n=self.n, _M=st._M[sc], _k=st._k[sc, None], _C64=st._C64[sc, None]), pts, clip)

    def rays(self, i0: int, i1: int, j0: int, j1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit directions of samples rows i0..i1-1, columns j0..j1-1 of every scene (may lie outside
        the frame): ``(dx, dy, dz)``, each float32 ``[B, i1-i0, j1-j0]``."""
        ii = np.arange(i0, i1, dtype=F)[None, :, None]
        jj = np.arange(j0, j1, dtype=F)[None, None, :]
        d = [self.d0f[:, c, None, None] + ii * self.dyf[:, c, None, None] + jj * self.dxf[:, c, None, None] for c in range(3)]
        inv = F(1) / np.sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2])
        return d[0] * inv, d[1] * inv, d[2] * inv

    def grid(self, rc: np.ndarray, plan, q: bool = True, sub: bool = False) -> dict:
        """The samples of rectangles ``rc`` (one per object of ``plan``, cast order;
        :func:`~renderers.shaded_geom.cells`) with their unit ray directions ``D`` (the values
        :meth:`rays` gives: the per-row and per-column terms are summed per sample as there), their
        index ``q`` in the sample planes of the batch (:func:`renderers.shaded._planes`, scene after
        scene; negative outside the frame), with ``sub`` their supersample ``(i % s) * s + j % s``, and
        ``rs``, the scene of each sample (None for one scene)."""
        n, s, side, B = self.n, self.s, self.side, self.B
        lo, hi = min(0, int(rc[:, [0, 2]].min(initial=0))), max(n, int(rc[:, [1, 3]].max(initial=0)))
        k = np.arange(lo, hi, dtype=F)
        if B == 1:
            tabs = [(self.d0f[0, c] + k * self.dyf[0, c], k * self.dxf[0, c], lo) for c in range(3)]
        else:
            tabs = [(self.d0f[:, c, None] + k * self.dyf[:, c, None], k * self.dxf[:, c, None], lo) for c in range(3)]
        if q or sub:
            i = np.arange(lo, hi)
        if q:
            inside = (i >= 0) & (i < n)
            far = 4 * B * n * n
            row = np.where(inside, (i % s) * s * side * side + (i // s) * side, -far)
            if B > 1:
                row = row[None, :] + (np.arange(B) * (n * n))[:, None]
            tabs.append((row, np.where(inside, (i % s) * side * side + i // s, -far), lo))
        if sub:
            tabs.append(((i % s) * s, i % s, lo))
        out = cells(rc, tabs, coords=False, scene=plan.scene if B > 1 else None)
        d = out[4:7]
        inv = F(1) / np.sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2])
        g = {"cnt": out[2], "seg": out[3], "D": (d[0] * inv, d[1] * inv, d[2] * inv)}
        if q:
            g["q"] = out[7]
        if sub:
            g["sub"] = out[-1]
        g["rs"] = plan.scene.take(out[3]) if B > 1 else None
        return g

    def no_sky(self, b: int) -> bool:
        """Whether every sample's ray of scene ``b`` goes down to the ground (checked at the frame's
        corners: the direction's z is a monotone sum of a row and a column term)."""
        n = self.n
        d0, dy, dx = self.d0f[b, 2], self.dyf[b, 2], self.dxf[b, 2]
        return all(d0 + F(i) * dy + F(j) * dx < 0 for i in (0, n - 1) for j in (0, n - 1))


__all__ = ["Cams"]
