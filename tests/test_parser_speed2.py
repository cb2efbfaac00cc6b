"""The scene parser's fourth speed step reads every image exactly as the parser before it
(issue 27, item 3).

:data:`GOLDEN` holds, per shipped spec of the flat renderer, one digest of the parser's whole
reading (every field of every :class:`~mosaic.evaluation.parser.Parse`: objects with their exact
floats, values, raw values, problems, IoUs, matches, measures, quality, abstention) of a fixed
set of images (:func:`reading_images`: clean ``evaluator_check`` renders, mild and strong
degraded ones, the audits' bad renders), made with the parser at commit c4bd289, before this
step, by running this file as a script on a clean ``git archive`` of that commit::

    git archive c4bd289 mosaic renderers | tar -x -C /tmp/ref
    PYTHONPATH=/tmp/ref python tests/test_parser_speed2.py

Floats enter the digest as ``float.hex`` (bit for bit). The pieces rewritten for speed are also
pinned against the plain computations they replace:

- ``unique_inverse`` gives ``np.unique(..., return_inverse=True)``'s arrays;
- ``main_share`` and ``ShapeFitter.fit_many`` read on a box give what they give on the whole map.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_parser_verdicts import verdict_images

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted(p.stem for p in (ROOT / "experiments" / "specs").glob("*.yaml") if "renderer: shaded" not in p.read_text())
N_CLEAN, N_DEGRADED, N_BAD = 24, 8, 2

#: spec -> digest of the parser's readings of :func:`reading_images`, made at c4bd289 (specs that
#: render the same check images read the same: the composition specs as their plain ones)
GOLDEN: dict[str, str] = {
    "attribute": "38bb674f574962eba52a",
    "attribute_composition": "38bb674f574962eba52a",
    "binding": "14478f09e392debdb7fb",
    "clevr_like": "70c9b2499e7a95da51dc",
    "count": "c99b9f6acc8ecf208c69",
    "count_composition": "c99b9f6acc8ecf208c69",
    "coverage": "f75fcbb2b9fc215c4402",
    "position": "d14a461600390eb3a4fd",
    "position_complex": "5bdd41eefe789c01a080",
    "position_composition": "d14a461600390eb3a4fd",
    "relation": "4a2f1f5ec33b4ce4bbee",
}


def reading_images(spec) -> np.ndarray:
    """uint8 ``[N, H, W, 3]``: :func:`tests.test_parser_verdicts.verdict_images` at this file's sizes."""
    return verdict_images(spec, N_CLEAN, N_DEGRADED, N_BAD)


def _plain(x):
    """``x`` as JSON-ready data, floats as ``float.hex`` (every bit)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, (bool, np.bool_)) or x is None or isinstance(x, str):
        return x if not isinstance(x, np.bool_) else bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x).hex()
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return repr(x)


def digest_of(name: str) -> str:
    """The digest of the parser's readings (abstention on) of :func:`reading_images` of spec ``name``."""
    from mosaic.evaluation.parser import SceneParser
    from mosaic.spec import load_spec

    spec = load_spec(ROOT / "experiments" / "specs" / f"{name}.yaml")
    images = reading_images(spec)
    text = json.dumps([_plain(r) for r in SceneParser(spec).read(images)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@pytest.mark.parametrize("name", SPECS)
def test_readings_are_the_parsers_before(name):
    if name not in GOLDEN:
        pytest.skip(f"{name}: no golden readings (a spec added after c4bd289)")
    assert digest_of(name) == GOLDEN[name]


def test_unique_inverse_is_numpys():
    from mosaic.evaluation.region_ops import unique_inverse

    rng = np.random.default_rng(0)
    for t in range(400):
        distinct = int(rng.integers(1, 3000))
        vals = rng.choice(1 << 24, distinct, replace=False).astype(np.int32)
        code = vals[rng.integers(0, distinct, int(rng.integers(1, 5000)))]
        if t % 3 == 0:
            code[: len(code) // 2] = vals[0]  # a background colour
        want, got = np.unique(code, return_inverse=True), unique_inverse(code)
        for w, g in zip(want, got):
            assert w.dtype == g.dtype and w.shape == g.shape and np.array_equal(w, g)


def test_box_reads_are_whole_map_reads():
    from mosaic.evaluation.region_ops import main_share
    from mosaic.evaluation.shape_fit import ShapeFitter, ShapeHypothesis
    from mosaic.spec import load_spec
    from scipy import ndimage

    spec = load_spec(ROOT / "experiments" / "specs" / "clevr_like.yaml")
    hyps = {"red": {sh: ShapeHypothesis(sh, None if sh == "circle" else (0.0, 360.0), (0.1, 0.2))
                    for sh in ("circle", "square", "star", "triangle")}}
    fitter = ShapeFitter(spec, hyps, 4)
    rng = np.random.default_rng(1)
    for _ in range(40):
        alpha = np.zeros((64, 64))
        y, x = rng.integers(0, 54, 2)
        h, w = rng.integers(3, 11, 2)
        alpha[y:y + h, x:x + w] = rng.uniform(-0.3, 1.3, (h, w))
        if rng.random() < 0.5:  # a second piece in the box
            alpha[y, x + w - 1] = 0.9
        box = ndimage.find_objects((alpha != 0).astype(int))[0]
        assert main_share(alpha, box) == main_share(alpha)
        plain, boxed = fitter.fit_many([(alpha, "red")], 64), fitter.fit_many([(alpha, "red")], 64, [box])
        assert repr(plain) == repr(boxed)


if __name__ == "__main__":
    made = {}
    for spec_name in SPECS:
        made[spec_name] = digest_of(spec_name)
        print(spec_name, flush=True, file=sys.stderr)
    print(json.dumps(made, indent=4, sort_keys=True))
