"""One command that proves the MOSAIC-scale presets on a GPU, and measures them.

    python benchmarks/gpu_check.py                 # on a GPU machine (about 10 minutes on one H200)
    python benchmarks/gpu_check.py --tiny          # the same code paths on CPU with small models (< 2 minutes)

0. **Autoencoder fit** of the latent presets (``mosaic_count_unet_latent.yaml``: 128 px, factor 8,
   16 x 16 x 4 latents; :mod:`mosaic.lab.autoencoder`): trained on the GPU and checked (the scene
   parser on reconstructions of fresh renders, >= 99 % per concept; PSNR), into the cache the
   preset's runs reuse.
1. **Throughput** of each MOSAIC-scale preset, pixel space and latent (``*_latent``: the UNet
   87.5 M and the SD3 MMDiT 92.8 M on 16 x 16 x 4 latents, flow matching for the MMDiT) (``experiments/train/mosaic_count_unet.yaml``, UNet
   87.5 M; ``mosaic_count_dit.yaml``, DiT 90.6 M; 64 px, batch 512): ``--steps`` timed training
   steps (default 150, after ``--warmup`` untimed ones) of the task's own loss
   (``DiffusionTask.loss``: noise, timesteps, condition dropout, model, MSE) with the loop's
   optimizer settings (AdamW, gradient clipping, EMA), tuned for throughput: bf16 autocast, TF32
   matmuls, ``channels_last`` (UNet), ``torch.compile`` (``--compile``, default on a GPU), fused
   AdamW, foreach clipping and EMA, the training images and conditions on the device (batches are
   drawn there), and no host synchronisation inside the step (losses stay on the device until the
   end; timing by CUDA events). Recorded: images/s, achieved TFLOP/s (training FLOPs per image from
   :mod:`mosaic.lab.cost`, the same ``FlopCounterMode`` count as ``--dry-run``, times images/s),
   MFU against the device's peak dense bf16 TFLOP/s (:data:`mosaic.lab.cost.ACCELERATORS`, or
   ``--peak-tflops``), peak memory (``torch.cuda.max_memory_allocated``) next to the estimate's,
   and the preset's projected training time from the measured rate. A batch that runs out of GPU
   memory is halved until it fits (``oom_batches``; the cost estimate predicts this:
   ``estimated_max_batch``; for the UNet preset at 64 px it predicts about 200 GiB at batch 512,
   more than an H200 holds).
2. **End to end**: one short latent run (``quickstart_latent_cpu.yaml``: autoencoder, cached
   latents, training, decoding, scoring) and one short composition experiment through the real command line,
   ``mosaic train diffusion experiments/train/composition_cpu.yaml`` with ``--set`` overrides
   (generate -> train -> sample -> evaluate), on the GPU when there is one.
3. **Summary**: ``OUT/gpu_check.json`` and ``OUT/gpu_check.md`` (``--out``, default ``data/gpu_check``).

``--tiny`` shrinks the presets (2-level UNet, 2-block DiT, 32 px, batch 4, a few steps) and the
end-to-end run (64 training images, 4 steps) and runs on the CPU; it is tested in the default
suite (tests/test_cost.py). The throughput step here is a benchmark of the step the training loop
runs, not the loop itself (no checkpoints, validation or logging inside the timed window).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from mosaic.lab.config import load_config  # noqa: E402
from mosaic.lab.cost import ACCELERATORS, estimate_run  # noqa: E402
from mosaic.lab.cost_table import fmt_seconds  # noqa: E402
from mosaic.lab.probe import make_probe  # noqa: E402
from mosaic.lab.diffusion import DiffusionConfig  # noqa: E402

PRESETS = {"mosaic_count_unet": "experiments/train/mosaic_count_unet.yaml",
           "mosaic_count_dit": "experiments/train/mosaic_count_dit.yaml",
           # MOSAIC's own protocol (docs/latent.md): 16 x 16 x 4 latents of 128 px renders
           "mosaic_count_unet_latent": "experiments/train/mosaic_count_unet_latent.yaml",
           "mosaic_count_dit_latent": "experiments/train/mosaic_count_dit_latent.yaml"}
_TINY_UNET = ["model.unet.block_out_channels=[16, 32]", "model.unet.cross_attention=[false, true]",
              "model.unet.layers_per_block=1", "model.unet.heads=4", "model.unet.norm_num_groups=8"]
#: --tiny: a small autoencoder (32 px -> 8 x 8 x 4), never refused (threshold 0), a few steps
_TINY_AE = ["model.latent.autoencoder.factor=4", "model.latent.autoencoder.block_out_channels=[8, 16, 16]",
            "model.latent.autoencoder.layers_per_block=1", "model.latent.autoencoder.norm_num_groups=4",
            "model.latent.autoencoder.steps=3", "model.latent.autoencoder.batch_size=4", "model.latent.autoencoder.pool=16",
            "model.latent.autoencoder.check_n=4", "model.latent.autoencoder.threshold=0", "model.latent.autoencoder.device=cpu"]
TINY_MODEL = {
    "mosaic_count_unet": _TINY_UNET,
    "mosaic_count_dit": ["model.dit.num_layers=2", "model.dit.heads=2", "model.dit.head_dim=16", "model.dit.patch_size=8"],
    "mosaic_count_unet_latent": _TINY_UNET + ["model.cond_dim=16"] + _TINY_AE,
    "mosaic_count_dit_latent": ["model.mmdit.num_layers=2", "model.mmdit.heads=2", "model.mmdit.head_dim=16", "model.cond_dim=32",
                                "model.onehot.hidden=[16]"] + _TINY_AE,
}
DIT_MFU_GOAL = 0.40

# device names (torch.cuda.get_device_name) -> the cost table's accelerator
_NAME_KEYS = (("H200", "H200 SXM"), ("H100 PCIe", "H100 PCIe"), ("H100", "H100 SXM"), ("A100-SXM4-80GB", "A100 80GB"),
              ("A100 80GB", "A100 80GB"), ("A100", "A100 40GB"), ("L40S", "L40S"), ("L4", "L4"), ("4090", "RTX 4090"))


def peak_tflops_of(device_name: str) -> tuple[str | None, float | None]:
    """The cost table's accelerator and peak dense bf16 TFLOP/s for a CUDA device name (None when unknown)."""
    table = {a.name: a for a in ACCELERATORS}
    for key, name in _NAME_KEYS:
        if key in device_name:
            return name, table[name].bf16_tflops
    return None, None


def preset_config(name: str, tiny: bool, data_root: Path) -> DiffusionConfig:
    sets = [f"dataset.root={data_root}"]
    if name.endswith("_latent"):
        sets.append(f"model.latent.root={data_root / 'autoencoders'}")
    if tiny:
        sets += TINY_MODEL[name] + ["dataset.overrides.image.size=32", "training.batch_size=4", "training.device=cpu"]
    return load_config(DiffusionConfig, ROOT / PRESETS[name], sets)


def throughput(name: str, cfg: DiffusionConfig, *, device: torch.device, steps: int, warmup: int, compile_: bool,
               peak_tflops: float | None, accelerator: str | None = None, say=print) -> dict:
    """Timed training steps of a preset at its batch; when the batch runs out of GPU memory, at half
    of it, and so on (recorded in ``oom_batches``; the estimate predicts it: ``estimated_max_batch``).
    Returns the record of the summary."""
    say(f"[{name}] estimating (FLOPs per image, memory) ...")
    est = estimate_run(cfg, time_cpu=False, check_device_present=False)
    row = {r.name: r for r in est.accelerators}.get(accelerator)
    if row is not None and not row.fits:
        say(f"[{name}] the estimate says batch {cfg.training.batch_size} does not fit {accelerator} (largest: {row.max_batch}); trying it anyway")
    oom = []
    batch = cfg.training.batch_size
    while True:
        c = cfg.model_copy(update={"training": cfg.training.model_copy(update={"batch_size": batch})})
        try:
            rec = _throughput(name, c, est, device=device, steps=steps, warmup=warmup, compile_=compile_, peak_tflops=peak_tflops, say=say)
            break
        except torch.cuda.OutOfMemoryError:
            oom.append(batch)
            torch.cuda.empty_cache()
            if batch <= 8:
                raise
            say(f"[{name}] out of GPU memory at batch {batch}: halving it")
            batch //= 2
    rec["projected_full_run_s"] = rec["full_run_steps"] * cfg.training.batch_size / rec["images_per_s"]  # the preset's batch of images per step
    rec.update(preset_batch=cfg.training.batch_size, oom_batches=oom, estimated_max_batch=row.max_batch if row else None,
               estimated_fits=row.fits if row else None)
    return rec


def _throughput(name: str, cfg: DiffusionConfig, est, *, device: torch.device, steps: int, warmup: int, compile_: bool,
                peak_tflops: float | None, say=print) -> dict:
    tr = cfg.training
    torch.manual_seed(tr.seed)
    probe, _ = make_probe(cfg)
    model = probe.model.to(device)
    cuda = device.type == "cuda"
    channels_last = cuda and cfg.model.backbone == "unet"  # on the CPU, channels_last made the tiny UNet ~10x slower
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=tr.lr, betas=tr.betas, weight_decay=tr.weight_decay, fused=cuda)
    ema = [p.detach().clone() for p in params] if tr.ema.enabled else None
    B = tr.batch_size
    pool_n = max(2 * B, 256)
    pool = {k: v.to(device) for k, v in probe.make_batch(pool_n).items()}  # training tensors on the device
    fwd_model = torch.compile(model) if compile_ else model
    dtype = torch.bfloat16 if cuda or tr.mixed_precision == "bf16" else None
    gen = torch.Generator(device=device).manual_seed(tr.seed)
    losses = []

    def step():
        idx = torch.randint(0, pool_n, (B,), device=device, generator=gen)
        batch = {k: v[idx] for k, v in pool.items()}
        if channels_last:
            key = "latent" if "latent" in batch else "image"
            batch[key] = batch[key].contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = probe.loss(fwd_model, batch, gen)
        loss.backward()
        if tr.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, tr.grad_clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ema is not None:
            torch._foreach_lerp_(ema, [p.detach() for p in params], 1 - tr.ema.decay)
        losses.append(loss.detach())

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    say(f"[{name}] {est.params / 1e6:.1f} M parameters, batch {B}: {warmup} warm-up steps"
        + (" (torch.compile)" if compile_ else ""))
    t0 = time.perf_counter()
    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize(device)
    warm_s = time.perf_counter() - t0
    say(f"[{name}] {steps} timed steps")
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        end.record()
        torch.cuda.synchronize(device)
        seconds = start.elapsed_time(end) / 1000
    else:
        seconds = time.perf_counter() - t0
    final = torch.stack(losses[-min(10, len(losses)):]).float().mean().item()
    ips = B * steps / seconds
    achieved = est.train_flops_per_image * ips / 1e12
    peak_mem = torch.cuda.max_memory_allocated(device) if cuda else None
    full_steps = cfg.training.steps
    # the estimate's memory model at the batch actually run
    est_peak = est.static_bytes + est.data_bytes + est.activation_bytes_fixed + est.activation_bytes_per_image * B + 2**30
    rec = {
        "preset": name, "params": est.params, "batch": B, "image_size": est.image_size, "steps": steps, "warmup_s": warm_s,
        "seconds": seconds, "step_ms": 1000 * seconds / steps, "images_per_s": ips, "flops_per_image": est.train_flops_per_image,
        "achieved_tflops": achieved, "peak_tflops": peak_tflops, "mfu": achieved / peak_tflops if peak_tflops else None,
        "peak_memory_gib": peak_mem / 2**30 if peak_mem is not None else None,
        "estimated_peak_memory_gib": est_peak / 2**30,
        "memory_measured_over_estimate": (peak_mem / est_peak) if peak_mem else None,
        "final_loss": final, "compile": compile_, "precision": "bf16" if dtype is not None else "fp32",
        "channels_last": channels_last, "full_run_steps": full_steps,
        "projected_full_run_s": full_steps * B / ips,
        "estimate_h200_train_s": {r.name: r.train_s for r in est.accelerators}.get("H200 SXM"),
    }
    mfu = f", MFU {100 * rec['mfu']:.1f} %" if rec["mfu"] is not None else ""
    mem = f", peak memory {rec['peak_memory_gib']:.1f} GiB (estimate {rec['estimated_peak_memory_gib']:.1f})" if peak_mem else ""
    say(f"[{name}] {ips:.0f} images/s, {achieved:.2f} TFLOP/s{mfu}{mem}; loss {final:.4f}; "
        f"{full_steps} steps would take {fmt_seconds(rec['projected_full_run_s'])}")
    if not math.isfinite(final):
        raise SystemExit(f"[{name}] the loss is not finite ({final})")
    del model, fwd_model, opt, pool, ema
    if cuda:
        torch.cuda.empty_cache()
    return rec


def autoencoder_fit(name: str, cfg: DiffusionConfig, out: Path, say=print) -> dict:
    """The latent preset's autoencoder trained on its spec (128 px, factor 8; on the GPU when there
    is one) and checked: the evaluator on reconstructions of fresh renders, PSNR. Its folder is the
    cache the preset's runs reuse (under ``OUT/data/autoencoders``)."""
    from mosaic.lab.autoencoder import cache_dir, checked, load_space, train_autoencoder
    from mosaic.lab.run import dataset_spec

    spec = dataset_spec(cfg)
    sec = cfg.model.latent.autoencoder
    if torch.cuda.is_available() and sec.device != "cpu":
        sec = sec.model_copy(update={"device": "cuda"})
    folder = cache_dir(cfg.model.latent.root, spec, sec)
    say(f"[{name}] autoencoder: {sec.steps} steps x {sec.batch_size} images of {spec.image.size} px, factor {sec.factor}")
    t0 = time.perf_counter()
    rec = train_autoencoder(sec, spec, folder, say=lambda m: say(f"[{name}] {m}"), progress=False)
    res = checked(folder, sec, spec, load_space(folder), say=lambda m: say(f"[{name}] {m}"))
    out_rec = {"preset": name, "folder": str(folder), "params": rec["params"], "latent_shape": rec["latent_shape"],
               "steps": rec["steps"], "batch": sec.batch_size, "train_s": rec["train_s"], "seconds": time.perf_counter() - t0,
               "device": rec["device"], "final_loss": rec["final_loss"], "accuracy": res["accuracy"],
               "renders_accuracy": res["renders_accuracy"], "psnr_db": res["psnr_db"], "passed": res["passed"], "check_n": res["n"]}
    say(f"[{name}] autoencoder: {rec['params'] / 1e6:.1f} M parameters, trained in {rec['train_s']:.0f} s; reconstructions read at "
        + ", ".join(f"{c} {100 * v:.1f} %" for c, v in res["accuracy"].items()) + f"; PSNR {res['psnr_db']:.1f} dB; "
        + ("passed" if res["passed"] else "REFUSED"))
    return out_rec


def latent_run(out: Path, tiny: bool, say=print) -> dict:
    """``mosaic train diffusion experiments/train/quickstart_latent_cpu.yaml`` end to end (autoencoder,
    latents, training, decoding, scoring), a subprocess of the CLI."""
    run_dir = out / "runs" / "latent"
    sets = [f"dataset.root={out / 'data'}", f"model.latent.root={out / 'data' / 'autoencoders'}", "training.threads=null"]
    if tiny:
        sets += ["training.steps=4", "training.batch_size=4", "training.checkpoint_every=4", "training.log_every=2",
                 "training.val_every=0", "evaluation.val_samples=0", "evaluation.select=loss",
                 "dataset.overrides.splits={train: 8, val: 2, test_id: 2, test_ood: 2, per: combination}", "dataset.workers=1",
                 "sampling.steps=2", "sampling.n_per_combination=1", "evaluation.check_n=0"] + _TINY_AE
    else:
        sets += ["training.device=auto", "model.latent.autoencoder.device=auto", "training.steps=3000", "training.batch_size=128",
                 "dataset.workers=8"]
    return _cli_run("latent", "experiments/train/quickstart_latent_cpu.yaml", run_dir, sets, say)


def _cli_run(tag: str, config: str, run_dir: Path, sets: list[str], say=print) -> dict:
    cmd = [sys.executable, "-m", "mosaic.cli", "train", "diffusion", str(ROOT / config), "--out", str(run_dir)] + \
        [a for s in sets for a in ("--set", s)]
    say(f"[{tag}] " + " ".join(cmd[1:]))
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - t0
    rec = {"command": " ".join(cmd[1:]), "seconds": seconds, "returncode": r.returncode}
    if r.returncode != 0:
        rec.update(status="failed", output=(r.stdout + r.stderr)[-4000:])
        say(f"[{tag}] FAILED (exit {r.returncode}):\n{rec['output']}")
        return rec
    m = json.loads((run_dir / "metrics.json").read_text())
    tr = m.get("train", {})
    rec.update(status="done", run=str(run_dir), device=tr.get("device"), precision=tr.get("mixed_precision"),
               train_images_per_s=tr.get("images_per_s"), train_time_s=tr.get("train_time_s"),
               images_sampled=m.get("samples", {}).get("images"), sampling_s=m.get("samples", {}).get("seconds"),
               generate_s=m.get("generate_s"), table=m.get("table"), time_s=m.get("time_s"))
    say(f"[{tag}] done in {seconds:.0f} s: {rec['images_sampled']} images sampled and scored; table {json.dumps(rec['table'])}")
    return rec


def composition(out: Path, tiny: bool, say=print) -> dict:
    """``mosaic train diffusion experiments/train/composition_cpu.yaml`` end to end (a subprocess of the CLI)."""
    run_dir = out / "runs" / "composition"
    sets = [f"dataset.root={out / 'data'}", "training.threads=null"]
    if tiny:
        sets += ["training.steps=4", "training.batch_size=4", "training.checkpoint_every=4", "training.log_every=2",
                 "dataset.overrides.splits={train: 64, val: 4, test_id: 8, test_ood: 8, per: total}", "dataset.workers=1",
                 "sampling.steps=2", "sampling.n_per_combination=1", "evaluation.check_n=0"]
    else:  # on the GPU: a few minutes of training at the CPU preset's size, sampled and scored as usual
        sets += ["training.device=auto", "training.steps=1500", "training.batch_size=128", "training.checkpoint_every=500",
                 "dataset.workers=8"]
    return _cli_run("composition", "experiments/train/composition_cpu.yaml", run_dir, sets, say)


def markdown(summary: dict) -> str:
    lines = [f"# gpu_check ({summary['mode']})", "",
             f"{summary['device']} · torch {summary['torch']} · {summary['when']} UTC", "",
             "| preset | params | batch | images/s | step | achieved TFLOP/s | MFU | peak memory (estimate) | loss | full run |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in summary["presets"]:
        mfu = f"{100 * p['mfu']:.1f} %" if p["mfu"] is not None else "-"
        mem = (f"{p['peak_memory_gib']:.1f} GiB ({p['estimated_peak_memory_gib']:.1f})" if p["peak_memory_gib"] is not None
               else f"- ({p['estimated_peak_memory_gib']:.2f} GiB)")
        batch = f"{p['batch']}" + (f" (preset {p['preset_batch']}: out of memory)" if p["batch"] != p["preset_batch"] else "")
        lines.append(f"| {p['preset']} | {p['params'] / 1e6:.1f} M | {batch} | {p['images_per_s']:.0f} | {p['step_ms']:.1f} ms | "
                     f"{p['achieved_tflops']:.2f} | {mfu} | {mem} | {p['final_loss']:.4f} | "
                     f"{fmt_seconds(p['projected_full_run_s'])} ({p['full_run_steps']} steps) |")
    lines += ["", f"Settings: {json.dumps(summary['settings'])}. MFU = achieved / peak dense bf16 TFLOP/s of the device "
              f"({summary['peak_tflops']}); FLOPs per image from `mosaic.lab.flops` (FlopCounterMode). Goal for the DiT: "
              f"MFU >= {100 * DIT_MFU_GOAL:.0f} %.", ""]
    aes = summary.get("autoencoders") or []
    if aes:
        lines += ["## Autoencoders (latent presets)", "",
                  "| preset | params | latents | steps x batch | train | device | reconstructions read (renders) | PSNR | verdict |",
                  "|---|---:|---|---:|---:|---|---|---:|---|"]
        for a in aes:
            acc = ", ".join(f"{c} {100 * v:.1f} % ({100 * a['renders_accuracy'][c]:.1f})" for c, v in a["accuracy"].items())
            lines.append(f"| {a['preset']} | {a['params'] / 1e6:.1f} M | {'x'.join(map(str, a['latent_shape']))} | {a['steps']} x {a['batch']} | "
                         f"{fmt_seconds(a['train_s'])} | {a['device']} | {acc} | {a['psnr_db']:.1f} dB | {'passed' if a['passed'] else 'refused'} |")
        lines.append("")
    for key, title in (("composition", "End to end (composition_cpu.yaml)"), ("latent", "End to end, latent (quickstart_latent_cpu.yaml)")):
        lines += _e2e_lines(summary.get(key), title)
    return "\n".join(lines) + "\n"


def _e2e_lines(c: dict | None, title: str) -> list[str]:
    lines: list[str] = []
    if c:
        lines += [f"## {title}", "", f"`{c['command']}`", "",
                  f"status **{c['status']}** in {c['seconds']:.0f} s"]
        if c["status"] == "done":
            lines[-1] += (f"; device {c['device']}, precision {c['precision']}, {c['train_images_per_s']:.0f} training images/s, "
                          f"{c['images_sampled']} images sampled in {c['sampling_s']:.1f} s.")
            if c.get("table"):
                cols = list(next(iter(c["table"].values())))
                lines += ["", "| group | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
            for g, row in (c.get("table") or {}).items():
                lines.append(f"| {g} | " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()) + " |")
        lines.append("")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="small models on the CPU, a few steps (the test-suite mode)")
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "gpu_check")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per preset (default 150; --tiny 4)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 15: compilation; --tiny 1)")
    ap.add_argument("--compile", dest="compile_", action=argparse.BooleanOptionalAction, default=None,
                    help="torch.compile the model (default: on a GPU)")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated presets to measure")
    ap.add_argument("--peak-tflops", type=float, default=None, help="peak dense bf16 TFLOP/s of the device (default: from the table)")
    ap.add_argument("--no-e2e", action="store_true", help="skip the end-to-end runs (composition, latent)")
    ap.add_argument("--no-autoencoder", action="store_true", help="skip the latent presets' autoencoder fit")
    a = ap.parse_args(argv)
    cuda = torch.cuda.is_available() and not a.tiny
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda and not a.tiny:
        print("no CUDA GPU here: run with --tiny for the CPU check (the GPU figures need a GPU)", file=sys.stderr)
        return 2
    steps = a.steps or (4 if a.tiny else 150)
    warmup = a.warmup if a.warmup is not None else (1 if a.tiny else 15)
    compile_ = a.compile_ if a.compile_ is not None else cuda
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        name = torch.cuda.get_device_name(0)
    else:
        name = f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    table_name, peak = peak_tflops_of(name) if cuda else (None, None)
    peak = a.peak_tflops or peak
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    summary = {"mode": "tiny (CPU)" if a.tiny else "gpu", "device": name, "accelerator": table_name, "peak_tflops": peak,
               "torch": torch.__version__, "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
               "settings": {"steps": steps, "warmup": warmup, "compile": compile_, "tf32": cuda, "fused_adamw": cuda,
                            "data_on_device": True, "load_average": os.getloadavg()[0]},
               "presets": []}
    for p in [p.strip() for p in a.presets.split(",") if p.strip()]:
        if p not in PRESETS:
            print(f"--presets: unknown preset {p!r}; known: {', '.join(PRESETS)}", file=sys.stderr)
            return 2
        cfg = preset_config(p, a.tiny, out / "data")
        if p.endswith("_latent") and not a.no_autoencoder and p.replace("_dit_", "_unet_") == p:  # one fit per spec
            summary.setdefault("autoencoders", []).append(autoencoder_fit(p, cfg, out))
            (out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")
        summary["presets"].append(throughput(p, cfg, device=device, steps=steps, warmup=warmup, compile_=compile_, peak_tflops=peak,
                                             accelerator=table_name))
        (out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")  # keep what is measured if a later part fails
    if not a.no_e2e:
        summary["composition"] = composition(out, a.tiny)
        summary["latent"] = latent_run(out, a.tiny)
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "gpu_check.md").write_text(markdown(summary))
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    failed = any(summary.get(k, {}).get("status") == "failed" for k in ("composition", "latent"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
