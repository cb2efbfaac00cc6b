"""The layout dry run (mosaic.layout_check): a spec whose largest scenes fit only sometimes is refused
by `mosaic validate` and by `train --dry-run` before anything is written, naming the split, the
estimated failures and the layout fields that fix it; a roomy spec passes; the probe draws the
dataset's own scenes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import LayoutError
from mosaic.layout_check import check_layouts, probe_indices, probe_layouts
from mosaic.sampling import sample_scene
from mosaic.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
COUNT = ROOT / "experiments/specs/count.yaml"
# five circles of 0.22 at least 0.1 apart: the spec's area check passes (38 % of the frame), but the
# centres must fall 0.32 apart in a 0.58 x 0.58 square, which a random layout finds in about one
# restart of ten: with 50 restarts about 1 scene in 100 fails (counting_middata5_cpu's first try).
TIGHT = ["image.size=20", "concepts.count.range=[1, 5]", "objects.0.size=0.22", "layout.min_gap=0.1",
         "concepts.color.values=[red, green, blue, yellow]", "splits.train=3200", "splits.val=0", "splits.test=0"]
runner = CliRunner()


def _sets(items):
    return [a for kv in items for a in ("--set", kv)]


def test_probe_indices_are_distinct_spread_and_cover_both_ends():
    assert probe_indices(5, 256) == [0, 1, 2, 3, 4]
    idx = probe_indices(3200, 256)
    assert len(idx) == 256 == len(set(idx)) and idx[0] == 0 and idx[-1] == 3199 and idx == sorted(idx)
    gaps = {b - a for a, b in zip(idx, idx[1:])}
    assert max(gaps) - min(gaps) <= 1  # evenly spread, not the first 256


def test_a_layout_that_fits_only_sometimes_is_refused_with_the_estimate_and_the_fix():
    spec = load_spec(COUNT, overrides=TIGHT)
    with pytest.raises(LayoutError) as e:
        check_layouts(spec)
    msg = str(e.value)
    assert "split train" in msg and "of 256 scenes sampled across its 3200" in msg and "would fail" in msg
    assert "layout.max_restarts (now 50)" in msg and "objects[0]" in msg
    # the probe's failures are the dataset's own: generation fails at the same index
    bad = [p for p in probe_layouts(spec) if p.failed][0]
    with pytest.raises(LayoutError):
        sample_scene(spec, "train", bad.failed[0])
    # the fix it names works: more whole-scene restarts lay out every sampled scene
    roomy = load_spec(COUNT, overrides=TIGHT + ["layout.max_restarts=500"])
    probes = check_layouts(roomy)
    assert probes[0].failed == () and probes[0].objects == (1, 5) and probes[0].sampled == 256


def test_validate_refuses_it_with_exit_2_and_passes_a_shipped_spec():
    r = runner.invoke(app, ["validate", str(COUNT), *_sets(TIGHT)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "layout.max_restarts" in r.output and "would fail" in r.output
    r = runner.invoke(app, ["validate", str(COUNT)])
    assert r.exit_code == 0, r.output
    assert "all laid out" in r.output


def test_train_dry_run_refuses_it_before_writing_anything(tmp_path):
    cfg = ROOT / "experiments/train/counting_lowdata_cpu.yaml"
    sets = [f"dataset.overrides.{kv}" for kv in TIGHT if not kv.startswith(("splits.val", "splits.test"))]
    r = runner.invoke(app, ["train", "diffusion", str(cfg), "--dry-run", "--out", str(tmp_path / "run"),
                            *_sets([f"dataset.root={tmp_path}", *sets])])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "layout.max_restarts" in r.output
    assert not list(tmp_path.iterdir())
