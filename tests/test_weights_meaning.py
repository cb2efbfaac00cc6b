"""What weights mean is recorded with them and compared on every read (attack round 18, issue 23).

A run's exported weights record the config's ``model`` section (``weights.json``'s ``model``): a
``config.yaml`` edited in what they mean is refused by readers and by a resumed training; a record
written before the field is read as before (:func:`mosaic.lab.checkpoint.check_weights_meaning`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import TrainingError
from mosaic.lab.checkpoint import check_weights_meaning, meaning_difference, read_weights_record
from mosaic.lab.run_folder import RunFolder
from tests.conftest import clean_exit_2

runner = CliRunner()


def test_the_first_differing_field_is_named_and_fields_of_one_side_only_are_none():
    rec = {"a": 1, "s": {"p": "epsilon", "t": 1000}, "latent": None}
    assert meaning_difference(rec, {**rec, "new_field": 3}) is None  # a field of a later mosaic
    assert meaning_difference(rec, {"a": 1, "s": {"p": "v", "t": 500}, "latent": None}) == ("model.s.p", "epsilon", "v")
    assert meaning_difference(rec, {**rec, "latent": {"path": "x"}}) == ("model.latent", None, {"path": "x"})


def test_a_record_without_the_model_section_is_read_as_before(tmp_path):
    check_weights_meaning({"format": "mosaic-weights/1", "files": {}}, {"a": 1}, tmp_path / "config.yaml", tmp_path)
    check_weights_meaning(None, {"a": 1}, tmp_path / "config.yaml", tmp_path)
    with pytest.raises(TrainingError, match=r"model\.a.*config\.yaml.*1.*2"):
        check_weights_meaning({"model": {"a": 2}}, {"a": 1}, tmp_path / "config.yaml", tmp_path)


def _edited_copy(drun, tmp_path, old="prediction_type: epsilon", new="prediction_type: v_prediction") -> Path:
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    text = (run / "config.yaml").read_text()
    assert old in text
    (run / "config.yaml").write_text(text.replace(old, new))
    return run


def test_the_weights_record_their_model_section(drun):
    from mosaic.lab.diffusion.config import DiffusionConfig

    run = RunFolder(drun[0])
    rec = read_weights_record(run.best)
    cfg = DiffusionConfig.model_validate(run.read_config())
    assert rec["model"]["schedule"]["prediction_type"] == cfg.model.schedule.prediction_type
    assert rec["model"]["conditioning"] == cfg.model.conditioning


def test_weights_exported_before_the_record_held_the_model_are_sampled_as_before(drun, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    for d in ("best", "final"):
        p = run / d / "weights.json"
        rec = json.loads(p.read_text())
        del rec["model"]
        p.write_text(json.dumps(rec))
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("prediction_type: epsilon", "prediction_type: v_prediction"))
    r = runner.invoke(app, ["sample", str(run), "--out", str(tmp_path / "s"), "--no-score"])
    assert r.exit_code == 0, r.output


def test_an_unedited_run_is_sampled(drun, tmp_path):
    r = runner.invoke(app, ["sample", str(drun[0]), "--out", str(tmp_path / "s"), "--no-score"])
    assert r.exit_code == 0, r.output


def test_analyze_refuses_an_edited_config(drun, tmp_path):
    run = _edited_copy(drun, tmp_path)
    clean_exit_2(runner.invoke(app, ["analyze", str(run)]), "config.yaml", "model.schedule.prediction_type")


def test_a_resumed_training_refuses_a_config_edited_in_what_its_weights_mean(drun, tmp_path):
    from mosaic.lab.loop import Task, _check_resumed_meaning

    run = RunFolder(tmp_path / "run")
    shutil.copytree(drun[0], run.root, symlinks=True)
    meaning = dict(read_weights_record(run.best)["model"])

    class T(Task):
        def weights_meaning(self):
            return meaning

    _check_resumed_meaning(T(), run)  # the same meaning: resumed
    meaning["conditioning"] = "combination" if meaning["conditioning"] != "combination" else "factorized"
    with pytest.raises(TrainingError, match="model.conditioning"):
        _check_resumed_meaning(T(), run)
