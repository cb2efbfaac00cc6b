"""Throughput of `mosaic generate` against rendering alone, measured in the same run.

    python benchmarks/bench_generate.py [--n 2000] [--px 64 128] [--workers 1 2] [--spec experiments/specs/count.yaml]
                                        [--compare DIR ...]

Prints images/s for: sampling + rendering alone (the baseline, one process, no PNG, image and
instance mask drawn as the issue's baseline was; the image alone, what generation without
``--masks`` draws, on the next line), the per-image parts of writing (building the record and its JSON line,
timed on already sampled scenes in rounds alternating with sampling; PNG encoding, JSON, creating the file) and the full generation (sampling, rendering, PNG encoding,
records, files or Parquet shards, leak check, checksums, card) in both storage forms with each
``--workers``, at each ``--px``, every figure as a ratio to the baseline of its resolution.
Every figure is also given as CPU milliseconds per image (``time.process_time`` for the parts; for
``mosaic generate``: this process's CPU and its worker processes' CPU from ``getrusage``, so a loaded
machine shows in wall time but not in CPU cost), and each generation is split into where its time
goes: the workers (sample, render, PNG, record, files), the parent's CPU outside finalize (task
submission, results), finalize (merging part files or closing shards, leak check, checksums, card)
and the wall time no process spent on CPU (waiting: the file system, a loaded machine). The load
average is printed with every section. ``--compare DIR``: also time ``generate`` of another checkout (e.g. ``git archive OLD mosaic renderers
| tar -x -C DIR``), in a subprocess in the same run, so before/after ratios share one baseline.
The target for this 2-core machine is 6,000 images/s at 64 px on 100k images with 2 workers
(``--n 100000 --px 64 --workers 2``). For reference (MOSAIC, Blender Cycles on this machine): 30 s
per 512 px image, 1.75 s per 128 px image at 64 samples.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mosaic.dataset import generate  # noqa: E402
from mosaic.png import encode_png  # noqa: E402
from mosaic.recordline import record_line  # noqa: E402
from mosaic.records import sample_line, sample_record  # noqa: E402
from mosaic.sampling import sample_scene  # noqa: E402
from mosaic.spec import apply_overrides, parse_spec, read_yaml  # noqa: E402
from renderers import get_renderer  # noqa: E402


def rate(n: int, fn) -> float:
    """images/s of ``fn`` by CPU time of this process (``n`` images): independent of other load."""
    t = time.process_time()
    fn()
    return n / max(time.process_time() - t, 1e-9)


def alternating_rates(n: int, fns: list, rounds: int = 5) -> list[float]:
    """images/s of each of ``fns`` (``n`` images each) by CPU time, the median of ``rounds`` rounds that
    run the functions in turn (A B C A B C ...), so that a drift of the host's speed reaches each alike."""
    for fn in fns:  # warm-up: caches filled once per spec
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            t = time.process_time()
            fn()
            times[k].append(time.process_time() - t)
    return [n / max(statistics.median(ts), 1e-9) for ts in times]


def load() -> str:
    return "load %.1f %.1f %.1f" % os.getloadavg()


@contextlib.contextmanager
def _timed(module, name: str, into: dict):
    """Time calls of ``module.name`` (wall and this process's CPU) into ``into[name]``."""
    orig = getattr(module, name)

    def wrapped(*a, **k):
        w, c = time.perf_counter(), time.process_time()
        try:
            return orig(*a, **k)
        finally:
            into[name] = (time.perf_counter() - w, time.process_time() - c)

    setattr(module, name, wrapped)
    try:
        yield
    finally:
        setattr(module, name, orig)


def generation_costs(spec, out: Path, workers: int, fmt: str, n: int) -> dict:
    """One ``generate`` with where its time goes: ``wall``, ``parent_cpu`` (this process),
    ``workers_cpu`` (its reaped worker processes), ``finalize`` (wall, CPU of this process), per image
    in ms, and ``rate`` (images/s by wall time)."""
    import mosaic.dataset as ds
    import mosaic.parquet as pq_

    phases: dict = {}
    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    with _timed(ds, "finalize", phases), _timed(pq_, "finalize_parquet", phases):
        generate(spec, out, workers=workers, format=fmt)
    wall = time.perf_counter() - w0
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    parent = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    kids = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
    fin = phases.get("finalize") or phases.get("finalize_parquet") or (0.0, 0.0)
    ms = 1e3 / n
    return {"rate": n / wall, "wall": wall * ms, "parent_cpu": parent * ms, "workers_cpu": kids * ms,
            "finalize_wall": fin[0] * ms, "finalize_cpu": fin[1] * ms}


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
    print(f"spec {args.spec}, {args.n} images per generation measurement; {load()} on {os.cpu_count()} cores")
    print("parts: images/s of one core by CPU time; generate: images/s by wall time, and CPU ms per image")
    print(f"{'px':>5} {'what':<40} {'images/s':>10} {'vs baseline':>12} {'CPU ms/img':>11}")
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
        # sampling and the record measured in alternating rounds (medians): on a host whose speed drifts within
        # a minute, two back-to-back timings differ by more than the record costs, so their difference is noise
        sampled = [sample_scene(spec, "train", i) for i in range(m)]
        t_sample, t_line, t_rec = alternating_rates(m, [
            lambda: [sample_scene(spec, "train", i) for i in range(m)],
            lambda: [sample_line(spec, "train", i) for i in range(m)],
            lambda: [record_line(spec, sc, v, "train", i) or sample_line(spec, "train", i) for i, (sc, v) in enumerate(sampled)],
        ])
        parts = {
            "sample_scene": t_sample,
            "render (drawing + reduce)": rate(m, lambda: [rend.render_one(s) for s in scenes]),
            "render, image only (no mask)": rate(m, lambda: [rend.render_image(s) for s in scenes]),
            "sample + record (dict, sample_record)": rate(m, lambda: [sample_record(spec, "train", i) for i in range(m)]),
            "sample + record + JSON line (sample_line)": t_line,
            "record + JSON line alone (record_line)": t_rec,
            "PNG encoding": rate(m, lambda: [encode_png(a) for a in images]),
            "JSON of a record dict (json.dumps)": rate(m, lambda: [json.dumps(r, sort_keys=True) for r in recs]),
            "file creation (open, write, close)": file_creation(images, tmp_root),
        }
        print(f"{px:>5} {'sample + render (baseline)':<40} {base:>10.0f} {1.0:>11.2f}x {1e3 / base:>11.3f}")
        print(f"{px:>5} {'sample + render, image only':<40} {base_image:>10.0f} {base_image / base:>11.2f}x {1e3 / base_image:>11.3f}")
        for k, v in parts.items():
            print(f"{px:>5} {'  part: ' + k:<40} {v:>10.0f} {v / base:>11.2f}x {1e3 / v:>11.3f}")
        print(f"{px:>5} ({load()})")
        for fmt in args.formats:
            for workers in args.workers:
                out = Path(tempfile.mkdtemp(prefix="mosaic-bench-", dir=tmp_root))
                try:
                    c = generation_costs(spec, out / "ds", workers, fmt, args.n)
                finally:
                    shutil.rmtree(out, ignore_errors=True)
                r = c["rate"]
                cpu = c["parent_cpu"] + c["workers_cpu"]
                print(f"{px:>5} {f'mosaic generate {fmt}, {workers} worker(s)':<40} {r:>10.0f} {r / base:>11.2f}x {cpu:>11.3f}"
                      f"   ({load()})")
                print(f"{px:>5}     where it goes (ms/image): workers CPU {c['workers_cpu']:.3f}, parent CPU "
                      f"{c['parent_cpu'] - c['finalize_cpu']:.3f} + finalize CPU {c['finalize_cpu']:.3f} (finalize wall "
                      f"{c['finalize_wall']:.3f}), wall {c['wall']:.3f} = {c['wall'] * workers / max(cpu, 1e-9):.2f}x the CPU "
                      f"over {workers} core(s); by CPU, {workers} worker(s) allow {1e3 * workers / max(cpu, 1e-9):.0f} images/s "
                      f"= {1e3 * workers / max(cpu, 1e-9) / base:.2f}x the baseline")
                for other in args.compare:
                    o = rate_of_checkout(other, args.spec, overrides, args.n, workers, fmt, str(tmp_root))
                    if o is not None:
                        label = f"  {Path(other).name}: {fmt}, {workers} w"
                        print(f"{px:>5} {label:<40} {o:>10.0f} {o / base:>11.2f}x   (this checkout {r / o:.2f}x of it)")
    print("MOSAIC/Blender reference: 128 px 0.57 images/s (1.75 s each), 512 px 0.033 images/s (30 s each)")


if __name__ == "__main__":
    main()
