"""Hostile cases of a sixth attack on the data path (issue 23), each closed at its mechanism:

- a run folder whose ``run.json`` was removed (or replaced by a FIFO, folder or link) had no id, so
  ``best/`` weights of another run (their ``weights.json`` naming that run) were sampled as its own;
- a samples folder's ``sampling.json`` that is JSON but not a mapping was an AttributeError traceback;
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app

runner = CliRunner()


def _clean_exit_2(res, *needles):
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    for n in needles:
        assert n in res.output, res.output


@pytest.fixture(scope="module")
def drun(tmp_path_factory):
    """A finished 2-step diffusion run and its dataset (16 px, tiny UNet)."""
    from mosaic.dataset import generate
    from mosaic.lab.diffusion import run_diffusion
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC as D_SPEC, config

    base = tmp_path_factory.mktemp("drun6")
    generate(parse_spec(D_SPEC), base / "data")
    run_diffusion(config(base / "run", base / "data", steps=2, checkpoint_every=1), say=lambda s: None)
    return base / "run", base / "data"


def _copy_run(drun, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    return run


def _samples(run: Path) -> Path:
    return next(p for p in (run / "samples").iterdir() if p.is_dir())


# ------------------------------------------------------------------------------------------------
# case 09: weights that name a run are never loaded in a run folder without its own id
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gone", ["removed", "fifo", "folder"])
def test_weights_of_another_run_are_refused_when_run_json_is_gone(tmp_path, drun, gone):
    run = _copy_run(drun, tmp_path)
    for w in ("best", "final"):
        rec = json.loads((run / w / "weights.json").read_text())
        rec["run_id"] = "0123456789abcdef0123456789abcdef"  # another run's weights, copied in with their record
        (run / w / "weights.json").write_text(json.dumps(rec))
    (run / "run.json").unlink()
    if gone == "fifo":
        os.mkfifo(run / "run.json")
    elif gone == "folder":
        (run / "run.json").mkdir()
    res = runner.invoke(app, ["sample", str(run), "--guidance", "3"])
    _clean_exit_2(res, "run.json")
    assert not any("g3" in p.name for p in (run / "samples").iterdir())


# ------------------------------------------------------------------------------------------------
# case 22: a samples folder's sampling.json that is not a mapping
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["[1, 2]", "3", "\"best\""])
def test_a_sampling_record_that_is_not_a_mapping_is_named(tmp_path, drun, text):
    run = _copy_run(drun, tmp_path)
    (_samples(run) / "sampling.json").write_text(text)
    res = runner.invoke(app, ["sample", str(run)])
    _clean_exit_2(res, "sampling.json", "not a mapping")
