"""Variants of attack round 25's last recorded faults, fixed at their mechanism: a run's config.yaml is
compared with the trial's config *validated* (every field it leaves to a default, not only those it
writes), and a learned evaluator named by a relative path is found again by the folder ``sample``
recorded (``sampling.json``'s ``evaluator_folder``)."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import clean_exit_2, run_cli, sweep_copy, trial_dirs


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "a25v")


@pytest.mark.parametrize("field,value", [
    (("training", "ema", "decay"), 0.5),           # a training default the trial's config does not write
    (("sampling", "steps"), 3),                    # a sampling field the sweep's config writes (2): the leaf check
    (("sampling", "sampler"), "ddpm"),             # a sampling default (ddim)
    (("evaluation", "position_bins"), "nearest"),  # an evaluation default (strict)
])
def test_a_run_config_edited_away_from_the_trials_defaults_is_another_trials_run(swept, tmp_path, field, value):
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    trial = yaml.safe_load((t / "config.yaml").read_text())
    c = yaml.safe_load((t / "run" / "config.yaml").read_text())
    node = c
    for k in field[:-1]:
        node = node[k]
    assert node[field[-1]] != value
    node[field[-1]] = value
    (t / "run" / "config.yaml").write_text(yaml.safe_dump(c))
    r = run_cli(["report", str(sw)])
    clean_exit_2(r, ".".join(field))
    assert yaml.safe_load((t / "config.yaml").read_text()) == trial  # nothing rewritten


def test_an_honest_sweep_still_reports_and_resumes(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    r = run_cli(["report", str(sw)])
    assert r.exit_code == 0, r.output


def test_sampling_json_records_no_evaluator_folder_for_the_parser(drun):
    """The parser (or no evaluator) leaves no folder; a learned one's is covered by attack round 25's
    report-from-another-folder case."""
    (s,) = [p for p in (drun[0] / "samples").iterdir() if p.is_dir()]
    settings = json.loads((s / "sampling.json").read_text())
    assert settings["evaluator"] in ("parser", None) and "evaluator_folder" not in settings


def test_a_relative_evaluator_folder_is_found_through_the_recorded_folder(tmp_path, monkeypatch):
    """The report's spot read prefers the name as given (read from the current folder), then the recorded
    absolute folder; a recorded folder that is relative or gone is never used."""
    from mosaic.evaluation import trial_scores as T

    seen = []
    monkeypatch.setattr(T, "load_evaluator", lambda spec, which, **k: seen.append(which) or (_ for _ in ()).throw(T.MosaicError("x")))
    ev = tmp_path / "ev"
    ev.mkdir()
    monkeypatch.chdir(tmp_path / "..")
    rows = [{"file_name": "images/000000.png", "read": {}}]
    for kept, want in [(str(ev), str(ev)), ("ev", "ev"), (str(tmp_path / "gone"), "ev")]:
        seen.clear()
        with pytest.raises(T.SweepError):
            T._spot_read(tmp_path, {"evaluation": {}}, {"evaluator": "ev", "evaluator_folder": kept}, None, tmp_path, rows, "fix")
        assert seen == [want]
