"""Reduced versions of the MOSAIC findings' CPU sweeps (experiments/sweeps/*_cpu.yaml), one seed
each, asserting the direction the full sweeps measure (README "Findings"). Each trial is the
sweep's own trial config (:func:`mosaic.sweep.trial_config`), so these fail if a sweep's design
drifts from what was measured. About 5-6 CPU-minutes a trial: marked slow."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow


def _trial(sweep_name: str, values: dict, tmp: Path) -> dict:
    from mosaic.lab.config import validate_config
    from mosaic.lab.diffusion import DiffusionConfig, run_diffusion
    from mosaic.lab.config import set_path
    from mosaic.sweep import load_sweep, trial_config

    sweep = load_sweep(ROOT / "experiments" / "sweeps" / f"{sweep_name}.yaml")
    raw = trial_config(sweep, {**values, "seed": values.get("seed", 0)})
    name = "_".join(f"{k.split('.')[-1]}{v}" for k, v in values.items())
    raw = set_path(raw, "out", str(tmp / name))
    raw = set_path(raw, "dataset.root", str(tmp / "data"))
    raw = set_path(raw, "dataset.spec", str(ROOT / raw["dataset"]["spec"]))
    cfg = validate_config(DiffusionConfig, raw)
    return run_diffusion(cfg, say=lambda s: None)["table"]


def test_composition_held_out_accuracy_falls_as_more_diagonals_are_held_out(tmp_path, monkeypatch):
    """composition_cpu at N = 1 and N = 3 (seed 0): seen learned, held-out joint lower at N = 3."""
    monkeypatch.chdir(ROOT)
    n1 = _trial("composition_cpu", {"spec.holdout.rule.n": 1}, tmp_path)
    n3 = _trial("composition_cpu", {"spec.holdout.rule.n": 3}, tmp_path)
    assert n1["seen"]["joint"] >= 0.85
    assert n1["held_out"]["joint"] > n3["held_out"]["joint"]
