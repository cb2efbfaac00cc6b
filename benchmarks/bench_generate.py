"""Throughput of `mosaic generate` against rendering alone, measured in the same run.

    python benchmarks/bench_generate.py [--n 2000] [--px 64 128] [--workers 1 2] [--spec experiments/specs/count.yaml]
                                        [--compare DIR ...]

Prints images/s for: sampling + rendering alone (the baseline, one process, no PNG, image and
instance mask drawn as the issue's baseline was; the image alone, what generation without
``--masks`` draws, on the next line), the per-image parts of writing (building the record, PNG
encoding, JSON, creating the file) and the full generation (sampling, rendering, PNG encoding,
records, files or Parquet shards, leak check, checksums, card) in both storage forms with each
``--workers``, at each ``--px``, every figure as a ratio to the baseline of its resolution.
``--compare DIR``: also time ``generate`` of another checkout (e.g. ``git archive OLD mosaic renderers
| tar -x -C DIR``), in a subprocess in the same run, so before/after ratios share one baseline.
The target for this 2-core machine is 6,000 images/s at 64 px on 100k images with 2 workers
(``--n 100000 --px 64 --workers 2``). For reference (MOSAIC, Blender Cycles on this machine): 30 s
per 512 px image, 1.75 s per 128 px image at 64 samples.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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


_OTHER = """
import sys, time, shutil, tempfile
sys.path.insert(0, sys.argv[1])
from mosaic.dataset import generate
from mosaic.spec import apply_overrides, parse_spec, read_yaml
spec = parse_spec(apply_overrides(read_yaml(sys.argv[2]), sys.argv[6:]))
out = tempfile.mkdtemp(prefix="mosaic-bench-", dir=sys.argv[5])
try:
    t = time.perf_counter()
    generate(spec, out + "/ds", workers=int(sys.argv[3]), format=sys.argv[4])
    print(time.perf_counter() - t)
finally:
    shutil.rmtree(out, ignore_errors=True)
"""


def rate_of_checkout(path: str, spec: str, overrides: list[str], n: int, workers: int, fmt: str, tmp: str) -> float | None:
    """images/s of ``generate`` from the checkout at ``path`` (a subprocess; None when that checkout
    cannot generate this form, e.g. before Parquet existed)."""
    r = subprocess.run([sys.executable, "-c", _OTHER, path, spec, str(workers), fmt, tmp, *overrides],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    if r.returncode != 0:
        print(f"      ({path}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'failed'})")
        return None
    return n / float(r.stdout.strip().splitlines()[-1])


def file_creation(images: list, root: Path) -> float:
    """images/s of creating one PNG file per image (open, write, close), as the imagefolder writer does."""
    from mosaic.dataset import _write_file

    d = Path(tempfile.mkdtemp(prefix="mosaic-bench-files-", dir=root))
    try:
        data = [encode_png(a) for a in images]
        return rate(len(data), lambda: [_write_file(str(d / f"{i:06d}.png"), b) for i, b in enumerate(data)])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", default=str(ROOT / "experiments/specs/count.yaml"))
    ap.add_argument("--n", type=int, default=2000, help="images per generation measurement")
    ap.add_argument("--px", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--formats", nargs="+", default=["imagefolder", "parquet"])
    ap.add_argument("--compare", nargs="*", default=[], help="other checkouts whose generate is timed in the same run")
    args = ap.parse_args()
    tmp_root = ROOT / "data" if (ROOT / "data").is_dir() else Path(tempfile.gettempdir())
    raw = read_yaml(args.spec)
    print(f"spec {args.spec}, {args.n} images per generation measurement (shared machine: compare ratios)")
    print(f"{'px':>5} {'what':<40} {'images/s':>10} {'vs baseline':>12}")
    for px in args.px:
        overrides = [f"image.size={px}", f"splits.train={args.n}", "splits.val=0", "splits.test=0"]
        spec = parse_spec(apply_overrides(raw, overrides))
        rend = get_renderer("pillow", supersample=spec.image.supersample)
        m = min(args.n, 1000)
        scenes = [sample_scene(spec, "train", i)[0] for i in range(m)]
        base = rate(m, lambda: [rend.render_one(sample_scene(spec, "train", i)[0]) for i in range(m)])
        base_image = rate(m, lambda: [rend.render_image(sample_scene(spec, "train", i)[0]) for i in range(m)])
        images = [rend.render_one(s)[0] for s in scenes]
        recs = [sample_record(spec, "train", i)[0] for i in range(m)]
        parts = {
            "sample_scene": rate(m, lambda: [sample_scene(spec, "train", i) for i in range(m)]),
            "render (drawing + reduce)": rate(m, lambda: [rend.render_one(s) for s in scenes]),
            "render, image only (no mask)": rate(m, lambda: [rend.render_image(s) for s in scenes]),
            "record (labels, caption, graph)": rate(m, lambda: [sample_record(spec, "train", i) for i in range(m)]),
            "PNG encoding": rate(m, lambda: [encode_png(a) for a in images]),
            "JSON of the record": rate(m, lambda: [json.dumps(r, sort_keys=True) for r in recs]),
            "file creation (open, write, close)": file_creation(images, tmp_root),
        }
        print(f"{px:>5} {'sample + render (baseline)':<40} {base:>10.0f} {1.0:>11.2f}x")
        print(f"{px:>5} {'sample + render, image only':<40} {base_image:>10.0f} {base_image / base:>11.2f}x")
        for k, v in parts.items():
            print(f"{px:>5} {'  part: ' + k:<40} {v:>10.0f} {v / base:>11.2f}x")
        for fmt in args.formats:
            for workers in args.workers:
                out = Path(tempfile.mkdtemp(prefix="mosaic-bench-", dir=tmp_root))
                try:
                    r = rate(args.n, lambda: generate(spec, out / "ds", workers=workers, format=fmt))
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                print(f"{px:>5} {f'mosaic generate {fmt}, {workers} worker(s)':<40} {r:>10.0f} {r / base:>11.2f}x")
                for other in args.compare:
                    o = rate_of_checkout(other, args.spec, overrides, args.n, workers, fmt, str(tmp_root))
                    if o is not None:
                        label = f"  {Path(other).name}: {fmt}, {workers} w"
                        print(f"{px:>5} {label:<40} {o:>10.0f} {o / base:>11.2f}x   (this checkout {r / o:.2f}x of it)")
    print("MOSAIC/Blender reference: 128 px 0.57 images/s (1.75 s each), 512 px 0.033 images/s (30 s each)")


if __name__ == "__main__":
    main()
