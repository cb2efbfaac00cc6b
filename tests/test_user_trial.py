"""What a new user's trial of the README found (2026-12-06), fixed where it happens: a misspelt spec path gets the
closest file of its folder, a relative path run from another folder says where it is read from, `mosaic sweep`
prints its claims' verdicts as `mosaic report` does, and the per-concept figure shows only concepts, three panels a
row."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import clean_exit_2, ok_cli, run_cli, sweep_copy

ROOT = Path(__file__).resolve().parents[1]


def test_a_misspelt_spec_path_gets_the_closest_file_of_its_folder(tmp_path):
    r = run_cli(["generate", ROOT / "experiments/specs/coverag.yaml", "--out", tmp_path / "d"])
    clean_exit_2(r, "did you mean", "coverage.yaml", collapse_space=True)
    assert not (tmp_path / "d").exists()


def test_a_relative_path_from_another_folder_says_where_it_is_read_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli(["generate", "experiments/specs/coverage.yaml", "--out", "d"])
    clean_exit_2(r, "relative path is read from the current folder", "project folder", collapse_space=True)


def test_a_config_whose_spec_is_relative_from_another_folder_names_the_project_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run_cli(["train", "diffusion", ROOT / "experiments/train/quickstart_cpu.yaml", "--dry-run"])
    clean_exit_2(r, "dataset.spec", "project folder holding experiments/", collapse_space=True)
    assert "e.g. experiments/specs/coverage.yaml" not in " ".join(r.output.split())  # never the path that just failed


def test_a_config_whose_spec_is_misspelt_gets_the_closest_file(tmp_path):
    cfg = yaml.safe_load((ROOT / "experiments/train/quickstart_cpu.yaml").read_text())
    cfg["dataset"]["spec"] = str(ROOT / "experiments/specs/coverge.yaml")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    clean_exit_2(run_cli(["train", "diffusion", p, "--dry-run"]), "did you mean", "coverage.yaml", collapse_space=True)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "ut")


def test_a_sweep_prints_its_claims_verdicts(swept, tmp_path):
    """A finished sweep run again (its trials skipped) with a claim: the verdict is printed, as by `mosaic report`."""
    p, _ = swept
    sw = sweep_copy(swept, tmp_path)
    d = yaml.safe_load(Path(p).read_text())
    d.setdefault("report", {})["claims"] = [{"kind": "at_least", "y": "evaluator.joint", "value": 0.5, "name": "the evaluator reads"}]
    q = tmp_path / "sweep.yaml"
    q.write_text(yaml.safe_dump(d))
    r = ok_cli(["sweep", q, "--out", sw])
    text = " ".join(r.output.split())
    assert "the evaluator reads" in text and any(v in text for v in ("holds:", "does not hold:", "inconclusive:")), r.output


def test_the_per_concept_figure_shows_concepts_only():
    from mosaic.report import concept_columns

    cols = ["held_out.joint", "held_out.color", "held_out.shape", "held_out.quality", "held_out.raw.joint", "held_out.raw.color",
            "seen.color", "held_out.unreadable"]
    assert concept_columns(cols) == ["held_out.color", "held_out.shape"]


def test_a_figure_of_many_panels_wraps_three_a_row(tmp_path):
    import pandas as pd
    from PIL import Image

    from mosaic.plots import plot_curves

    df = pd.DataFrame({"x": [1, 2, 1, 2], **{f"y{i}": [0.1, 0.5, 0.2, 0.6] for i in range(5)}})
    p = plot_curves(df, "x", None, [f"y{i}" for i in range(5)], tmp_path / "f.png")
    w, h = Image.open(p).size
    assert w < 3.5 * h, (w, h)  # 2 rows of 3 panels, not a strip of 5
