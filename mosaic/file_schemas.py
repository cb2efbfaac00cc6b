"""JSON Schemas of mosaic's YAML file kinds (spec, training config, sweep), generated from the
pydantic models that validate them, for editors (``yaml-language-server``) and ``mosaic schema``.

The schema is what an editor can check as a user types: field names, types, enums, bounds and
descriptions. Cross-checks that need the whole file (a concept bound twice, a model too large for
the image size) stay in the models' validators and are reported by ``mosaic validate`` /
``mosaic train --dry-run``; a file the schema accepts can still be refused there, never the
reverse for a shipped file (``tests/test_docs_schema.py`` validates every shipped YAML).

Two spec models accept a shorthand that their ``mode="before"`` validators expand, which pydantic
cannot see: a ``distribution`` may be a kind name (``distribution: uniform``), an object
attribute a plain value (``color: red``); the generator adds them to the schema as ``anyOf``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic.json_schema import GenerateJsonSchema
from mosaic.spec import Distribution, Rule, Spec
from mosaic.sweep import SweepSpec

#: the file kinds ``mosaic schema`` writes, in the order its help lists them
KINDS = ("spec", "config", "sweep")

#: JSON Schema dialect of the generated schemas (pydantic's)
DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: where the shipped schemas live, relative to the repository root (``mosaic schema --all``)
SHIPPED_DIR = "docs/schemas"


def models(kind: str) -> list[type]:
    """The pydantic models that validate a file of ``kind`` (a training config is either family's).

    Raises ``KeyError`` naming the kinds for an unknown ``kind``."""
    if kind == "spec":
        return [Spec]
    if kind == "config":
        from mosaic.lab.diffusion import DiffusionConfig
        from mosaic.lab.transformer import TransformerConfig

        return [DiffusionConfig, TransformerConfig]
    if kind == "sweep":
        return [SweepSpec]
    raise KeyError(f"unknown file kind {kind!r}: one of {', '.join(KINDS)}")


def _shorthands() -> dict[type, dict]:
    """Model -> the JSON Schema of the non-mapping form its before-validator expands."""

    kinds = Distribution.model_fields["kind"].annotation.__args__
    return {
        Distribution: {"type": "string", "enum": list(kinds), "description": "shorthand for {kind: <name>}"},
        Rule: {"type": ["string", "integer", "number"], "description": "shorthand for {value: <value>}: a fixed value"},
    }


class _Generator(GenerateJsonSchema):
    """pydantic's generator plus the shorthand forms (``anyOf`` the mapping and the shorthand)."""

    shorthands: dict[type, dict] = {}

    def model_schema(self, schema):
        out = super().model_schema(schema)
        extra = self.shorthands.get(schema.get("cls"))
        if extra is None:
            return out
        return {"anyOf": [out, dict(extra)]}


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12, validation mode) of a ``kind`` file: a dict ready for
    ``json.dumps``. A training config is ``anyOf`` the diffusion and transformer configs.

    Raises ``KeyError`` for an unknown kind (see :func:`models`)."""
    from pydantic.json_schema import models_json_schema

    ms = models(kind)
    _Generator.shorthands = _shorthands()
    if len(ms) == 1:
        schema = ms[0].model_json_schema(schema_generator=_Generator)
    else:
        refs, defs = models_json_schema([(m, "validation") for m in ms], schema_generator=_Generator)
        schema = {"anyOf": [refs[(m, "validation")] for m in ms], **defs}
    title = {"spec": "mosaic dataset spec", "config": "mosaic training config", "sweep": "mosaic sweep"}[kind]
    return {"$schema": DIALECT, "title": title, **{k: v for k, v in schema.items() if k != "title"}}


def dumps(kind: str) -> str:
    """:func:`json_schema` as the text ``mosaic schema`` prints and the shipped files hold:
    indented, keys in the models' order, a final newline."""
    return json.dumps(json_schema(kind), indent=2, ensure_ascii=False) + "\n"
