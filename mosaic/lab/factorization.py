"""Moved to :mod:`mosaic.lab.transformer.factorization`; this name stays importable."""

from mosaic.lab.transformer.factorization import *  # noqa: F401,F403
