"""Image degradations that mimic generator artefacts: blur, pixel noise, colour shift.

Used to measure an evaluator's accuracy on images a diffusion model might produce
(:func:`mosaic.evaluation.check_evaluator` with ``degrade=``) and, with random strengths, as the
learned evaluator's training augmentation (:mod:`mosaic.evaluation.learned`). Strengths are given
for a 64 px image and scale with the image side (blur in pixels).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field
from scipy import ndimage

from mosaic.errors import MosaicError
from mosaic.schema import StrictModel


class Degradation(StrictModel):
    """One degradation setting.

    Attributes:
        blur: Gaussian blur sigma in pixels of a 64 px image (scaled by side / 64).
        noise: std of additive Gaussian pixel noise, in sRGB levels (0-255).
        color_shift: max per-image, per-channel gain change (fraction, e.g. 0.04 = ±4 %) plus an
            offset of up to ``color_shift * 100`` levels.
    """

    blur: float = Field(0.0, ge=0, le=5)
    noise: float = Field(0.0, ge=0, le=64)
    color_shift: float = Field(0.0, ge=0, le=0.3)


#: Named settings. ``mild`` is the reported "degraded" figure: a light blur (sigma 0.7 px at 64 px),
#: noise of std 6 levels and colour shifts of up to ±3 % gain / ±3 levels.
DEGRADATIONS: dict[str, Degradation] = {
    "none": Degradation(),
    "mild": Degradation(blur=0.7, noise=6.0, color_shift=0.03),
    "strong": Degradation(blur=1.2, noise=12.0, color_shift=0.06),
}


def get_degradation(name: str | Degradation | None) -> Degradation:
    """A named degradation (``none``, ``mild``, ``strong``) or a given one.

    Raises:
        MosaicError: unknown name (lists the known ones).
    """
    if name is None:
        return DEGRADATIONS["none"]
    if isinstance(name, Degradation):
        return name
    if name not in DEGRADATIONS:
        raise MosaicError(f"unknown degradation {name!r}: use one of {', '.join(DEGRADATIONS)}")
    return DEGRADATIONS[name]


def degrade(images: np.ndarray, how: str | Degradation | None = "mild", seed: int = 0) -> np.ndarray:
    """Apply a degradation to a batch of images, deterministically for a seed.

    Args:
        images: uint8 ``[N, H, W, 3]``.
        how: a name of :data:`DEGRADATIONS` or a :class:`Degradation`.
        seed: noise and colour-shift seed.
    Returns:
        uint8 ``[N, H, W, 3]`` (a new array).
    """
    d = get_degradation(how)
    x = np.asarray(images, dtype=np.float64)
    if x.ndim != 4 or x.shape[-1] != 3:
        raise ValueError(f"images must be [N, H, W, 3], got {list(x.shape)}")
    rng = np.random.default_rng(seed)
    if d.blur > 0:
        sigma = d.blur * x.shape[1] / 64.0
        x = ndimage.gaussian_filter(x, sigma=(0, sigma, sigma, 0), mode="nearest")
    if d.color_shift > 0:
        gain = 1.0 + rng.uniform(-d.color_shift, d.color_shift, size=(x.shape[0], 1, 1, 3))
        offset = rng.uniform(-d.color_shift * 100, d.color_shift * 100, size=(x.shape[0], 1, 1, 3))
        x = x * gain + offset
    if d.noise > 0:
        x = x + rng.normal(0.0, d.noise, size=x.shape)
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)
