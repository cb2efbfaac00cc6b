"""Variants of the faults attack round 22 found (issue 23), written after their fixes: the same classes
reached by other values, so each fix holds at its mechanism.

- ``--overwrite`` (``mosaic.foreign_names.foreign_names`` given the folder's own manifest): an image whose
  index is at or past its split's count, a mask likewise, a Parquet file not of a shard's name, a shard name
  of a finished dataset that its manifest does not list, a shard numbered past its count; what mosaic
  wrote (every listed image and shard) is still replaced;
- a resumed ``generate`` (``mosaic.part_files.check_resumed_record``): any change to a record of a part
  file the finishing process did not write (a caption, a position, a record of another split's index)
  is refused; an interrupted run's own part files still finish byte-identical to a clean run.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.foreign_names import foreign_names
from tests.conftest import ok_cli as _ok, clean_exit_2, copy_dataset

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _man(ds: Path) -> dict:
    return json.loads((ds / "manifest.json").read_text())


# ------------------------------------------------------------------------------------------------
# what --overwrite may delete: what the folder's own manifest lists
# ------------------------------------------------------------------------------------------------

def test_an_image_at_its_splits_count_is_foreign_and_the_last_listed_one_is_not(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    n = _man(ds)["splits"]["val"]["count"]
    (ds / "val" / "images" / f"{n:06d}.png").write_bytes(b"mine")
    assert foreign_names(ds, manifest=_man(ds)) == [f"val/images/{n:06d}.png"]
    assert foreign_names(ds) == []  # without the manifest only the name's shape is known
    (ds / "val" / "images" / f"{n:06d}.png").unlink()
    assert (ds / "val" / "images" / f"{n - 1:06d}.png").is_file()
    assert foreign_names(ds, manifest=_man(ds)) == []


def test_a_mask_past_its_count_and_a_temp_of_one_are_foreign(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    (ds / "train" / "masks").mkdir()
    n = _man(ds)["splits"]["train"]["count"]
    (ds / "train" / "masks" / "000000.png").write_bytes(b"ok")
    (ds / "train" / "masks" / f"{n + 3:06d}.png").write_bytes(b"mine")
    (ds / "train" / "images" / f".{n:06d}.png.tmp").write_bytes(b"mine too")
    with_masks = {**_man(ds), "masks": True}  # masks/ is judged by index only in a dataset made with masks
    assert sorted(foreign_names(ds, manifest=with_masks)) == sorted(
        [f"train/masks/{n + 3:06d}.png", f"train/images/.{n:06d}.png.tmp"])
    assert "train/masks" in foreign_names(ds, manifest=_man(ds))  # without masks, the whole folder is a person's


@pytest.mark.parametrize("name", ["train.parquet", "train-00000-of-00001.parquet.bak", "notes-00000-of-00001.parquet",
                                  "train-00001-of-00001.parquet", "train-00000-of-00002.parquet"])
def test_export_overwrite_keeps_a_parquet_file_its_manifest_does_not_list(made, tmp_path, name):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    (pq / "data" / name).write_bytes(b"my own table")
    r = runner.invoke(app, ["export", str(made[1]), "-f", "parquet", "-o", str(pq), "--overwrite"])
    _clean_exit_2(r, name)
    assert (pq / "data" / name).read_bytes() == b"my own table"


def test_export_overwrite_still_replaces_what_it_wrote(made, tmp_path):
    pq, out = tmp_path / "pq", tmp_path / "if"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    _ok(["export", made[1], "-f", "parquet", "-o", pq, "--overwrite"])
    _ok(["export", pq, "-f", "imagefolder", "-o", out])
    _ok(["export", pq, "-f", "imagefolder", "-o", out, "--overwrite"])
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


def test_an_unfinished_parquet_dataset_keeps_shard_names_of_its_splits_only(made, tmp_path):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    man = _man(pq)
    man["status"] = "incomplete"
    man.pop("shards")
    (pq / "data" / "train-00003-of-00009.parquet").write_bytes(b"an interrupted run's shard")  # of a split it has
    (pq / "data" / "test-00000-of-00001.parquet").write_bytes(b"mine")  # this dataset has no split "test"
    assert foreign_names(pq, manifest=man) == ["data/test-00000-of-00001.parquet"]


def test_a_manifest_with_counts_of_the_wrong_type_falls_back_to_the_shape(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    man = _man(ds)
    man["splits"]["train"]["count"] = "8"
    man["splits"]["val"] = [2]
    (ds / "train" / "images" / "999999.png").write_bytes(b"x")
    assert foreign_names(ds, manifest=man) == []
    assert foreign_names(ds, manifest={"splits": "no"}) == []


# ------------------------------------------------------------------------------------------------
# a resumed generate: part files it did not write hold the spec's records, byte for byte
# ------------------------------------------------------------------------------------------------

def _unfinished(made, tmp_path) -> Path:
    from tests.test_attack_cases22 import _mark_unfinished

    ds = copy_dataset(made, tmp_path)
    _mark_unfinished(ds)
    return ds


def _edit_record(ds: Path, split: str, k: int, edit) -> None:
    p = ds / ".mosaic" / "parts" / f"{split}-000000.jsonl"
    lines = p.read_text().splitlines()
    rec = json.loads(lines[1 + k])
    edit(rec)
    lines[1 + k] = json.dumps(rec, sort_keys=True)
    p.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("field", ["caption", "objects", "extra"])
def test_a_resumed_generate_refuses_any_edit_of_a_record_it_did_not_write(made, tmp_path, field):
    ds = _unfinished(made, tmp_path)

    def edit(rec):
        if field == "caption":
            rec["caption"] = rec["caption"] + " (edited)"
        elif field == "objects":
            rec["scene"]["objects"][0]["bbox"] = [0, 0, 1, 1]
        else:
            rec["note"] = "planted"

    _edit_record(ds, "val", 0, edit)
    r = runner.invoke(app, ["generate", str(made[0]), "--out", str(ds)])
    _clean_exit_2(r, "val-000000.jsonl")
    assert "delete it and rerun" in " ".join(r.output.split())
    (ds / ".mosaic" / "parts" / "val-000000.jsonl").unlink()  # the fix the message gives
    _ok(["generate", made[0], "--out", ds])
    for split in ("train", "val", "test_id", "test_ood"):
        assert (ds / split / "metadata.jsonl").read_bytes() == (made[1] / split / "metadata.jsonl").read_bytes()


def test_a_resumed_generate_finishes_its_own_part_files_byte_identical(made, tmp_path):
    ds = _unfinished(made, tmp_path)
    (ds / ".mosaic" / "parts" / "train-000000.jsonl").unlink()  # one shard rendered again, the rest resumed
    _ok(["generate", made[0], "--out", ds])
    for split in ("train", "val", "test_id", "test_ood"):
        assert (ds / split / "metadata.jsonl").read_bytes() == (made[1] / split / "metadata.jsonl").read_bytes()
    assert runner.invoke(app, ["verify", str(ds)]).exit_code == 0


def test_a_resumed_shaded_generate_checks_its_records_in_chunks_and_matches_a_clean_run(tmp_path):
    """The resumed-record check samples shaded layouts in chunks (``prefetch_scenes``) from each part's start; an
    odd shard size puts the chunks off the render's, and the merged records must still be the clean run's."""
    import shutil

    import yaml

    from mosaic.dataset import generate
    from mosaic.spec import load_spec

    data = yaml.safe_load(Path("experiments/specs/clevr_cogent.yaml").read_text())
    data["splits"], data["image"]["size"] = {"train": 23, "val": 3, "test_id": 3, "test_ood": 3}, 32
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    spec = load_spec(tmp_path / "s.yaml")
    generate(spec, tmp_path / "a", shard_size=7)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    from tests.test_attack_cases22 import _mark_unfinished

    _mark_unfinished(tmp_path / "b")
    (tmp_path / "b" / ".mosaic" / "parts" / "train-000001.jsonl").unlink()
    generate(spec, tmp_path / "b", shard_size=7)
    for split in ("train", "val", "test_id", "test_ood"):
        assert (tmp_path / "b" / split / "metadata.jsonl").read_bytes() == (tmp_path / "a" / split / "metadata.jsonl").read_bytes()
