"""`mosaic reproduce` on a tiny registry: a token-classifier coverage sweep (2 coverages x 2 seeds),
run resumably, its claims checked and reported next to the paper's statement; the dry run lists the
trials with an estimate; a claim naming a missing axis or column stops the sweep before it runs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from mosaic.claims import VERDICTS
from mosaic.verdicts import evaluate_claim, finished_rows
from mosaic.errors import MosaicError

ROOT = Path(__file__).resolve().parents[1]

STATEMENT = "held-out accuracy rises with coverage"


def tiny(tmp: Path, claims: list | None = None) -> tuple[dict, Path]:
    spec = yaml.safe_load((ROOT / "experiments/specs/coverage.yaml").read_text())
    spec["image"]["size"] = 16
    spec["splits"] = {"train": 64, "val": 8, "test_id": 16, "test_ood": 16, "per": "total"}
    (tmp / "spec.yaml").write_text(yaml.safe_dump(spec))
    cfg = {"name": "cov", "objective": "classifier", "input": {"kind": "tokens"},
           "dataset": {"spec": str(tmp / "spec.yaml"), "root": str(tmp / "data"), "workers": 1},
           "model": {"width": 16, "depth": 1, "heads": 2, "mlp_ratio": 2.0},
           "training": {"steps": 20, "batch_size": 16, "lr": 3e-3, "threads": 1, "log_every": 10, "checkpoint_every": 20, "val_every": 0}}
    (tmp / "train.yaml").write_text(yaml.safe_dump(cfg))
    sweeps = tmp / "sweeps"
    sweeps.mkdir(exist_ok=True)
    sw = {"name": "tiny_cov", "kind": "transformer", "config": str(tmp / "train.yaml"), "grid": {"spec.holdout.rule.k": [2, 6]},
          "seeds": [0, 1], "report": {"x": "spec.holdout.rule.k", "y": ["held_out.joint", "seen.joint"],
                                      "claims": claims if claims is not None else [
                                          {"kind": "increases", "y": "held_out.joint", "x": "k", "paper": "coverage"},
                                          "seen.joint is at least -0.5"]}}
    (sweeps / "tiny_cov.yaml").write_text(yaml.safe_dump(sw))
    reg = {"toy": {"title": "A toy paper", "statements": {"coverage": STATEMENT, "other": "something nobody tests"},
                   "scales": {"cpu": ["tiny_cov", "not_written_yet"], "gpu": []}}}
    return reg, sweeps


def test_reproduce_runs_resumes_and_reports_claims(tmp_path, monkeypatch):
    import mosaic.reproduce as R

    reg, sweeps = tiny(tmp_path)
    monkeypatch.setattr(R, "load_registry", lambda path=None: reg)
    monkeypatch.setattr(R, "SWEEPS_DIR", sweeps)
    out = tmp_path / "out"
    plan = R.plan_reproduction("toy", "cpu", out, workers=2, estimate=False)
    assert plan["trials"] == 4 and plan["todo"] == 4 and plan["missing"] == ["not_written_yet"]
    assert not out.exists()  # a dry run writes nothing
    res = R.reproduce("toy", "cpu", out, workers=2)
    assert res["missing"] == ["not_written_yet"] and res["sweeps"][0]["done"] == 4
    df = pd.read_csv(out / "tiny_cov" / "results.csv")
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert [c["kind"] for c in claims] == ["increases", "at_least"]
    first = claims[0]
    assert first["paper"] == STATEMENT and first["paper_key"] == "coverage" and first["seeds"] == 2
    assert first["verdict"] in VERDICTS and first["interval"] is not None
    # the report's numbers are those of the results table
    again = evaluate_claim({"kind": "increases", "y": "held_out.joint", "x": "k"}, finished_rows(df),
                           ["spec.holdout.rule.k", "seed"])
    assert again["effect"] == pytest.approx(first["effect"]) and again["interval"] == pytest.approx(first["interval"])
    assert claims[1]["verdict"] == "holds"  # accuracy - (-0.5) >= 0.5 on every seed
    page = (out / "index.html").read_text()
    assert STATEMENT in page and "something nobody tests" in page and "No claim of these sweeps tests this statement" in page
    assert (out / "claims.png").is_file() and (out / "tiny_cov" / "report" / "claims.json").is_file()
    # resumable: a second run re-runs nothing
    stamps = {p.parent.name: json.loads(p.read_text())["finished"] for p in (out / "tiny_cov" / "trials").glob("*/trial.json")}
    R.reproduce("toy", "cpu", out, workers=2)
    assert {p.parent.name: json.loads(p.read_text())["finished"] for p in (out / "tiny_cov" / "trials").glob("*/trial.json")} == stamps
    with pytest.raises(MosaicError, match="unknown paper 'nope'"):
        R.sweeps_of("nope", "cpu", reg)
    with pytest.raises(MosaicError, match="no 'tpu' scale"):
        R.sweeps_of("toy", "tpu", reg)


def test_bad_claims_stop_the_sweep_before_it_runs(tmp_path, monkeypatch):
    import mosaic.reproduce as R
    from mosaic.cli import app

    reg, sweeps = tiny(tmp_path, claims=[{"kind": "increases", "y": "held_out.joint", "x": "spec.holdout.rule.kk"}])
    monkeypatch.setattr(R, "load_registry", lambda path=None: reg)
    monkeypatch.setattr(R, "SWEEPS_DIR", sweeps)
    r = CliRunner().invoke(app, ["reproduce", "toy", "--out", str(tmp_path / "o"), "--dry-run"])
    assert r.exit_code == 2 and "report.claims[0]" in r.output and "did you mean 'spec.holdout.rule.k'" in " ".join(r.output.split())
    reg, sweeps = tiny(tmp_path, claims=["held_out.jiont decreases with k"])
    r = CliRunner().invoke(app, ["sweep", str(sweeps / "tiny_cov.yaml"), "--out", str(tmp_path / "o"), "--dry-run"])
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and "column 'held_out.jiont' is not a results column" in text and "did you mean 'held_out.joint'" in text
    assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(app, ["reproduce", "toy", "--scale", "tpu"])
    assert r.exit_code == 2 and "--scale 'tpu'" in r.output


def test_pool_wall_time_is_the_makespan_of_the_local_pool_not_the_sum_over_workers():
    from mosaic.trials import cpu_slots, pool_wall_seconds

    assert pool_wall_seconds([600.0] * 9, 2) == 3000.0  # the ninth trial runs alone: 5 rounds, not 4.5
    assert pool_wall_seconds([600.0] * 8, 2) == 2400.0
    assert pool_wall_seconds([100.0, 50.0, 50.0], 2) == 100.0  # the two short ones share the second slot
    assert pool_wall_seconds([50.0, 50.0, 100.0], 2) == 150.0  # submission order: the long one starts last
    assert pool_wall_seconds([], 2) == 0.0 and pool_wall_seconds([10.0, 20.0], 0) == 30.0
    assert cpu_slots(2, 1, cores=2) == 2 and cpu_slots(4, 1, cores=2) == 2 and cpu_slots(2, 2, cores=2) == 1
    assert cpu_slots(3, 1, cores=16) == 3


def test_reproduce_dry_run_sums_each_sweeps_pool_wall_time(tmp_path, monkeypatch):
    import mosaic.reproduce as R

    reg, sweeps = tiny(tmp_path)
    monkeypatch.setattr(R, "load_registry", lambda path=None: reg)
    monkeypatch.setattr(R, "SWEEPS_DIR", sweeps)
    sides = []

    def est(cfg, scale, side=1, shapes=None):
        sides.append(side)
        return {"seconds": 100.0, "where": "this CPU", "threads": 1}

    monkeypatch.setattr(R, "_estimate", est)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    one = R.plan_reproduction("toy", "cpu", tmp_path / "out", workers=1)
    two = R.plan_reproduction("toy", "cpu", tmp_path / "out", workers=2)
    many = R.plan_reproduction("toy", "cpu", tmp_path / "out", workers=8)  # 2 cores: no more than 2 side by side
    assert one["seconds"] == two["seconds"] == 400.0 and one["wall_seconds"] == 400.0
    assert two["wall_seconds"] == 200.0 and two["sweeps"][0]["wall_seconds"] == 200.0 and many["wall_seconds"] == 200.0
    assert set(sides) == {1, 2}  # timed beside as many trials as run at once: 1, 2, and 2 of 8 asked on 2 cores
    monkeypatch.setattr(R, "_estimate", lambda cfg, scale, side=1, shapes=None: {"seconds": 100.0, "where": "this CPU", "threads": 2})
    assert R.plan_reproduction("toy", "cpu", tmp_path / "out", workers=2)["wall_seconds"] == 400.0  # 2 threads each fill the 2 cores


def test_a_reproduction_runs_every_sweeps_trials_through_one_pool(tmp_path, monkeypatch):
    # 3 trials in each of 2 sweeps on 2 workers: one after another they take 4 rounds (each sweep's third trial runs
    # alone); through one pool, 3. Each sweep still gets its own results, report and claims
    import mosaic.reproduce as R

    reg, sweeps = tiny(tmp_path)
    sw = yaml.safe_load((sweeps / "tiny_cov.yaml").read_text())
    sw["seeds"] = [0]
    sw["grid"] = {"spec.holdout.rule.k": [2, 4, 6]}
    (sweeps / "tiny_cov.yaml").write_text(yaml.safe_dump(sw))
    (sweeps / "tiny_cov_b.yaml").write_text(yaml.safe_dump({**sw, "name": "tiny_cov_b"}))
    reg["toy"]["scales"]["cpu"] = ["tiny_cov", "tiny_cov_b"]
    monkeypatch.setattr(R, "load_registry", lambda path=None: reg)
    monkeypatch.setattr(R, "SWEEPS_DIR", sweeps)
    monkeypatch.setattr(R, "_estimate", lambda cfg, scale, side=1, shapes=None: {"seconds": 100.0, "where": "this CPU", "threads": 1})
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    plan = R.plan_reproduction("toy", "cpu", tmp_path / "out", workers=2)
    assert [s["wall_seconds"] for s in plan["sweeps"]] == [200.0, 200.0] and plan["wall_seconds"] == 300.0
    import mosaic.trials as T

    pools, real = [], T.run_local

    def spy(kind, trials, workers, timeout_s, on_done=None):
        pools.append(sorted(t["dir"].parent.parent.name for t in trials))
        return real(kind, trials, workers, timeout_s, on_done)

    monkeypatch.setattr(T, "run_local", spy)
    progress = []
    res = R.reproduce("toy", "cpu", tmp_path / "out", workers=2, on_progress=progress.append)
    assert pools == [["tiny_cov"] * 3 + ["tiny_cov_b"] * 3]  # one pool, both sweeps' trials
    assert [(s["name"], s["done"], s["failed"]) for s in res["sweeps"]] == [("tiny_cov", 3, 0), ("tiny_cov_b", 3, 0)]
    assert [c["sweep"] for c in res["claims"]] == ["tiny_cov"] * 2 + ["tiny_cov_b"] * 2  # in the sweeps' order
    assert sum("all trials run, report" in m for m in progress) == 2
    for name in ("tiny_cov", "tiny_cov_b"):
        assert (tmp_path / "out" / name / "report" / "claims.json").is_file()
        assert len(pd.read_csv(tmp_path / "out" / name / "results.csv")) == 3
    pools.clear()
    R.reproduce("toy", "cpu", tmp_path / "out", workers=2)  # resumed: nothing left to run, no pool started
    assert pools == []
    (sweeps / "tiny_cov_b.yaml").write_text(yaml.safe_dump({**sw, "name": "tiny_cov"}))  # two sweeps, one folder
    with pytest.raises(MosaicError, match="have one name"):
        R.reproduce("toy", "cpu", tmp_path / "out2", workers=2)
    assert not (tmp_path / "out2").exists()
