"""Hostile cases of a twenty-second attack on the data path (issue 23).

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack22: ...")``.
"""

from __future__ import annotations

import json
import shutil
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2, copy_dataset

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _ok(args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r


def _mark_unfinished(ds: Path) -> None:
    """``ds`` as an interrupted generate left it after every shard's part file was written: manifest
    incomplete, no merged metadata (finalize not run)."""
    p = ds / "manifest.json"
    man = json.loads(p.read_text())
    man["status"] = "incomplete"
    p.write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")
    for split in ("train", "val", "test_id", "test_ood"):
        (ds / split / "metadata.jsonl").unlink()


# ------------------------------------------------------------------------------------------------
# --overwrite: a person's file of mosaic's name shape, not listed by the dataset it replaces
# ------------------------------------------------------------------------------------------------

# fixed (was recorded): attack22: --overwrite deletes a person's file of mosaic's name shape (data/mine.parquet, images/999999.png) its manifest/metadata does not list



def test_export_overwrite_never_deletes_a_persons_parquet_file_in_data(made, tmp_path):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    (pq / "data" / "mine.parquet").write_bytes(b"my own table")
    r = runner.invoke(app, ["export", str(made[1]), "-f", "parquet", "-o", str(pq), "--overwrite"])
    if r.exit_code != 0:
        _clean_exit_2(r, "mine.parquet")
    assert (pq / "data" / "mine.parquet").read_bytes() == b"my own table"



@pytest.mark.parametrize("command", ["export", "generate"])
def test_overwrite_never_deletes_a_persons_png_its_metadata_does_not_list(made, tmp_path, command):
    photo = (made[1] / "train" / "images" / "000000.png").read_bytes() + b""  # any PNG: the person's
    if command == "export":
        pq, out = tmp_path / "pq", tmp_path / "if"
        _ok(["export", made[1], "-f", "parquet", "-o", pq])
        _ok(["export", pq, "-f", "imagefolder", "-o", out])
        args = ["export", pq, "-f", "imagefolder", "-o", out, "--overwrite"]
    else:
        out = copy_dataset(made, tmp_path)
        args = ["generate", made[0], "--out", out, "--overwrite"]
    (out / "train" / "images" / "999999.png").write_bytes(photo)
    r = runner.invoke(app, [str(a) for a in args])
    if r.exit_code != 0:
        _clean_exit_2(r, "999999.png")
    assert (out / "train" / "images" / "999999.png").read_bytes() == photo


@pytest.mark.parametrize("where", ["data/sub/notes.txt", "data/x.parquet/notes.txt"])
def test_export_overwrite_refuses_a_persons_folder_in_data(made, tmp_path, where):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    (pq / where).parent.mkdir(parents=True, exist_ok=True)
    (pq / where).write_text("mine")
    r = runner.invoke(app, ["export", str(made[1]), "-f", "parquet", "-o", str(pq), "--overwrite"])
    _clean_exit_2(r, where.rsplit("/", 1)[0])
    assert (pq / where).read_text() == "mine"


@pytest.mark.parametrize("where", ["train/images/mine/notes.txt", "train/images/000001.png/notes.txt", "val/notes/a.txt"])
def test_export_overwrite_refuses_a_persons_files_in_an_imagefolder_destination(made, tmp_path, where):
    pq, out = tmp_path / "pq", tmp_path / "if"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    _ok(["export", pq, "-f", "imagefolder", "-o", out])
    target = out / where
    if target.parent.is_file():
        target.parent.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("mine")
    r = runner.invoke(app, ["export", str(pq), "-f", "imagefolder", "-o", str(out), "--overwrite"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert target.read_text() == "mine"


# ------------------------------------------------------------------------------------------------
# verify --repair: a person's folder at a file name the dataset writes
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["checksums.sha256", "train/metadata.jsonl", "README.md", "manifest.json"])
def test_repair_never_deletes_a_persons_folder_at_a_dataset_file_name(made, tmp_path, name):
    ds = copy_dataset(made, tmp_path)
    (ds / name).unlink()
    (ds / name).mkdir()
    (ds / name / "notes.txt").write_text("mine")
    (ds / "train" / "images" / "000001.png").unlink()  # damage to repair
    r = runner.invoke(app, ["verify", str(ds), "--repair"])
    assert r.exit_code in (1, 2), r.output
    assert "Traceback" not in r.output
    assert (ds / name / "notes.txt").read_text() == "mine"


def test_generate_rerun_never_deletes_a_persons_folder_at_metadata(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    _mark_unfinished(ds)
    (ds / "val" / "metadata.jsonl").mkdir()
    (ds / "val" / "metadata.jsonl" / "notes.txt").write_text("mine")
    r = runner.invoke(app, ["generate", str(made[0]), "--out", str(ds)])
    if r.exit_code != 0:
        _clean_exit_2(r, "metadata.jsonl")
    assert (ds / "val" / "metadata.jsonl" / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------------------------------------
# generate resume: finished-shard records (.mosaic/parts) believed
# ------------------------------------------------------------------------------------------------

def _swap_records(ds: Path, a: int, b: int, whole: bool) -> None:
    """Swap the labels of train samples ``a`` and ``b`` in the train part file (header too, so the
    header and the records agree); ``whole``: every field but ``index`` and ``file_name``."""
    p = ds / ".mosaic" / "parts" / "train-000000.jsonl"
    lines = p.read_text().splitlines()
    head, recs = json.loads(lines[0]), [json.loads(ln) for ln in lines[1:]]
    assert not recs[a]["held_out"] and not recs[b]["held_out"] and recs[a]["concepts"] != recs[b]["concepts"]
    keys = [k for k in recs[a] if k not in ("index", "file_name", "split")] if whole else ["concepts"]
    for k in keys:
        recs[a][k], recs[b][k] = recs[b][k], recs[a][k]
    head["concepts"][a], head["concepts"][b] = head["concepts"][b], head["concepts"][a]
    p.write_text(json.dumps(head) + "\n" + "".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))


@pytest.mark.parametrize("whole", [False, True], ids=["concepts", "whole_record"])
def test_a_resumed_generate_never_merges_part_records_of_other_samples(made, tmp_path, whole):
    ds = copy_dataset(made, tmp_path)
    _mark_unfinished(ds)
    _swap_records(ds, 0, 1, whole)
    r = runner.invoke(app, ["generate", str(made[0]), "--out", str(ds)])
    if r.exit_code == 0:  # regenerating the shard is as good as refusing it: the records must be the spec's
        orig = (made[1] / "train" / "metadata.jsonl").read_bytes()
        assert (ds / "train" / "metadata.jsonl").read_bytes() == orig
    else:
        _clean_exit_2(r, "train-000000.jsonl")


def test_a_resumed_generate_never_takes_a_swapped_image_of_a_finished_shard(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    _mark_unfinished(ds)
    imgs = ds / "train" / "images"
    a, b = (imgs / "000000.png").read_bytes(), (imgs / "000001.png").read_bytes()
    (imgs / "000000.png").write_bytes(b)
    (imgs / "000001.png").write_bytes(a)
    r = runner.invoke(app, ["generate", str(made[0]), "--out", str(ds)])
    if r.exit_code == 0:
        assert (imgs / "000000.png").read_bytes() == a and (imgs / "000001.png").read_bytes() == b
    else:
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert runner.invoke(app, ["verify", str(ds)]).exit_code in ((0,) if r.exit_code == 0 else (0, 1))


def test_a_resumed_generate_refuses_a_part_file_claiming_a_held_out_label_on_train(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    _mark_unfinished(ds)
    p = ds / ".mosaic" / "parts" / "train-000000.jsonl"
    lines = p.read_text().splitlines()
    head, recs = json.loads(lines[0]), [json.loads(ln) for ln in lines[1:]]
    ood = json.loads((made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()[0])
    recs[0]["concepts"], recs[0]["held_out"] = ood["concepts"], False
    head["concepts"][0] = [ood["concepts"]["color"], ood["concepts"]["count"]]
    p.write_text(json.dumps(head) + "\n" + "".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    r = runner.invoke(app, ["generate", str(made[0]), "--out", str(ds)])
    _clean_exit_2(r, "train-000000.jsonl")


# ------------------------------------------------------------------------------------------------
# resumed training: exported weights whose record is damaged or missing
# ------------------------------------------------------------------------------------------------

from tests.test_attack_cases21 import _interrupted_run  # noqa: E402 - the run stopped after step 1 (best/ exported)


@pytest.mark.parametrize("record", [b"not json", None], ids=["damaged", "missing"])
def test_a_resumed_run_never_deletes_a_persons_file_beside_a_damaged_weights_record(drun, tmp_path, record):
    from mosaic.errors import MosaicError
    from mosaic.lab.diffusion import run_diffusion
    from tests.test_diffusion import config

    run = _interrupted_run(drun, tmp_path)
    if record is None:
        (run / "best" / "weights.json").unlink()
    else:
        (run / "best" / "weights.json").write_bytes(record)
    (run / "best" / "notes.txt").write_text("mine")
    try:
        run_diffusion(config(run, drun[1], steps=2, checkpoint_every=1), say=lambda s: None)
    except MosaicError as e:
        assert "notes.txt" in str(e) or "weights.json" in str(e)
    assert (run / "best" / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------------------------------------
# evaluator train --out again: a person's sub-folders
# ------------------------------------------------------------------------------------------------

def test_evaluator_train_again_keeps_a_persons_files_in_sub_folders(tmp_path):
    import yaml

    from mosaic.evaluation.learned import LearnedConfig, train_evaluator
    from mosaic.spec import parse_spec
    from tests.conftest import TINY_COUNT_SPEC

    ev = tmp_path / "ev"
    cfg = LearnedConfig(steps=2, batch_size=4, n_train=8, check_n=8, input_size=16, width=4, threads=1)
    spec = parse_spec(yaml.safe_load(TINY_COUNT_SPEC))
    train_evaluator(spec, ev, cfg)
    (ev / "notes" / "deep").mkdir(parents=True)
    (ev / "notes" / "deep" / "a.txt").write_text("mine")
    (ev / "model.safetensors.d").mkdir()
    (ev / "model.safetensors.d" / "b.txt").write_text("mine")
    train_evaluator(spec, ev, cfg)
    assert (ev / "notes" / "deep" / "a.txt").read_text() == "mine"
    assert (ev / "model.safetensors.d" / "b.txt").read_text() == "mine"
