"""The one run driver (mosaic.lab.run) with a minimal family: hook order, the seeding point, config
errors that leave no run folder, and the finished-run no-op."""

from __future__ import annotations

import json

import pytest
import torch

from mosaic.errors import ConfigError
from mosaic.lab.config import RunConfig
from mosaic.lab.loop import Task
from mosaic.lab.run import Family, run

SPEC = {
    "name": "drv", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "blue"]}},
    "objects": [{"name": "obj", "shape": "circle", "color": {"concept": "color"}, "size": 0.5}],
    "splits": {"train": 8, "val": 2, "test": 2},
}


class _Task(Task):
    def __init__(self, root):
        from mosaic.torch_data import MosaicDataset

        self.model = torch.nn.Linear(3 * 16 * 16, 1)
        self.train_data = {"x": MosaicDataset(root, "train").images}

    def loss(self, model, batch, generator):
        return model(batch["x"].float().flatten(1) / 255).pow(2).mean()


class _Family(Family):
    def __init__(self, fail=False):
        self.calls, self.fail, self.drawn = [], fail, None

    def build_task(self, cfg, root, run_folder):
        self.calls.append(("build_task", run_folder.root.exists()))
        self.drawn = torch.rand(3)  # the first draw after the driver's seeding
        if self.fail:
            raise ConfigError([("model.width", "does not fit the dataset")])
        return _Task(root)

    def opened(self, cfg, task, ctx):
        self.calls.append(("opened", ctx.run.config.is_file()))

    def results(self, cfg, task, ctx):
        self.calls.append(("results", None))
        return {"table": {"test": {"joint": 1.0, "n": 2}}}

    def finish(self, metrics):
        self.calls.append(("finish", "time_s" in metrics))
        return metrics


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("drv") / "data"
    generate(parse_spec(SPEC), root)
    return root


def _cfg(out, dataset, seed=3):
    return RunConfig.model_validate({
        "name": "drv", "out": str(out), "dataset": {"path": str(dataset)},
        "training": {"steps": 1, "batch_size": 4, "device": "cpu", "threads": 1, "log_every": 1, "seed": seed}})


def test_the_driver_seeds_once_before_the_task_and_calls_the_hooks_in_order(tmp_path, dataset):
    fam = _Family()
    said = []
    m = run(_cfg(tmp_path / "run", dataset), fam, say=said.append)
    torch.manual_seed(3)
    assert torch.equal(fam.drawn, torch.rand(3))  # seeded with training.seed right before build_task
    assert fam.calls == [("build_task", False), ("opened", True), ("results", None), ("finish", True)]
    assert said[0] == f"run {tmp_path / 'run'} (new), dataset {dataset}"
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert set(on_disk) == {"run", "name", "dataset", "params", "train", "table", "time_s"}
    assert on_disk["params"] == 3 * 16 * 16 + 1 and m["train"]["steps"] == 1 and (tmp_path / "run" / "DONE").is_file()
    again = _Family()
    m2 = run(_cfg(tmp_path / "run", dataset), again, say=said.append)
    assert m2["already_done"] and again.calls == [] and m2["table"] == m["table"]


def test_a_config_error_found_against_the_dataset_leaves_no_run_folder(tmp_path, dataset):
    with pytest.raises(ConfigError, match="model.width"):
        run(_cfg(tmp_path / "run", dataset), _Family(fail=True), say=lambda s: None)
    assert not (tmp_path / "run").exists()
