"""Hostile cases of a seventeenth attack on the data path (issue 23).

What broke, and the mechanism that closes it:

- **A manifest whose stored ``leak_check`` or ``renderer`` is of another shape** (``coverage: "abc"``,
  ``checks`` a list, ``counts`` of a number, ``leak_check`` a string; ``"renderer": null``, an unknown
  backend, ``shaded`` for a flat spec) made ``verify --repair`` (which writes the card's leak-check
  section from the one and renders with the other) a Python traceback, exit 1: the manifest check every
  reader and writer passes through (``mosaic.verify.read_manifest``) names the field and the value
  (:func:`mosaic.manifest_fields.fields_problem`), exit 2.
- **``COLUMNS=0``** printed no error at all (exit 2 and an empty terminal; click's usage errors
  too), ``COLUMNS=1`` one letter a line: :func:`mosaic.cli.common._width` drops a ``COLUMNS`` no
  terminal has (not a number, under 20, over 10,000) for every console, typer's own among them.
- **``generate --overwrite`` / ``export --overwrite``** deleted a person's files inside a folder
  standing where mosaic writes a file (``train/metadata.jsonl/notes.txt``,
  ``train/images/000001.png/notes.txt``, ``README.md/``, a shard's name): :func:`mosaic.foreign_names.foreign_names`
  lists such a folder as foreign when it holds anything (an empty one is still mosaic's to replace).
- **A card written again by ``verify --repair``** was not the one ``generate`` wrote (its leak-check rows
  in the manifest's sorted order), while repair said "byte-identical": :func:`mosaic.hf.card_text` writes
  the checks by name and the splits in the spec's order.
- **A Parquet manifest's ``parquet`` layout** (``rows_per_shard``, ``shard_bytes``, ``row_group_rows``),
  by which ``verify --repair`` and a resumed ``generate`` write shards again, was never checked:
  ``rows_per_shard: -1`` had a repair delete the train shard and mark the dataset ``failed_leak_check``,
  ``0`` divided by zero, a string was a traceback. :func:`mosaic.shard_checks.layout_problem` (in
  ``read_manifest`` and before a resume in :mod:`mosaic.parquet`) names it: each a whole number > 0,
  and each split's shard list the one the layout gives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import ROOT, clean_exit_2, copy_dataset, edit_manifest

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


_copy, _edit_manifest = copy_dataset, edit_manifest


def _tree(ds: Path) -> dict:
    return {p.relative_to(ds).as_posix(): p.read_bytes() for p in sorted(ds.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------
# the manifest's stored leak check is read as data
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit, said", [
    (lambda m: m["leak_check"].update(coverage="abc"), "leak_check.coverage is 'abc'"),
    (lambda m: m["leak_check"].update(coverage=None), "leak_check.coverage"),
    (lambda m: m["leak_check"].update(coverage=[1]), "leak_check.coverage"),
    (lambda m: m["leak_check"].update(checks=[1]), "leak_check.checks"),
    (lambda m: m["leak_check"].update(checks={"x": {"passed": "yes"}}), "leak_check.checks"),
    (lambda m: m["leak_check"].update(held_out=5), "leak_check.held_out is '5'"),
    (lambda m: m["leak_check"].update(seen="red"), "leak_check.seen"),
    (lambda m: m["leak_check"].update(counts={"train": 5}), "leak_check.counts"),
    (lambda m: m["leak_check"].update(counts={"train": {"red|1": -1}}), "leak_check.counts"),
    (lambda m: m["leak_check"].update(passed="true"), "leak_check.passed"),
    (lambda m: m["leak_check"].update(concepts="color"), "leak_check.concepts"),
    (lambda m: m.update(leak_check=[1]), "leak_check is '[1]', not a mapping"),
    (lambda m: m.update(leak_check="x"), "leak_check is 'x', not a mapping"),
], ids=["coverage_str", "coverage_null", "coverage_list", "checks_list", "check_passed_str", "held_out_int", "seen_str",
        "counts_int", "counts_negative", "passed_str", "concepts_str", "list", "str"])
def test_a_leak_check_of_another_shape_is_named_by_verify_repair_and_the_readers(made, tmp_path, edit, said):
    """``verify --repair`` writes the card's leak-check section from the manifest: a field of another type
    was a traceback (exit 1); now every reader names it, exit 2, and nothing is written."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    (ds / "README.md").unlink()  # --repair would write the card again
    _edit_manifest(ds, edit)
    before = _tree(ds)
    for args in (["verify", str(ds), "--repair"], ["verify", str(ds)], ["export", str(ds), "--out", str(tmp_path / "x"), "-f", "parquet"]):
        _clean_exit_2(runner.invoke(app, args), "manifest.json is damaged", said)
    assert _tree(ds) == before and not (tmp_path / "x").exists()
    with pytest.raises(DatasetError, match="leak_check"):
        MosaicDataset(ds, "train")


def test_a_leak_check_of_mosaics_shape_still_verifies_and_repairs(made, tmp_path):
    """The check refuses types only: a dataset as written verifies, and a lost card is written again,
    byte for byte the one generate wrote (its leak-check rows were in another order)."""
    ds = _copy(made, tmp_path)
    card = (ds / "README.md").read_bytes()
    (ds / "README.md").unlink()
    assert runner.invoke(app, ["verify", str(ds), "--repair"]).exit_code == 0
    assert (ds / "README.md").read_bytes() == card
    assert runner.invoke(app, ["verify", str(ds)]).exit_code == 0


# ------------------------------------------------------------------------------------------------
# COLUMNS no terminal has
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("columns", ["0", "1", "-5", "abc", "99999999", "٣٠"])
def test_an_error_is_printed_whatever_columns_says(tmp_path, columns):
    """``COLUMNS=0`` printed nothing (exit 2, an empty terminal), ``COLUMNS=1`` one letter a line: both
    the CLI's own errors and click's usage errors are printed whole."""
    env = {**os.environ, "COLUMNS": columns}
    missing = tmp_path / "nothere"
    r = subprocess.run([sys.executable, "-m", "mosaic.cli", "verify", str(missing)], capture_output=True, text=True, env=env, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Traceback" not in out, out
    assert f"{missing} is not a directory" in " ".join(out.split()), out
    r = subprocess.run([sys.executable, "-m", "mosaic.cli", "export", str(missing)], capture_output=True, text=True, env=env, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "Missing option" in out and "--format" in out, out


# ------------------------------------------------------------------------------------------------
# a person's folder where mosaic writes a file
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rel", ["train/metadata.jsonl", "train/images/000001.png", "README.md", "checksums.sha256"])
def test_overwrite_never_deletes_a_folder_of_files_standing_at_a_file_of_the_dataset(made, tmp_path, rel):
    spec, _ = made
    ds = _copy(made, tmp_path)
    (ds / rel).unlink()
    (ds / rel).mkdir()
    (ds / rel / "notes.txt").write_text("mine")
    r = runner.invoke(app, ["generate", str(spec), "--out", str(ds), "--overwrite"])
    _clean_exit_2(r, f"{rel}/", "move it out of the dataset")
    assert (ds / rel / "notes.txt").read_text() == "mine"
    r = runner.invoke(app, ["export", str(made[1]), "--out", str(ds), "--format", "parquet", "--overwrite"])
    assert r.exit_code == 2 and (ds / rel / "notes.txt").read_text() == "mine", r.output
    # moved out: the overwrite goes ahead, and an empty folder there is mosaic's to replace
    (ds / rel / "notes.txt").unlink()
    r = runner.invoke(app, ["generate", str(spec), "--out", str(ds), "--overwrite"])
    assert r.exit_code == 0, r.output
    assert (ds / rel).is_file()


def test_overwrite_of_a_parquet_dataset_keeps_a_folder_of_files_at_a_shards_name(made, tmp_path):
    pq = tmp_path / "pq"
    assert runner.invoke(app, ["export", str(made[1]), "--out", str(pq), "--format", "parquet"]).exit_code == 0
    shard = next((pq / "data").glob("train-*.parquet"))
    shard.unlink()
    shard.mkdir()
    (shard / "notes.txt").write_text("mine")
    r = runner.invoke(app, ["export", str(made[1]), "--out", str(pq), "--format", "parquet", "--overwrite"])
    _clean_exit_2(r, f"data/{shard.name}/")
    assert (shard / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------------------------------------
# a Parquet manifest's layout is read as data
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pq(made, tmp_path_factory):
    out = tmp_path_factory.mktemp("pq") / "pq"
    r = runner.invoke(app, ["export", str(made[1]), "--out", str(out), "--format", "parquet"])
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("value, said", [
    (-1, "rows_per_shard['train'] is '-1'"), (0, "rows_per_shard['train'] is '0'"), ("x", "rows_per_shard['train'] is 'x'"),
    (None, "rows_per_shard['train'] is 'None'"), (0.5, "'0.5'"), (True, "'True'"), (float("inf"), "'inf'"),
    (4, "the split's 1 shard(s) hold [8] rows"),
], ids=["negative", "zero", "str", "null", "fraction", "bool", "inf", "another_layout"])
def test_a_repair_by_an_edited_parquet_layout_is_refused_before_any_shard_is_deleted(pq, tmp_path, value, said):
    """``rows_per_shard: -1`` had ``verify --repair`` of a damaged shard delete the train shard and mark the
    dataset ``failed_leak_check``; ``0`` divided by zero; a string or null was a traceback."""
    ds = tmp_path / "pq"
    shutil.copytree(pq, ds)
    shard = next((ds / "data").glob("train-*.parquet"))
    shard.write_bytes(b"")  # damaged: a repair writes it again by the manifest's layout
    _edit_manifest(ds, lambda m: m["parquet"]["rows_per_shard"].update(train=value))
    before = _tree(ds)
    for args in (["verify", str(ds), "--repair"], ["verify", str(ds)]):
        _clean_exit_2(runner.invoke(app, args), "manifest.json is damaged", said)
    assert _tree(ds) == before and json.loads((ds / "manifest.json").read_text())["status"] == "complete"


@pytest.mark.parametrize("key, value, said", [
    ("shard_bytes", 0, "parquet.shard_bytes is '0'"), ("row_group_rows", "x", "parquet.row_group_rows is 'x'"),
    ("rows_per_shard", [1], "parquet.rows_per_shard is '[1]'"),
])
def test_a_parquet_layout_field_of_another_type_is_named_by_every_reader(pq, tmp_path, key, value, said):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = tmp_path / "pq"
    shutil.copytree(pq, ds)
    _edit_manifest(ds, lambda m: m["parquet"].update({key: value}))
    _clean_exit_2(runner.invoke(app, ["verify", str(ds)]), said)
    with pytest.raises(DatasetError, match="parquet"):
        MosaicDataset(ds, "train")


def test_a_resumed_parquet_generate_refuses_an_edited_layout_and_then_finishes(made, tmp_path):
    """An interrupted Parquet ``generate`` resumes by the manifest's layout: an edited one (``-3``, a
    record without its fields) is named before a shard is written; restored, the rerun finishes."""
    spec, _ = made
    out = tmp_path / "p"
    args = ["generate", str(spec), "--out", str(out), "--format", "parquet", "--set", "splits.train=40", "--shard-mb", "0.002"]
    assert runner.invoke(app, args).exit_code == 0
    _edit_manifest(out, lambda m: m.update(status="incomplete"))  # as an interrupted run leaves it
    good = (out / "manifest.json").read_text()
    for edit, said in ((lambda m: m["parquet"]["rows_per_shard"].update(train=-3), "rows_per_shard['train'] is '-3'"),
                       (lambda m: m.update(parquet={"train": 5}), "lacks shard_bytes, row_group_rows, rows_per_shard")):
        _edit_manifest(out, edit)
        before = _tree(out)
        _clean_exit_2(runner.invoke(app, args), "manifest.json is damaged", said, "--overwrite")
        assert _tree(out) == before
        (out / "manifest.json").write_text(good)
    assert runner.invoke(app, args).exit_code == 0
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


# ------------------------------------------------------------------------------------------------
# the manifest's renderer record is read as data
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, said", [
    ({"name": "nonexistent", "supersample": 4}, "renderer.name is 'nonexistent', not one of pillow, shaded"),
    ({"name": 5}, "renderer.name is '5'"),
    ({"name": "shaded", "supersample": 4}, "the manifest's spec is drawn flat"),
    ({"name": "pillow", "supersample": -1}, "renderer.supersample is '-1'"),
    ("pillow", "renderer is 'pillow', not a mapping"),
    (None, "renderer is 'None', not a mapping"),
], ids=["unknown", "number", "shaded_on_flat", "supersample", "str", "null"])
def test_a_renderer_record_of_another_shape_is_named_before_a_repair_renders(made, tmp_path, value, said):
    """``verify --repair`` renders the damaged samples again with the backend the manifest names: an
    unknown, null or string record, or ``shaded`` for a flat spec, was a traceback (exit 1)."""
    ds = _copy(made, tmp_path)
    (ds / "train" / "images" / "000001.png").unlink()
    _edit_manifest(ds, lambda m: m.update(renderer=value))
    before = _tree(ds)
    for args in (["verify", str(ds), "--repair"], ["verify", str(ds)]):
        _clean_exit_2(runner.invoke(app, args), "manifest.json is damaged", said)
    assert _tree(ds) == before


@pytest.mark.parametrize("key", ["parquet", "shards"])
def test_a_null_layout_or_shard_list_of_a_parquet_manifest_is_named(pq, tmp_path, key):
    """``"parquet": null`` (verify --repair) and ``"shards": null`` (verify, export) were tracebacks."""
    ds = tmp_path / "pq"
    shutil.copytree(pq, ds)
    next((ds / "data").glob("train-*.parquet")).write_bytes(b"")
    _edit_manifest(ds, lambda m: m.update({key: None}))
    before = _tree(ds)
    for args in (["verify", str(ds), "--repair"], ["export", str(ds), "--out", str(tmp_path / "x"), "-f", "imagefolder"]):
        _clean_exit_2(runner.invoke(app, args), "manifest.json is damaged", key)
    assert _tree(ds) == before and not (tmp_path / "x").exists()
