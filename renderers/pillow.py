"""Pillow backend: filled shapes drawn at ``supersample`` times the size, box-reduced.

Pillow's ImageDraw has no anti-aliasing for shapes; supersampling then ``Image.reduce`` (a box
average) is what its maintainers advise (Pillow issue #5960). Coordinates are rounded to the
supersampled pixel grid, so the output is byte-identical across runs for a given Pillow version
(pinned in pyproject.toml).
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from mosaic.scene import Scene
from renderers.base import Renderer


class PillowRenderer(Renderer):
    """Anti-aliased 2D rendering with Pillow.

    Args:
        supersample: drawing scale factor (1 = aliased; 4 is the default quality).
    """

    name = "pillow"

    def __init__(self, supersample: int = 4):
        if not 1 <= int(supersample) <= 16:
            raise ValueError(f"supersample must be 1..16, got {supersample}")
        self.supersample = int(supersample)

    def _draw(self, draw: ImageDraw.ImageDraw, obj, side: int, fill) -> None:
        s = self.supersample
        big = side * s
        verts = obj.vertices(big)
        if verts is None:
            r = obj.radius * big
            cx, cy = obj.center[0] * big, obj.center[1] * big
            # Pillow boxes include x1, y1: subtract one so the disk spans exactly 2r pixels
            box = (round(cx - r), round(cy - r), round(cx + r) - 1, round(cy + r) - 1)
            draw.ellipse(box, fill=fill)
        else:
            draw.polygon([(round(x), round(y)) for x, y in verts], fill=fill)

    def render_one(self, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
        if len(scene.objects) > 255:
            raise ValueError(f"a scene has {len(scene.objects)} objects; masks hold at most 255")
        side, s = scene.image_size, self.supersample
        img = self._image(scene)
        mask = Image.new("L", (side * s, side * s), 0)
        d_mask = ImageDraw.Draw(mask)
        for k, o in enumerate(scene.objects, start=1):
            self._draw(d_mask, o, side, k)
        if s > 1:
            # mask: the label at the centre of each s x s block (no blending of object ids)
            m = np.asarray(mask)[s // 2 :: s, s // 2 :: s]
        else:
            m = np.asarray(mask)
        return img, np.ascontiguousarray(m, dtype=np.uint8)

    def render_image(self, scene: Scene) -> np.ndarray:
        """The image alone (no instance mask drawn): the same pixels as ``render_one(scene)[0]``, in
        about half the drawing time."""
        if len(scene.objects) > 255:
            raise ValueError(f"a scene has {len(scene.objects)} objects; masks hold at most 255")
        return self._image(scene)

    def _image(self, scene: Scene) -> np.ndarray:
        side, s = scene.image_size, self.supersample
        img = Image.new("RGB", (side * s, side * s), tuple(scene.background))
        d_img = ImageDraw.Draw(img)
        for o in scene.objects:
            self._draw(d_img, o, side, tuple(o.rgb))
        if s > 1:
            img = img.reduce(s)
        return np.asarray(img, dtype=np.uint8)
