"""What the quick check before every read costs (issue 23): :func:`mosaic.verify.check_before_read`
on imagefolder datasets of N images, against loading the same split with
``MosaicDataset(..., verify=False)`` (the decode every reader does anyway), measured alternately in
one run, in CPU seconds (``time.process_time``) and wall seconds.

    nice -n 19 python benchmarks/bench_read_check.py --sizes 10000 20000 --px 16

The check reads no image data: one listing per folder, each image's 8-byte signature and 12-byte
trailer, each metadata line parsed once; so it grows linearly with N, and the 100k figure in
docs/integrity.md is the per-image cost measured here times 100,000.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def spec_of(n: int, px: int):
    from mosaic.spec import parse_spec

    return parse_spec({
        "name": "bench_read", "image": {"size": px},
        "concepts": {"color": {"values": ["red", "green", "blue", "yellow"]}, "shape": {"values": ["circle", "square"]}},
        "objects": [{"name": "o", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.6}],
        "splits": {"train": n, "val": 0, "test": 0},
    })


def timed(fn) -> tuple[float, float]:
    c, w = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c, time.perf_counter() - w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 20000])
    ap.add_argument("--px", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--root", type=Path, default=None)
    a = ap.parse_args()
    from mosaic.dataset import generate
    from mosaic.torch_data import MosaicDataset
    from mosaic.verify import check_before_read

    root = a.root or Path(tempfile.mkdtemp(prefix="bench-read-"))
    print(f"load average {__import__('os').getloadavg()}")
    for n in a.sizes:
        out = root / f"n{n}"
        c, w = timed(lambda: generate(spec_of(n, a.px), out, workers=1))
        print(f"N={n}: generated in {c:.1f} CPU s ({w:.1f} s wall)")
        checks, loads = [], []
        for _ in range(a.repeats):  # alternately: check, load, check, load
            checks.append(timed(lambda: check_before_read(out)))
            loads.append(timed(lambda: MosaicDataset(out, "train", verify=False)))
        cc, cw = min(x[0] for x in checks), min(x[1] for x in checks)
        lc, lw = min(x[0] for x in loads), min(x[1] for x in loads)
        print(f"N={n}: quick check {cc:.2f} CPU s ({cw:.2f} s wall), {1e6 * cc / n:.0f} CPU us/image -> "
              f"{cc / n * 100_000:.1f} CPU s per 100k images; decoding the split {lc:.2f} CPU s ({lw:.2f} s wall); "
              f"check / decode = {cc / lc:.2f}")


if __name__ == "__main__":
    main()
