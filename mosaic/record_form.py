"""The form of a dataset's metadata record: its keys and JSON types, as mosaic writes them.

A record is what every reader trains and scores from, and what HF's JSON reader and the Parquet
writer turn into typed columns: a record of another form (a ``caption`` that is a number, a
``scene`` that is a list, a key removed or added, a concept the spec lacks, a null concept value)
made ``mosaic export`` and HF loading fail with a pyarrow traceback, or gave HF ``labels: None``
where ``MosaicDataset`` computed the targets. :func:`record_form_check` checks a record against the
spec's feature tree (:func:`mosaic.hf.feature_tree`, the same columns the card and the Parquet
schema declare): exactly the top-level keys mosaic writes (``mask_file_name`` aside: whether it
belongs is the dataset's masks, checked with the names), exactly the spec's concepts in
``concepts`` and ``labels``, and every value of its feature's JSON type at every depth (nested
scene-graph mappings may omit no key either and add none; a value is null only where the feature
tree marks it nullable: a solid's ``material`` when its template sets none). A concept value is never null: mosaic
draws every concept's value for every sample (:func:`mosaic.sampling.sample_values`), and a label is
its value's index (0 to domain size - 1). ``combination`` is null only in a spec without a holdout.
Cost: a few microseconds a record (one walk of its values).
"""

from __future__ import annotations

import math
from typing import Callable

from mosaic.hf import feature_tree
from mosaic.spec import Spec

_TYPES = {"string": (str,), "int64": (int,), "bool": (bool,), "float64": (int, float)}


def _node_problem(v, node: tuple, where: str) -> str | None:
    kind = node[0]
    if kind == "value":
        ok = _TYPES[node[1]]
        if v is None and node[2:] == ("nullable",):
            return None
        if v is None or not isinstance(v, ok) or (isinstance(v, bool) and node[1] != "bool"):
            return f"{where} is {str(v)[:40]!r} ({type(v).__name__}), not a JSON {node[1]}"
        if isinstance(v, float) and not math.isfinite(v):
            return f"{where} is {v!r}, not a finite number"
        return None
    if kind == "class_label":
        if type(v) is not int or not 0 <= v < len(node[1]):
            return f"{where} is {str(v)[:40]!r}, not a label index 0-{len(node[1]) - 1}"
        return None
    if kind == "struct":
        if not isinstance(v, dict):
            return f"{where} is a {type(v).__name__}, not a mapping"
        if set(v) != set(node[1]):
            extra, missing = sorted(set(v) - set(node[1])), sorted(set(node[1]) - set(v))
            return (f"{where} has " + "; ".join(p for p in (f"key(s) {', '.join(map(str, extra))[:80]} mosaic never writes" if extra else "",
                                                       f"no {', '.join(missing)[:80]}" if missing else "") if p))
        for k, sub in node[1].items():
            if (why := _node_problem(v[k], sub, f"{where}.{k}")) is not None:
                return why
        return None
    # a list
    if not isinstance(v, list):
        return f"{where} is a {type(v).__name__}, not a list"
    for i, x in enumerate(v):
        if (why := _node_problem(x, node[1], f"{where}[{i}]")) is not None:
            return why
    return None


def _compile(node: tuple) -> Callable[[object], bool]:
    """A predicate equal to ``_node_problem(v, node, ...) is None``, built once per feature tree: the
    per-record walk then runs no dispatch on node kinds and formats no message (a record that fails
    it is walked again by :func:`_node_problem` for the message). About 4x faster on a scene graph."""
    kind = node[0]
    if kind == "value":
        dtype = node[1]
        if node[2:] == ("nullable",):
            inner = _compile(node[:2])
            return lambda v: v is None or inner(v)
        if dtype == "string":
            return lambda v: type(v) is str
        if dtype == "int64":
            return lambda v: type(v) is int
        if dtype == "bool":
            return lambda v: type(v) is bool
        return lambda v: (type(v) is int or (type(v) is float and math.isfinite(v)))  # float64: a JSON number
    if kind == "class_label":
        n = len(node[1])
        return lambda v: type(v) is int and 0 <= v < n
    if kind == "struct":
        fields = [(k, _compile(sub)) for k, sub in node[1].items()]
        keys = set(node[1])
        return lambda v: type(v) is dict and v.keys() == keys and all(ok(v[k]) for k, ok in fields)
    item = _compile(node[1])
    return lambda v: type(v) is list and all(item(x) for x in v)


def record_form_check(spec: Spec) -> Callable[[dict], str | None]:
    """``check(rec)``: why a record is not of the form mosaic writes for ``spec`` (the module
    docstring), or None. Built once per spec; ``check`` is cheap."""
    tree = feature_tree(spec, masks=True, image_column=False)
    mask_key = "mask_file_name"
    fields = {k: v for k, v in tree.items() if k != mask_key}
    keys = set(fields)
    nullable_combination = spec.holdout is None
    fast = [(k, _compile(node)) for k, node in fields.items()]

    def check(rec: dict) -> str | None:
        if len(rec) - (mask_key in rec) == len(keys) and all(
                k in rec and (ok(rec[k]) or (k == "combination" and rec[k] is None and nullable_combination)) for k, ok in fast):
            return None  # the common case: no message to build
        got = set(rec) - {mask_key}
        if got != keys:
            extra, missing = sorted(got - keys), sorted(keys - got)
            return "; ".join(p for p in (f"it holds key(s) {', '.join(map(str, extra))[:80]} mosaic never writes" if extra else "",
                                         f"it has no {', '.join(missing)}" if missing else "") if p)
        for k, node in fields.items():
            v = rec[k]
            if k == "combination" and v is None and nullable_combination:
                continue
            if (why := _node_problem(v, node, k)) is not None:
                return why
        return None

    return check


__all__ = ["record_form_check"]
