"""Renderers: one interface, several backends.

``get_renderer(name, supersample=4).render(scenes) -> (images uint8 [B, H, W, 3], masks uint8 [B, H, W])``;
mask value k > 0 is the k-th object of the scene (1-based, scene order), 0 is background.
"""

from __future__ import annotations

from renderers.base import RENDER_CHUNK, Renderer
from renderers.pillow import PillowRenderer
from renderers.shaded import ShadedRenderer

BACKENDS: dict[str, type[Renderer]] = {"pillow": PillowRenderer, "shaded": ShadedRenderer}


def get_renderer(name: str = "pillow", **kwargs) -> Renderer:
    """Build a renderer backend by name. Raises ValueError for an unknown name."""
    if name not in BACKENDS:
        raise ValueError(f"unknown renderer {name!r}; available: {', '.join(BACKENDS)}")
    return BACKENDS[name](**kwargs)


def backend_of(spec, requested: str = "pillow") -> str:
    """The backend that renders ``spec``: ``shaded`` when ``spec.image.renderer`` is ``shaded``, else
    ``requested`` (``pillow``, the flat renderer, by default)."""
    return "shaded" if getattr(spec.image, "renderer", None) == "shaded" else requested


def renderer_for(spec, requested: str = "pillow") -> Renderer:
    """The renderer of ``spec`` (:func:`backend_of`) at the spec's ``image.supersample``."""
    return get_renderer(backend_of(spec, requested), supersample=spec.image.supersample)


__all__ = ["RENDER_CHUNK", "Renderer", "PillowRenderer", "ShadedRenderer", "get_renderer", "backend_of", "renderer_for", "BACKENDS"]
