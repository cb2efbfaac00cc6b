"""The scene parser reads concepts back from the renderer's images."""

from __future__ import annotations

import numpy as np
import pytest

from mosaic.errors import MosaicError
from mosaic.evaluation import THRESHOLDS, check_evaluator, ground_truth, load_evaluator
from mosaic.evaluation.degrade import degrade
from mosaic.evaluation.parser import SceneParser
from mosaic.scene import Scene, SceneObject
from mosaic.spec import load_spec
from renderers import get_renderer
from tests.conftest import SPECS

SHIPPED = sorted(SPECS.glob("*.yaml"))


def _accuracy(spec, images, records, parser):
    preds = parser.predict(images)
    return {c: np.mean([p[c] == r["concepts"][c] for p, r in zip(preds, records)]) for c in spec.concepts}


FLAT = [p for p in SHIPPED if load_spec(p).image.renderer != "shaded"]


def test_the_parser_refuses_a_shaded_spec_by_name():
    """Shaded 3-D renders are read by a learned evaluator; the parser names that instead of failing inside."""
    from mosaic.errors import MosaicError

    shaded = [p for p in SHIPPED if p not in FLAT]
    assert shaded  # clevr_cogent
    with pytest.raises(MosaicError, match="image.renderer: shaded.*learned evaluator"):
        SceneParser(load_spec(shaded[0]))


@pytest.mark.parametrize("path", FLAT, ids=lambda p: p.stem)
def test_parser_reads_every_shipped_spec_exactly(path):
    spec = load_spec(path)
    images, records = ground_truth(spec, 0, 24)
    acc = _accuracy(spec, images, records, SceneParser(spec))
    assert all(v == 1.0 for v in acc.values()), acc


@pytest.mark.parametrize("name", ["count", "attribute", "position_complex", "relation", "binding"])
def test_parser_survives_mild_blur_noise_and_colour_shift(name):
    spec = load_spec(SPECS / f"{name}.yaml")
    images, records = ground_truth(spec, 100, 130)
    acc = _accuracy(spec, degrade(images, "mild", seed=1), records, SceneParser(spec))
    assert min(acc.values()) >= 0.95, acc


def test_check_reports_accuracy_confusions_and_threshold():
    spec = load_spec(SPECS / "count.yaml")
    rep = check_evaluator(spec, load_evaluator(spec, "parser"), n=16)
    assert rep["n"] == 16 and rep["split"] == "evaluator_check"
    assert rep["accuracy"] == {"color": 1.0, "count": 1.0} and rep["joint_accuracy"] == 1.0
    assert rep["threshold"] == THRESHOLDS["parser"] and rep["passed"] and rep["confusion"]["count"] == []


def _render(spec, objects):
    images, _ = get_renderer("pillow", supersample=spec.image.supersample).render([Scene(spec.image.size, spec.background_rgb(), objects)])
    return images[0]


def test_touching_objects_are_separated():
    spec = load_spec(SPECS / "count.yaml")
    red = spec.rgb("red")
    # two red disks that overlap (the sampler never does this; a generator might)
    objs = [SceneObject("circle", "red", red, 0.12, (0.4, 0.5)), SceneObject("circle", "red", red, 0.12, (0.5, 0.5)),
            SceneObject("circle", "red", red, 0.12, (0.2, 0.2))]
    p = SceneParser(spec).parse(_render(spec, objs))
    assert p.values == {"color": "red", "count": 3}
    assert any("split a red region into 2" in note for note in p.problems)
    # touching objects of different colours are split by colour
    spec = load_spec(SPECS / "attribute.yaml")
    objs = [SceneObject("circle", "green", spec.rgb("green"), 0.22, (0.4, 0.5)), SceneObject("square", "red", spec.rgb("red"), 0.22, (0.6, 0.5))]
    assert SceneParser(spec).parse(_render(spec, objs)).values == {"color1": "green", "color2": "red"}


def test_failures_carry_reasons():
    spec = load_spec(SPECS / "attribute.yaml")
    parser = SceneParser(spec)
    empty = np.full((64, 64, 3), spec.background_rgb(), np.uint8)
    p = parser.parse(empty)
    assert p.values == {"color1": None, "color2": None}
    assert "color1: no object of 'circle' found" in p.problems
    spec = load_spec(SPECS / "position.yaml")
    objs = [SceneObject("circle", "brown", spec.rgb("brown"), 0.16, (0.3, 0.3)),
            SceneObject("circle", "red", spec.rgb("red"), 0.16, (0.7, 0.3)), SceneObject("circle", "red", spec.rgb("red"), 0.16, (0.7, 0.7))]
    why = parser.__class__(spec).explain(_render(spec, objs)[None])[0]
    assert why[0] == "found 1 brown circle, 2 red circles"
    assert "position: found 2 objects of 'target', expected 1" in why


def test_parsed_geometry_matches_the_scene():
    spec = load_spec(SPECS / "coverage.yaml")
    scene = Scene(64, spec.background_rgb(), [SceneObject("star", "cyan", spec.rgb("cyan"), 0.38, (0.45, 0.55), rotation=10.0)])
    obj = SceneParser(spec).parse(_render(spec, scene.objects)).scene.objects[0]
    assert (obj.shape, obj.color) == ("star", "cyan")
    assert abs(obj.size - 0.38) < 0.01 and abs(obj.center[0] - 0.45) < 0.004 and abs(obj.center[1] - 0.55) < 0.004
    assert abs((obj.rotation - 10.0 + 36) % 72 - 36) < 3


def test_bad_input_is_rejected():
    spec = load_spec(SPECS / "count.yaml")
    with pytest.raises(ValueError, match="uint8"):
        SceneParser(spec).predict(np.zeros((2, 64, 64, 3), np.float32))
    with pytest.raises(MosaicError, match="neither 'parser' nor a directory"):
        load_evaluator(spec, "/no/such/evaluator")


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_parser_meets_its_threshold_on_2000_fresh_renders(path):
    spec = load_spec(path)
    rep = check_evaluator(spec, SceneParser(spec), n=2000)
    assert rep["passed"], (rep["accuracy"], rep["failures"][:3])
