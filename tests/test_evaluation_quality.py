"""Abstention and match quality of the scene parser, Cohen's kappa between evaluators, and what
`mosaic evaluate` reports about both."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.evaluation import evaluate_folder, ground_truth
from mosaic.evaluation.agreement import cohen_kappa, compare_evaluators
from mosaic.evaluation.degrade import degrade
from mosaic.evaluation.parser import ABSTAIN_THRESHOLDS, SceneParser
from mosaic.evaluation.quality import BAD_KINDS, bad_render, quality_summary, read_images
from mosaic.sampling import sample_scene
from mosaic.spec import load_spec
from tests.conftest import SPECS

#: composition_cpu's spec: one object per 32 px image, colour x shape 4 x 4, rotation 0
COMPOSITION = ["name=composition_cpu", "image.size=32", "concepts.color.values=[red, green, blue, yellow]",
               "concepts.shape.values=[circle, square, triangle, cross]", "objects.0.size=0.5", "objects.0.rotation=0"]


@pytest.fixture(scope="module")
def spec():
    return load_spec(SPECS / "coverage.yaml", COMPOSITION)


@pytest.mark.parametrize("how", ["none", "mild", "strong"])
def test_degraded_renders_of_the_truth_are_not_rejected(spec, how):
    images, records = ground_truth(spec, 0, 80)
    if how != "none":
        images = degrade(images, how, seed=3)
    reads = SceneParser(spec).read(images)
    assert sum(r.abstained for r in reads) == 0
    assert all(r.values == r.raw_values for r in reads)
    assert all(r.values == rec["concepts"] for r, rec in zip(reads, records))
    q = np.array([r.quality for r in reads])
    assert q.min() >= 0.9 and (q.mean() > 0.97 if how == "none" else q.mean() > 0.93)


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_blobs_are_rejected(spec, kind):
    """Each failure mode seen in diffusion samples: the parser without abstention credits some of
    them (the nearest allowed shape); with abstention every one of those is unreadable."""
    lenient, strict = SceneParser(spec, abstain=False), SceneParser(spec)
    rng = np.random.default_rng(1)
    credited = credited_strict = 0
    for i in range(24):
        scene, _ = sample_scene(spec, "evaluator_check", i)
        intended = {"color": scene.objects[0].color, "shape": scene.objects[0].shape}
        im = bad_render(scene, kind, 0, angle=float(rng.uniform(0, 180)))
        if i % 2:
            im = degrade(im[None], "mild", seed=i)[0]
        was = lenient.parse(im).values == intended
        p = strict.parse(im)
        credited += was
        credited_strict += p.values == intended
        if was:  # what the lenient parser credited, the abstaining one refuses (the same read, made unreadable)
            assert p.abstained, (kind, i, p.measures)
        if p.abstained:
            assert all(v is None for v in p.values.values()) and any("abstained" in x for x in p.problems)
    assert credited >= 2, f"{kind}: the lenient parser credited {credited} of 24 (the test would not show anything)"
    assert credited_strict == 0


def test_quality_measures_name_the_failure(spec):
    scene, _ = sample_scene(spec, "evaluator_check", 0)
    p = SceneParser(spec)
    clean = p.parse(bad_render(scene, "ring", 0) * 0 + ground_truth(spec, 0, 1)[0][0])
    assert min(clean.measures.values()) > 0.95
    two = SceneParser(load_spec(SPECS / "count.yaml"))
    # the fragments measure: one object drawn as two pieces with a gap; a dropped speck counts too
    s2, _ = sample_scene(two.spec, "evaluator_check", 0)
    m = two.parse(bad_render(s2, "fragments", 0, angle=90.0)).measures
    assert set(m) == set(ABSTAIN_THRESHOLDS)
    with pytest.raises(ValueError, match="unknown abstention measure"):
        SceneParser(spec, thresholds={"sharpness": 0.5})
    with pytest.raises(ValueError, match="unknown bad kind"):
        bad_render(scene, "blob")


def test_quality_summary_counts_changed_verdicts(spec):
    images, records = ground_truth(spec, 0, 12)
    images = images.copy()
    for i in (0, 1, 2, 3):
        scene, _ = sample_scene(spec, "evaluator_check", i)
        images[i] = bad_render(scene, "peanut" if i % 2 else "rhombus", 0, angle=20.0)
    for k, r in enumerate(records):
        r["held_out"] = k >= 6
    on, off = SceneParser(spec), SceneParser(spec, abstain=False)
    preds, reads = read_images(on, images)
    q = quality_summary(records, reads, spec, on)
    raw_right = [all(r.raw_values[c] == rec["concepts"][c] for c in spec.concepts) for r, rec in zip(reads, records)]
    assert q["abstain"] and q["abstained"] == 4 and q["verdicts_changed"] == sum(raw_right[:4])
    assert q["seen"]["n"] == 6 and q["held_out"]["n"] == 6 and q["held_out"]["abstained"] == 0
    assert q["seen"]["quality"] < q["held_out"]["quality"]
    assert q["seen"]["joint_accuracy_without_abstention"] == pytest.approx(np.mean(raw_right[:6]))
    # abstention off: same reads, nothing changed, but the would-be changes are still counted
    preds_off, reads_off = read_images(off, images)
    q_off = quality_summary(records, reads_off, spec, off)
    assert not q_off["abstain"] and q_off["verdicts_changed"] == q["verdicts_changed"]
    assert preds_off == [r.raw_values for r in reads]
    assert read_images(type("E", (), {"name": "x", "predict": lambda self, im: [{}] * len(im)})(), images)[1] is None


def test_cohen_kappa():
    # p_o = 0.75, p_e = 0.5 * 0.25 + 0.5 * 0.75 = 0.5 -> kappa 0.5
    assert cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]) == pytest.approx(0.5)
    assert cohen_kappa(list("abcab"), list("abcab")) == 1.0
    assert cohen_kappa([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    assert cohen_kappa(["x", None, "x"], ["x", None, None]) == pytest.approx((2 / 3 - 4 / 9) / (1 - 4 / 9))
    assert cohen_kappa([1, 1], [1, 1]) is None and cohen_kappa([], []) is None
    with pytest.raises(ValueError, match="one label per item"):
        cohen_kappa([1], [1, 2])


def test_compare_evaluators_lists_disagreements():
    recs = [{"file_name": f"{i}.png", "concepts": {"c": "a"}} for i in range(4)]
    a = [{"c": "a"}, {"c": "a"}, {"c": "b"}, {"c": None}]
    b = [{"c": "a"}, {"c": "b"}, {"c": "b"}, {"c": "b"}]
    r = compare_evaluators(recs, a, b, ["c"], names=("parser", "learned"))
    assert r["verdicts"] == {"both_right": 1, "both_wrong": 2, "parser_only": 1, "learned_only": 0}
    assert r["disagreements_total"] == 2
    assert r["disagreements"][0]["file_name"] == "1.png"  # a verdict disagreement comes first
    assert r["disagreements"][0]["verdicts"] == {"parser": "right", "learned": "wrong"}
    assert r["kappa"]["verdict"] == pytest.approx(cohen_kappa([1, 1, 0, 0], [1, 0, 0, 0]))


def _folder(tmp_path: Path, spec) -> Path:
    from mosaic.dataset import png_bytes

    images, records = ground_truth(spec, 0, 10)
    images = images.copy()
    for i in (0, 1, 2):
        scene, _ = sample_scene(spec, "evaluator_check", i)
        images[i] = bad_render(scene, "ellipse", 0, angle=10.0 * i)
    (tmp_path / "images").mkdir(parents=True)
    with (tmp_path / "metadata.jsonl").open("w") as f:
        for i, (im, r) in enumerate(zip(images, records)):
            (tmp_path / f"images/{i:03d}.png").write_bytes(png_bytes(im))
            f.write(json.dumps({"file_name": f"images/{i:03d}.png", "concepts": r["concepts"], "held_out": r["held_out"]}) + "\n")
    return tmp_path


def test_evaluate_reports_quality_abstention_and_kappa(tmp_path, spec):
    d = _folder(tmp_path / "imgs", spec)
    m = evaluate_folder(d, spec, SceneParser(spec), check_n=0, compare=SceneParser(spec, abstain=False))
    assert m["quality"]["abstained"] == 3 and m["overall"]["unreadable"]["shape"] == pytest.approx(0.3)
    assert m["agreement"]["evaluators"] == ["parser", "parser"] and m["agreement"]["disagreements_total"] == 3
    assert all(row["abstained"] == (i < 3) for i, row in enumerate(m["results"]))
    # the CLI: abstention on by default, --no-abstain off, --compare adds kappa
    r = CliRunner().invoke(app, ["evaluate", str(d), "--spec", str(SPECS / "coverage.yaml"), *sum([["--set", s] for s in COMPOSITION], []),
                                 "--check-n", "0", "--out", str(tmp_path / "on"), "--compare", "parser"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "abstention on: 3 read(s) below the thresholds" in text and "Cohen's kappa" in text
    on = json.loads((tmp_path / "on" / "metrics.json").read_text())
    r = CliRunner().invoke(app, ["evaluate", str(d), "--spec", str(SPECS / "coverage.yaml"), *sum([["--set", s] for s in COMPOSITION], []),
                                 "--check-n", "0", "--out", str(tmp_path / "off"), "--no-abstain"])
    assert r.exit_code == 0, r.output
    off = json.loads((tmp_path / "off" / "metrics.json").read_text())
    assert on["quality"]["abstain"] and not off["quality"]["abstain"]
    assert on["overall"]["joint_accuracy"] == pytest.approx(off["overall"]["joint_accuracy"] - off["quality"]["verdicts_changed"] / 10)
