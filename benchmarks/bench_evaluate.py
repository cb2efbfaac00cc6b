"""Evaluation speed (images/s) of the scene parser and the learned evaluator, against rendering the
same images, measured in the same run.

    python benchmarks/bench_evaluate.py [--n 400] [--repeat 3] [--specs count position_complex ...]
                                        [--learned DIR] [--compare DIR] [--interleave DIR] [--parser-only]
                                        [--workers 2]

For each spec: the baseline is sampling + rendering the ``evaluator_check`` images (one process);
then the parser and the learned evaluator read the same images. Each figure is the median of
``--repeat`` runs, as images per CPU-second of this process (``time.process_time``: independent
of other load; the parser is single-threaded Python, so with ``--threads 2`` its wall rate is at
most this) and as a ratio to the baseline measured the same way in the same run; the load
average is printed beside each spec. Without ``--learned`` the learned evaluator is an untrained
network of the default configuration (same cost as a trained one); it is measured on the CPU and,
with ``--device cuda``, batched on the accelerator as validation scores with
``evaluation.val_evaluator`` (images/s by wall time there, synchronised).

``--workers N`` also reads the same images with ``SceneParser(spec, workers=N)`` (its pool started
by a warm-up read, as in a long evaluation) and prints its wall images/s and the ratio to one
process's wall rate measured beside it: on a loaded machine the ratio means little. It also
prints the workers' own CPU ms per image over the timed reads (from ``/proc``) and the images/s
that N free cores allow at that cost, which holds on a loaded machine.

``--interleave DIR`` measures the scene parser of another checkout's ``mosaic/evaluation`` (DIR as
for ``--compare``; the rest of ``mosaic`` is this checkout's) and this one in this process, on the
same images, alternating the two in chunks of 20 images (which goes first alternates too) for
``--repeat`` rounds: CPU ms per image of each and their ratio. Both see the same load at nearly
the same moments, so the ratio holds on a busy machine where separate runs drift.

``--compare DIR`` also measures the scene parser of another checkout (e.g.
``git archive OLD mosaic renderers | tar -x -C DIR``) on the same images, in a child process with
``PYTHONPATH=DIR``, alternating with this checkout's parser ``--repeat`` times; it prints both in
CPU ms per image and their ratio (median over the alternations). The child reports the CPU time of
its own ``read`` calls only, so start-up is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from mosaic.evaluation import load_evaluator
from mosaic.evaluation.learned import EvaluatorNet, LearnedConfig, LearnedEvaluator
from mosaic.evaluation.parser import SceneParser
from mosaic.sampling import sample_scene
from mosaic.spec import load_spec
from renderers import get_renderer

ROOT = Path(__file__).resolve().parents[1]


def _rate(fn, n: int, repeat: int, clock=time.process_time) -> float:
    """images per second of ``clock`` (CPU time of this process by default), median of ``repeat``."""
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return n / max(statistics.median(times), 1e-9)


def _workers_cpu(parser) -> float | None:
    """User + system CPU seconds spent so far by ``parser``'s pool workers (``/proc``; None
    elsewhere)."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in list(parser._pool._processes):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        return total / tick
    except (OSError, ValueError, AttributeError, IndexError):
        return None


def _parser_ms(name: str, n: int, images=None) -> float:
    """CPU ms per image of ``SceneParser.read`` (abstention on) on the first ``n`` ``evaluator_check``
    images of spec ``name`` (rendered here unless given), after a warm-up read of 3."""
    spec = load_spec(ROOT / "experiments" / "specs" / f"{name}.yaml")
    if images is None:
        rend = get_renderer("pillow", supersample=spec.image.supersample)
        images, _ = rend.render([sample_scene(spec, "evaluator_check", i)[0] for i in range(n)])
    parser = SceneParser(spec)
    parser.read(images[:3])
    t = time.process_time()
    parser.read(images)
    return (time.process_time() - t) / len(images) * 1e3


def _other_parser(root: str):
    """The ``SceneParser`` class of the checkout at ``root`` (its ``mosaic/evaluation`` package,
    loaded beside this checkout's: the modules are swapped in ``sys.modules`` while it imports)."""
    import importlib

    import mosaic

    ours = {k: v for k, v in sys.modules.items() if k.startswith("mosaic.evaluation")}
    path = list(mosaic.__path__)
    try:
        for k in ours:
            del sys.modules[k]
        mosaic.__path__ = [str(Path(root).resolve() / "mosaic")]
        other = importlib.import_module("mosaic.evaluation.parser")
    finally:
        for k in [k for k in sys.modules if k.startswith("mosaic.evaluation")]:
            del sys.modules[k]
        sys.modules.update(ours)
        mosaic.__path__ = path
    if not other.__file__.startswith(str(Path(root).resolve())):
        raise SystemExit(f"--interleave: loaded {other.__file__}, not from {root}")
    return other.SceneParser


def _interleaved(other_cls, spec, images, rounds: int, chunk: int = 20) -> tuple[float, float]:
    """CPU ms per image of ``other_cls(spec)`` and of this checkout's parser reading ``images``,
    alternated in chunks (the first of each pair alternates) for ``rounds`` rounds."""
    a, b = other_cls(spec), SceneParser(spec)
    a.read(images[:3])
    b.read(images[:3])
    ta = tb = 0.0
    for r in range(rounds):
        for i in range(0, len(images), chunk):
            part = images[i:i + chunk]
            for p in ((a, b) if (i // chunk + r) % 2 == 0 else (b, a)):
                t = time.process_time()
                p.read(part)
                t = time.process_time() - t
                if p is a:
                    ta += t
                else:
                    tb += t
    n = len(images) * rounds
    return ta / n * 1e3, tb / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400, help="images per measurement")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--specs", nargs="+", default=["count", "attribute", "position_complex", "binding", "coverage", "clevr_like"])
    ap.add_argument("--learned", default=None, help="a trained evaluator directory (default: untrained network)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--device", default=None, help="also score with the learned evaluator batched on this device (e.g. cuda)")
    ap.add_argument("--compare", default=None, help="another checkout's root (mosaic/ and renderers/): its parser beside this one")
    ap.add_argument("--interleave", default=None, help="another checkout's root: its mosaic/evaluation and this one in this process, alternated in chunks")
    ap.add_argument("--parser-only", action="store_true", help="skip the learned evaluator")
    ap.add_argument("--workers", type=int, default=0, help="also the parser in this many processes (wall images/s, against one process's wall rate)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_parser_ms(args.child, args.n)))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    other_cls = _other_parser(args.interleave) if args.interleave else None
    print(f"{args.n} images per measurement, median of {args.repeat}; torch threads {torch.get_num_threads()}; "
          f"images per CPU-second (parser: one core)")
    print(f"{'spec':<18} {'what':<40} {'images/s':>10} {'vs render':>10} {'CPU ms/img':>11}")
    for name in args.specs:
        spec = load_spec(ROOT / "experiments" / "specs" / f"{name}.yaml")
        rend = get_renderer("pillow", supersample=spec.image.supersample)
        images = None

        def render():
            nonlocal images
            images, _ = rend.render([sample_scene(spec, "evaluator_check", i)[0] for i in range(args.n)])

        base = _rate(render, args.n, args.repeat)
        print(f"{name:<18} {'sample + render (baseline)':<40} {base:>10.0f} {1.0:>9.2f}x {1e3 / base:>11.3f}   "
              f"(load {os.getloadavg()[0]:.1f})")
        parser = SceneParser(spec)  # abstention on, as everywhere
        r = _rate(lambda: parser.read(images), args.n, args.repeat)
        print(f"{name:<18} {'scene parser (abstention on)':<40} {r:>10.0f} {r / base:>9.2f}x {1e3 / r:>11.3f}")
        if args.workers > 1:
            from mosaic.evaluation.parallel_reads import close_pool

            one = _rate(lambda: parser.read(images), args.n, args.repeat, clock=time.perf_counter)
            par = SceneParser(spec, workers=args.workers)
            par.read(images)  # warm-up: the pool starts (imports) once, as in a long evaluation
            c0 = _workers_cpu(par)
            w = _rate(lambda: par.read(images), args.n, args.repeat, clock=time.perf_counter)
            c1 = _workers_cpu(par)
            close_pool(par)
            print(f"{name:<18} {f'scene parser, {args.workers} processes (wall)':<40} {w:>10.0f} {w / base:>9.2f}x {'':>11}   "
                  f"(one process {one:.0f}/s wall: {w / one:.2f}x; load {os.getloadavg()[0]:.1f})")
            if c0 is not None and c1 > c0:
                ms = (c1 - c0) / (args.n * args.repeat) * 1e3
                print(f"{name:<18} {'  its workers, CPU ms per image':<40} {args.workers * 1e3 / ms:>10.0f} {'':>10} {ms:>11.3f}   "
                      f"(images/s that {args.workers} free cores allow at that cost)")
        if args.interleave:
            other_ms, this_ms = _interleaved(other_cls, spec, images, args.repeat)
            print(f"{name:<18} {'parser of --interleave checkout':<40} {1e3 / other_ms:>10.0f} {1e3 / other_ms / base:>9.2f}x {other_ms:>11.3f}   "
                  f"(this one {this_ms:.3f} ms: {other_ms / this_ms:.2f}x faster, interleaved in chunks of 20, "
                  f"{args.repeat} rounds; load {os.getloadavg()[0]:.1f})")
        if args.compare:
            pairs = []
            for _ in range(args.repeat):  # alternate: the other checkout, then this one
                env = {**os.environ, "PYTHONPATH": str(Path(args.compare).resolve())}
                out = subprocess.run([sys.executable, __file__, "--child", name, "--n", str(args.n)], env=env,
                                     capture_output=True, text=True, check=True, cwd=str(Path(args.compare).resolve()))
                pairs.append((json.loads(out.stdout.strip().splitlines()[-1]), _parser_ms(name, args.n, images)))
            other = statistics.median(p[0] for p in pairs)
            this = statistics.median(p[1] for p in pairs)
            ratio = statistics.median(p[0] / p[1] for p in pairs)
            print(f"{name:<18} {'parser of --compare checkout':<40} {1e3 / other:>10.0f} {1e3 / other / base:>9.2f}x {other:>11.3f}   "
                  f"(this one {this:.3f} ms: {ratio:.2f}x faster, median of {len(pairs)} alternations; load {os.getloadavg()[0]:.1f})")
        if args.parser_only:
            continue
        if args.learned:
            ev = load_evaluator(spec, args.learned)
        else:
            cfg = LearnedConfig()
            net = EvaluatorNet([len(spec.domain(c)) for c in spec.concepts], cfg.input_size, cfg.width, cfg.hidden)
            ev = LearnedEvaluator(net, list(spec.concepts), {c: spec.domain(c) for c in spec.concepts}, cfg)
        r = _rate(lambda: ev.predict(images), args.n, args.repeat)
        print(f"{name:<18} {'learned evaluator (CNN, batch 512, CPU)':<40} {r:>10.0f} {r / base:>9.2f}x {1e3 / r:>11.3f}")
        if args.device:
            ev.net.to(args.device)
            ev.device = torch.device(args.device)
            gpu = torch.from_numpy(images).to(args.device)

            def on_device():
                ev.predict(gpu)
                if gpu.is_cuda:
                    torch.cuda.synchronize()

            on_device()  # warm-up (kernels, cudnn)
            r = _rate(on_device, args.n, args.repeat, clock=time.perf_counter)
            print(f"{name:<18} {f'learned evaluator batched on {args.device} (wall)':<40} {r:>10.0f} {r / base:>9.2f}x")


if __name__ == "__main__":
    main()
