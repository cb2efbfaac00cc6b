"""Validation scored by a learned evaluator on the training device (issue 27): a GPU run need not
wait on the CPU scene parser."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mosaic.evaluation.learned import LearnedConfig, LearnedEvaluator, train_evaluator
from mosaic.lab.config import ConfigError
from mosaic.lab.diffusion import DiffusionTask
from mosaic.lab.diffusion.config import EvaluationSection
from mosaic.spec import parse_spec
from tests.conftest import SPECS, tiny

TINY = LearnedConfig(input_size=16, width=4, hidden=16, steps=2, batch_size=8, n_train=24, check_n=4, log_every=1, threads=1)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    spec = parse_spec(tiny(SPECS / "count.yaml"))
    out = tmp_path_factory.mktemp("ev") / "ev"
    return spec, out, train_evaluator(spec, out, TINY.model_copy(update={"check_n": 0}))


def test_learned_evaluator_scores_tensors_as_arrays(trained):
    _, _, ev = trained
    images = np.random.default_rng(0).integers(0, 256, (37, 32, 32, 3), dtype=np.uint8)
    want = ev.predict_proba(images, batch_size=8)
    got = ev.predict_proba(torch.from_numpy(images), batch_size=8)  # a tensor where it was generated
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    assert ev.predict(torch.from_numpy(images)) == ev.predict(images)
    with pytest.raises(ValueError, match="uint8"):
        ev.predict_proba(torch.zeros(2, 32, 32, 3))


def test_validation_uses_the_val_evaluator_when_set(trained):
    spec, out, _ = trained
    parser = object()

    def task(val_evaluator):
        ev = EvaluationSection(evaluator="parser", val_evaluator=val_evaluator)
        return SimpleNamespace(cfg=SimpleNamespace(evaluation=ev), spec=spec, _device="cpu", evaluator=lambda: parser)

    t = task(str(out))
    got = DiffusionTask.val_evaluator(t)
    assert isinstance(got, LearnedEvaluator) and got.name == "learned:ev"
    assert DiffusionTask.val_evaluator(t) is got  # loaded once
    assert DiffusionTask.val_evaluator(task(None)) is parser
    assert DiffusionTask.val_evaluator(task("parser")) is parser


def test_a_val_evaluator_that_is_not_one_is_refused_before_training(tmp_path):
    from mosaic.lab.diffusion.family import DiffusionFamily
    from tests.test_diffusion import config

    spec = parse_spec(tiny(SPECS / "count.yaml"))
    cfg = config(tmp_path / "run", tmp_path / "ds")
    cfg = cfg.model_copy(update={"evaluation": EvaluationSection(val_evaluator=str(tmp_path / "nothing"))})
    with pytest.raises(ConfigError, match="evaluation.val_evaluator"):
        DiffusionFamily().check(cfg, spec)
