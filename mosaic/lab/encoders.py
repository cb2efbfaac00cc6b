"""Moved to :mod:`mosaic.lab.transformer.encoders`; this name stays importable."""

from mosaic.lab.transformer.encoders import *  # noqa: F401,F403
