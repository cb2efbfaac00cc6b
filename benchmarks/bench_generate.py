"""Throughput of `mosaic generate` against rendering alone, measured in the same run.

    python benchmarks/bench_generate.py [--n 2000] [--spec experiments/specs/count.yaml]

Prints images/s for: sampling + rendering alone (the baseline, one process, no PNG), and the full
generation (sampling, rendering, PNG encoding, metadata, files) with 1 and 2 workers, at 64 and
128 px, each as a ratio to the baseline of its resolution. For reference (MOSAIC, Blender Cycles on
this 2-core machine): 30 s per 512 px image, 1.75 s per 128 px image at 64 samples.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from mosaic.dataset import generate
from mosaic.sampling import sample_scene
from mosaic.spec import apply_overrides, parse_spec, read_yaml
from renderers import get_renderer

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default=str(ROOT / "experiments/specs/count.yaml"))
    ap.add_argument("--n", type=int, default=2000, help="images per measurement")
    args = ap.parse_args()
    raw = read_yaml(args.spec)
    print(f"spec {args.spec}, {args.n} images per measurement")
    print(f"{'px':>5} {'what':<34} {'images/s':>10} {'vs render alone':>16}")
    for px in (64, 128):
        spec = parse_spec(apply_overrides(raw, [f"image.size={px}", f"splits.train={args.n}", "splits.val=0", "splits.test=0"]))
        rend = get_renderer("pillow", supersample=spec.image.supersample)
        scenes = [sample_scene(spec, "train", i)[0] for i in range(200)]
        t = time.perf_counter()
        for s in scenes:
            rend.render_one(s)
        render_only = len(scenes) / (time.perf_counter() - t)
        t = time.perf_counter()
        for i in range(args.n):
            rend.render_one(sample_scene(spec, "train", i)[0])
        base = args.n / (time.perf_counter() - t)
        print(f"{px:>5} {'render only (drawing + reduce)':<34} {render_only:>10.0f} {render_only / base:>15.2f}x")
        print(f"{px:>5} {'sample + render (baseline)':<34} {base:>10.0f} {1.0:>15.2f}x")
        for workers in (1, 2):
            out = Path(tempfile.mkdtemp(prefix="mosaic-bench-"))
            try:
                t = time.perf_counter()
                generate(spec, out / "ds", workers=workers)
                rate = args.n / (time.perf_counter() - t)
            finally:
                shutil.rmtree(out, ignore_errors=True)
            print(f"{px:>5} {f'mosaic generate, {workers} worker(s), PNG':<34} {rate:>10.0f} {rate / base:>15.2f}x")
    print("MOSAIC/Blender reference: 128 px 0.57 images/s (1.75 s each), 512 px 0.033 images/s (30 s each)")


if __name__ == "__main__":
    main()
