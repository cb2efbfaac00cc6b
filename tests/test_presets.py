"""Every shipped training preset and sweep validates: its config, its dataset spec with overrides,
and (transformer presets) the token form or the ViT it builds. Nothing is generated or trained."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .conftest import ROOT

TRAIN = sorted((ROOT / "experiments" / "train").glob("*.yaml"))
SWEEPS = sorted((ROOT / "experiments" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", TRAIN, ids=lambda p: p.stem)
def test_training_preset_validates(path: Path, monkeypatch):
    from mosaic.lab.config import load_config
    from mosaic.lab.data import load_dataset_spec

    monkeypatch.chdir(ROOT)  # presets name their specs relative to the repository root
    is_transformer = "objective" in yaml.safe_load(path.read_text())
    if is_transformer:
        from mosaic.lab.tokens import SceneTokenizer
        from mosaic.lab.transformer import TransformerConfig, make_encoder

        cfg = load_config(TransformerConfig, path)
        spec = load_dataset_spec(cfg.dataset)
        tok = SceneTokenizer.from_spec(spec) if cfg.input.kind == "tokens" or cfg.objective == "binding" else None
        enc = make_encoder(cfg, cfg.input.kind, tok, spec.image.size)
        assert sum(p.numel() for p in enc.parameters()) > 0
        if cfg.objective == "binding":
            assert spec.holdout.rule.kind == "objects" and tok.n_object_types >= 4
    else:
        from mosaic.lab.diffusion import DiffusionConfig

        cfg = load_config(DiffusionConfig, path)
        spec = load_dataset_spec(cfg.dataset)
    assert cfg.name == path.stem and spec.split_sizes()["train"] > 0


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.stem)
def test_shipped_sweep_plans(path: Path, monkeypatch, tmp_path):
    from mosaic.sweep import expand, load_sweep, plan

    monkeypatch.chdir(ROOT)
    sweep = load_sweep(path)
    trials = plan(sweep, tmp_path / "out")
    assert len(trials) == len(expand(sweep)) >= 2
    assert not (tmp_path / "out").exists()  # planning writes nothing
