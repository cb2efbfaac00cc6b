"""Throughput of `mosaic generate` against rendering alone, measured in the same run.

    python benchmarks/bench_generate.py [--n 2000] [--px 64 128] [--workers 1 2] [--spec experiments/specs/count.yaml]

Prints images/s for: sampling + rendering alone (the baseline, one process, no PNG), the per-image
parts of writing (building the record, PNG encoding, JSON) and the full generation (sampling,
rendering, PNG encoding, records, files or Parquet shards, leak check, card) in both storage forms
with each ``--workers``, at each ``--px``, every figure as a ratio to the baseline of its resolution.
The target for this 2-core machine is 6,000 images/s at 64 px on 100k images with 2 workers
(``--n 100000 --px 64 --workers 2``). For reference (MOSAIC, Blender Cycles on this machine): 30 s
per 512 px image, 1.75 s per 128 px image at 64 samples.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosaic.dataset import generate  # noqa: E402
from mosaic.png import encode_png  # noqa: E402
from mosaic.records import sample_record  # noqa: E402
from mosaic.sampling import sample_scene  # noqa: E402
from mosaic.spec import apply_overrides, parse_spec, read_yaml  # noqa: E402
from renderers import get_renderer  # noqa: E402


def rate(n: int, fn) -> float:
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default=str(ROOT / "experiments/specs/count.yaml"))
    ap.add_argument("--n", type=int, default=2000, help="images per generation measurement")
    ap.add_argument("--px", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--formats", nargs="+", default=["imagefolder", "parquet"])
    args = ap.parse_args()
    raw = read_yaml(args.spec)
    print(f"spec {args.spec}, {args.n} images per generation measurement (shared machine: compare ratios)")
    print(f"{'px':>5} {'what':<40} {'images/s':>10} {'vs baseline':>12}")
    for px in args.px:
        spec = parse_spec(apply_overrides(raw, [f"image.size={px}", f"splits.train={args.n}", "splits.val=0", "splits.test=0"]))
        rend = get_renderer("pillow", supersample=spec.image.supersample)
        m = min(args.n, 1000)
        scenes = [sample_scene(spec, "train", i)[0] for i in range(m)]
        base = rate(m, lambda: [rend.render_one(sample_scene(spec, "train", i)[0]) for i in range(m)])
        images = [rend.render_one(s)[0] for s in scenes]
        recs = [sample_record(spec, "train", i)[0] for i in range(m)]
        parts = {
            "sample_scene": rate(m, lambda: [sample_scene(spec, "train", i) for i in range(m)]),
            "render (drawing + reduce)": rate(m, lambda: [rend.render_one(s) for s in scenes]),
            "record (labels, caption, graph)": rate(m, lambda: [sample_record(spec, "train", i) for i in range(m)]),
            "PNG encoding": rate(m, lambda: [encode_png(a) for a in images]),
            "JSON of the record": rate(m, lambda: [json.dumps(r, sort_keys=True) for r in recs]),
        }
        print(f"{px:>5} {'sample + render (baseline)':<40} {base:>10.0f} {1.0:>11.2f}x")
        for k, v in parts.items():
            print(f"{px:>5} {'  part: ' + k:<40} {v:>10.0f} {v / base:>11.2f}x")
        for fmt in args.formats:
            for workers in args.workers:
                out = Path(tempfile.mkdtemp(prefix="mosaic-bench-", dir=ROOT / "data" if (ROOT / "data").is_dir() else None))
                try:
                    r = rate(args.n, lambda: generate(spec, out / "ds", workers=workers, format=fmt))
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                print(f"{px:>5} {f'mosaic generate {fmt}, {workers} worker(s)':<40} {r:>10.0f} {r / base:>11.2f}x")
    print("MOSAIC/Blender reference: 128 px 0.57 images/s (1.75 s each), 512 px 0.033 images/s (30 s each)")


if __name__ == "__main__":
    main()
