"""YAML files and ``key.path=value`` overrides, shared by specs, lab configs and sweeps.

Each caller passes ``error(path, message) -> Exception`` so problems surface as its own error type
(:class:`~mosaic.errors.SpecError`, ``ConfigError``, ``SweepError``) with the field named.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any, Callable

import yaml
from mosaic.io import FileReadError, read_bounded
from mosaic.vocab import closest

ErrorFactory = Callable[[str, str], Exception]

#: bounds on what a YAML document may expand to (specs, configs, sweeps and --set values alike)
MAX_YAML_BYTES = 16 * 2**20
MAX_YAML_VALUES = 250_000


def yaml_size(data: Any, limit: int = MAX_YAML_VALUES) -> int:
    """The number of values ``data`` holds once every YAML alias is expanded (a shared sub-tree
    counts once per reference), computed without expanding anything.

    Raises:
        ValueError: a recursive alias (a value that contains itself), or more than ``limit`` values.
    """
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(x) -> int:
        if not isinstance(x, (dict, list)):
            return 1
        key = id(x)
        if key in memo:
            return memo[key]
        if key in active:
            raise ValueError("a recursive YAML alias (a value that contains itself)")
        active.add(key)
        items = list(x.keys()) + list(x.values()) if isinstance(x, dict) else x
        n = 1
        for item in items:
            n += size(item)
            if n > limit:
                raise ValueError(f"YAML aliases expand it to more than {limit:,} values")
        active.discard(key)
        memo[key] = n
        return n

    return size(data)


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping that names one key twice (plain YAML keeps the last silently)."""


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping naming one key twice: plain YAML keeps the last
    value silently, so a spec, config or sweep with two ``splits:`` (or two ``lr:``) would run with
    half of what its author wrote. Keys brought in by a merge (``<<: *base``) may be overridden: only
    the keys written in the mapping itself are compared.

    Raises:
        DuplicateKeyError: naming the key, the line of the second occurrence (``problem_mark``)
            and the line of the first.
    """

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable: the base constructor reports it
                    continue
                if first is not None:
                    raise DuplicateKeyError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r} (first at line {first.line + 1}): YAML would keep only the last value; "
                        "remove one of them", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def _numbers_as_written(loader: type) -> None:
    """Resolve plain scalars to numbers only in the forms everyone reads alike. YAML 1.1 (PyYAML)
    reads ``010`` as octal 8, ``12:30`` as 750 and ``16:9`` as 969 (base 60): ``--set splits.train=010``
    generated 8 samples and a concept value ``16:9`` became the label 969, without a word. Such
    scalars stay the text they are (a number field then reads ``010`` as ten, and refuses ``1:30``
    by name); decimal (``0``, ``12``, ``1_000``), ``0x``/``0b`` integers and decimal floats are as before
    (``1e-3`` stays text, as in YAML 1.1: a sweep's trial ids hash the values read, and a folder made before
    keeps its ids; the sweep compares it as the number it configures, :func:`mosaic.claims._canon`)."""
    import re

    int_tag, float_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (int_tag, float_tag)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    loader.add_implicit_resolver(int_tag, re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?(?:0|[1-9][0-9_]*))$"),
                                 list("-+0123456789"))
    loader.add_implicit_resolver(float_tag, re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))


_numbers_as_written(UniqueKeyLoader)


def _unordered_or_odd(loader, node):
    """A tag whose value has no order or no JSON form is refused where it stands (line and column): ``!!set``
    builds a Python set, whose order (a spec's labels, its fingerprint) changes with the process's hash seed
    (attack round 26); ``!!omap`` / ``!!pairs`` build lists of tuples that no field means."""
    raise yaml.constructor.ConstructorError(
        None, None, f"the YAML tag {node.tag.rsplit(':', 1)[-1]!r} is not allowed: its value has no order every reader "
        "agrees on (or no JSON form); write a plain list ([a, b]) or mapping ({a: 1})", node.start_mark)


for _tag in ("set", "omap", "pairs"):
    UniqueKeyLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _unordered_or_odd)


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate mapping keys (:class:`UniqueKeyLoader`): the one
    YAML parser of every user file and ``--set`` value (specs, configs, sweeps, registries)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def not_unicode_path(data: Any, path: str = "") -> str | None:
    """The dotted path of the first key or string value in ``data`` holding a lone surrogate
    (``"\\udcff"``: a YAML or JSON escape that is not a Unicode character, so it cannot be
    written as UTF-8 into a manifest, a card or a file name), or None. A path of ``""`` means
    ``data`` itself. Walks at most what :func:`yaml_size` admits."""
    def bad(x) -> bool:
        return isinstance(x, str) and any("\ud800" <= ch <= "\udfff" for ch in x)

    if bad(data):
        return path
    if isinstance(data, dict):
        for k, v in data.items():
            name = str(k).encode("utf-8", "backslashreplace").decode("utf-8")  # printable, surrogates escaped
            sub = f"{path}.{name}" if path else name
            if bad(k):
                return sub
            found = not_unicode_path(v, sub)
            if found is not None:
                return found
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found = not_unicode_path(v, f"{path}.{i}" if path else str(i))
            if found is not None:
                return found
    return None


def _not_unicode_message(field: str) -> str:
    return (f"{field} holds a lone surrogate (an escape such as \\udcff that is not a Unicode character), which no file "
            "can store as UTF-8: write the character itself, or remove the escape")


def load_yaml_text(text: str, where: str, error: ErrorFactory) -> Any:
    """Parse YAML text with bounded alias expansion (:func:`yaml_size`) and no duplicate keys.

    Raises ``error(where, message)`` for a syntax error (line and column), a key named twice in one
    mapping (both lines), a recursive alias or an alias expansion beyond :data:`MAX_YAML_VALUES`
    values ("billion laughs"), or an integer longer than Python converts (4,300 digits).
    """
    try:
        data = safe_load(text)
    except DuplicateKeyError as e:
        mark = e.problem_mark
        raise error(where, f"{where} names a key twice, at line {mark.line + 1}, column {mark.column + 1}: {e.problem}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        pos = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise error(where, f"YAML syntax error in {where} at {pos}: {e.problem or e}") from None
    except yaml.YAMLError as e:
        raise error(where, f"YAML error in {where}: {e}") from None
    except RecursionError:
        raise error(where, f"{where} nests deeper than YAML can read: flatten it") from None
    except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise error(where, f"{where} holds a value YAML cannot read as a number ({str(e).split(';')[0]}): "
                    "write a smaller number (a seed, a count or a size fits in a few digits)") from None
    try:
        yaml_size(data)
    except ValueError as e:
        raise error(where, f"{where} is refused: {e} (alias expansion is bounded, e.g. against a 'billion laughs' "
                    "document); write the values out, or use fewer aliases") from None
    except RecursionError:
        raise error(where, f"{where} nests deeper than mosaic reads: flatten it") from None
    field = not_unicode_path(data)
    if field is not None:
        raise error(where, f"{where}: " + _not_unicode_message(field or "the document"))
    return data


def missing_file_hint(path: str | Path) -> str:
    """What to say after "no such file": the closest name of a file beside it (a typo), else, for a relative path
    whose folder is not here, that it is read from the current folder (commands that name ``experiments/...`` are run
    from the project folder)."""
    path = Path(path)
    parent = path.parent
    if parent.is_dir():
        try:
            names = [p.name for p in parent.iterdir() if p.is_file() and p.suffix == path.suffix]
        except OSError:
            names = []
        c = closest(path.name, names, cutoff=0.75)
        return f"; did you mean {str(parent / c)!r}?" if c else ""
    if not path.is_absolute():
        return (f" (a relative path is read from the current folder {os.getcwd()}: run from the folder it starts at, e.g. the "
                "project folder holding experiments/, or give an absolute path)")
    return ""


def read_yaml_file(path: str | Path, error: ErrorFactory, kind: str = "file") -> Any:
    """Parse a YAML file: UTF-8 text of at most :data:`MAX_YAML_BYTES`, aliases bounded.

    Raises ``error(str(path), message)`` for a missing file, a directory, a file that is binary or
    not UTF-8 (naming the byte), a file too large, a syntax error (line and column) or an alias
    expansion beyond :data:`MAX_YAML_VALUES` values.
    """
    path = Path(path)
    try:
        raw = read_bounded(path, MAX_YAML_BYTES)  # a regular file (a FIFO is never waited on), never more than the bound
    except FileNotFoundError:
        raise error(str(path), f"no such {kind}: {path}{missing_file_hint(path)}") from None
    except FileReadError as e:
        if e.kind == "a folder":
            raise error(str(path), f"{path} is a directory, not a {kind}") from None
        if e.kind is not None:  # /dev/zero, a FIFO, a socket: never read (it may not end)
            raise error(str(path), f"{path} is {e.kind}, not a regular file: give the {kind} itself") from None
        raise error(str(path), f"{path} is too large ({e}): a {kind} is YAML text of at most {MAX_YAML_BYTES:,} bytes; "
                    "is it the right file?") from None
    except OSError as e:
        raise error(str(path), f"cannot read {path}: {e.strerror}") from None
    if b"\x00" in raw:
        raise error(str(path), f"{path} is a binary file (it holds NUL bytes), not a YAML {kind}: give the {kind} itself")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise error(str(path), f"{path} is not UTF-8 text (byte {raw[e.start:e.start + 1]!r} at offset {e.start}, line {line}): "
                    f"a {kind} is UTF-8 YAML; re-save it as UTF-8, or check it is the right file") from None
    return load_yaml_text(text, str(path), error)


def list_index(part: str) -> int | None:
    """The list index a path part names: ASCII decimal digits without a leading zero (``0``, ``12``),
    else None. ``str.isdigit`` and ``int`` also take other scripts' digits (``'٠'``, ``'０'``) and
    ``int`` takes ``'+0'``, ``' 1'`` and ``'1_0'``: none of them is an index."""
    return int(part) if re.fullmatch(r"0|[1-9][0-9]*", part, flags=re.ASCII) else None


def set_in_place(data: dict, key: str, value: Any, error: ErrorFactory, container: str = "mapping or list") -> None:
    """Set ``key.path`` in ``data`` (mutated). Missing mappings are created; list items are
    addressed by index (``objects.0.size``: :func:`list_index`, ASCII digits only). Raises
    ``error("--set", ...)`` for a path through a scalar or past the end of a list."""
    set_parts(data, tuple(key.strip().split(".")), value, error, container, shown=key)


def set_parts(data: dict, parts: tuple, value: Any, error: ErrorFactory, container: str = "mapping or list",
              shown: str | None = None) -> None:
    """Set the item at ``parts`` (mapping keys taken whole, a ``.`` in one included; list indices
    as in :func:`list_index`) in ``data`` (mutated), as :func:`set_in_place` does for a dotted key."""
    key = shown if shown is not None else ".".join(map(str, parts))
    node = data
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        if isinstance(node, list):
            i = list_index(str(part))
            if i is None or i >= len(node):
                how = ("" if i is not None else
                       ": an index is written in ASCII digits 0-9, without a sign or leading zeros (e.g. objects.0.size)")
                raise error("--set", f"{key!r}: {part!r} is not an index of a list of {len(node)} items{how}")
            if last:
                node[i] = value
            else:
                node = node[i]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if node.get(part) is None:
                    node[part] = {}
                node = node[part]
        else:
            raise error("--set", f"{key!r}: {'.'.join(map(str, parts[:k]))!r} is a value, not a {container}")


class ParsedOverride(str):
    """An override already split into its path ``parts`` and parsed ``value`` (a training config's
    ``dataset.overrides`` mapping): :func:`apply_overrides` sets it with :func:`set_parts`, so a key
    holding ``.`` or ``=`` (a colour named ``dark.red``) stays one key instead of being re-split as
    ``key.path=value`` text. The string itself is only how it is shown (``colors."dark.red"=[...]``)."""

    parts: tuple
    value: Any
    shown: str

    def __new__(cls, parts: tuple, value: Any):
        shown = ".".join(json.dumps(p, ensure_ascii=False) if any(c in str(p) for c in ".= ") or not str(p) else str(p)
                         for p in parts)
        self = super().__new__(cls, f"{shown}={json.dumps(value, ensure_ascii=False, default=str)}")
        self.parts, self.value, self.shown = tuple(parts), value, shown
        return self


def parse_set(item: str, error: ErrorFactory, example: str = "splits.train=500") -> tuple[str, Any]:
    """Split ``key.path=value`` and parse the value as YAML (``3``, ``0.5``, ``red``, ``[1, 2]``)."""
    if "=" not in item:
        raise error("--set", f"{item!r} is not key.path=value, e.g. {example}")
    key, raw = item.split("=", 1)
    try:
        value = safe_load(raw)
        yaml_size(value)
    except DuplicateKeyError as e:
        raise error("--set", f"value of {key.strip()!r} names a key twice: {e.problem}") from None
    except yaml.YAMLError as e:
        raise error("--set", f"value of {key.strip()!r} is not valid YAML: {e}") from None
    except ValueError as e:
        raise error("--set", f"value of {key.strip()!r} is refused: {e} (alias expansion is bounded)") from None
    except RecursionError:
        raise error("--set", f"value of {key.strip()!r} nests deeper than mosaic reads: flatten it") from None
    shown = key.strip().encode("utf-8", "backslashreplace").decode("utf-8")
    field = shown if not_unicode_path(key) is not None else not_unicode_path(value, shown)
    if field is not None:
        raise error("--set", _not_unicode_message(f"--set {shown}" if field == shown else f"{field} (--set {shown})"))
    return key.strip(), value


def apply_overrides(data: dict, items: list[str] | None, error: ErrorFactory, example: str = "splits.train=500",
                    flat_prefixes: tuple[str, ...] = (), container: str = "mapping or list") -> dict:
    """A deep copy of ``data`` with ``key.path=value`` overrides applied in order.

    Keys under a ``flat_prefixes`` entry (e.g. ``dataset.overrides.``) are stored as one flat
    ``{rest.of.key: value}`` entry of that mapping instead of nested mappings. A
    :class:`ParsedOverride` item is set by its parts, not re-parsed.
    """
    data = copy.deepcopy(data)
    for item in items or []:
        if isinstance(item, ParsedOverride):
            set_parts(data, item.parts, copy.deepcopy(item.value), error, container, shown=item.shown)
            continue
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


def _walk(model: type, loc: tuple) -> tuple[list[str], tuple]:
    """Follow a validation error's location from the pydantic ``model``.

    Returns the field names of the model(s) reached (model fields, dict values and list items are
    followed) and ``loc`` without the parts pydantic inserts that are not field paths: the tag of a
    discriminated union (``objects`` in ``holdout.rule.objects.fraction``), and ``str`` /
    ``function-after[...]`` branch names.
    """
    import typing

    from pydantic import BaseModel

    def unwrap(t) -> list:
        args = typing.get_args(t)
        return [t] if not args else [t] + [x for a in args for x in unwrap(a)]

    def is_model(t) -> bool:
        return isinstance(t, type) and issubclass(t, BaseModel)

    def tag_of(t) -> tuple:
        f = t.model_fields.get("kind") if is_model(t) else None
        return typing.get_args(f.annotation) if f is not None and typing.get_origin(f.annotation) is typing.Literal else ()

    cands, kept = unwrap(model), []
    for part in loc:
        tagged = [t for t in cands if isinstance(part, str) and part in tag_of(t)]
        if tagged and len({t for t in cands if is_model(t)}) > 1:
            cands = tagged  # a union branch chosen by its tag: not a field
            continue
        nxt = []
        for t in cands:
            origin = typing.get_origin(t)
            if is_model(t) and isinstance(part, str) and part in t.model_fields:
                nxt += unwrap(t.model_fields[part].annotation)
            elif origin is dict and isinstance(part, str):
                nxt += unwrap(typing.get_args(t)[-1])
            elif origin in (list, tuple) and isinstance(part, int):
                nxt += [x for a in typing.get_args(t) for x in unwrap(a)]
        if nxt:
            cands = nxt
        kept.append(part)
    return sorted({f for t in cands if is_model(t) for f in t.model_fields}), tuple(kept)


def validation_problems(e, path_of: Callable[[tuple], str] | None = None,
                        expand: Callable[[dict], list[tuple[str, str]] | None] | None = None,
                        model: type | None = None) -> list[tuple[str, str]]:
    """``(field path, message)`` pairs of a pydantic ``ValidationError``, worded for users.

    Unknown fields say "remove it or check its spelling" — with ``model`` (the root pydantic
    class), "did you mean ...?" when a field of that place is a close spelling (difflib) —,
    missing ones "required field is missing", and a bad scalar repeats the value it got.
    ``path_of(loc)`` formats a location (default: dotted); ``expand(err)`` may return the problems
    an error carries itself (e.g. a validator's own list), used instead of the generic wording.
    Duplicates (one per union branch) are dropped.
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
        loc = err["loc"]
        fields: list[str] = []
        if err["type"] == "bool_not_number":  # a model-level check (mosaic.schema.StrictModel): its field path is in ctx
            loc, msg = loc + tuple(err["ctx"]["path"]), err["ctx"]["detail"]
            if model is not None:
                loc = _walk(model, loc[:-1])[1] + loc[-1:]
        elif model is not None:
            fields, kept = _walk(model, loc[:-1])
            loc = kept + loc[-1:]
        if err["type"] == "extra_forbidden":
            name = err["loc"][-1]
            close = closest(name, fields, cutoff=0.6)
            msg = (f"unknown field {name!r}: did you mean {close!r}?" if close
                   else f"unknown field {name!r}: remove it or check its spelling")
        elif err["type"] in ("literal_error", "union_tag_invalid", "enum"):
            ctx = err.get("ctx") or {}
            expected = str(ctx.get("expected_tags") or ctx.get("expected") or "")
            # names are quoted ('a', 'b' or 'c'); numbers are not (2, 4, 8 or 16: the choices were an empty list)
            choices = re.findall(r"'([^']*)'", expected) or [c for c in re.split(r",\s*|\s+or\s+", expected) if c]
            got = ctx.get("tag", err.get("input"))
            what = f"{ctx['discriminator'].strip(chr(39))} " if ctx.get("discriminator") else ""
            close = closest(got, choices, cutoff=0.6) if isinstance(got, str) else None
            msg = f"{what}{got!r} is not one of {', '.join(choices)}" + (f": did you mean {close!r}?" if close else "")
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif "input" in err and not isinstance(err["input"], (dict, list)) and err["type"] != "bool_not_number":
            msg = f"{msg} (got {err['input']!r})"
        problems.append((path_of(loc), msg))
    return list(dict.fromkeys(problems))
