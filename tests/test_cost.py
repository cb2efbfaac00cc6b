"""The cost estimate (mosaic.lab.cost) on planted models, on real configs, and gpu_check --tiny."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mosaic.lab.cost import ACCELERATORS, estimate_run
from mosaic.lab.cost_table import render_estimate
from mosaic.lab.flops import measure_step

ROOT = Path(__file__).resolve().parents[1]


def _sum_loss(model, batch, gen):
    return model(batch["x"]).float().sum()


@pytest.mark.parametrize("fake", [True, False])
def test_linear_flops_are_6_in_out_per_sample_when_its_input_needs_a_gradient(fake):
    # a layer in the middle of a network: forward 2·in·out, backward 2·in·out (input grad) + 2·in·out (weight grad)
    i, o, b = 24, 40, 3
    lin = nn.Linear(i, o)
    pre = nn.Parameter(torch.ones(i))

    def loss(model, batch, gen):
        return model(batch["x"] * pre).sum()

    m = measure_step(lin, loss, {"x": torch.randn(b, i)}, fake=fake)
    assert m.forward_flops == 2 * b * i * o
    assert m.flops == 6 * b * i * o
    assert lin.weight.grad is None  # gradients cleared afterwards


def test_first_layer_has_no_input_gradient_and_two_layers_add_up():
    i, h, o, b = 16, 32, 8, 5
    net = nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))
    m = measure_step(net, _sum_loss, {"x": torch.randn(b, i)})
    assert m.flops == b * (4 * i * h + 6 * h * o)


def test_attention_flops_are_counted_on_cpu_kernels():
    b, heads, L, d = 2, 4, 16, 8

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Parameter(torch.randn(heads, L, d))

        def forward(self, x):
            q = self.q.expand(x.shape[0], -1, -1, -1)
            return F.scaled_dot_product_attention(q, x, x)

    m = measure_step(Attn(), _sum_loss, {"x": torch.randn(b, heads, L, d)})
    assert m.forward_flops == 4 * b * heads * L * L * d  # QK^T and AV, 2 FLOPs per multiply-add
    assert m.flops > 2 * m.forward_flops  # the backward is counted as well


def test_saved_activations_are_the_inputs_autograd_keeps():
    i, o = 64, 32
    lin = nn.Linear(i, o)
    for b in (1, 4):
        m = measure_step(lin, _sum_loss, {"x": torch.randn(b, i)})
        assert m.saved_bytes == b * i * 4  # fp32 input saved for the weight gradient
    # under bf16 autocast: bf16 copies of the input (per sample) and, when the input needs a gradient, of the weight (per step)
    pre = nn.Parameter(torch.ones(i))

    def loss(model, batch, gen):
        return model(batch["x"] * pre).float().sum()

    m1 = measure_step(lin, loss, {"x": torch.randn(1, i)}, dtype=torch.bfloat16)
    m3 = measure_step(lin, loss, {"x": torch.randn(3, i)}, dtype=torch.bfloat16)
    per = (m3.saved_bytes - m1.saved_bytes) / 2
    assert per == i * 4 + i * 2  # fp32 x kept by the product with `pre`, and its bf16 copy kept by the matmul
    assert m1.saved_bytes - per == i * o * 2
    # one step tells them apart: tensors with the batch as leading dimension, and the rest
    m7 = measure_step(lin, loss, {"x": torch.randn(7, i)}, dtype=torch.bfloat16)
    assert m7.saved_bytes_batched == 7 * per and m7.saved_bytes - m7.saved_bytes_batched == i * o * 2


def _cfg(path: str, *sets: str):
    from mosaic.lab.config import load_config
    from mosaic.lab.diffusion import DiffusionConfig

    return load_config(DiffusionConfig, ROOT / path, list(sets))


def test_dit_estimate_follows_the_6_params_tokens_rule(tmp_path):
    # a DiT's training FLOPs per image are about 6 x (block parameters) x tokens, plus attention
    cfg = _cfg("experiments/train/mosaic_count_dit.yaml", "model.dit.num_layers=2", "training.batch_size=8",
               "training.steps=10", f"dataset.root={tmp_path}")
    est = estimate_run(cfg, time_cpu=False)
    tokens = (64 // 4) ** 2
    width = 16 * 32
    block = 2 * (4 * width * width + 2 * 4 * width * width)  # self-attn q,k,v,o + MLP 4x in each of 2 blocks
    cross = 2 * (2 * width * width)                           # cross-attention q and o see every image token
    attn = 2 * 2 * 4 * tokens * tokens * width / 2             # self-attention scores and values, forward, 2 blocks (x3 below)
    expect = 6 * (block + cross) * tokens + 3 * attn
    assert 0.9 < est.train_flops_per_image / expect < 1.3
    assert est.train_flops_per_step == est.train_flops_per_image * 8
    assert est.train_flops_total == est.train_flops_per_step * 10
    assert not list(tmp_path.iterdir())  # nothing written: no dataset, no run folder


def test_a_batch_that_fits_no_accelerator_is_a_warning_with_the_batch_that_would(tmp_path):
    cfg = _cfg("experiments/train/quickstart_cpu.yaml", "training.batch_size=400000", f"dataset.root={tmp_path}")
    est = estimate_run(cfg, time_cpu=False)
    assert est.accelerators and not any(r.fits for r in est.accelerators)
    assert len(est.warnings) == len(est.accelerators)
    w = {r.name: r for r in est.accelerators}
    assert w["H200 SXM"].max_batch > w["A100 40GB"].max_batch > w["RTX 4090"].max_batch > 1000
    assert all(f"to {r.max_batch} or less" in x for r, x in zip(est.accelerators, est.warnings))
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_mosaic_presets_have_their_documented_size_and_warn_where_the_batch_does_not_fit(tmp_path):
    cfg = _cfg("experiments/train/mosaic_count_unet.yaml", f"dataset.root={tmp_path}")
    est = estimate_run(cfg, time_cpu=False)
    assert round(est.params / 1e6, 1) == 87.5
    assert est.batch_size == 512 and est.precision_gpu == "bf16"
    # a 24 GB card cannot hold 512 images of this UNet's activations; the warning says how far to lower the batch
    small = [r for r in est.accelerators if r.memory_gb <= 24]
    assert small and all(not r.fits for r in small)
    assert any("RTX 4090" in w and "training.batch_size" in w for w in est.warnings)
    big = {r.name: r for r in est.accelerators}["H200 SXM"]
    assert big.train_s < {r.name: r for r in est.accelerators}["A100 80GB"].train_s  # faster peak, shorter run
    per_img = est.activation_bytes_per_image
    assert 1e6 < per_img < 1e9
    fit = [r for r in est.accelerators if r.max_batch]
    for r in fit:  # the suggested batch really fits by the same memory model
        need = est.static_bytes + est.data_bytes + est.activation_bytes_fixed + per_img * r.max_batch + 2**30
        assert need <= r.memory_gb * 1e9
    text = "".join(str(x) for x in render_estimate(est))
    assert text  # renders
    assert not list(tmp_path.iterdir())


def test_quickstart_estimate_times_real_steps(tmp_path):
    cfg = _cfg("experiments/train/quickstart_cpu.yaml", "training.steps=50", f"dataset.root={tmp_path}",
               "evaluation.check_n=0")
    est = estimate_run(cfg)
    assert est.cpu_timed_batch == 32  # small enough to time at the config's batch
    assert 0 < est.cpu_step_s < 30
    assert 0 < est.cpu_step_idle_s <= est.cpu_step_s
    assert est.cpu_train_s == pytest.approx(est.cpu_step_idle_s * 50)  # phases are given as on an idle machine
    assert est.cpu_generate_s > 0  # the dataset does not exist yet
    assert est.eval_images == (6 + 3) * 8  # K = 8 per combination: 6 seen (test_id) and 3 held-out (test_ood)
    assert est.cpu_total_loaded_s >= est.cpu_total_s
    assert not list(tmp_path.iterdir())


def test_estimate_does_not_depend_on_the_load_of_the_dry_run(tmp_path, monkeypatch):
    # a dry run beside other work: the step's wall time is twice its process CPU time. The estimate is the run's
    # time with a core of its own (half the loaded figure), every phase scaled alike; the loaded total is kept
    import mosaic.lab.cost as cost

    real = cost.time_steps

    def loaded(*a, **k):
        fb, op, saved, cpu_s = real(*a, **k)
        return 2 * fb, 2 * op, saved, cpu_s * (fb + op) / max(cpu_s, 1e-12)  # wall doubled, CPU time = the unloaded wall

    monkeypatch.setattr(cost, "time_steps", loaded)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    cfg = _cfg("experiments/train/quickstart_cpu.yaml", "training.steps=50", f"dataset.root={tmp_path}", "evaluation.check_n=0")
    est = estimate_run(cfg)
    assert est.cpu_step_idle_s == pytest.approx(est.cpu_step_s / 2, rel=1e-6)
    assert est.cpu_train_s == pytest.approx(est.cpu_step_idle_s * 50)
    assert est.cpu_total_s == pytest.approx(est.cpu_total_loaded_s / 2, rel=1e-6)


def _companions_alive() -> list[str]:
    alive = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "-m mosaic.lab.timing" in cmd:
            alive.append(cmd)
    return alive


def test_a_sweeps_estimate_times_its_steps_beside_the_trials_that_run_with_it(tmp_path):
    # trials run `workers` at a time: the estimate's CPU timings are taken while the other slots' processes train
    # the same model, and those processes are gone when the estimate returns
    from mosaic.lab.timing import side_by_side

    cfg = _cfg("experiments/train/quickstart_cpu.yaml", "training.steps=50", f"dataset.root={tmp_path}", "evaluation.check_n=0")
    with side_by_side(cfg, 1, 8) as n:
        assert n == 0 and not _companions_alive()
    with side_by_side(cfg, 2, 8) as n:
        assert n == 1  # it printed "ready" after real training steps
        assert len(_companions_alive()) == 1
    assert not _companions_alive()
    est = estimate_run(cfg, side_by_side=2)
    assert any("1 other process(es) training the same model side by side" in x for x in est.notes)
    assert 0 < est.cpu_step_idle_s and not _companions_alive()
    assert not list(tmp_path.iterdir())


def test_a_device_that_is_absent_is_a_config_error_naming_the_field(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from mosaic.errors import ConfigError
    from mosaic.lab.cost import check_device

    cfg = _cfg("experiments/train/quickstart_cpu.yaml", f"dataset.root={tmp_path}", "training.device=cuda")
    with pytest.raises(ConfigError) as e:
        check_device(cfg.training)
    assert "training.device" in str(e.value) and "cpu" in str(e.value)
    with pytest.raises(ConfigError):
        estimate_run(cfg, time_cpu=False)
    assert not list(tmp_path.iterdir())


def test_accelerator_table_is_sane():
    names = [a.name for a in ACCELERATORS]
    assert "H200 SXM" in names and len(set(names)) == len(names)
    for a in ACCELERATORS:
        assert 50 < a.bf16_tflops < 2000 and 16 <= a.memory_gb <= 200


def test_gpu_check_tiny_runs_every_code_path_on_cpu(tmp_path):
    out = tmp_path / "gpu_check"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--tiny", "--out", str(out)],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert {p["preset"] for p in summary["presets"]} == {"mosaic_count_unet", "mosaic_count_dit", "mosaic_count_unet_latent",
                                                         "mosaic_count_dit_latent"}
    (ae,) = summary["autoencoders"]  # the latent presets' autoencoder fit (one per spec), checked by the evaluator
    assert ae["latent_shape"] == [4, 8, 8] and math.isfinite(ae["psnr_db"]) and set(ae["accuracy"]) == {"color", "count"}
    assert summary["latent"]["status"] == "done" and summary["latent"]["images_sampled"] > 0
    for p in summary["presets"]:
        assert p["steps"] >= 3 and p["images_per_s"] > 0 and math.isfinite(p["final_loss"])
        assert p["achieved_tflops"] > 0 and p["flops_per_image"] > 0
    e2e = summary["composition"]
    assert e2e["status"] == "done" and e2e["images_sampled"] > 0 and "joint" in json.dumps(e2e["table"])
    md = (out / "gpu_check.md").read_text()
    assert "images/s" in md and "MFU" in md


def test_a_sweep_measures_each_model_shape_once(tmp_path):
    import time

    cache: dict = {}
    a = estimate_run(_cfg("experiments/train/quickstart_cpu.yaml", "training.steps=100", f"dataset.root={tmp_path}"),
                     time_cpu=False, cache=cache)
    t0 = time.perf_counter()
    b = estimate_run(_cfg("experiments/train/quickstart_cpu.yaml", "training.steps=300", "dataset.overrides.holdout.rule.k=1",
                          f"dataset.root={tmp_path}"), time_cpu=False, cache=cache)
    reused = time.perf_counter() - t0
    assert len(cache) == 1  # same model, image size, batch and precision: one measurement
    assert b.train_flops_per_image == a.train_flops_per_image and b.train_flops_total == 3 * a.train_flops_total
    assert b.train_images != a.train_images  # the dataset sizes are each run's own (k = 1 sees fewer combinations)
    c = estimate_run(_cfg("experiments/train/quickstart_cpu.yaml", "training.batch_size=64", f"dataset.root={tmp_path}"),
                     time_cpu=False, cache=cache)
    assert len(cache) == 2 and c.train_flops_per_step == 2 * a.train_flops_per_step
    assert reused < 5
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("preset", ["classifier_coverage_vit", "binding_tokens"])
def test_transformer_configs_are_estimated_through_their_tasks_loss(preset, tmp_path):
    from mosaic.lab.config import load_config
    from mosaic.lab.transformer import TransformerConfig

    cfg = load_config(TransformerConfig, ROOT / "experiments/train" / f"{preset}.yaml", [f"dataset.root={tmp_path}"])
    est = estimate_run(cfg, time_cpu=False)
    assert est.params > 10_000 and est.train_flops_per_image > 6 * est.params * 0.5
    assert est.train_flops_per_step == pytest.approx(est.train_flops_per_image * cfg.training.batch_size)
    assert est.activation_bytes_per_image > 0 and est.peak_bytes_gpu > est.static_bytes
    assert ("binding" in est.family) == (preset == "binding_tokens")
    assert not list(tmp_path.iterdir())


def _cli(*args):
    from typer.testing import CliRunner

    from mosaic.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def test_train_dry_run_validates_prints_the_estimate_and_writes_nothing(tmp_path):
    cfg = ROOT / "experiments/train/quickstart_cpu.yaml"
    r = _cli("train", "diffusion", cfg, "--dry-run", "--out", tmp_path / "run", "--set", f"dataset.root={tmp_path}",
             "--set", "training.steps=20", "--set", "evaluation.check_n=0")
    assert r.exit_code == 0, r.output
    for line in ("parameters", "training FLOPs per image", "peak memory per process", "this machine: total", "H200 SXM",
                 "assumed MFU 30 %"):
        assert line in r.output
    assert not list(tmp_path.iterdir())
    # invalid input found by the estimate (a model too large for the image) exits 2 naming the field and the file
    r = _cli("train", "diffusion", cfg, "--dry-run", "--set", f"dataset.root={tmp_path}",
             "--set", "model.unet.block_out_channels=[16, 32, 64, 64, 64, 64, 64]",
             "--set", "model.unet.cross_attention=[false, false, true, true, true, true, true]")
    assert r.exit_code == 2 and "model.unet.block_out_channels" in r.output and "quickstart_cpu.yaml" in r.output
    assert not list(tmp_path.iterdir())


def test_cuda_on_a_machine_without_one_is_an_error_naming_the_field_before_anything_is_written(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    for extra in ([], ["--dry-run"]):
        r = _cli("train", "diffusion", ROOT / "experiments/train/quickstart_cpu.yaml", *extra, "--out", tmp_path / "run",
                 "--set", f"dataset.root={tmp_path}", "--set", "training.device=cuda")
        assert r.exit_code == 2, r.output
        assert "training.device" in r.output and "no CUDA GPU" in r.output and "Traceback" not in r.output
        assert not list(tmp_path.iterdir())  # no dataset generated, no run folder


def test_sweep_dry_run_lists_each_trial_with_its_estimate(tmp_path):
    r = _cli("sweep", ROOT / "experiments/sweeps/composition_cpu.yaml", "--dry-run", "--out", tmp_path / "sweep",
             "--set", f"set.dataset.root={tmp_path}", "--set", "set.training.steps=10", "--set", "set.evaluation.check_n=0")
    assert r.exit_code == 0, r.output
    assert "cost estimate per trial" in r.output and "1 distinct model shape" in r.output and "total (" in r.output
    said = " ".join(r.output.split())
    assert "--workers 1 runs them one at a time" in said and "side by side" not in said
    for n in (1, 2, 3):  # trial names are folded, never cut to 'n=1_seed…' (nine rows that look the same)
        assert f"n={n}_seed" in said.replace(" ", "") and all(f"seed={k}" in said.replace(" ", "") for k in (0, 1, 2))
    assert not list(tmp_path.iterdir())
