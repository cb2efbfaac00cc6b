import hashlib

import numpy as np

from mosaic.sampling import sample_scene
from mosaic.scene import Scene, SceneObject
from mosaic.spec import load_spec
from renderers import get_renderer
from tests.conftest import SPECS


def test_shapes_masks_and_colours():
    spec = load_spec(SPECS / "clevr_like.yaml")
    scenes = [sample_scene(spec, "train", i)[0] for i in range(8)]
    images, masks = get_renderer("pillow", supersample=4).render(scenes)
    assert images.shape == (8, 64, 64, 3) and images.dtype == np.uint8
    assert masks.shape == (8, 64, 64) and masks.dtype == np.uint8
    for img, mask, scene in zip(images, masks, scenes):
        assert set(np.unique(mask)) == set(range(len(scene.objects) + 1))
        assert tuple(img[0, 0]) == scene.background or mask[0, 0] != 0
        for k, o in enumerate(scene.objects, start=1):
            # pixels well inside an object carry its exact colour
            inner = (mask == k)
            ys, xs = np.nonzero(inner)
            cy, cx = int(round(o.center[1] * 64 - 0.5)), int(round(o.center[0] * 64 - 0.5))
            if inner[cy, cx] and o.shape in ("circle", "square", "hexagon", "pentagon"):
                assert tuple(img[cy, cx]) == o.rgb


def test_rendering_is_byte_identical_and_anti_aliased():
    spec = load_spec(SPECS / "attribute.yaml")
    scene = sample_scene(spec, "train", 0)[0]
    r4 = get_renderer("pillow", supersample=4)
    a, _ = r4.render([scene])
    b, _ = r4.render([Scene.from_dict(scene.to_dict())])
    assert a.tobytes() == b.tobytes()
    colours = {tuple(p) for p in a[0].reshape(-1, 3)}
    assert len(colours) > 3  # blended edge pixels exist
    r1 = get_renderer("pillow", supersample=1)
    c, _ = r1.render([scene])
    assert {tuple(p) for p in c[0].reshape(-1, 3)} == {scene.background, *(o.rgb for o in scene.objects)}


def test_golden_hash_of_a_fixed_scene():
    # Pins the drawing code (and the exact Pillow version in pyproject.toml): if this changes,
    # every dataset's bytes change. Update the hash only on purpose.
    scene = Scene(32, (45, 52, 64), [
        SceneObject("circle", "red", (230, 25, 25), 0.3, (0.3, 0.3)),
        SceneObject("triangle", "blue", (30, 70, 240), 0.3, (0.7, 0.7), rotation=15.0),
        SceneObject("star", "yellow", (250, 225, 20), 0.25, (0.72, 0.25)),
    ])
    img, mask = get_renderer("pillow", supersample=4).render([scene])
    assert hashlib.sha256(img.tobytes()).hexdigest()[:16] == GOLDEN_IMAGE
    assert hashlib.sha256(mask.tobytes()).hexdigest()[:16] == GOLDEN_MASK


def test_bounding_boxes_contain_the_mask():
    spec = load_spec(SPECS / "clevr_like.yaml")
    scene = sample_scene(spec, "train", 5)[0]
    _, masks = get_renderer().render([scene])
    for k, o in enumerate(scene.objects, start=1):
        ys, xs = np.nonzero(masks[0] == k)
        x0, y0, x1, y1 = o.bbox(64)
        assert x0 <= xs.min() and xs.max() < x1 and y0 <= ys.min() and ys.max() < y1


GOLDEN_IMAGE = "3103892880199710"
GOLDEN_MASK = "c2f2773158778a33"
