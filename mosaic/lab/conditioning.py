"""Moved to :mod:`mosaic.lab.diffusion.conditioning`; this name stays importable."""

from mosaic.lab.diffusion.conditioning import *  # noqa: F401,F403
from mosaic.lab.diffusion.conditioning import __all__  # noqa: F401
