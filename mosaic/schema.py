"""The one strict pydantic base of every mosaic file format (spec, holdout rules, lab configs, sweeps,
evaluator settings).

:class:`StrictModel` forbids unknown fields (``extra="forbid"``), so a misspelt key is an error
naming the field and its closest valid names (:func:`mosaic.overrides.validation_problems`)
instead of a silently ignored setting.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown fields."""

    model_config = ConfigDict(extra="forbid")
