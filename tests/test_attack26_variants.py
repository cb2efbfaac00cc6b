"""Variants of attack rounds 25-26 at the mechanisms fixed for them: the evaluator check measured
again (its n bound by the run's config, its accuracies and verdict), the quality figures derived
from predictions.jsonl, a finished run's figures derived again before a rerun prints them, and
YAML tags without an order refused wherever YAML is read."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import clean_exit_2, run_cli, scored_folder, sweep_copy, trial_dirs


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "a26v")


def _forge_check(t, edit):
    """The evaluator check edited in both the samples folder's file and the run's metrics."""
    s = scored_folder(t)
    check = json.loads((s / "evaluator_check.json").read_text())
    edit(check)
    (s / "evaluator_check.json").write_text(json.dumps(check))
    m = json.loads((t / "run" / "metrics.json").read_text())
    m["evaluator_check"] = check
    (t / "run" / "metrics.json").write_text(json.dumps(m))


@pytest.mark.parametrize("edit", [
    lambda c: c.update(n=10**9),                                  # never rendered: bound by evaluation.check_n
    lambda c: c.update(n=True),
    lambda c: c.update(passed=not c["passed"]),
    lambda c: c["accuracy"].update({k: 1.0 - v for k, v in c["accuracy"].items()}),
    lambda c: c.update(accuracy="all right"),
], ids=["n-huge", "n-bool", "passed-flipped", "per-concept", "accuracy-text"])
def test_a_forged_evaluator_check_is_refused(swept, tmp_path, edit):
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    _forge_check(t, edit)
    clean_exit_2(run_cli(["report", str(sw)]), "evaluator_check.json")


def test_an_evaluator_check_within_its_tolerance_is_reported(swept, tmp_path):
    """A check measured on a GPU may differ from the CPU's by an argmax or two: within 0.02 it stands."""
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    _forge_check(t, lambda c: c.update(seconds=c.get("seconds", 0) + 5))
    r = run_cli(["report", str(sw)])
    assert r.exit_code == 0, r.output


def test_quality_from_predictions_is_the_recorded_quality(swept):
    from mosaic.evaluation.load import load_evaluator
    from mosaic.evaluation.quality import quality_from_predictions
    from mosaic.records import spec_from_data
    from mosaic.evaluation.trial_scores import _close

    t = trial_dirs(swept[1])[0]
    s = scored_folder(t)
    spec = spec_from_data(json.loads((t / "run" / "dataset_manifest.json").read_text())["spec"])
    rows = [json.loads(x) for x in (s / "predictions.jsonl").read_text().splitlines()]
    assert all("raw" in r and isinstance(r["below"], bool) for r in rows)
    again = quality_from_predictions(rows, spec, load_evaluator(spec, "parser"))
    assert _close(again, json.loads((s / "metrics.json").read_text())["quality"])
    for r in rows:  # rows of an older mosaic: nothing to compare, never an error
        r.pop("raw")
    assert quality_from_predictions(rows, spec, None) is None
    rows[0]["raw"] = {}
    with pytest.raises(ValueError, match="carry no raw read"):
        quality_from_predictions(rows, spec, None)


def test_a_rerun_of_a_finished_run_never_prints_a_forged_table(swept, tmp_path):
    """The table alone edited in a finished run's metrics.json (scores untouched): the rerun's print is refused."""
    sw = sweep_copy(swept, tmp_path)
    run = trial_dirs(sw)[0] / "run"
    m = json.loads((run / "metrics.json").read_text())
    for g in ("seen", "held_out"):
        if isinstance(m["table"].get(g), dict) and "joint" in m["table"][g]:
            m["table"][g]["joint"] = 0.987
    (run / "metrics.json").write_text(json.dumps(m))
    r = run_cli(["train", "diffusion", str(run / "config.yaml"), "--out", str(run)])
    clean_exit_2(r, "metrics.json")
    assert "DONE" in r.output  # the fix names what to delete


def test_a_rerun_of_a_moved_finished_run_checks_its_own_samples(swept, tmp_path):
    moved = tmp_path / "elsewhere"
    shutil.copytree(trial_dirs(swept[1])[0] / "run", moved, symlinks=True)
    r = run_cli(["train", "diffusion", str(moved / "config.yaml"), "--out", str(moved)])
    assert r.exit_code == 0, r.output
    assert "already done" in r.output and str(moved) in r.output


@pytest.mark.parametrize("text", ["!!set {a, b}", "!!omap [{a: 1}, {b: 2}]", "!!pairs [{a: 1}]"])
def test_yaml_tags_without_an_order_are_refused_in_a_set_value(made, text):
    r = run_cli(["validate", str(made[0]), "--set", f"concepts.color.values={text}"])
    clean_exit_2(r, "not allowed")


def test_a_yaml_set_in_a_sweep_file_is_refused(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nkind: diffusion\nconfig: experiments/train/quickstart_cpu.yaml\nseeds: !!set {0, 1}\n")
    clean_exit_2(run_cli(["sweep", str(p), "--dry-run"]), "not allowed")
