"""``python -m mosaic.cli ...`` (used by ``accelerate launch``, ``torchrun`` and sweep trials)."""

from mosaic.cli import app

app()
