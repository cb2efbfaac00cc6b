"""Moved to :mod:`mosaic.lab.transformer.tokens`; this name stays importable."""

from mosaic.lab.transformer.tokens import *  # noqa: F401,F403
