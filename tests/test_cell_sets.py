"""``report.cells``: scores over a fixed set of combinations in every trial of a sweep, whatever its holdout."""

import json
import math

import pytest
import yaml

from mosaic.evaluation.cell_sets import cell_set_columns, cell_set_problems
from mosaic.holdout_rules import DiagonalRule, ExplicitRule
from mosaic.sweep import SweepError, load_sweep, trial_id
from mosaic.trials import collect, plan, write_status
from tests.conftest import finished_trial_files
from tests.test_sweep import sweep_file

COLORS = ["red", "green", "blue"]
CFG = {"name": "r", "dataset": {"spec": "experiments/specs/count_composition.yaml", "overrides": {"image.size": 32}},
       "training": {"steps": 5}}


def _grid(n_held: int, acc: dict) -> dict:
    """A 3 x 3 colour1 x colour2 grid's per-cell scores, diagonals (c2 - c1) mod 3 < n_held held out;
    ``acc[(i, j)]`` the joint accuracy of cell (i, j), 10 images a cell (j = 2: only 4)."""
    cells = []
    for i, a in enumerate(COLORS):
        for j, b in enumerate(COLORS):
            k = 4 if j == 2 else 10
            cells.append({"combination": [a, b], "n": k, "joint_accuracy": acc[(i, j)],
                          "accuracy": {"color1": 1.0, "color2": acc[(i, j)]},
                          "status": "held_out" if (j - i) % 3 < n_held else "seen"})
    return {"concepts": ["color1", "color2"], "domains": {"color1": COLORS, "color2": COLORS}, "cells": cells}


def test_the_columns_weight_each_cell_of_the_set_by_its_images():
    acc = {(i, j): 0.1 * (3 * i + j) for i in range(3) for j in range(3)}
    same = {"same": DiagonalRule(kind="diagonal", n=1)}
    cols = cell_set_columns(_grid(1, acc), same)
    # cells (0,0) (1,1) (2,2): 10, 10 and 4 images at 0.0, 0.4, 0.8
    assert cols["cells.same.n"] == 24
    assert cols["cells.same.joint"] == pytest.approx((10 * 0.0 + 10 * 0.4 + 4 * 0.8) / 24)
    assert cols["cells.same.color1"] == 1.0 and cols["cells.same.color2"] == pytest.approx(cols["cells.same.joint"])
    assert cols["cells.same.held_out"] == 1.0
    # the same cells in a trial that holds out two diagonals: the set does not change, only its status would
    assert cell_set_columns(_grid(2, acc), same)["cells.same.joint"] == pytest.approx(cols["cells.same.joint"])
    # an explicit set, partly seen in this trial
    two = {"pair": ExplicitRule(kind="explicit", combinations=[["red", "green"], ["blue", "blue"]])}
    cols = cell_set_columns(_grid(1, acc), two)
    assert cols["cells.pair.n"] == 14 and cols["cells.pair.held_out"] == pytest.approx(4 / 14)
    assert cols["cells.pair.joint"] == pytest.approx((10 * 0.1 + 4 * 0.8) / 14)


def test_a_trial_without_images_of_the_set_gives_nan_and_no_grid_gives_no_columns():
    acc = {(i, j): 1.0 for i in range(3) for j in range(3)}
    g = _grid(1, acc)
    g["cells"] = [c for c in g["cells"] if c["combination"][0] != c["combination"][1]]
    cols = cell_set_columns(g, {"same": DiagonalRule(kind="diagonal", n=1)})
    assert cols["cells.same.n"] == 0 and math.isnan(cols["cells.same.joint"])
    assert cell_set_columns(None, {"same": DiagonalRule(kind="diagonal", n=1)}) == {}


def test_a_set_that_does_not_fit_the_grid_is_named():
    assert cell_set_problems({"d": DiagonalRule(kind="diagonal", n=3)}, ["color1", "color2"], [COLORS, COLORS]) == [
        "report.cells.d.n: n = 3 >= the grid's side 3 (color1 has 3 values): it would hold out every combination; use n <= 2"]
    assert "holds no combination" in cell_set_problems({"d": DiagonalRule(kind="diagonal", n=0)}, ["color1", "color2"],
                                                       [COLORS, COLORS])[0]


def test_a_sweep_validates_its_cell_sets_and_claims_on_them_before_running(tmp_path):
    grid = {"spec.holdout.rule.n": [1, 2]}
    ok = load_sweep(sweep_file(tmp_path, CFG, grid=grid, report={
        "cells": {"same": {"kind": "diagonal", "n": 1}},
        "claims": [{"kind": "decreases", "y": "cells.same.joint", "x": "spec.holdout.rule.n"}]}))
    assert len(plan(ok, tmp_path / "out")) == 2
    with pytest.raises(SweepError, match=r"report\.cells\.same\.n: n = 12 >= the grid's side"):
        plan(load_sweep(sweep_file(tmp_path, CFG, grid=grid, report={"cells": {"same": {"kind": "diagonal", "n": 12}}})), tmp_path / "o2")
    with pytest.raises(SweepError, match="cells.sme.joint"):  # a claim on a set the sweep does not define
        plan(load_sweep(sweep_file(tmp_path, CFG, grid=grid, report={
            "cells": {"same": {"kind": "diagonal", "n": 1}},
            "claims": [{"kind": "decreases", "y": "cells.sme.joint", "x": "spec.holdout.rule.n"}]})), tmp_path / "o3")
    with pytest.raises(SweepError, match="cells"):  # a name that cannot be a column part
        load_sweep(sweep_file(tmp_path, CFG, grid=grid, report={"cells": {"a.b": {"kind": "diagonal", "n": 1}}}))
    with pytest.raises(SweepError, match="kind"):
        load_sweep(sweep_file(tmp_path, CFG, grid=grid, report={"cells": {"x": {"kind": "diagonl", "n": 1}}}))


def test_collect_adds_the_cell_set_columns_from_each_trials_scores(tmp_path, monkeypatch):
    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "demo", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"spec.holdout.rule.n": [1, 2]},
                                                    "report": {"cells": {"same": {"kind": "diagonal", "n": 1}}}}))
    for n, same_acc in ((1, 0.9), (2, 0.5)):
        values = {"spec.holdout.rule.n": n, "seed": 0}
        tdir = out / "trials" / trial_id(values)
        (tdir / "run").mkdir(parents=True)
        write_status(tdir, {"id": trial_id(values), "values": values, "status": "done", "time_s": 1.0, "error": None})
        finished_trial_files(tdir)
        acc = {(i, j): same_acc if i == j else 1.0 for i in range(3) for j in range(3)}
        (tdir / "run" / "metrics.json").write_text(json.dumps({
            "table": {"seen": {"n": 10, "joint": 1.0}, "held_out": {"n": 10, "joint": 0.7}},
            "scores": {"grid": _grid(n, acc)}}))
    import mosaic.trials as T

    monkeypatch.setattr(T, "check_run_scores", lambda run, m: None)  # the columns, not the figures' provenance (trial_scores' tests)
    df = collect(out).sort_values("spec.holdout.rule.n")
    assert list(df["cells.same.joint"]) == pytest.approx([0.9, 0.5])
    assert list(df["cells.same.n"]) == [24, 24]
