"""Training throughput of the diffusion lab on CPU: the loop per backbone and image size, and the
precision / layout / compile variants of the findings' UNet against this CPU's matmul peaks.

Section ``loop``: for each backbone (the quickstart's tiny UNet and a tiny DiT) at 32 and 64 px it
measures, in the same process and on the same data:

- ``loader``: the lab's data path alone (batch plan -> index the in-memory uint8 split -> float);
- ``forward``: the training forward pass alone (noise, timesteps, model, loss; no gradients);
- ``train``: the real training loop (:func:`mosaic.lab.loop.train`: forward, backward, gradient
  clipping, AdamW, EMA, logging), from its own images/s over the timed steps;

and prints images/s with ratios ``train / forward`` and ``loader / train`` (how many times faster
the loader is than training: it must never be the bottleneck).

Section ``precision`` (issue 16 part 2: is bf16, ``torch.compile`` or ``channels_last`` faster on
this CPU?), in the same process:

1. the **matmul peaks**: GFLOP/s of ``torch.mm`` of two ``n x n`` matrices (``--peak-n``, 1024;
   512 with ``--quick``) in fp32 and in bf16, the median of repeats, on ``--threads`` threads;
2. one **train step** (the lab's own diffusion loss of :class:`~mosaic.lab.diffusion.DiffusionTask`:
   noise, timesteps, condition dropout, Min-SNR MSE; then backward, grad-norm clipping at 1.0 and
   AdamW; EMA and logging left out) of the findings' UNet (the ``model`` section of
   ``experiments/train/composition_cpu.yaml``: block_out_channels [16, 32, 64], cross-attention on
   the last level, factorized conditioning; 16 px, batch 32) for the variants ``fp32`` (eager, the
   baseline), ``bf16`` (``torch.autocast("cpu", bfloat16)`` around the forward and loss, as
   ``training.mixed_precision: bf16`` does through Accelerate), ``channels_last`` (model and images
   in NHWC), ``fused_adamw`` (fp32 with ``AdamW(fused=True)``) and, with ``--compile`` (minutes of
   compiling), ``compile`` and ``compile+bf16``
   (``torch.compile`` of the whole model, default mode); then fp32 and bf16 on shapes where bf16
   has more arithmetic per byte: a wider UNet ``[64, 128, 256]`` (batch 32; 8 with ``--quick``) and
   the findings' UNet at batch 128 (not with ``--quick``);
3. the **FLOPs** of one fp32 train step (forward + backward) of each shape and batch, counted by
   ``torch.utils.flop_counter.FlopCounterMode`` (matmul and convolution FLOPs, forward and
   backward; the CPU attention kernel is not counted, negligible at 4 x 4 tokens; the same count
   for every variant of a shape), and from them the achieved GFLOP/s of every variant as a
   percentage of both peaks.

Each variant's images/s is ``batch / median step time`` over up to ``--steps`` timed steps after
warm-up (fewer when a step is slow: a variant gets about ``--budget`` seconds). The ratio column
compares a variant with fp32 eager of the same shape and batch. The header names the CPU's
vector capability and whether oneDNN has a bf16 path on it: without AVX512-BF16 / AMX, bf16 matmuls
and convolutions fall back to slow reference kernels and bf16 cannot pay off.

Each ``loop`` number is the median of ``--repeats`` runs. The machine may be shared: repeat, and
compare ratios rather than absolutes. ``--quick`` (under about 2 minutes on a quiet machine) runs
32 px only, one repeat, fewer steps, the smaller peak matrices and the wide UNet at batch 8.

    python benchmarks/bench_train.py [--quick] [--sections loop precision] [--compile]
        [--steps 6] [--batch 32] [--threads 1] [--repeats 3] [--sizes 32 64] [--peak-n 1024] [--budget 30]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mosaic.dataset import generate  # noqa: E402
from mosaic.lab.config import validate_config  # noqa: E402
from mosaic.lab.data import BatchPlan, to_float  # noqa: E402
from mosaic.lab.diffusion import DiffusionConfig, DiffusionTask, count_params  # noqa: E402
from mosaic.lab.loop import make_accelerator, train  # noqa: E402
from mosaic.lab.run_folder import RunFolder  # noqa: E402
from mosaic.spec import parse_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SPEC = {
    "name": "bench",
    "image": {"size": 32},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square", "triangle"]}},
    "objects": [{"name": "obj", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.45}],
    "splits": {"train": 256, "val": 8, "test": 8},
}

BACKBONES = {
    "unet": {"backbone": "unet", "unet": {"block_out_channels": [16, 32, 64], "cross_attention": [False, False, True], "heads": 4}},
    "dit": {"backbone": "dit", "dit": {"patch_size": 4, "num_layers": 4, "heads": 4, "head_dim": 32}},
}

#: The findings' per-trial train config whose ``model`` section the precision section measures.
FINDINGS_CONFIG = ROOT / "experiments" / "train" / "composition_cpu.yaml"
FINDINGS_PX = 16  # the findings' sweeps set spec.image.size: 16 and training.batch_size: 32


def cfg_for(model: dict, root: Path, out: Path, steps: int, batch: int, threads: int) -> DiffusionConfig:
    return validate_config(DiffusionConfig, {
        "name": "bench", "out": str(out), "dataset": {"path": str(root)}, "model": model,
        "training": {"steps": steps, "batch_size": batch, "device": "cpu", "threads": threads, "log_every": 1,
                     "checkpoint_every": 10**6, "val_every": 0},
        "evaluation": {"enabled": False, "select": "loss"},
    })


def loader_rate(task: DiffusionTask, batch: int, n: int = 200) -> float:
    plan = BatchPlan(len(task.train_data["image"]), batch, 1, 0, 0)
    t0 = time.perf_counter()
    for m in range(n):
        idx = plan.indices(m)
        b = {k: v[idx] for k, v in task.train_data.items()}
        to_float(b["image"])
    return n * batch / (time.perf_counter() - t0)


@torch.no_grad()
def forward_rate(task: DiffusionTask, batch: int, steps: int) -> float:
    plan = BatchPlan(len(task.train_data["image"]), batch, 1, 0, 0)
    b = {k: v[plan.indices(0)] for k, v in task.train_data.items()}
    g = torch.Generator().manual_seed(0)
    task.loss(task.model, b, g)  # warm-up
    t0 = time.perf_counter()
    for _ in range(steps):
        task.loss(task.model, b, g)
    return steps * batch / (time.perf_counter() - t0)


def train_rate(cfg: DiffusionConfig, root: Path) -> tuple[float, int]:
    task = DiffusionTask(cfg, root)
    acc = make_accelerator(cfg.training, cfg.out)
    run = RunFolder(cfg.out)
    run.root.mkdir(parents=True, exist_ok=True)
    train(task, cfg.training, run, acc)
    rows = run.read_log()  # one row per step; the first (warm-up) step is left out
    steps = rows[-1]["step"] - rows[0]["step"]
    return cfg.training.batch_size * steps / (rows[-1]["time_s"] - rows[0]["time_s"]), count_params(task.model)


def loop_section(a, tmp: Path) -> None:
    print(f"== loop: CPU, {a.threads} thread(s), batch {a.batch}, {a.steps} timed steps, median of {a.repeats} "
          f"(shared machine: compare ratios)")
    print(f"{'backbone':8} {'px':>3} {'params':>8} {'loader img/s':>13} {'forward img/s':>14} {'train img/s':>12} "
          f"{'train/forward':>14} {'loader/train':>13}")
    for px in a.sizes:
        root = tmp / f"data{px}"
        generate(parse_spec({**SPEC, "image": {"size": px}}), root)
        for name, model in BACKBONES.items():
            lo, fw, tr = [], [], []
            for r in range(a.repeats):
                cfg = cfg_for(model, root, tmp / f"run-{name}-{px}-{r}", a.steps + 1, a.batch, a.threads)
                task = DiffusionTask(cfg, root)
                lo.append(loader_rate(task, a.batch))
                fw.append(forward_rate(task, a.batch, a.steps))
                rate, params = train_rate(cfg, root)
                tr.append(rate)
            lo_m, fw_m, tr_m = statistics.median(lo), statistics.median(fw), statistics.median(tr)
            print(f"{name:8} {px:>3} {params / 1e6:>7.2f}M {lo_m:>13.0f} {fw_m:>14.1f} {tr_m:>12.1f} {tr_m / fw_m:>14.2f} "
                  f"{lo_m / tr_m:>13.0f}x", flush=True)


# -- precision section --------------------------------------------------------------------------------

def matmul_peak(n: int, dtype: torch.dtype, repeats: int = 5, budget_s: float = 10.0) -> float:
    """GFLOP/s (``2 n^3`` per product) of ``torch.mm`` of two ``n x n`` ``dtype`` matrices: the
    median over up to ``repeats`` timed products after one warm-up (fewer when one takes long)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
    t0 = time.perf_counter()
    torch.mm(x, y)
    warm = time.perf_counter() - t0
    times = []
    for _ in range(max(1, min(repeats, int(budget_s / max(warm, 1e-9))))):
        t0 = time.perf_counter()
        torch.mm(x, y)
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def findings_model(block_out_channels: list[int] | None = None) -> dict:
    """The ``model`` section of the findings' train config, optionally with other channel widths."""
    import yaml

    model = yaml.safe_load(FINDINGS_CONFIG.read_text())["model"]
    if block_out_channels is not None:
        model["unet"] = {**model["unet"], "block_out_channels": list(block_out_channels)}
    return model


def make_step(task: DiffusionTask, batch: dict, variant: str):
    """A closure running one train step of a private copy of ``task.model`` in ``variant``
    (``fp32``, ``bf16``, ``channels_last``, ``compile``, ``compile+bf16``, ``channels_last+bf16``,
    ``fused_adamw``: fp32 with ``AdamW(fused=True)``)."""
    model = copy.deepcopy(task.model)
    b = dict(batch)
    if "channels_last" in variant:
        model = model.to(memory_format=torch.channels_last)
        b["image"] = b["image"].contiguous(memory_format=torch.channels_last)
    fwd = torch.compile(model) if "compile" in variant else model
    bf16 = "bf16" in variant
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True if "fused" in variant else None)
    g = torch.Generator().manual_seed(0)

    def step() -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = task.loss(fwd, b, g)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def step_rate(step, batch_size: int, steps: int, budget_s: float, warmups: int) -> tuple[float, int, float]:
    """(images/s from the median step time, timed steps, seconds of warm-up)."""
    t0 = time.perf_counter()
    for _ in range(warmups):
        step()
    warm = time.perf_counter() - t0
    times = []
    for _ in range(max(1, min(steps, int(budget_s / max(warm / warmups, 1e-9))))):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return batch_size / statistics.median(times), len(times), warm


def step_flops(task: DiffusionTask, batch: dict) -> int:
    """FLOPs of one fp32 train step (forward + backward), by ``FlopCounterMode``."""
    from torch.utils.flop_counter import FlopCounterMode

    step = make_step(task, batch, "fp32")
    with FlopCounterMode(display=False) as fc:
        step()
    return fc.get_total_flops()


def precision_section(a, tmp: Path) -> None:
    fp32_peak = matmul_peak(a.peak_n, torch.float32)
    bf16_peak = matmul_peak(a.peak_n, torch.bfloat16)
    try:
        onednn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        onednn_bf16 = None
    print(f"== precision: torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"oneDNN bf16 path: {onednn_bf16}, {a.threads} thread(s)")
    print(f"matmul peaks ({a.peak_n}x{a.peak_n} @ {a.peak_n}x{a.peak_n}, median): fp32 {fp32_peak:.3g} GFLOP/s, "
          f"bf16 {bf16_peak:.3g} GFLOP/s (bf16/fp32 = {bf16_peak / fp32_peak:.3g}x)", flush=True)

    root = tmp / f"data{FINDINGS_PX}"
    generate(parse_spec({**SPEC, "image": {"size": FINDINGS_PX},
                         "concepts": {"color": {"values": ["red", "green", "blue", "yellow"]},
                                      "shape": {"values": ["circle", "square", "triangle", "cross"]}}}), root)
    small = ["fp32", "bf16", "channels_last", "fused_adamw"] + (["channels_last+bf16"] if not a.quick else [])
    if a.compile:
        small += ["compile", "compile+bf16"]
    shapes = [("findings", None, a.batch, small), ("wide", [64, 128, 256], 8 if a.quick else a.batch, ["fp32", "bf16"])]
    if not a.quick:
        shapes.append(("findings", None, 4 * a.batch, ["fp32", "bf16"]))

    print(f"{'model':9} {'channels':>14} {'params':>7} {'batch':>5} {'variant':>18} {'img/s':>8} {'vs fp32':>8} "
          f"{'GFLOP/s':>8} {'% fp32 pk':>9} {'% bf16 pk':>9} {'steps':>5} {'warm s':>7}")
    for label, channels, bsz, variants in shapes:
        model = findings_model(channels)
        cfg = cfg_for(model, root, tmp / f"prec-{label}-{bsz}", 1, bsz, a.threads)
        torch.manual_seed(0)
        task = DiffusionTask(cfg, root)
        plan = BatchPlan(len(task.train_data["image"]), bsz, 1, 0, 0)
        batch = {k: v[plan.indices(0)] for k, v in task.train_data.items()}
        flops = step_flops(task, batch)
        base = None
        for v in variants:
            rate, n, warm = step_rate(make_step(task, batch, v), bsz, a.steps, a.budget, 2 if "compile" in v else 1)
            base = rate if v == "fp32" else base
            gflops = flops * rate / bsz / 1e9
            print(f"{label:9} {str(model['unet']['block_out_channels']):>14} {count_params(task.model) / 1e6:>6.2f}M {bsz:>5} "
                  f"{v:>18} {rate:>8.3g} {rate / base:>7.2f}x {gflops:>8.3g} {100 * gflops / fp32_peak:>8.3g}% "
                  f"{100 * gflops / bf16_peak:>8.3g}% {n:>5} {warm:>7.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 6; 3 with --quick)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=None, help="loop section repeats (default 3; 1 with --quick)")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="loop section image sizes (default 32 64; 32 with --quick)")
    ap.add_argument("--sections", nargs="+", choices=["loop", "precision"], default=["loop", "precision"])
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile (minutes of compiling per variant)")
    ap.add_argument("--peak-n", type=int, default=None, help="matmul size for the peaks (default 1024; 512 with --quick)")
    ap.add_argument("--budget", type=float, default=None, help="seconds of timed steps per precision variant (default 30; 8 with --quick)")
    ap.add_argument("--quick", action="store_true", help="a smaller run: under about 2 minutes on a quiet machine")
    a = ap.parse_args()
    q = a.quick
    a.steps = a.steps or (3 if q else 6)
    a.repeats = a.repeats or (1 if q else 3)
    a.sizes = a.sizes or ([32] if q else [32, 64])
    a.peak_n = a.peak_n or (512 if q else 1024)
    a.budget = a.budget or (8.0 if q else 30.0)
    for name in ("steps", "batch", "threads", "repeats", "peak_n"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.budget <= 0 or min(a.sizes) < 8:
        ap.error(f"--budget must be > 0 (got {a.budget}) and --sizes >= 8 (got {a.sizes})")
    torch.set_num_threads(a.threads)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "loop" in a.sections:
            loop_section(a, tmp)
        if "precision" in a.sections:
            precision_section(a, tmp)
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
