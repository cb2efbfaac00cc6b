"""The HF view of a dataset: features in the three forms datasets reads, the card, load_dataset(OUT)."""

import numpy as np
import pytest

from mosaic.dataset import generate, read_metadata
from mosaic.hf import arrow_schema, features_json, features_yaml, feature_tree, hf_record, labels_of, write_card
from mosaic.spec import parse_spec
from tests.conftest import SPECS, tiny

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def cc_spec():
    # colour x count: a combination mixes names and numbers, concepts of both types
    return parse_spec(tiny(SPECS / "count_composition.yaml", train=100, val=6, test_id=8, test_ood=8))


def test_features_match_datasets_in_every_form(cc_spec):
    for masks in (False, True):
        tree = feature_tree(cc_spec, masks)
        from_yaml = datasets.Features._from_yaml_list(features_yaml(tree))
        from_json = datasets.Features.from_dict(features_json(tree))
        assert from_yaml == from_json
        assert from_yaml._to_yaml_list() == features_yaml(tree)
        ours = arrow_schema(tree)
        assert ours.remove_metadata() == from_json.arrow_schema.remove_metadata()
        assert datasets.Features.from_arrow_schema(ours) == from_json
        assert from_json["labels"]["count"].names == [str(v) for v in cc_spec.domain("count")]
        assert isinstance(from_json["image"], datasets.Image) and ("mask" in from_json) == masks


def test_hf_record_is_type_stable_and_labels_invert(cc_spec):
    rec = {"concepts": {"color": "blue", "count": 3}, "combination": ["blue", 3], "index": 0}
    r = hf_record(cc_spec, rec)
    assert r["combination"] == ["blue", "3"] and rec["combination"] == ["blue", 3]
    assert r["labels"] == {"color": cc_spec.domain("color").index("blue"), "count": 2}
    assert {c: cc_spec.domain(c)[k] for c, k in r["labels"].items()} == rec["concepts"]
    assert labels_of(cc_spec, {"color": None, "count": 99}) == {"color": -1, "count": -1}
    assert hf_record(cc_spec, {"concepts": {"color": "red", "count": 1}, "combination": None})["combination"] is None


def test_card_gives_exactly_the_splits_and_states_the_holdout(tmp_path):
    # imagefolder written by `generate`: without the card, HF merges test_id and test_ood into `test`
    spec = parse_spec(tiny(SPECS / "position_composition.yaml", train=200, val=20, test_id=20, test_ood=20))
    out = tmp_path / "ds"
    man = generate(spec, out)
    path = write_card(out, spec, man, "imagefolder")
    text = path.read_text()
    assert text.startswith("---\n") and "## Leak check" in text and "**passed**" in text
    held = man["leak_check"]["held_out"]
    assert f"{len(held)} held-out cells" in text and "(" + ", ".join(map(str, held[0])) + ")" in text
    assert "| test_ood | test_ood | 20 |" in text and "| validation | val | 20 |" in text
    hf = datasets.load_dataset(str(out), cache_dir=str(out) + "-hf-cache")
    assert set(hf) == {"train", "validation", "test_id", "test_ood"}
    assert [hf[s].num_rows for s in ("train", "validation", "test_id", "test_ood")] == [200, 20, 20, 20]
    assert all(hf["test_ood"]["held_out"]) and not any(hf["train"]["held_out"]) and not any(hf["test_id"]["held_out"])
    recs = read_metadata(out, "test_ood")
    assert [r["combination"] for r in recs] == hf["test_ood"]["combination"]


def test_card_omits_empty_splits(tmp_path):
    spec = parse_spec(tiny(SPECS / "count.yaml", train=12, val=0, test=4))
    out = tmp_path / "ds"
    man = generate(spec, out)
    text = write_card(out, spec, man, "imagefolder").read_text()
    assert "Empty splits (no files, not listed in `configs`): val." in text
    assert set(datasets.load_dataset(str(out), cache_dir=str(out) + "-hf-cache")) == {"train", "test"}
    with pytest.raises(ValueError, match="storage"):
        write_card(out, spec, man, "zip")
