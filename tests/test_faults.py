"""Fault injection (issue 13): truncate, delete, corrupt, lock and kill, on datasets and run folders.
Each fault must be detected and named by path, and repaired or recovered from where the issue says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import DatasetError, TrainingError
from mosaic.lab.config import RunConfig
from mosaic.lab.loop import Task
from mosaic.lab.run import Family, run

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]

SPEC = {
    "name": "faults", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "blue"]}},
    "objects": [{"name": "obj", "shape": "circle", "color": {"concept": "color"}, "size": 0.5}],
    "splits": {"train": 8, "val": 2, "test": 2},
}


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

class _Task(Task):
    def __init__(self, root):
        from mosaic.torch_data import MosaicDataset

        self.model = torch.nn.Linear(3 * 16 * 16, 1)
        self.train_data = {"x": MosaicDataset(root, "train").images}

    def loss(self, model, batch, generator):
        return model(batch["x"].float().flatten(1) / 255).pow(2).mean()


class _Family(Family):
    def build_task(self, cfg, root, run_folder):
        return _Task(root)

    def results(self, cfg, task, ctx):
        return {"table": {"test": {"joint": 1.0, "n": 2}}}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("faults") / "data"
    generate(parse_spec(SPEC), root)
    return root


def _cfg(out, dataset, steps=2):
    return RunConfig.model_validate({
        "name": "faults", "out": str(out), "dataset": {"path": str(dataset)},
        "training": {"steps": steps, "batch_size": 4, "device": "cpu", "threads": 1, "log_every": 1, "checkpoint_every": 1,
                     "keep_checkpoints": 3, "ema": {"enabled": False}}})


HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from mosaic.locks import FolderLock
    with FolderLock(sys.argv[1]):
        print("locked", flush=True)
        time.sleep(60)
""")


def _hold_lock(folder):
    p = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(folder)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.stdout.readline().strip() == "locked"
    return p


def _interrupted(run_dir: Path):
    """Make a finished run look interrupted after its last checkpoint."""
    for name in ("DONE", "metrics.json"):
        (run_dir / name).unlink()


# ------------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------------

def test_a_run_folder_is_locked_while_a_process_trains_in_it(tmp_path, dataset):
    out = tmp_path / "run"
    holder = _hold_lock(out)
    try:
        with pytest.raises(TrainingError, match=rf"pid {holder.pid}.*run folder"):
            run(_cfg(out, dataset), _Family(), say=lambda s: None)
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up (kill -9): its lock is stale and taken over
    m = run(_cfg(out, dataset), _Family(), say=lambda s: None)
    assert m["train"]["steps"] == 2 and (out / "DONE").is_file()


def test_a_stale_lock_file_of_a_dead_process_is_taken_over(tmp_path, dataset):
    from mosaic.locks import lock_path

    out = tmp_path / "run"
    lock_path(out).write_text(json.dumps({"pid": 999999, "host": "gone", "since": 0}))
    m = run(_cfg(out, dataset), _Family(), say=lambda s: None)
    assert m["train"]["steps"] == 2


@pytest.mark.parametrize("damage", ["truncate_weights", "corrupt_state", "delete_optimizer"])
def test_a_damaged_latest_checkpoint_is_named_and_the_previous_one_used(tmp_path, dataset, damage):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    latest = out / "checkpoints" / "checkpoint-0000002"
    if damage == "truncate_weights":
        f = latest / "model.safetensors"
        f.write_bytes(f.read_bytes()[:40])
    elif damage == "corrupt_state":
        (latest / "trainer_state.json").write_text('{"step": 2, "best"')
    else:
        (latest / "optimizer.bin").unlink()
    said = []
    m = run(_cfg(out, dataset), _Family(), say=said.append)
    assert any("checkpoint-0000002 is damaged" in s for s in said), said
    assert any("resum" in s and "checkpoint-0000001" in s for s in said), said
    assert m["train"]["resumed_at"] == 1 and (out / "DONE").is_file()
    assert (out / "checkpoints" / "checkpoint-0000002.damaged").is_dir()


def test_every_checkpoint_damaged_is_an_error_naming_each(tmp_path, dataset):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    for ck in (out / "checkpoints").iterdir():
        (ck / "trainer_state.json").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(TrainingError) as e:
        run(_cfg(out, dataset), _Family(), say=lambda s: None)
    msg = str(e.value)
    assert "checkpoint-0000001" in msg and "checkpoint-0000002" in msg and "delete the run folder" in msg


@pytest.mark.parametrize("name", ["config.yaml", "dataset.json"])
def test_a_damaged_run_file_is_named_with_the_fix(tmp_path, dataset, name):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    (out / name).write_bytes(b"\x00\x01{{{ not: [yaml")
    with pytest.raises(TrainingError, match=rf"{name} is damaged.*(restore|delete)"):
        run(_cfg(out, dataset), _Family(), say=lambda s: None)


# ------------------------------------------------------------------------------------------------
# mosaic sample never silently replaces earlier samples
# ------------------------------------------------------------------------------------------------

def test_sample_folders_carry_every_setting_or_refuse(tmp_path):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    spec = {**SPEC, "splits": {"train": 8, "val": 2, "test": 3}}
    ds = tmp_path / "data"
    generate(parse_spec(spec), ds)
    cfg = {"name": "s", "out": str(tmp_path / "run"), "dataset": {"path": str(ds)},
           "model": {"backbone": "unet", "cond_dim": 16, "unet": {"block_out_channels": [8, 16], "cross_attention": [False, True],
                                                                  "heads": 2, "norm_num_groups": 4}},
           "training": {"steps": 1, "batch_size": 4, "device": "cpu", "threads": 1, "val_every": 0, "ema": {"enabled": False}},
           "sampling": {"steps": 1, "n_per_combination": 1, "batch_size": 8}, "evaluation": {"enabled": False, "select": "loss"}}
    import yaml

    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(cfg))
    assert runner.invoke(app, ["train", "diffusion", str(cp)]).exit_code == 0
    base = ["sample", str(tmp_path / "run"), "--checkpoint", "final", "--no-score", "--steps", "1"]
    for extra in (["-k", "1"], ["-k", "2"], ["-k", "1", "--guidance", "3"], ["-k", "1", "--sampler", "dpm"]):
        r = runner.invoke(app, base + extra)
        assert r.exit_code == 0, r.output
    folders = sorted(p.name for p in (tmp_path / "run" / "samples").iterdir())
    assert len(folders) == 4 + 1, folders  # the run's own samples + four distinct ones
    assert "test_final_g2_ddim1_k1_s0" in folders and "test_final_g2_ddim1_k2_s0" in folders
    # an explicit --out that holds samples of other settings is refused, and kept
    out = tmp_path / "mine"
    assert runner.invoke(app, base + ["-k", "1", "--out", str(out)]).exit_code == 0
    before = (out / "metadata.jsonl").read_bytes()
    r = runner.invoke(app, base + ["-k", "2", "--out", str(out)])
    assert r.exit_code == 2 and "other settings" in r.output and "n_per_combination 1 -> 2" in r.output
    assert (out / "metadata.jsonl").read_bytes() == before
    # the very same settings again: allowed (same images)
    assert runner.invoke(app, base + ["-k", "1", "--out", str(out)]).exit_code == 0
