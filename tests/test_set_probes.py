"""Set probes (mosaic.diagnostics.set_probes, binding paper §2.1) on planted scene embeddings:
a bag of concepts passes the concept probes and fails the object probe; a bound code passes the
object probe; training on held-out scenes is refused."""

from __future__ import annotations

import numpy as np
import pytest

from mosaic.diagnostics.errors import LeakageError
from mosaic.diagnostics.probes import ProbeConfig
from mosaic.diagnostics.set_probes import set_accuracy, set_probe_report

C, S, D = 6, 5, 48
CFG = ProbeConfig(epochs=200, seed=0)


def scenes(n_train=800, n_test=300, seed=0):
    rng = np.random.default_rng(seed)
    types = np.array([(c, s) for c in range(C) for s in range(S)])
    held = rng.permutation(len(types))[: len(types) * 3 // 10]
    seen = np.setdiff1d(np.arange(len(types)), held)

    def draw(pool, n):
        out = np.zeros((n, 2, 2), np.int64)
        for i in range(n):
            while True:
                a, b = rng.choice(pool, 2, replace=False)
                if types[a][0] != types[b][0] and types[a][1] != types[b][1]:  # distinct colours and shapes: swaps differ
                    break
            out[i] = types[[a, b]]
        return out

    return draw(seen, n_train), draw(seen, n_test), draw(held, n_test)


def embed(objs, code):
    return np.stack([sum(code(c, s) for c, s in scene) for scene in objs]).astype(np.float32)


def report(code, **kw):
    tr, te_id, te_ood = scenes()
    return set_probe_report((embed(tr, code), tr, np.zeros(len(tr), bool)),
                            {"test_id": (embed(te_id, code), te_id), "test_ood": (embed(te_ood, code), te_ood)},
                            [C, S], ["color", "shape"], CFG, **kw)


def test_set_accuracy_is_min_positive_over_max_negative():
    logits = np.array([[3.0, 2.0, 1.0], [3.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    present = np.array([[1, 1, 0], [1, 1, 0], [1, 1, 0]], bool)
    assert set_accuracy(logits, present).tolist() == [True, False, True]


def test_bag_of_concepts_passes_concepts_and_fails_objects():
    rng = np.random.default_rng(1)
    cv, sv = rng.normal(size=(C, D)), rng.normal(size=(S, D))
    rep = report(lambda c, s: cv[c] + sv[s])
    assert rep["test_id"]["concept_mean"] > 0.97 and rep["test_ood"]["concept_mean"] > 0.97
    assert rep["test_id"]["object"] < 0.85         # the swapped pair (when a seen type) scores as high as the true one
    assert rep["test_ood"]["n_untrained"] == 300 and np.isnan(rep["test_ood"]["object"])


def test_a_bound_code_passes_the_object_probe():
    rng = np.random.default_rng(2)
    table = rng.normal(size=(C, S, D))              # one random vector per object type: bound, not a bag
    bound = report(lambda c, s: table[c, s])
    assert bound["test_id"]["object"] > 0.95 and bound["train"]["object"] > 0.95
    assert bound["objects"] == 21                    # rows for the 21 seen types only


def test_training_on_held_out_scenes_is_refused():
    tr, _, _ = scenes(n_train=50, n_test=5)
    x = np.zeros((50, D), np.float32)
    held = np.zeros(50, bool)
    held[3] = True
    with pytest.raises(LeakageError, match="1 of 50 training samples are held-out"):
        set_probe_report((x, tr, held), {}, [C, S], ["color", "shape"], CFG)
