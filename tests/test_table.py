"""The one seen / held-out table (mosaic.evaluation.table): schema, builders, results columns, printer."""

from __future__ import annotations

import math

import pytest
import torch
from rich.console import Console

from mosaic.evaluation.table import (
    accuracy_row, build_table, check_row, render_table, table_columns, table_from_scores, table_from_splits,
)


def test_build_table_orders_groups_and_refuses_unknown_ones():
    t = build_table({"held_out": {"a": 0.5, "n": 2}, "seen": {"a": 1.0, "n": 4}, "test": None})
    assert list(t) == ["seen", "held_out"]
    assert build_table({"seen": {"a": 1.0, "b": 0.0, "n": 4}}, keys=("b", "n")) == {"seen": {"b": 0.0, "n": 4}}
    with pytest.raises(ValueError, match="'unseen'.*not among"):
        build_table({"unseen": {"n": 1}})
    with pytest.raises(ValueError, match="no 'n'"):
        build_table({"seen": {"a": 1.0}})


def test_accuracy_row_leaves_unlabelled_examples_out_of_a_concept_but_not_of_the_joint():
    pred = torch.tensor([[0, 1], [1, 1], [2, 0], [0, 0]])
    target = torch.tensor([[0, 1], [1, 0], [-1, 0], [0, 0]])
    row = accuracy_row(pred, target, ["color", "shape"])
    assert row["color"] == 1.0  # 3 labelled, all right
    assert row["shape"] == 0.75 and row["joint"] == 0.5 and row["n"] == 4  # the -1 example is a joint miss
    empty = accuracy_row(pred[:0], target[:0], ["color"])
    assert empty["n"] == 0 and math.isnan(empty["color"]) and math.isnan(empty["joint"])


def test_table_from_scores_renames_joint_accuracy_and_leaves_out_an_empty_group():
    scores = {"overall": {"n": 5}, "seen": {"n": 5, "accuracy": {"color": 0.8}, "joint_accuracy": 0.6},
              "held_out": {"n": 0, "accuracy": {"color": None}, "joint_accuracy": None}}
    assert table_from_scores(scores) == {"seen": {"color": 0.8, "joint": 0.6, "n": 5}}


def test_table_from_splits_maps_test_splits_to_groups():
    per_split = {"test_ood": {"object_accuracy": 0.1, "n": 4, "x": 1}, "test_id": {"object_accuracy": 0.9, "n": 36, "x": 2},
                 "val": {"object_accuracy": 1.0, "n": 3, "x": 3}}
    t = table_from_splits(per_split, ("object_accuracy", "n"))
    assert t == {"seen": {"object_accuracy": 0.9, "n": 36}, "held_out": {"object_accuracy": 0.1, "n": 4}}


def test_results_columns_and_the_evaluator_check_row():
    t = {"seen": {"color": 0.8, "joint": 0.6, "n": 5}, "held_out": {"color": 0.5, "joint": None, "n": 2}, "test": {"joint": 1.0, "n": 1}}
    assert table_columns(t) == {"seen.color": 0.8, "seen.joint": 0.6, "held_out.color": 0.5}
    assert table_columns(None) == {}
    # check_evaluator's dict and a check already in row form give the same row
    assert check_row({"n": 4, "accuracy": {"color": 1.0}, "joint_accuracy": 0.75}) == {"color": 1.0, "joint": 0.75, "n": 4}
    assert check_row({"joint": 0.998})["joint"] == 0.998 and check_row(None)["joint"] is None


def test_render_table_puts_joint_last_and_shows_undefined_values_as_a_dash():
    t = {"seen": {"joint": 0.5, "color": 0.25, "n": 4}, "held_out": {"joint": float("nan"), "color": None, "n": 0}}
    con = Console(width=120, record=True)
    con.print(render_table(t, "title"))
    text = con.export_text()
    lines = [ln for ln in text.splitlines() if "│" in ln]
    assert "seen (n=4)" in text and "held-out (n=0)" in text
    assert lines[0].split("│")[1].strip() == "color" and lines[-1].split("│")[1].strip() == "joint"
    assert lines[0].split("│")[2].strip() == "25.0%" and lines[0].split("│")[3].strip() == "-"
    assert render_table({}, "empty") is None
