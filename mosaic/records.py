"""What both storage forms of a dataset share: the sample record, the PNG bytes, the manifest and
the output-directory rules.

:mod:`mosaic.dataset` (imagefolder, and the :func:`~mosaic.dataset.generate` entry point) and
:mod:`mosaic.parquet` (sharded Parquet) both build on this module, and so does
:mod:`mosaic.stream` (the same samples, never written).

Format ``mosaic-dataset/2``: a record is ``file_name``, ``index``, ``split``, ``concepts``
(concept -> value), ``labels`` (concept -> index of the value in its domain, -1 for none),
``combination`` (the holdout grid's values as text, or None), ``held_out``, ``caption``,
``num_objects`` and ``scene`` (the scene graph: objects with ``shape``, ``color``, ``rgb``,
``size``, ``center``, ``rotation``, ``bbox``, ``template``; ``relations``). Version 1 had no
``labels``, a typed ``combination`` (which ``pyarrow.json``, and so ``datasets``, cannot read when
it mixes names and numbers) and Pillow-encoded PNGs (same pixels, other bytes).
"""

from __future__ import annotations

import json
import math
import platform
import zlib
from importlib import metadata as importlib_metadata
from pathlib import Path

import numpy as np

from mosaic.errors import DatasetError, LayoutError, MosaicError
from mosaic.folder_kinds import kind_hint
from mosaic.hf import hf_record
from mosaic.holdout import HELD_OUT, SEEN, combination_of, is_held_out
from mosaic.labels import _caption, _read_labels, assign_templates
from mosaic.scene import Scene, json_number
from mosaic.scene3d import Scene3D, scene_from_dict
from mosaic.png import encode_png
from mosaic.record_form import record_form_check
from mosaic.record_objects import not_a_dataset_message, object_rules
from mosaic.recordline import record_line
from mosaic.sampling import sample_scene
from mosaic.spec import Spec, parse_spec, repeat_bounds
from mosaic.vocab import SHAPES
from mosaic.foreign_names import foreign_names
from mosaic.dataset_folder import holds_files, remove_dataset
from mosaic.io import MAX_JSON_BYTES, loads_json, output_dir_problem, read_bounded
from mosaic.manifest_fields import FORMAT  # noqa: F401 - re-exported: the format this mosaic writes

MANIFEST = "manifest.json"


def png_bytes(array: np.ndarray) -> bytes:
    """PNG encoding of a uint8 ``[H, W, 3]`` (RGB) or ``[H, W]`` (L) array (:func:`mosaic.png.encode_png`)."""
    return encode_png(array)


def package_versions() -> dict[str, str]:
    """Versions of the packages that determine a dataset's bytes (zlib: the PNG streams)."""
    out = {"python": platform.python_version()}
    for name in ("mosaic", "numpy", "pillow", "pydantic"):
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            out[name] = "unknown"
    out["zlib"] = zlib.ZLIB_RUNTIME_VERSION
    return out


def no_manifest(root: str | Path) -> DatasetError:
    """The error of a folder without ``manifest.json`` (:func:`manifest_hint` when it is another kind of folder)."""
    return DatasetError(manifest_hint(root) or not_a_dataset_message(root, MANIFEST))


def manifest_hint(root: str | Path) -> str | None:
    """What a folder without ``manifest.json`` is when it is no place for a dataset: a folder inside one (``DS/train``:
    making a dataset there, which the message said, is refused; the fix is the dataset's own folder), or a run or sweep."""
    up = Path(root).absolute().parent
    if (up / MANIFEST).is_file():
        return (f"{root} is not a mosaic dataset but a folder inside one ({up} holds its {MANIFEST}): give the "
                f"dataset's own folder {up}; a split is chosen on its own (`--split`, MosaicDataset(DIR, 'train'))")
    return kind_hint(root, "dataset")


def read_manifest(root: str | Path) -> dict:
    """The manifest of a dataset directory. Raises DatasetError when missing or unreadable."""
    path = Path(root) / MANIFEST
    if path.is_dir():
        raise DatasetError(f"{path} is damaged (a folder stands where the manifest file belongs): restore the file from a copy, "
                           f"or regenerate the dataset with `mosaic generate SPEC --out {root} --overwrite`")
    if not Path(root).exists():
        raise DatasetError(f"{root} does not exist: give the folder of a generated dataset (`mosaic generate SPEC --out {root}` makes one)")
    if not Path(root).is_dir():
        raise DatasetError(f"{root} is a file, not a dataset folder: give the folder `mosaic generate SPEC --out DIR` wrote")
    if not path.is_file() and path.exists():  # a FIFO, device or socket, never opened (a FIFO would block)
        raise DatasetError(f"{path} is damaged (not a regular file: a device, FIFO or socket stands where the manifest belongs): "
                           f"restore the file from a copy, or regenerate the dataset with `mosaic generate SPEC --out {root} --overwrite`")
    if not path.is_file():
        raise no_manifest(root)
    try:
        man = loads_json(read_bounded(path, MAX_JSON_BYTES))
    except (OSError, ValueError) as e:  # larger than a manifest, not UTF-8, not JSON, nested too deep (mosaic.io)
        raise DatasetError(f"{path} is damaged ({type(e).__name__}: {str(e)[:120]}): restore it from a copy, or regenerate the "
                           f"dataset with `mosaic generate SPEC --out {root} --overwrite`") from None
    if not isinstance(man, dict):
        raise DatasetError(f"{path} is damaged (not a mapping): restore it from a copy, or regenerate the dataset with "
                           f"`mosaic generate SPEC --out {root} --overwrite`")
    return man


#: Longest ``export_source`` a manifest may record (a path; anything longer is treated as damage).
MAX_SOURCE_CHARS = 4096


def unfinished_hint(root: str | Path, man: dict) -> str:
    """How to finish a dataset whose manifest is not ``complete``: the export command to rerun when
    an interrupted ``mosaic export`` made it (``export_source`` in the manifest), else the generate
    rerun. Paths are shell-quoted; an ``export_source`` that is not a plain path string (not a str,
    over :data:`MAX_SOURCE_CHARS`, control characters) is named as damage, never printed."""
    import shlex

    src = man.get("export_source")
    if src is None:
        return "generation did not finish; rerun the same `mosaic generate` command to resume"
    if not isinstance(src, str) or not src or len(src) > MAX_SOURCE_CHARS or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in src):
        return (f"an export did not finish, and {MANIFEST} records no readable export_source: delete {root} and rerun "
                "your `mosaic export` command")
    storage = man.get("storage") if man.get("storage") in ("imagefolder", "parquet") else "imagefolder"
    return (f"an export from {src} did not finish; rerun `mosaic export {shlex.quote(src)} --format {storage} "
            f"--out {shlex.quote(str(root))} --overwrite`")


def spec_of(root: str | Path) -> Spec:
    """The spec a dataset was generated from (from its manifest)."""
    return parse_spec(read_manifest(root)["spec"], source=f"{root}/{MANIFEST}")


def sample_record(spec: Spec, split: str, index: int) -> tuple[dict, "object"]:
    """The metadata record (format ``mosaic-dataset/2``, see the module docstring) and the scene
    of one sample (no image).

    The templates are assigned to the objects once per scene and shared by the labels and the
    caption (:func:`mosaic.recordline.record_line` for a flat scene, from its spec's plan); the
    scene graph of a flat scene is built by :func:`scene_graph`.

    Raises:
        LayoutError: the layout search failed, or the labels read back from the scene differ from
            the sampled values (a bug).
    """
    scene, values = sample_scene(spec, split, index)
    fast = record_line(spec, scene, values, split, index, graph=False)
    rec = fast[1] if fast is not None else _record(spec, split, index, scene, values)
    rec["scene"] = scene_graph(scene)
    return rec, scene


def sample_line(spec: Spec, split: str, index: int, mask_file_name: str | None = None) -> tuple[str, dict, "object"]:
    """The JSON line of one sample's record (``json.dumps(record, sort_keys=True)`` of
    :func:`sample_record`'s record, plus ``mask_file_name`` when given, byte for byte), the record
    without its ``scene`` graph, and the scene. A flat scene's line is joined from text
    (:func:`mosaic.recordline.record_line`), never built as dicts.

    Raises:
        LayoutError: as :func:`sample_record`.
    """
    scene, values = sample_scene(spec, split, index)
    fast = record_line(spec, scene, values, split, index, mask_file_name)
    if fast is not None:
        return fast[0], fast[1], scene
    rec = _record(spec, split, index, scene, values)
    if mask_file_name is not None:
        rec["mask_file_name"] = mask_file_name
    rec["scene"] = _SCENE_MARK
    head = json.dumps(rec, sort_keys=True)
    del rec["scene"]
    return head.replace(_SCENE_MARK_JSON, scene_graph_json(scene), 1), rec, scene


#: stands for the scene graph in the record's JSON until the graph's own text replaces it
_SCENE_MARK = "\x00scene\x00"
_SCENE_MARK_JSON = json.dumps(_SCENE_MARK)


def _record(spec: Spec, split: str, index: int, scene: Scene, values: dict) -> dict:
    """The record of :func:`sample_record` without its ``scene`` graph, the general way (any scene
    type; the labels' problems worded)."""
    assigned = assign_templates(scene, spec)
    reading = _read_labels(scene, spec, assigned)
    if reading.problems or reading.values != values:  # labels(scene) must give back what was sampled
        raise LayoutError(
            f"sample {split}/{index}: labels do not read back ({'; '.join(reading.problems) or reading.values} "
            f"vs sampled {values}); this is a bug in mosaic, please report it with the spec"
        )
    combo = combination_of(spec, reading.values)
    return hf_record(spec, {
        "file_name": f"images/{index:06d}.png",
        "index": index,
        "split": split,
        "concepts": reading.values,
        "combination": list(combo) if combo is not None else None,
        "held_out": is_held_out(spec, reading.values),
        "caption": _caption(scene, spec, assigned[0]),
        "num_objects": len(scene.objects),
    })


# -- the scene graph, once per scene ----------------------------------------------------------------
# A flat scene's graph (:meth:`mosaic.scene.Scene.to_dict`) is built here in one pass over the
# objects and one over the ordered pairs, without a method call per object or per pair: the unit
# polygons are rotated and scaled with the scene's own float expressions (same operations, same
# order, so the same bounding boxes), and the JSON text of each object's constant part (colour,
# rgb, shape, template) and of each relation is looked up, not encoded. Measured at 3-10 objects,
# numpy arrays of the centres were slower than these loops (a few microseconds of overhead per
# call against well under a microsecond per pair). Any other scene type (a 3-D scene) uses its own
# to_dict.

_REL_TEXT: dict[int, list[str]] = {}  # n objects -> JSON text of (subject i, object j, relation k) at (i * n + j) * 4 + k
_REL_NAMES = ("left_of", "right_of", "above", "below")


def _relation_text(n: int) -> list[str]:
    t = _REL_TEXT.get(n)
    if t is None:
        t = _REL_TEXT[n] = [f'{{"object": {j}, "relation": "{r}", "subject": {i}}}' for i in range(n) for j in range(n)
                            for r in _REL_NAMES]
    return t


def _pair_codes(scene: Scene) -> list[int]:
    """``(i * n + j) * 4 + k`` for every ordered pair ``(i, j)`` of objects with relation
    ``_REL_NAMES[k]``, in :meth:`mosaic.scene.Scene.relations` order (margin 0, same comparisons)."""
    centres = [(o.center[0], o.center[1]) for o in scene.objects]
    n = len(centres)
    out = []
    for i, (ax, ay) in enumerate(centres):
        row = i * n
        for j, (bx, by) in enumerate(centres):
            if i == j:
                continue
            dx, dy = bx - ax, by - ay
            adx, ady = abs(dx), abs(dy)
            if adx >= ady and adx > 0:
                out.append((row + j) * 4 + (0 if dx > 0 else 1))
            elif ady >= adx and ady > 0:
                out.append((row + j) * 4 + (2 if dy > 0 else 3))
    return out


def _box(o, side: int) -> tuple[int, int, int, int]:
    """:meth:`mosaic.scene.SceneObject.bbox` (the same floats, inlined)."""
    unit = SHAPES[o.shape]
    r = o.size / 2.0 * side
    cx, cy = o.center[0] * side, o.center[1] * side
    if unit is None:
        x0, x1, y0, y1 = cx - r, cx + r, cy - r, cy + r
    else:
        a = math.radians(-o.rotation)
        ca, sa = math.cos(a), math.sin(a)
        xs = [cx + r * (ux * ca - uy * sa) for ux, uy in unit]
        ys = [cy + r * (ux * sa + uy * ca) for ux, uy in unit]
        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    return max(0, math.floor(x0)), max(0, math.floor(y0)), min(side, math.ceil(x1)), min(side, math.ceil(y1))


def scene_graph(scene) -> dict:
    """The JSON-ready scene graph of ``scene``: :meth:`~mosaic.scene.Scene.to_dict`, built in one
    pass for a flat :class:`~mosaic.scene.Scene` (any other scene type: its own)."""
    if type(scene) is not Scene:
        return scene.to_dict()
    side = scene.image_size
    objs = scene.objects
    n = len(objs)
    return {
        "image_size": side,
        "background": list(scene.background),
        "objects": [{"shape": o.shape, "color": o.color, "rgb": list(o.rgb), "size": o.size, "center": list(o.center),
                     "rotation": o.rotation, "template": o.template, "bbox": list(_box(o, side))} for o in objs],
        "relations": [{"subject": q // 4 // n, "relation": _REL_NAMES[q % 4], "object": q // 4 % n} for q in _pair_codes(scene)],
    }


_LOOK_TEXT: dict[tuple, tuple[str, str]] = {}  # (colour, rgb, shape, template) -> JSON text around rotation and size


def _look_text(o) -> tuple[str, str]:
    key = (o.color, tuple(o.rgb), o.shape, o.template)
    t = _LOOK_TEXT.get(key)
    if t is None:
        d = json.dumps
        t = (f'"color": {d(o.color)}, "rgb": {d(list(o.rgb))}, "rotation": ',
             f', "shape": {d(o.shape)}, "size": ')
        t = (t[0], t[1], f', "template": {d(o.template)}}}')
        if len(_LOOK_TEXT) < 100_000:
            _LOOK_TEXT[key] = t
    return t


def scene_graph_json(scene) -> str:
    """``json.dumps(scene_graph(scene), sort_keys=True)``, byte for byte, written straight from the
    scene for a flat :class:`~mosaic.scene.Scene` and a :class:`~mosaic.scene3d.Scene3D` (its ``graph_json``)."""
    if type(scene) is not Scene:
        return scene.graph_json() if type(scene) is Scene3D else json.dumps(scene.to_dict(), sort_keys=True)
    side = scene.image_size
    parts = []
    for o in scene.objects:
        b = _box(o, side)
        a, m, z = _look_text(o)
        cx, cy = o.center
        parts.append(f'{{"bbox": [{b[0]}, {b[1]}, {b[2]}, {b[3]}], "center": [{json_number(cx)}, {json_number(cy)}], {a}{json_number(o.rotation)}'
                     f'{m}{json_number(o.size)}{z}')
    table = _relation_text(len(parts))
    rel = ", ".join([table[q] for q in _pair_codes(scene)])
    return (f'{{"background": {json.dumps(list(scene.background))}, "image_size": {json.dumps(side)}, '
            f'"objects": [{", ".join(parts)}], "relations": [{rel}]}}')


_SPEC_CACHE: dict[str, Spec] = {}


def spec_key(spec_data: dict) -> str:
    """An exact key of resolved spec data: ``repr``, which keeps the order of every mapping (a spec's
    concepts in another order are another spec: its combinations and label vectors are in that
    order) and tells ``1`` from ``"1"``, ``True`` and ``1.0``, where ``json.dumps(sort_keys=True)``
    made two such specs one."""
    return repr(spec_data)


def spec_from_data(spec_data: dict) -> Spec:
    """The spec of resolved spec data, parsed once per process (workers get the data, not the
    object); the cache is keyed by :func:`spec_key`, so data that differs in anything, the order of
    its concepts included, is parsed on its own."""
    key = spec_key(spec_data)
    if key not in _SPEC_CACHE:
        _SPEC_CACHE[key] = parse_spec(spec_data)
    return _SPEC_CACHE[key]


def record_claims(spec: Spec, split: str):
    """``check(rec)``: why a record of ``split`` claims what its own concepts and its spec do not
    give, or None. First its form (:func:`mosaic.record_form.record_form_check`: the keys and JSON
    types mosaic writes, no null concept value), then every concept value one of its domain (JSON type kept, as
    :func:`mosaic.grammar.domain_index`), ``split`` this split, ``held_out`` the spec's, a held-out
    combination only in ``test_ood`` and only held-out ones there (what the leak check counted at
    generation), ``labels`` and ``combination`` (where present) those of its concepts. A record
    rewritten together with its digests (a held-out cell's labels on a training image) passes every
    digest; this catches the leak in a few microseconds a record. Values moved to other *seen*
    values take ``mosaic verify --against-spec``."""

    form = record_form_check(spec)  # keys and JSON types at every depth, as mosaic writes them
    grid = spec.grid  # a property that builds the grid: once, not per record
    want = HELD_OUT if split == "test_ood" else SEEN
    # value -> index by JSON type: a string matches a string, a number (never a bool) an equal number
    lookup = {c: {(isinstance(d, str), d): i for i, d in enumerate(k.domain)} for c, k in spec.concepts.items()}
    own = scene_record_check(spec, split)  # the record rebuilt from its own scene graph

    def check(rec: dict) -> str | None:
        if (why := form(rec)) is not None:
            return why
        conc = rec.get("concepts")
        if not isinstance(conc, dict):
            return "concepts is not a mapping of concept values"
        labels = {}
        for c, table in lookup.items():
            v = conc.get(c)
            i = -1 if v is None else None if isinstance(v, bool) or not isinstance(v, (str, int, float)) else table.get((isinstance(v, str), v))
            if i is None:
                return f"concepts.{c} is {str(v)[:40]!r} ({type(v).__name__}), not a value of concept {c!r}"
            labels[c] = i
        if rec.get("split", split) != split:
            return f"split is {str(rec.get('split'))[:40]!r}, but the record lies in split {split!r}"
        status = grid.status_of(conc) if grid is not None else SEEN
        if rec.get("held_out", status == HELD_OUT) is not (status == HELD_OUT):
            return f"held_out is {rec.get('held_out')!r}, but its spec {'holds out' if status == HELD_OUT else 'does not hold out'} these concepts"
        combo = grid.combination(conc) if grid is not None else None
        if grid is not None and status != want:
            where = "only test_ood holds held-out combinations" if split != "test_ood" else "test_ood holds only held-out combinations"
            return f"its combination {'|'.join(map(str, combo))} lies in split {split!r}, but {where} (a leak past the holdout)"
        if "labels" in rec and rec["labels"] != labels:
            return f"labels are {str(rec['labels'])[:80]}, not its concepts' {labels}"
        if "combination" in rec and rec["combination"] != (None if combo is None else list(combo)) \
                and rec["combination"] != (None if combo is None else [str(v) for v in combo]):
            return f"combination is {str(rec['combination'])[:60]}, not its concepts' {None if combo is None else list(combo)}"
        if isinstance(rec.get("scene"), dict):  # a Parquet row read without its scene column is checked without it
            return own(rec)
        return None

    return check


def scene_record_check(spec: Spec, split: str):
    """``check(rec)``: why a record (of :func:`record_claims`' form, its concepts already values of their
    domains) is not the record its own scene graph gives, or None. The scene graph round-trips through
    JSON exactly (:data:`mosaic.scene.COORD_DECIMALS`), and labels, caption, ``num_objects`` and every
    box are pure functions of it, so the record is built again from ``rec["scene"]`` as the generator
    builds it (:func:`mosaic.recordline.record_line`, else :func:`_record`) and compared: a caption
    edited to another scene's (``a red square`` on a blue circle), a ``num_objects``, ``bbox``, ``rgb``
    or object ``color`` that is not the scene's, or an object whose template, shape or size the spec's rules do not
    draw (:func:`mosaic.record_objects.object_rules`), each resealed with every digest, is refused. (Moving
    the concepts, scene graph *and* caption together to another seen value is
    ``mosaic verify --against-spec``'s.) A graph of more objects than the spec can place is refused
    before any pair of them is compared. ~15 us a record of one object."""
    most = sum(repeat_bounds(spec, t)[1] for t in [*spec.objects, *spec.distractors])
    objects_drawn, background = object_rules(spec), spec.background_rgb()

    def check(rec: dict) -> str | None:
        graph = rec["scene"]
        objs = graph.get("objects")
        if isinstance(objs, list) and len(objs) > most:
            return f"its scene graph holds {len(objs):,} objects, more than the spec places in a scene ({most})"
        index, mask = rec.get("index"), rec.get("mask_file_name")
        try:
            scene = scene_from_dict(graph)
            if scene.image_size != spec.image.size:
                return f"its scene graph's image_size is {graph.get('image_size')!r}, not the spec's {spec.image.size}"
            if list(scene.background) != list(background):
                return f"its scene graph's background is {str(graph.get('background'))[:40]}, not the spec's {list(background)}"
            why = objects_drawn(scene)  # each object's template, colour, shape and size are the spec's (record_objects)
            if why:
                return why
            fast = record_line(spec, scene, rec["concepts"], split, index, mask, graph=False)
            want = fast[1] if fast is not None else _record(spec, split, index, scene, rec["concepts"])
            if mask is not None:
                want["mask_file_name"] = mask
            want["scene"] = scene_graph(scene)
        except LayoutError:
            return "its concepts are not the ones its own scene graph shows"
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as e:
            return f"its scene graph is not one mosaic draws ({type(e).__name__}: {str(e)[:60]})"
        bad = sorted(k for k in set(want) | set(rec) if want.get(k) != rec.get(k))
        if bad:
            what = bad[0] if bad[0] != "scene" else _first_difference(want["scene"], rec["scene"], "scene")
            return (f"{what} is not what its own scene graph gives (the generator's caption, counts and boxes are functions of "
                    f"the scene): {str(rec.get(bad[0]) if bad[0] != 'scene' else what)[:60]!r}")
        return None

    return check


def _first_difference(want, got, path: str) -> str:
    """The dotted path of the first place where two JSON values differ."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            if want.get(k) != got.get(k):
                return _first_difference(want.get(k), got.get(k), f"{path}.{k}")
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got)):
            if a != b:
                return _first_difference(a, b, f"{path}.{i}")
    return path


def count_problem(man: dict) -> str | None:
    """Why the split counts of a manifest (``splits.<name>.count``, whole numbers) cannot be those its
    own spec gives (:meth:`Spec.split_sizes`), or None: every count is the spec's, and every split one
    of the spec's. Every reader sizes its loops by these counts, so an edited count (``10**30``, or
    more samples than the spec has) is refused before any loop. None also when the stored spec does
    not parse (the fingerprint check names an edited spec)."""
    try:
        sizes = spec_from_data(man["spec"]).split_sizes()
    except (MosaicError, ValueError, TypeError):
        return None
    for split, info in man["splits"].items():
        if split not in sizes:
            return f"split {split[:40]!r} is not a split of its spec ({', '.join(sizes)})"
        if info.get("count", 0) != sizes[split]:
            return f"split {split!r} has count {str(info.get('count', 0))[:40]}, but its spec gives {sizes[split]} samples"
    return None


def shards_problem(man: dict) -> str | None:
    """Why a manifest's ``shards`` (Parquet: split -> ``[{name, rows, bytes, sha256}]``) is not what
    mosaic writes, or None: each split one of the manifest's, each record a mapping whose ``name`` is
    exactly ``<split>-NNNNN-of-MMMMM.parquet`` for its place (never a path: ``../../etc/x``), whose
    ``rows`` and ``bytes`` are whole numbers >= 0 and whose ``sha256`` is 64 hex digits. A record of
    another shape would have verify and every reader open a file outside ``data/`` or fail with a
    traceback."""
    shards = man.get("shards")
    if shards is None:
        return None
    if not isinstance(shards, dict):
        return "its shards record is not a mapping of split -> shard list"
    for split, lst in shards.items():
        if split not in man["splits"] or not isinstance(lst, list):
            return f"shards of {str(split)[:40]!r}: not a split of the manifest with a list of shards"
        for k, rec in enumerate(lst):
            want = f"{split}-{k:05d}-of-{len(lst):05d}.parquet"
            ok = isinstance(rec, dict) and rec.get("name") == want and all(
                isinstance(rec.get(f), int) and not isinstance(rec.get(f), bool) and rec.get(f) >= 0 for f in ("rows", "bytes"))
            sha = rec.get("sha256") if isinstance(rec, dict) else None
            if not ok or not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
                name = rec.get("name") if isinstance(rec, dict) else rec
                return (f"shard {k} of split {split!r} ({str(name)[:60]!r}) is not a record mosaic writes: name {want}, "
                        "rows and bytes whole numbers, a sha256")
    return None



def replaceable_or_raise(out: Path) -> None:
    """Raise unless ``--overwrite`` may delete ``out``: an empty folder, or a mosaic dataset: its
    manifest is a JSON mapping whose ``format`` is ``mosaic-dataset/N``, or the manifest is
    damaged (unreadable, a folder) in a folder holding only the names a dataset has. Any other
    folder with a ``manifest.json`` (a web extension's, a model's) is refused, never deleted, and
    so is a dataset holding anything mosaic does not write there (:func:`mosaic.foreign_names.foreign_names`:
    a person's notebooks in ``DS/analysis/``, notes in ``DS/train/``).

    Raises:
        DatasetError: naming the folder and why it is not replaced.
    """
    if out.is_symlink():
        raise DatasetError([("--out", f"{out} is a symbolic link: give the real folder, --overwrite never deletes through a link")])
    if not holds_files(out):  # empty, or only empty folders (a run stopped before its first manifest)
        return
    path = out / MANIFEST
    if not (path.is_file() or path.is_dir()):
        raise DatasetError(f"refusing to --overwrite {out}: it is not a mosaic dataset (no {MANIFEST}) and not empty; give another --out")
    man = None
    if path.is_file():
        try:
            man = loads_json(read_bounded(path, MAX_JSON_BYTES))
        except (OSError, ValueError):
            man = None
    own = man if isinstance(man, dict) and str(man.get("format", "")).startswith("mosaic-dataset/") else None
    try:
        foreign = foreign_names(out, manifest=own)  # never deleted: what a person put into the dataset (notebooks, notes, .git)
    except OSError as e:
        raise DatasetError([("--out", f"cannot list {out}: {e.strerror}; --overwrite deletes only what it has seen")]) from None
    if own is not None:
        if foreign:
            raise DatasetError([("--out", f"refusing to --overwrite {out}: it holds what mosaic did not write "
                                          f"({', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}), which --overwrite "
                                          "would delete: move it out of the dataset, then rerun")])
        return
    if man is None and not foreign:  # a mosaic dataset whose manifest is damaged: --overwrite is the documented fix
        return
    raise DatasetError(f"refusing to --overwrite {out}: its {MANIFEST} is not a mosaic dataset manifest (no format "
                       f"mosaic-dataset/N)" + (f" and it holds {', '.join(foreign[:5])}" if foreign else "") +
                       "; give another --out")


def check_out_dir(out: Path, spec: Spec, masks: bool, overwrite: bool, storage: str) -> dict | None:
    """Decide what to do with an existing ``out`` about to receive a ``storage`` form dataset:
    returns the manifest to resume, or None to start fresh.

    Raises:
        DatasetError: ``out`` is a file, holds foreign files, another spec's dataset, the other
            storage form, another format version, or was generated with the other ``masks``
            setting (each unless ``overwrite`` applies).
    """
    if not out.exists():
        return None
    if not out.is_dir():  # a file, /dev/null, a FIFO ... (the CLI checks this before anything else: mosaic.io.output_dir_problem)

        raise DatasetError([("--out", f"{out} {output_dir_problem(out)}: give a directory")])
    man_path = out / MANIFEST
    has_manifest = man_path.is_file() or man_path.is_dir() and not man_path.is_symlink()  # a folder there: a damaged dataset
    if overwrite:
        replaceable_or_raise(out)
        remove_dataset(out)  # the manifest last: interrupted, the folder is still a dataset that --overwrite replaces
        return None
    if not has_manifest:
        if holds_files(out):
            raise DatasetError(f"{out} exists, is not empty and holds no {MANIFEST}: give an empty or new --out directory")
        remove_dataset(out)  # only empty folders (a run stopped before its first manifest): cleared, never left as strays
        return None
    man = read_manifest(out)
    if man.get("fingerprint") != spec.fingerprint():
        raise DatasetError(
            f"{out} was generated from spec {man.get('name')!r} with fingerprint {man.get('fingerprint')}, but this spec "
            f"({spec.name!r}) has fingerprint {spec.fingerprint()}: use another --out, or --overwrite to replace it"
        )
    if bool(man.get("masks")) != bool(masks):
        raise DatasetError(f"{out} was generated {'with' if man.get('masks') else 'without'} masks: rerun with the same --masks setting, or --overwrite")
    have = man.get("storage", "imagefolder")
    if man.get("export_source") is not None and man.get("status") != "complete":
        raise DatasetError(f"{out} is unfinished: {unfinished_hint(out, man)}; or --overwrite to replace it with this generation")
    if have != storage:  # convert the stored form into the requested one (export writes beside it by default)
        raise DatasetError(f"{out} holds a {have} dataset of this spec: generate with --format {have}, convert it to {storage} "
                           f"with `mosaic export {out} --format {storage}` (it writes {out}-{storage}), or --overwrite")
    if man.get("format") != FORMAT:
        raise DatasetError(f"{out} was generated in format {man.get('format')}; this mosaic writes {FORMAT}: "
                           "rerun with --overwrite (or another --out) to regenerate it")
    return man


def base_manifest(spec: Spec, masks: bool, renderer: str, status: str, storage: str) -> dict:
    """The manifest fields every dataset has (``splits`` counts from the spec, no leak check yet)."""
    return {
        "format": FORMAT,
        "storage": storage,
        "name": spec.name,
        "fingerprint": spec.fingerprint(),
        "status": status,
        "spec": spec.to_dict(),
        "renderer": {"name": "shaded" if spec.image.renderer == "shaded" else renderer, "supersample": spec.image.supersample},
        "masks": masks,
        "versions": package_versions(),
        "splits": {k: {"count": n} for k, n in spec.split_sizes().items()},
    }
