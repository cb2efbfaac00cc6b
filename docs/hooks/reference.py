"""mkdocs hook: the reference pages are generated from the code at build time, never copied.

A page asks for a generated block with a marker line of its own:

- ``<!-- mosaic:fields mosaic.spec:Spec -->`` — the field table of a pydantic model (every field,
  nested sections as dotted paths ``image.size``, list items as ``objects.<i>.shape``, mapping
  values as ``concepts.<name>.values``, the variants of a discriminated union by their tag), with
  type, default, bounds and description, from :func:`fields_markdown`;
- ``<!-- mosaic:cli -->`` — every command of ``mosaic`` with its usage, arguments and options,
  walked from the typer/click command tree by :func:`cli_markdown`.

A marker naming a model that does not import is an error, so ``mkdocs build --strict`` fails
instead of publishing a stale page. ``tests/test_docs.py`` calls these functions directly.
"""

from __future__ import annotations

import enum
import importlib
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

MARK = re.compile(r"^<!-- mosaic:(?P<what>[a-z]+)(?: (?P<arg>[^ ]+))? -->$", re.M)


# ----------------------------------------------------------------------------------------------
# pydantic models -> field tables
# ----------------------------------------------------------------------------------------------


def _strip_annotated(tp):
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _is_model(tp) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _union_args(tp) -> tuple | None:
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(tp)
    return None


def type_name(tp) -> str:
    """A short, readable form of a type annotation: ``int``, ``float | None``, ``list[str]``,
    ``"auto" | "cpu"``, ``path``."""
    tp = _strip_annotated(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if isinstance(tp, typing.ForwardRef):
        return tp.__forward_arg__
    if isinstance(tp, str):
        return tp
    args = _union_args(tp)
    if args is not None:
        return " or ".join(type_name(a) for a in args)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in typing.get_args(tp))
    if origin in (list, tuple, dict, set):
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in typing.get_args(tp))
        return f"{origin.__name__}[{inner}]"
    if isinstance(tp, type):
        if issubclass(tp, Path):
            return "path"
        if issubclass(tp, enum.Enum):
            return " or ".join(json.dumps(m.value) for m in tp)
        if _is_model(tp):
            return "mapping"
        return tp.__name__
    return str(tp).replace("typing.", "")


_BOUND_SIGNS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def bounds(field) -> str:
    """The numeric and length bounds pydantic enforces on a field: ``≥ 1, ≤ 1024``,
    ``length ≥ 1``."""
    out = []
    for m in field.metadata:
        for attr, sign in _BOUND_SIGNS:
            v = getattr(m, attr, None)
            if v is not None:
                out.append(f"{sign} {v:,}" if isinstance(v, int) and not isinstance(v, bool) else f"{sign} {v}")
        if getattr(m, "min_length", None) is not None:
            out.append(f"length ≥ {m.min_length}")
        if getattr(m, "max_length", None) is not None:
            out.append(f"length ≤ {m.max_length}")
    return ", ".join(out)


def _fmt_value(v) -> str:
    if isinstance(v, BaseModel):
        return "(section)"
    if isinstance(v, Path):
        v = str(v)
    if isinstance(v, enum.Enum):
        v = v.value
    if isinstance(v, tuple):
        v = list(v)
    try:
        text = json.dumps(v, ensure_ascii=False)
    except TypeError:
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def default_text(field) -> str:
    """``required``, or the default as JSON (``(section)`` for a nested model's defaults)."""
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        try:
            return _fmt_value(field.default_factory())
        except TypeError:  # a factory that takes the validated data
            return "(computed)"
    if field.default is PydanticUndefined:
        return "required"
    return _fmt_value(field.default)


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    para = re.split(r"\n\s*\n", doc.strip())[0]
    return " ".join(para.split())


def _cell(text: str) -> str:
    """Plain text for a Markdown table cell: reST roles and double backticks as code, ``<``, ``>``
    and ``&`` outside code escaped (``<root>/<name>`` is not an HTML tag), ``|`` escaped."""
    text = re.sub(r":(?:class|func|mod|data|attr|meth):`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`").replace("\n", " ")
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _code(text: str) -> str:
    """A code span for a table cell (no ``|`` inside: Python-Markdown would print its escape)."""
    return "`" + text.replace("|", "¦") + "`"


def field_rows(model: type[BaseModel], prefix: str = "", _stack: tuple = (), _unions: dict | None = None) -> list[dict[str, str]]:
    """One row per field of ``model`` and, recursively, of its nested models: ``path``, ``type``,
    ``default``, ``bounds``, ``description``. Nested models under a list are ``<i>``, under a
    mapping ``<name>``; the variants of a union of models are listed each with its tag
    (``when kind: diagonal``). A model met again inside itself is named, not expanded."""
    rows: list[dict[str, str]] = []
    _unions = {} if _unions is None else _unions  # a union of models already listed -> its path
    for name, f in model.model_fields.items():
        path = prefix + name
        ann = _strip_annotated(f.annotation)
        args = _union_args(ann)
        non_null = [a for a in args if a is not type(None)] if args else [ann]
        desc = f.description or ""
        # containers of models: list[M], dict[str, M]
        inner_prefix = None
        inner = non_null[0] if len(non_null) == 1 else None
        container = ""
        if inner is None and non_null and all(_models_of(a) for a in non_null):  # a union of models
            inner_prefix, inner = path + ".", ann
        elif inner is not None:
            origin = typing.get_origin(_strip_annotated(inner))
            a = typing.get_args(_strip_annotated(inner))
            if origin is list and a and _models_of(a[0]):
                inner_prefix, inner, container = path + ".<i>.", a[0], "list of "
            elif origin is dict and len(a) == 2 and _models_of(a[1]):
                inner_prefix, inner, container = path + ".<name>.", a[1], "mapping of names to "
            elif _models_of(inner):
                inner_prefix = path + "."
        subs = _models_of(inner) if inner_prefix is not None else []
        if len(subs) == 1 and not desc:
            desc = _first_paragraph(subs[0].__doc__)
        type_text = type_name(f.annotation)
        if len(subs) > 1:
            tags = [_tag(m) for m in subs]
            if all(tags) and len({t.split(":")[0] for t in tags}) == 1:
                key = tags[0].split(":")[0]
                type_text = container + f"mappings by {key}: " + ", ".join(t.split(": ", 1)[1] for t in tags)
        if subs:
            earlier = _unions.get(frozenset(subs))
            if earlier is not None:  # a model (or union) already listed: named, not expanded again
                desc = (desc + "; " if desc else "") + ("each entry " if container else "") + f"fields as `{earlier}`"
                rows.append({"path": path, "type": type_text, "default": default_text(f), "bounds": bounds(f), "description": desc})
                continue
            _unions[frozenset(subs)] = path + (".<i>" if container == "list of " else ".<name>" if container else "")
        rows.append({"path": path, "type": type_text, "default": default_text(f), "bounds": bounds(f),
                     "description": desc})
        for sub in subs:
            if sub in _stack or sub is model:
                rows.append({"path": inner_prefix + "…", "type": sub.__name__, "default": "", "bounds": "",
                             "description": f"a nested `{sub.__name__}`, as above"})
                continue
            sub_rows = field_rows(sub, inner_prefix, _stack + (model,), _unions)
            if len(subs) > 1:
                tag = _tag(sub)
                for r in sub_rows:
                    r["description"] = (f"(when {tag}) " if tag else f"({sub.__name__}) ") + r["description"]
            rows.extend(sub_rows)
    return rows


def _models_of(tp) -> list[type[BaseModel]]:
    tp = _strip_annotated(tp)
    if _is_model(tp):
        return [tp]
    args = _union_args(tp)
    if args:
        return [m for a in args for m in _models_of(a)]
    return []


def _tag(model: type[BaseModel]) -> str:
    for name, f in model.model_fields.items():
        ann = _strip_annotated(f.annotation)
        if typing.get_origin(ann) is typing.Literal and len(typing.get_args(ann)) == 1:
            return f"{name}: {typing.get_args(ann)[0]}"
    return ""


def fields_markdown(model: type[BaseModel]) -> str:
    """The Markdown field table of ``model`` (see :func:`field_rows`), headed by the model's
    docstring's first paragraph."""
    lines = []
    intro = _first_paragraph(model.__doc__)
    if intro:
        lines += [_cell(intro), ""]
    lines += ["| field | type | default | bounds | description |", "|---|---|---|---|---|"]
    for r in field_rows(model):
        lines.append("| " + " | ".join([_code(r["path"]), _cell(r["type"]), _code(r["default"]) if r["default"] else "",
                                        _cell(r["bounds"]), _cell(r["description"])]) + " |")
    return "\n".join(lines) + "\n"


def import_object(ref: str):
    """``package.module:Name`` -> the object. Raises ``ValueError`` naming the reference."""
    mod, _, name = ref.partition(":")
    if not name:
        raise ValueError(f"{ref!r}: write module:Name, e.g. mosaic.spec:Spec")
    try:
        return getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{ref!r} does not import: {e}") from e


# ----------------------------------------------------------------------------------------------
# the click/typer command tree -> the CLI reference
# ----------------------------------------------------------------------------------------------


def _is_group(cmd) -> bool:
    # duck-typed: typer vendors its own click (typer._click), whose classes are not click's
    return hasattr(cmd, "list_commands") and hasattr(cmd, "get_command")


def _ctx(cmd, path: list[str]):
    return cmd.context_class(cmd, info_name=" ".join(path))


def _walk(cmd, path: list[str]):
    yield path, cmd
    if _is_group(cmd):
        ctx = _ctx(cmd, path)
        for name in cmd.list_commands(ctx):  # the order `mosaic --help` lists them
            yield from _walk(cmd.get_command(ctx, name), path + [name])


def _plain(text: str | None) -> str:
    """Help text without rich markup and click's escape markers."""
    text = (text or "").replace("\b\n", "")
    text = re.sub(r"\[/?(?:bold|italic|dim|cyan|green|red|yellow|magenta|blue|b|i|u|code)\]", "", text)
    return text.strip()


def _usage(cmd, path: list[str]) -> str:
    return " ".join(path + cmd.collect_usage_pieces(_ctx(cmd, path)))


def _param_type(p, ctx) -> str:
    """The value type of a parameter as ``--help`` shows it (``path``, ``int``, the choices of an
    enum), with its range (``1 ≤ x ≤ 400``)."""
    ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return " or ".join(str(m.value) for m in ann)
    choices = getattr(getattr(p, "type", None), "choices", None)
    if choices:
        return " or ".join(str(getattr(c, "value", c)) for c in choices)
    if hasattr(p, "display_type"):
        text = str(p.display_type(ctx)).strip("<>")
    else:  # plain click
        text = p.type.name
    text = text.replace(" range", "")
    lo, hi = getattr(p, "min", None), getattr(p, "max", None)
    if lo is not None or hi is not None:
        text += " (" + " ≤ ".join(str(x) for x in (lo, "x", hi) if x is not None) + ")"
    return text


def _param_rows(cmd, path: list[str]) -> list[str]:
    ctx = _ctx(cmd, path)
    rows = []
    for p in cmd.params:
        if getattr(p, "hidden", False) or "--help" in p.opts:
            continue
        is_arg = p.param_type_name == "argument"
        is_flag = bool(getattr(p, "is_flag", False))
        if is_arg:
            names, kind = (p.metavar or p.name or "").upper(), "argument"
        else:
            names, kind = ", ".join(p.opts + p.secondary_opts), "flag" if is_flag else "option"
        type_text = "" if is_flag else _param_type(p, ctx)
        default = p.default if not callable(p.default) else None
        if is_flag:
            default = "on" if default else None
        shown = "" if default in (None, (), []) else _code(_fmt_value(default))
        req = "required" if getattr(p, "required", False) else ""
        helptext = _plain(getattr(p, "help", "") or "")
        cells = [_code(names), kind, _cell(type_text), " ".join(x for x in (req, shown) if x), _cell(helptext)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def cli_markdown(root=None, prog: str = "mosaic", level: int = 2) -> str:
    """The Markdown reference of every command under ``root`` (default: ``mosaic``'s app): per
    command its usage line, help text and a table of its arguments and options (type, default,
    help), in the order ``--help`` lists them."""
    root = _root(root)
    out = []
    for path, cmd in _walk(root, [prog]):
        if len(path) == 1:
            continue
        is_group = _is_group(cmd)
        out.append(f"{'#' * min(6, level + len(path) - 2)} `{' '.join(path)}`\n")
        out.append(_cell(_plain(cmd.help)).replace("\\|", "|") + "\n" if cmd.help else "")
        if is_group:
            subs = ", ".join(f"`{' '.join(path + [n])}`" for n in cmd.list_commands(_ctx(cmd, path)))
            out.append(f"Subcommands: {subs}.\n")
            continue
        out.append(f"```text\n{_usage(cmd, path)}\n```\n")
        rows = _param_rows(cmd, path)
        if rows:
            out.append("| name | kind | type | default | help |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def command_paths(root=None, prog: str = "mosaic") -> list[str]:
    """Every leaf command as typed: ``mosaic generate``, ``mosaic train diffusion``, ..."""
    return [" ".join(p) for p, c in _walk(_root(root), [prog]) if len(p) > 1 and not _is_group(c)]


def _root(root):
    """The click command of ``root`` (a Typer app, or a click command as is; default: mosaic's app)."""
    import typer

    if root is None:
        from mosaic.cli import app

        root = app
    return typer.main.get_command(root) if isinstance(root, typer.Typer) else root


# ----------------------------------------------------------------------------------------------
# the hook
# ----------------------------------------------------------------------------------------------


def render_marker(what: str, arg: str | None) -> str:
    """The Markdown a marker stands for. Raises ``ValueError`` for an unknown marker."""
    if what == "fields":
        obj = import_object(arg or "")
        if not _is_model(obj):
            raise ValueError(f"{arg!r} is not a pydantic model")
        return fields_markdown(obj)
    if what == "cli":
        return cli_markdown()
    raise ValueError(f"unknown marker mosaic:{what} (known: fields MODULE:MODEL, cli)")


def expand(markdown: str) -> str:
    """``markdown`` with every marker line replaced by its generated block."""
    return MARK.sub(lambda m: render_marker(m.group("what"), m.group("arg")), markdown)


_ROLE_HTML = re.compile(r":(?:class|func|mod|data|attr|meth|exc|obj):(<code>)~?")


def on_page_content(html: str, page, config, files) -> str:  # mkdocs hook
    """Docstrings use reST roles (``:func:`load_spec```); mkdocstrings renders them as
    ``:func:<code>load_spec</code>``: keep the code, drop the role."""
    return _ROLE_HTML.sub(r"\1", html)


def on_page_markdown(markdown: str, page, config, files) -> str:  # mkdocs hook
    try:
        return expand(markdown)
    except ValueError as e:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_uri}: {e}") from e
