"""Hostile cases of an eleventh attack on the run, sweep, evaluator and output-folder paths (issue 23),
each closed at its mechanism.

- **A run's ``dataset.json`` damaged** (``{}``, a ``path`` that is a number or a list): ``mosaic sample``
  (and ``analyze``, every reader of a finished run's dataset) was a KeyError / TypeError traceback;
  **a FIFO standing for it** blocked the reader forever. :meth:`mosaic.lab.run_folder.RunFolder.dataset_root`
  names a field that is not the string mosaic writes; every run record (``config.yaml``,
  ``dataset.json``, ``run.json``, ``metrics.json``) is read by :func:`mosaic.lab.run_folder._read_run_file`:
  a regular file, bounded, opened ``O_NONBLOCK``.
- **A symbolic link at a folder a run writer fills**: ``RUN/checkpoints`` (a resumed run read its
  checkpoints from the link's target and wrote the next one there), ``RUN/samples`` (``mosaic sample``
  wrote the samples folder into the target), ``RUN/analysis`` (``mosaic analyze`` wrote its figures
  there), an autoencoder's ``partial/`` (its checkpoint) and ``latents/`` (the latent cache). Each writer
  now makes the folder a real one of its own first (:func:`mosaic.io.own_folders`: the link is
  removed, never followed), and :meth:`RunFolder.checkpoint_list` never lists a linked ``checkpoints/``.
- **``mosaic analyze`` racing ``mosaic train`` on one run**: analyze read, extended and wrote the run's
  ``metrics.json`` without the run folder's lock, so a resumed training's metrics could be replaced by
  the old ones plus the analysis. :func:`mosaic.diagnostics.runs.analyze_run` holds the run's lock
  (the one ``mosaic train`` holds) while it writes; a second writer is named, exit 2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.test_attack_cases5 import ae_folder  # noqa: F401 - a pytest fixture: a tiny trained autoencoder
from tests.conftest import clean_exit_2 as _clean_exit_2, hold_lock
from tests.test_attack_cases6 import _copy_run

runner = CliRunner()


def _sample(run: Path, *more: str):
    return runner.invoke(app, ["sample", str(run), "--no-score", "--device", "cpu", *more])


# ------------------------------------------------------------------------------------------------
# case 01: a run's dataset.json damaged, or a FIFO standing for it
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["empty", "path_number", "path_list", "fingerprint_null", "fifo"])
def test_a_damaged_run_dataset_record_is_named_never_a_traceback_or_a_hang(tmp_path, drun, damage):
    run = _copy_run(drun, tmp_path)
    p = run / "dataset.json"
    rec = json.loads(p.read_text())
    if damage == "fifo":
        p.unlink()
        os.mkfifo(p)  # opened without O_NONBLOCK, the read waited for a writer forever
    else:
        rec = {} if damage == "empty" else {**rec, "path": 5} if damage == "path_number" else \
            {**rec, "path": ["x"]} if damage == "path_list" else {**rec, "fingerprint": None}
        p.write_text(json.dumps(rec))
    def hung(*_):
        raise TimeoutError("the read of dataset.json blocked")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)  # the FIFO blocked forever: fail, never hang the suite
    try:
        res = _sample(run)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    _clean_exit_2(res, "dataset.json", "is damaged")
    assert "FIFO" in res.output if damage == "fifo" else "is not the string mosaic writes" in res.output


# ------------------------------------------------------------------------------------------------
# case 02: a link at a folder a run writer fills is removed, never written through
# ------------------------------------------------------------------------------------------------

def test_a_resumed_run_never_reads_or_writes_checkpoints_through_a_link(tmp_path, drun):
    from mosaic.lab.diffusion import run_diffusion
    from tests.test_diffusion import config

    run = _copy_run(drun, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    for n in ("DONE", "metrics.json"):
        (run / n).unlink()
    shutil.rmtree(run / "final")
    shutil.rmtree(run / "checkpoints" / "checkpoint-0000002")
    shutil.move(str(run / "checkpoints" / "checkpoint-0000001"), outside / "checkpoint-0000001")
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints").symlink_to(outside, target_is_directory=True)
    said = []
    run_diffusion(config(run, drun[1], steps=2, checkpoint_every=1), say=said.append)
    assert sorted(os.listdir(outside)) == ["checkpoint-0000001"]  # nothing written there (was: checkpoint-0000002 too)
    assert not any("resumed from" in s for s in said)  # never resumed from a folder a link points at
    assert not (run / "checkpoints").is_symlink() and (run / "checkpoints" / "checkpoint-0000002").is_dir()


def test_sample_never_writes_the_runs_samples_through_a_link(tmp_path, drun):
    run = _copy_run(drun, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(run / "samples")
    (run / "samples").symlink_to(outside, target_is_directory=True)
    res = _sample(run)
    assert res.exit_code == 0, res.output
    assert os.listdir(outside) == []  # was: the whole samples folder
    assert not (run / "samples").is_symlink() and any((run / "samples").iterdir())


def test_analyze_never_writes_its_figures_through_a_link(tmp_path, drun):
    run = _copy_run(drun, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "analysis").symlink_to(outside, target_is_directory=True)
    res = runner.invoke(app, ["analyze", str(run), "--device", "cpu", "--what", "layers"])
    assert res.exit_code == 0, res.output
    assert os.listdir(outside) == []  # was: layers.png
    assert not (run / "analysis").is_symlink() and (run / "analysis" / "layers.png").is_file()


def test_the_autoencoder_never_writes_its_checkpoint_or_latents_through_a_link(tmp_path, ae_folder):  # noqa: F811
    from mosaic.dataset import generate
    from mosaic.lab.autoencoder import load_space, train_autoencoder
    from mosaic.lab.diffusion.latent import cached_latents
    from mosaic.torch_data import MosaicDataset

    src, sec, spec = ae_folder
    # latents/: the cache written into the autoencoder folder, never through a link there
    folder = tmp_path / "ae"
    shutil.copytree(src, folder)
    shutil.rmtree(folder / "latents", ignore_errors=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "latents").symlink_to(outside, target_is_directory=True)
    ds = tmp_path / "ds"
    generate(spec, ds)
    cached_latents(load_space(folder), ds, "train", MosaicDataset(ds, "train").images[:4], say=lambda s: None)
    assert os.listdir(outside) == []
    assert not (folder / "latents").is_symlink() and len(list((folder / "latents").rglob("train.safetensors"))) == 1
    # partial/: an interrupted training's checkpoint, never read from or written into another folder
    fresh = tmp_path / "ae2"
    fresh.mkdir()
    other = tmp_path / "other_partial"
    other.mkdir()
    (fresh / "partial").symlink_to(other, target_is_directory=True)
    train_autoencoder(sec, spec, fresh, say=lambda s: None, progress=False)  # steps 4, a checkpoint every 2
    assert os.listdir(other) == []  # was: checkpoint/ (state.safetensors, state.json)
    assert not (fresh / "partial").is_symlink()


# ------------------------------------------------------------------------------------------------
# case 03: mosaic analyze writes the run's metrics.json under the run folder's lock
# ------------------------------------------------------------------------------------------------

def test_analyze_stops_while_another_process_writes_the_run(tmp_path, drun):
    run = _copy_run(drun, tmp_path)
    before = (run / "metrics.json").read_bytes()
    holder = hold_lock(run)
    try:
        res = runner.invoke(app, ["analyze", str(run), "--device", "cpu", "--what", "layers"])
        _clean_exit_2(res, "another process", "run folder")
        assert (run / "metrics.json").read_bytes() == before and not (run / "analysis").exists()
        # --no-write writes nothing, so it needs no lock
        assert runner.invoke(app, ["analyze", str(run), "--device", "cpu", "--what", "layers", "--no-write"]).exit_code == 0
    finally:
        holder.kill()
        holder.wait()


def test_the_training_logs_are_never_appended_through_a_link(tmp_path):
    """A link planted at RUN/log.jsonl, log.csv or val.jsonl while a run trains: the rows go to the
    run's own new file (mosaic.io.open_append), the link's target keeps its bytes, and log.csv gets
    its header in the new file."""
    from mosaic.lab.run_folder import LOG_FIELDS, RunFolder

    run = RunFolder(tmp_path / "run")
    run.root.mkdir()
    outside = {name: tmp_path / f"outside_{name}" for name in ("log.jsonl", "log.csv", "val.jsonl")}
    for name, p in outside.items():
        p.write_text("someone else's\n")
        (run.root / name).symlink_to(p)
    run.append_log({"step": 1, "loss": 0.5})
    run.append_val({"step": 1, "val/loss": 0.4})
    run.append_log({"step": 2, "loss": 0.25})
    assert all(p.read_text() == "someone else's\n" for p in outside.values())
    assert not any((run.root / name).is_symlink() for name in outside)
    assert [r["step"] for r in run.read_log()] == [1, 2] and [r["step"] for r in run.read_val()] == [1]
    lines = (run.root / "log.csv").read_text().splitlines()
    assert lines[0] == ",".join(LOG_FIELDS) and len(lines) == 3


def test_audit_import_never_writes_through_a_link_at_the_audit_folder(tmp_path):
    """RUN/audit as a link to another audit folder: --import refuses it (the page's writer already did)."""
    from mosaic.audit import import_audit
    from mosaic.errors import MosaicError

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "items.json").write_text(json.dumps({"meta": {"audit_id": "x"}, "items": []}))
    root = tmp_path / "run"
    root.mkdir()
    (root / "audit").symlink_to(elsewhere, target_is_directory=True)
    saved = tmp_path / "audit.json"
    saved.write_text(json.dumps({"version": 1, "audit_id": "x", "marks": []}))
    with pytest.raises(MosaicError, match="symbolic link"):
        import_audit(root, saved)
    assert not (elsewhere / "audit.json").exists()
    res = runner.invoke(app, ["audit", str(root), "--import", str(saved)])
    _clean_exit_2(res, "symbolic link")


def test_two_evaluator_trainings_never_share_a_folder_and_weights_are_written_whole(tmp_path):
    """`mosaic evaluator train --out DIR` holds DIR's lock (a second trainer stops, naming the first,
    before rendering anything), and the weights go through a temporary file and a rename: a hard
    link planted at model.safetensors keeps its outside file's bytes."""
    from mosaic.errors import MosaicError
    from mosaic.evaluation.learned import LearnedConfig, train_evaluator
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC

    out = tmp_path / "ev"
    out.mkdir()
    holder = hold_lock(out)
    try:
        with pytest.raises(MosaicError, match="evaluator folder"):
            train_evaluator(parse_spec(SPEC), out, LearnedConfig(input_size=16, width=4, hidden=16, steps=2, batch_size=8, n_train=24, check_n=4, log_every=1, threads=1))
        assert not (out / "model.safetensors").exists()
    finally:
        holder.kill()
        holder.wait()
    outside = tmp_path / "someone_elses.bin"
    outside.write_bytes(b"keep")
    cfg = LearnedConfig(input_size=16, width=4, hidden=16, steps=2, batch_size=8, n_train=24, check_n=4, log_every=1, threads=1)
    train_evaluator(parse_spec(SPEC), out, cfg)  # the folder is an evaluator's (attack 15: a person's weights are never replaced)
    (out / "model.safetensors").unlink()
    os.link(outside, out / "model.safetensors")
    train_evaluator(parse_spec(SPEC), out, cfg)
    assert outside.read_bytes() == b"keep" and (out / "model.safetensors").stat().st_nlink == 1
