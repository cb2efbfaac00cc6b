from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.dataset import generate, read_manifest, read_metadata
from mosaic.errors import SpecError
from mosaic.cellsets import _connected
from mosaic.holdout import EXCLUDED, HELD_OUT, SEEN, held_out_cells, is_held_out
from mosaic.sampling import sample_scene
from mosaic.spec import load_spec, parse_spec
from tests.conftest import SPECS, tiny

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "cyan", "gray", "white", "black"]


def grid_spec(n_colors, n_counts, rule, per="total", train=None, **extra):
    cells = n_colors * n_counts
    d = {
        "name": "g",
        "image": {"size": 32},
        "concepts": {"color": {"values": COLORS[:n_colors]}, "count": {"range": [1, n_counts]}},
        "objects": [{"name": "o", "shape": "circle", "color": {"concept": "color"}, "size": 0.1, "repeat": {"concept": "count"}}],
        "holdout": {"concepts": ["color", "count"], "rule": rule},
        "splits": {"train": train or 3 * cells, "val": cells, "test_id": cells, "test_ood": cells, "per": per},
        **extra,
    }
    return parse_spec(d)


def test_mosaic_diagonal_cells_exactly():
    spec = load_spec(SPECS / "count_composition.yaml")
    for n in (1, 3, 5, 8):
        s = parse_spec({**spec.to_dict(), "holdout": {"concepts": ["color", "count"], "rule": {"kind": "diagonal", "n": n}}})
        # MOSAIC data.py: (colour c, class k=1..10) held out iff (c - (k-1)) mod 10 < N, c in COLOR_DICT order
        expect = {(COLORS[c], k) for c in range(10) for k in range(1, 11) if (c - (k - 1)) % 10 < n}
        assert held_out_cells(s) == expect
    s = parse_spec({**spec.to_dict(), "holdout": {"concepts": ["color", "count"], "rule": {"kind": "diagonal", "n": 1}}})
    assert held_out_cells(s) == {("red", 1), ("green", 2), ("blue", 3), ("yellow", 4), ("purple", 5), ("orange", 6),
                                 ("cyan", 7), ("gray", 8), ("white", 9), ("black", 10)}
    s = parse_spec({**spec.to_dict(), "holdout": {"concepts": ["color", "count"], "rule": {"kind": "diagonal", "n": 8}}})
    seen_with_1 = {c for c in COLORS if (c, 1) not in held_out_cells(s)}
    assert seen_with_1 == {"white", "black"}  # MOSAIC: class 1 is seen only with WHITE and BLACK at N = 8
    assert {c for c in COLORS if (c, 2) not in held_out_cells(s)} == {"red", "black"}


def test_mosaic_attribute_diagonal_is_same_colour_first():
    spec = load_spec(SPECS / "attribute_composition.yaml")
    # MOSAIC: (c1, c2) held out iff (c2 - c1) mod 10 < N; our grid is [color2, color1]
    for n in (1, 3):
        s = parse_spec({**spec.to_dict(), "holdout": {"concepts": ["color2", "color1"], "rule": {"kind": "diagonal", "n": n}}})
        expect = {(COLORS[c2], COLORS[c1]) for c1 in range(10) for c2 in range(10) if (c2 - c1) % 10 < n}
        assert held_out_cells(s) == expect


def test_mosaic_training_totals_stay_fixed_per_total():
    # 10,000 per-pair budget spread over 100 - 10N seen pairs: MOSAIC's 10/9, 10/7, 2, 5 rescaling
    from mosaic.splits import split_cells

    spec = load_spec(SPECS / "count_composition.yaml")
    for n, per_pair in ((1, 10000 / 90), (3, 10000 / 70), (5, 200), (8, 500)):
        s = parse_spec({**spec.to_dict(), "holdout": {"concepts": ["color", "count"], "rule": {"kind": "diagonal", "n": n}}})
        cells, q = split_cells(s, "train")
        assert q.sum() == 10000 and len(cells) == 100 - 10 * n
        assert q.max() - q.min() <= 1 and abs(q.mean() - per_pair) < 1e-9


rules = st.one_of(
    st.builds(lambda n, o: {"kind": "diagonal", "n": n, "offset": o}, st.integers(0, 3), st.integers(-5, 5)),
    st.builds(lambda k, o: {"kind": "coverage", "k": k, "offset": o}, st.integers(2, 4), st.integers(-5, 5)),
    st.builds(lambda f, s: {"kind": "random", "fraction": f, "seed": s}, st.floats(0, 0.4), st.integers(0, 50)),
)


@settings(max_examples=60, deadline=None)
@given(n_colors=st.integers(4, 7), n_counts=st.integers(4, 7), rule=rules)
def test_rules_partition_the_grid_and_keep_every_value(n_colors, n_counts, rule):
    try:
        spec = grid_spec(n_colors, n_counts, rule)
    except SpecError as e:  # a rule that cannot keep every value seen must say so
        assert any(t in m for _, m in e.problems for t in ("never occur in training", "at most", "holds out no combination")), e.problems
        return
    g = spec.grid
    seen, held = set(g.cells(SEEN)), set(g.cells(HELD_OUT))
    assert not seen & held
    assert len(seen) + len(held) == n_colors * n_counts
    for a, dom in enumerate(g.domains):
        assert {c[a] for c in seen} == set(dom)  # every value seen
    again = grid_spec(n_colors, n_counts, rule)
    assert np.array_equal(again.grid.status, g.status)  # same seed, same split
    if rule["kind"] == "random":
        assert _connected(g.index_cells(SEEN), g.shape)
        assert len(held) == round(rule["fraction"] * n_colors * n_counts)
    if rule["kind"] == "coverage":
        assert all(sum(1 for c in seen if c[0] == v) == rule["k"] for v in g.domains[0])


def test_random_rule_differs_by_seed_and_rejects_impossible_fractions():
    a = grid_spec(6, 6, {"kind": "random", "fraction": 0.5, "seed": 1}).grid.status
    b = grid_spec(6, 6, {"kind": "random", "fraction": 0.5, "seed": 2}).grid.status
    assert not np.array_equal(a, b)
    with pytest.raises(SpecError) as e:  # a spanning tree needs 6 + 6 - 1 = 11 of 36 cells: at most 25 held out
        grid_spec(6, 6, {"kind": "random", "fraction": 0.8})
    (path, msg), = e.value.problems
    assert path == "holdout.rule.fraction" and "at most 25" in msg


def test_union_difference_and_explicit():
    d1 = {"kind": "diagonal", "n": 1}
    ex = {"kind": "explicit", "combinations": [["red", 3], ["green", 4]]}
    u = grid_spec(5, 5, {"kind": "union", "rules": [d1, ex]})
    assert held_out_cells(u) == held_out_cells(grid_spec(5, 5, d1)) | {("red", 3), ("green", 4)}
    d = grid_spec(5, 5, {"kind": "difference", "rules": [{"kind": "diagonal", "n": 2}, d1]})
    assert held_out_cells(d) == held_out_cells(grid_spec(5, 5, {"kind": "diagonal", "n": 2})) - held_out_cells(grid_spec(5, 5, d1))


@pytest.mark.parametrize("rule, path, text", [
    ({"kind": "diagonal", "n": 5}, "holdout.rule.n", "n = 5 >= the grid's side 5"),
    ({"kind": "coverage", "k": 0}, "holdout.rule.k", "out of range"),
    ({"kind": "coverage", "k": 6}, "holdout.rule.k", "1 <= k <= 5"),
    ({"kind": "explicit", "combinations": [["red", 9]]}, "holdout.rule.combinations[0]", "count=9"),
    ({"kind": "explicit", "combinations": [["red", 1], ["red", 2], ["red", 3], ["red", 4], ["red", 5]]}, "holdout.rule", "'red'"),
])
def test_bad_rules_name_the_field(rule, path, text):
    with pytest.raises(SpecError) as e:
        grid_spec(5, 5, rule)
    probs = dict(e.value.problems)
    assert path in probs and text in probs[path], probs


def test_unknown_concept_and_test_split_naming():
    d = load_spec(SPECS / "count_composition.yaml").to_dict()
    d["holdout"]["concepts"] = ["colour", "count"]
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "did you mean 'color'" in dict(e.value.problems)["holdout.concepts[0]"]
    d = load_spec(SPECS / "count.yaml").to_dict()
    d["splits"]["test_ood"] = 10
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "needs a holdout" in dict(e.value.problems)["splits.test_ood"]


def test_unmeetable_training_quota_is_an_error():
    with pytest.raises(SpecError) as e:
        grid_spec(5, 5, {"kind": "diagonal", "n": 1}, train=10)
    msg = dict(e.value.problems)["splits.train"]
    assert "20 seen combinations" in msg and "at least 20" in msg


def test_imbalance_applies_to_train_only():
    spec = grid_spec(4, 4, {"kind": "diagonal", "n": 1}, train=1200)
    d = spec.to_dict()
    d["concepts"]["color"]["distribution"] = {"kind": "geometric", "ratio": 0.5}
    spec = parse_spec(d)
    tr = Counter(sample_scene(spec, "train", i)[1]["color"] for i in range(1200))
    # weights 8:4:2:1 over the seen cells: red keeps 3 of 4 cells like every colour, so about 2x green
    assert tr["red"] > 1.8 * tr["green"] and tr["green"] > 1.8 * tr["blue"] and tr["blue"] > 1.8 * tr["yellow"] > 0
    te = Counter(sample_scene(spec, "test_id", i)[1]["color"] for i in range(spec.split_sizes()["test_id"]))
    assert max(te.values()) - min(te.values()) <= 1, te


def test_object_level_holdout_for_binding():
    spec = load_spec(SPECS / "binding.yaml")
    g = spec.grid
    rule = spec.holdout.rule
    held_types = {(c[0], c[1]) for c in g.cells(HELD_OUT)}
    assert len(held_types) == round(0.25 * 24)
    for c1, s1, c2, s2 in g.cells(SEEN):
        assert (c1, s1) not in held_types and (c2, s2) not in held_types
    for c1, s1, c2, s2 in g.cells(HELD_OUT):
        assert (c1, s1) in held_types and (c2, s2) in held_types
    assert int((g.status == EXCLUDED).sum()) == 2 * 6 * 18
    # every colour and shape stays in some seen object type
    seen_types = {(c[0], c[1]) for c in g.cells(SEEN)}
    assert {t[0] for t in seen_types} == set(spec.domain("color1")) and {t[1] for t in seen_types} == set(spec.domain("shape1"))
    for i in range(30):
        _, v = sample_scene(spec, "test_ood", i)
        assert (v["color1"], v["shape1"]) in held_types and (v["color2"], v["shape2"]) in held_types
        _, v = sample_scene(spec, "train", i)
        assert is_held_out(spec, v) is False and (v["color1"], v["shape1"]) not in held_types
    assert rule.kind == "objects"


def test_generated_dataset_agrees_with_its_rule(tmp_path):
    d = tiny(SPECS / "position_composition.yaml", train=200, val=20, test_id=20, test_ood=20)
    d["holdout"]["rule"]["n"] = 3
    spec = parse_spec(d)
    man = generate(spec, tmp_path / "ds")
    lc = man["leak_check"]
    assert lc["passed"] and all(c["passed"] for c in lc["checks"].values())
    assert len(lc["held_out"]) == 30 and len(lc["seen"]) == 70 and lc["coverage"] == 0.7
    held = held_out_cells(spec)
    for split in ("train", "val", "test_id", "test_ood"):
        for r in read_metadata(tmp_path / "ds", split):
            combo = (r["concepts"]["color"], r["concepts"]["position"])
            assert r["combination"] == list(combo) and r["split"] == split
            assert r["held_out"] == (combo in held) == (split == "test_ood")
    assert sum(lc["counts"]["train"].values()) == 200 and len(lc["counts"]["train"]) == 70
    assert read_manifest(tmp_path / "ds")["status"] == "complete"


def test_leak_check_catches_a_leak():
    from mosaic.holdout import leak_check

    spec = grid_spec(4, 4, {"kind": "diagonal", "n": 1})
    recs = [{"index": i, "concepts": {"color": c, "count": k}} for i, (c, k) in enumerate(spec.grid.cells(SEEN))]
    assert leak_check(spec, {"train": recs})["passed"]
    bad = recs + [{"index": 99, "concepts": {"color": "red", "count": 1}}]
    rep = leak_check(spec, {"train": bad})
    assert not rep["passed"] and rep["checks"]["splits_respect_holdout"]["violations"]["train"][0]["index"] == 99
    rep = leak_check(spec, {"train": [r for r in recs if r["concepts"]["color"] != "blue"]})
    assert rep["checks"]["every_value_in_train"]["missing"] == {"color": ["blue"]}


def test_splits_command_prints_and_draws(tmp_path):
    r = CliRunner().invoke(app, ["splits", str(SPECS / "position_composition.yaml"), "--set", "holdout.rule.n=5",
                                 "--out", str(tmp_path / "grid.png")])
    assert r.exit_code == 0, r.output
    assert "held out 50" in r.output and (tmp_path / "grid.png").stat().st_size > 10_000
    r = CliRunner().invoke(app, ["splits", str(SPECS / "position_composition.yaml"), "--set", "holdout.rule.n=10"])
    assert r.exit_code == 2 and "holdout.rule.n" in r.output
    r = CliRunner().invoke(app, ["splits", str(SPECS / "count.yaml")])
    assert r.exit_code == 2 and "no holdout" in r.output


def _apportion_reference(total, weights, cells):
    """The plain O(rest x n) greedy that apportion's heap implements (kept here as the oracle)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    exact = total * w
    q = np.floor(exact).astype(np.int64)
    rest = total - int(q.sum())
    remainder = np.round(exact - q, 9)
    spread = (np.arange(len(w)) * 0.6180339887498949) % 1.0
    marg = [np.bincount(cells[:, a], weights=q, minlength=int(cells[:, a].max()) + 1) for a in range(cells.shape[1])]
    free = np.ones(len(w), bool)
    for _ in range(rest):
        top = remainder[free].max()
        cand = np.nonzero(free & (remainder == top))[0]
        load = sum(marg[a][cells[cand, a]] for a in range(cells.shape[1]))
        i = cand[np.lexsort((spread[cand], load))[0]]
        q[i] += 1
        free[i] = False
        for a in range(cells.shape[1]):
            marg[a][cells[i, a]] += 1
    return q


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 400), st.sampled_from(["uniform", "skewed", "random"]), st.integers(0, 10**6))
def test_apportion_matches_the_plain_greedy(n1, n2, total, kind, seed):
    from mosaic.splits import apportion

    rng = np.random.default_rng(seed)
    cells = np.array([(i, j) for i in range(n1) for j in range(n2) if rng.random() < 0.8] or [(0, 0)], dtype=np.int64)
    w = {"uniform": np.ones(len(cells)), "skewed": 0.8 ** cells[:, 0] * 0.5 ** cells[:, 1],
         "random": rng.integers(1, 5, len(cells)).astype(float)}[kind]
    got = apportion(total, w, cells)
    assert got.sum() == total and (got == _apportion_reference(total, w, cells)).all()
