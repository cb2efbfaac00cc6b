"""Images/s a StreamingDataset delivers against what a lab training step consumes, same run.

    python benchmarks/bench_stream.py [--n 1024] [--batch 32] [--px 32 64] [--steps 6] [--threads 1]

For each image size it measures, in one process tree:

- ``stream, W workers``: batches of ``--batch`` from ``DataLoader(StreamingDataset(spec, "train"),
  num_workers=W)`` (sampling, rendering and collation on the fly), W = 0, 1, 2;
- ``train``: the diffusion lab's real training loop (the tiny UNet of ``bench_train.py``,
  forward, backward, AdamW, EMA) on a generated dataset of the same spec, ``--threads`` threads;

and prints images/s with the ratio ``stream / train``: above 1 the stream keeps up with training
(with W workers beside the trainer's threads). On a shared machine, compare the ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_train import BACKBONES, SPEC, cfg_for, train_rate  # noqa: E402

from mosaic.dataset import generate  # noqa: E402
from mosaic.spec import parse_spec  # noqa: E402
from mosaic.stream import StreamingDataset  # noqa: E402


def stream_rate(spec, batch: int, n: int, workers: int) -> float:
    ds = StreamingDataset(spec, "train", stop=n)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers, persistent_workers=False)
    it = iter(dl)
    next(it)  # worker start-up and the first batch are left out
    t0 = time.perf_counter()
    got = 0
    for b in it:
        got += len(b["index"])
    return got / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1024, help="images streamed per measurement")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--px", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--steps", type=int, default=6, help="timed training steps")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"batch {a.batch}, {a.n} streamed images per measurement, training on {a.threads} thread(s) (shared machine: compare ratios)")
    print(f"{'px':>3} {'what':<28} {'images/s':>10} {'vs train':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for px in a.px:
            spec = parse_spec({**SPEC, "image": {"size": px}, "splits": {"train": max(a.n + a.batch, 256), "val": 8, "test": 8}})
            root = tmp / f"data{px}"
            generate(spec, root)
            train, _ = train_rate(cfg_for(BACKBONES["unet"], root, tmp / f"run{px}", a.steps + 1, a.batch, a.threads), root)
            print(f"{px:>3} {'train (tiny UNet, lab loop)':<28} {train:>10.1f} {1.0:>8.2f}x")
            for w in (0, 1, 2):
                r = stream_rate(spec, a.batch, a.n, w)
                print(f"{px:>3} {f'stream, {w} worker(s)':<28} {r:>10.1f} {r / train:>8.1f}x")


if __name__ == "__main__":
    main()
