"""Variants of the faults attack round 20 found (issue 23), written after their fixes: the same classes
reached by other values, so each fix holds at its mechanism.

- a samples folder made again (``mosaic.lab.diffusion.scoring._foreign_images``): a PNG of mosaic's own name
  that its ``metadata.jsonl`` does not list, a symbolic link standing in ``images/``, an unreadable list;
- an autoencoder folder (``mosaic.lab.autoencoder_files.own_training_folder``, ``read_check``): a check edited
  the other way (``"passed": false`` over passing numbers) or with its numbers removed is measured again, never
  believed; a person's file inside an unfinished training's ``partial/checkpoint/``; a trained folder whose weights
  file is gone is trained again, not reported as trained;
- ``--json`` (``mosaic.cli.common._refuse_foreign_json``): a JSON list, or a JSON mapping of someone else's, at
  the path is kept; an earlier report of the command is replaced.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import QUICK_SAMPLE, clean_exit_2, sampled, tiny_autoencoder

runner = CliRunner()
_SAMPLE = QUICK_SAMPLE


@pytest.fixture
def samples(drun, tmp_path):
    return sampled(drun, tmp_path)


def test_sample_again_keeps_a_png_its_list_does_not_name(samples):
    run, out = samples
    n = len((out / "metadata.jsonl").read_text().splitlines())
    extra = out / "images" / f"{n + 5:06d}.png"
    shutil.copy(next((out / "images").iterdir()), extra)
    r = runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)])
    clean_exit_2(r, extra.name, collapse_space=True)
    assert extra.is_file()


def test_sample_again_keeps_a_link_standing_in_images(samples, tmp_path):
    run, out = samples
    target = tmp_path / "mine.txt"
    target.write_text("mine")
    os.symlink(target, out / "images" / "000000.png.bak")
    r = runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)])
    clean_exit_2(r, "000000.png.bak", collapse_space=True)
    assert (out / "images" / "000000.png.bak").is_symlink() and target.read_text() == "mine"


def test_sample_again_with_an_unreadable_list_deletes_nothing(samples):
    run, out = samples
    before = sorted(os.listdir(out / "images"))
    (out / "metadata.jsonl").write_bytes(b"\xff\xfe not json")
    r = runner.invoke(app, ["sample", str(run), *_SAMPLE, "--out", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert sorted(os.listdir(out / "images")) == before


@pytest.fixture(scope="module")
def ae(tmp_path_factory):
    return tiny_autoencoder(tmp_path_factory, "ae20v", steps=2)


@pytest.mark.parametrize("edit", ["passed-false-over-passing-numbers", "numbers-removed"])
def test_an_autoencoder_check_whose_verdict_does_not_follow_from_its_numbers_is_measured_again(ae, tmp_path, edit, monkeypatch):
    import mosaic.lab.autoencoder as ae_mod
    from mosaic.lab.autoencoder import check_key, checked

    src, sec, spec, saved = ae
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    p = f / f"check-{check_key(sec, spec)}.json"
    d = json.loads(p.read_text())
    assert d["passed"] is True  # threshold 0: the tiny autoencoder passes
    if edit == "numbers-removed":
        d.pop("accuracy")
    else:
        d["passed"] = False
    p.write_text(json.dumps(d))
    calls = []
    real = ae_mod.check_autoencoder
    monkeypatch.setattr(ae_mod, "check_autoencoder", lambda *a, **k: calls.append(1) or real(*a, **k))
    res = checked(f, sec, spec, say=lambda m: None)
    assert calls, "the edited check was believed instead of measured again"
    assert res["passed"] is True


def test_a_persons_file_in_an_unfinished_trainings_checkpoint_is_kept(tmp_path):
    from mosaic.errors import TrainingError
    from mosaic.lab.autoencoder_files import own_training_folder

    out = tmp_path / "ae"
    ck = out / "partial" / "checkpoint"
    ck.mkdir(parents=True)
    (ck / "state.json").write_text("{}")
    (ck / "notes.txt").write_text("mine")
    with pytest.raises(TrainingError, match="notes.txt"):
        own_training_folder(out)
    (ck / "notes.txt").unlink()
    (out / "vae").mkdir()
    (out / "vae" / "config.json").write_text("{}")
    assert own_training_folder(out) == out  # an unfinished training's own vae/ beside its checkpoint


def test_a_trained_folder_whose_weights_are_gone_is_trained_again(ae, tmp_path):
    from mosaic.lab.autoencoder import train_autoencoder

    src, sec, spec, _ = ae
    f = tmp_path / "ae"
    shutil.copytree(src, f)
    (f / "vae" / "diffusion_pytorch_model.safetensors").unlink()
    rec = train_autoencoder(sec, spec, f, say=lambda m: None, progress=False)
    assert not rec.get("already_trained")
    assert (f / "vae" / "diffusion_pytorch_model.safetensors").is_file()


@pytest.mark.parametrize("content", ["[1, 2, 3]", '{"my": "notes"}'])
def test_json_report_never_replaces_another_json_file(made, tmp_path, content):
    f = tmp_path / "notes.json"
    f.write_text(content)
    r = runner.invoke(app, ["evaluator", "check", str(made[0]), "--n", "4", "--json", str(f)])
    clean_exit_2(r, "--json", collapse_space=True)
    assert f.read_text() == content


def test_json_report_replaces_its_own_earlier_report(made, tmp_path):
    f = tmp_path / "r.json"
    for _ in range(2):
        r = runner.invoke(app, ["evaluator", "check", str(made[0]), "--n", "4", "--json", str(f)])
        assert r.exit_code == 0, r.output
    assert "accuracy" in json.loads(f.read_text())
    assert Path(f).is_file()
