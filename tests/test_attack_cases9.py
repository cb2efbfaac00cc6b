"""Hostile cases of a ninth attack on the data path (issue 23), each closed at its mechanism.

- **A metadata line that parses to its record but is not mosaic's text** (a key given twice, where
  ``json.loads`` keeps the last value and another reader the first; ``NaN``; keys reordered), resealed
  with every digest: :func:`mosaic.checksums.text_problem` compares the line with
  ``json.dumps(rec, sort_keys=True)`` in ``verify`` and in every reader.
- **A record of another form** (a key mosaic never writes, a caption that is a number, a null concept
  value, a scene object without its box), resealed: HF's JSON reader and the Parquet writer typed it
  otherwise or failed with a pyarrow traceback. :func:`mosaic.record_form.record_form_check` checks
  keys and JSON types at every depth against the spec's feature tree.
- **A hard link planted at a sample's name**: ``verify --repair`` (and a generate rerun) opened the
  existing inode and wrote through it into a file outside the dataset. Files are now created with
  ``O_EXCL | O_NOFOLLOW`` after the name is unlinked.
- **``mosaic evaluate`` on a split folder of a damaged dataset** scored it: a split of a mosaic
  dataset is now read as every reader reads it (the quick check, then its own records).
- **A Parquet footer whose ``huggingface`` features were edited** (class names reordered, so HF reads a
  red sample's label as another colour), the shard resealed: the schema metadata is compared too
  (its cases sit with the other shard edits in tests/test_attack_cases7.py).
- **A card whose YAML header HF reads as empty** (a ``--- `` line with a trailing space closes HF's
  block; ``yaml.safe_load`` of the plain split read on and found the configs): parsed with
  huggingface_hub's own ``DatasetCard``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2 as _clean_exit_2
from tests.test_attack_cases6 import _reseal
from tests.test_attack_cases7 import _reseal_shard
from tests.test_attack_cases8 import _refused_everywhere, data, pq_data  # noqa: F401 (fixtures: a 16 px dataset with masks, its Parquet form)

runner = CliRunner()


def _copy(data: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(data, root)
    return root


def _set_line(root: Path, line: int, text: str) -> None:
    """Replace metadata line ``line`` (1-based) of the train split by ``text`` and reseal every digest."""
    p = root / "train" / "metadata.jsonl"
    lines = p.read_text().splitlines()
    lines[line - 1] = text
    p.write_text("\n".join(lines) + "\n")
    _reseal(root)


def _line(root: Path, line: int) -> str:
    return (root / "train" / "metadata.jsonl").read_text().splitlines()[line - 1]


# ------------------------------------------------------------------------------------------------
# a line that parses to a valid record but is not the text mosaic writes
# ------------------------------------------------------------------------------------------------

def _duplicate_caption(text: str) -> str:
    """The caption key given twice: json.loads keeps the last (the true caption), a first-wins reader
    would read 'a red circle'."""
    return '{"caption": "a red circle", ' + text[1:]


def _nan_center(text: str) -> str:
    rec = json.loads(text)
    rec["scene"]["objects"][0]["center"][0] = float("nan")
    return json.dumps(rec, sort_keys=True)


def _unsorted(text: str) -> str:
    rec = json.loads(text)
    return json.dumps(dict(reversed(list(rec.items()))))


@pytest.mark.parametrize("edit, said", [
    (_duplicate_caption, "a key given twice"),
    (_nan_center, "not finite"),
    (_unsorted, "not the JSON mosaic writes"),
])
def test_a_line_that_is_not_mosaics_text_for_its_record_is_refused_everywhere(tmp_path, data, edit, said):
    root = _copy(data, tmp_path)
    _set_line(root, 2, edit(_line(root, 2)))
    _refused_everywhere(tmp_path, root, said)


def test_the_canonical_text_of_every_shipped_line_passes_text_problem(data):
    """No false alarm: every line generate wrote is its record's canonical text."""
    from mosaic.checksums import text_problem

    for split in ("train", "val", "test_id", "test_ood"):
        for line in (data / split / "metadata.jsonl").read_text().splitlines():
            assert text_problem(line, json.loads(line)) is None


# ------------------------------------------------------------------------------------------------
# a record of another form than mosaic's (canonical text, every digest resealed)
# ------------------------------------------------------------------------------------------------

def _form_edit(fn):
    def edit(text: str) -> str:
        rec = json.loads(text)
        fn(rec)
        return json.dumps(rec, sort_keys=True)
    return edit


@pytest.mark.parametrize("fn, said", [
    (lambda r: r.update(note="x"), "key(s) note mosaic never writes"),
    (lambda r: r.update(caption=7), "caption is '7' (int), not a JSON string"),
    (lambda r: r.pop("num_objects"), "it has no num_objects"),
    (lambda r: r["scene"]["objects"][0].pop("bbox"), "scene.objects[0] has"),
    (lambda r: r["scene"].update(objects={"0": 1}), "scene.objects is a dict, not a list"),
    (lambda r: r["scene"]["objects"][0].update(size="0.5"), "scene.objects[0].size is '0.5' (str), not a JSON float64"),
    (lambda r: r.update(num_objects=True), "num_objects is 'True' (bool), not a JSON int64"),
])
def test_a_record_of_another_form_resealed_is_refused_everywhere(tmp_path, data, fn, said):
    root = _copy(data, tmp_path)
    _set_line(root, 2, _form_edit(fn)(_line(root, 2)))
    _refused_everywhere(tmp_path, root, said)


def test_a_null_concept_value_is_refused(data):
    """A concept's value is never null: mosaic draws every concept for every sample."""
    from mosaic.record_form import record_form_check
    from mosaic.records import spec_from_data

    man = json.loads((data / "manifest.json").read_text())
    check = record_form_check(spec_from_data(man["spec"]))
    rec = json.loads((data / "train" / "metadata.jsonl").read_text().splitlines()[0])
    assert check(rec) is None
    bad = json.loads(json.dumps(rec))
    bad["concepts"]["color"] = None
    assert "concepts.color" in check(bad)
    bad = json.loads(json.dumps(rec))
    bad["labels"]["shape"] = 2  # only circle (0) and square (1)
    assert "label index 0-1" in check(bad)


# ------------------------------------------------------------------------------------------------
# no write through a hard link planted at a sample's name
# ------------------------------------------------------------------------------------------------

def test_repair_never_writes_through_a_hard_link_at_a_samples_name(tmp_path, data):
    root = _copy(data, tmp_path)
    outside = tmp_path / "someone_elses.png"
    outside.write_bytes(b"not yours to overwrite")
    target = root / "train" / "images" / "000001.png"
    target.unlink()
    os.link(outside, target)  # the dataset's name and the outside file share one inode
    res = runner.invoke(app, ["verify", str(root), "--repair"])
    assert res.exit_code == 0, res.output
    assert outside.read_bytes() == b"not yours to overwrite"
    assert os.stat(target).st_ino != os.stat(outside).st_ino
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 0


def test_write_file_replaces_a_symlink_and_an_old_file_without_touching_their_targets(tmp_path):
    from mosaic.dataset import _write_file

    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "link.png"
    link.symlink_to(victim)
    _write_file(str(link), b"new")
    assert victim.read_bytes() == b"keep" and not link.is_symlink() and link.read_bytes() == b"new"
    _write_file(str(link), b"newer")  # a rerun over its own old file
    assert link.read_bytes() == b"newer"
    _write_file(str(link), b"x")  # shorter than before: nothing of the old bytes is left
    assert link.read_bytes() == b"x"
    hard = tmp_path / "hard.png"
    os.link(victim, hard)  # a hard link to a file outside: never truncated nor written through
    _write_file(str(hard), b"mine")
    assert victim.read_bytes() == b"keep" and hard.read_bytes() == b"mine" and os.stat(hard).st_nlink == 1


# ------------------------------------------------------------------------------------------------
# mosaic evaluate on a split folder of a dataset reads it as every reader does
# ------------------------------------------------------------------------------------------------

def test_evaluate_on_a_split_of_a_damaged_dataset_refuses_it(tmp_path, data):
    root = _copy(data, tmp_path)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(json.loads((root / "manifest.json").read_text())["spec"]))
    ok = runner.invoke(app, ["evaluate", str(root / "test_ood"), "--spec", str(spec), "--check-n", "0"])
    assert ok.exit_code == 0, ok.output
    img = root / "test_ood" / "images" / "000000.png"
    other = root / "train" / "images" / "000000.png"
    img.write_bytes(other.read_bytes())  # a seen image standing for a held-out one, digests left as they were
    _clean_exit_2(runner.invoke(app, ["evaluate", str(root / "test_ood"), "--spec", str(spec), "--check-n", "0"]),
                  "test_ood/images/000000.png")


def test_evaluate_on_a_folder_inside_a_dataset_that_is_no_split_is_refused(tmp_path, data):
    root = _copy(data, tmp_path)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(json.loads((root / "manifest.json").read_text())["spec"]))
    extra = root / "mine"
    shutil.copytree(root / "test_ood", extra)
    res = runner.invoke(app, ["evaluate", str(extra), "--spec", str(spec), "--check-n", "0"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output


# ------------------------------------------------------------------------------------------------
# the card's YAML header as HF reads it
# ------------------------------------------------------------------------------------------------

def test_a_card_whose_header_hf_reads_as_empty_is_damage(tmp_path, data):
    root = _copy(data, tmp_path)
    card = root / "README.md"
    card.write_text("---\n\n--- \n" + card.read_text()[4:])  # HF closes its block at the "--- " line: an empty header; a plain split reads on to the configs
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and "an empty one" in " ".join(res.output.split()), res.output
    assert runner.invoke(app, ["verify", str(root), "--repair"]).exit_code == 0
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 0


def test_a_card_with_crlf_line_ends_is_read_as_hf_reads_it(tmp_path, data):
    """A card saved with Windows line ends: HF reads the same header, so it is no damage."""
    root = _copy(data, tmp_path)
    card = root / "README.md"
    card.write_bytes(card.read_bytes().replace(b"\n", b"\r\n"))
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 0, res.output


def test_the_compiled_form_walk_judges_as_the_message_walk(data):
    """record_form_check's fast predicates (compiled once per spec) and the walk that builds the
    message agree on random mutations of real records: a value swapped for another JSON type, a key
    dropped, an item appended, at every depth."""
    import copy
    import random

    from mosaic.hf import feature_tree
    from mosaic.record_form import _compile, _node_problem
    from mosaic.records import spec_from_data

    rng = random.Random(0)
    spec = spec_from_data(json.loads((data / "manifest.json").read_text())["spec"])
    fields = {k: v for k, v in feature_tree(spec, masks=True, image_column=False).items() if k != "mask_file_name"}
    fast = {k: _compile(v) for k, v in fields.items()}
    values = [None, True, 0, 1, -1, 2, 1.5, float("nan"), float("inf"), "x", [], {}, [1], {"a": 1}]

    def paths(o, pre=()):
        yield pre
        items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
        for k, v in items:
            yield from paths(v, (*pre, k))

    recs = [json.loads(x) for x in (data / "train" / "metadata.jsonl").read_text().splitlines()][:10]
    refused = 0
    for rec in recs:
        spots = [p for p in paths(rec) if p]
        for _ in range(60):
            m = copy.deepcopy(rec)
            *head, last = rng.choice(spots)
            o = m
            for k in head:
                o = o[k]
            if rng.random() < 0.75 or isinstance(o, list) and rng.random() < 0.5:
                o[last] = rng.choice(values)
            elif isinstance(o, dict):
                o.pop(last)
            else:
                o.append(rng.choice(values))
            for k, node in fields.items():
                if k in m:
                    ok = fast[k](m[k])
                    assert ok == (_node_problem(m[k], node, k) is None), (k, m[k])
                    refused += not ok
    assert refused > 300  # the mutations did reach the checks
