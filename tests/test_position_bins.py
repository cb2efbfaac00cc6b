"""The parser's forced-choice position reading (``position_bins: nearest``): an angle read between
two of a position concept's bins goes to the nearer bin, as MOSAIC's 10-way position classifier
answers; ``strict`` (the default, the labels' rule) reads it as unreadable."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import MosaicError
from mosaic.evaluation import load_evaluator
from mosaic.evaluation.parser import SceneParser
from mosaic.grammar import AngleBins
from mosaic.labels import read_labels
from mosaic.scene import Scene, SceneObject, angle_deg
from mosaic.spec import load_spec
from renderers import get_renderer
from tests.conftest import SPECS

MOSAIC_BINS = AngleBins(n=10, width=18, gap=18, start=0)


@pytest.mark.parametrize("angle, strict, nearest", [
    (9.0, 0, 0),        # inside a bin: both readings agree
    (20.0, None, 0),    # 2 degrees past bin 0's upper edge (18), 16 before bin 1 (36)
    (33.0, None, 1),    # 3 before bin 1
    (27.0, None, 0),    # the middle of a gap: the lower index
    (350.0, None, 9),   # 8 past 342 (bin 9: 324-342), 10 before 360 = bin 0's lower edge
    (356.0, None, 0),   # across 0 degrees: 4 before bin 0
    (-4.0, None, 0),    # any real angle
])
def test_nearest_bin_is_the_closer_edge_across_the_wrap(angle, strict, nearest):
    assert MOSAIC_BINS.bin_of(angle) == strict
    assert MOSAIC_BINS.nearest(angle) == nearest


def _scene(spec, angle: float) -> Scene:
    ref = SceneObject("circle", "brown", spec.rgb("brown"), 0.16, (0.5, 0.5))
    r = 0.3
    tgt = None
    for sign in (1, -1):  # image y runs downwards: take the sign that gives the intended angle
        cand = SceneObject("circle", "red", spec.rgb("red"), 0.16,
                           (0.5 + r * math.cos(math.radians(angle)), 0.5 - sign * r * math.sin(math.radians(angle))))
        if abs((angle_deg(ref, cand) - angle + 180) % 360 - 180) < 1e-6:
            tgt = cand
    assert tgt is not None
    return Scene(spec.image.size, spec.background_rgb(), [ref, tgt])


def test_labels_read_a_gap_angle_strictly_or_as_the_nearest_bin():
    spec = load_spec(SPECS / "position.yaml")
    scene = _scene(spec, 21.0)
    strict = read_labels(scene, spec)
    assert strict.values.get("position") is None and any("falls between bins" in p for p in strict.problems)
    assert read_labels(scene, spec, "nearest").values["position"] == "0-18"
    assert read_labels(_scene(spec, 34.0), spec, "nearest").values["position"] == "36-54"


def test_the_parser_credits_a_gap_angle_only_with_nearest_bins():
    spec = load_spec(SPECS / "position.yaml")
    scene = _scene(spec, 22.0)
    image = get_renderer("pillow", supersample=spec.image.supersample).render([scene])[0][0]
    assert SceneParser(spec).parse(image).values.get("position") is None
    assert SceneParser(spec, position_bins="nearest").parse(image).values == {"color": "red", "position": "0-18"}
    inside = get_renderer("pillow", supersample=spec.image.supersample).render([_scene(spec, 45.0)])[0][0]
    assert SceneParser(spec).parse(inside).values == SceneParser(spec, position_bins="nearest").parse(inside).values


def test_an_unknown_reading_is_named():
    spec = load_spec(SPECS / "position.yaml")
    with pytest.raises(MosaicError, match="position_bins is 'loose'"):
        load_evaluator(spec, "parser", position_bins="loose")


def test_evaluate_cli_scores_with_the_chosen_reading(tmp_path):
    cli = lambda *a: CliRunner().invoke(app, list(a))  # noqa: E731
    spec = load_spec(SPECS / "position.yaml")
    from PIL import Image

    d = tmp_path / "imgs"
    (d / "images").mkdir(parents=True)
    rows = []
    for k, a in enumerate([22.0, 45.0, 200.0, 263.0]):  # two in gaps (nearest 0-18 and 252-270), two inside bins
        image = get_renderer("pillow", supersample=spec.image.supersample).render([_scene(spec, a)])[0][0]
        Image.fromarray(image).save(d / "images" / f"{k}.png")
        want = {22.0: "0-18", 45.0: "36-54", 200.0: "180-198", 263.0: "252-270"}[a]
        rows.append({"file_name": f"images/{k}.png", "concepts": {"color": "red", "position": want}})
    (d / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    strict = cli("evaluate", str(d), "--spec", str(SPECS / "position.yaml"), "--check-n", "0", "--out", str(tmp_path / "s"))
    assert strict.exit_code == 0, strict.output
    nearest = cli("evaluate", str(d), "--spec", str(SPECS / "position.yaml"), "--check-n", "0", "--position-bins", "nearest",
                  "--out", str(tmp_path / "n"))
    assert nearest.exit_code == 0, nearest.output
    js = json.loads((tmp_path / "s" / "metrics.json").read_text())
    jn = json.loads((tmp_path / "n" / "metrics.json").read_text())
    assert js["overall"]["joint_accuracy"] == 0.5 and jn["overall"]["joint_accuracy"] == 1.0
    bad = cli("evaluate", str(d), "--spec", str(SPECS / "position.yaml"), "--position-bins", "loose")
    assert bad.exit_code == 2 and "use one of strict, nearest" in bad.output


def test_the_training_config_takes_the_reading_and_names_a_bad_one():
    from mosaic.errors import ConfigError
    from mosaic.lab.config import load_config
    from mosaic.lab.diffusion.config import DiffusionConfig
    from tests.conftest import ROOT

    path = ROOT / "experiments/train/composition_position_cpu.yaml"
    assert load_config(DiffusionConfig, path).evaluation.position_bins == "nearest"  # the shipped config reads as MOSAIC
    assert load_config(DiffusionConfig, path, ["evaluation.position_bins=strict"]).evaluation.position_bins == "strict"
    assert load_config(DiffusionConfig, ROOT / "experiments/train/quickstart_cpu.yaml").evaluation.position_bins == "strict"  # the default
    with pytest.raises(ConfigError, match="position_bins"):
        load_config(DiffusionConfig, path, ["evaluation.position_bins=loose"])
