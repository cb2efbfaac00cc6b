"""Renderers: one interface, several backends.

``get_renderer(name, supersample=4).render(scenes) -> (images uint8 [B, H, W, 3], masks uint8 [B, H, W])``;
mask value k > 0 is the k-th object of the scene (1-based, scene order), 0 is background.
"""

from __future__ import annotations

from renderers.base import Renderer
from renderers.pillow import PillowRenderer

BACKENDS: dict[str, type[Renderer]] = {"pillow": PillowRenderer}


def get_renderer(name: str = "pillow", **kwargs) -> Renderer:
    """Build a renderer backend by name. Raises ValueError for an unknown name."""
    if name not in BACKENDS:
        raise ValueError(f"unknown renderer {name!r}; available: {', '.join(BACKENDS)}")
    return BACKENDS[name](**kwargs)


__all__ = ["Renderer", "PillowRenderer", "get_renderer", "BACKENDS"]
