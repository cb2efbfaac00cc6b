"""Metrics on hand-made predictions with known answers."""

from __future__ import annotations

import csv
import json

import pytest
from PIL import Image

from mosaic.errors import MosaicError
from mosaic.evaluation.metrics import score, write_metrics
from mosaic.spec import load_spec, parse_spec
from tests.conftest import SPECS

SPEC = {
    "name": "m",
    "image": {"size": 32},
    "concepts": {"color": {"values": ["red", "green"]}, "count": {"range": [1, 3]}},
    "objects": [{"name": "ball", "shape": "circle", "color": {"concept": "color"}, "size": 0.15, "repeat": {"concept": "count"}}],
    "holdout": {"concepts": ["color", "count"], "rule": {"kind": "explicit", "combinations": [["green", 3]]}},
    "splits": {"train": 10, "val": 2, "test_id": 2, "test_ood": 2},
}

RECORDS = [
    {"concepts": {"color": "red", "count": 1}, "held_out": False},
    {"concepts": {"color": "red", "count": 2}, "held_out": False},
    {"concepts": {"color": "green", "count": 1}, "held_out": False},
    {"concepts": {"color": "green", "count": 3}, "held_out": True},
    {"concepts": {"color": "green", "count": 3}, "held_out": True},
    {"concepts": {"color": "red", "count": 3}},  # no flag: seen
]
PREDS = [
    {"color": "red", "count": 1},
    {"color": "red", "count": 3},     # count off by 1
    {"color": None, "count": 1},      # colour unreadable
    {"color": "green", "count": 3},
    {"color": "red", "count": 5},     # both wrong; 5 is outside the domain, off by 2
    {"color": "red", "count": 3},
]


def test_score_known_answers():
    spec = parse_spec(SPEC)
    m = score(RECORDS, PREDS, spec)
    o, s, h = m["overall"], m["seen"], m["held_out"]
    assert (o["n"], s["n"], h["n"]) == (6, 4, 2)
    assert o["accuracy"] == pytest.approx({"color": 4 / 6, "count": 4 / 6})
    assert o["joint_accuracy"] == pytest.approx(3 / 6)
    assert o["unreadable"] == pytest.approx({"color": 1 / 6, "count": 0.0})
    assert o["count_mae"] == pytest.approx({"count": 3 / 6})
    assert s["accuracy"] == pytest.approx({"color": 3 / 4, "count": 3 / 4}) and s["joint_accuracy"] == pytest.approx(2 / 4)
    assert s["count_mae"]["count"] == pytest.approx(1 / 4)
    assert h["accuracy"] == pytest.approx({"color": 0.5, "count": 0.5}) and h["count_mae"]["count"] == pytest.approx(1.0)
    cells = {tuple(c["combination"]): c for c in m["grid"]["cells"]}
    assert m["grid"]["concepts"] == ["color", "count"]
    assert {k: (c["n"], c["joint_accuracy"]) for k, c in cells.items()} == {
        ("red", 1): (1, 1.0), ("red", 2): (1, 0.0), ("red", 3): (1, 1.0), ("green", 1): (1, 0.0), ("green", 3): (2, 0.5)}
    assert cells[("green", 3)]["status"] == "held_out" and cells[("red", 1)]["status"] == "seen"


def test_circular_bin_distance_for_positions():
    spec = load_spec(SPECS / "position.yaml")  # 10 bins, no holdout
    recs = [{"concepts": {"color": "red", "position": "0-18"}}, {"concepts": {"color": "red", "position": "36-54"}},
            {"concepts": {"color": "blue", "position": "72-90"}}]
    preds = [{"color": "red", "position": "324-342"}, {"color": "red", "position": "216-234"}, {"color": "blue", "position": None}]
    m = score(recs, preds, spec)
    assert m["overall"]["position_distance"] == {"position": pytest.approx((1 + 5) / 2)}
    assert m["overall"]["accuracy"] == pytest.approx({"color": 1.0, "position": 0.0})
    assert m["held_out"]["n"] == 0 and m["held_out"]["joint_accuracy"] is None
    assert m["grid"]["concepts"] == ["color", "position"]  # no holdout: the first two concepts


def test_bad_records_are_named():
    spec = parse_spec(SPEC)
    with pytest.raises(MosaicError, match="2 records but 1 predictions"):
        score(RECORDS[:2], PREDS[:1], spec)
    with pytest.raises(MosaicError, match=r"record 0 .*intended count = 7 .*is not a value"):
        score([{"concepts": {"color": "red", "count": 7}}], [{}], spec)
    # a value keeps its JSON type: true (== 1 in Python) and "1" are not the count 1, nor 1 the colour "1"
    for bad in (True, "1", [1], {"v": 1}):
        with pytest.raises(MosaicError, match=r"record 0 .*intended count = .* is not a value"):
            score([{"concepts": {"color": "red", "count": bad}}], [{}], spec)
    ok = score([{"concepts": {"color": "red", "count": 1.0}}], [{"color": "red", "count": 1}], spec)
    assert ok["overall"]["joint_accuracy"] == 1.0  # 1.0 is the number 1
    wrong = score([{"concepts": {"color": "red", "count": 1}}], [{"color": "red", "count": True}], spec)
    assert wrong["overall"]["accuracy"]["count"] == 0.0  # a prediction of true is no count
    with pytest.raises(MosaicError, match="concept 'count' is missing"):
        score([{"concepts": {"color": "red"}}], [{}], spec)


def test_write_metrics_json_csv_heatmap(tmp_path):
    spec = parse_spec(SPEC)
    m = score(RECORDS, PREDS, spec)
    paths = write_metrics(m, tmp_path, spec)
    assert json.loads(paths["json"].read_text())["overall"]["joint_accuracy"] == pytest.approx(0.5)
    rows = list(csv.DictReader(paths["csv"].open()))
    held = [r for r in rows if r["group"] == "held_out" and r["metric"] == "joint_accuracy"]
    assert float(held[0]["value"]) == pytest.approx(0.5) and held[0]["n"] == "2"
    cell = [r for r in rows if r["group"] == "cell" and r["combination"] == "green|3" and r["concept"] == "*"]
    assert float(cell[0]["value"]) == pytest.approx(0.5)
    im = Image.open(paths["heatmap"])
    assert im.size[0] > 300 and im.size[1] > 200


def test_heatmap_of_a_four_concept_grid(tmp_path):
    spec = load_spec(SPECS / "binding.yaml")
    from mosaic.evaluation import ground_truth

    _, recs = ground_truth(spec, 0, 40)
    m = score(recs, [r["concepts"] for r in recs], spec)
    assert m["overall"]["joint_accuracy"] == 1.0 and m["held_out"]["n"] == sum(r["held_out"] for r in recs)
    path = write_metrics(m, tmp_path, spec)["heatmap"]
    assert Image.open(path).size[0] > 500


def test_score_by_value_known_answers():
    """Per-value accuracy (the tail values of a skewed concept are scored from it): each value's
    images, seen and held-out together; values without images are absent."""
    m = score(RECORDS, PREDS, parse_spec(SPEC))
    bv = m["by_value"]
    assert set(bv) == {"color", "count"}
    assert {v: (r["n"], r["joint_accuracy"]) for v, r in bv["color"].items()} == {
        "red": (3, pytest.approx(2 / 3)), "green": (3, pytest.approx(1 / 3))}
    assert {v: (r["n"], r["joint_accuracy"]) for v, r in bv["count"].items()} == {
        "1": (2, 0.5), "2": (1, 0.0), "3": (3, pytest.approx(2 / 3))}
    assert bv["count"]["3"]["accuracy"] == pytest.approx({"color": 2 / 3, "count": 2 / 3})
