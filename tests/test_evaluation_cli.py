"""`mosaic evaluator check|train` and `mosaic evaluate` (smoke tests with real assertions)."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.dataset import generate
from mosaic.spec import parse_spec
from tests.conftest import SPECS, tiny

runner = CliRunner()


def test_check_prints_accuracy_and_writes_json(tmp_path):
    out = tmp_path / "check.json"
    r = runner.invoke(app, ["evaluator", "check", str(SPECS / "count.yaml"), "--n", "6", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "joint" in r.output and "passes" in r.output
    rep = json.loads(out.read_text())
    assert rep["accuracy"] == {"color": 1.0, "count": 1.0} and rep["n"] == 6


def test_check_rejects_bad_options():
    r = runner.invoke(app, ["evaluator", "check", str(SPECS / "count.yaml"), "--n", "2", "--degrade", "heavy"])
    assert r.exit_code == 2 and "unknown degradation 'heavy'" in r.output
    r = runner.invoke(app, ["evaluator", "check", str(SPECS / "count.yaml"), "--evaluator", "nowhere"])
    assert r.exit_code == 2 and "neither 'parser' nor a directory" in r.output


def _dataset(tmp_path, write_spec):
    data = tiny(SPECS / "count_composition.yaml", size=64)
    data["splits"] = {"train": 1, "val": 0, "test_id": 0, "test_ood": 1, "per": "combination"}  # 10 held-out cells
    p = write_spec(data)
    root = tmp_path / "ds"
    generate(parse_spec(data), root)
    return p, root


def test_evaluate_scores_a_folder_seen_and_held_out(tmp_path, write_spec):
    p, root = _dataset(tmp_path, write_spec)
    out = tmp_path / "scores"
    r = runner.invoke(app, ["evaluate", str(root / "test_ood"), "--spec", str(p), "--out", str(out), "--check-n", "4"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    assert m["held_out"]["n"] == 10 and m["held_out"]["joint_accuracy"] == 1.0 and m["seen"]["n"] == 0
    assert m["evaluator"]["name"] == "parser" and m["evaluator"]["check"]["n"] == 4 and m["flagged"] is False
    assert (out / "metrics.csv").is_file() and (out / "heatmap.png").stat().st_size > 1000
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 10


def test_evaluate_reports_wrong_images_with_reasons(tmp_path, write_spec):
    p, root = _dataset(tmp_path, write_spec)
    folder = tmp_path / "model_images"  # a folder of images outside the dataset (a split inside one gets its quick check)
    shutil.copytree(root / "test_ood", folder)
    meta = folder / "metadata.jsonl"
    recs = [json.loads(line) for line in meta.read_text().splitlines()]
    recs[0]["concepts"]["count"] = recs[0]["concepts"]["count"] % 10 + 1  # claim another count
    recs[0].pop("held_out", None)  # its flag would now contradict the spec (refused): the spec decides
    meta.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "scores"
    r = runner.invoke(app, ["evaluate", str(folder), "--spec", str(p), "--out", str(out), "--check-n", "0"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    assert m["overall"]["accuracy"]["count"] == 0.9 and m["overall"]["count_mae"]["count"] > 0
    assert m["flagged"] is True and "not checked" in m["flag_reason"] and "FLAGGED" in r.output
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert not rows[0]["correct"] and rows[0]["reasons"][0].startswith("count: read ")
    assert any(x.startswith("found ") for x in rows[0]["reasons"])


def test_evaluate_needs_metadata(tmp_path):
    r = runner.invoke(app, ["evaluate", str(tmp_path), "--spec", str(SPECS / "count.yaml")])
    assert r.exit_code == 2 and "metadata.jsonl is missing" in r.output


def test_train_then_check_a_learned_evaluator(tmp_path, write_spec):
    p = write_spec(tiny(SPECS / "attribute.yaml"))
    ev = tmp_path / "ev"
    r = runner.invoke(app, ["evaluator", "train", str(p), "--out", str(ev), "--steps", "2", "--batch-size", "8", "--n-train", "16",
                            "--input-size", "16", "--width", "4", "--check-n", "4", "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert (ev / "model.safetensors").is_file() and "saved" in r.output
    r = runner.invoke(app, ["evaluator", "check", str(p), "--evaluator", str(ev), "--n", "4"])
    assert r.exit_code == 0, r.output
    assert "learned:ev" in r.output and "color1" in r.output


def test_evaluate_refuses_images_of_another_size_than_the_spec(tmp_path):
    """A new user scored 16 px images with a 64 px spec: every image was read and the evaluator's
    check (made at 64 px) said it was trusted. The images must be the spec's size; the fix is named."""
    from PIL import Image

    from mosaic.spec import load_spec
    from renderers import get_renderer
    from mosaic.scene import Scene, SceneObject

    sets = ["image.size=16", "objects.0.size=0.5"]
    spec = load_spec(SPECS / "coverage.yaml", sets)
    d = tmp_path / "imgs"
    (d / "images").mkdir(parents=True)
    scene = Scene(16, spec.background_rgb(), [SceneObject("circle", "red", spec.rgb("red"), 0.5, (0.5, 0.5))])
    Image.fromarray(get_renderer("pillow", supersample=spec.image.supersample).render([scene])[0][0]).save(d / "images" / "0.png")
    (d / "metadata.jsonl").write_text(json.dumps({"file_name": "images/0.png", "concepts": {"color": "red", "shape": "circle"}}) + "\n")
    out = tmp_path / "out"
    r = runner.invoke(app, ["evaluate", str(d), "--spec", str(SPECS / "coverage.yaml"), "--check-n", "0", "--out", str(out),
                            "--set", "objects.0.size=0.5"])
    assert r.exit_code == 2 and "not 64 x 64 px (this one is 16 x 16)" in r.output and "--set image.size=16" in r.output
    assert not (out / "metrics.json").exists()
    r = runner.invoke(app, ["evaluate", str(d), "--spec", str(SPECS / "coverage.yaml"), "--check-n", "0",
                            *[a for kv in sets for a in ("--set", kv)]])
    assert r.exit_code == 0, r.output


def test_a_flagged_score_names_the_measured_accuracy_below_the_threshold(tmp_path, write_spec, monkeypatch):
    import mosaic.evaluation.folder as folder

    p, root = _dataset(tmp_path, write_spec)
    monkeypatch.setattr(folder, "evaluator_accuracy", lambda spec, ev, n: {"n": n, "accuracy": {"color": 1.0, "count": 0.988},
                                                                            "joint_accuracy": 0.988})
    out = tmp_path / "scores"
    r = runner.invoke(app, ["evaluate", str(root / "test_ood"), "--spec", str(p), "--out", str(out), "--check-n", "4"])
    assert r.exit_code == 0, r.output
    m = json.loads((out / "metrics.json").read_text())
    assert m["flagged"] is True and m["evaluator"]["below_threshold"] == ["count"]
    assert "count 98.80%" in m["flag_reason"] and "4 fresh renders" in m["flag_reason"] and "color" not in m["flag_reason"]
    assert "count 98.80%" in r.output


def test_evaluate_never_overwrites_files_it_did_not_write(tmp_path, write_spec):
    p, root = _dataset(tmp_path, write_spec)
    user = tmp_path / "user"
    user.mkdir()
    (user / "metrics.json").write_text("precious")
    (user / "heatmap.png").write_text("precious too")
    (user / "notes.txt").write_text("mine")
    r = runner.invoke(app, ["evaluate", str(root / "test_ood"), "--spec", str(p), "--out", str(user), "--check-n", "0"])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "metrics.json, heatmap.png" in r.output and "did not write" in r.output
    assert (user / "metrics.json").read_text() == "precious" and (user / "heatmap.png").read_text() == "precious too"
    # a folder holding only other files is used, and a rerun replaces evaluate's own files
    (user / "metrics.json").unlink()
    (user / "heatmap.png").unlink()
    for _ in range(2):
        r = runner.invoke(app, ["evaluate", str(root / "test_ood"), "--spec", str(p), "--out", str(user), "--check-n", "0"])
        assert r.exit_code == 0, r.output
    assert json.loads((user / "metrics.json").read_text())["held_out"]["n"] == 10 and (user / "notes.txt").read_text() == "mine"
