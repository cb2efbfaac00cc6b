"""Variants of attack round 30 at the mechanisms fixed for it: names the results columns use refused as concept
names, null and NaN one unmeasured value wherever a record is compared, a deleted current folder named before any
command runs, and the audit's per-concept figures."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.conftest import TINY_COUNT_SPEC, clean_exit_2, run_cli


@pytest.mark.parametrize("name", ["quality", "raw", "unreadable", "seen", "overall", "accuracy"])
def test_a_concept_named_like_a_results_column_is_refused_by_the_spec(tmp_path, name):
    d = yaml.safe_load(TINY_COUNT_SPEC)
    d["concepts"][name] = d["concepts"].pop("color")
    d["objects"][0]["color"] = {"concept": name}
    d["holdout"]["concepts"] = [name, "count"]
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    clean_exit_2(run_cli(["generate", p, "--out", tmp_path / "d"]), name, collapse_space=True)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("a,b,same", [(None, float("nan"), True), (float("nan"), None, True), (None, 0.0, False),
                                      ({"x": float("nan")}, {"x": None}, True), (10**400, 10**400, True), (10**400, 1.0, False)])
def test_an_unmeasured_value_is_one_value_in_every_comparison(a, b, same):
    from mosaic.evaluation.trial_scores import _same
    from mosaic.lab.run_record import _close

    assert _close(a, b) is same
    if not isinstance(a, dict):
        assert _same(a, b) is same


@pytest.mark.parametrize("args", [["verify", "d"], ["report", "sw"], ["generate", "s.yaml", "--out", "d"], ["schema", "spec"]])
def test_every_command_from_a_deleted_folder_is_named(tmp_path, args):
    gone = tmp_path / "gone"
    gone.mkdir()
    here = os.getcwd()
    os.chdir(gone)
    try:
        gone.rmdir()
        r = run_cli(args)
    finally:
        os.chdir(here)
    clean_exit_2(r, "current folder no longer exists", collapse_space=True)


def test_the_audits_figures_per_concept_come_from_the_rows():
    from mosaic.audit_rows import evaluation_problem

    recs = [(1, {"file_name": "a.png", "concepts": {"c": "red", "k": 1}, "held_out": False}),
            (2, {"file_name": "b.png", "concepts": {"c": "blue", "k": 2}, "held_out": False})]
    rows = [(1, {"file_name": "a.png", "intended": {"c": "red", "k": 1}, "read": {"c": "red", "k": 1}, "correct": True, "held_out": False}),
            (2, {"file_name": "b.png", "intended": {"c": "blue", "k": 2}, "read": {"c": "red", "k": 2}, "correct": False, "held_out": False})]
    g = {"n": 2, "joint_accuracy": 0.5, "accuracy": {"c": 0.5, "k": 1.0}, "unreadable": {"c": 0.0, "k": 0.0}}
    metrics = {"overall": g, "seen": g, "held_out": {"n": 0, "joint_accuracy": None, "accuracy": {"c": None, "k": None},
                                                     "unreadable": {"c": None, "k": None}}}
    assert evaluation_problem(rows, recs, metrics) is None
    moved = [rows[0], (2, {**rows[1][1], "read": {"c": "blue", "k": 3}})]  # the wrong concept moved, the verdict kept
    assert "accuracy.c" in evaluation_problem(moved, recs, metrics)
    unread = [rows[0], (2, {**rows[1][1], "read": {"c": None, "k": 2}})]  # a wrong read re-filed as unreadable
    assert "unreadable.c" in evaluation_problem(unread, recs, metrics)
