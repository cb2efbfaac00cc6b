"""Hostile cases of a thirteenth attack on the data path (issue 23) and the leftovers of the twelfth,
each closed at its mechanism.

- **Errors echoed whole values**: a 60 KB string in a spec came back in full in the error, once per
  problem. :class:`mosaic.errors.MosaicError` keeps every field path, message and source to
  :data:`mosaic.errors.MAX_PROBLEM_CHARS` (elided in the middle), and the CLI's ``fail`` bounds any
  other exception's text line by line.
- **``mosaic report`` wrote ``results.csv`` beside a running sweep**: it gathered the trials without the
  sweep folder's lock. It now takes the lock (never waiting) and is refused, naming the sweep, while one
  runs; the report a sweep writes at its end is written under the same lock and a refusal there is a
  named error, not a traceback.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import MAX_PROBLEM_CHARS, ConfigError, MosaicError, SpecError, clip
from tests.conftest import hold_lock

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------
# errors are bounded
# ------------------------------------------------------------------------------------------------

def test_clip_keeps_short_text_and_elides_long_text_in_the_middle():
    assert clip("abc") == "abc"
    s = "A" * 5000 + "Z" * 5000
    c = clip(s)
    assert len(c) < MAX_PROBLEM_CHARS + 60
    assert c.startswith("A" * 100) and c.endswith("Z" * 100)
    assert "characters left out" in c


def test_every_problem_path_message_and_source_is_bounded():
    huge = "x" * 60_000
    e = ConfigError([(huge, huge), ("field", huge)], source=huge)
    assert len(str(e)) < 4 * MAX_PROBLEM_CHARS + 200
    assert all(len(p) <= MAX_PROBLEM_CHARS + 60 and len(m) <= MAX_PROBLEM_CHARS + 60 for p, m in e.problems)
    # a problem without a field stays without one (no "None:" or ": " prefix)
    assert str(MosaicError([("", "plain")])) == "plain"
    assert str(MosaicError([(None, "plain")])) == "plain"


def test_a_60_kb_value_in_a_spec_gives_a_short_named_error(tmp_path):
    spec = tmp_path / "big.yaml"
    spec.write_text(f"name: {'x' * 60_000}\nimage: {{size: 16}}\n")
    r = runner.invoke(app, ["validate", str(spec)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert "name" in r.output and "characters left out" in r.output
    assert len(r.output) < 8_000


def test_a_60_kb_colour_name_in_a_spec_is_bounded_in_the_error(tmp_path):
    spec = tmp_path / "colour.yaml"
    bad = "q" * 60_000
    spec.write_text((ROOT / "experiments/specs/count.yaml").read_text().replace("values: [red", f"values: [{bad}, red", 1))
    r = runner.invoke(app, ["validate", str(spec)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert len(r.output) < 8_000
    try:
        from mosaic.spec import load_spec

        load_spec(spec)
    except SpecError as e:  # the Python API's error is bounded too
        assert len(str(e)) < 8_000
    else:  # pragma: no cover - the colour must be refused (not a known colour name)
        raise AssertionError("a 60 KB colour name was accepted")


# ------------------------------------------------------------------------------------------------
# `mosaic report` takes the sweep folder's lock
# ------------------------------------------------------------------------------------------------

def test_report_is_refused_while_a_sweep_runs_into_the_folder(tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "trials").mkdir(parents=True)
    holder = hold_lock(sweep)
    try:
        r = runner.invoke(app, ["report", str(sweep)])
        assert r.exit_code == 2, r.output
        assert "Traceback" not in r.output
        assert f"pid {holder.pid}" in r.output and "sweep folder" in r.output
        assert not (sweep / "results.csv").exists() and not (sweep / "report").exists()
    finally:
        holder.kill()
        holder.wait()
    # once the holder is gone (killed: the kernel drops its flock), the same folder is reported as
    # what it is (no trials: a named error), and the lock is taken over
    t0 = time.time()
    r = runner.invoke(app, ["report", str(sweep)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "another process" not in r.output, r.output
    assert time.time() - t0 < 30


def test_report_of_a_path_that_is_no_folder_makes_no_lock_file(tmp_path):
    missing = tmp_path / "nowhere"
    r = runner.invoke(app, ["report", str(missing)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert not any(p.name.endswith(".lock") for p in tmp_path.iterdir())


# ------------------------------------------------------------------------------------------------
# case 22: a trial's run that is another trial's run
# ------------------------------------------------------------------------------------------------

def _trial_with_run(out: Path, seed: int, run_seed: int, lr: float = 0.001) -> Path:
    import yaml

    from tests.test_sweep import fake_trial

    tdir = fake_trial(out, {"training.lr": lr, "seed": seed}, "done", 0.5 + 0.1 * run_seed, 0.9)
    own = {"name": "t", "objective": "classifier", "training": {"lr": lr, "seed": seed, "steps": 5}, "out": str(tdir / "run")}
    (tdir / "config.yaml").write_text(yaml.safe_dump(own))
    run_cfg = {"name": "t", "objective": "classifier", "training": {"lr": lr, "seed": run_seed, "steps": 5, "batch_size": 8},
               "out": f"/elsewhere/seed{run_seed}/run"}
    (tdir / "run" / "config.yaml").write_text(yaml.safe_dump(run_cfg))
    return tdir


def test_a_trial_whose_run_is_another_trials_run_is_refused(tmp_path):
    import yaml

    from mosaic.errors import SweepError
    from mosaic.trials import collect

    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "mine", "kind": "diffusion", "config": "gone.yaml",
                                                    "grid": {"training.lr": [0.001]}, "seeds": [0, 1]}))
    _trial_with_run(out, 0, 0)
    # its own run, its `out` elsewhere (a moved sweep folder) and a field its config does not set: collected
    own = _trial_with_run(out, 1, 1)
    assert sorted(collect(out)["seed"]) == [0, 1]
    # seed 0's run copied into seed 1's trial: refused, naming the trial and the field
    seed0 = next(d for d in (out / "trials").iterdir() if d != own)
    shutil.rmtree(own / "run")
    shutil.copytree(seed0 / "run", own / "run")
    with pytest.raises(SweepError, match="another trial's run") as e:
        collect(out)
    assert own.name in str(e.value) and "training.seed 0" in str(e.value)
    r = runner.invoke(app, ["report", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "another trial's run" in r.output, r.output


# ------------------------------------------------------------------------------------------------
# case 12: a run folder whose config was edited in its schedule resumes on another schedule
# ------------------------------------------------------------------------------------------------

def _schedule(warmup: int, steps: int = 40, done: int = 0, name: str = "cosine"):
    import torch
    from diffusers.optimization import get_scheduler

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=steps)
    for _ in range(done):
        opt.step()
        sched.step()
    return sched


def test_a_checkpoint_of_another_schedule_is_refused_at_its_step():
    from mosaic.lab.checkpoint_fit import state_problem

    saved = _schedule(warmup=10, done=20).state_dict()  # the run's schedule, checkpointed at step 20 (past its warm-up)
    for same in (_schedule(warmup=10),):
        assert state_problem({"scheduler": saved}, {"scheduler": same.state_dict()}, [], same) is None
    for other in (_schedule(warmup=5), _schedule(warmup=10, steps=400), _schedule(warmup=10, name="linear")):
        bad = state_problem({"scheduler": saved}, {"scheduler": other.state_dict()}, [], other)
        assert bad is not None and "at step 20" in bad and "warm-up" in bad, bad
    # without the schedule object (the old call) the state alone cannot tell
    assert state_problem({"scheduler": saved}, {"scheduler": _schedule(warmup=5).state_dict()}, []) is None


# ------------------------------------------------------------------------------------------------
# cases 24 and 36: export after a full disk; export of a source on a read-only place
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.conftest import SPECS, tiny

    root = tmp_path_factory.mktemp("small") / "ds"
    generate(parse_spec(tiny(SPECS / "count.yaml", size=32)), root)
    return root


def test_the_same_export_rerun_after_a_full_disk_finishes(small, tmp_path, monkeypatch):
    import errno

    import mosaic.export as ex
    from mosaic.verify import verify as verify_dataset

    real = ex.write_shards
    calls = [0]

    def full(*a, **k):
        calls[0] += 1
        if calls[0] == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(ex, "write_shards", full)
    out = tmp_path / "pq"
    r = runner.invoke(app, ["export", str(small), "--out", str(out), "-f", "parquet"])
    assert r.exit_code == 2 and "disk is full" in r.output and "rerun the same command" in r.output, r.output
    assert out.is_dir() and any(out.iterdir())  # the interrupted export's manifest (status incomplete) is there
    r = runner.invoke(app, ["export", str(small), "--out", str(out), "-f", "parquet"])  # what the error says to do
    assert r.exit_code == 0, r.output
    assert verify_dataset(out, deep=True).ok
    # a non-empty folder that is no unfinished export of this source is still refused
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    r = runner.invoke(app, ["export", str(small), "--out", str(other), "-f", "parquet"])
    assert r.exit_code == 2 and "not empty" in r.output and (other / "keep.txt").read_text() == "mine"


def test_export_reads_a_source_whose_place_is_read_only_but_honours_a_live_writer(small, tmp_path, monkeypatch):
    import errno

    import mosaic.locks as locks
    from mosaic.locks import lock_path

    src_lock = lock_path(small)
    real = locks.open_own

    def read_only(path, flags, *a, **k):
        if Path(path) == src_lock:
            raise OSError(errno.EROFS, "Read-only file system")
        return real(path, flags, *a, **k)

    monkeypatch.setattr(locks, "open_own", read_only)
    r = runner.invoke(app, ["export", str(small), "--out", str(tmp_path / "pq"), "-f", "parquet"])
    assert r.exit_code == 0, r.output
    # a writer of the source that holds its lock file is still refused
    monkeypatch.setattr(locks, "open_own", real)
    holder = hold_lock(small)
    try:
        monkeypatch.setattr(locks, "open_own", read_only)
        r = runner.invoke(app, ["export", str(small), "--out", str(tmp_path / "pq2"), "-f", "parquet"])
        assert r.exit_code == 2 and f"pid {holder.pid}" in r.output, r.output
        assert not (tmp_path / "pq2").exists() or not any((tmp_path / "pq2").iterdir())
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("where", ["sweep.yaml", "trial.json"])
def test_a_folder_at_a_sweep_file_is_named_by_report(tmp_path, where):
    import yaml

    from tests.test_sweep import fake_trial

    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "mine", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"training.lr": [0.001]}, "seeds": [0, 1]}))
    t0 = fake_trial(out, {"training.lr": 0.001, "seed": 0}, "done", 0.5, 0.9)
    fake_trial(out, {"training.lr": 0.001, "seed": 1}, "done", 0.6, 0.9)
    bad = out / "sweep.yaml" if where == "sweep.yaml" else t0 / "trial.json"
    bad.unlink()
    bad.mkdir()
    (bad / "x").write_text("x")
    r = runner.invoke(app, ["report", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output and where in r.output, r.output
    assert (bad / "x").read_text() == "x"  # the folder is never deleted
