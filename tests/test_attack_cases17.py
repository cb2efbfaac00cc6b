"""Hostile cases of a seventeenth attack on the data path (issue 23).

What broke, and the mechanism that closes it:

- **A manifest whose stored ``leak_check`` is of another shape** (``coverage: "abc"``, ``checks`` a
  list, ``counts`` of a number, ``leak_check`` a string) made ``verify --repair`` (which writes the
  card's leak-check section from it) a Python traceback, exit 1: the manifest check every reader and
  writer passes through (``mosaic.verify.read_manifest``) names the field and the value
  (:func:`mosaic.tally.report_shape_problem`), exit 2.
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
from tests.conftest import ROOT, clean_exit_2

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _copy(made, tmp_path, name="ds") -> Path:
    ds = tmp_path / name
    shutil.copytree(made[1], ds)
    return ds


def _edit_manifest(ds: Path, edit) -> None:
    p = ds / "manifest.json"
    man = json.loads(p.read_text())
    edit(man)
    p.write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")


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
