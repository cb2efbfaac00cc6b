"""Hostile input: every case must end in exit status 2, a message naming the field (or file), no
traceback, and nothing written (issue 13). Table-driven cases plus hypothesis strategies that
generate specs and configs with extreme values."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mosaic.cli import app

runner = CliRunner()

SPEC = {
    "name": "h",
    "image": {"size": 32},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square"]}},
    "objects": [{"name": "o", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.4,
                 "rotation": {"range": [0, 90]}}],
    "splits": {"train": 12, "val": 2, "test": 2},
}

POSITION_SPEC = {
    "name": "p",
    "image": {"size": 32},
    "concepts": {"position": {"angle_bins": {"n": 4, "width": 45, "gap": 45, "start": 0, "margin": 1.0}}},
    "objects": [{"name": "target", "shape": "circle", "color": "red", "size": 0.2},
                {"name": "reference", "shape": "square", "color": "blue", "size": 0.2}],
    "positions": [{"target": "target", "reference": "reference", "concept": "position", "distance": [0.25, 0.4]}],
    "relations": [],
    "splits": {"train": 8, "val": 2, "test": 2},
}


def config(tmp_path, spec_path, **over):
    cfg = {
        "name": "hostile",
        "out": str(tmp_path / "run"),
        "dataset": {"spec": str(spec_path), "root": str(tmp_path / "data"), "workers": 1},
        "model": {"backbone": "unet", "unet": {"block_out_channels": [8, 16], "cross_attention": [False, True], "heads": 2,
                                              "norm_num_groups": 4}},
        "training": {"steps": 2, "batch_size": 4, "device": "cpu", "checkpoint_every": 1, "val_every": 0},
        "sampling": {"steps": 2, "n_per_combination": 1},
        "evaluation": {"val_samples": 0, "select": "loss", "check_n": 0},
    }
    for k, v in over.items():
        node = cfg
        parts = k.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return cfg


def put(d: dict, path: str, value):
    node = d
    parts = path.split(".")
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return d


def invoke(args):
    r = runner.invoke(app, [str(a) for a in args])
    out = r.output + (str(r.exception) if r.exception and not isinstance(r.exception, SystemExit) else "")
    return r.exit_code, out, r


def files_under(p):
    return sorted(str(x.relative_to(p)) for x in p.rglob("*")) if p.exists() else []


def assert_clean(code, out, needle, r=None):
    assert code == 2, f"exit {code}: {out[-2000:]}"
    assert "Traceback" not in out
    assert r is None or r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if needle:
        needles = [needle] if isinstance(needle, str) else needle
        assert any(n in out for n in needles), f"none of {needles} in: {out[-2000:]}"



@pytest.fixture(autouse=True)
def _time_limit():
    """A case that is not refused may run on (e.g. training for 10**30 steps): fail it after 120 s."""
    import signal as _signal

    def boom(*_):
        raise TimeoutError("ran past 120 s: the input was not refused and the command ran on")

    old = _signal.signal(_signal.SIGALRM, boom)
    _signal.alarm(120)
    yield
    _signal.alarm(0)
    _signal.signal(_signal.SIGALRM, old)

# ------------------------------------------------------------------------------------------------
# 1. numbers in specs
# ------------------------------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")

SPEC_NUMBER_CASES = [
    # (base, path, value, field named)
    (SPEC, "objects.0.rotation", {"range": [0, NAN]}, "objects[0].rotation"),
    (SPEC, "objects.0.rotation", INF, "objects[0].rotation"),
    (SPEC, "objects.0.rotation", -INF, "objects[0].rotation"),
    (SPEC, "objects.0.size", NAN, "objects[0].size"),
    (SPEC, "objects.0.size", {"choice": [0.2, INF]}, "objects[0].size"),
    (SPEC, "concepts.color.distribution", {"kind": "weights", "weights": [1, NAN, 1]}, "concepts.color"),
    (SPEC, "concepts.color.distribution", {"kind": "weights", "weights": [1, INF, 1]}, "concepts.color"),
    (SPEC, "concepts.color.distribution", {"kind": "geometric", "ratio": INF}, "concepts.color"),
    (SPEC, "concepts.color.distribution", {"kind": "zipf", "exponent": NAN}, "concepts.color"),
    (SPEC, "concepts.color.distribution", {"kind": "zipf", "exponent": 1e308}, "concepts.color"),
    (SPEC, "layout.min_gap", NAN, "layout.min_gap"),
    (SPEC, "sizes", {"big": NAN}, "sizes"),
    (SPEC, "colors", {"mine": [255, 0, NAN]}, "colors"),
    (POSITION_SPEC, "positions.0.distance", [0.25, NAN], "positions[0].distance"),
    (POSITION_SPEC, "positions.0.distance", [0.25, INF], "positions[0].distance"),
    (POSITION_SPEC, "concepts.position.angle_bins.width", NAN, "concepts.position.angle_bins"),
    (POSITION_SPEC, "concepts.position.angle_bins.start", INF, "concepts.position.angle_bins"),
    (POSITION_SPEC, "concepts.position.angle_bins.margin", NAN, "concepts.position.angle_bins"),
    # integers beyond what the code can represent, sizes beyond memory
    (SPEC, "seed", 2**80, "seed"),
    (SPEC, "seed", -1, "seed"),
    (SPEC, "splits.train", 10**30, "splits.train"),
    (SPEC, "splits.train", 10**12, "splits.train"),
    (SPEC, "image.size", 10**6, "image.size"),
    (SPEC, "image.size", 2**70, "image.size"),
    (SPEC, "image.supersample", 10**5, "image.supersample"),
    (SPEC, "layout.max_tries", 10**18, "layout.max_tries"),
    (SPEC, "layout.max_restarts", 10**18, "layout.max_restarts"),
    (SPEC, "objects.0.repeat", {"range": [1, 10**9]}, "objects[0].repeat"),
]


def _spec_case_id(c):
    return f"{c[1]}={c[2]!r}"[:60]


@pytest.mark.parametrize("base, path, value, field", SPEC_NUMBER_CASES, ids=[_spec_case_id(c) for c in SPEC_NUMBER_CASES])
def test_spec_numbers_are_rejected_naming_the_field(tmp_path, base, path, value, field):
    import copy

    d = put(copy.deepcopy(base), path, value)
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    out = tmp_path / "ds"
    code, text, r = invoke(["generate", p, "--out", out])
    assert_clean(code, text, field, r)
    assert not out.exists()


def test_huge_domain_is_bounded_before_allocation(tmp_path):
    d = {**SPEC, "concepts": {**SPEC["concepts"], "n": {"range": [1, 10**12]}},
         "objects": [{**SPEC["objects"][0], "repeat": {"concept": "n"}}]}
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    code, text, r = invoke(["validate", p])
    assert_clean(code, text, "concepts.n", r)


def test_huge_combination_grid_is_bounded(tmp_path):
    d = {**SPEC, "concepts": {"a": {"range": [1, 5000]}, "b": {"range": [1, 5000]}, "c": {"range": [1, 5000]}},
         "objects": [{"name": "o", "shape": "circle", "color": "red", "size": 0.05, "repeat": {"concept": "a"}},
                     {"name": "q", "shape": "square", "color": "blue", "size": 0.05, "repeat": {"concept": "b"}},
                     {"name": "r", "shape": "star", "color": "green", "size": 0.05, "repeat": {"concept": "c"}}],
         "holdout": {"concepts": ["a", "b", "c"], "rule": {"kind": "diagonal", "n": 1}}}
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    code, text, r = invoke(["validate", p])
    assert_clean(code, text, ["holdout", "concepts"], r)


# ------------------------------------------------------------------------------------------------
# 1. numbers in configs and sweeps
# ------------------------------------------------------------------------------------------------

CONFIG_NUMBER_CASES = [
    ("training.lr", NAN, "training.lr"),
    ("training.lr", INF, "training.lr"),
    ("training.lr", 0.0, "training.lr"),
    ("training.betas", [0.9, 1.5], "training.betas"),
    ("training.betas", [NAN, 0.9], "training.betas"),
    ("training.betas", [-0.1, 0.9], "training.betas"),
    ("training.betas", [0.9, 1.0], "training.betas"),
    ("training.weight_decay", INF, "training.weight_decay"),
    ("training.weight_decay", NAN, "training.weight_decay"),
    ("training.eps", 0.0, "training.eps"),
    ("training.eps", NAN, "training.eps"),
    ("training.grad_clip", INF, "training.grad_clip"),
    ("training.ema.power", INF, "training.ema.power"),
    ("training.steps", 10**30, "training.steps"),
    ("training.seed", 2**80, "training.seed"),
    ("training.batch_size", 10**12, "training.batch_size"),
    ("training.warmup_steps", 10**30, "training.warmup_steps"),
    ("model.schedule.snr_gamma", NAN, "model.schedule.snr_gamma"),
    ("model.schedule.snr_gamma", INF, "model.schedule.snr_gamma"),
    ("model.cond_dropout", NAN, "model.cond_dropout"),
    ("sampling.guidance", NAN, "sampling.guidance"),
    ("sampling.guidance", INF, "sampling.guidance"),
    ("sampling.seed", 2**80, "sampling.seed"),
    ("sampling.n_per_combination", 10**12, "sampling.n_per_combination"),
    ("model.cond_dim", 10**12, "model.cond_dim"),
    ("model.unet.block_out_channels", [8, 10**12], "model.unet"),
    ("model.schedule.num_train_timesteps", 10**12, "model.schedule.num_train_timesteps"),
    ("training.lr_schedule", "cosine\x00", "training.lr_schedule"),
]


@pytest.mark.parametrize("path, value, field", CONFIG_NUMBER_CASES, ids=[f"{c[0]}={c[1]!r}"[:60] for c in CONFIG_NUMBER_CASES])
def test_config_numbers_are_rejected_naming_the_field(tmp_path, path, value, field):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp, **{path: value})))
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, field, r)
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


def test_sweep_timeout_nan_is_rejected(tmp_path):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp)))
    sw = tmp_path / "sweep.yaml"
    sw.write_text(yaml.safe_dump({"name": "s", "kind": "diffusion", "config": str(cp), "timeout_s": NAN,
                                  "grid": {"training.lr": [1e-3, NAN]}}))
    code, text, r = invoke(["sweep", sw, "--out", tmp_path / "sw", "--dry-run"])
    assert_clean(code, text, "timeout_s", r)
    assert not (tmp_path / "sw").exists()


def test_sweep_axis_value_nan_is_rejected_naming_the_trial(tmp_path):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp)))
    sw = tmp_path / "sweep.yaml"
    sw.write_text(yaml.safe_dump({"name": "s", "kind": "diffusion", "config": str(cp), "grid": {"training.lr": [1e-3, NAN]}}))
    code, text, r = invoke(["sweep", sw, "--out", tmp_path / "sw"])
    assert_clean(code, text, "training.lr", r)
    assert not (tmp_path / "sw").exists()


# hypothesis: extreme floats anywhere a spec or config takes a number

EXTREME_FLOATS = st.sampled_from([NAN, INF, -INF, 1e308, -1e308, 5e-324, -0.0])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["objects.0.size", "objects.0.rotation", "layout.min_gap", "image.supersample", "seed",
                             "splits.train", "image.size", "layout.max_tries"]),
       value=st.one_of(EXTREME_FLOATS, st.integers(min_value=2**40, max_value=2**200), st.integers(max_value=-1)))
def test_hypothesis_extreme_spec_values_never_traceback(tmp_path, path, value):
    import copy

    from mosaic.errors import MosaicError
    from mosaic.spec import parse_spec

    d = put(copy.deepcopy(SPEC), path, value)
    try:
        s = parse_spec(d)
    except MosaicError as e:
        assert path.split(".")[0] in str(e)
        return
    # accepted: then it must be finite and within the stated bounds
    sizes = s.split_sizes()
    assert all(0 <= n <= 10**8 for n in sizes.values())
    assert s.image.size <= 4096
    assert not (isinstance(value, float) and not math.isfinite(value))


@settings(max_examples=40, deadline=None)
@given(path=st.sampled_from(["training.lr", "training.weight_decay", "training.betas.0", "training.betas.1", "training.grad_clip",
                             "training.ema.decay", "training.ema.power", "sampling.guidance", "model.cond_dropout",
                             "training.steps", "training.batch_size", "training.seed"]),
       value=st.one_of(EXTREME_FLOATS, st.integers(min_value=2**63, max_value=2**200)))
def test_hypothesis_extreme_config_values_never_traceback(path, value):
    from mosaic.errors import ConfigError
    from mosaic.lab.config import validate_config
    from mosaic.lab.diffusion import DiffusionConfig

    import pathlib
    d = config(pathlib.Path("/nonexistent"), "spec.yaml")
    d["training"]["betas"] = [0.9, 0.999]
    put(d, path, value)
    try:
        validate_config(DiffusionConfig, d)
    except ConfigError as e:
        assert path.rsplit(".", 1)[0].split(".")[0] in str(e)
        return
    assert isinstance(value, float) and math.isfinite(value) and abs(value) < 1e300 or value == 0


# ------------------------------------------------------------------------------------------------
# 2. files
# ------------------------------------------------------------------------------------------------

BILLION_LAUGHS = """
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
name: *i
"""


@pytest.mark.parametrize("command", [["validate"], ["train", "diffusion"], ["sweep"], ["splits"]])
@pytest.mark.parametrize("content, needle", [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", ["UTF-8", "binary"]),
    ("name: caf\xe9\nobjects: []\n".encode("latin-1"), "UTF-8"),
    (b"name: x\x00\x01\x02", ["binary", "UTF-8", "control"]),
    (BILLION_LAUGHS.encode(), "alias"),
], ids=["png", "latin1", "nul", "billion-laughs"])
def test_unreadable_files_are_named(tmp_path, command, content, needle):
    p = tmp_path / "bad.yaml"
    p.write_bytes(content)
    code, text, r = invoke(command + [p] + (["--out", tmp_path / "o"] if command == ["sweep"] else []))
    assert_clean(code, text, needle, r)
    assert "bad.yaml" in text
    assert not (tmp_path / "o").exists()


def test_billion_laughs_in_set_value(tmp_path):
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(SPEC))
    laughs = "[" + ",".join(["*x"] * 9) + "]"
    value = "&x [" + ",".join(["lol"] * 9) + "]"
    # a --set value is one YAML document: nest aliases inside it
    doc = "{a: &a [l,l,l,l,l,l,l,l,l], b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a], c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], " \
          "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c], e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d], f: [*e,*e,*e,*e,*e,*e,*e,*e,*e]}"
    del laughs, value
    code, text, r = invoke(["validate", p, "--set", f"description={doc}"])
    assert_clean(code, text, ["alias", "--set"], r)


WRONG_KIND = [
    (["validate"], "config", "training config"),
    (["validate"], "sweep", "sweep"),
    (["train", "diffusion"], "spec", "spec"),
    (["train", "diffusion"], "sweep", "sweep"),
    (["sweep"], "config", "training config"),
    (["sweep"], "spec", "spec"),
    (["splits"], "config", "training config"),
]


@pytest.mark.parametrize("command, kind, needle", WRONG_KIND, ids=[f"{' '.join(c[0])}<-{c[1]}" for c in WRONG_KIND])
def test_wrong_kind_of_file_is_named(tmp_path, command, kind, needle):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp)))
    sw = tmp_path / "sweep.yaml"
    sw.write_text(yaml.safe_dump({"name": "s", "kind": "diffusion", "config": str(cp), "grid": {"training.lr": [1e-3]}}))
    path = {"spec": sp, "config": cp, "sweep": sw}[kind]
    code, text, r = invoke(command + [path] + (["--out", tmp_path / "o"] if command == ["sweep"] else []))
    assert_clean(code, text, f"looks like a {needle}", r)
    assert text.count("unknown field") <= 1, text


# ------------------------------------------------------------------------------------------------
# 3. validate before writing; names never escape their root
# ------------------------------------------------------------------------------------------------

def test_model_too_large_for_image_size_writes_nothing(tmp_path):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump({**SPEC, "image": {"size": 8}}))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp, **{"model.unet": {"block_out_channels": [8, 8, 8, 8, 8],
                                                                        "cross_attention": [False] * 4 + [True],
                                                                        "heads": 2, "norm_num_groups": 4}})))
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "model.unet", r)
    assert not (tmp_path / "data").exists(), files_under(tmp_path / "data")
    assert not (tmp_path / "run").exists()


def test_dit_patch_not_tiling_writes_nothing(tmp_path):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cfg = config(tmp_path, sp, **{"model.backbone": "dit", "model.dit": {"patch_size": 5, "num_layers": 1, "heads": 2, "head_dim": 8}})
    del cfg["model"]["unet"]
    cp.write_text(yaml.safe_dump(cfg))
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "patch_size", r)
    assert not (tmp_path / "data").exists(), files_under(tmp_path / "data")
    assert not (tmp_path / "run").exists()


def test_evaluator_dir_missing_writes_nothing(tmp_path):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp, **{"evaluation.evaluator": str(tmp_path / "nope")})))
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "evaluation.evaluator", r)
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["../escape", "a/b", "/abs", "..", ".", "x\x00y", "a\\b"])
def test_config_name_cannot_leave_the_runs_root(tmp_path, name, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cfg = config(tmp_path, sp, name=name)
    del cfg["out"]
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(cfg))
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "name", r)
    assert sorted(os.listdir(tmp_path)) == ["cfg.yaml", "spec.yaml"]


@pytest.mark.parametrize("name", ["../escape", "a/b", "/abs", "..", "x\x00y"])
def test_spec_name_cannot_leave_the_dataset_root(tmp_path, name):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump({**SPEC, "name": name}))
    code, text, r = invoke(["validate", sp])
    assert_clean(code, text, "name", r)


@pytest.mark.parametrize("name", ["../../escape", "a/b", "/abs"])
def test_sweep_name_cannot_leave_the_sweeps_root(tmp_path, name, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp)))
    sw = tmp_path / "sweep.yaml"
    sw.write_text(yaml.safe_dump({"name": name, "kind": "diffusion", "config": str(cp), "grid": {"training.lr": [1e-3]}}))
    code, text, r = invoke(["sweep", sw, "--dry-run"])
    assert_clean(code, text, "name", r)


# ------------------------------------------------------------------------------------------------
# 7. sweeps: options validated before writing; --set merges
# ------------------------------------------------------------------------------------------------

def _sweep(tmp_path, **extra):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp)))
    sw = tmp_path / "sweep.yaml"
    sw.write_text(yaml.safe_dump({"name": "s", "kind": "diffusion", "config": str(cp),
                                  "set": {"training.steps": 3, "training.batch_size": 2, "training.lr": 0.01},
                                  "grid": {"training.warmup_steps": [0]}, **extra}))
    return sw


@pytest.mark.parametrize("opts, needle", [
    (["--backend", "slurm"], "--backend"),
    (["--backend", "local", "--address", "auto"], "--address"),
])
def test_sweep_options_are_checked_before_writing(tmp_path, opts, needle):
    sw = _sweep(tmp_path)
    code, text, r = invoke(["sweep", sw, "--out", tmp_path / "sw"] + opts)
    assert_clean(code, text, needle, r)
    assert not (tmp_path / "sw").exists() and not (tmp_path / "data").exists()


def test_sweep_set_merges_into_nested_set(tmp_path):
    from mosaic.sweep import expand, load_sweep, trial_config

    sw = _sweep(tmp_path)
    s = load_sweep(sw, ["set.training.steps=5"])
    raw = trial_config(s, expand(s)[0])
    assert raw["training"]["steps"] == 5
    assert raw["training"]["batch_size"] == 2 and raw["training"]["lr"] == 0.01 and raw["training"]["device"] == "cpu"


def test_sweep_set_merges_into_nested_mapping_form(tmp_path):
    from mosaic.sweep import expand, load_sweep, trial_config

    sw = _sweep(tmp_path)
    d = yaml.safe_load(sw.read_text())
    d["set"] = {"training": {"steps": 3, "batch_size": 2}}
    sw.write_text(yaml.safe_dump(d))
    s = load_sweep(sw, ["set.training.steps=5"])
    raw = trial_config(s, expand(s)[0])
    assert raw["training"]["steps"] == 5 and raw["training"]["batch_size"] == 2
    assert raw["training"]["device"] == "cpu" and raw["training"]["checkpoint_every"] == 1  # the config's own keys stay


def test_sweep_grid_keys_with_dots_are_addressable(tmp_path):
    from mosaic.sweep import expand, load_sweep

    sw = _sweep(tmp_path)
    s = load_sweep(sw, ["grid.training.warmup_steps=[0, 1]", "grid.spec.holdout.rule.n=[1]"])
    assert s.grid["training.warmup_steps"] == [0, 1] and s.grid["spec.holdout.rule.n"] == [1]
    assert len(expand(s)) == 2


# ------------------------------------------------------------------------------------------------
# 6. honest measurement
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("hostile") / "ds"
    generate(parse_spec({**SPEC, "splits": {"train": 6, "val": 2, "test": 6}}), root)
    return root


def test_evaluate_refuses_a_spec_that_cannot_read_an_intended_concept(tmp_path, small_dataset):
    only_color = {**SPEC, "concepts": {"color": SPEC["concepts"]["color"]},
                  "objects": [{**SPEC["objects"][0], "shape": "circle"}]}
    p = tmp_path / "color_only.yaml"
    p.write_text(yaml.safe_dump(only_color))
    code, text, r = invoke(["evaluate", small_dataset / "test", "--spec", p, "--out", tmp_path / "ev", "--check-n", "0"])
    assert_clean(code, text, "cannot read concept(s) 'shape'", r)
    assert not (tmp_path / "ev").exists()


def test_evaluate_refuses_images_of_a_dataset_with_other_domains(tmp_path, small_dataset):
    wider = {**SPEC, "concepts": {**SPEC["concepts"], "color": {"values": ["red", "green", "blue", "yellow"]}}}
    p = tmp_path / "wider.yaml"
    p.write_text(yaml.safe_dump(wider))
    code, text, r = invoke(["evaluate", small_dataset / "test", "--spec", p, "--out", tmp_path / "ev", "--check-n", "0"])
    assert_clean(code, text, "concept 'color' has values", r)
    assert not (tmp_path / "ev").exists()
    # the dataset's own spec is accepted
    code, text, r = invoke(["evaluate", small_dataset / "test", "--spec", small_dataset, "--out", tmp_path / "ok", "--check-n", "0"])
    assert code == 0, text


# ------------------------------------------------------------------------------------------------
# more YAML and path hostility
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("content, needle", [
    ("name: &a [x, *a]\nobjects: []\n", "recursive"),
    ("name: " + "[" * 20000 + "]" * 20000 + "\n", ["nests deeper", "YAML"]),
], ids=["recursive-alias", "deep-nesting"])
def test_pathological_yaml_is_refused(tmp_path, content, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(content)
    code, text, r = invoke(["validate", p])
    assert_clean(code, text, needle, r)


def test_a_huge_yaml_file_is_refused_before_parsing(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_bytes(b"# " + b"x" * (17 * 2**20) + b"\nname: x\n")
    code, text, r = invoke(["validate", p])
    assert_clean(code, text, "bytes", r)


@settings(max_examples=30, deadline=None)
@given(value=st.one_of(st.text(min_size=1, max_size=40), st.lists(st.text(max_size=10), max_size=3)))
def test_trial_folder_names_never_leave_the_sweep(value):
    from mosaic.sweep import trial_id

    tid = trial_id({"dataset.spec": value, "spec.name": "../../etc", "seed": 0})
    assert "/" not in tid and "\\" not in tid and tid not in (".", "..") and "\x00" not in tid


def test_a_training_split_larger_than_memory_is_refused_before_generation(tmp_path):
    import os

    phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    n = min(10_000_000, int(phys / (256 * 256 * 3)) + 1)  # 256 px images: more than all memory
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump({**SPEC, "image": {"size": 256, "supersample": 1}, "splits": {"train": n, "val": 2, "test": 2}}))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp)))
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, ["GiB", "splits.train"], r)
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


def test_unknown_evaluation_split_is_refused_before_training(tmp_path):
    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(SPEC))
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(config(tmp_path, sp, **{"evaluation.splits": ["test_ood"]})))
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "evaluation.splits", r)
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("args", [
    ["generate", "experiments/specs/count.yaml", "--out", "{tmp}/o", "--workers", "3000000000"],
    ["generate", "experiments/specs/count.yaml", "--out", "{tmp}/o", "--format", "parquet", "--shard-mb", "inf"],
    ["export", "{tmp}/missing", "--format", "parquet", "--shard-mb", "1e308"],
    ["evaluator", "check", "experiments/specs/count.yaml", "--n", "100000000000000000000"],
    ["sweep", "experiments/sweeps/composition_cpu.yaml", "--out", "{tmp}/o", "--workers", "100000000000000000000000"],
    ["reproduce", "coverage", "--out", "{tmp}/o", "--workers", "100000"],
    ["validate", "experiments/specs/count.yaml", "--set", "description=" + "[" * 3000 + "]" * 3000],
])
def test_unbounded_cli_numbers_and_deep_set_values_are_refused(tmp_path, args):
    """Numeric CLI options have stated upper bounds and --set values the same depth bound as files:
    exit 2, no traceback, nothing written (found by an independent hostile run: OverflowError,
    RecursionError and a sweep that generated datasets before crashing)."""
    import subprocess
    import sys

    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = subprocess.run([sys.executable, "-m", "mosaic.cli", *argv], cwd=root, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args,word", [
    (["generate", "SPEC", "--out", "{tmp}/o", "--format", "parquet", "--shard-mb", "nan"], "not a finite number"),
    (["export", "{tmp}/missing", "--format", "parquet", "--shard-mb", "-inf"], "not a finite number"),
    (["sample", "{tmp}/run", "--guidance", "nan"], "not a finite number"),
    (["sample", "{tmp}/run", "--guidance", "inf"], "not a finite number"),
    (["evaluator", "calibrate", "SPEC", "--target", "NaN"], "not a finite number"),
    (["evaluator", "calibrate", "SPEC", "--target", "1.5"], "out of range"),
    (["sample", "{tmp}/run", "--guidance", "1_000"], "not a number"),
    (["sample", "{tmp}/run", "--guidance", "\uff11"], "not a number"),
    (["sample", "{tmp}/run", "--guidance", " 2"], "not a number"),
    (["sample", "{tmp}/run", "--guidance", "1e309"], "overflows"),
    (["sample", "{tmp}/run", "--guidance", "1001"], "out of range"),
])
def test_float_options_name_nan_and_inf_as_not_finite(tmp_path, args, word):
    """Every float option parses through common.finite_float: nan is named as not finite (it used to
    read "should be less than or equal to 65536"), inf is refused even without an upper bound."""
    sp = _write(tmp_path, SPEC)
    argv = [str(sp) if a == "SPEC" else a.replace("{tmp}", str(tmp_path)) for a in args]
    code, text, r = invoke(argv)
    assert code == 2 and word in " ".join(text.split()), text
    assert not (tmp_path / "o").exists()


def test_values_that_look_like_emoji_codes_are_printed_as_given(tmp_path):
    """rich turns ':100:' into an emoji unless told not to: an error must quote the user's value."""
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(SPEC))
    r = runner.invoke(app, ["validate", str(p), "--set", "splits={train:100,test:10}"])
    assert r.exit_code == 2 and "train:100" in r.output and "\U0001f4af" not in r.output


# ------------------------------------------------------------------------------------------------
# an independent hostile run, round 2 (issue 13): each class below ended in a traceback, a silently
# wrong setting or a late error
# ------------------------------------------------------------------------------------------------

HOLDOUT_SPEC = {**SPEC, "holdout": {"concepts": ["color", "shape"], "rule": {"kind": "diagonal", "n": 1}},
                "splits": {"train": 12, "val": 2, "test_id": 2, "test_ood": 2}}


def _write(tmp_path, data, name="spec.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return p


@pytest.mark.parametrize("base", [SPEC, HOLDOUT_SPEC], ids=["plain", "holdout"])
@pytest.mark.parametrize("command", [["validate"], ["preview", "--out", "{tmp}/p.png"], ["splits"]])
def test_every_split_zero_is_refused_naming_splits(tmp_path, base, command):
    if command == ["splits"] and "holdout" not in base:
        pytest.skip("splits needs a holdout")
    sp = _write(tmp_path, {**base, "splits": {k: 0 for k in base["splits"]}})
    code, text, r = invoke([command[0], sp] + [c.format(tmp=tmp_path) for c in command[1:]])
    assert_clean(code, text, "splits: every split is 0", r)
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("base", [SPEC, HOLDOUT_SPEC], ids=["plain", "holdout"])
def test_the_training_split_rule_is_the_same_with_and_without_a_holdout(tmp_path, base):
    """splits.train is 0 (no training split: a dataset for evaluation only) or gives every value
    (every seen combination) a training sample; the refusal states that rule."""
    sp = _write(tmp_path, base)
    code, text, r = invoke(["validate", sp, "--set", "splits.train=0"])
    assert code == 0, text
    code, text, r = invoke(["validate", sp, "--set", "splits.train=1"])
    assert_clean(code, text, "splits.train", r)
    assert "splits.train is 0, for no training split" in " ".join(text.split())


def test_preview_of_more_samples_than_the_split_holds_shows_the_split(tmp_path):
    sp = _write(tmp_path, SPEC)
    code, text, r = invoke(["preview", sp, "--split", "val", "--n", "16", "--out", tmp_path / "p.png"])
    assert code == 0 and (tmp_path / "p.png").is_file(), text
    code, text, r = invoke(["preview", sp, "--split", "val", "--set", "splits.val=0", "--out", tmp_path / "q.png"])
    assert_clean(code, text, "--split 'val' has 0 samples", r)


def _output_targets(tmp_path):
    reg = tmp_path / "regular"
    reg.write_text("x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"dev-null": "/dev/null", "fifo": str(fifo), "regular-file": str(reg), "under-a-file": str(reg / "sub" / "dir")}


@pytest.mark.parametrize("target", ["dev-null", "fifo", "regular-file", "under-a-file"])
@pytest.mark.parametrize("command", ["generate", "export", "sweep", "train", "evaluator-train", "evaluate", "reproduce"])
def test_an_output_folder_that_is_not_a_folder_is_refused_before_writing(tmp_path, command, target):
    out = _output_targets(tmp_path)[target]
    sp = _write(tmp_path, SPEC)
    cp = _write(tmp_path, config(tmp_path, sp), "cfg.yaml")
    before = files_under(tmp_path)
    args = {
        "generate": ["generate", sp, "--out", out],
        "export": ["export", tmp_path, "--format", "parquet", "--out", out],
        "sweep": ["sweep", _sweep(tmp_path), "--out", out],
        "train": ["train", "diffusion", cp, "--out", out],
        "evaluator-train": ["evaluator", "train", sp, "--out", out],
        "evaluate": ["evaluate", tmp_path, "--spec", sp, "--out", out],
        "reproduce": ["reproduce", "mosaic", "--out", out],
    }[command]
    before = files_under(tmp_path)
    code, text, r = invoke(args)
    assert_clean(code, text, "--out", r)
    assert repr(out) in text or out in text, text
    assert files_under(tmp_path) == before
    assert not Path("/dev/.null.lock").exists()


@pytest.mark.parametrize("target, needle", [("/dev/null", "not a regular file"), ("{tmp}", "is a folder, not a file"),
                                            ("{tmp}/regular/x.png", "regular file, not a folder")])
@pytest.mark.parametrize("command", ["preview", "splits"])
def test_an_output_file_that_cannot_be_a_file_is_refused(tmp_path, command, target, needle):
    (tmp_path / "regular").write_text("x")
    sp = _write(tmp_path, HOLDOUT_SPEC)
    code, text, r = invoke([command, sp, "--out", target.format(tmp=tmp_path)])
    assert_clean(code, text, needle, r)
    assert "--out" in text


def test_a_sweep_of_too_many_trials_is_refused_before_expansion(tmp_path):
    from mosaic.sweep import MAX_TRIALS

    axes = {f"training.{k}": list(range(1, 101)) for k in ("warmup_steps", "steps", "log_every", "checkpoint_every")}
    sw = _sweep(tmp_path, grid=axes)
    code, text, r = invoke(["sweep", sw, "--dry-run", "--out", tmp_path / "sw"])
    assert_clean(code, text, f"{MAX_TRIALS:,}", r)
    assert "100,000,000 trials" in text and not (tmp_path / "sw").exists()


@pytest.mark.parametrize("extra, sets", [
    ({"grid": {"training.seed": [1, 2]}}, []),
    ({"zip": {"training.seed": [1, 2], "training.steps": [2, 3]}}, []),
    ({}, ["set.training.seed=3"]),
    ({"set": {"training": {"seed": 3, "steps": 2}}}, []),
], ids=["grid", "zip", "set-flat", "set-mapping"])
def test_a_sweep_axis_on_the_seed_is_refused_pointing_to_seeds(tmp_path, extra, sets):
    sw = _sweep(tmp_path, **extra)
    code, text, r = invoke(["sweep", sw, "--dry-run", "--out", tmp_path / "sw"] + sum((["--set", s] for s in sets), []))
    assert_clean(code, text, "training.seed", r)
    assert "seeds:" in text


DUPLICATE_SPEC = """name: h
image: {size: 32}
concepts:
  color: {values: [red, green, blue]}
  shape: {values: [circle, square]}
objects:
  - {name: o, shape: {concept: shape}, color: {concept: color}, size: 0.4}
splits: {train: 12, val: 2, test: 2}
splits: {train: 0, val: 2, test: 2}
"""


@pytest.mark.parametrize("kind", ["spec", "config", "sweep", "set-value", "nested"])
def test_duplicate_yaml_keys_are_refused_naming_the_key_and_line(tmp_path, kind):
    sp = _write(tmp_path, SPEC)
    if kind == "spec":
        args, line = ["validate", _write(tmp_path, DUPLICATE_SPEC, "dup.yaml")], "line 9"
    elif kind == "nested":
        args, line = ["validate", _write(tmp_path, DUPLICATE_SPEC.replace("splits: {train: 0, val: 2, test: 2}\n", "")
                                         .replace("train: 12,", "train: 12, val: 3,"), "dup.yaml")], "line 8"
    elif kind == "config":
        text = yaml.safe_dump(config(tmp_path, sp), sort_keys=False) + "name: other\n"
        args, line = ["train", "diffusion", _write(tmp_path, text, "cfg.yaml"), "--dry-run"], "line"
    elif kind == "sweep":
        args, line = ["sweep", _write(tmp_path, _sweep(tmp_path).read_text() + "seeds: [0]\nseeds: [1]\n", "sw2.yaml"), "--dry-run"], "line"
    else:
        args, line = ["validate", sp, "--set", "splits={train: 12, train: 0}"], "train"
    code, text, r = invoke(args)
    assert_clean(code, text, "duplicate key", r)
    assert line in text
    key = {"spec": "'splits'", "nested": "'val'", "config": "'name'", "sweep": "'seeds'", "set-value": "'train'"}[kind]
    assert key in text


def test_a_merge_key_may_still_override_merged_keys(tmp_path):
    from mosaic.overrides import safe_load

    assert safe_load("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n")["other"] == {"x": 3, "y": 2}


@pytest.mark.parametrize("where", ["spec-set", "spec-file", "config-overrides", "config-overrides-key", "sweep-axis"])
def test_lone_surrogates_are_refused_naming_the_field(tmp_path, where):
    sp = _write(tmp_path, SPEC)
    cp = _write(tmp_path, config(tmp_path, sp), "cfg.yaml")
    if where == "spec-set":
        args, field = ["generate", sp, "--out", tmp_path / "ds", "--set", 'description="\\udcff"'], "description"
    elif where == "spec-file":
        args, field = ["generate", _write(tmp_path, yaml.safe_dump(SPEC) + 'description: "a\\udcff"\n', "s2.yaml"),
                       "--out", tmp_path / "ds"], "description"
    elif where == "config-overrides":
        args, field = ["train", "diffusion", cp, "--set", 'dataset.overrides.description="\\udcff"'], "dataset.overrides.description"
    elif where == "config-overrides-key":
        args, field = ["train", "diffusion", cp, "--set", 'dataset.overrides={"x\\udcff": 1}'], "dataset.overrides.x\\udcff"
    else:
        args, field = ["sweep", _sweep(tmp_path, grid={"spec.description": ["ok", "\udcff"]}), "--out", tmp_path / "sw"], "grid.spec.description.1"
    code, text, r = invoke(args)
    assert_clean(code, text, "lone surrogate", r)
    assert field in text
    assert not (tmp_path / "ds").exists() and not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


@pytest.mark.parametrize("path, needle", [("/dev/zero", "character device, not a regular file"),
                                          ("{fifo}", "FIFO (named pipe), not a regular file")])
def test_a_special_file_given_as_a_spec_is_named_as_such(tmp_path, path, needle):
    os.mkfifo(tmp_path / "fifo")
    code, text, r = invoke(["validate", path.format(fifo=tmp_path / "fifo")])
    assert_clean(code, text, needle, r)
    assert "no such" not in text


def test_a_config_of_the_other_family_is_named(tmp_path):
    sp = _write(tmp_path, SPEC)
    cp = _write(tmp_path, config(tmp_path, sp), "cfg.yaml")
    code, text, r = invoke(["train", "transformer", cp])
    assert_clean(code, text, "looks like a diffusion config", r)
    assert "mosaic train diffusion" in text and "unknown field" not in text
    tcfg = {"name": "t", "dataset": {"spec": str(sp)}, "objective": "classifier", "input": {"kind": "tokens"},
            "training": {"steps": 1, "device": "cpu"}}
    tp = _write(tmp_path, tcfg, "t.yaml")
    code, text, r = invoke(["train", "diffusion", tp])
    assert_clean(code, text, "looks like a transformer config", r)
    assert "mosaic train transformer" in text and "unknown field" not in text
    d = yaml.safe_load(_sweep(tmp_path).read_text())
    sw = _write(tmp_path, {**d, "kind": "transformer"}, "sw.yaml")
    code, text, r = invoke(["sweep", sw, "--dry-run"])
    assert_clean(code, text, "looks like a diffusion config", r)


def test_a_sweep_folder_given_as_a_spec_is_named(tmp_path):
    (tmp_path / "swdir").mkdir()
    (tmp_path / "swdir" / "sweep.yaml").write_text("name: s\n")
    code, text, r = invoke(["validate", tmp_path / "swdir"])
    assert_clean(code, text, "sweep folder", r)


@pytest.mark.parametrize("field", ["dataset.spec", "dataset.root", "out"])
def test_an_empty_path_in_a_set_value_is_refused_naming_the_field(tmp_path, field):
    sp = _write(tmp_path, SPEC)
    cp = _write(tmp_path, config(tmp_path, sp), "cfg.yaml")
    code, text, r = invoke(["train", "diffusion", cp, "--set", f'{field}=""', "--dry-run"])
    assert_clean(code, text, "is an empty path", r)
    assert field.split(".")[-1] in text


@pytest.mark.parametrize("args", [["verify", ""], ["generate", "SPEC", "--out", ""], ["generate", "SPEC", "--out="],
                                  ["train", "diffusion", ""], ["evaluate", "", "--spec", "SPEC"], ["sweep", "", "--dry-run"]])
def test_an_empty_argument_is_refused_before_any_command_runs(tmp_path, monkeypatch, args):
    """Path("") is ".": an unset shell variable must not make a command check or write the current folder."""
    sp = _write(tmp_path, SPEC)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    code, text, r = invoke([str(sp) if a == "SPEC" else a for a in args])
    assert_clean(code, text, "empty", r)
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("args,word", [
    (["export", "{tmp}/d", "--format", "parquet", "-o="], "short option"),
    (["export", "{tmp}/d", "--format", "parquet", "-o=x"], "short option"),
    (["export", "{tmp}/d", "--format", "parquet", "-o", " "], "only whitespace"),
    (["verify", "\t"], "only whitespace"),
])
def test_short_option_equals_and_whitespace_arguments_are_refused(tmp_path, monkeypatch, args, word):
    """click reads `-o=` as the value '=' and `-o " "` as a folder named by a space: both wrote a whole dataset there."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    code, text, r = invoke([a.replace("{tmp}", str(tmp_path)) for a in args])
    assert_clean(code, text, word, r)
    assert list(work.iterdir()) == []


@pytest.mark.parametrize("args,word", [
    (["sample", "FILE"], "is a file, not a run folder"),
    (["report", "FILE"], "is a file, not a sweep folder"),
    (["export", "FILE", "--format", "parquet"], "is a file, not a dataset folder"),
    (["audit", "TMP"], "is not a run, samples, sweep or reproduction folder"),
    (["preview", "SPEC", "-o", "{tmp}/p.txt"], "does not end in .png"),
])
def test_a_file_or_foreign_folder_where_a_mosaic_folder_is_expected_is_named(tmp_path, args, word):
    f = tmp_path / "afile"
    f.write_text("x")
    sp = _write(tmp_path, SPEC)
    code, text, r = invoke([{"FILE": str(f), "TMP": str(tmp_path), "SPEC": str(sp)}.get(a, a.replace("{tmp}", str(tmp_path))) for a in args])
    assert_clean(code, text, word, r)
    assert not (tmp_path / "audit").exists() and not (tmp_path / "p.txt").exists()


def test_evaluate_names_a_missing_or_non_folder_images_dir(tmp_path):
    sp = _write(tmp_path, SPEC)
    code, text, r = invoke(["evaluate", tmp_path / "nope", "--spec", sp])
    assert_clean(code, text, "nope is missing", r)
    (tmp_path / "afile").write_text("x")
    code, text, r = invoke(["evaluate", tmp_path / "afile", "--spec", sp])
    assert_clean(code, text, "is not a folder", r)


def test_no_empty_progress_bar_above_an_error(tmp_path):
    sp = _write(tmp_path, SPEC)
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "foreign.txt").write_text("x")
    code, text, r = invoke(["generate", sp, "--out", tmp_path / "ds"])
    assert_clean(code, text, "holds no manifest.json", r)
    assert "0/?" not in text and "generate h" not in text


def test_a_batch_larger_than_the_training_split_is_refused_before_generating(tmp_path):
    sp = _write(tmp_path, SPEC)
    cp = _write(tmp_path, config(tmp_path, sp, **{"training.batch_size": 64}), "cfg.yaml")
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "training.batch_size", r)
    assert "12 samples" in text
    assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()


def test_a_run_folder_under_a_file_is_refused_before_generating(tmp_path):
    sp = _write(tmp_path, SPEC)
    (tmp_path / "regular").write_text("x")
    cp = _write(tmp_path, config(tmp_path, sp, out=str(tmp_path / "regular" / "run")), "cfg.yaml")
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "out", r)
    assert "regular file, not a folder" in text
    assert not (tmp_path / "data").exists()
    cp = _write(tmp_path, config(tmp_path, sp, **{"dataset.root": str(tmp_path / "regular")}), "cfg2.yaml")
    code, text, r = invoke(["train", "diffusion", cp])
    assert_clean(code, text, "dataset.root", r)


def test_calibrate_with_no_bad_scenes_prints_its_table(tmp_path):
    """--bad-n 0 (allowed) left every bad-render fraction None and crashed the table after the work."""
    sp = _write(tmp_path, SPEC)
    code, text, r = invoke(["evaluator", "calibrate", sp, "--n", "4", "--bad-n", "0", "--json", tmp_path / "c.json"])
    assert code == 0 and r.exception is None, text
    assert (tmp_path / "c.json").is_file()
