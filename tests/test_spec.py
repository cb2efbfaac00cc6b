import numpy as np
import pytest
import yaml

from mosaic.errors import SpecError
from mosaic.spec import apply_overrides, load_spec, parse_spec
from tests.conftest import COUNT_YAML, SPECS


def problems_of(excinfo):
    return {p: m for p, m in excinfo.value.problems}


def base():
    return yaml.safe_load(COUNT_YAML)


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_validate(path):
    spec = load_spec(path)
    assert spec.image.size == (128 if spec.image.renderer == "shaded" else 64)  # clevr_cogent: CLEVR's look at 128 px
    assert set(spec.roles) == set(spec.concepts)


def test_yaml_syntax_error_names_file_and_line(write_spec):
    p = write_spec("name: t\nconcepts:\n  color: {values: [red, green\nobjects: []\n")
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert str(p) in str(e.value) and "line 4" in str(e.value)


def test_unknown_colour_names_closest_match_and_allowed():
    d = base()
    d["concepts"]["color"]["values"] = ["red", "gren", "blue"]
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    msg = problems_of(e)["concepts.color.values"]
    assert "'gren'" in msg and "did you mean 'green'" in msg and "purple" in msg and "colors:" in msg


def test_unknown_fixed_shape():
    d = base()
    d["objects"][0]["shape"] = "cirle"
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    msg = problems_of(e)["objects[0].shape"]
    assert "did you mean 'circle'" in msg and "hexagon" in msg


def test_user_colour_by_rgb_is_accepted():
    d = base()
    d["colors"] = {"teal2": [0, 128, 128]}
    d["concepts"]["color"]["values"] = ["red", "teal2"]
    spec = parse_spec(d)
    assert spec.rgb("teal2") == (0, 128, 128)


@pytest.mark.parametrize("size", [0, -0.1, 1.5])
def test_bad_size_names_field(size):
    d = base()
    d["objects"][0]["size"] = size
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "objects[0].size" in problems_of(e)


def test_count_range_min_greater_than_max():
    d = base()
    d["concepts"]["count"]["range"] = [5, 2]
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "min 5 > max 2" in problems_of(e)["concepts.count"]


def test_distractor_repeat_range_min_greater_than_max():
    d = base()
    d["distractors"] = [{"name": "d", "shape": "square", "color": "gray", "size": 0.1, "repeat": {"range": [4, 1]}}]
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "distractors[0].repeat" in problems_of(e)


def test_relation_naming_missing_object():
    d = yaml.safe_load((SPECS / "relation.yaml").read_text())
    d["relations"][0]["object"] = "circel"
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    msg = problems_of(e)["relations[0].object"]
    assert "'circel'" in msg and "did you mean 'circle'" in msg


def test_unknown_field_and_missing_field():
    d = base()
    d["objects"][0]["colour"] = "red"
    del d["objects"][0]["color"]
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    p = problems_of(e)
    assert p["objects[0].colour"] == "unknown field 'colour': did you mean 'color'?"
    assert "missing" in p["objects[0].color"]


def test_misspelt_fields_get_the_closest_field_of_their_place():
    d = base()
    d["splits"]["tset"] = 5                                   # a pydantic model inside the spec
    d["concepts"]["color"]["valuse"] = d["concepts"]["color"].pop("values")   # inside a dict of models
    d["wobble"] = 1                                           # nothing close: the generic wording
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    p = problems_of(e)
    assert p["splits.tset"] == "unknown field 'tset': did you mean 'test'?"
    assert p["concepts.color.valuse"] == "unknown field 'valuse': did you mean 'values'?"
    assert p["wobble"] == "unknown field 'wobble': remove it or check its spelling"


def test_misspelt_union_fields_and_choices_get_suggestions():
    binding = SPECS / "binding.yaml"
    cases = {  # --set -> (field path without union tags, message)
        "holdout.rule.fracton=0.3": ("holdout.rule.fracton", "unknown field 'fracton': did you mean 'fraction'?"),
        "holdout.rule.kind=diagnoal": ("holdout.rule", "kind 'diagnoal' is not one of diagonal, coverage, random, explicit, "
                                       "objects, none, union, difference: did you mean 'diagonal'?"),
        "concepts.color1.distribution=geometrik": ("concepts.color1.distribution.kind",
                                                   "'geometrik' is not one of uniform, geometric, zipf, weights: did you mean 'geometric'?"),
    }
    for override, (path, message) in cases.items():
        with pytest.raises(SpecError) as e:
            load_spec(binding, [override])
        assert problems_of(e) == {path: message}, override


def test_unused_and_unknown_concepts():
    d = base()
    d["concepts"]["shape"] = {"values": ["circle"]}
    d["objects"][0]["color"] = {"concept": "colour"}
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    p = problems_of(e)
    assert "not used" in p["concepts.shape"]
    assert "did you mean 'color'" in p["objects[0].color"]
    # the hint binds each kind of concept the way it can be bound
    d = base()
    d["concepts"]["rel"] = {"values": ["left_of", "above"]}
    d["concepts"]["k"] = {"range": [1, 3]}
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    p = problems_of(e)
    assert "relations: [{subject: A, relation: {concept: rel}, object: B}]" in p["concepts.rel"]
    assert "repeat: {concept: k}" in p["concepts.k"]


def test_lookalike_templates_with_distractors_are_rejected():
    d = base()
    d["distractors"] = [{"name": "d", "shape": "circle", "color": "red", "size": 0.15, "repeat": {"range": [0, 2]}}]
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "cannot tell their objects apart" in problems_of(e)["distractors[0]"]


def test_crowded_layout_is_rejected_statically():
    d = base()
    d["concepts"]["count"]["range"] = [1, 30]
    d["objects"][0]["size"] = 0.3
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    msg = problems_of(e)["objects"]
    assert "objects[0].repeat up to 30" in msg and "lower the repeat counts" in msg


def test_background_too_close_to_an_object_colour():
    d = base()
    d["image"]["background"] = "black"
    d["concepts"]["color"]["values"] = ["red", "black"]
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "too close to the background" in problems_of(e)["objects[0].color"]


def test_distributions():
    d = base()
    d["concepts"]["color"]["values"] = list(range(10))  # value types are not checked by the distribution
    from mosaic.spec import Distribution

    p = Distribution(kind="geometric", ratio=0.8).probabilities(10)
    assert p[0] / p[-1] == pytest.approx(0.8 ** -9) and p[0] / p[-1] == pytest.approx(7.45, abs=0.01)
    assert np.all(np.diff(p) < 0)
    pr = Distribution(kind="geometric", ratio=0.8, reverse=True).probabilities(10)
    assert np.allclose(pr, p[::-1])
    z = Distribution(kind="zipf", exponent=1.0).probabilities(4)
    assert np.allclose(z, np.array([1, 1 / 2, 1 / 3, 1 / 4]) / (25 / 12))
    w = Distribution(kind="weights", weights=[1, 3]).probabilities(2)
    assert np.allclose(w, [0.25, 0.75])
    assert np.allclose(Distribution.model_validate("uniform").probabilities(5), 0.2)
    with pytest.raises(ValueError):
        Distribution(kind="geometric")


def test_weights_length_must_match_domain():
    d = base()
    d["concepts"]["count"]["distribution"] = {"kind": "weights", "weights": [1, 2]}
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert "2 weights for 4 values" in problems_of(e)["concepts.count"]


def test_overrides_and_fingerprint():
    d = base()
    a = parse_spec(d)
    b = parse_spec(apply_overrides(d, ["splits.train=500", "objects.0.size=0.2", "image.background=[0, 0, 40]"]))
    assert b.splits.train == 500 and b.objects[0].size.value == 0.2 and b.image.background == (0, 0, 40)
    assert a.fingerprint() == parse_spec(base()).fingerprint() != b.fingerprint()
    with pytest.raises(SpecError):
        apply_overrides(d, ["objects.3.size=0.2"])
    with pytest.raises(SpecError):
        apply_overrides(d, ["no_equals_sign"])


def test_resolved_spec_round_trips():
    for path in SPECS.glob("*.yaml"):
        s = load_spec(path)
        again = parse_spec(s.to_dict())
        assert again.fingerprint() == s.fingerprint()
