"""The diffusion lab end to end at 16 px with tiny models: training, exact resume, bad input,
sampling, the CLI and a 2-process CPU run."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mosaic.errors import DatasetError
from mosaic.lab.config import ConfigError, TrainingError, validate_config
from mosaic.lab.diffusion import DiffusionConfig, DiffusionTask, run_diffusion

ROOT = Path(__file__).resolve().parents[1]

SPEC = {
    "name": "labtest",
    "image": {"size": 16, "supersample": 2},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square"]}},
    "objects": [{"name": "obj", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.5}],
    "holdout": {"concepts": ["color", "shape"], "rule": {"kind": "explicit", "combinations": [["blue", "square"]]}},
    "splits": {"train": 24, "val": 6, "test_id": 6, "test_ood": 4},
}

TINY_UNET = {"backbone": "unet", "cond_dim": 16,
             "unet": {"block_out_channels": [8, 16], "cross_attention": [False, True], "heads": 2, "norm_num_groups": 4}}
TINY_DIT = {"backbone": "dit", "cond_dim": 16, "dit": {"patch_size": 4, "num_layers": 1, "heads": 2, "head_dim": 8}}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("lab") / "data"
    generate(parse_spec(SPEC), root)
    return root


def config(out: Path, dataset: Path, model=TINY_UNET, **training) -> DiffusionConfig:
    data = {
        "name": "t", "out": str(out), "dataset": {"path": str(dataset)}, "model": model,
        "training": {"steps": 3, "batch_size": 4, "lr": 1e-3, "device": "cpu", "log_every": 1, "checkpoint_every": 1,
                     "keep_checkpoints": 5, "val_every": 0, "ema": {"decay": 0.99}, "threads": 1, **training},
        "sampling": {"steps": 2, "n_per_combination": 2, "batch_size": 8},
        "evaluation": {"enabled": False, "select": "loss"},
    }
    return validate_config(DiffusionConfig, data)


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("model", [TINY_UNET, TINY_DIT, {**TINY_UNET, "conditioning": "caption", "text": {"layers": 1, "heads": 2}},
                                   {**TINY_DIT, "conditioning": "combination"}], ids=["unet", "dit", "unet-caption", "dit-combination"])
def test_a_few_training_steps_then_samples(tmp_path, dataset, model):
    run = tmp_path / "run"
    m = run_diffusion(config(run, dataset, model), say=lambda s: None)
    assert m["train"]["steps"] == 3 and math.isfinite(m["train"]["final_loss"])
    assert sorted(losses(run)) == [1, 2, 3]
    for f in ("config.yaml", "dataset.json", "dataset_manifest.json", "metrics.json", "DONE", "final/conditioner.safetensors",
              "best/backbone/config.json", "checkpoints/checkpoint-0000003/model.safetensors"):
        assert (run / f).exists(), f
    # samples: K per combination of test_id (5 seen cells) and test_ood (1 held-out cell)
    out = Path(m["samples"]["out"])
    meta = [json.loads(x) for x in (out / "metadata.jsonl").read_text().splitlines()]
    assert len(meta) == m["samples"]["images"] == 2 * 5 + 2 * 1
    assert {tuple(r["combination"]) for r in meta if r["held_out"]} == {("blue", "square")}
    assert all(r["split"] == ("test_ood" if r["held_out"] else "test_id") for r in meta)
    assert set(meta[0]) >= {"file_name", "concepts", "combination", "held_out", "caption", "seed"}
    from PIL import Image

    img = Image.open(out / meta[0]["file_name"])
    assert img.size == (16, 16) and img.mode == "RGB"
    # a finished run is a no-op
    again = run_diffusion(config(run, dataset, model), say=lambda s: None)
    assert again.get("already_done") and sorted(losses(run)) == [1, 2, 3]


def test_resume_from_a_checkpoint_gives_the_same_next_step_loss(tmp_path, dataset):
    run = tmp_path / "run"
    run_diffusion(config(run, dataset, steps=4), say=lambda s: None)
    first = losses(run)
    # simulate an interruption after the step-2 checkpoint
    for step in (3, 4):
        shutil.rmtree(run / "checkpoints" / f"checkpoint-{step:07d}")
    (run / "DONE").unlink()
    m = run_diffusion(config(run, dataset, steps=4), say=lambda s: None)
    assert m["train"]["resumed_at"] == 2
    second = losses(run)
    assert sorted(second) == [1, 2, 3, 4]
    assert second[3] == pytest.approx(first[3], abs=1e-6) and second[4] == pytest.approx(first[4], abs=1e-6)


def test_missing_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match=r"dataset.path .*no mosaic dataset there.*mosaic generate"):
        run_diffusion(config(tmp_path / "run", tmp_path / "nope"), say=lambda s: None)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("model,field", [
    ({**TINY_UNET, "unet": {**TINY_UNET["unet"], "block_out_channels": [8, 8, 8, 8, 8], "cross_attention": [False] * 5}},
     "model.unet.block_out_channels"),
    ({**TINY_DIT, "dit": {**TINY_DIT["dit"], "patch_size": 16}}, "model.dit.patch_size"),
])
def test_a_model_too_large_for_the_image_is_refused(tmp_path, dataset, model, field):
    with pytest.raises(ConfigError, match="too large") as e:
        run_diffusion(config(tmp_path / "run", dataset, model), say=lambda s: None)
    assert field in str(e.value)
    assert not (tmp_path / "run").exists()


def test_a_changed_dataset_stops_the_run_and_keeps_its_checkpoints(tmp_path, dataset):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    data = tmp_path / "data"
    shutil.copytree(dataset, data)
    run = tmp_path / "run"
    run_diffusion(config(run, data, steps=2), say=lambda s: None)
    (run / "DONE").unlink()  # as if interrupted
    generate(parse_spec({**SPEC, "seed": 1}), data, overwrite=True)
    with pytest.raises(DatasetError, match="changed since run"):
        run_diffusion(config(run, data, steps=2), say=lambda s: None)
    assert (run / "checkpoints" / "checkpoint-0000002" / "model.safetensors").is_file()
    from mosaic.lab.diffusion import open_run

    with pytest.raises(DatasetError, match="changed since run"):
        open_run(run)


def test_nan_loss_stops_and_leaves_the_last_good_checkpoint(tmp_path, dataset, monkeypatch):
    import torch

    calls = {"n": 0}
    real = DiffusionTask.loss

    def flaky(self, model, batch, generator):
        calls["n"] += 1
        loss = real(self, model, batch, generator)
        return loss * float("nan") if calls["n"] >= 3 else loss

    monkeypatch.setattr(DiffusionTask, "loss", flaky)
    run = tmp_path / "run"
    with pytest.raises(TrainingError, match=r"step 3: the loss is nan.*checkpoint-0000002 is intact"):
        run_diffusion(config(run, dataset, steps=5), say=lambda s: None)
    ck = run / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint-0000001", "checkpoint-0000002"]
    from safetensors.torch import load_file

    assert all(torch.isfinite(t).all() for t in load_file(str(ck / "checkpoint-0000002" / "model.safetensors")).values())
    assert not (run / "DONE").exists()


def _write_config(tmp_path: Path, dataset: Path, **training) -> Path:
    cfg = config(tmp_path / "run", dataset, **training).model_dump(mode="json")
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def test_cli_train_then_sample(tmp_path, dataset):
    from typer.testing import CliRunner

    from mosaic.cli import app

    p = _write_config(tmp_path, dataset, steps=2)
    r = CliRunner().invoke(app, ["train", "diffusion", str(p), "--set", "training.checkpoint_every=2"])
    assert r.exit_code == 0, r.output
    assert "trained 2 steps" in r.output
    r = CliRunner().invoke(app, ["sample", str(tmp_path / "run"), "--split", "test_ood", "--n-per-combination", "3",
                                 "--guidance", "1", "--checkpoint", "final", "--no-score", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    meta = [json.loads(x) for x in (tmp_path / "s" / "metadata.jsonl").read_text().splitlines()]
    assert len(meta) == 3 and all(m["held_out"] for m in meta) and len(list((tmp_path / "s" / "images").iterdir())) == 3
    r = CliRunner().invoke(app, ["sample", str(tmp_path / "run"), "--split", "test", "--no-score"])
    assert r.exit_code == 2 and "not a split of the run's dataset" in r.output
    r = CliRunner().invoke(app, ["train", "diffusion", str(p), "--set", "training.stepz=3"])
    assert r.exit_code == 2 and "unknown field 'stepz'" in r.output


def test_two_process_cpu_run(tmp_path, dataset):
    """torchrun with 2 CPU processes (gloo): both train on their share of each batch, the
    checkpoint holds both processes' RNG states, the main one samples."""
    p = _write_config(tmp_path, dataset, steps=2, checkpoint_every=2, batch_size=2, threads=1)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
                        "-m", "mosaic.cli", "train", "diffusion", str(p)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ck = tmp_path / "run" / "checkpoints" / "checkpoint-0000002"
    # mosaic-checkpoint/1 (mosaic.lab.checkpoint): one RNG record per process, no pickles
    assert all((ck / f"rng-{i}.safetensors").is_file() and (ck / f"rng-{i}.json").is_file() for i in (0, 1))
    assert not list(ck.glob("*.pkl"))
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["train"]["processes"] == 2 and m["train"]["global_batch"] == 4


def test_scoring_with_the_evaluator_writes_the_seen_vs_held_out_table(tmp_path, dataset):
    cfg = config(tmp_path / "run", dataset, TINY_DIT).model_dump(mode="json")
    cfg["evaluation"] = {"enabled": True, "evaluator": "parser", "val_samples": 3, "val_steps": 2, "select": "joint_accuracy", "check_n": 4}
    m = run_diffusion(validate_config(DiffusionConfig, cfg), say=lambda s: None)
    assert set(m["table"]) == {"seen", "held_out"}
    assert m["table"]["seen"]["n"] == 10 and m["table"]["held_out"]["n"] == 2
    assert set(m["table"]["seen"]) == {"color", "shape", "joint", "n"}
    assert m["evaluator_check"]["n"] == 4 and "joint_accuracy" in m["evaluator_check"]
    val = [json.loads(x) for x in (tmp_path / "run" / "val.jsonl").read_text().splitlines()]
    assert "val/joint_accuracy" in val[-1] and "val/acc/shape" in val[-1]
    out = Path(m["samples"]["out"])
    for f in ("metrics.json", "metrics.csv", "heatmap.png", "samples.png", "predictions.jsonl", "evaluator_check.json", "sampling.json"):
        assert (out / f).is_file(), f
    meta = [json.loads(x) for x in (out / "metadata.jsonl").read_text().splitlines()]
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["file_name"] for r in rows] == [x["file_name"] for x in meta]
    for r, x in zip(rows, meta):  # each row: what was asked, what was read, and why it is wrong
        assert r["intended"] == x["concepts"] and r["held_out"] == x["held_out"] and set(r["read"]) == set(x["concepts"])
        wrong = [c for c in x["concepts"] if r["read"][c] != x["concepts"][c]]
        assert r["correct"] == (not wrong) and all(any(r2.startswith(f"{c}: read") for r2 in r["reasons"]) for c in wrong)
    assert m["samples"]["checkpoint"] == "best" and (tmp_path / "run" / "best").is_dir()


@pytest.mark.slow
def test_the_cpu_quickstart_learns_the_seen_combinations(tmp_path):
    """The README's main job: generate -> train -> sample -> evaluate on 2 CPU cores in minutes."""
    from mosaic.lab.config import load_config

    cfg = load_config(DiffusionConfig, ROOT / "experiments" / "train" / "quickstart_cpu.yaml",
                      [f"out={tmp_path / 'run'}", f"dataset.root={tmp_path / 'data'}", f"dataset.spec={ROOT / 'experiments/specs/coverage.yaml'}"])
    m = run_diffusion(cfg, say=lambda s: None)
    t = m["table"]
    assert t["seen"]["joint"] >= 0.9  # chance: 1/9; 3 seeds measured 100 % (docs/training-diffusion.md "Measured")
    assert t["held_out"]["joint"] <= t["seen"]["joint"] - 0.3  # held out clearly lower: 0 % in every measured seed
    assert m["time_s"] < 900


def test_tensorboard_logging_is_optional(tmp_path, dataset):
    from accelerate.utils import is_tensorboard_available

    cfg = config(tmp_path / "run", dataset, TINY_DIT, steps=1, tensorboard=True)
    if not is_tensorboard_available():
        with pytest.raises(ConfigError, match="training.tensorboard.*pip install tensorboard"):
            run_diffusion(cfg, say=lambda s: None)
    else:
        run_diffusion(cfg, say=lambda s: None)
        assert any((tmp_path / "run" / "tensorboard").rglob("events.out.tfevents*"))


def test_a_run_killed_before_its_first_checkpoint_starts_over_with_a_clean_log(tmp_path, dataset):
    run = tmp_path / "run"
    run_diffusion(config(run, dataset, steps=3), say=lambda s: None)
    # what a kill before the first checkpoint leaves: config and log rows, no checkpoint, not done
    shutil.rmtree(run / "checkpoints")
    for f in ("DONE", "metrics.json"):
        (run / f).unlink(missing_ok=True)
    first = losses(run)
    run_diffusion(config(run, dataset, steps=3), say=lambda s: None)
    rows = [json.loads(x)["step"] for x in (run / "log.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3]
    assert losses(run) == first  # the restart is the same deterministic run



def test_sample_refuses_a_transformer_run_and_a_missing_folder(tmp_path):
    from mosaic.lab.diffusion import open_run

    run = tmp_path / "trun"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"name": "t", "objective": "classifier", "model": {"width": 64}}))
    with pytest.raises(TrainingError, match="transformer run"):
        open_run(run)
    with pytest.raises(TrainingError, match="does not exist"):
        open_run(tmp_path / "nope")


def test_time_condition_feeds_the_pooled_condition_to_every_resnet_block():
    """model.unet.time_condition: a projection of the mean condition token is added to the timestep
    embedding; the condition then changes the output even with cross-attention removed from the path."""
    import torch

    from mosaic.lab.diffusion.conditioning import FactorizedConditioner
    from mosaic.lab.diffusion.config import DiffusionModelSection
    from mosaic.lab.diffusion.model import DiffusionModel, build_backbone, pool_tokens

    tokens = torch.arange(12, dtype=torch.float32).reshape(1, 3, 4)
    mask = torch.tensor([[True, False, True]])
    assert torch.equal(pool_tokens(tokens, mask), (tokens[0, 0] + tokens[0, 2])[None] / 2)
    assert torch.equal(pool_tokens(tokens), tokens.mean(1))

    def model(time_condition):
        torch.manual_seed(0)
        m = DiffusionModelSection.model_validate({"backbone": "unet", "conditioning": "factorized", "cond_dim": 16, "unet": {
            "block_out_channels": [8, 16], "cross_attention": [False, True], "heads": 2, "norm_num_groups": 4,
            "time_condition": time_condition}})
        dm = DiffusionModel(build_backbone(m, 8), FactorizedConditioner({"color": ["r", "g"], "count": [1, 2, 3]}, 16), "unet")
        # cut every cross-attention: the condition can then reach the output only through the timestep embedding
        for mod in dm.backbone.modules():
            if hasattr(mod, "attn2"):
                mod.attn2.to_out[0].weight.data.zero_()
                mod.attn2.to_out[0].bias.data.zero_()
        return dm.eval()

    x, t = torch.randn(1, 3, 8, 8), torch.tensor([500])
    a, b = torch.tensor([[0, 0]]), torch.tensor([[1, 2]])
    with torch.no_grad():
        plain, timed = model(False), model(True)
        assert torch.allclose(plain(x, t, a), plain(x, t, b))
        assert not torch.allclose(timed(x, t, a), timed(x, t, b), atol=1e-4)
    assert timed.time_condition and not plain.time_condition


def test_condition_values_keep_their_json_type():
    """A record's count of true (== 1 in Python) or "1" is no value of the count: training on it
    is refused by name, never taken for the count 1."""
    from mosaic.errors import MosaicError
    from mosaic.lab.diffusion.conditioning import value_index

    domains = {"count": [1, 2, 3], "color": ["red", "green"]}
    assert value_index(domains, "count", 2) == 1 and value_index(domains, "count", 2.0) == 1
    assert value_index(domains, "color", "green") == 1 and value_index(domains, "count", None) == -1
    for bad in (True, "1", b"1"):
        with pytest.raises(MosaicError, match="concept 'count' has no value"):
            value_index(domains, "count", bad)
