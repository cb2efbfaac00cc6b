"""dataset.stream: true — a lab run trains from a stream (mosaic.stream.StreamSource) and sees
exactly the batches of the same run on data written to disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mosaic.dataset import read_manifest
from mosaic.lab.config import ConfigError, validate_config
from tests.test_diffusion import SPEC, TINY_UNET


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())]


def _diffusion_cfg(tmp: Path, spec: Path, stream: bool):
    from mosaic.lab.diffusion import DiffusionConfig

    return validate_config(DiffusionConfig, {
        "name": "s", "out": str(tmp / f"run-{stream}"), "model": TINY_UNET,
        "dataset": {"spec": str(spec), "root": str(tmp / "data"), "workers": 2, "stream": stream},
        "training": {"steps": 3, "batch_size": 4, "lr": 1e-3, "device": "cpu", "log_every": 1, "checkpoint_every": 10,
                     "val_every": 0, "ema": {"decay": 0.99}, "threads": 1},
        "sampling": {"steps": 2, "n_per_combination": 1, "batch_size": 8},
        "evaluation": {"enabled": False, "select": "loss"},
    })


def test_diffusion_run_trains_from_a_stream(tmp_path):
    from mosaic.lab.diffusion import run_diffusion

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    streamed = _diffusion_cfg(tmp_path, spec, True)
    m = run_diffusion(streamed, say=lambda s: None)
    root = Path(m["dataset"]["root"]) if "root" in m["dataset"] else None
    data_dirs = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert len(data_dirs) == 1 and data_dirs[0].endswith("-stream")
    man = read_manifest(tmp_path / "data" / data_dirs[0])
    assert "train" not in man["splits"] and man["not_written"] == {"train": 24} and man["leak_check"]["passed"]
    assert not (tmp_path / "data" / data_dirs[0] / "train").exists()  # training images never touched the disk
    on_disk = _diffusion_cfg(tmp_path, spec, False)
    run_diffusion(on_disk, say=lambda s: None)
    a, b = _losses(streamed.run_dir()), _losses(on_disk.run_dir())
    assert len(a) == 3 and a == b  # the same images and conditions in the same batches
    assert root is None or root.exists()


def test_classifier_run_trains_from_a_stream_and_binding_refuses(tmp_path):
    from mosaic.lab.transformer import TransformerConfig, run_transformer
    from tests.test_transformer import BINDING_SPEC

    cov = yaml.safe_load((Path(__file__).resolve().parents[1] / "experiments/specs/coverage.yaml").read_text())
    cov["image"]["size"] = 16
    cov["splits"] = {"train": 2, "val": 1, "test_id": 1, "test_ood": 1, "per": "combination"}
    (tmp_path / "cov.yaml").write_text(yaml.safe_dump(cov))
    (tmp_path / "bind.yaml").write_text(yaml.safe_dump(BINDING_SPEC))

    def cfg(stream, objective="classifier", kind="image"):
        return validate_config(TransformerConfig, {
            "name": "c", "out": str(tmp_path / f"run-{objective}-{kind}-{stream}"), "objective": objective,
            "dataset": {"spec": str(tmp_path / ("cov.yaml" if objective == "classifier" else "bind.yaml")),
                        "root": str(tmp_path / "data"), "workers": 1, "stream": stream},
            "input": {"kind": kind}, "model": {"width": 16, "depth": 1, "heads": 2, "embed_dim": 8, "patch": 4},
            "training": {"steps": 2, "batch_size": 8, "lr": 1e-3, "log_every": 1, "checkpoint_every": 10, "threads": 1},
        })

    for kind in ("image", "tokens"):
        m = run_transformer(cfg(True, kind=kind), say=lambda s: None)
        assert m["table"]["held_out"]["n"] == 48
        run_transformer(cfg(False, kind=kind), say=lambda s: None)
        assert _losses(cfg(True, kind=kind).run_dir()) == _losses(cfg(False, kind=kind).run_dir())
    with pytest.raises(ConfigError, match="dataset.stream"):
        run_transformer(cfg(True, objective="binding", kind="tokens"), say=lambda s: None)
