"""The scene parser in worker processes reads exactly what it reads in one (issue 27)."""

from __future__ import annotations

import numpy as np
import pytest

from mosaic.evaluation.check import ground_truth
from mosaic.evaluation.degrade import degrade, get_degradation
from mosaic.evaluation.parallel_reads import MIN_PARALLEL, close_pool
from mosaic.evaluation.parser import SceneParser
from mosaic.spec import load_spec
from tests.conftest import SPECS


@pytest.mark.parametrize("name,bins", [("count", "strict"), ("clevr_like", "strict"), ("position_complex", "nearest")])
def test_two_processes_give_the_reads_of_one(name, bins):
    spec = load_spec(SPECS / f"{name}.yaml", ["image.size=32"])
    images, _ = ground_truth(spec, 0, 80)
    images = np.concatenate([images, degrade(images[:40], get_degradation("strong"), seed=0)])  # abstentions too
    one = SceneParser(spec, position_bins=bins).read(images)
    par = SceneParser(spec, position_bins=bins, workers=2)
    try:
        two = par.read(images)
        assert par._pool is not None  # it really ran in workers
        again = par.predict(images[:MIN_PARALLEL])  # the pool is reused
    finally:
        close_pool(par)
    assert len(two) == len(one) == 120
    for a, b in zip(one, two):
        assert a == b  # values, raw values, measures, IoUs, problems, abstention, scene: every field
    assert again == [r.values for r in one[:MIN_PARALLEL]]


def test_a_small_call_reads_in_this_process():
    spec = load_spec(SPECS / "count.yaml", ["image.size=32"])
    images, _ = ground_truth(spec, 0, MIN_PARALLEL - 1)
    par = SceneParser(spec, workers=2)
    assert par.read(images) == SceneParser(spec).read(images)
    assert par._pool is None
