"""The streaming tally gives the same leak-check report as mosaic.holdout.leak_check."""

import pytest

from mosaic.dataset import generate, read_metadata
from mosaic.holdout import leak_check
from mosaic.spec import parse_spec
from mosaic.tally import Tally
from tests.conftest import SPECS, tiny


@pytest.mark.parametrize("name, splits", [
    ("count_composition.yaml", dict(train=100, val=6, test_id=8, test_ood=8)),
    ("count.yaml", dict(train=20, val=0, test=4)),
])
def test_tally_equals_leak_check(tmp_path, name, splits):
    spec = parse_spec(tiny(SPECS / name, **splits))
    out = tmp_path / "ds"
    man = generate(spec, out)
    by_split = {s: read_metadata(out, s) for s in spec.split_sizes()}
    t = Tally(spec)
    for s, recs in by_split.items():
        t.add_records(s, recs)
    assert t.report() == leak_check(spec, by_split) == man["leak_check"]
    # a leak: a held-out record in train, and a train value gone missing
    if spec.holdout is not None:
        bad = dict(by_split)
        bad["train"] = by_split["train"][1:] + by_split["test_ood"][:1]
        t = Tally(spec)
        for s, recs in bad.items():
            t.add_records(s, recs)
        rep = t.report()
        assert rep == leak_check(spec, bad) and not rep["passed"]
        assert rep["checks"]["splits_respect_holdout"]["violations"]["train"][0]["index"] == by_split["test_ood"][0]["index"]
