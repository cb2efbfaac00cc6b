"""Claims (mosaic.claims) on synthetic results tables: holds / does not hold / inconclusive, the t
interval, selectors, sentence form, and validation against a sweep's axes and columns."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mosaic.claims import claim_problems, parse_claim, parse_sentence, resolve_axis
from mosaic.verdicts import evaluate_claim, t_interval

AXES = ["spec.holdout.rule.n", "spec.splits.train", "seed"]


def rows_trend(slope: float, noise: float, seeds=range(4), ns=(1, 2, 3)):
    rng = np.random.default_rng(0)
    out = []
    for s in seeds:
        off = rng.normal(0, noise)
        for n in ns:
            for train in (800, 3200):
                out.append({"seed": s, "spec.holdout.rule.n": n, "spec.splits.train": train, "status": "done",
                            "held_out.joint": 0.8 + slope * n + off + rng.normal(0, noise), "seen.joint": 0.95})
    return out


def test_trend_holds_does_not_hold_inconclusive():
    rows = rows_trend(-0.1, 0.01)
    r = evaluate_claim({"kind": "decreases", "y": "held_out.joint", "x": "spec.holdout.rule.n"}, rows, AXES)
    assert r["verdict"] == "holds" and r["seeds"] == 4
    assert r["effect"] == pytest.approx(0.1, abs=0.02) and r["interval"][0] > 0
    assert r["details"]["change_first_to_last"] == pytest.approx(-0.2, abs=0.03)
    assert evaluate_claim({"kind": "increases", "y": "held_out.joint", "x": "n"}, rows, AXES)["verdict"] == "does not hold"
    flat = rows_trend(0.0, 0.05)
    assert evaluate_claim("held_out.joint decreases with spec.holdout.rule.n", flat, AXES)["verdict"] == "inconclusive"
    one_seed = rows_trend(-0.1, 0.01, seeds=[0])
    r = evaluate_claim({"kind": "decreases", "y": "held_out.joint", "x": "n"}, one_seed, AXES)
    assert r["verdict"] == "inconclusive" and r["interval"] is None and "one seed" in r["why"]


def test_interval_is_the_t_interval_of_per_seed_effects():
    # per seed: y = a_s - b_s * n exactly, so the effect of seed s is b_s
    b = [0.05, 0.08, 0.11]
    rows = [{"seed": s, "spec.holdout.rule.n": n, "spec.splits.train": 1, "held_out.joint": 0.9 - bs * n}
            for s, bs in enumerate(b) for n in (1, 3, 5)]
    r = evaluate_claim({"kind": "decreases", "y": "held_out.joint", "x": "n"}, rows, AXES)
    m, sd = np.mean(b), np.std(b, ddof=1)
    h = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert r["effect"] == pytest.approx(m) and r["interval"] == pytest.approx([m - h, m + h])
    assert r["per_seed"] == pytest.approx({"0": 0.05, "1": 0.08, "2": 0.11})
    assert t_interval([1.0]) is None
    # min_effect: the same effect must now clear 0.2 -> does not hold (interval below it)
    assert evaluate_claim({"kind": "decreases", "y": "held_out.joint", "x": "n", "min_effect": 0.2}, rows, AXES)["verdict"] == "does not hold"


def test_drop_exceeds_short_and_general_forms():
    # counting: at the smallest train size count drops 0.4 below its large-data value, colour 0.1, shape 0.15
    rows = []
    for s in range(3):
        e = 0.01 * s
        for train, (cnt, col, shp) in {400: (0.5 + e, 0.85, 0.8 - e), 1600: (0.8, 0.93, 0.9), 6400: (0.9, 0.95, 0.95)}.items():
            rows.append({"seed": s, "spec.splits.train": train, "seen.count": cnt, "seen.color": col, "seen.shape": shp})
    axes = ["spec.splits.train", "seed"]
    short = {"kind": "drop_exceeds", "y": "seen.count", "than": ["seen.color", "seen.shape"], "x": "spec.splits.train", "from": "max", "to": "min"}
    r = evaluate_claim(short, rows, axes)
    # per seed: count drop 0.4 - e, colour 0.1, shape 0.15 + e; the margin is the smallest: 0.25 - 2e
    assert r["per_seed"] == pytest.approx({str(s): 0.25 - 0.02 * s for s in range(3)})
    assert r["verdict"] == "holds"
    reverse = {**short, "y": "seen.color", "than": ["seen.count"]}
    assert evaluate_claim(reverse, rows, axes)["verdict"] == "does not hold"
    # the general form, as the complexity vs imbalance claim: both drops from one baseline, a list-valued axis
    rows = []
    for s in range(3):
        for dist, skew, joint, tail in [([0, 0], 0, 0.95, 0.95), ([0, 4], 0, 0.6 - 0.02 * s, 0.6), ([0, 0], 2, 0.93, 0.85 + 0.01 * s)]:
            rows.append({"seed": s, "spec.distractors.0.repeat.range": str(dist), "spec.imbalance.skew": skew,
                         "seen.joint": joint, "tail.joint": tail})
    axes = ["spec.distractors.0.repeat.range", "spec.imbalance.skew", "seed"]
    claim = {"kind": "drop_exceeds", "a": {"y": "seen.joint", "from": {"distractors": "min", "skew": 0}, "to": {"distractors": [0, 4], "skew": 0}},
             "b": {"y": "tail.joint", "from": {"distractors": [0, 0], "skew": 0}, "to": {"distractors": [0, 0], "skew": "max"}}}
    r = evaluate_claim(claim, rows, axes, order={"spec.distractors.0.repeat.range": [[0, 0], [0, 4]]})
    assert r["verdict"] == "holds"
    assert r["per_seed"] == pytest.approx({str(s): (0.35 + 0.02 * s) - (0.10 - 0.01 * s) for s in range(3)})


def test_exceeds_at_least_and_missing_columns():
    rows = [{"seed": s, "spec.holdout.rule.fraction": f, "held_out.object_accuracy": acc + 0.01 * s}
            for s in range(3) for f, acc in ((0.3, 0.72), (0.7, 0.2))]
    axes = ["spec.holdout.rule.fraction", "seed"]
    r = evaluate_claim({"kind": "exceeds", "y": "held_out.object_accuracy", "a": {"fraction": 0.3}, "b": {"fraction": 0.7}}, rows, axes)
    assert r["verdict"] == "holds" and r["effect"] == pytest.approx(0.52)
    r = evaluate_claim({"kind": "at_least", "y": "held_out.object_accuracy", "value": 0.9, "where": {"fraction": "min"}}, rows, axes)
    assert r["verdict"] == "does not hold"
    r = evaluate_claim({"kind": "at_least", "y": "held_out.nope", "value": 0.9}, rows, axes)
    assert r["verdict"] == "inconclusive" and "no results column held_out.nope" in r["why"]


def test_sentences_and_validation():
    assert parse_sentence("held_out.joint decreases with spec.holdout.rule.n") == {"kind": "decreases", "y": "held_out.joint", "x": "spec.holdout.rule.n"}
    d = parse_sentence("the drop of seen.count from the largest to the smallest spec.splits.train exceeds that of seen.color and seen.shape")
    assert d == {"kind": "drop_exceeds", "y": "seen.count", "x": "spec.splits.train", "from": "max", "to": "min", "than": ["seen.color", "seen.shape"]}
    assert parse_claim(d).sentence().startswith("the drop of seen.count from the largest to the smallest spec.splits.train")
    with pytest.raises(ValueError, match="not a sentence mosaic can read"):
        parse_sentence("count is hard")
    with pytest.raises(ValueError, match="did you mean 'decreases'"):
        parse_claim({"kind": "decrease", "y": "a", "x": "b"})
    with pytest.raises(ValueError, match="needs either y, than, x, from, to"):
        parse_claim({"kind": "drop_exceeds", "y": "a"})
    assert resolve_axis("n", AXES) == "spec.holdout.rule.n"
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_axis("n", ["a.n", "b.n"])
    claims = [parse_claim({"kind": "decreases", "y": "held_out.joint", "x": "spec.holdout.rule.m"}),
              parse_claim({"kind": "decreases", "y": "held_out.jiont", "x": "n"})]
    probs = claim_problems(claims, AXES, columns=["held_out.joint", "seen.joint"])
    assert len(probs) == 2
    assert "report.claims[0]" in probs[0] and "did you mean 'spec.holdout.rule.n'" in probs[0]
    assert "report.claims[1]" in probs[1] and "column 'held_out.jiont'" in probs[1] and "did you mean 'held_out.joint'" in probs[1]


def test_claims_checked_again_without_abstention():
    import pandas as pd

    from mosaic.claims import without_abstention
    from mosaic.verdicts import check_sweep_claims

    c = parse_claim({"kind": "drop_exceeds", "y": "seen.count", "than": "seen.color", "x": "train", "from": "max", "to": "min"})
    w = without_abstention(c)
    assert w.columns() == ["seen.raw.count", "seen.raw.color"]
    assert without_abstention(parse_claim({"kind": "at_least", "y": "metrics.x", "value": 0})) is None
    # with abstention the held-out joint accuracy falls with n (blobs are no longer credited at large n);
    # without it, it does not: the verdict changes and the report says so
    rows = []
    for s in range(3):
        for n in (1, 2, 3):
            rows.append({"trial": f"{n}-{s}", "status": "done", "seed": s, "spec.holdout.rule.n": n,
                         "held_out.joint": 0.8 - 0.1 * n + 0.01 * s, "held_out.raw.joint": 0.7 + 0.01 * ((s + n) % 3)})
    sweep = {"name": "t", "grid": {"spec.holdout.rule.n": [1, 2, 3]}, "seeds": [0, 1, 2],
             "report": {"claims": [{"kind": "decreases", "y": "held_out.joint", "x": "n", "paper": "my statement"}]}}
    (r,) = check_sweep_claims(sweep, pd.DataFrame(rows), statements={})
    assert r["verdict"] == "holds" and r["without_abstention"]["verdict"] != "holds" and r["changed_by_abstention"]
    assert r["paper"] == "my statement" and r["sweep"] == "t"


def test_value_columns_are_expected_for_diffusion_and_checked():
    """``value.<concept>.<value>`` (joint accuracy on one value's images, e.g. a skewed concept's
    tail) is a results column of a diffusion sweep; a misspelt value is an error naming the fix."""
    from mosaic.claims import expected_columns

    cols = expected_columns("diffusion", ["color", "shape"], None, {"color": ["red"], "shape": ["circle", "cross"]})
    assert {"value.shape.cross", "value.shape.circle", "value.color.red"} <= set(cols)
    assert not [c for c in expected_columns("transformer", ["color", "shape"], "classifier",
                                            {"shape": ["cross"]}) if c.startswith("value.")]
    ok = parse_claim({"kind": "drop_exceeds", "a": {"y": "seen.joint", "from": {"n": 1}, "to": {"n": 3}},
                      "b": {"y": "value.shape.cross", "from": {"n": 1}, "to": {"n": 2}}})
    assert claim_problems([ok], AXES, cols) == []
    bad = parse_claim({"kind": "at_least", "y": "value.shape.crosss", "value": 0.5})
    (msg,) = claim_problems([bad], AXES, cols)
    assert "value.shape.crosss" in msg and "did you mean 'value.shape.cross'" in msg


def test_selector_values_are_checked_against_the_axis_values():
    values = {"spec.holdout.rule.n": [1, 2, 3], "label.condition": ["baseline", "distractors", "skew"], "seed": [0, 1, 2]}
    axes = ["spec.holdout.rule.n", "label.condition", "seed"]
    good = [parse_claim({"kind": "at_least", "y": "seen.joint", "value": 0.9, "where": {"n": "min"}}),
            parse_claim({"kind": "exceeds", "y": "seen.joint", "a": {"condition": "baseline"}, "b": {"condition": "skew"}, "where": {"n": 2.0}})]
    assert claim_problems(good, axes, values=values) == []
    bad = [parse_claim({"kind": "drop_exceeds", "a": {"y": "seen.joint", "from": {"condition": "baselin"}, "to": {"condition": "distractors"}},
                        "b": {"y": "seen.joint", "from": {"condition": "baseline"}, "to": {"condition": "skew"}}}),
           parse_claim({"kind": "at_least", "y": "seen.joint", "value": 0.9, "where": {"n": 4}})]
    probs = claim_problems(bad, axes, values=values)
    assert len(probs) == 2
    assert "a.from: condition = 'baselin'" in probs[0] and "did you mean 'baseline'" in probs[0]
    assert "where: n = 4" in probs[1] and "its values: 1, 2, 3" in probs[1]
    assert claim_problems(bad, axes) == []  # without values only names are checked


def test_sweep_with_a_misspelt_selector_value_is_refused():
    from mosaic.sweep import SweepSpec

    raw = {"name": "s", "kind": "diffusion", "config": "experiments/train/quickstart_cpu.yaml",
           "grid": {"spec.holdout.rule.k": [1, 2]}, "seeds": [0, 1, 2],
           "report": {"x": "spec.holdout.rule.k", "y": ["held_out.joint"],
                      "claims": [{"kind": "exceeds", "y": "held_out.joint", "a": {"k": 1}, "b": {"k": 3}}]}}
    with pytest.raises(ValueError, match="b: k = 3 is not a value of axis 'spec.holdout.rule.k'"):
        SweepSpec.model_validate(raw)
    raw["report"]["claims"][0]["b"] = {"k": 2}
    SweepSpec.model_validate(raw)


@pytest.mark.parametrize("axes, match", [
    ({"zip": {"label.c": ["on", "yes"]}}, "values 'on' and 'yes' are the same value"),
    ({"zip": {"label.c": ["1", "1.0"]}}, "values '1' and '1.0' are the same value"),
    ({"zip": {"label.c": ["max", "b"]}}, "'max' and 'min' are claim selectors"),
    ({"grid": {"spec.splits.train": [100, 100.0]}}, "values 100 and 100.0 are the same value"),
])
def test_values_claims_could_not_tell_apart_are_refused(axes, match):
    from mosaic.sweep import SweepSpec

    with pytest.raises(ValueError, match=match):
        SweepSpec.model_validate({"name": "s", "kind": "diffusion", "config": "experiments/train/quickstart_cpu.yaml", "seeds": [0, 1], **axes})
