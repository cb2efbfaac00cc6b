"""The one strict pydantic base of every mosaic file format (spec, holdout rules, lab configs, sweeps,
evaluator settings).

:class:`StrictModel` forbids unknown fields (``extra="forbid"``), so a misspelt key is an error
naming the field and its closest valid names (:func:`mosaic.overrides.validation_problems`)
instead of a silently ignored setting.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

#: the largest seed: torch and numpy take seeds below 2**63 (``torch.manual_seed`` fails beyond 2**64)
MAX_SEED = 2**63 - 1


class StrictModel(BaseModel):
    """A pydantic model that rejects unknown fields and non-finite numbers.

    ``extra="forbid"``: a misspelt key is an error naming it. ``allow_inf_nan=False``: NaN and
    ±inf are rejected in every float field of every model built on this base, nested models,
    tuples, lists, mappings and unions included (issue 13), naming the field. A boolean where a
    number is expected (YAML reads ``yes``/``no``/``on``/``off``/``true``/``false`` as booleans, and
    pydantic's lax mode would take ``True`` for ``1``: ``--set seed=yes``, ``training.steps=on``) is
    refused in every field whose type admits an int or float but not a bool, at any depth of its
    lists, tuples and mappings (:func:`bool_where_number`).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_number(cls, data):
        """A bool where a number is expected is refused (not taken for 1 or 0), naming the field
        (``ctx["path"]``, relative to this model: :func:`mosaic.overrides.validation_problems` adds it
        to the location), the value and the fix. A model-level check, not a field validator: a
        before-validator may not sit on a discriminated union's tag field."""
        if not isinstance(data, dict):
            return data
        for name, f in cls.model_fields.items():
            for key in dict.fromkeys(k for k in (name, f.alias, f.validation_alias) if isinstance(k, str)):
                if key not in data or not isinstance(data[key], (bool, list, tuple, dict)):
                    continue
                where = bool_where_number(data[key], f.annotation)
                if where is not None:
                    raise bool_error((key, *where[0]), where[1], f.annotation)
        return data

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
    if len(v.encode("utf-8", "surrogatepass")) > 200:  # 200 letters of 4 bytes: 800 bytes, where a file name holds 255
        raise ValueError(f"{v[:40]!r}... is {len(v.encode('utf-8', 'surrogatepass'))} bytes in UTF-8: a name becomes a folder name "
                         "(with a suffix), and a file name holds 255 bytes; give at most 200 bytes (fewer letters outside ASCII)")
    return v


#: A name that becomes a folder or file name under a root (dataset, run, sweep names): no path
#: separators, control characters, ``.`` or ``..``, so it can never place files outside its root.
SafeName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_safe_name)]

#: A seed: an integer in [0, 2**63 - 1].
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]


def _leaves(annotation) -> list:
    """The alternatives of an annotation: ``Annotated`` unwrapped, unions and ``Optional`` split."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _leaves(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [x for a in typing.get_args(annotation) for x in _leaves(a)]
    return [annotation]


def _admits(annotations: list, kind: type) -> bool:
    """Whether a value of ``kind`` (bool, str) or a number (``kind=int``) fits one alternative."""
    for t in annotations:
        if t is Any or t is object:
            return True
        if typing.get_origin(t) is typing.Literal:
            vals = typing.get_args(t)
            if kind is bool and any(isinstance(x, bool) for x in vals):
                return True
            if kind is int and any(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
                return True
            if kind is str and any(isinstance(x, str) for x in vals):
                return True
        elif isinstance(t, type):
            if kind is int and issubclass(t, (int, float)) and not issubclass(t, bool):
                return True
            if kind is not int and issubclass(t, kind):
                return True
    return False


def _shape_of(annotations: tuple) -> tuple:
    """``(refuse, values, items, positional)`` of a tuple of alternatives: whether a bool is refused
    here (a number fits, a bool does not), the alternatives of a mapping's values, of a sequence's
    items (``list[X]``, ``tuple[X, ...]``) and, per position, of a fixed tuple's items."""
    refuse = _admits(list(annotations), int) and not _admits(list(annotations), bool)
    values: list = []
    items: list = []
    positional: list[list] = []
    for t in annotations:
        origin, args = typing.get_origin(t), typing.get_args(t)
        if not args:
            continue
        if origin in (dict, collections.abc.Mapping):
            values += _leaves(args[-1])
        elif origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            positional += [[] for _ in range(len(args) - len(positional))]
            for i, a in enumerate(args):
                positional[i] += _leaves(a)
        elif origin in (list, set, frozenset, tuple, collections.abc.Sequence):
            items += _leaves(args[0])
    return refuse, tuple(values), tuple(items), tuple(tuple(p) for p in positional)


def _cached(fn):
    """``fn(annotations)`` remembered per tuple of alternatives; an unhashable annotation is computed each time."""
    remembered = functools.lru_cache(maxsize=4096)(fn)

    def call(annotations: tuple):
        try:
            return remembered(annotations)
        except TypeError:
            return fn(annotations)
    return call


_shape = _cached(_shape_of)


def _relevant_of(annotations: tuple, _depth: int = 0) -> bool:
    """Whether a bool could be refused anywhere in a value of these alternatives (else it is not walked)."""
    refuse, values, items, positional = _shape(annotations)
    if refuse:
        return True
    if _depth > 20:
        return False
    return any(_relevant_of(x, _depth + 1) for x in (values, items, *positional) if x)


_relevant = _cached(_relevant_of)


def _item_alternatives(items: tuple, positional: tuple, key) -> tuple:
    return items + positional[key] if isinstance(key, int) and key < len(positional) else items


def annotation_at(annotation, path: tuple) -> list:
    """The alternatives of the item at ``path`` (keys and indices) inside a value of ``annotation``."""
    annotations = tuple(_leaves(annotation))
    for key in path:
        _, values, items, positional = _shape(annotations)
        annotations = values if isinstance(key, str) else _item_alternatives(items, positional, key)
    return list(annotations)


def bool_where_number(v, annotation) -> tuple[tuple, bool] | None:
    """``(path, value)`` of the first bool in ``v`` (itself, or an item of its lists, tuples and
    mappings) where ``annotation`` expects a number and no bool, or None. Nested models are not
    entered: each checks its own fields. Parts of ``v`` whose type holds no number are not walked."""
    return _bool_where(v, tuple(_leaves(annotation)), ())


def _bool_where(v, annotations: tuple, path: tuple) -> tuple[tuple, bool] | None:
    refuse, values, items, positional = _shape(annotations)
    if isinstance(v, bool):
        return (path, v) if refuse else None
    if isinstance(v, dict) and values and _relevant(values):
        for key, item in v.items():
            if isinstance(item, (bool, list, tuple, dict)):
                found = _bool_where(item, values, path + (key,))
                if found is not None:
                    return found
    elif isinstance(v, (list, tuple)) and (items or positional):
        if not positional and not _relevant(items):
            return None
        for i, item in enumerate(v):
            if isinstance(item, (bool, list, tuple, dict)):
                found = _bool_where(item, _item_alternatives(items, positional, i), path + (i,))
                if found is not None:
                    return found
    return None


def bool_error(path: tuple, got: bool, annotation) -> PydanticCustomError:
    """The error of a bool ``got`` at ``path`` (field, then keys and indices) where a number is
    expected; ``ctx`` holds the ``path`` and the message ``detail`` without it."""
    quote = (f", or quote it (\"{'yes' if got else 'no'}\") if you mean a name"
             if _admits(annotation_at(annotation, path[1:]), str) else "")
    detail = (f"got {got}, a boolean (YAML reads yes/no/on/off/true/false as booleans), where a number is expected: "
              f"write the number itself (e.g. 1 or 0){quote}")
    return PydanticCustomError("bool_not_number", "{field}: {detail}",
                               {"field": ".".join(str(p) for p in path), "detail": detail, "path": list(path)})
