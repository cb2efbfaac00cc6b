"""Per-region helpers of the scene parser (:mod:`mosaic.evaluation.parser`): the share of an
object's coverage in its main piece, the k-means split of touching objects, grown slices and
squared colour distances."""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from mosaic.evaluation.raster import clip

_EIGHT = np.ones((3, 3), bool)


def main_share(alpha: np.ndarray, box: tuple[slice, slice] | None = None) -> float:
    """Share of a coverage map's mass (``alpha`` clipped to [0, 1]) in its main connected region:
    the hard mask ``alpha >= 0.5`` is split into 8-connected regions, every covered pixel goes to
    the nearest one, and the heaviest region's mass is divided by the total (1.0 = one piece).
    ``box``: slices outside which ``alpha`` is zero (the same share, read on the box)."""
    a = clip(alpha if box is None else alpha[box], 0.0, 1.0)
    # on the box of the covered pixels (every region lies in it, and pixels outside it weigh
    # nothing): the same regions in the same scan order, the same nearest region of every
    # covered pixel, and the same masses summed in the same order, on a tenth of the pixels
    rows, cols = np.flatnonzero(a.any(1)), np.flatnonzero(a.any(0))
    if len(rows) == 0:
        return 1.0
    a = a[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
    hard = a >= 0.5
    lab, n = ndimage.label(hard, structure=_EIGHT)
    if n <= 1:
        return 1.0
    _, (iy, ix) = ndimage.distance_transform_edt(lab == 0, return_indices=True)
    nearest = lab[iy, ix]
    mass = np.bincount(nearest.ravel(), weights=a.ravel(), minlength=n + 1)[1:]
    tot = float(mass.sum())
    return float(mass.max() / tot) if tot > 0 else 1.0


#: moduli tried by :func:`unique_inverse` (primes): one on which the distinct codes do not collide
_MODULI = (65521, 65537, 131071)


def unique_inverse(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(code, return_inverse=True)`` of a 1-D int array, the same arrays: the distinct
    values sorted and, per element, the index of its value among them. The sort is numpy's, and
    the inverse is read from a table indexed by the value modulo a prime on which the distinct
    values are all different (an argsort of every element costs ten times more). Where no
    modulus tried separates them (many distinct values), ``np.unique`` itself."""
    s = np.sort(code)
    new = np.empty(len(s), bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    u = s[new]
    if len(u) <= 1024:
        for p in _MODULI:
            h = u % p
            hs = np.sort(h)
            if not (hs[1:] == hs[:-1]).any():
                table = np.empty(p, np.intp)
                table[h] = np.arange(len(u))
                return u, table[code % p]
    return np.unique(code, return_inverse=True)


def grow(sl: tuple[slice, slice], n: int, H: int, W: int) -> tuple[slice, slice]:
    return (slice(max(0, sl[0].start - n), min(H, sl[0].stop + n)), slice(max(0, sl[1].start - n), min(W, sl[1].stop + n)))


def sqdist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Squared Euclidean distance over the last axis, broadcasting ``a[..., None, :]`` against ``b``."""
    diff = a[..., None, :] - b
    return np.einsum("...i,...i->...", diff, diff)


def kmeans_split(alpha: np.ndarray, k: int, iters: int = 20) -> list[np.ndarray]:
    """Split a coverage map into ``k`` parts by alpha-weighted k-means on pixel coordinates."""
    ys, xs = np.nonzero(alpha)
    pts = np.stack([xs, ys], 1).astype(np.float64)
    w = alpha[ys, xs]
    # farthest-point start from the heaviest pixel
    centres = [pts[w.argmax()]]
    for _ in range(1, k):
        d = np.min([np.linalg.norm(pts - c, axis=1) for c in centres], axis=0) * (w > 0.5)
        centres.append(pts[d.argmax()])
    C = np.array(centres)
    for _ in range(iters):
        assign = np.linalg.norm(pts[:, None] - C[None], axis=-1).argmin(1)
        newC = np.array([np.average(pts[assign == j], axis=0, weights=w[assign == j]) if (assign == j).any() and w[assign == j].sum() > 0 else C[j] for j in range(k)])
        if np.allclose(newC, C):
            break
        C = newC
    out = []
    for j in range(k):
        m = np.zeros_like(alpha)
        sel = assign == j
        m[ys[sel], xs[sel]] = w[sel]
        out.append(m)
    return out


__all__ = ["grow", "kmeans_split", "main_share", "sqdist", "unique_inverse"]
