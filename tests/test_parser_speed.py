"""The scene parser's faster paths give the bits of the plain ones (issue 27, item 3).

Every read of the parser must stay identical (``tests/test_parser_verdicts.py`` and
``tests/test_parallel_reads.py`` pin whole reads); these tests pin the pieces that were rewritten
for speed against straightforward versions of the same computation:

- :class:`~mosaic.evaluation.raster.Canvas` crops each band to the rows and columns its shapes can
  reach: every render equals the shape drawn alone (:meth:`ShapeFitter.render_patch`);
- ``_main_share`` labels and assigns pixels on the box of the covered pixels: the same share as
  on the whole map;
- the coarse rotation grids are made once per fitter and are the same lists every call.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from mosaic.evaluation.region_ops import main_share as _main_share
from mosaic.evaluation.raster import Canvas, clip
from mosaic.evaluation.shape_fit import ShapeFitter, ShapeHypothesis
from mosaic.scene import SceneObject
from mosaic.vocab import SHAPES


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_canvas_renders_each_shape_as_drawn_alone(seed):
    rng = np.random.default_rng(seed)
    shapes = list(SHAPES)
    for _ in range(25):
        s, side = int(rng.integers(1, 5)), int(rng.choice([32, 64, 128]))
        fitter, canvas, jobs = ShapeFitter(None, {}, s), Canvas(s, side), []
        for _ in range(int(rng.integers(1, 10))):
            sh = shapes[int(rng.integers(len(shapes)))]
            cx, cy = rng.uniform(-0.1, 1.1, 2)
            obj = SceneObject(sh, "red", (255, 0, 0), float(rng.uniform(0.03, 0.5)), (float(cx), float(cy)),
                              float(rng.uniform(0, 360)))
            x0, y0 = int(rng.integers(0, side)), int(rng.integers(0, side))
            shape = (int(rng.integers(1, side - y0 + 1)), int(rng.integers(1, side - x0 + 1)))
            rots = None if SHAPES[sh] is None or rng.random() < 0.3 else [float(r) for r in rng.uniform(0, 360, int(rng.integers(1, 6)))]
            g = canvas.add(obj, shape, (x0, y0)) if rots is None else canvas.add_rotations(obj, rots, shape, (x0, y0))
            jobs.append((obj, rots, g, shape, (x0, y0)))
        covs = canvas.render()
        for obj, rots, g, shape, origin in jobs:
            for j, r in enumerate(rots or [obj.rotation]):
                alone = fitter.render_patch(SceneObject(obj.shape, obj.color, obj.rgb, obj.size, obj.center, r), shape, origin, side)
                assert covs[g][j].flags.c_contiguous
                assert np.array_equal(covs[g][j], alone), (obj, r, shape, origin, s, side)


def _main_share_whole(alpha: np.ndarray) -> float:
    """The share on the whole map, as the parser computed it before."""
    a = clip(alpha, 0.0, 1.0)
    lab, n = ndimage.label(a >= 0.5, structure=np.ones((3, 3), bool))
    if n <= 1:
        return 1.0
    _, (iy, ix) = ndimage.distance_transform_edt(lab == 0, return_indices=True)
    mass = np.bincount(lab[iy, ix].ravel(), weights=a.ravel(), minlength=n + 1)[1:]
    tot = float(mass.sum())
    return float(mass.max() / tot) if tot > 0 else 1.0


def test_main_share_on_the_covered_box_is_the_whole_maps():
    rng = np.random.default_rng(0)
    for _ in range(300):
        alpha = np.zeros((64, 64))
        for _ in range(int(rng.integers(1, 5))):  # blobs, some touching, some apart
            y, x = rng.integers(0, 60, 2)
            h, w = rng.integers(1, 12, 2)
            alpha[y:y + h, x:x + w] = rng.uniform(-0.2, 1.2, (min(h, 64 - y), min(w, 64 - x)))
        if rng.random() < 0.3:
            alpha[rng.random((64, 64)) < 0.01] = 0.6  # specks
        assert _main_share(alpha) == _main_share_whole(alpha)
    assert _main_share(np.zeros((64, 64))) == 1.0


def test_coarse_rotation_grids_are_made_once():
    fitter = ShapeFitter(None, {}, 4)
    rng_h = ShapeHypothesis("star", (0.0, 360.0), (0.1, 0.2))
    list_h = ShapeHypothesis("square", [0.0, 45.0, 90.0, 135.0], (0.1, 0.2))
    for h in (rng_h, list_h):
        first = fitter.rotation_candidates(h, 0.0, 6.0, fine=False)
        assert fitter.rotation_candidates(h, 0.0, 6.0, fine=False) is first
        assert all(isinstance(r, float) for r in first)
    assert fitter.rotation_candidates(rng_h, 0.0, 6.0, fine=False) == [float(r) for r in np.arange(0.0, 72.0 + 1e-9, 10.0)]
    assert fitter.rotation_candidates(list_h, 0.0, 6.0, fine=False) == [0.0, 45.0]
    assert fitter.rotation_candidates(list_h, 12.5, 6.0, fine=True) == [12.5]
