"""Moved to :mod:`mosaic.lab.transformer.binding`; this name stays importable."""

from mosaic.lab.transformer.binding import *  # noqa: F401,F403
