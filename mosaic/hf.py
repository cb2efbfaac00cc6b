"""HuggingFace ``datasets`` view of a mosaic dataset: the record schema, its features, the dataset card.

A generated folder is a valid HF dataset: ``OUT/README.md`` is a dataset card whose YAML
``configs`` maps each split present (``train``, ``validation``, ``test_id``, ``test_ood`` or
``test``) to its files, so ``datasets.load_dataset(OUT)`` returns exactly those splits (the
``imagefolder`` default would merge ``test_id`` and ``test_ood`` into one ``test`` split), and
declares the features (the YAML format of the Hub's dataset cards, ``huggingface/hub-docs``
``datasetcard.md``; the ``features`` key inside a config is passed to the builder, which casts the
data to them, ``datasets.utils.metadata.MetadataConfigs``):

=================  =======================================================================
column             feature
=================  =======================================================================
``image``          ``Image()`` (PNG); ``mask`` too when generated with masks
``index``          ``int64``: the sample's index in its split
``split``          ``string``: mosaic's split name (``val`` for HF's ``validation``)
``concepts``       struct: concept -> value (``string``, ``int64`` or ``float64`` per domain)
``labels``         struct: concept -> ``ClassLabel(names=domain)``, -1 where the scene shows none
``combination``    ``list<string>``: the holdout grid's values (as text), null without a holdout
``held_out``       ``bool``
``caption``        ``string``
``num_objects``    ``int64``
``scene``          struct: the scene graph (objects with shape, colour, rgb, size, centre,
                   rotation, bbox, template; relations)
=================  =======================================================================

This module needs neither ``datasets`` nor torch: the features are written out by hand in the
three forms ``datasets`` reads (YAML list, JSON dict in a Parquet schema's ``huggingface``
metadata, Arrow types), and ``tests/test_hf.py`` checks each against ``datasets`` itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from mosaic.holdout import held_out_cells
from mosaic.io import atomic_write
from mosaic.spec import Spec

#: mosaic split name -> HF split name (HF's canonical names: ``train``, ``validation``, ``test``).
HF_SPLIT = {"train": "train", "val": "validation", "test": "test", "test_id": "test_id", "test_ood": "test_ood"}
#: HF split name (and accepted aliases) -> mosaic split name.
SPLIT_ALIASES = {"train": "train", "val": "val", "validation": "val", "test": "test", "test_id": "test_id", "test_ood": "test_ood"}

CARD = "README.md"


def mosaic_split(name: str) -> str:
    """The mosaic split name of ``name`` (``validation`` and ``val`` are the same split); anything but a
    string comes back as it is, for the caller to name as no split."""
    return SPLIT_ALIASES.get(name, name) if isinstance(name, str) else name


# ----------------------------------------------------------------------------------------------
# records
# ----------------------------------------------------------------------------------------------

def labels_of(spec: Spec, concepts: dict) -> dict[str, int]:
    """Concept -> index of its value in the concept's domain (-1 where the value is None or unknown).

    The inverse is ``spec.domain(concept)[index]``; these are the ``targets`` of
    :class:`mosaic.torch_data.MosaicDataset` and the ``ClassLabel`` ids of the HF features.
    """
    out = {}
    for c, concept in spec.concepts.items():
        v = concepts.get(c)
        try:
            out[c] = concept.domain.index(v) if v is not None else -1
        except ValueError:
            out[c] = -1
    return out


def hf_record(spec: Spec, rec: dict) -> dict:
    """A generator record in the HF-loadable form (mosaic-dataset/2): adds ``labels`` and writes
    ``combination`` as text, so every JSON field has one type (``pyarrow.json`` refuses a list mixing
    names and numbers, e.g. a colour x count combination). Returns a new dict; ``rec`` is unchanged."""
    out = dict(rec)
    out["labels"] = labels_of(spec, rec["concepts"])
    combo = rec.get("combination")
    out["combination"] = [str(v) for v in combo] if combo is not None else None
    return out


# ----------------------------------------------------------------------------------------------
# features: one tree, three serialisations
# ----------------------------------------------------------------------------------------------
# A node is ("value", dtype) | ("class_label", names) | ("image",) | ("list", node) | ("struct", {name: node});
# ("value", dtype, "nullable") is a value that may be null (a column every form stores as nullable anyway)

def _dtype_of_domain(domain: list) -> str:
    if all(isinstance(v, str) for v in domain):
        return "string"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in domain):
        return "int64"
    return "float64"


def _scene_node(solid: bool = False) -> tuple:
    """The scene graph's feature node; ``solid`` (``image.renderer: shaded``) adds the 3-D ground truth
    of :class:`mosaic.scene3d.Scene3D` (material, 3-D position / size / rotation, pixel coordinates,
    visible fraction and pixels per object; the view and CLEVR's directions per scene)."""
    obj = {
        "shape": ("value", "string"), "color": ("value", "string"), "rgb": ("list", ("value", "int64")),
        "size": ("value", "float64"), "center": ("list", ("value", "float64")), "rotation": ("value", "float64"),
        "template": ("value", "string"), "bbox": ("list", ("value", "int64")),
    }
    rel = {"subject": ("value", "int64"), "relation": ("value", "string"), "object": ("value", "int64")}
    scene = {
        "image_size": ("value", "int64"), "background": ("list", ("value", "int64")),
        "objects": ("list", ("struct", obj)), "relations": ("list", ("struct", rel)),
    }
    if solid:
        vec = ("list", ("value", "float64"))
        # material is null for an object whose template sets none (rendered as rubber, named in no caption)
        obj.update({"material": ("value", "string", "nullable"), "position_3d": vec, "size_3d": vec, "rotation_3d": vec,
                    "pixel_coords": vec, "visible_fraction": ("value", "float64"), "visible_pixels": ("value", "int64")})
        light = {"name": ("value", "string"), "position": vec, "intensity": ("value", "float64"), "radius": ("value", "float64")}
        scene["view"] = ("struct", {"preset": ("value", "string"), "camera": vec, "look_at": vec, "fov": ("value", "float64"),
                                    "lights": ("list", ("struct", light))})
        scene["directions"] = ("struct", {k: vec for k in ("behind", "front", "right", "left", "above", "below")})
    return ("struct", scene)


def feature_tree(spec: Spec, masks: bool = False, image_column: bool = True) -> dict[str, tuple]:
    """The columns of a mosaic dataset as feature nodes, in column order.

    ``image_column=False`` gives the imagefolder metadata form (``file_name`` / ``mask_file_name``
    strings instead of images).
    """
    cols: dict[str, tuple] = {}
    if image_column:
        cols["image"] = ("image",)
        if masks:
            cols["mask"] = ("image",)
    else:
        cols["file_name"] = ("value", "string")
        if masks:
            cols["mask_file_name"] = ("value", "string")
    cols.update({
        "index": ("value", "int64"),
        "split": ("value", "string"),
        # concepts by name, the order of the record's JSON keys: a spec read back from a manifest (stored with sorted keys)
        # lists them so, the spec file may not; the card and the shards' schema must not depend on which one built them
        "concepts": ("struct", {c: ("value", _dtype_of_domain(k.domain)) for c, k in sorted(spec.concepts.items())}),
        "labels": ("struct", {c: ("class_label", [str(v) for v in k.domain]) for c, k in sorted(spec.concepts.items())}),
        "combination": ("list", ("value", "string")),
        "held_out": ("value", "bool"),
        "caption": ("value", "string"),
        "num_objects": ("value", "int64"),
        "scene": _scene_node(spec.image.renderer == "shaded"),
    })
    return cols


def _yaml_field(name: str, node: tuple) -> dict:
    kind = node[0]
    if kind == "value":
        return {"name": name, "dtype": node[1]}
    if kind == "class_label":
        return {"name": name, "dtype": {"class_label": {"names": {str(i): n for i, n in enumerate(node[1])}}}}
    if kind == "image":
        return {"name": name, "dtype": "image"}
    if kind == "struct":
        return {"name": name, "struct": [_yaml_field(k, v) for k, v in node[1].items()]}
    sub = node[1]
    if sub[0] == "value":
        return {"name": name, "list": sub[1]}
    if sub[0] == "struct":
        return {"name": name, "list": [_yaml_field(k, v) for k, v in sub[1].items()]}
    raise ValueError(f"unsupported list element {sub!r}")


def features_yaml(tree: dict[str, tuple]) -> list[dict]:
    """The features in a dataset card's YAML form (``datasets.Features._to_yaml_list``)."""
    return [_yaml_field(k, v) for k, v in tree.items()]


def _json_node(node: tuple) -> Any:
    kind = node[0]
    if kind == "value":
        return {"dtype": node[1], "_type": "Value"}
    if kind == "class_label":
        return {"names": list(node[1]), "_type": "ClassLabel"}
    if kind == "image":
        return {"_type": "Image"}
    if kind == "struct":
        return {k: _json_node(v) for k, v in node[1].items()}
    return {"feature": _json_node(node[1]), "_type": "List"}


def features_json(tree: dict[str, tuple]) -> dict:
    """The features as ``datasets.Features.to_dict()`` (stored in a Parquet schema's metadata)."""
    return {k: _json_node(v) for k, v in tree.items()}


def _arrow_type(node: tuple):
    import pyarrow as pa

    kind = node[0]
    if kind == "value":
        return {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}[node[1]]
    if kind == "class_label":
        return pa.int64()
    if kind == "image":
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    if kind == "struct":
        return pa.struct([(k, _arrow_type(v)) for k, v in node[1].items()])
    return pa.list_(_arrow_type(node[1]))


def arrow_schema(tree: dict[str, tuple]):
    """The Arrow schema of the features, with the ``huggingface`` metadata ``datasets`` reads back
    (``{"info": {"features": ...}}``), as ``datasets.Features(...).arrow_schema`` makes it.
    Returns a ``pyarrow.Schema``."""
    import pyarrow as pa

    meta = {b"huggingface": json.dumps({"info": {"features": features_json(tree)}}).encode()}
    return pa.schema([(k, _arrow_type(v)) for k, v in tree.items()], metadata=meta)


# ----------------------------------------------------------------------------------------------
# the dataset card
# ----------------------------------------------------------------------------------------------

def present_splits(manifest: dict) -> dict[str, int]:
    """mosaic split -> count for the splits holding at least one sample, in generation order."""
    return {s: int(v["count"]) for s, v in manifest["splits"].items() if int(v.get("count", 0)) > 0}


def split_paths(manifest: dict, storage: str) -> dict[str, list[str]]:
    """HF split name -> the data_files of each present split of a dataset in ``storage`` form: only
    what mosaic wrote (imagefolder: the split's ``metadata.jsonl`` and ``images/*.png``, with masks
    ``masks/*.png``; Parquet: each shard the manifest lists, by name), so a stray copy under the
    split folder or a stray shard in ``data/`` is never read as data."""
    out = {}
    for s in present_splits(manifest):
        if storage == "imagefolder":
            out[HF_SPLIT.get(s, s)] = [f"{s}/metadata.jsonl", f"{s}/images/*.png"] + ([f"{s}/masks/*.png"] if manifest.get("masks") else [])
        else:
            out[HF_SPLIT.get(s, s)] = [f"data/{x['name']}" for x in manifest.get("shards", {}).get(s, [])] or [f"data/{s}-*.parquet"]
    return out


def identity(manifest: dict) -> str:
    """The dataset's identity as the card states it (the config ``description``, which HF's cache
    key hashes, ``datasets.load.LocalDatasetModuleFactory``): spec fingerprint and the digest of
    every file's digest (``checksums.sha256``'s sha256; Parquet: of the shards' sha256). Two
    datasets that share a folder name, or one regenerated in place with another spec or holdout,
    get other cache entries. The folder's location is not part of it (a dataset is byte-identical
    wherever it is written): see docs/integrity.md for a moved imagefolder dataset."""
    import hashlib

    if manifest.get("checksums"):
        digest = str(manifest["checksums"].get("sha256"))
    else:
        # split by split in name order: the manifest written to disk lists its splits sorted, the one in memory in
        # generation order, and the identity must be the same read from either
        shards = [[s, [x.get("sha256") for x in lst]] for s, lst in sorted(manifest.get("shards", {}).items())]
        digest = hashlib.sha256(json.dumps(shards).encode()).hexdigest()
    return f"mosaic dataset, spec fingerprint {manifest.get('fingerprint')}, data digest {digest}"


def card_yaml(spec: Spec, manifest: dict, storage: str) -> dict:
    """The YAML header of the dataset card (``configs`` with ``data_files``, ``features`` and the
    dataset's :func:`identity` as ``description``; ``dataset_info`` with features and split sizes)."""
    masks = bool(manifest.get("masks"))
    feats = features_yaml(feature_tree(spec, masks))
    data_files = [{"split": k, "path": v} for k, v in split_paths(manifest, storage).items()]
    return {
        "pretty_name": spec.name,
        "tags": ["synthetic", "compositional-generalization", "mosaic"],
        "task_categories": ["image-classification", "text-to-image"],
        "size_categories": [_size_category(sum(present_splits(manifest).values()))],
        "configs": [{"config_name": "default", "data_files": data_files, "features": feats,
                     "description": identity(manifest)}],
        "dataset_info": {"features": feats},
    }


def _size_category(n: int) -> str:
    for lim, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                      (10_000_000, "1M<n<10M")):
        if n < lim:
            return name
    return "n>10M"


def _fmt_cells(cells: list, limit: int = 60) -> str:
    shown = ", ".join("(" + ", ".join(map(str, c)) + ")" for c in cells[:limit])
    return shown + (f", ... ({len(cells) - limit} more)" if len(cells) > limit else "")


def card_text(spec: Spec, manifest: dict, storage: str) -> str:
    """The Markdown body of the card: what the dataset is, how to load it, the spec, the held-out
    cells, the leak-check result and the counts."""
    lines = [f"# {spec.name}", ""]
    if spec.description:
        lines += [spec.description, ""]
    n = present_splits(manifest)
    lines += [
        f"A synthetic dataset generated by [mosaic](https://github.com/) from a YAML spec "
        f"(fingerprint `{manifest.get('fingerprint')}`, seed {spec.seed}, format `{manifest.get('format')}`, "
        f"stored as {storage}). Every image is rendered from a scene graph, so its labels are exact.",
        "",
        "## Loading",
        "",
        "```python",
        "from mosaic.hf_load import load_dataset    # datasets.load_dataset after mosaic's check, cached by location",
        "ds = load_dataset(\"PATH\")                   # splits: " + ", ".join(HF_SPLIT.get(s, s) for s in n),
        "ds[\"train\"].features[\"labels\"]            # one ClassLabel per concept",
        "from mosaic.torch_data import MosaicDataset  # torch: image uint8 [3,H,W], targets int64 [C], held_out",
        "```",
        "",
        "## Splits",
        "",
        "| split (HF) | mosaic split | samples |",
        "|---|---|---|",
    ]
    lines += [f"| {HF_SPLIT.get(s, s)} | {s} | {c} |" for s, c in n.items()]
    empty = [s for s, v in manifest["splits"].items() if int(v.get("count", 0)) == 0]
    if empty:
        lines += ["", f"Empty splits (no files, not listed in `configs`): {', '.join(empty)}."]
    lines += ["", "## Concepts", "", "| concept | role | values |", "|---|---|---|"]
    lines += [f"| {c} | {spec.roles.get(c, '')} | {', '.join(map(str, k.domain))} |" for c, k in spec.concepts.items()]
    lines += ["", "## Held-out combinations", ""]
    lc = manifest.get("leak_check") or {}
    if spec.holdout is None:
        lines += ["This spec holds out no combination: every split draws from the whole concept grid."]
    else:
        held = lc.get("held_out")
        if held is None:
            held = sorted(map(list, held_out_cells(spec)), key=str)
        seen = lc.get("seen")
        lines += [
            f"Combination grid: {' x '.join(spec.holdout.concepts)}"
            + (f", coverage {lc['coverage']:.3f}" if "coverage" in lc else "")
            + (f", {len(seen)} seen cells" if seen is not None else "")
            + f", {len(held)} held-out cells (only in `test_ood`):",
            "",
            _fmt_cells(held) or "(none)",
        ]
    lines += ["", "## Leak check", ""]
    if not lc:
        lines += ["Not run."]
    else:
        lines += [f"**{'passed' if lc.get('passed') else 'FAILED'}**", "", "| check | result |", "|---|---|"]
        # checks by name and splits in the card's order: the manifest read back from disk (a repair) has its keys
        # sorted, and the card must be byte for byte the one generate wrote (attack round 17: the rows moved)
        lines += [f"| {k} | {'passed' if v.get('passed') else 'failed'} |" for k, v in sorted(lc.get("checks", {}).items())]
        counts = lc.get("counts")
        if counts:
            order = list(manifest["splits"])
            lines += ["", "| split | cells present | samples |", "|---|---|---|"]
            lines += [f"| {s} | {len(c)} | {sum(c.values())} |"
                      for s, c in sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))]
    lines += ["", "## Spec", "", "```yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False).rstrip(), "```", ""]
    return "\n".join(lines)


def write_card(out: str | Path, spec: Spec, manifest: dict, storage: str = "imagefolder") -> Path:
    """Write ``OUT/README.md``, the dataset card (YAML header + Markdown body). Atomic. The card
    states the dataset's :func:`identity` (fingerprint, data digest), so HF's cache, keyed on the
    folder's name and the card, never serves another dataset's rows.

    Args:
        out: dataset directory.
        spec: the spec it was generated from.
        manifest: its manifest (``splits`` counts, ``leak_check``, ``fingerprint``, ``masks``).
        storage: ``imagefolder`` (``<split>/metadata.jsonl`` + PNGs) or ``parquet`` (``data/*.parquet``).
    Returns:
        The card's path.
    Raises:
        ValueError: an unknown ``storage``.
    """
    if storage not in ("imagefolder", "parquet"):
        raise ValueError(f"storage must be imagefolder or parquet, got {storage!r}")
    # the splits in the spec's order: the manifest read back from disk lists them sorted (sort_keys), and the card a
    # repair writes from it must be byte for byte the one generate wrote from the manifest in memory
    order = list(spec.split_sizes())
    manifest = {**manifest, "splits": dict(sorted(manifest["splits"].items(), key=lambda kv: order.index(kv[0])
                                                   if kv[0] in order else len(order)))}
    head = yaml.safe_dump(card_yaml(spec, manifest, storage), sort_keys=False, allow_unicode=True)
    text = f"---\n{head}---\n\n{card_text(spec, manifest, storage)}"
    return atomic_write(Path(out) / CARD, text)
