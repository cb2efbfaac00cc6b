"""YAML files and ``key.path=value`` overrides, shared by specs, lab configs and sweeps.

Each caller passes ``error(path, message) -> Exception`` so problems surface as its own error type
(:class:`~mosaic.errors.SpecError`, ``ConfigError``, ``SweepError``) with the field named.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import yaml

ErrorFactory = Callable[[str, str], Exception]


def read_yaml_file(path: str | Path, error: ErrorFactory, kind: str = "file") -> Any:
    """Parse a YAML file.

    Raises ``error(str(path), message)`` for a missing file or a syntax error; the message gives
    the line and column.
    """
    path = Path(path)
    if not path.is_file():
        raise error(str(path), f"no such {kind}: {path}")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise error(str(path), f"YAML syntax error in {path} at {where}: {e.problem or e}") from None
    except yaml.YAMLError as e:
        raise error(str(path), f"YAML error in {path}: {e}") from None


def set_in_place(data: dict, key: str, value: Any, error: ErrorFactory, container: str = "mapping or list") -> None:
    """Set ``key.path`` in ``data`` (mutated). Missing mappings are created; list items are
    addressed by index (``objects.0.size``). Raises ``error("--set", ...)`` for a path through a
    scalar or past the end of a list."""
    parts = key.strip().split(".")
    node = data
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise error("--set", f"{key!r}: {part!r} is not an index of a list of {len(node)} items")
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
        else:
            raise error("--set", f"{key!r}: {'.'.join(parts[:k])!r} is a value, not a {container}")


def parse_set(item: str, error: ErrorFactory, example: str = "splits.train=500") -> tuple[str, Any]:
    """Split ``key.path=value`` and parse the value as YAML (``3``, ``0.5``, ``red``, ``[1, 2]``)."""
    if "=" not in item:
        raise error("--set", f"{item!r} is not key.path=value, e.g. {example}")
    key, raw = item.split("=", 1)
    try:
        return key.strip(), yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise error("--set", f"value of {key.strip()!r} is not valid YAML: {e}") from None


def apply_overrides(data: dict, items: list[str] | None, error: ErrorFactory, example: str = "splits.train=500",
                    flat_prefixes: tuple[str, ...] = (), container: str = "mapping or list") -> dict:
    """A deep copy of ``data`` with ``key.path=value`` overrides applied in order.

    Keys under a ``flat_prefixes`` entry (e.g. ``dataset.overrides.``) are stored as one flat
    ``{rest.of.key: value}`` entry of that mapping instead of nested mappings.
    """
    data = copy.deepcopy(data)
    for item in items or []:
        key, value = parse_set(item, error, example)
        prefix = next((p for p in flat_prefixes if key.startswith(p)), None)
        if prefix is None:
            set_in_place(data, key, value, error, container)
            continue
        node = data
        for part in prefix.rstrip(".").split("."):
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[key[len(prefix):]] = value
    return data


def validation_problems(e, path_of: Callable[[tuple], str] | None = None,
                        expand: Callable[[dict], list[tuple[str, str]] | None] | None = None) -> list[tuple[str, str]]:
    """``(field path, message)`` pairs of a pydantic ``ValidationError``, worded for users.

    Unknown fields say "remove it or check its spelling", missing ones "required field is
    missing", and a bad scalar repeats the value it got. ``path_of(loc)`` formats a location (default:
    dotted); ``expand(err)`` may return the problems an error carries itself (e.g. a validator's
    own list), used instead of the generic wording. Duplicates (one per union branch) are dropped.
    """
    def dotted(loc) -> str:
        return ".".join(str(p) for p in loc if not (isinstance(p, str) and ("[" in p or "function" in p)))

    path_of = path_of or dotted
    problems: list[tuple[str, str]] = []
    for err in e.errors():
        own = expand(err) if expand else None
        if own is not None:
            problems.extend(own)
            continue
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown field {err['loc'][-1]!r}: remove it or check its spelling"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif "input" in err and not isinstance(err["input"], (dict, list)):
            msg = f"{msg} (got {err['input']!r})"
        problems.append((path_of(err["loc"]), msg))
    return list(dict.fromkeys(problems))
