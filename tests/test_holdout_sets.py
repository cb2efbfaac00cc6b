"""Holdout rules as cell sets (one membership method, set algebra) and the one membership question
of a grid (:meth:`mosaic.holdout.Grid.status_of`)."""

import itertools
import pickle

import numpy as np
import pytest

from mosaic.errors import ConfigError, LayoutError, MosaicError, SpecError
from mosaic.holdout import (
    EXCLUDED, HELD_OUT, RULES, SEEN, Axes, Cells, Diagonal, HoldoutRule, ObjectTypes, RuleConfig, Uncovered,
    is_held_out,
)
from mosaic.spec import load_spec
from tests.conftest import SPECS

AXES = Axes(("color", "count"), (("red", "green", "blue", "yellow", "cyan"), (1, 2, 3, 4, 5)))


def test_set_algebra_agrees_with_membership_cell_by_cell():
    diag = Diagonal(AXES, n=2)
    band = Uncovered(AXES, k=3, offset=1)
    rng = np.random.default_rng(0)
    odd = Cells(AXES, rng.random(AXES.shape) < 0.4)
    cells = list(itertools.product(*AXES.domains))
    cases = {
        "union": (diag | band, lambda c: diag.contains(c) or band.contains(c)),
        "intersection": (diag & odd, lambda c: diag.contains(c) and odd.contains(c)),
        "difference": (band - odd, lambda c: band.contains(c) and not odd.contains(c)),
        "complement": (~diag, lambda c: not diag.contains(c)),
        "nested": ((diag | odd) - ~band, lambda c: (diag.contains(c) or odd.contains(c)) and band.contains(c)),
    }
    for name, (s, want) in cases.items():
        mask = s.mask()
        for c in cells:
            assert s.contains(c) == want(c) == bool(mask[AXES.index_of(c)]), (name, c)
    # MOSAIC's diagonal: (i - j) mod 5 < 2
    assert {c for c in cells if diag.contains(c)} == {(AXES.domains[0][i], AXES.domains[1][j])
                                                       for i in range(5) for j in range(5) if (i - j) % 5 < 2}
    # object types: every / some object of a cell is a held-out type
    axes4 = Axes(("c1", "s1", "c2", "s2"), (("r", "g", "b"), ("o", "x"), ("r", "g", "b"), ("o", "x")))
    held_types = np.array([[True, False], [False, False], [False, True]])
    for every in (True, False):
        s = ObjectTypes(axes4, [[0, 1], [2, 3]], held_types, every)
        mask = s.mask()
        for c in itertools.product(*axes4.domains):
            flags = [held_types[axes4.domains[0].index(c[0]), axes4.domains[1].index(c[1])],
                     held_types[axes4.domains[2].index(c[2]), axes4.domains[3].index(c[3])]]
            assert s.contains(c) == (all(flags) if every else any(flags)) == bool(mask[axes4.index_of(c)]), c
    # a combination off the grid belongs to no set, complements included
    for s, _ in cases.values():
        assert not s.contains(("magenta", 1)) and not s.contains(("red",)) and not s.contains(("red", 9))


def test_every_rule_kind_is_registered_in_the_holdout_union():
    kinds = [r.model_fields["kind"].annotation.__args__[0] for r in RULES]
    assert kinds == ["diagonal", "coverage", "random", "explicit", "objects", "none", "union", "difference"]
    union_members = HoldoutRule.__origin__.__args__
    assert list(union_members) == RULES and all(issubclass(r, RuleConfig) for r in RULES)


def test_status_of_is_the_one_membership_question():
    spec = load_spec(SPECS / "binding.yaml")
    g = spec.grid
    counts = {SEEN: 0, HELD_OUT: 0, EXCLUDED: 0}
    for idx in np.ndindex(*g.shape):
        combo = g.values_of(idx)
        st = g.status_of(combo)
        assert st == int(g.status[idx])
        assert g.status_of(dict(zip(g.concepts, combo))) == st  # a mapping concept -> value
        assert is_held_out(spec, dict(zip(g.concepts, combo))) == (st == HELD_OUT)
        counts[st] += 1
    assert counts == {k: g.count(k) for k in counts} and counts[EXCLUDED] == 2 * 6 * 18
    assert g.status_of(("red", "circle", "red")) is None  # wrong length
    assert g.status_of(("red", "circle", "magenta", "square")) is None  # value outside its domain
    assert g.status_of({"color1": "red", "shape1": "circle"}) is None  # missing concepts
    assert is_held_out(spec, {"color1": "red"}) is False


def test_errors_carry_problems_and_survive_pickling():
    e = SpecError([("holdout.rule.n", "too large: use n <= 4"), ("", "and another")], "s.yaml")
    assert str(e) == "invalid spec s.yaml\n  holdout.rule.n: too large: use n <= 4\n  and another"
    assert str(ConfigError("not a mapping")) == "invalid config\n  not a mapping"
    assert str(LayoutError("could not lay out")) == "could not lay out" and isinstance(LayoutError("x"), RuntimeError)
    for err in (e, ConfigError([("model.heads", "must divide")], "c.yaml"), LayoutError("crowded"), MosaicError("plain")):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and back.problems == err.problems and back.source == err.source
        assert str(back) == str(err)
    with pytest.raises(MosaicError):
        raise SpecError("any spec error is a MosaicError")
