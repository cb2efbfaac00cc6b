import math
from collections import Counter

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from mosaic.errors import LayoutError
from mosaic.labels import caption, labels, read_labels
from mosaic.sampling import sample_scene
from mosaic.scene import Scene, angle_deg, relation
from mosaic.spec import load_spec, parse_spec
from tests.conftest import COUNT_YAML, SPECS

SHIPPED = {p.stem: load_spec(p) for p in sorted(SPECS.glob("*.yaml"))}


def test_same_split_and_index_give_the_same_scene():
    spec = SHIPPED["count"]
    a, va = sample_scene(spec, "train", 7)
    b, vb = sample_scene(spec, "train", 7)
    assert a == b and va == vb
    c, _ = sample_scene(spec, "train", 8)
    d, _ = sample_scene(spec, "val", 7)
    assert a != c and a != d


@pytest.mark.parametrize("name", sorted(SHIPPED))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_scenes_are_valid_and_labels_read_back(name, data):
    spec = SHIPPED[name]
    split = data.draw(st.sampled_from(list(spec.split_sizes())))
    index = data.draw(st.integers(0, spec.split_sizes()[split] - 1))
    scene, values = sample_scene(spec, split, index)
    gap = spec.layout.min_gap
    for i, o in enumerate(scene.objects):
        r = o.radius
        assert r + gap - 1e-9 <= o.center[0] <= 1 - r - gap + 1e-9
        assert r + gap - 1e-9 <= o.center[1] <= 1 - r - gap + 1e-9
        for q in scene.objects[i + 1:]:
            assert math.dist(o.center, q.center) >= o.radius + q.radius + gap - 1e-9
    reading = read_labels(scene, spec)
    assert reading.problems == []
    assert reading.values == values
    # the scene graph round-trips through JSON without changing its labels
    again = type(scene).from_dict(scene.to_dict())  # a Scene, or a Scene3D (image.renderer: shaded)
    assert again == scene and labels(again, spec) == values


def test_relations_hold_with_margin():
    spec = SHIPPED["relation"]
    for i in range(50):
        scene, v = sample_scene(spec, "train", i)
        sq, ci = scene.objects
        assert relation(sq, ci, spec.relations[0].margin) == v["relation"]


def test_positions_fall_inside_their_bin():
    spec = SHIPPED["position"]
    bins = spec.concepts["position"].angle_bins
    seen = Counter()
    for i in range(200):
        scene, v = sample_scene(spec, "train", i)
        ref, tgt = scene.objects
        a = angle_deg(ref, tgt)
        k = bins.names().index(v["position"])
        lo, hi = bins.bins()[k]
        assert lo + bins.margin - 1e-6 <= a <= hi - bins.margin + 1e-6
        seen[v["position"]] += 1
    assert len(seen) == 10


def test_mosaic_angle_bins():
    spec = SHIPPED["position"]
    bins = spec.concepts["position"].angle_bins
    assert bins.bins()[:3] == [(0, 18), (36, 54), (72, 90)] and bins.bins()[-1] == (324, 342)
    assert bins.bin_of(20) is None and bins.bin_of(40) == 1 and bins.bin_of(-30) == 9


def test_lookalike_objects_are_ordered_left_to_right():
    d = yaml.safe_load("""
    name: binding
    concepts:
      color1: {values: [red, green, blue]}
      shape1: {values: [circle, square, triangle]}
      color2: {values: [red, green, blue]}
      shape2: {values: [circle, square, triangle]}
    objects:
      - {name: a, shape: {concept: shape1}, color: {concept: color1}, size: 0.2}
      - {name: b, shape: {concept: shape2}, color: {concept: color2}, size: 0.2}
    """)
    spec = parse_spec(d)
    for i in range(100):
        scene, v = sample_scene(spec, "train", i)
        assert scene.objects[0].center[0] < scene.objects[1].center[0]
        assert labels(scene, spec) == v


def test_geometric_skew_gives_exact_quotas_in_train_and_balanced_tests():
    d = yaml.safe_load(COUNT_YAML)
    d["concepts"]["color"]["distribution"] = {"kind": "geometric", "ratio": 0.5}
    d["splits"] = {"train": 1400, "val": 70, "test": 300}
    spec = parse_spec(d)
    c = Counter(sample_scene(spec, "train", i)[1]["color"] for i in range(1400))
    assert c == {"red": 800, "green": 400, "blue": 200}  # 4/7, 2/7, 1/7 exactly
    c = Counter(sample_scene(spec, "test", i)[1]["color"] for i in range(300))
    assert c == {"red": 100, "green": 100, "blue": 100}
    with pytest.raises(IndexError):
        sample_scene(spec, "train", 1400)


def test_mosaic_skew_counts_are_reproduced():
    # MOSAIC's old data.py hard-coded position counts for 10k: about 0.8x per class
    d = yaml.safe_load((SPECS / "position.yaml").read_text())
    d["concepts"]["position"]["distribution"] = {"kind": "geometric", "ratio": 0.8}
    d["splits"]["train"] = 10000
    spec = parse_spec(d)
    from mosaic.sampling import marginal_quotas

    q = marginal_quotas(spec, "train", "position")
    mosaic_10k = [2255, 1795, 1435, 1145, 915, 730, 585, 465, 375, 300]
    assert q.sum() == 10000 and all(abs(a - b) <= 25 for a, b in zip(q, mosaic_10k))


def test_impossible_layout_raises_a_bounded_error():
    d = yaml.safe_load("""
    name: impossible
    concepts: {rel: {values: [left_of]}}
    objects:
      - {name: a, shape: circle, color: red, size: 0.45}
      - {name: b, shape: square, color: blue, size: 0.45}
    relations:
      - {subject: a, relation: {concept: rel}, object: b, margin: 0.3}
    layout: {max_tries: 50, max_restarts: 5}
    """)
    spec = parse_spec(d)
    with pytest.raises(LayoutError) as e:
        sample_scene(spec, "train", 0)
    msg = str(e.value)
    assert "objects[" in msg and "layout.min_gap" in msg and "max_tries" in msg


def test_captions():
    spec = SHIPPED["count"]
    scene, v = sample_scene(spec, "train", 3)
    assert caption(scene, spec) == f"{['a', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine', 'ten'][v['count'] - 1]} {v['color']} circle{'s' if v['count'] > 1 else ''}".replace("a orange", "an orange")
    spec = SHIPPED["relation"]
    scene, v = sample_scene(spec, "train", 0)
    art = "an" if v["square_color"][0] in "aeiou" else "a"
    assert caption(scene, spec).startswith(f"{art} {v['square_color']} square {v['relation'].replace('_', ' ')} ")
    spec = SHIPPED["position"]
    scene, v = sample_scene(spec, "train", 0)
    assert f"at {v['position']} degrees from a brown circle" in caption(scene, spec)


@pytest.mark.parametrize("name,sets", [("clevr_cogent", ["image.size=64"]), ("relation", []), ("clevr_like", []), ("binding", [])])
def test_screened_layout_search_equals_trying_every_proposal(name, sets, monkeypatch):
    """place() screens batches of proposals in arrays (sampling._maybe_fits) before the exact test; with
    the screen off (every proposal through the exact test, in order, as the scalar loop did) every
    scene and the generator's position after it are the same."""
    import numpy as np

    import mosaic.sampling as S

    spec = load_spec(SPECS / f"{name}.yaml", sets)

    def scenes():
        out = []
        for i in range(40):
            scene, values = sample_scene(spec, "train", i)
            out.append((scene.to_dict(), values))
        return out

    screened = scenes()
    monkeypatch.setattr(S, "_maybe_fits", lambda objs, i, u, *a: np.ones(len(u) // 2, bool))
    assert scenes() == screened
