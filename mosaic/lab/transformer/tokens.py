"""The symbolic form of a scene graph: token sequences for scenes, concept queries and object queries.

Follows the token layout of Uselis, Koishigarina & Oh (2026, "How can embedding models bind
concepts?", code ``amortization/scenes.py``): a scene is, per object, ``[SOO, a_1, ..., a_A, EOO]``
followed by ``EOS`` and right-padded with ``PAD``; each attribute has its own block of token ids,
so ``red`` as a colour and ``3`` as a size never share an id. A **concept query** is
``[value, EOS]``; an **object query** is ``[SOO, a_1, ..., a_A, EOO, EOS]``.

The attributes are the object attributes (``color``, ``shape``, ``size``) that some concept of the
spec binds; their values are everything any template can draw (concept domains, fixed values and
``choice`` lists), so distractors tokenize too. Sizes are written as the nearest value of the
size concept's domain. Counts are implicit (the number of object blocks).

Positions and relations are **scene facts**: every concept whose role is ``position`` (an angle
bin of a target around a reference) or ``relation`` (the relation between two fixed objects) adds
one token after the object blocks, in the spec's concept order, from its own block of ids: the
value read back from the scene (the record's label). Which objects a fact is about is fixed by the
spec, so the fact's block says it. A scene is then
``[SOO, a.., EOO]*n + [f_1, ..., f_F] + [EOS]``. Queries never hold facts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch

from mosaic.errors import TokenizationError  # noqa: F401  (re-exported: tests import it here)
from mosaic.spec import allowed_values, repeat_bounds

PAD, SOO, EOO, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<soo>", "<eoo>", "<eos>")
OBJECT_ATTRIBUTES = ("color", "shape", "size")  # token order within an object block


@dataclass
class SceneTokenizer:
    """Maps scene graphs (and queries) to token ids.

    Attributes:
        attributes: object attributes in token order, e.g. ``["color", "shape"]``.
        values: per attribute, its values in order (value index = position in this list).
        max_objects: most objects a scene can hold (sets the sequence length).
        size_values: for a ``size`` attribute, each value's fraction of the image side.
        facts: scene-fact concepts (position / relation roles) in token order, each with its values
            in order; empty for specs without them.
    """

    attributes: list[str]
    values: dict[str, list]
    max_objects: int
    size_values: dict | None = None
    facts: dict[str, list] = field(default_factory=dict)

    def __post_init__(self):
        self.offsets = {}
        nxt = len(SPECIAL_TOKENS)
        for a in self.attributes:
            self.offsets[a] = nxt
            nxt += len(self.values[a])
        self.fact_offsets = {}
        for c, vals in self.facts.items():
            self.fact_offsets[c] = nxt
            nxt += len(vals)
        self._fact_index = {c: {v: i for i, v in enumerate(vals)} for c, vals in self.facts.items()}
        self.vocab_size = nxt
        self.radix = [len(self.values[a]) for a in self.attributes]
        self._index = {a: {v: i for i, v in enumerate(self.values[a])} for a in self.attributes}

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec) -> "SceneTokenizer":
        """The tokenizer of a spec: attributes bound to a concept, values any template can draw,
        and one scene fact per position or relation concept (its domain as values).

        Raises:
            TokenizationError: no object attribute is bound to a concept, or a numeric ``range``
                colour/shape (cannot be enumerated).
        """

        roles = spec.roles
        attrs = [a for a in OBJECT_ATTRIBUTES if a in roles.values()]
        if not attrs:
            raise TokenizationError(
                f"spec {spec.name!r} binds no object colour, shape or size to a concept (roles: {roles}); "
                "the token form has nothing to say: use input: image"
            )
        values: dict[str, list] = {}
        size_values = None
        for a in attrs:
            if a == "size":
                vals: list = []
                for c, r in roles.items():
                    if r == "size":
                        vals += [v for v in spec.domain(c) if v not in vals]
                values[a] = vals
                size_values = {v: spec.size_fraction(v) for v in vals}
                continue
            vals = []
            for t in spec.templates:
                av = allowed_values(spec, getattr(t, a))
                if isinstance(av, tuple):
                    raise TokenizationError(f"template {t.name!r}: {a} is a numeric range; the token form needs listed values")
                vals += [v for v in av if v not in vals]
            values[a] = vals
        max_objects = sum(repeat_bounds(spec, t)[1] for t in spec.templates)
        facts = {c: list(spec.domain(c)) for c, r in roles.items() if r in ("position", "relation")}
        return cls(attrs, values, max(1, max_objects), size_values, facts)

    # -- sizes ----------------------------------------------------------------------------------
    @property
    def block(self) -> int:
        """Tokens per object: ``SOO + attributes + EOO``."""
        return len(self.attributes) + 2

    @property
    def max_len(self) -> int:
        """Scene sequence length: ``block * max_objects + len(facts) + 1`` (EOS)."""
        return self.block * self.max_objects + len(self.facts) + 1

    @property
    def query_len(self) -> int:
        """Query sequence length: ``block + 1``."""
        return self.block + 1

    @property
    def n_object_types(self) -> int:
        return int(np.prod(self.radix))

    # -- objects --------------------------------------------------------------------------------
    def value_index(self, attribute: str, value) -> int:
        """Index of ``value`` in ``attribute``'s values. Raises TokenizationError if unknown."""
        try:
            return self._index[attribute][value]
        except KeyError:
            raise TokenizationError(f"{attribute} {value!r} is not in the token vocabulary {self.values[attribute]}") from None

    def object_tuple(self, obj: dict) -> tuple[int, ...]:
        """Value indices ``(a_1, ..., a_A)`` of one scene-graph object (a record's ``scene.objects[k]``)."""
        out = []
        for a in self.attributes:
            if a == "size":
                sv = self.size_values
                v = min(sv, key=lambda k: abs(sv[k] - float(obj["size"])))
            else:
                v = obj[a]
            out.append(self.value_index(a, v))
        return tuple(out)

    def objects_of(self, record: dict) -> list[tuple[int, ...]]:
        """Object tuples of a metadata record, in scene order.

        Raises:
            TokenizationError: the scene holds more than ``max_objects`` objects.
        """
        objs = [self.object_tuple(o) for o in record["scene"]["objects"]]
        if len(objs) > self.max_objects:
            raise TokenizationError(f"record {record.get('split')}/{record.get('index')} holds {len(objs)} objects, more than max_objects {self.max_objects}")
        return objs

    def facts_of(self, record: dict) -> list[int]:
        """Value index of each scene fact of a metadata record (its label ``record["concepts"][c]``),
        ``-1`` where the record has no value for it.

        Raises:
            TokenizationError: a label outside the fact's values.
        """
        out = []
        for c in self.facts:
            v = record.get("concepts", {}).get(c)
            if v is None:
                out.append(-1)
                continue
            try:
                out.append(self._fact_index[c][v])
            except KeyError:
                raise TokenizationError(f"{c} {v!r} is not in the token vocabulary {self.facts[c]}") from None
        return out

    def type_id(self, obj: tuple[int, ...]) -> int:
        """Mixed-radix id of an object type (first attribute most significant)."""
        return int(np.ravel_multi_index(tuple(obj), self.radix))

    def type_of(self, type_id: int) -> tuple[int, ...]:
        """Object tuple of an object-type id."""
        return tuple(int(i) for i in np.unravel_index(int(type_id), self.radix))

    def all_object_types(self) -> np.ndarray:
        """int64 ``[n_object_types, A]``: every object type, in id order."""
        return np.array(list(itertools.product(*[range(r) for r in self.radix])), dtype=np.int64).reshape(-1, len(self.attributes))

    def describe(self, obj: tuple[int, ...]) -> str:
        """``"red circle"`` for an object tuple."""
        return " ".join(str(self.values[a][i]) for a, i in zip(self.attributes, obj))

    # -- sequences ------------------------------------------------------------------------------
    def encode_scene(self, objects: list[tuple[int, ...]], facts: list[int] | None = None) -> list[int]:
        """Token ids ``[SOO, a.., EOO]*n + [f_1, .., f_F] + [EOS]`` padded to ``max_len``.

        ``facts``: one value index per scene fact (:meth:`facts_of`); ``-1`` (or None for all)
        leaves that fact's token out.
        """
        seq: list[int] = []
        for o in objects:
            seq += [SOO] + [self.offsets[a] + int(i) for a, i in zip(self.attributes, o)] + [EOO]
        for c, i in zip(self.facts, facts if facts is not None else []):
            if int(i) >= 0:
                seq.append(self.fact_offsets[c] + int(i))
        seq.append(EOS)
        return seq + [PAD] * (self.max_len - len(seq))

    def encode_scenes(self, scenes: list[list[tuple[int, ...]]], facts: list[list[int]] | None = None) -> torch.Tensor:
        """int64 ``[B, max_len]`` token ids of several scenes (``facts``: per scene, as in :meth:`encode_scene`)."""
        facts = facts if facts is not None else [None] * len(scenes)
        return torch.tensor([self.encode_scene(s, f) for s, f in zip(scenes, facts)], dtype=torch.long).reshape(len(scenes), self.max_len)

    def concept_queries(self) -> tuple[torch.Tensor, list[tuple[str, int]]]:
        """Every concept query ``[value, EOS]`` (padded to ``query_len``): int64 ``[V, query_len]``
        and the ``(attribute, value index)`` of each row, attributes in order."""
        rows, keys = [], []
        for a in self.attributes:
            for i in range(len(self.values[a])):
                rows.append([self.offsets[a] + i, EOS] + [PAD] * (self.query_len - 2))
                keys.append((a, i))
        return torch.tensor(rows, dtype=torch.long), keys

    def object_queries(self, objects: np.ndarray | torch.Tensor) -> torch.Tensor:
        """Object queries ``[SOO, a.., EOO, EOS]`` of int ``[Q, A]`` object tuples: int64 ``[Q, query_len]``."""
        objects = torch.as_tensor(objects, dtype=torch.long).reshape(-1, len(self.attributes))
        offs = torch.tensor([self.offsets[a] for a in self.attributes], dtype=torch.long)
        q = objects.shape[0]
        return torch.cat([
            torch.full((q, 1), SOO, dtype=torch.long), objects + offs,
            torch.full((q, 1), EOO, dtype=torch.long), torch.full((q, 1), EOS, dtype=torch.long),
        ], dim=1)

    def concept_token_ids(self) -> torch.Tensor:
        """int64 ``[V]`` the token id of every concept value, in :meth:`concept_queries` order."""
        return torch.tensor([self.offsets[a] + i for a in self.attributes for i in range(len(self.values[a]))], dtype=torch.long)


def object_table(tokenizer: SceneTokenizer, records: list[dict]) -> torch.Tensor:
    """int64 ``[N, max_objects, A]`` object tuples of records, ``-1`` where a scene has fewer objects."""
    out = torch.full((len(records), tokenizer.max_objects, len(tokenizer.attributes)), -1, dtype=torch.long)
    for n, r in enumerate(records):
        objs = tokenizer.objects_of(r)
        if objs:
            out[n, :len(objs)] = torch.tensor(objs, dtype=torch.long)
    return out


def fact_table(tokenizer: SceneTokenizer, records: list[dict]) -> torch.Tensor:
    """int64 ``[N, F]`` scene-fact value indices of records (``-1`` where a record has none)."""
    return torch.tensor([tokenizer.facts_of(r) for r in records], dtype=torch.long).reshape(len(records), len(tokenizer.facts))


def tokens_from_table(tokenizer: SceneTokenizer, table: torch.Tensor, facts: torch.Tensor | None = None) -> torch.Tensor:
    """int64 ``[N, max_len]`` scene tokens from an object table ``[N, max_objects, A]`` (``-1`` = no
    object) and, for a tokenizer with scene facts, a fact table ``[N, F]`` (:func:`fact_table`)."""
    scenes = [[tuple(int(v) for v in o) for o in row if int(o[0]) >= 0] for row in table]
    return tokenizer.encode_scenes(scenes, facts.tolist() if facts is not None else None)
