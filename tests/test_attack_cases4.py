"""Hostile cases of a fourth attack on the data path (issue 23), each closed at its mechanism:

- JSON files read from folders nested 100k deep raised RecursionError where readers caught only
  ValueError: one parser now (``mosaic.io.loads_json`` / ``read_json``) that names it as damage;
- a checkpoint record listing a file name with a NUL byte crashed ``os.lstat``;
- ``mosaic sample`` (and ``analyze``) read the run's dataset without the quick check;
- exported weights (``best/``, ``final/``) carried no run id: another run's were sampled as this run's;
- ``mosaic evaluate`` scored an image reached through a link (possibly outside the folder);
- a learned evaluator's ``config.json`` sized the network before the weights were compared;
- a manifest's split counts were not checked against its spec (repair IndexError, 10**30 hung);
- ``mosaic report`` collected a trial folder copied in from another sweep;
- a desktop's ``.DS_Store`` inside ``images/`` passed ``verify`` though stray files are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import DatasetError, MosaicError
from tests.conftest import clean_exit_2 as _clean_exit_2

runner = CliRunner()


def _copy_run(drun, tmp_path: Path, with_data: bool = False) -> tuple[Path, Path]:
    src, data = drun
    run = tmp_path / "run"
    shutil.copytree(src, run, symlinks=True)
    if with_data:
        data = tmp_path / "data"
        shutil.copytree(drun[1], data, symlinks=True)
        rec = json.loads((run / "dataset.json").read_text())
        rec["path"] = str(data.resolve())
        (run / "dataset.json").write_text(json.dumps(rec))
    return run, data


DEEP = "{\"a\":" * 100_000 + "1" + "}" * 100_000


# ------------------------------------------------------------------------------------------------
# case 16: one JSON parser for files read from folders
# ------------------------------------------------------------------------------------------------

def test_deep_json_is_named_damage_in_every_reader(tmp_path, drun):
    from mosaic.io import JSONReadError, loads_json, read_json
    from mosaic.records import read_manifest

    with pytest.raises(JSONReadError, match="nested too deep"):
        loads_json(DEEP)
    (tmp_path / "x.json").write_text("[" * 100_000)
    with pytest.raises(ValueError):  # a JSONReadError is a ValueError: every `except ValueError` reader catches it
        read_json(tmp_path / "x.json")
    run, data = _copy_run(drun, tmp_path, with_data=True)
    (run / "metrics.json").write_text(DEEP)
    res = runner.invoke(app, ["analyze", str(run), "--what", "probes"])
    _clean_exit_2(res, "metrics.json", "damaged")
    (data / "manifest.json").write_text(DEEP)
    with pytest.raises(DatasetError, match="damaged"):
        read_manifest(data)


# ------------------------------------------------------------------------------------------------
# case 15: a checkpoint record's file names
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["x\u0000", "y" * 5000], ids=["nul", "too_long"])
def test_a_checkpoint_record_naming_an_impossible_file_is_refused(tmp_path, drun, name):
    from mosaic.lab.checkpoint import CheckpointError, read_record

    ck = tmp_path / "checkpoint-0000002"
    shutil.copytree(drun[0] / "checkpoints" / "checkpoint-0000002", ck)
    rec = json.loads((ck / "checkpoint.json").read_text())
    rec["files"] = {name: {"bytes": 1, "sha256": "0"}, **rec["files"]}
    (ck / "checkpoint.json").write_text(json.dumps(rec))
    with pytest.raises(CheckpointError, match="checkpoint.json is damaged"):
        read_record(ck, None)


# ------------------------------------------------------------------------------------------------
# case 05: sample reads the run's dataset after the quick check
# ------------------------------------------------------------------------------------------------

def test_sample_refuses_a_damaged_dataset_of_the_run(tmp_path, drun):
    run, data = _copy_run(drun, tmp_path, with_data=True)
    p = data / "test_ood" / "metadata.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    rows[0]["concepts"]["color"] = "green" if rows[0]["concepts"]["color"] != "green" else "red"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = runner.invoke(app, ["sample", str(run), "--out", str(tmp_path / "s"), "--no-score"])
    _clean_exit_2(res, "is damaged", "test_ood/metadata.jsonl")
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------------------
# case 07: exported weights record their run
# ------------------------------------------------------------------------------------------------

def test_exported_weights_of_another_run_or_altered_are_refused(tmp_path, drun):
    from mosaic.lab.checkpoint import WEIGHTS_RECORD, check_weights_file

    run, _ = _copy_run(drun, tmp_path)
    for part in ("best", "final"):
        rec = json.loads((run / part / WEIGHTS_RECORD).read_text())
        assert rec["run_id"] == json.loads((run / "run.json").read_text())["id"]
        assert "conditioner.safetensors" in rec["files"] and "backbone/diffusion_pytorch_model.safetensors" in rec["files"]
    own = (run / "run.json").read_text()
    (run / "run.json").write_text(json.dumps({"id": "f" * 32}))  # as if best/ and final/ were copied in from another run
    res = runner.invoke(app, ["sample", str(run), "--out", str(tmp_path / "s"), "--no-score"])
    _clean_exit_2(res, "belongs to another run")
    assert not (tmp_path / "s").exists()
    (run / "run.json").write_text(own)
    f = run / "final" / "conditioner.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF  # same size, another byte
    f.write_bytes(bytes(data))
    with pytest.raises(MosaicError, match="damaged or replaced"):
        check_weights_file(f, run / "final")
    (run / "best" / WEIGHTS_RECORD).unlink()  # removed beside final/'s record: refused (attack round 23)
    with pytest.raises(MosaicError, match="is missing, while"):
        check_weights_file(run / "best" / "conditioner.safetensors", run / "best")
    (run / "final" / WEIGHTS_RECORD).unlink()  # weights exported before the record existed (none in the run) are read unchecked
    check_weights_file(run / "best" / "conditioner.safetensors", run / "best")


# ------------------------------------------------------------------------------------------------
# case 10: evaluate scores the folder's own files only
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["symlink", "symlinked_folder", "hardlink"])
def test_evaluate_refuses_images_reached_through_links(tmp_path, drun, how):
    data = drun[1]
    ev = tmp_path / "ev"
    shutil.copytree(data / "test_id", ev)
    outside = data / "train" / "images" / "000003.png"
    first = ev / "images" / "000000.png"
    if how == "symlink":
        first.unlink()
        os.symlink(outside, first)
    elif how == "hardlink":
        shutil.copyfile(outside, tmp_path / "other.png")
        first.unlink()
        os.link(tmp_path / "other.png", first)
    else:
        shutil.rmtree(ev / "images")
        os.symlink(data / "test_id" / "images", ev / "images")
    res = runner.invoke(app, ["evaluate", str(ev), "--spec", str(data), "--check-n", "0"])
    _clean_exit_2(res, "hard link" if how == "hardlink" else "symbolic link")


# ------------------------------------------------------------------------------------------------
# case 14: a learned evaluator's config is checked against its weights before a net is built
# ------------------------------------------------------------------------------------------------

def test_an_evaluator_config_that_does_not_fit_its_weights_is_refused_before_building(tmp_path):
    from mosaic.evaluation.learned import LearnedConfig, LearnedEvaluator, train_evaluator
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC as D_SPEC

    spec = parse_spec(D_SPEC)
    out = tmp_path / "ev"
    train_evaluator(spec, out, LearnedConfig(steps=1, n_train=8, batch_size=4, check_n=0, threads=1, input_size=16, width=4, hidden=8))
    assert LearnedEvaluator.load(out, spec).config.width == 4
    meta = json.loads((out / "config.json").read_text())
    meta["config"].update(input_size=64, width=64, hidden=512)
    (out / "config.json").write_text(json.dumps(meta))
    with pytest.raises(MosaicError, match="does not describe model.safetensors"):
        LearnedEvaluator.load(out, spec)


# ------------------------------------------------------------------------------------------------
# cases 18 and 19: a manifest's split counts are its spec's
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit", [("train", 1000), ("train", 10**30), ("extra", 3)], ids=["more", "huge", "extra_split"])
def test_manifest_counts_that_are_not_the_specs_are_refused(tmp_path, drun, edit):
    from mosaic.torch_data import MosaicDataset

    ds = tmp_path / "ds"
    shutil.copytree(drun[1], ds)
    man = json.loads((ds / "manifest.json").read_text())
    man["splits"][edit[0]] = {"count": edit[1]}
    (ds / "manifest.json").write_text(json.dumps(man))
    t0 = time.perf_counter()
    for args in (["verify", str(ds)], ["verify", str(ds), "--repair"]):
        res = runner.invoke(app, args)
        _clean_exit_2(res, "manifest.json is damaged", "its spec" if edit[0] == "train" else "not a split of its spec")
    with pytest.raises(DatasetError, match="manifest.json is damaged"):
        MosaicDataset(ds, "train")
    assert time.perf_counter() - t0 < 30


# ------------------------------------------------------------------------------------------------
# case 22: report collects the sweep's own trials only
# ------------------------------------------------------------------------------------------------

def test_report_refuses_a_trial_folder_of_another_sweep(tmp_path):
    from mosaic.sweep import SweepError, trial_id
    from mosaic.trials import collect, read_status, write_status
    from tests.test_sweep import fake_trial

    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "mine", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"training.lr": [0.001]}, "seeds": [0, 1]}))
    fake_trial(out, {"training.lr": 0.001, "seed": 0}, "done", 0.5, 0.9)
    assert len(collect(out)) == 1
    foreign = fake_trial(out, {"training.lr": 0.002, "seed": 0}, "done", 0.9, 0.9)  # copied in from another sweep
    with pytest.raises(SweepError, match="not a trial of sweep 'mine'") as e:
        collect(out)
    assert foreign.name in str(e.value)
    res = runner.invoke(app, ["report", str(out)])
    _clean_exit_2(res, foreign.name)
    shutil.rmtree(foreign)
    # the same axis values, but trial.json says another sweep ran it
    other = fake_trial(out, {"training.lr": 0.001, "seed": 1}, "done", 0.9, 0.9)
    write_status(other, {**read_status(other), "sweep": "theirs"})
    with pytest.raises(SweepError, match="trial of sweep 'theirs'"):
        collect(out)
    write_status(other, {**read_status(other), "sweep": "mine", "values": {"training.lr": 0.5, "seed": 1}})
    with pytest.raises(SweepError, match="names trial"):
        collect(out)
    assert other.name == trial_id({"training.lr": 0.001, "seed": 1})


# ------------------------------------------------------------------------------------------------
# docs mismatch: a desktop's files are stray like any other
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["train/images/.DS_Store", "train/Thumbs.db"])
def test_a_desktop_file_inside_a_split_is_a_stray_file(tmp_path, drun, where):
    ds = tmp_path / "ds"
    shutil.copytree(drun[1], ds)
    (ds / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")  # dot-names in the root are allowed
    assert runner.invoke(app, ["verify", str(ds)]).exit_code == 0
    (ds / where).write_bytes(b"\x00\x00\x00\x01Bud1")
    res = runner.invoke(app, ["verify", str(ds)])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output  # verify's exit status for a damaged dataset
    assert f"{where}: stray" in res.output
