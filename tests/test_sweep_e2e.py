"""A 2x2 tiny diffusion sweep end to end: local pool, a local Ray instance, resume after a killed trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mosaic.sweep import load_sweep
from mosaic.trials import read_status, run_sweep

ROOT = Path(__file__).resolve().parents[1]

SPEC = {
    "name": "sweeptest",
    "image": {"size": 16, "supersample": 2},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square"]}},
    "objects": [{"name": "obj", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.5}],
    "holdout": {"concepts": ["color", "shape"], "rule": {"kind": "explicit", "combinations": [["blue", "square"]]}},
    "splits": {"train": 12, "val": 4, "test_id": 5, "test_ood": 2},
}


def make_sweep(tmp_path: Path, steps=2) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    cfg = {
        "name": "t", "dataset": {"spec": str(spec), "root": str(tmp_path / "data"), "workers": 1},
        "model": {"backbone": "unet", "cond_dim": 16, "unet": {"block_out_channels": [8, 16], "cross_attention": [False, True], "heads": 2, "norm_num_groups": 4}},
        "training": {"steps": steps, "batch_size": 4, "lr": 1e-3, "device": "cpu", "log_every": 1, "checkpoint_every": 1,
                     "val_every": 0, "threads": 1},
        "sampling": {"steps": 2, "n_per_combination": 1, "batch_size": 8},
        "evaluation": {"enabled": True, "check_n": 8, "val_samples": 0, "select": "loss"},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(cfg))
    sw = {"name": "tiny", "kind": "diffusion", "config": str(tmp_path / "train.yaml"),
          "grid": {"spec.splits.train": [12, 18], "training.lr": [0.001, 0.002]}, "seeds": [0]}
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(sw))
    return p


def check_results(df, n=4):
    assert len(df) == n and (df["status"] == "done").all(), df[["trial", "status", "error"]].to_string()
    for col in ("seen.joint", "held_out.joint", "evaluator.joint", "spec.splits.train", "training.lr", "seed", "time_s"):
        assert col in df.columns and df[col].notna().all(), col
    assert df["evaluator.joint"].min() >= 0.99  # the parser reads clean renders


def test_local_sweep_end_to_end_and_rerun_is_a_noop(tmp_path):
    s = load_sweep(make_sweep(tmp_path))
    trials, df = run_sweep(s, tmp_path / "sw", backend="local", workers=2)
    check_results(df)
    # the two trials of each training size share one generated dataset
    assert len({t["dataset"] for t in trials}) == 2 and len(list((tmp_path / "data").iterdir())) == 2
    cfg = yaml.safe_load((trials[0]["dir"] / "config.yaml").read_text())
    assert cfg["dataset"] == {"path": str(Path(trials[0]["dataset"]).resolve())} and cfg["training"]["lr"] in (0.001, 0.002)
    stamps = {t["id"]: read_status(t["dir"])["finished"] for t in trials}
    _, df2 = run_sweep(s, tmp_path / "sw", backend="local", workers=2)
    assert {t["id"]: read_status(t["dir"])["finished"] for t in trials} == stamps
    assert (tmp_path / "sw" / "results.parquet").is_file()
    from mosaic.report import make_report

    page = make_report(tmp_path / "sw")
    assert (page.parent / "curves.png").is_file() and "samples.png" in page.read_text()
    # the same folder with another training config: refused, nothing rewritten, old results kept
    from mosaic.sweep import SweepError

    changed = load_sweep(make_sweep(tmp_path, steps=3))
    before = {t["id"]: (t["dir"] / "config.yaml").read_text() for t in trials}
    with pytest.raises(SweepError, match=r"holds trials run with another config(.|\n)*training\.steps(.|\n)*--out"):
        run_sweep(changed, tmp_path / "sw", backend="local", workers=2)
    assert {t["id"]: (t["dir"] / "config.yaml").read_text() for t in trials} == before


def test_failed_trial_is_recorded_and_others_finish(tmp_path):
    p = make_sweep(tmp_path)
    d = yaml.safe_load(p.read_text())
    d["grid"] = {"training.lr": [0.001, -1.0]}  # lr must be > 0: that trial's config fails to validate at run time
    d["seeds"] = [0]
    p.write_text(yaml.safe_dump(d))
    s = load_sweep(p)
    from mosaic.lab.config import ConfigError

    with pytest.raises(ConfigError, match="training.lr"):  # every trial's config is checked before anything runs
        run_sweep(s, tmp_path / "sw")
    d["grid"] = {"spec.splits.train": [12, 18]}
    d["set"] = {"training.steps": 2}
    p.write_text(yaml.safe_dump(d))
    s = load_sweep(p)
    from mosaic.trials import prepare, run_local

    trials = prepare(s, tmp_path / "sw2")
    # sabotage one trial's config so its subprocess fails
    bad = trials[0]["dir"] / "config.yaml"
    bad.write_text(bad.read_text().replace("steps: 2", "steps: 0"))
    res = run_local("diffusion", trials, 1, None)
    by = {r["id"]: r for r in res}
    assert by[trials[0]["id"]]["status"] == "failed" and "steps" in by[trials[0]["id"]]["error"]
    assert by[trials[1]["id"]]["status"] == "done"


def test_resume_after_a_killed_trial(tmp_path):
    p = make_sweep(tmp_path, steps=40)
    d = yaml.safe_load(p.read_text())
    d["grid"] = {"training.lr": [0.001]}
    p.write_text(yaml.safe_dump(d))
    sw_dir = tmp_path / "sw"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "mosaic.cli", "sweep", str(p), "--out", str(sw_dir), "--no-report"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    ckpt = None
    while time.time() < deadline:
        # a finished checkpoint only: checkpoint-NNNNNNN.tmp is being written (killing then left nothing to resume)
        found = list(sw_dir.glob("trials/*/run/checkpoints/checkpoint-[0-9][0-9][0-9][0-9][0-9][0-9][0-9]/checkpoint.json")) if sw_dir.exists() else []
        if found:
            ckpt = found
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert ckpt, "the trial never wrote a checkpoint"
    tdir = next(sw_dir.glob("trials/*"))
    assert read_status(tdir)["status"] == "running"  # killed mid-run
    s = load_sweep(p)
    _, df = run_sweep(s, sw_dir)
    assert (df["status"] == "done").all()
    steps = [json.loads(x)["step"] for x in (tdir / "run" / "log.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == 40  # the log was trimmed to the checkpoint, then continued
    assert "resumed from" in (tdir / "log.txt").read_text()


def test_ray_backend_on_a_local_instance(tmp_path):
    pytest.importorskip("ray")
    s = load_sweep(make_sweep(tmp_path))
    _, df = run_sweep(s, tmp_path / "sw", backend="ray", workers=2)
    check_results(df)
