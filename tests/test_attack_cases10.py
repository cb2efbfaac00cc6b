"""Hostile cases of a tenth attack on the data path (issue 23), each closed at its mechanism.

- **A record that is not what its own scene graph gives**, resealed with every digest: a caption edited
  to another scene's (``a red square`` on a blue circle: what a text-to-image model trains on), a
  ``num_objects``, box, ``rgb``, object colour or shape, or the graph's ``image_size`` changed, passed
  ``verify`` and every reader (only the concepts, labels, split and holdout were compared).
  :func:`mosaic.records.scene_record_check` (in :func:`mosaic.records.record_claims`) builds the record
  again from ``rec["scene"]`` as the generator does and compares; a graph of more objects than the spec
  places is refused before any pair of them is compared. Parquet rows too.
- **A spec whose concepts are not listed in name order** (``experiments/specs/relation.yaml``): its
  card and Parquet schema were written in the spec file's order, but checked against the spec read
  back from ``manifest.json`` (stored with sorted keys), so ``mosaic verify`` (and every reader's quick
  check) in a new process called a freshly generated dataset's card damaged. The feature tree
  (:mod:`mosaic.hf`, the one tree of card, schema and record form) lists concepts by name, the order of the records' own JSON keys.
- **Names that look alike or hide characters** in a spec (and so in every record, caption, card and
  metric): a zero-width space, a right-to-left override, a decomposed accent (NFD), a Cyrillic letter
  in a Latin name, ``Red`` beside ``red``, a ``|`` (two combinations on one cell key: ``x|y`` + ``z`` and
  ``x`` + ``y|z``), a concept named ``joint`` or ``n`` (its accuracy overwritten in the evaluation
  table), a concept name with ``/`` or ``.``, a 100,000-character name. :func:`mosaic.spec_names.name_problem`
  refuses them when the spec is parsed (the manifest's spec too).
- **A manifest field of another type** (``checksums.bytes: 5``, a list, ``checksums.files: "x"``,
  ``masks: "no"``, ``storage: 5``, ``status: [..]``): a TypeError traceback with exit 1, or read as
  something else; :func:`mosaic.verify.read_manifest_checked` names the field (exit 2).
- **A trial folder's ``config.yaml`` holding ``!!python/object``, non-UTF-8 bytes or YAML nested 100,000
  deep**: a rerun of the sweep was a ConstructorError / UnicodeDecodeError / RecursionError traceback
  (no code ran: the loader is safe); it is read as every user YAML file is now
  (:func:`mosaic.trials._read_trial_config`), named with the fix.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2 as _clean_exit_2
from tests.test_attack_cases6 import _reseal
from tests.test_attack_cases7 import _reseal_shard
from tests.test_attack_cases8 import data  # noqa: F401 (fixture: a 16 px dataset with masks)

runner = CliRunner()


def _copy(data: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(data, root)
    return root


def _edit_record(root: Path, line: int, edit) -> None:
    """Apply ``edit`` to the record of train metadata line ``line`` (1-based), write its canonical text, reseal."""
    p = root / "train" / "metadata.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[line - 1])
    edit(rec)
    lines[line - 1] = json.dumps(rec, sort_keys=True)
    p.write_text("\n".join(lines) + "\n")
    _reseal(root)


def _obj(**kw):
    return lambda r: r["scene"]["objects"][0].update(**kw)


def _other_caption(r):
    c, s = r["concepts"]["color"], r["concepts"]["shape"]
    r["caption"] = f"a {'red' if c != 'red' else 'green'} {s}"  # another seen look, the same words' form


EDITS = {
    "caption": _other_caption,
    "num_objects": lambda r: r.update(num_objects=2),
    "rgb": _obj(rgb=[255, 0, 0]),
    "object colour": lambda r: r["scene"]["objects"][0].update(color="red" if r["concepts"]["color"] != "red" else "green"),
    "bbox": _obj(bbox=[0, 0, 16, 16]),
    "image_size": lambda r: r["scene"].update(image_size=64),
    "background": lambda r: r["scene"].update(background=[0, 0, 0]),
}


@pytest.mark.parametrize("edit", list(EDITS), ids=list(EDITS))
def test_a_record_that_is_not_its_own_scene_graphs_resealed_is_refused_everywhere(tmp_path, data, edit):
    from mosaic.dataset import read_metadata
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    root = _copy(data, tmp_path)
    _edit_record(root, 2, EDITS[edit])
    for quick in ([], ["--quick"]):
        res = runner.invoke(app, ["verify", str(root), *quick])
        assert res.exit_code == 1 and "train/metadata.jsonl:2" in res.output, res.output
        assert "scene graph" in " ".join(res.output.split()) and "--overwrite" in res.output, res.output
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "parquet", "-o", str(tmp_path / "pq")]))
    for read in (lambda: MosaicDataset(root, "train"), lambda: MosaicDataset(root, "train", verify=False),
                 lambda: read_metadata(root, "train")):
        with pytest.raises(DatasetError, match="scene graph"):
            read()


def test_every_shipped_record_is_its_own_scene_graphs(data):
    """No false alarm: every record generate wrote (every split) passes the scene check."""
    from mosaic.records import scene_record_check, spec_from_data

    spec = spec_from_data(json.loads((data / "manifest.json").read_text())["spec"])
    for split in ("train", "val", "test_id", "test_ood"):
        check = scene_record_check(spec, split)
        for line in (data / split / "metadata.jsonl").read_text().splitlines():
            assert check(json.loads(line)) is None


def test_a_scene_graph_of_more_objects_than_the_spec_places_is_refused_before_any_pair(tmp_path, data):
    """100,000 objects would be 10**10 ordered pairs for the relations: refused from the count."""
    from mosaic.records import scene_record_check, spec_from_data

    spec = spec_from_data(json.loads((data / "manifest.json").read_text())["spec"])
    rec = json.loads((data / "train" / "metadata.jsonl").read_text().splitlines()[0])
    rec["scene"]["objects"] = rec["scene"]["objects"] * 100_000
    why = scene_record_check(spec, "train")(rec)
    assert why is not None and "100,000 objects" in why and "(1)" in why


def test_a_parquet_row_whose_caption_is_not_its_scene_graphs_is_refused(tmp_path, data):
    import pyarrow as pa

    from mosaic.dataset import read_metadata
    from mosaic.errors import DatasetError

    pq = tmp_path / "pq"
    res = runner.invoke(app, ["export", str(data), "--format", "parquet", "-o", str(pq)])
    assert res.exit_code == 0, res.output

    def caption(t):
        caps = t.column("caption").to_pylist()
        caps[1] = "a red square" if caps[1] != "a red square" else "a green circle"
        return t.set_column(t.schema.get_field_index("caption"), "caption", pa.array(caps))

    _reseal_shard(pq, caption)
    with pytest.raises(DatasetError, match="caption is not what its own scene graph gives"):
        read_metadata(pq, "train")


# ------------------------------------------------------------------------------------------------
# a spec whose concepts are not in name order: the card and schema in one order whichever spec built them
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("storage", ["imagefolder", "parquet"])
def test_a_spec_whose_concepts_are_not_in_name_order_verifies_in_a_new_process(tmp_path, storage):
    from mosaic import records
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from mosaic.verify import check_before_read, verify
    from tests.test_diffusion import SPEC

    d = copy.deepcopy(SPEC)
    d["concepts"] = dict(reversed(list(d["concepts"].items())))  # shape, color: as a spec file may list them
    root = tmp_path / "data"
    records._SPEC_CACHE.clear()  # (a spec of the same content parsed earlier in this process would stand for this one)
    if storage == "parquet":
        from mosaic.parquet import generate_parquet

        generate_parquet(parse_spec(d), root)
    else:
        generate(parse_spec(d), root)
    records._SPEC_CACHE.clear()  # as a new process: the spec read back from manifest.json (keys sorted)
    report = verify(root)
    assert report.ok, report.problems()
    check_before_read(root)


# ------------------------------------------------------------------------------------------------
# names that look alike or hide characters
# ------------------------------------------------------------------------------------------------

def _colour_value(name):
    def edit(s):
        s["colors"] = {name: [200, 20, 20]}
        s["concepts"]["color"]["values"] = ["red", "green", name]
    return edit


def _concept_name(name):
    def edit(s):
        s["concepts"][name] = s["concepts"].pop("color")
        s["objects"][0]["color"] = {"concept": name}
        s["holdout"]["concepts"] = [name, "shape"]
    return edit


def _pipe(s):
    s["colors"] = {"x": [1, 2, 3], "x|y": [200, 2, 3]}
    s["sizes"] = {"y|z": 0.3, "z": 0.5}
    s["concepts"] = {"color": {"values": ["x", "x|y"]}, "size": {"values": ["y|z", "z"]}}
    s["objects"] = [{"name": "obj", "shape": "circle", "color": {"concept": "color"}, "size": {"concept": "size"}}]
    s["holdout"] = {"concepts": ["color", "size"], "rule": {"kind": "explicit", "combinations": [["x", "y|z"]]}}


NAMES = {
    "zero-width space": (_colour_value("red\u200b"), "U+200B"),
    "right-to-left override": (_colour_value("\u202eder"), "U+202E"),
    "decomposed accent": (_colour_value("cafe\u0301"), "NFC"),
    "cyrillic letter": (_colour_value("r\u0435d"), "CYRILLIC, LATIN"),
    "case twin": (_colour_value("Red"), "differ only in case"),
    "newline": (_colour_value("re\nd"), "U+000A"),
    "combination separator": (_pipe, "separator of a combination's key"),
    "concept joint": (_concept_name("joint"), "evaluation tables"),
    "concept n": (_concept_name("n"), "evaluation tables"),
    "concept path": (_concept_name("../x"), "never a path"),
    "concept dotted": (_concept_name("a.b"), "never a path"),
    "overlong": (_concept_name("c" * 100_000), "100,000 characters"),
}


@pytest.mark.parametrize("case", list(NAMES), ids=list(NAMES))
def test_names_that_look_alike_or_hide_characters_are_refused_naming_the_field(tmp_path, case):
    from mosaic.errors import SpecError
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC

    d = copy.deepcopy(SPEC)
    NAMES[case][0](d)
    with pytest.raises(SpecError, match="concepts") as e:
        parse_spec(d)
    assert NAMES[case][1] in str(e.value)
    assert len(str(e.value)) < 2000  # an overlong name is shown cut
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d, allow_unicode=True))
    res = runner.invoke(app, ["validate", str(p)])
    _clean_exit_2(res, "spec.yaml")


def test_names_of_one_script_and_plain_names_still_parse():
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC

    d = copy.deepcopy(SPEC)
    d["colors"] = {"красный": [200, 20, 20], "café": [20, 20, 200], "light blue": [120, 160, 240]}
    d["concepts"]["color"]["values"] = ["красный", "café", "light blue"]
    d["holdout"]["rule"]["combinations"] = [["café", "square"]]
    assert parse_spec(d).concepts["color"].domain == ["красный", "café", "light blue"]


# ------------------------------------------------------------------------------------------------
# manifest fields of another type
# ------------------------------------------------------------------------------------------------

FIELDS = {
    "checksums.bytes int": (lambda m: m["checksums"].update(bytes=5), "checksums.bytes"),
    "checksums.bytes list": (lambda m: m["checksums"].update(bytes=["train"]), "checksums.bytes"),
    "checksums.bytes string count": (lambda m: m["checksums"]["bytes"].update(train="5420"), "checksums.bytes"),
    "checksums.files string": (lambda m: m["checksums"].update(files="x"), "checksums.files"),
    "masks string": (lambda m: m.update(masks="no"), "masks"),
    "storage int": (lambda m: m.update(storage=5), "storage"),
    "status list": (lambda m: m.update(status=["complete"]), "status"),
}


@pytest.mark.parametrize("case", list(FIELDS), ids=list(FIELDS))
def test_a_manifest_field_of_another_type_is_named_not_a_traceback(tmp_path, data, case):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    root = _copy(data, tmp_path)
    p = root / "manifest.json"
    man = json.loads(p.read_text())
    FIELDS[case][0](man)
    p.write_text(json.dumps(man, indent=2, sort_keys=True))
    _clean_exit_2(runner.invoke(app, ["verify", str(root)]), "manifest.json", FIELDS[case][1])
    with pytest.raises(DatasetError, match=FIELDS[case][1].replace(".", r"\.")):
        MosaicDataset(root, "train")


# ------------------------------------------------------------------------------------------------
# a trial folder's config.yaml: read as the user's YAML files are
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, said", [
    (b"!!python/object/apply:os.system ['echo PWNED']\n", "python/object"),
    (b"\xff\xfe", "not UTF-8"),
    (b"a: [" * 100_000, "nests deeper"),
], ids=["python-tag", "not-utf8", "deep"])
def test_a_damaged_trial_config_is_named_on_a_sweep_rerun(tmp_path, content, said):
    from mosaic.errors import SweepError
    from mosaic.sweep import load_sweep
    from mosaic.trials import _refuse_changed_trials, plan
    from tests.test_sweep import sweep_file

    cfg = {"name": "r", "dataset": {"spec": "experiments/specs/count_composition.yaml", "overrides": {"image.size": 32}},
           "training": {"steps": 5}}
    s = load_sweep(sweep_file(tmp_path, cfg, grid={"training.lr": [1e-3]}))
    out = tmp_path / "out"
    trials = plan(s, out)
    trials[0]["dir"].mkdir(parents=True)
    (trials[0]["dir"] / "config.yaml").write_bytes(content)
    with pytest.raises(SweepError, match=f"(?s)config.yaml is damaged.*{said}.*delete the trial folder"):
        _refuse_changed_trials(plan(s, out))
