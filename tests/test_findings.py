"""Reduced versions of the MOSAIC findings' CPU sweeps (experiments/sweeps/*_cpu.yaml), one seed
each, asserting the direction the full sweeps measure (README "Findings"). Each trial is the
sweep's own trial config (:func:`mosaic.sweep.trial_config`), so these fail if a sweep's design
drifts from what was measured. About 5-6 CPU-minutes a trial: marked slow."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow


def _trial(sweep_name: str, values: dict, tmp: Path) -> dict:
    from mosaic.lab.config import validate_config
    from mosaic.lab.diffusion import DiffusionConfig, run_diffusion
    from mosaic.lab.config import set_path
    from mosaic.sweep import load_sweep, trial_config

    sweep = load_sweep(ROOT / "experiments" / "sweeps" / f"{sweep_name}.yaml")
    raw = trial_config(sweep, {**values, "seed": values.get("seed", 0)})
    name = hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:10]
    raw = set_path(raw, "out", str(tmp / name))
    raw = set_path(raw, "dataset.root", str(tmp / "data"))
    raw = set_path(raw, "dataset.spec", str(ROOT / raw["dataset"]["spec"]))
    cfg = validate_config(DiffusionConfig, raw)
    return run_diffusion(cfg, say=lambda s: None)


def test_composition_held_out_accuracy_falls_as_more_diagonals_are_held_out(tmp_path, monkeypatch):
    """composition_cpu at N = 1 and N = 3 (seed 0): seen learned, held-out joint lower at N = 3."""
    monkeypatch.chdir(ROOT)
    n1 = _trial("composition_cpu", {"spec.holdout.rule.n": 1}, tmp_path)
    n3 = _trial("composition_cpu", {"spec.holdout.rule.n": 3}, tmp_path)
    assert n1["table"]["seen"]["joint"] >= 0.9  # every N = 1 trial of the sweep: 99.0-100 %
    assert n1["table"]["held_out"]["joint"] > n3["table"]["held_out"]["joint"]  # seed 0: 6.2 % against 0 %


def test_attribute_composition_held_out_accuracy_falls_from_one_to_eight_diagonals(tmp_path, monkeypatch):
    """composition_attribute_cpu (MOSAIC's colour-pair grid) at N = 1 and N = 8 (seed 0): the easiest
    setting learns its seen pairs, and held-out joint accuracy is lower with 8 diagonals held out
    than with 1 (docs/findings.md). About 10 CPU-minutes a trial."""
    monkeypatch.chdir(ROOT)
    n1 = _trial("composition_attribute_cpu", {"spec.holdout.rule.n": 1}, tmp_path)
    n8 = _trial("composition_attribute_cpu", {"spec.holdout.rule.n": 8}, tmp_path)
    assert n1["table"]["seen"]["joint"] >= 0.9
    assert n1["table"]["held_out"]["n"] >= 100 and n8["table"]["seen"]["n"] >= 100  # the sweep's sample-count promise
    assert n1["table"]["held_out"]["joint"] > n8["table"]["held_out"]["joint"]
    # the claim registered after seeds 0-2 and held on seeds 3-5: the same-colour pairs, held out at every N,
    # fall from N = 1 to 8 (seeds 3-5: 77.0 -> 46.3 %; seed 0: 84.0 -> 52.0 %)
    from mosaic.evaluation.cell_sets import cell_set_columns
    from mosaic.sweep import load_sweep

    cells = load_sweep(ROOT / "experiments" / "sweeps" / "composition_attribute_cpu.yaml").report.cells
    same1, same8 = (cell_set_columns(m["scores"]["grid"], cells) for m in (n1, n8))
    assert same1["cells.same_colour.n"] == same8["cells.same_colour.n"] == 100
    assert same1["cells.same_colour.joint"] > same8["cells.same_colour.joint"] + 0.1


def test_position_composition_held_out_accuracy_collapses_from_one_to_eight_diagonals(tmp_path, monkeypatch):
    """composition_position_cpu (MOSAIC's colour x position grid, time_condition, 3600 steps, nearest-bin
    reading) at N = 1 and N = 8 (seed 0): the seen combinations are learned and held-out joint accuracy
    collapses with 8 diagonals held out (the sweep, seed 0: N = 1 seen 95.3 %, held-out 98.0 %; N = 8
    held-out 18.8 %; docs/findings.md). About 10 CPU-minutes a trial."""
    monkeypatch.chdir(ROOT)
    n1 = _trial("composition_position_cpu", {"spec.holdout.rule.n": 1}, tmp_path)
    n8 = _trial("composition_position_cpu", {"spec.holdout.rule.n": 8}, tmp_path)
    assert n1["table"]["seen"]["joint"] >= 0.9  # the sweep's N = 1 trials: 93.1-95.3 %
    assert n1["table"]["held_out"]["n"] >= 100 and n8["table"]["seen"]["n"] >= 100
    assert n8["table"]["held_out"]["joint"] < n1["table"]["held_out"]["joint"] - 0.3


def test_count_composition_held_out_accuracy_collapses_from_one_to_three_diagonals(tmp_path, monkeypatch):
    """composition_count_cpu (MOSAIC's colour x count grid, 4 x 4 at 16 px, the counting recipe) at
    N = 1 and N = 3 (seed 0): the seen combinations are learned and held-out joint accuracy collapses
    with 3 of 4 diagonals held out (the sweep, seed 0: N = 1 seen 95.7 %, held-out 85.0 %; N = 3
    held-out 4.3 %; docs/findings.md). About 13 CPU-minutes a trial."""
    monkeypatch.chdir(ROOT)
    n1 = _trial("composition_count_cpu", {"spec.holdout.rule.n": 1}, tmp_path)
    n3 = _trial("composition_count_cpu", {"spec.holdout.rule.n": 3}, tmp_path)
    assert n1["table"]["seen"]["joint"] >= 0.9  # the sweep's N = 1 trials: 90.7-95.7 %
    assert n1["table"]["held_out"]["n"] >= 100 and n3["table"]["seen"]["n"] >= 100
    assert n3["table"]["held_out"]["joint"] < n1["table"]["held_out"]["joint"] - 0.5


def test_complexity_vs_imbalance_direction_measured_on_cpu(tmp_path, monkeypatch):
    """complexity_imbalance_cpu (seed 0): the direction every seed of the sweep measured, the
    opposite of MOSAIC's statement at this scale: a skewed shape distribution costs its tail value
    (cross) more than 1-3 distractors cost overall joint accuracy (seed 0: 15.6 against 1.7 points;
    over 3 seeds inconclusive, README "Findings")."""
    monkeypatch.chdir(ROOT)
    conds = {"baseline": ([0, 0], "uniform"), "distractors": ([1, 3], "uniform"),
             "skewed": ([0, 0], {"kind": "geometric", "ratio": 0.5})}
    t = {}
    for name, (rng, dist) in conds.items():
        t[name] = _trial("complexity_imbalance_cpu", {"label.condition": name, "spec.distractors.0.repeat.range": rng,
                                                      "spec.concepts.shape.distribution": dist}, tmp_path)

    def cross(m):
        return m["scores"]["by_value"]["shape"]["cross"]["joint_accuracy"]

    base = t["baseline"]["table"]["seen"]["joint"]
    assert base >= 0.9
    drop_distractors = base - t["distractors"]["table"]["seen"]["joint"]
    drop_tail = cross(t["baseline"]) - cross(t["skewed"])
    assert drop_tail > drop_distractors


def test_complexity_costs_more_than_imbalance_on_the_position_task(tmp_path, monkeypatch):
    """complexity_position_cpu (seed 0) as shipped (the UNet's last level at 32 channels), read with
    nearest bins: the baseline learns its combinations and 0-8 distractors cost more joint accuracy
    than MOSAIC's skewed position table (seed 0: baseline 94.3 %, distractors 83.3 %, skew 90.4 %;
    docs/findings.md). Three 24 px trials of 4400 steps: about 35 CPU-minutes."""
    monkeypatch.chdir(ROOT)
    skew = {"kind": "weights", "weights": [2255, 1795, 1435, 1145, 915, 730, 585, 465, 375, 300]}
    conds = {"baseline": ([0, 0], "uniform"), "complexity": ([0, 8], "uniform"), "imbalance": ([0, 0], skew)}
    joint = {}
    for name, (rng, dist) in conds.items():
        m = _trial("complexity_position_cpu", {"label.condition": name, "spec.distractors.0.repeat.range": rng,
                                               "spec.concepts.position.distribution": dist}, tmp_path)
        joint[name] = m["table"]["seen"]["joint"]
    assert joint["baseline"] >= 0.9
    assert joint["baseline"] - joint["complexity"] > joint["baseline"] - joint["imbalance"]


def test_counting_count_is_the_hardest_concept_at_the_smallest_size(tmp_path, monkeypatch):
    """counting_cpu at 200 training images (seed 0): what the 3-seed sweep measured at every size,
    count accuracy well below colour accuracy. The paper's claim (count drops more than colour from
    large to small data) is not shown at CPU scale (README "Findings"), so it is not asserted."""
    monkeypatch.chdir(ROOT)
    m = _trial("counting_cpu", {"spec.splits.train": 200}, tmp_path)
    seen = m["table"]["seen"]
    assert seen["color"] >= 0.85
    assert seen["count"] < seen["color"] - 0.1


def test_counting_lowdata_recipe_learns_to_count_with_the_most_data(tmp_path, monkeypatch):
    """counting_lowdata_cpu at 3200 training images (seed 0): with the circles 0.1 of the image apart,
    time_condition and 4400 steps the 1 M UNet counts 1-3 (pilot: count 97.5 %, colour 100 %;
    counting_cpu's touching circles: 71.9 %; docs/findings.md "Counting: the recipe search").
    About 10 CPU-minutes."""
    monkeypatch.chdir(ROOT)
    m = _trial("counting_lowdata_cpu", {"spec.splits.train": 3200}, tmp_path)
    seen = m["table"]["seen"]
    assert seen["n"] >= 100
    assert seen["joint"] >= 0.9
    assert m["scores"]["by_value"]["count"]["3"]["accuracy"]["count"] >= 0.8  # the count counting_cpu missed


def test_counting_lowdata_no_penalty_at_32_images_on_cpu(tmp_path, monkeypatch):
    """counting_lowdata_cpu at 32 training images (about 3 a combination, seed 0): what the sweep
    measured, the opposite of MOSAIC's statement at this scale: at a fixed 4400 steps the 12
    combinations are memorized and count is drawn as well as colour (sweep, seeds 0 / 1: count
    99.2 / 99.2 %, colour 99.2 / 100 %). About 10 CPU-minutes."""
    monkeypatch.chdir(ROOT)
    m = _trial("counting_lowdata_cpu", {"spec.splits.train": 32}, tmp_path)
    seen = m["table"]["seen"]
    assert seen["color"] >= 0.9
    assert seen["count"] >= seen["color"] - 0.05


def test_counting_lowdata4_small_sets_are_memorised(tmp_path, monkeypatch):
    """counting_lowdata4_cpu at 32 training images (counts 1-4, seed 0): the reason the low-data
    penalty hardly shows at this scale. Most seen samples are near-copies of a training image
    (sweep, seeds 0 / 1 / 2: 100 / 98.7 / 98.7 %; at 3200 images 3-7 %), and count stays high
    (92.7-93.3 %). About 10 CPU-minutes."""
    from mosaic.evaluation.folder import training_copies

    monkeypatch.chdir(ROOT)
    m = _trial("counting_lowdata4_cpu", {"spec.splits.train": 32}, tmp_path)
    assert m["table"]["seen"]["n"] >= 100 and m["table"]["seen"]["count"] >= 0.8
    copies = training_copies(m["samples"]["out"], m["dataset"]["path"])
    assert copies["samples"]["copy_share"] >= 0.8


def test_counting_middata5_counts_to_five_at_20px_and_count_bends_with_data_colour_does_not(tmp_path, monkeypatch):
    """counting_middata5_cpu (counts 1-5, 20 px) at 3200 and 400 training images, seed 0: the largest set
    learns to count to five (sweep, seeds 0-5 at 3200: 89.0-96.0 %; the same design at 16 px read 83.5 %),
    colour is learned at both sizes, and count falls from 3200 to 400 at least as much as colour does
    (sweep, seeds 0 / 1 / 2: +2.0 / +5.0 / +2.0 points; the 3-point slack is a trial's sampling error at
    n = 200). About 25 CPU-minutes."""
    monkeypatch.chdir(ROOT)
    big = _trial("counting_middata5_cpu", {"spec.splits.train": 3200}, tmp_path)["table"]["seen"]
    small = _trial("counting_middata5_cpu", {"spec.splits.train": 400}, tmp_path)["table"]["seen"]
    assert big["n"] >= 100 and small["n"] >= 100
    assert big["count"] >= 0.85 and big["color"] >= 0.95 and small["color"] >= 0.95
    assert big["count"] - small["count"] >= big["color"] - small["color"] - 0.03


def test_attribute_recipe_transfers_to_another_palette(tmp_path, monkeypatch):
    """recipe_transfer_attribute_cpu, its palette condition (nine colours not MOSAIC's, the same-
    colour diagonal held out), seed 0: the untuned recipe learns the seen pairs and the held-out
    same-colour pairs fall well below them (sweep, seeds 0 / 1 / 2: seen 94.4 / 93.3 / 92.3 %,
    held-out 76 / 76 / 72 %). About 8 CPU-minutes."""
    from mosaic.sweep import expand, load_sweep

    monkeypatch.chdir(ROOT)
    sweep = load_sweep(ROOT / "experiments" / "sweeps" / "recipe_transfer_attribute_cpu.yaml")
    values = next(v for v in expand(sweep) if v["label.condition"] == "palette" and v["seed"] == 0)
    m = _trial("recipe_transfer_attribute_cpu", values, tmp_path)
    seen, held = m["table"]["seen"], m["table"]["held_out"]
    assert seen["n"] >= 100 and held["n"] >= 100
    assert seen["joint"] >= 0.9
    assert held["joint"] < seen["joint"] - 0.1
