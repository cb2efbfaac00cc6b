"""``python -m mosaic.cli ...`` (used by ``accelerate launch``, ``torchrun`` and sweep trials).

A sweep starts its trials with ``MOSAIC_DIE_WITH_PARENT=1``: such a trial ends when the sweep
process dies, even by ``kill -9`` (:func:`mosaic.locks.die_with_parent`), instead of training on
as an orphan.
"""

import os

if os.environ.pop("MOSAIC_DIE_WITH_PARENT", None) == "1":
    from mosaic.locks import die_with_parent

    die_with_parent()

from mosaic.cli import app  # noqa: E402

app()
