"""The renderer interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from mosaic.scene import Scene

#: samples a dataset writer lays out before it renders them together (:meth:`Renderer.render_batch`)
RENDER_CHUNK = 16


class Renderer(ABC):
    """Turns scene graphs into images and instance masks."""

    name: str = "base"

    @abstractmethod
    def render_one(self, scene: Scene) -> tuple[np.ndarray, np.ndarray]:
        """One scene -> (image uint8 [H, W, 3], instance mask uint8 [H, W])."""

    def render_image(self, scene: Scene) -> np.ndarray:
        """One scene -> image uint8 ``[H, W, 3]``, the same pixels as ``render_one(scene)[0]``;
        backends override it to skip the instance mask (what generation without ``--masks`` needs)."""
        return self.render_one(scene)[0]

    def render_batch(self, scenes: Sequence[Scene], masks: bool = False) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """``(image, mask)`` of each scene: ``render_one(scene)`` with ``masks``, else ``(render_image(scene),
        None)`` (the same pixels); a backend may render the batch together (the shaded one does)."""
        return [self.render_one(s) if masks else (self.render_image(s), None) for s in scenes]

    def render(self, scenes: Sequence[Scene]) -> tuple[np.ndarray, np.ndarray]:
        """Render a batch of scenes of equal ``image_size``.

        Returns:
            images: uint8 ``[B, H, W, 3]`` sRGB.
            masks: uint8 ``[B, H, W]``; value k > 0 is object k-1 of the scene, 0 the background.
        Raises:
            ValueError: scenes of different image sizes, or more than 255 objects in a scene.
        """
        if not scenes:
            return np.zeros((0, 0, 0, 3), np.uint8), np.zeros((0, 0, 0), np.uint8)
        sizes = {s.image_size for s in scenes}
        if len(sizes) != 1:
            raise ValueError(f"render() needs scenes of one image size, got {sorted(sizes)}")
        out = [self.render_one(s) for s in scenes]
        return np.stack([o[0] for o in out]), np.stack([o[1] for o in out])
