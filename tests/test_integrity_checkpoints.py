"""Issue 23, classes 3 and 4 on run folders: no code runs from a checkpoint, a checkpoint of another
run is refused, and a failed save (ENOSPC) leaves the last good checkpoint and a named error."""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from mosaic.errors import TrainingError
from mosaic.lab.config import RunConfig
from mosaic.lab.loop import Task
from mosaic.lab.run import Family, run

SPEC = {
    "name": "ckpt", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "blue"]}},
    "objects": [{"name": "obj", "shape": "circle", "color": {"concept": "color"}, "size": 0.5}],
    "splits": {"train": 8, "val": 2, "test": 2},
}


class _Task(Task):
    def __init__(self, root):
        from mosaic.torch_data import MosaicDataset

        self.model = torch.nn.Sequential(torch.nn.Linear(3 * 16 * 16, 4), torch.nn.Linear(4, 1))
        self.train_data = {"x": MosaicDataset(root, "train").images}

    def loss(self, model, batch, generator):
        noise = torch.randn(batch["x"].shape[0], 1, generator=generator)
        return (model(batch["x"].float().flatten(1) / 255) - noise).pow(2).mean()


class _Family(Family):
    def build_task(self, cfg, root, run_folder):
        return _Task(root)

    def results(self, cfg, task, ctx):
        return {}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("ckds") / "data"
    generate(parse_spec(SPEC), root)
    return root


def _cfg(out, dataset, steps=2, ema=False):
    return RunConfig.model_validate({
        "name": "ckpt", "out": str(out), "dataset": {"path": str(dataset)},
        "training": {"steps": steps, "batch_size": 4, "device": "cpu", "threads": 1, "log_every": 1, "checkpoint_every": 1,
                     "keep_checkpoints": 3, "ema": {"enabled": ema}}})


def _interrupted(run_dir: Path):
    for name in ("DONE", "metrics.json"):
        (run_dir / name).unlink()


class _Bomb:
    """Unpickling this writes the marker file: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path(self.marker).write_text, ("code ran",))


def test_a_checkpoint_holds_no_pickle_and_resume_is_exact(tmp_path, dataset):
    full = tmp_path / "full"
    m_full = run(_cfg(full, dataset, steps=3, ema=True), _Family(), say=lambda s: None)
    part = tmp_path / "part"
    run(_cfg(part, dataset, steps=3, ema=True), _Family(), say=lambda s: None)
    _interrupted(part)
    shutil.rmtree(part / "checkpoints" / "checkpoint-0000003")
    for ck in (part / "checkpoints").iterdir():
        names = {p.name for p in ck.iterdir()}
        assert not any(n.endswith((".pkl", ".bin", ".pt")) for n in names), names
        assert {"checkpoint.json", "model.safetensors", "state.safetensors", "trainer_state.json"} <= names
    m = run(_cfg(part, dataset, steps=3, ema=True), _Family(), say=lambda s: None)
    assert m["train"]["resumed_at"] == 2
    full_log = [r["loss"] for r in map(json.loads, (full / "log.jsonl").read_text().splitlines())]
    part_log = [r["loss"] for r in map(json.loads, (part / "log.jsonl").read_text().splitlines())]
    assert part_log == full_log  # exact resume: the same losses as the uninterrupted run
    assert m["train"]["final_loss"] == m_full["train"]["final_loss"]


@pytest.mark.parametrize("name", ["custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin", "model.safetensors"])
def test_a_planted_pickle_never_runs_and_the_checkpoint_is_named(tmp_path, dataset, name):
    out = tmp_path / "run"
    run(_cfg(out, dataset, ema=True), _Family(), say=lambda s: None)
    _interrupted(out)
    latest = out / "checkpoints" / "checkpoint-0000002"
    marker = tmp_path / "PWNED"
    (latest / name).write_bytes(pickle.dumps(_Bomb(marker)))
    said = []
    m = run(_cfg(out, dataset, ema=True), _Family(), say=said.append)
    assert not marker.exists(), "code from a planted pickle ran on resume"
    assert any("checkpoint-0000002 is damaged" in s for s in said), said
    assert m["train"]["resumed_at"] == 1 and (out / "checkpoints" / "checkpoint-0000002.damaged").is_dir()


def test_an_accelerate_pickle_checkpoint_is_refused_by_name_without_unpickling(tmp_path, dataset):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    marker = tmp_path / "PWNED"
    for ck in list((out / "checkpoints").iterdir()):
        for p in ck.iterdir():
            if p.name != "trainer_state.json":
                p.unlink()
        (ck / "custom_checkpoint_0.pkl").write_bytes(pickle.dumps(_Bomb(marker)))
        (ck / "random_states_0.pkl").write_bytes(pickle.dumps(_Bomb(marker)))
    with pytest.raises(TrainingError) as e:
        run(_cfg(out, dataset), _Family(), say=lambda s: None)
    assert not marker.exists()
    msg = str(e.value)
    assert "accelerate checkpoint" in msg and "unpickling can run code" in msg and "delete the run folder" in msg


def test_a_checkpoint_copied_from_another_run_of_the_same_shape_is_refused(tmp_path, dataset):
    a, b = tmp_path / "a", tmp_path / "b"
    run(_cfg(a, dataset, steps=3), _Family(), say=lambda s: None)
    run(_cfg(b, dataset, steps=3), _Family(), say=lambda s: None)
    _interrupted(b)
    for k in (2, 3):
        shutil.rmtree(b / "checkpoints" / f"checkpoint-000000{k}")
    b_cfg = _cfg(b, dataset, steps=3)
    shutil.copytree(a / "checkpoints" / "checkpoint-0000002", b / "checkpoints" / "checkpoint-0000002")
    said = []
    m = run(b_cfg, _Family(), say=said.append)
    assert any("belongs to another run" in s for s in said), said
    assert m["train"]["resumed_at"] == 1  # its own checkpoint, not the foreign one


def test_a_moved_run_folder_resumes_from_its_own_checkpoint(tmp_path, dataset):
    a = tmp_path / "a"
    run(_cfg(a, dataset, steps=2), _Family(), say=lambda s: None)
    _interrupted(a)
    moved = tmp_path / "elsewhere" / "a"
    moved.parent.mkdir()
    shutil.move(str(a), str(moved))
    # the config records out: resuming the moved folder with its own config (out aside) works
    m = run(_cfg(moved, dataset, steps=2), _Family(), say=lambda s: None)
    assert m["train"]["resumed_at"] == 2


@pytest.mark.parametrize("edit", ["record_json", "tensor_ref", "symlink", "size"])
def test_an_edited_checkpoint_record_is_named_never_trusted(tmp_path, dataset, edit):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    latest = out / "checkpoints" / "checkpoint-0000002"
    rec_path = latest / "checkpoint.json"
    rec = json.loads(rec_path.read_text())
    if edit == "record_json":
        rec_path.write_text("[" * 100000)
    elif edit == "tensor_ref":
        rec["objects"]["optimizer"] = {"__tensor__": "../../etc/passwd"}
        rec_path.write_text(json.dumps(rec))
    elif edit == "symlink":
        (latest / "model.safetensors").unlink()
        os.symlink(out / "final" / "model.safetensors", latest / "model.safetensors")
    else:
        with open(latest / "state.safetensors", "ab") as f:
            f.write(b"\0")
    said = []
    m = run(_cfg(out, dataset), _Family(), say=said.append)
    assert any("checkpoint-0000002 is damaged" in s for s in said), said
    assert m["train"]["resumed_at"] == 1


def test_a_full_disk_while_saving_a_checkpoint_is_named_and_keeps_the_last_good_one(tmp_path, dataset, monkeypatch):
    import safetensors.torch as st

    out = tmp_path / "run"
    real = st.save_model
    calls = {"n": 0}

    def full(*a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*a, **k)

    monkeypatch.setattr(st, "save_model", full)
    with pytest.raises(TrainingError) as e:
        run(_cfg(out, dataset), _Family(), say=lambda s: None)
    msg = str(e.value)
    assert "No space left on device" in msg and "checkpoint-0000001" in msg and "rerun the same command" in msg
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["checkpoint-0000001"]
    monkeypatch.setattr(st, "save_model", real)
    m = run(_cfg(out, dataset), _Family(), say=lambda s: None)
    assert m["train"]["resumed_at"] == 1 and (out / "DONE").is_file()
