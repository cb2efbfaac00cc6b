"""The one strict pydantic base of every mosaic file format (spec, holdout rules, lab configs, sweeps,
evaluator settings).

:class:`StrictModel` forbids unknown fields (``extra="forbid"``), so a misspelt key is an error
naming the field and its closest valid names (:func:`mosaic.overrides.validation_problems`)
instead of a silently ignored setting.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

#: the largest seed: torch and numpy take seeds below 2**63 (``torch.manual_seed`` fails beyond 2**64)
MAX_SEED = 2**63 - 1


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown fields and non-finite numbers.

    ``extra="forbid"``: a misspelt key is an error naming it. ``allow_inf_nan=False``: NaN and
    ±inf are rejected in every float field of every model built on this base, nested models,
    tuples, lists, mappings and unions included (issue 13), naming the field.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_empty_path(cls, data):
        """An empty string in a path field (``--set dataset.spec=""``) would silently mean the
        current folder: refused, naming the field."""
        if isinstance(data, dict):
            for name, f in cls.model_fields.items():
                v = data.get(name)
                if isinstance(v, str) and not v.strip() and _mentions_path(f.annotation):
                    raise PydanticCustomError("empty_path", "{field} is an empty path: give a file or folder name (an "
                                              "empty one would mean the current folder)", {"field": name})
        return data


def _mentions_path(annotation) -> bool:
    import typing
    from pathlib import Path

    return annotation is Path or any(_mentions_path(a) for a in typing.get_args(annotation))


def _safe_name(v: str) -> str:
    bad = [c for c in v if c in "/\\" or ord(c) < 32 or ord(c) == 127]
    if bad or v in (".", "..") or not v.strip():
        raise ValueError(f"{v!r} cannot be a folder name (it names files under a root folder): use letters, digits, "
                         "'-', '_' or '.', without '/', '\\', control characters, or '.'/'..' alone")
    return v


#: A name that becomes a folder or file name under a root (dataset, run, sweep names): no path
#: separators, control characters, ``.`` or ``..``, so it can never place files outside its root.
SafeName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_safe_name)]

#: A seed: an integer in [0, 2**63 - 1].
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
