"""The learned evaluator: a tiny training run that saves, loads and predicts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mosaic.errors import MosaicError
from mosaic.evaluation import load_evaluator
from mosaic.evaluation.learned import EvaluatorNet, LearnedConfig, LearnedEvaluator, augment, render_pool, train_evaluator
from mosaic.spec import load_spec, parse_spec
from tests.conftest import SPECS, tiny

TINY = LearnedConfig(input_size=16, width=4, hidden=16, steps=2, batch_size=8, n_train=24, check_n=4, log_every=1, threads=1)


def test_tiny_training_saves_loads_and_predicts(tmp_path):
    spec = parse_spec(tiny(SPECS / "count.yaml"))
    ev = train_evaluator(spec, tmp_path / "ev", TINY)
    files = {p.name for p in (tmp_path / "ev").iterdir()}
    assert {"config.json", "model.safetensors", "report.json", "train_log.jsonl"} <= files
    report = json.loads((tmp_path / "ev" / "report.json").read_text())
    assert report["check_clean"]["n"] == 4 and report["check_mild"]["degradation"]["name"] == "mild"
    assert report["train_seconds"] > 0 and len((tmp_path / "ev" / "train_log.jsonl").read_text().splitlines()) == 2

    loaded = load_evaluator(spec, tmp_path / "ev")
    assert isinstance(loaded, LearnedEvaluator) and loaded.name == "learned:ev"
    images = np.random.default_rng(0).integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    preds = loaded.predict(images)
    assert len(preds) == 5 and all(set(p) == {"color", "count"} for p in preds)
    assert all(p["color"] in spec.domain("color") and p["count"] in spec.domain("count") for p in preds)
    assert preds == ev.predict(images)  # the saved weights are the trained ones
    probs = loaded.predict_proba(images)
    assert [p.shape for p in probs] == [(5, 10), (5, 10)] and np.allclose(probs[0].sum(1), 1, atol=1e-5)
    # other image sizes are resized
    assert len(loaded.predict(np.zeros((2, 48, 48, 3), np.uint8))) == 2


def test_loading_for_another_spec_is_refused(tmp_path):
    spec = parse_spec(tiny(SPECS / "count.yaml"))
    train_evaluator(spec, tmp_path / "ev", TINY.model_copy(update={"check_n": 0}))
    other = load_spec(SPECS / "attribute.yaml")
    with pytest.raises(MosaicError, match="train one for this spec"):
        load_evaluator(other, tmp_path / "ev")
    with pytest.raises(MosaicError, match="not a trained evaluator"):
        load_evaluator(spec, tmp_path)


def test_render_pool_targets_index_the_domains():
    spec = parse_spec(tiny(SPECS / "position.yaml"))
    images, targets = render_pool(spec, "evaluator_train", 6, 16)
    assert images.shape == (6, 3, 16, 16) and images.dtype == torch.uint8
    assert targets.shape == (6, 2) and int(targets.max()) < 10 and int(targets.min()) >= 0


def test_augment_keeps_shape_and_range_and_is_identity_when_off():
    x = torch.rand(4, 3, 16, 16)
    g = torch.Generator().manual_seed(0)
    y = augment(x, LearnedConfig(), g)
    assert y.shape == x.shape and float(y.min()) >= 0 and float(y.max()) <= 1 and not torch.allclose(x, y)
    assert torch.allclose(augment(x, LearnedConfig(augment_p=0.0), g), x, atol=1e-6)


def test_net_output_has_one_block_per_concept():
    net = EvaluatorNet([3, 10, 4], input_size=24, width=4, hidden=8)
    out = net.split_logits(net(torch.rand(2, 3, 24, 24)))
    assert [o.shape for o in out] == [(2, 3), (2, 10), (2, 4)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["count", "attribute", "position"])
def test_default_learned_evaluator_meets_its_threshold(tmp_path, name):
    spec = load_spec(SPECS / f"{name}.yaml")
    ev = train_evaluator(spec, tmp_path / "ev", LearnedConfig(check_n=1000))
    assert ev.report["check_clean"]["passed"], ev.report["check_clean"]["accuracy"]
