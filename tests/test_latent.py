"""Issue 24, MOSAIC's own protocol: the from-scratch autoencoder (train, cache, resume, evaluator
check, refusal), latent diffusion, flow matching (also in pixel space), the SD3 MMDiT, the one-hot
condition encoders, the latent presets' sizes, and the CLI. Tiny models at 16 px on the CPU."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from mosaic.errors import ConfigError
from mosaic.lab.config import validate_config
from mosaic.lab.diffusion import DiffusionConfig, run_diffusion

ROOT = Path(__file__).resolve().parents[1]

SPEC = {
    "name": "latenttest",
    "image": {"size": 16, "supersample": 2},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square"]}},
    "objects": [{"name": "obj", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.5}],
    "holdout": {"concepts": ["color", "shape"], "rule": {"kind": "explicit", "combinations": [["blue", "square"]]}},
    "splits": {"train": 24, "val": 6, "test_id": 6, "test_ood": 4},
}
TINY_UNET = {"backbone": "unet", "cond_dim": 16,
             "unet": {"block_out_channels": [8, 16], "cross_attention": [False, True], "heads": 2, "norm_num_groups": 4}}
TINY_MMDIT = {"backbone": "mmdit", "cond_dim": 16, "mmdit": {"patch_size": 1, "num_layers": 1, "heads": 2, "head_dim": 8}}
FLOW = {"objective": "flow_matching"}


def tiny_ae(tmp: Path, **kw) -> dict:
    return {"root": str(tmp / "ae"), "autoencoder": {"factor": 4, "block_out_channels": [8, 16, 16], "norm_num_groups": 4, "steps": 4,
                                                      "batch_size": 4, "check_n": 6, "threshold": 0.0, "pool": 24, "device": "cpu",
                                                      "checkpoint_every": 2, **kw}}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("latent") / "data"
    generate(parse_spec(SPEC), root)
    return root


def config(out: Path, dataset: Path, model: dict, sampler: str = "ddim", **training) -> DiffusionConfig:
    return validate_config(DiffusionConfig, {
        "name": "t", "out": str(out), "dataset": {"path": str(dataset)}, "model": model,
        "training": {"steps": 3, "batch_size": 4, "lr": 1e-3, "device": "cpu", "log_every": 1, "checkpoint_every": 1,
                     "keep_checkpoints": 5, "val_every": 0, "ema": {"decay": 0.99}, "threads": 1, **training},
        "sampling": {"steps": 2, "n_per_combination": 2, "batch_size": 8, "sampler": sampler},
        "evaluation": {"enabled": False, "select": "loss"},
    })


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())}


def quiet(s):
    pass


# ----------------------------------------------------------------------------------------------
# defaults keep existing behaviour
# ----------------------------------------------------------------------------------------------

def test_existing_configs_give_the_losses_they_gave_before_issue_24(tmp_path):
    """A tiny pixel-space UNet run (tests/test_diffusion.py's) has the losses recorded before latent
    diffusion, flow matching, the MMDiT and the one-hot encoders were added (same code path, same
    numbers; a change of default would move them)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import test_diffusion as T
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path / "data"
    generate(parse_spec(T.SPEC), root)
    run_diffusion(T.config(tmp_path / "run", root, T.TINY_UNET), say=quiet)
    got = T.losses(tmp_path / "run")
    assert got == pytest.approx({1: 1.1187891960144043, 2: 1.0511471033096313, 3: 0.9851410388946533}, abs=1e-5)
    dump = T.config(tmp_path / "x", root, T.TINY_UNET).model_dump(mode="json")["model"]
    # every new field defaults to null, so run folders written before still compare equal (config_diff)
    assert dump["latent"] is None and dump["mmdit"] is None and dump["onehot"] is None and dump["schedule"]["objective"] is None


# ----------------------------------------------------------------------------------------------
# flow matching, one-hot encoders, MMDiT
# ----------------------------------------------------------------------------------------------

def test_flow_matching_loss_is_sd3s_formula():
    from diffusers import FlowMatchEulerDiscreteScheduler

    from mosaic.lab.diffusion.config import FlowSection
    from mosaic.lab.diffusion.task import flow_matching_loss

    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    seen = {}

    def model(xt, t, cond, drop):
        seen["xt"], seen["t"] = xt, t
        return torch.zeros_like(xt) + 0.5

    x0, noise = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4)
    u = torch.tensor([0.25, 0.75])
    loss = flow_matching_loss(sched, FlowSection(), model, x0, None, None, None, u=u, noise=noise)
    s_plain = 1 - u  # the unshifted sigma of index u * 1000 (sigmas run from 1 down)
    s = (3 * s_plain / (1 + 2 * s_plain)).view(2, 1, 1, 1)  # SD3's shift
    assert seen["t"] == pytest.approx((s.flatten() * 1000).tolist(), rel=2e-3)
    assert torch.allclose(seen["xt"], (1 - s) * x0 + s * noise, atol=2e-3)
    pred_x0 = seen["xt"] - s * 0.5  # precondition_outputs: x0 = x_t - s * output
    assert loss.item() == pytest.approx(((pred_x0 - x0) ** 2).mean().item(), rel=1e-4)
    # without preconditioning the output is compared with the velocity noise - x0
    loss_v = flow_matching_loss(sched, FlowSection(precondition_outputs=False), model, x0, None, None, None, u=u, noise=noise)
    assert loss_v.item() == pytest.approx(((0.5 - (noise - x0)) ** 2).mean().item(), rel=1e-5)


@pytest.mark.parametrize("model", [{**TINY_UNET, "schedule": FLOW},
                                   {**TINY_MMDIT, "schedule": FLOW, "conditioning": "onehot", "onehot": {"hidden": [8]}}],
                         ids=["pixel-unet-flow", "pixel-mmdit-flow-onehot"])
def test_flow_matching_trains_samples_and_resumes_exactly_in_pixel_space(tmp_path, dataset, model):
    import shutil

    run = tmp_path / "run"
    m = run_diffusion(config(run, dataset, model, sampler="flow_euler", steps=4), say=quiet)
    first = losses(run)
    assert sorted(first) == [1, 2, 3, 4] and all(math.isfinite(v) for v in first.values())
    assert m["samples"]["images"] == 2 * 5 + 2 * 1
    assert "flow_euler" in Path(m["samples"]["out"]).name
    from PIL import Image

    meta = [json.loads(x) for x in (Path(m["samples"]["out"]) / "metadata.jsonl").read_text().splitlines()]
    assert Image.open(Path(m["samples"]["out"]) / meta[0]["file_name"]).size == (16, 16)
    for step in (3, 4):
        shutil.rmtree(run / "checkpoints" / f"checkpoint-{step:07d}")
    (run / "DONE").unlink()
    again = run_diffusion(config(run, dataset, model, sampler="flow_euler", steps=4), say=quiet)
    assert again["train"]["resumed_at"] == 2
    assert losses(run)[3] == pytest.approx(first[3], abs=1e-6) and losses(run)[4] == pytest.approx(first[4], abs=1e-6)


def test_the_sampler_must_fit_the_objective(tmp_path, dataset):
    with pytest.raises(ConfigError) as e:
        config(tmp_path, dataset, {**TINY_UNET, "schedule": FLOW}, sampler="ddim")
    assert "sampling.sampler" in str(e.value) and "flow_euler" in str(e.value)
    with pytest.raises(ConfigError) as e:
        config(tmp_path, dataset, TINY_UNET, sampler="flow_euler")
    assert "flow_matching" in str(e.value)
    with pytest.raises(ConfigError) as e:
        config(tmp_path, dataset, {**TINY_UNET, "schedule": {**FLOW, "snr_gamma": 5}}, sampler="flow_euler")
    assert "snr_gamma" in str(e.value)


def test_onehot_encoder_is_mosaics_mlp_and_its_null_is_the_encoding_of_zeros():
    from mosaic.lab.diffusion.conditioning import OneHotConditioner

    domains = {"color": list(range(10)), "count": list(range(1, 11))}
    enc = OneHotConditioner(domains, 512, hidden=[64, 128, 256], dropout=0.1).eval()
    assert [m.out_features for m in enc.mlps[0] if isinstance(m, torch.nn.Linear)] == [64, 128, 256, 512]
    assert [type(m).__name__ for m in enc.mlps[0]][:3] == ["Linear", "ReLU", "Dropout"]
    cond = torch.tensor([[3, 7], [0, 0], [9, -1]])
    tok, mask = enc(cond, torch.tensor([False, True, False]))
    assert tok.shape == (3, 2, 512) and mask is None and (tok >= 0).all()  # ReLU after the last layer too
    zeros = torch.stack([m(torch.zeros(1, 10)) for m in enc.mlps], dim=1)
    assert torch.allclose(tok[1:2], zeros)  # dropped: encoder(zeros) for every token, as MOSAIC's unconditional input
    assert torch.allclose(tok[2, 1], zeros[0, 1])  # a concept the scene does not show: zeros too
    assert not torch.allclose(tok[0], zeros[0])
    one = OneHotConditioner(domains, 64, tokens="one")
    assert one(cond)[0].shape == (3, 1, 64) and one.mlps[0][0].in_features == 20


def test_mmdit_runs_without_a_pooled_text_vector_and_the_condition_reaches_it_through_the_tokens():
    from mosaic.lab.diffusion.conditioning import FactorizedConditioner
    from mosaic.lab.diffusion.config import DiffusionModelSection
    from mosaic.lab.diffusion.model import DiffusionModel, build_backbone

    m = DiffusionModelSection.model_validate(TINY_MMDIT)
    torch.manual_seed(0)
    model = DiffusionModel(build_backbone(m, 4, 4), FactorizedConditioner({"c": [0, 1, 2]}, 16), "mmdit").eval()
    for p in model.backbone.proj_out.parameters():  # SD3 zero-initialises the output: give it weights to see the condition
        torch.nn.init.normal_(p, std=0.1)
    x, t = torch.randn(2, 4, 4, 4), torch.tensor([500.0, 500.0])
    a = model(x, t, torch.tensor([[0], [0]]))
    b = model(x, t, torch.tensor([[2], [2]]))
    assert a.shape == (2, 4, 4, 4) and not torch.allclose(a, b)


def test_latent_presets_have_mosaics_parameter_counts():
    from mosaic.lab.config import load_config
    from mosaic.lab.diffusion.model import build_backbone

    for task in ("count", "position", "attribute"):
        for bb, want in (("unet", 87.5), ("dit", 92.8)):
            cfg = load_config(DiffusionConfig, ROOT / f"experiments/train/mosaic_{task}_{bb}_latent.yaml")
            assert cfg.training.batch_size == 512 and cfg.training.steps == 20000 and cfg.training.lr == 1e-4
            assert cfg.training.lr_schedule == "constant" and cfg.training.weight_decay == 0.01 and cfg.training.grad_clip == 1.0
            assert cfg.model.cond_dropout == 0.1 and cfg.sampling.guidance == 1.0 and cfg.sampling.steps == 50
            assert cfg.model.latent.autoencoder.factor == 8 and cfg.model.latent.autoencoder.latent_channels == 4
            assert cfg.model.conditioning == "onehot"
            with torch.device("meta"):
                net = build_backbone(cfg.model, 128 // 8, 4)
            assert round(sum(p.numel() for p in net.parameters()) / 1e6, 1) == want, (task, bb)
            assert cfg.model.schedule.flow_matching == (bb == "dit")


# ----------------------------------------------------------------------------------------------
# the autoencoder and latent diffusion
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,sampler", [(TINY_UNET, "ddim"), ({**TINY_MMDIT, "schedule": FLOW}, "flow_euler")], ids=["unet-ddpm", "mmdit-flow"])
def test_latent_run_trains_on_cached_latents_and_decodes_its_samples(tmp_path, dataset, model, sampler):
    run = tmp_path / "run"
    cfg = config(run, dataset, {**model, "latent": tiny_ae(tmp_path)}, sampler=sampler)
    m = run_diffusion(cfg, say=quiet)
    (folder,) = [p for p in (tmp_path / "ae").iterdir() if not p.name.startswith(".")]  # .<name>.lock beside it
    rec = json.loads((folder / "autoencoder.json").read_text())
    assert rec["latent_shape"] == [4, 4, 4] and rec["spec_fingerprint"] and (folder / "vae" / "diffusion_pytorch_model.safetensors").is_file()
    assert not (folder / "partial").exists()
    (check,) = folder.glob("check-*.json")
    res = json.loads(check.read_text())
    assert set(res["accuracy"]) == {"color", "shape"} and math.isfinite(res["psnr_db"]) and res["n"] == 6
    (lat,) = (folder / "latents").iterdir()
    assert {p.name for p in lat.iterdir()} >= {"train.safetensors", "train.json"}
    assert json.loads((lat / "train.json").read_text())["shape"] == [24, 4, 4, 4]
    out = Path(m["samples"]["out"])
    meta = [json.loads(x) for x in (out / "metadata.jsonl").read_text().splitlines()]
    from PIL import Image

    assert Image.open(out / meta[0]["file_name"]).size == (16, 16)  # decoded to pixels before the evaluator
    # a second run on the same spec reuses the autoencoder and the cached latents (nothing retrained)
    before = (folder / "autoencoder.json").stat().st_mtime_ns, (lat / "train.safetensors").stat().st_mtime_ns
    said = []
    run_diffusion(config(tmp_path / "run2", dataset, {**model, "latent": tiny_ae(tmp_path)}, sampler=sampler), say=said.append)
    assert ((folder / "autoencoder.json").stat().st_mtime_ns, (lat / "train.safetensors").stat().st_mtime_ns) == before


def test_the_initial_weights_do_not_depend_on_whether_the_autoencoder_was_cached(tmp_path, dataset):
    a = run_diffusion(config(tmp_path / "a", dataset, {**TINY_UNET, "latent": tiny_ae(tmp_path)}), say=quiet)
    b = run_diffusion(config(tmp_path / "b", dataset, {**TINY_UNET, "latent": tiny_ae(tmp_path)}), say=quiet)  # cached now
    la, lb = losses(tmp_path / "a"), losses(tmp_path / "b")
    assert la[1] == lb[1]  # the first step's loss, bit for bit: the same initial weights and the same latents
    # later steps agree to float32 noise (the gradients of a process that trained an autoencoder first differ in the 7th digit)
    assert la == pytest.approx(lb, rel=1e-5)
    assert a["train"]["final_loss"] == pytest.approx(b["train"]["final_loss"], rel=1e-5)


def test_autoencoder_training_resumes_to_the_same_weights(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    import mosaic.lab.autoencoder as A
    from mosaic.spec import parse_spec

    spec = parse_spec(SPEC)
    sec = A.AutoencoderSection.model_validate(tiny_ae(tmp_path)["autoencoder"])
    A.train_autoencoder(sec, spec, tmp_path / "whole", progress=False, say=quiet)
    real, calls = A.reconstruction_loss, {"n": 0}

    def dies_at_step_3(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(A, "reconstruction_loss", dies_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        A.train_autoencoder(sec, spec, tmp_path / "broken", progress=False, say=quiet)
    assert (tmp_path / "broken" / "partial" / "checkpoint" / "state.safetensors").is_file()
    monkeypatch.setattr(A, "reconstruction_loss", real)
    rec = A.train_autoencoder(sec, spec, tmp_path / "broken", progress=False, say=quiet)
    assert rec["resumed_at"] == 2
    w1 = load_file(str(tmp_path / "whole" / "vae" / "diffusion_pytorch_model.safetensors"))
    w2 = load_file(str(tmp_path / "broken" / "vae" / "diffusion_pytorch_model.safetensors"))
    assert w1.keys() == w2.keys() and all(torch.allclose(w1[k], w2[k], atol=1e-6) for k in w1)


def test_foreground_weight_marks_the_objects_and_weights_their_errors_only():
    import mosaic.lab.autoencoder as A

    x = torch.full((2, 3, 16, 16), -0.6)  # a gray background
    x[0, :, 4:8, 5:9] = torch.tensor([0.9, -0.8, -0.8])[:, None, None]  # a red square inside
    x[1, :, 0:6, 0:3] = torch.tensor([-0.8, -0.8, 0.9])[:, None, None]  # a blue one touching two borders
    x[1, :, 10, 10] = -0.6 + 0.03  # a shade within the tolerance: background
    m = A.foreground_mask(x)
    assert m.shape == (2, 1, 16, 16)
    assert m[0, 0].sum() == 16 and m[0, 0, 4:8, 5:9].all()
    assert m[1, 0].sum() == 18 and m[1, 0, 0:6, 0:3].all() and m[1, 0, 10, 10] == 0
    kl = torch.zeros(2)
    on_obj, on_bg = x.clone(), x.clone()
    on_obj[0, 0, 5, 6] += 0.5  # the same error, once on the object and once on the background
    on_bg[0, 0, 12, 12] += 0.5
    plain = A.AutoencoderSection(edge=0, kl=0)
    weighted = A.AutoencoderSection(edge=0, kl=0, foreground=4)
    assert torch.equal(A.reconstruction_loss(plain, on_obj, x, kl), A.reconstruction_loss(plain, on_bg, x, kl))
    lo, lb = A.reconstruction_loss(weighted, on_obj, x, kl), A.reconstruction_loss(weighted, on_bg, x, kl)
    assert torch.allclose(lo, 5 * lb) and torch.allclose(lb, A.reconstruction_loss(plain, on_bg, x, kl))


def test_autoencoder_cache_keys_without_foreground_are_those_from_before_it():
    from mosaic.lab.autoencoder import AutoencoderSection as S

    # measured with the section before `foreground` existed: cached autoencoders keep their folders
    assert S().weights_key() == "225337451d"
    assert S(factor=4, steps=1500, block_out_channels=[32, 64, 128]).weights_key() == "9b905ac734"
    assert S(foreground=4).weights_key() != S().weights_key()


def test_an_autoencoder_below_the_threshold_is_refused_with_its_numbers(tmp_path, dataset):
    from mosaic.lab.autoencoder import AutoencoderRefused

    run = tmp_path / "run"
    cfg = config(run, dataset, {**TINY_UNET, "latent": tiny_ae(tmp_path, threshold=0.99, steps=2)})
    with pytest.raises(AutoencoderRefused) as e:
        run_diffusion(cfg, say=quiet)
    msg = str(e.value)
    assert "model.latent.autoencoder" in msg and "refused" in msg and "PSNR" in msg and "color" in msg and "99 %" in msg
    assert not run.exists()  # nothing of the run was written


def test_latent_config_errors_name_the_field(tmp_path, dataset):
    cfg = config(tmp_path / "r", dataset, {**TINY_UNET, "latent": tiny_ae(tmp_path, factor=16, block_out_channels=None)})
    with pytest.raises(ConfigError) as e:
        run_diffusion(cfg, say=quiet)
    assert "model.latent.autoencoder.factor" in str(e.value) and "16" in str(e.value)
    with pytest.raises(ConfigError) as e:
        validate_config(DiffusionConfig, {"name": "t", "dataset": {"path": str(dataset)},
                                          "model": {**TINY_UNET, "latent": tiny_ae(tmp_path, block_out_channels=[8, 16])}})
    assert "block_out_channels" in str(e.value) and "factor 4 needs 3" in str(e.value)
    stream = config(tmp_path / "s", dataset, {**TINY_UNET, "latent": tiny_ae(tmp_path)}).model_dump(mode="json")
    stream["dataset"] = {"spec": str(tmp_path / "spec.yaml"), "stream": True, "root": str(tmp_path / "d")}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    with pytest.raises(ConfigError) as e:
        run_diffusion(validate_config(DiffusionConfig, stream), say=quiet)
    assert "dataset.stream" in str(e.value)
    assert not (tmp_path / "s").exists() and not (tmp_path / "d").exists()


def test_cli_autoencoder_train_and_check(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    args = ["--ae", "factor=4", "--ae", "block_out_channels=[8, 16, 16]", "--ae", "norm_num_groups=4", "--ae", "steps=3",
            "--ae", "batch_size=4", "--ae", "check_n=4", "--ae", "device=cpu"]
    run = [sys.executable, "-m", "mosaic.cli", "autoencoder", "train", str(spec), "--root", str(tmp_path / "ae")]
    r = subprocess.run(run + args + ["--ae", "threshold=0"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "reconstructions" in r.stdout and "PSNR" in r.stdout and "passed" in r.stdout
    (folder,) = [p for p in (tmp_path / "ae").iterdir() if not p.name.startswith(".")]
    # the same section again: found, not retrained
    r2 = subprocess.run(run + args + ["--ae", "threshold=0"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r2.returncode == 0 and "holds this autoencoder already" in r2.stdout
    # checked against a 99 % threshold, a 3-step autoencoder is refused: exit 2, the numbers, no traceback
    r3 = subprocess.run([sys.executable, "-m", "mosaic.cli", "autoencoder", "check", str(folder), str(spec), "--ae", "factor=4",
                         "--ae", "block_out_channels=[8, 16, 16]", "--ae", "norm_num_groups=4", "--n", "4"],
                        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r3.returncode == 2 and "refused" in r3.stderr and "Traceback" not in r3.stderr
    bad = subprocess.run(run + ["--ae", "factor=3"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert bad.returncode == 2 and "factor" in bad.stderr and "Traceback" not in bad.stderr


def test_dry_run_of_a_latent_config_costs_the_autoencoder_and_writes_nothing(tmp_path, dataset):
    from mosaic.lab.cost import estimate_run

    cfg = config(tmp_path / "r", dataset, {**TINY_UNET, "latent": tiny_ae(tmp_path)})
    est = estimate_run(cfg, time_cpu=False)
    assert est.autoencoder_params > 0 and not est.autoencoder_cached
    assert est.autoencoder_train_flops > 0 and est.autoencoder_encode_flops > 0 and est.autoencoder_decode_flops > 0
    assert est.flops_total == pytest.approx(est.train_flops_total + est.eval_flops_total + est.autoencoder_flops)
    assert "latent 4x4x4" in est.family
    assert not (tmp_path / "ae").exists() and not (tmp_path / "r").exists()
    pixel = estimate_run(config(tmp_path / "p", dataset, TINY_UNET), time_cpu=False)
    assert pixel.autoencoder_flops == 0 and pixel.train_flops_per_image > est.train_flops_per_image  # 16 x 16 x 3 vs 4 x 4 x 4


@pytest.mark.slow
def test_cpu_latent_run_end_to_end_through_the_cli(tmp_path):
    """experiments/train/quickstart_latent_cpu.yaml through `mosaic train diffusion`: the autoencoder
    (32 px -> 8 x 8 x 4) is trained, passes its evaluator check, the UNet trains on the latents,
    samples are decoded and scored."""
    cmd = [sys.executable, "-m", "mosaic.cli", "train", "diffusion", str(ROOT / "experiments/train/quickstart_latent_cpu.yaml"),
           "--out", str(tmp_path / "run"), "--set", f"dataset.root={tmp_path / 'data'}",
           "--set", f"model.latent.root={tmp_path / 'ae'}"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=7200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert m["samples"]["images"] > 0 and m["table"]
    (folder,) = [p for p in (tmp_path / "ae").iterdir() if not p.name.startswith(".")]
    (check,) = folder.glob("check-*.json")
    assert json.loads(check.read_text())["passed"]
