"""The scene parser's verdicts stay identical (issue 27: the parser was vectorised and batched).

``tests/data/parser_verdicts.json`` holds, for every shipped spec, the parser's reading (abstention
on) of a fixed set of images, recorded from the parser before it was rewritten, by running this
file as a script on a clean ``git archive`` of that commit::

    PYTHONPATH=/tmp/mosaic-ref python tests/test_parser_verdicts.py --write tests/data/parser_verdicts.json COMMIT

The images (:func:`verdict_images`) are those the evaluator's checks and audits judge: clean
ground-truth renders of the ``evaluator_check`` split (what ``mosaic evaluator check`` scores),
mild and strong degraded renders (blur, noise, colour shift: what ``calibrate`` scores) and the
synthetic bad renders of :data:`mosaic.evaluation.quality.BAD_KINDS` (ellipses, peanuts,
rhombi, fragments, rings: the failure modes of under-trained models that audits mark), plain and
mildly degraded. Per image the verdict (``values``, ``raw_values``, ``abstained``) must be equal;
the match-quality measures must agree to 1e-6.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "parser_verdicts.json"
#: shipped specs of the flat renderer (the golden files predate the shaded renderer; its specs are
#: pinned by its own tests)
SHIPPED = sorted(p.stem for p in (ROOT / "experiments" / "specs").glob("*.yaml") if "renderer: shaded" not in p.read_text())
#: the specs of the golden file (a spec added later is named by the coverage test below)
SPECS = sorted(json.loads(GOLDEN.read_text())["specs"]) if GOLDEN.is_file() else SHIPPED
N_CLEAN, N_DEGRADED, N_BAD = 160, 48, 8


def verdict_images(spec, n_clean: int = N_CLEAN, n_degraded: int = N_DEGRADED, n_bad: int = N_BAD) -> np.ndarray:
    """uint8 ``[N, H, W, 3]``: ``n_clean`` clean check renders, ``n_degraded`` mild and as many strong
    degraded ones, ``n_bad`` bad renders of every kind of :data:`mosaic.evaluation.quality.BAD_KINDS`,
    plain and mildly degraded."""
    from mosaic.evaluation.check import ground_truth
    from mosaic.evaluation.degrade import degrade
    from mosaic.evaluation.quality import BAD_KINDS, bad_render
    from mosaic.sampling import sample_scene

    clean, _ = ground_truth(spec, 0, n_clean)
    parts = [clean]
    for k, how in enumerate(("mild", "strong")):
        im, _ = ground_truth(spec, n_clean + k * n_degraded, n_clean + (k + 1) * n_degraded)
        parts.append(degrade(im, how, seed=k))
    rng = np.random.default_rng(0)
    bad = []
    for kind in BAD_KINDS:
        for i in range(n_bad):
            scene, _ = sample_scene(spec, "evaluator_check", i)
            bad.append(bad_render(scene, kind, 0, angle=float(rng.uniform(0, 180)), supersample=spec.image.supersample))
    bad = np.stack(bad)
    parts += [bad, degrade(bad, "mild", seed=7)]
    return np.concatenate(parts)


def verdict(read) -> dict:
    """The verdict of one :class:`~mosaic.evaluation.parser.Parse`, JSON-ready."""
    return {"values": read.values, "raw_values": read.raw_values, "abstained": bool(read.abstained)}


def digest(v: dict) -> str:
    return hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode()).hexdigest()[:12]


def reads_of(name: str) -> list:
    from mosaic.evaluation.parser import SceneParser
    from mosaic.spec import load_spec

    spec = load_spec(ROOT / "experiments" / "specs" / f"{name}.yaml")
    return SceneParser(spec).read(verdict_images(spec))


@pytest.mark.parametrize("name", SPECS)
def test_parser_verdicts_unchanged(name):
    want = json.loads(GOLDEN.read_text())["specs"][name]
    reads = reads_of(name)
    assert len(reads) == len(want)
    bad_verdicts = [i for i, (r, w) in enumerate(zip(reads, want)) if digest(verdict(r)) != w["v"]]
    assert not bad_verdicts, f"{name}: {len(bad_verdicts)} verdict(s) changed, images {bad_verdicts[:10]}: " \
                             f"{[verdict(reads[i]) for i in bad_verdicts[:3]]}"
    for i, (r, w) in enumerate(zip(reads, want)):
        for m, v in w["m"].items():
            assert abs(r.measures[m] - v) <= 1e-6, f"{name} image {i}: measure {m} {r.measures[m]} != {v}"


def test_verdicts_cover_every_shipped_spec():
    missing = set(SHIPPED) - set(json.loads(GOLDEN.read_text())["specs"])
    assert not missing, f"shipped spec(s) {sorted(missing)} have no recorded verdicts: add them (see the module docstring)"


def _write(path: str, made_from: str) -> None:
    out = {}
    for name in SHIPPED:
        reads = reads_of(name)
        out[name] = [{"v": digest(verdict(r)), "m": {k: round(float(x), 9) for k, x in r.measures.items()}} for r in reads]
        print(name, len(reads), "reads,", sum(r.abstained for r in reads), "abstained", flush=True)
    Path(path).write_text(json.dumps({"made_from": made_from, "specs": out}, separators=(",", ":"), sort_keys=True) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--write":
        _write(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("usage: python tests/test_parser_verdicts.py --write FILE 'commit it was made from'")
