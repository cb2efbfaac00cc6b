"""Variants of the faults attack round 18 found (issue 23), written after their fixes: the same classes
reached by other values and other readers, so that each fix holds at its mechanism, not only for the
attacker's case.

- a manifest's identity (``mosaic.manifest_fields.identity_problem``): no ``format`` key at all, a
  ``checksums`` record that is falsy in other ways (``[]``, ``false``, ``""``), read by ``StreamingDataset``
  and ``mosaic evaluate --spec DATASET`` as well as ``verify``; a Parquet manifest, whose shards carry their
  own digests, keeps reading without a ``checksums`` record;
- ``held_out`` decided by the spec when a record has none (``mosaic.evaluation.metrics.score``), in both
  directions, and never for a spec that holds nothing out;
- a YAML number Python cannot read, nested deep in a spec and in a sweep's grid;
- a copied finished run: its own paths in every field of the metrics the CLI prints.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2, copy_dataset, edit_manifest

runner = CliRunner()


_copy, _edit = copy_dataset, edit_manifest


@pytest.mark.parametrize("value", [[], False, "", 0])
def test_a_falsy_checksums_record_of_a_complete_imagefolder_dataset_is_damage(made, tmp_path, value):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    _edit(ds, lambda m: m.__setitem__("checksums", value))
    r = runner.invoke(app, ["verify", str(ds)])
    assert r.exit_code != 0 and "Traceback" not in r.output
    assert "checksums" in " ".join(r.output.split()), r.output
    with pytest.raises(DatasetError, match="checksums"):
        MosaicDataset(ds, "train")


def test_a_manifest_without_a_format_key_is_refused_by_every_reader(made, tmp_path):
    from mosaic.errors import DatasetError
    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    ds = _copy(made, tmp_path)
    _edit(ds, lambda m: m.pop("format"))
    with pytest.raises(DatasetError, match="format"):
        MosaicDataset(ds, "train")
    with pytest.raises(DatasetError, match="format"):
        StreamingDataset(ds, "train")
    r = runner.invoke(app, ["evaluate", str(ds / "train"), "--spec", str(ds), "--check-n", "0"])
    clean_exit_2(r, "format", collapse_space=True)


def test_a_parquet_dataset_needs_no_checksums_record(made, tmp_path):
    """Parquet shards are listed with their own sha256 in the manifest: the identity check asks the
    ``checksums`` record of imagefolder datasets only, so an exported Parquet dataset still reads."""
    from mosaic.torch_data import MosaicDataset

    out = tmp_path / "pq"
    r = runner.invoke(app, ["export", str(made[1]), "--format", "parquet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["storage"] == "parquet" and not man.get("checksums")
    assert len(MosaicDataset(out, "train")) == man["splits"]["train"]["count"]
    assert runner.invoke(app, ["verify", str(out)]).exit_code == 0


def test_score_takes_the_spec_held_out_status_of_records_without_a_flag(made):
    """Records of the held-out split and of the train split, their flags dropped: the spec decides each
    (held out and seen), so the two groups' counts are those the flags gave."""
    from mosaic.evaluation.metrics import score
    from mosaic.records import spec_of

    spec = spec_of(made[1])
    recs = [json.loads(ln) for s in ("train", "test_ood") for ln in (made[1] / s / "metadata.jsonl").read_text().splitlines()]
    assert any(r["held_out"] for r in recs) and not all(r["held_out"] for r in recs)
    flagged = score(recs, [r["concepts"] for r in recs], spec)
    bare = [{k: v for k, v in r.items() if k != "held_out"} for r in recs]
    nulls = [{**r, "held_out": None} for r in recs]
    for form in (bare, nulls):
        got = score(form, [r["concepts"] for r in recs], spec)
        assert got["held_out"]["n"] == flagged["held_out"]["n"] > 0
        assert got["seen"]["n"] == flagged["seen"]["n"] > 0


def test_score_counts_flagless_records_as_seen_when_the_spec_holds_nothing_out(made):
    from mosaic.evaluation.metrics import score
    from mosaic.records import spec_of
    from mosaic.spec import parse_spec

    data = spec_of(made[1]).to_dict()
    data.pop("holdout", None)
    data["splits"] = {k: v for k, v in data["splits"].items() if k not in ("test_id", "test_ood")}
    spec = parse_spec(data)
    recs = [{k: v for k, v in json.loads(ln).items() if k != "held_out"}
            for ln in (made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()]
    got = score(recs, [r["concepts"] for r in recs], spec)
    assert got["held_out"]["n"] == 0 and got["seen"]["n"] == len(recs)


BIG = "7" * 4400


def test_a_huge_yaml_integer_nested_in_a_spec_is_named(made, tmp_path):
    f = tmp_path / "deep.yaml"
    text = made[0].read_text()
    f.write_text(text + f"\nextra_note:\n  - nested: [{BIG}]\n")
    r = runner.invoke(app, ["validate", str(f)])
    clean_exit_2(r, "deep.yaml", collapse_space=True)
    assert "smaller number" in " ".join(r.output.split())


def test_a_huge_yaml_integer_in_a_sweep_grid_is_named(drun, tmp_path):
    f = tmp_path / "sw.yaml"
    f.write_text(f"name: sw\nkind: diffusion\nconfig: {drun[0] / 'config.yaml'}\ngrid: {{training.steps: [{BIG}]}}\nseeds: [0]\n")
    r = runner.invoke(app, ["sweep", str(f), "--out", str(tmp_path / "out"), "--dry-run"])
    clean_exit_2(r, "sw.yaml", collapse_space=True)
    assert not (tmp_path / "out").exists()


def test_a_moved_finished_run_reports_its_own_folder_in_every_path(drun, tmp_path):
    """The finished metrics of a run folder moved elsewhere: every path that lay in the old folder now lies
    in the new one (``mosaic.lab.run.finished_metrics``); paths outside it are left as they are."""
    from mosaic.lab.run import finished_metrics
    from mosaic.lab.run_folder import RunFolder

    run = drun[0]
    old = json.loads((run / "metrics.json").read_text())
    new = tmp_path / "moved"
    shutil.copytree(run, new)
    got = finished_metrics(RunFolder(new))
    assert got["already_done"] and got["run"] == str(new)
    text = json.dumps(got)
    assert str(run) + "/" not in text and f'"{run}"' not in text
    if isinstance(old.get("dataset"), str):  # a path outside the run folder stays as recorded
        assert got["dataset"] == old["dataset"]
