"""A spec's concept order is data: sampling draws the concepts in that order. The manifest keeps it
(:mod:`mosaic.manifest_io`) and the fingerprint tells two orders apart
(:func:`mosaic.grammar.fingerprint_of`), so the spec read back from a dataset makes the samples on disk.

Before: the manifest was written with every key sorted, so ``verify --against-spec`` called every
sample of ``relation`` (square_color, circle_color, relation) or ``clevr_cogent`` a forgery, and the
spec read back from the manifest (repair, export, ``StreamingDataset`` of a dataset) sampled other
scenes than the ones on disk (attack round 17)."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from tests.conftest import SPECS
from mosaic.cli import app
from mosaic.grammar import fingerprint_of
from mosaic.manifest_io import manifest_text
from mosaic.records import spec_from_data
from mosaic.spec import load_spec

SMALL = ["splits.train=8", "splits.val=2", "splits.test=2"]


def _old_fingerprint(data: dict) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def test_manifest_keeps_the_concept_order_and_is_unchanged_for_sorted_specs():
    rel = load_spec(SPECS / "relation.yaml").to_dict()
    man = {"status": "complete", "spec": rel, "name": "relation"}
    back = json.loads(manifest_text(man))
    assert list(back["spec"]["concepts"]) == ["square_color", "circle_color", "relation"]
    assert list(back) == sorted(back) and list(back["spec"]) == sorted(back["spec"])
    count = load_spec(SPECS / "count.yaml").to_dict()  # concepts already in sorted order: the bytes of before
    man = {"status": "complete", "spec": count, "splits": {"train": {"count": 3}}}
    assert manifest_text(man) == json.dumps(man, indent=2, sort_keys=True) + "\n"


def test_fingerprint_tells_concept_orders_apart_and_keeps_sorted_specs():
    data = load_spec(SPECS / "relation.yaml").to_dict()
    swapped = {**data, "concepts": dict(reversed(list(data["concepts"].items())))}
    assert fingerprint_of(data) != fingerprint_of(swapped)
    assert spec_from_data(data).fingerprint() == fingerprint_of(data) != spec_from_data(swapped).fingerprint()
    count = load_spec(SPECS / "count.yaml")
    assert count.fingerprint() == _old_fingerprint(count.to_dict())  # unchanged where the order is sorted


@pytest.mark.parametrize("name,sets,fmt", [("relation", SMALL, "imagefolder"), ("relation", SMALL, "parquet"),
                                           ("clevr_cogent", ["image.size=32", "splits.train=8", "splits.val=2",
                                                             "splits.test_id=2", "splits.test_ood=2"], "imagefolder")])
def test_a_dataset_of_unsorted_concepts_is_its_spec(tmp_path, name, sets, fmt):
    """Generated, then checked against the spec read back from its manifest: every sample the same."""
    out = tmp_path / name
    args = ["generate", str(SPECS / f"{name}.yaml"), "--out", str(out), "--format", fmt]
    for s in sets:
        args += ["--set", s]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    man = json.loads((out / "manifest.json").read_text())
    assert list(man["spec"]["concepts"]) == list(load_spec(SPECS / f"{name}.yaml").concepts)
    r = CliRunner().invoke(app, ["verify", str(out), "--against-spec"])
    assert r.exit_code == 0 and "OK" in r.output, r.output


def test_a_manifest_whose_concept_order_was_edited_is_refused(tmp_path):
    """Reordering the stored spec's concepts (the data on disk was drawn in the other order) is an edit
    of the spec: the fingerprint no longer matches and the quick check names it."""
    out = tmp_path / "count"
    r = CliRunner().invoke(app, ["generate", str(SPECS / "count.yaml"), "--out", str(out), "--set", "splits.train=20",
                                 "--set", "splits.val=4", "--set", "splits.test=4"])
    assert r.exit_code == 0, r.output
    man = json.loads((out / "manifest.json").read_text())
    man["spec"]["concepts"] = dict(reversed(list(man["spec"]["concepts"].items())))  # count, color
    (out / "manifest.json").write_text(manifest_text(man))
    r = CliRunner().invoke(app, ["verify", str(out)])
    assert r.exit_code != 0 and "fingerprint" in r.output, r.output
