"""Training throughput of the diffusion lab on CPU, per backbone and image size.

For each backbone (the quickstart's tiny UNet and a tiny DiT) at 32 and 64 px it measures, in the
same process and on the same data:

- ``loader``: the lab's data path alone (batch plan -> index the in-memory uint8 split -> float);
- ``forward``: the training forward pass alone (noise, timesteps, model, loss; no gradients);
- ``train``: the real training loop (:func:`mosaic.lab.loop.train`: forward, backward, gradient
  clipping, AdamW, EMA, logging), from its own images/s over the timed steps;

and prints images/s with ratios ``train / forward`` and ``loader / train`` (how many times faster
the loader is than training: it must never be the bottleneck). Each number is the median of
``--repeats`` runs. The machine may be shared: repeat, and compare ratios rather than absolutes.

    python benchmarks/bench_train.py [--steps 6] [--batch 32] [--threads 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
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
from mosaic.lab.loop import RunFolder, make_accelerator, train  # noqa: E402
from mosaic.spec import parse_spec  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"CPU, {a.threads} thread(s), batch {a.batch}, {a.steps} timed steps, median of {a.repeats} (shared machine: compare ratios)")
    print(f"{'backbone':8} {'px':>3} {'params':>8} {'loader img/s':>13} {'forward img/s':>14} {'train img/s':>12} "
          f"{'train/forward':>14} {'loader/train':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
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
                      f"{lo_m / tr_m:>13.0f}x")


if __name__ == "__main__":
    main()
