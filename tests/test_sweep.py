import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mosaic.sweep import SweepError, expand, load_sweep, trial_config, trial_id
from mosaic.trials import collect, write_status


def sweep_file(tmp_path, config: dict, **fields) -> Path:
    cfg = tmp_path / "train.yaml"
    cfg.write_text(yaml.safe_dump(config))
    data = {"name": "s", "kind": "diffusion", "config": str(cfg), **fields}
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


CFG = {"name": "r", "dataset": {"spec": "experiments/specs/count_composition.yaml", "overrides": {"image.size": 16}},
       "training": {"steps": 5}}


def test_expand_grid_zip_and_seeds(tmp_path):
    s = load_sweep(sweep_file(tmp_path, CFG, grid={"spec.holdout.rule.n": [1, 3], "training.lr": [1e-3, 1e-4]},
                              zip={"spec.splits.train": [100, 200], "training.steps": [10, 20]}, seeds=[0, 1]))
    trials = expand(s)
    assert len(trials) == 2 * 2 * 2 * 2
    assert trials[0] == {"spec.holdout.rule.n": 1, "training.lr": 1e-3, "spec.splits.train": 100, "training.steps": 10, "seed": 0}
    assert all((t["spec.splits.train"], t["training.steps"]) in ((100, 10), (200, 20)) for t in trials)
    ids = [trial_id(t) for t in trials]
    assert len(set(ids)) == len(ids) and ids == [trial_id(t) for t in expand(s)]
    assert ids[0].startswith("n=1_lr=0.001_train=100_steps=10_seed=0-")


def test_trial_config_routes_spec_and_training_overrides(tmp_path):
    s = load_sweep(sweep_file(tmp_path, CFG, set={"training.batch_size": 4, "spec.splits.val": 10},
                              grid={"spec.holdout.rule.n": [3]}, seeds=[7]))
    raw = trial_config(s, expand(s)[0])
    assert raw["dataset"]["overrides"] == {"image.size": 16, "splits.val": 10, "holdout.rule.n": 3}
    assert raw["training"] == {"steps": 5, "batch_size": 4, "seed": 7}


def test_label_axes_name_conditions_and_set_nothing(tmp_path):
    """`label.<name>` zipped with the axes that make each condition: it names the trial (folder,
    results column) but never reaches the config."""
    s = load_sweep(sweep_file(tmp_path, CFG, zip={"label.condition": ["base", "more"], "spec.splits.train": [100, 400]}))
    trials = expand(s)
    assert [t["label.condition"] for t in trials] == ["base", "more"]
    raw = trial_config(s, trials[1])
    assert raw["dataset"]["overrides"] == {"image.size": 16, "splits.train": 400} and "label" not in raw
    assert trial_id(trials[1]).startswith("condition=more_train=400_seed=0-")
    for bad in ({"zip": {"label.": ["a"]}}, {"zip": {"label.seed": ["a"]}}, {"zip": {"label.a.b": ["a"]}},
                {"zip": {"label.c": ["a", "a"]}}, {"zip": {"label.c": [1, 2]}}, {"set": {"label.c": "a"}}):
        with pytest.raises(SweepError, match="label"):
            load_sweep(sweep_file(tmp_path, CFG, **bad))


def test_collect_writes_axes_that_mix_strings_and_mappings(tmp_path):
    """`distribution: [uniform, {kind: geometric}]` has no Arrow type: Parquet gets JSON text, the
    frame (and the CSV) keep the values; the report and claims still select by them."""
    out = tmp_path / "sw"
    out.mkdir()
    dists = ["uniform", {"kind": "geometric", "ratio": 0.5}]
    for d in dists:
        fake_trial(out, {"spec.concepts.shape.distribution": d, "seed": 0}, "done", 0.5, 0.9)
    df = collect(out)
    back = pd.read_parquet(out / "results.parquet")
    assert sorted(back["spec.concepts.shape.distribution"]) == ['"uniform"', '{"kind": "geometric", "ratio": 0.5}']
    assert {str(v) for v in df["spec.concepts.shape.distribution"]} == {str(d) for d in dists}


def test_bad_sweeps_name_the_field(tmp_path):
    with pytest.raises(SweepError, match="zip axes must have equal lengths"):
        load_sweep(sweep_file(tmp_path, CFG, zip={"a": [1, 2], "b": [1]}))
    with pytest.raises(SweepError, match="unknown field 'grdi': did you mean 'grid'"):
        load_sweep(sweep_file(tmp_path, CFG, grdi={"a": [1]}))
    with pytest.raises(SweepError, match=r"report.x 'spec.holdout.rule.nn' is not an axis of the sweep: did you mean 'spec.holdout.rule.n'"):
        load_sweep(sweep_file(tmp_path, CFG, grid={"spec.holdout.rule.n": [1, 2]}, report={"x": "spec.holdout.rule.nn"}))
    p = sweep_file(tmp_path, CFG)
    d = yaml.safe_load(p.read_text())
    d["config"] = "missing.yaml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(SweepError, match="no such training config"):
        load_sweep(p)
    s = load_sweep(sweep_file(tmp_path, {**CFG, "dataset": {"path": "data/x"}}, grid={"spec.holdout.rule.n": [1]}))
    with pytest.raises(SweepError, match="no dataset.spec"):
        trial_config(s, expand(s)[0])


def fake_trial(root: Path, values: dict, status: str, held: float | None = None, seen: float | None = None):
    tdir = root / "trials" / trial_id(values)
    (tdir / "run").mkdir(parents=True)
    write_status(tdir, {"id": trial_id(values), "values": values, "status": status, "time_s": 3.0,
                        "error": None if status == "done" else "boom"})
    # the trial's config and its run's, alike, as a sweep writes them (a run folder without its config is no trial's)
    cfg = yaml.safe_dump({"name": "fake", "objective": "classifier", "training": {"seed": values.get("seed", 0)}})
    (tdir / "config.yaml").write_text(cfg)
    (tdir / "run" / "config.yaml").write_text(cfg)
    if held is not None:
        (tdir / "run" / "metrics.json").write_text(json.dumps({
            "table": {"seen": {"n": 10, "color": seen, "joint": seen}, "held_out": {"n": 10, "color": held, "joint": held}},
            "evaluator_check": {"joint": 0.998}, "train": {"steps": 5, "final_loss": 0.1}}))
        (tdir / "run" / "log.jsonl").write_text(json.dumps({"step": 5, "loss": 0.1}) + "\n")  # the loss its record gives
        if status == "done":
            (tdir / "run" / "DONE").write_text("")
    return tdir


def test_collect_and_report(tmp_path):
    from mosaic.report import make_report

    out = tmp_path / "sw"
    (out).mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "demo", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"spec.holdout.rule.n": [1, 3, 5], "spec.splits.train": [100, 400]},
                                                    "seeds": [0, 1]}))
    for n, held in ((1, 0.8), (3, 0.5)):
        for size, bonus in ((100, 0.0), (400, 0.1)):
            for seed in (0, 1):
                fake_trial(out, {"spec.holdout.rule.n": n, "spec.splits.train": size, "seed": seed}, "done", held + bonus + 0.01 * seed, 0.95)
    fake_trial(out, {"spec.holdout.rule.n": 5, "spec.splits.train": 100, "seed": 0}, "failed")
    df = collect(out)
    assert len(df) == 9 and (out / "results.parquet").is_file()
    back = pd.read_parquet(out / "results.parquet")
    assert set(back.columns) >= {"trial", "status", "seen.joint", "held_out.joint", "evaluator.joint", "spec.holdout.rule.n", "seed", "time_s"}
    row = df[(df["spec.holdout.rule.n"] == 3) & (df["spec.splits.train"] == 400) & (df["seed"] == 1)].iloc[0]
    assert row["held_out.joint"] == pytest.approx(0.61) and row["evaluator.joint"] == 0.998 and row["metrics.train.steps"] == 5
    assert df[df["status"] == "failed"].iloc[0]["error"] == "boom"
    page = make_report(out)
    text = page.read_text()
    assert (out / "report" / "curves.png").stat().st_size > 5000 and "curves.png" in text
    assert "Failed trials" in text and "boom" in text and "<table" in text
    # a misspelt report.y: warned about, left out, named on the page; the rest is drawn
    sw = yaml.safe_load((out / "sweep.yaml").read_text())
    sw["report"] = {"y": ["held_out.jiont", "seen.joint"]}
    (out / "sweep.yaml").write_text(yaml.safe_dump(sw))
    warned = []
    text = make_report(out, warn=warned.append).read_text()
    assert warned == ["report.y 'held_out.jiont' is not a results column: did you mean 'held_out.joint'?"]
    assert "held_out.jiont" in text and (out / "report" / "curves.png").is_file()


def test_long_trial_names_keep_their_seed_and_old_sweep_folders_still_resume(tmp_path):
    """A label over 80 characters used to be cut with its seed (three imbalance trials of
    complexity_position_cpu differed only by their hash); the seed now stays, and a sweep folder
    made with the old names is still this sweep's (collected, and planned under its old names)."""
    from mosaic.trials import check_trial_folders, plan

    weights = {"kind": "weights", "weights": [2255, 1795, 1435, 1145, 915, 730, 585, 465, 375, 300]}
    ids = [trial_id({"label.condition": "imbalance", "spec.concepts.position.distribution": weights, "seed": s}) for s in (0, 1, 2)]
    assert [i.rsplit("-", 1)[0].endswith(f"_seed={s}") for s, i in zip((0, 1, 2), ids)] == [True] * 3
    assert all(len(i) <= 87 for i in ids) and trial_id({"n": 3, "seed": 0}) == trial_id({"n": 3, "seed": 0}, legacy=True)
    values = {"label.condition": "imbalance", "spec.concepts.position.distribution": weights, "seed": 1}
    old = trial_id(values, legacy=True)
    assert "seed" not in old and old != trial_id(values)

    cfg = tmp_path / "x.yaml"
    cfg.write_text(yaml.safe_dump({"name": "r", "dataset": {"spec": str(Path("experiments/specs/position.yaml").resolve()), "root": str(tmp_path / "data"),
                                                         "overrides": {"image.size": 24}}, "training": {"steps": 2}}))
    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "demo", "kind": "diffusion", "config": str(cfg),
                                                    "zip": {"label.condition": ["imbalance"], "spec.concepts.position.distribution": [weights]},
                                                    "seeds": [0, 1]}))
    tdir = out / "trials" / old
    tdir.mkdir(parents=True)
    write_status(tdir, {"id": old, "values": values, "status": "done"})
    check_trial_folders(out, [tdir])  # the old name is one of the sweep's own
    planned = {t["id"] for t in plan(load_sweep(out / "sweep.yaml"), out)}
    assert old in planned and trial_id({**values, "seed": 0}) in planned
