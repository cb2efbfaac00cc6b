"""Variants of attack round 31 at the mechanisms fixed for it: a trial's time against its own start and finish and
its run's, the image size an evaluation advises, and an unscored samples folder given to the audit."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import clean_exit_2, ok_cli, run_cli, scored_folder, sweep_copy, trial_dirs
from tests.test_attack_cases31 import _eval_folder, _png


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "a31v")


def _edit(p, edit):
    d = json.loads(p.read_text())
    edit(d)
    p.write_text(json.dumps(d, indent=2))


@pytest.mark.parametrize("how", ["time-tenfold", "finished-earlier", "started-later", "run-longer-than-trial"])
def test_a_trial_time_its_own_records_contradict_is_refused(swept, tmp_path, how):
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    if how == "time-tenfold":
        _edit(t / "trial.json", lambda d: d.__setitem__("time_s", d["time_s"] * 10 + 5))
    elif how == "finished-earlier":  # the wall clock may run further than time_s (a suspend), never shorter
        _edit(t / "trial.json", lambda d: d.update(time_s=60.0, finished=d["started"] + 1.0))
    elif how == "started-later":
        _edit(t / "trial.json", lambda d: d.update(time_s=60.0, started=d["finished"] - 1.0))
    else:
        tt = json.loads((t / "trial.json").read_text())["time_s"]
        _edit(t / "run" / "metrics.json", lambda d: d.__setitem__("time_s", tt * 3 + 10))
    clean_exit_2(run_cli(["report", sw]), "time_s", collapse_space=True)


def test_honest_trial_times_report(swept, tmp_path):
    ok_cli(["report", sweep_copy(swept, tmp_path)])


def test_a_trial_whose_wall_clock_ran_on_during_a_suspend_reports(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    _edit(trial_dirs(sw)[0] / "trial.json", lambda d: d.__setitem__("finished", d["finished"] + 3600))
    ok_cli(["report", sw])


@pytest.mark.parametrize("size,advised", [(4, False), (7, False), (24, True)])
def test_evaluate_advises_only_a_size_a_spec_takes(made, tmp_path, size, advised):
    f = _eval_folder(tmp_path, _png(size, size))
    r = run_cli(["evaluate", f, "--spec", made[0]])
    clean_exit_2(r, f"{size} x {size}", collapse_space=True)
    assert bool(re.search(rf"--set image\.size={size}\b", " ".join(r.output.split()))) is advised, r.output


def test_an_audit_of_a_samples_folder_whose_scores_were_removed_says_to_score_it(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    s = scored_folder(trial_dirs(sw)[0])
    for n in ("predictions.jsonl", "metrics.json"):
        (s / n).unlink()
    r = run_cli(["audit", s])
    clean_exit_2(r, "without scores", "mosaic evaluate", collapse_space=True)


def test_a_reader_waiting_for_a_writer_says_so_once(tmp_path, capfd):
    """A wait for a dataset's writer was silent for minutes (attack round 33): one line names who is writing."""
    import threading
    import time

    from mosaic.locks import reading
    from tests.conftest import hold_lock

    folder = tmp_path / "ds"
    folder.mkdir()
    holder = hold_lock(folder)
    threading.Timer(1.5, holder.kill).start()  # the writer ends (killed: the lock drops as in a crash)
    t0 = time.perf_counter()
    with reading(folder):
        pass
    holder.wait()
    err = capfd.readouterr().err
    assert time.perf_counter() - t0 >= 1.0 and err.count("waiting for another process") == 1, err
    assert f"pid {holder.pid}" in err and "writing dataset" in err, err
