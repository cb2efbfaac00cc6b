"""A run read back (``mosaic sample``, ``mosaic analyze``) builds the model its ``config.yaml`` describes
only after checking it against the run's weights on the meta device: a config edited to a huge model
used 15.5 GB before the weights were compared (attack round 17)."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2


def _edit_model(run, **unet):
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["model"]["unet"].update(unet)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))


def test_an_edited_model_size_is_refused_before_the_model_is_built(drun, tmp_path, monkeypatch):
    import mosaic.lab.diffusion.task as task_mod

    run, _ = drun
    original = (run / "config.yaml").read_text()
    built = []
    real = task_mod.build_backbone

    def spy(m, size, channels):  # the real build of the config's model (not on the meta device) must not happen
        import torch

        if torch.empty(0).device.type != "meta":
            built.append(list(m.unet.block_out_channels))
        return real(m, size, channels)

    monkeypatch.setattr(task_mod, "build_backbone", spy)
    try:
        _edit_model(run, block_out_channels=[512, 1024])  # ~100x the trained model's tensors
        res = CliRunner().invoke(app, ["sample", str(run), "--out", str(tmp_path / "s")])
        clean_exit_2(res, "config.yaml", "does not describe the run's weights")
        assert built == []
        assert not (tmp_path / "s").exists()
    finally:
        (run / "config.yaml").write_text(original)
    res = CliRunner().invoke(app, ["sample", str(run), "--out", str(tmp_path / "ok")])  # the restored config samples
    assert res.exit_code == 0, res.output


def test_a_dataset_path_that_is_not_a_folder_is_named_as_such(tmp_path):
    """``dataset.path`` at a FIFO or a file: not "generate a dataset there" (attack round 17)."""
    import os

    import pytest

    from mosaic.errors import DatasetError
    from mosaic.lab.config import DatasetSection
    from mosaic.lab.data import resolve_dataset

    fifo, plain = tmp_path / "fifo", tmp_path / "file.txt"
    os.mkfifo(fifo)
    plain.write_text("x")
    for p in (fifo, plain):
        with pytest.raises(DatasetError) as e:
            resolve_dataset(DatasetSection(path=p))
        assert "is not a folder" in str(e.value) and "generate SPEC --out" in str(e.value)


def test_a_split_that_is_no_name_is_named_by_the_readers(made):
    """``MosaicDataset(root, ['train'])`` (and a dict, a tuple): "has no split", as for any other non-split,
    not a TypeError from inside (attack round 17); the same for StreamingDataset."""
    import pytest

    from mosaic.errors import DatasetError
    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    for bad in (["train"], {"train": 1}, ("train",)):
        with pytest.raises(DatasetError, match="has no split"):
            MosaicDataset(made[1], bad)
        with pytest.raises(DatasetError, match="has no split"):
            StreamingDataset(made[1], split=bad)
