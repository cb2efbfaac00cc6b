"""Evaluation speed (images/s) of the scene parser and the learned evaluator, against rendering the
same images, measured in the same run.

    python benchmarks/bench_evaluate.py [--n 400] [--repeat 3] [--specs count position_complex ...]
                                        [--learned DIR]

For each spec: the baseline is sampling + rendering the ``evaluator_check`` images (one process);
then the parser and the learned evaluator read the same images. Each figure is the median of
``--repeat`` runs. Without ``--learned`` the learned evaluator is an untrained network of the
default configuration (same cost as a trained one). Numbers depend on the machine's load: on a
shared machine, repeat and compare ratios rather than absolute rates.
"""

from __future__ import annotations

import argparse
import statistics
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


def _rate(fn, n: int, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return n / statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400, help="images per measurement")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--specs", nargs="+", default=["count", "attribute", "position_complex", "binding", "coverage", "clevr_like"])
    ap.add_argument("--learned", default=None, help="a trained evaluator directory (default: untrained network)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{args.n} images per measurement, median of {args.repeat}; torch threads {torch.get_num_threads()}")
    print(f"{'spec':<18} {'what':<36} {'images/s':>10} {'vs render':>10}")
    for name in args.specs:
        spec = load_spec(ROOT / "experiments" / "specs" / f"{name}.yaml")
        rend = get_renderer("pillow", supersample=spec.image.supersample)
        images = None

        def render():
            nonlocal images
            images, _ = rend.render([sample_scene(spec, "evaluator_check", i)[0] for i in range(args.n)])

        base = _rate(render, args.n, args.repeat)
        print(f"{name:<18} {'sample + render (baseline)':<36} {base:>10.0f} {1.0:>9.2f}x")
        parser = SceneParser(spec)
        r = _rate(lambda: parser.predict(images), args.n, args.repeat)
        print(f"{name:<18} {'scene parser':<36} {r:>10.0f} {r / base:>9.2f}x")
        if args.learned:
            ev = load_evaluator(spec, args.learned)
        else:
            cfg = LearnedConfig()
            net = EvaluatorNet([len(spec.domain(c)) for c in spec.concepts], cfg.input_size, cfg.width, cfg.hidden)
            ev = LearnedEvaluator(net, list(spec.concepts), {c: spec.domain(c) for c in spec.concepts}, cfg)
        r = _rate(lambda: ev.predict(images), args.n, args.repeat)
        print(f"{name:<18} {'learned evaluator (CNN, batch 512)':<36} {r:>10.0f} {r / base:>9.2f}x")


if __name__ == "__main__":
    main()
