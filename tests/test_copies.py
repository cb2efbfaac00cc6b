"""Training-set copies (mosaic.evaluation.copies, evaluate --copies): exact on planted copies and
on fresh renders, and refusing what it cannot measure."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import MosaicError
from mosaic.evaluation.copies import COPY_QUANTILE, copy_stats, nearest_rmse
from mosaic.evaluation.folder import training_copies

SPEC = {
    "name": "copies", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square"]}},
    "objects": [{"name": "obj", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.3}],
    "holdout": {"concepts": ["color", "shape"], "rule": {"kind": "explicit", "combinations": [["red", "circle"]]}},
    "splits": {"train": 120, "val": 6, "test_id": 60, "test_ood": 12, "per": "total"},
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    out = tmp_path_factory.mktemp("copies") / "ds"
    generate(parse_spec(SPEC), out)
    return out


def _folder_from(src: Path, dst: Path, held_out: bool | None = None) -> Path:
    """A samples-like folder: the images and records of a dataset split."""
    shutil.copytree(src, dst)
    if held_out is not None:
        rows = [json.loads(line) for line in (dst / "metadata.jsonl").read_text().splitlines()]
        (dst / "metadata.jsonl").write_text("".join(json.dumps({**r, "held_out": held_out}) + "\n" for r in rows))
    return dst


def test_nearest_rmse_is_the_brute_force_nearest_image():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 256, (40, 8, 8, 3), dtype=np.uint8)
    q = np.concatenate([train[[3, 17]], rng.integers(0, 256, (5, 8, 8, 3), dtype=np.uint8)])
    d, j = nearest_rmse(q, train, chunk=3)
    brute = np.sqrt(((q[:, None].astype(float) - train[None].astype(float)) ** 2).mean((2, 3, 4)))
    assert np.allclose(d, brute.min(1)) and (j == brute.argmin(1)).all()
    assert d[0] == 0.0 and d[1] == 0.0 and j[0] == 3 and j[1] == 17 and (d[2:] > 50).all()
    with pytest.raises(ValueError):
        nearest_rmse(q, train[:, :4])


def test_copied_training_images_are_copies_and_fresh_renders_are_not(dataset):
    from mosaic.evaluation.folder import load_images, read_folder

    def arr(split):
        return np.stack(load_images(dataset / split, read_folder(dataset / split)))

    train, ref = arr("train"), arr("test_id")
    copied = copy_stats(train[:50], train, ref)
    assert copied["samples"]["copy_share"] == 1.0 and copied["samples"]["median_rmse"] == 0.0 and copied["ratio"] == 0.0
    fresh = copy_stats(ref[30:], train, ref[:30])  # new renders against new renders: about the quantile
    assert fresh["samples"]["copy_share"] <= 4 * COPY_QUANTILE and 0.6 < fresh["ratio"] < 1.6
    assert fresh["reference"]["threshold"] > 0


def test_training_copies_measures_only_seen_samples_and_names_its_splits(tmp_path, dataset):
    s = _folder_from(dataset / "train", tmp_path / "samples")
    r = training_copies(s, dataset)
    assert r["samples"]["copy_share"] == 1.0 and r["samples"]["n"] == 120
    assert r["reference"]["split"] == "test_id" and r["train"] == {"n": 120, "split": "train"}
    held = _folder_from(dataset / "train", tmp_path / "held", held_out=True)
    with pytest.raises(MosaicError, match="no images of seen combinations"):
        training_copies(held, dataset)
    fresh = training_copies(_folder_from(dataset / "test_id", tmp_path / "fresh"), dataset, reference="val")
    assert fresh["reference"]["split"] == "val" and fresh["samples"]["copy_share"] < 0.5


def test_training_copies_refuses_what_it_cannot_compare(tmp_path, dataset):
    with pytest.raises(MosaicError, match="not a mosaic dataset: manifest.json is missing"):
        training_copies(dataset / "train", tmp_path)  # not a dataset
    with pytest.raises(MosaicError, match="no metadata.jsonl"):
        training_copies(tmp_path, dataset)  # not a samples folder
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    big = tmp_path / "big"
    generate(parse_spec({**SPEC, "image": {"size": 24}}), big)
    with pytest.raises(MosaicError, match="24x24 px and the training images"):
        training_copies(big / "test_id", dataset)


def test_evaluate_copies_prints_and_writes_the_measure_and_a_bad_dataset_exits_2(tmp_path, dataset):
    s = _folder_from(dataset / "test_ood", tmp_path / "s")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    r = CliRunner().invoke(app, ["evaluate", str(dataset / "test_id"), "--spec", str(spec), "--check-n", "0",
                                 "--copies", str(dataset), "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert "copies:" in r.output.replace("\n", " ")
    m = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert m["copies"]["samples"]["n"] == 60 and m["copies"]["dataset"] == str(dataset)
    r = CliRunner().invoke(app, ["evaluate", str(s), "--spec", str(spec), "--check-n", "0", "--copies", str(tmp_path / "nowhere"),
                                 "-o", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "Traceback" not in r.output and "--copies" in r.output
    assert not (tmp_path / "o2" / "metrics.json").exists()


def test_the_dataset_is_checked_before_its_images_are_read(dataset, tmp_path):
    """--copies reads the training set like every other reader: damage, stray files, a folder that is
    no dataset and a decompression bomb in a split are refused with a named error, nothing decoded."""
    from PIL import Image

    samples = _folder_from(dataset / "test_id", tmp_path / "samples")
    # a folder of splits without a manifest is no dataset
    fake = tmp_path / "fake"
    shutil.copytree(dataset / "train", fake / "train")
    shutil.copytree(dataset / "test_id", fake / "test_id")
    with pytest.raises(MosaicError, match="manifest"):
        training_copies(samples, fake)
    # a stray file and an overwritten image: refused (the quick check), named
    dmg = tmp_path / "dmg"
    shutil.copytree(dataset, dmg)
    (dmg / "train" / "stray.txt").write_text("x")
    shutil.copy(dmg / "train" / "images" / "000001.png", dmg / "train" / "images" / "000000.png")
    with pytest.raises(MosaicError, match=r"--copies.*checked|damaged") as e:
        training_copies(samples, dmg)
    assert "stray.txt" in str(e.value) or "000000.png" in str(e.value)
    res = CliRunner().invoke(app, ["evaluate", str(samples), "--spec", str(dataset), "--copies", str(dmg), "--check-n", "0"])
    assert res.exit_code == 2 and "Traceback" not in res.output and "damaged" in res.output
    # a large image of a small file among the samples is refused from its header (the spec's pixel bound)
    bomb = _folder_from(dataset / "test_id", tmp_path / "bomb")
    Image.new("RGB", (6000, 6000)).save(bomb / "images" / "000000.png")
    with pytest.raises(MosaicError, match="pixel"):
        training_copies(bomb, dataset)


def test_a_file_name_the_file_system_refuses_is_named(dataset, tmp_path):
    """evaluate on a folder whose record names a 300-character file: exit 2 naming the record's
    file_name, not an OSError traceback (attack case 09)."""
    s = _folder_from(dataset / "test_id", tmp_path / "s")
    rows = [json.loads(line) for line in (s / "metadata.jsonl").read_text().splitlines()]
    rows[0]["file_name"] = "images/" + "a" * 300 + ".png"
    (s / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = CliRunner().invoke(app, ["evaluate", str(s), "--spec", str(dataset), "--check-n", "0"])
    assert res.exit_code == 2 and "Traceback" not in res.output and "cannot be opened" in res.output, res.output
