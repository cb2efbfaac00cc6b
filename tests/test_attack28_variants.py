"""Variants of attack rounds 27-28 at the mechanisms fixed for them: a prediction row's image digest
(``image_sha256``) under ``mosaic audit``, a run's record derived again from its own files
(:mod:`mosaic.lab.run_record`), a trial's config compared with the sweep's expansion, trial.json values
compared as JSON (``false`` is no ``0``), the results pair written together, and quality figures
refused without the raw reads they come from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import clean_exit_2, ok_cli, run_cli, scored_folder, sweep_copy, trial_dirs


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "a28v")


def _edit_json(p: Path, edit) -> None:
    d = json.loads(p.read_text())
    edit(d)
    p.write_text(json.dumps(d, indent=2))


def _rows(s: Path) -> list[dict]:
    return [json.loads(x) for x in (s / "predictions.jsonl").read_text().splitlines() if x.strip()]


# ------------------------------------------------------------------------------------------------
# mosaic audit: a verdict only beside the image it was given
# ------------------------------------------------------------------------------------------------

def test_every_prediction_row_of_a_scored_run_records_the_digest_of_its_image(swept):
    from mosaic.png import decode_image, pixel_digest

    s = scored_folder(trial_dirs(swept[1])[0])
    for r in _rows(s):
        arr = decode_image(s / r["file_name"], where="t", error=ValueError)
        assert r["image_sha256"] == pixel_digest(arr)


@pytest.mark.parametrize("how", ["digest-removed", "digest-a-number", "one-image-replaced", "one-pixel-changed"])
def test_an_audit_refuses_a_row_whose_image_is_not_the_one_it_scored(swept, tmp_path, how):
    from mosaic.dataset import png_bytes
    from mosaic.png import decode_image

    sw = sweep_copy(swept, tmp_path)
    s = scored_folder(trial_dirs(sw)[0])
    rows = _rows(s)
    first = s / rows[0]["file_name"]
    if how.startswith("digest"):
        rows[0]["image_sha256"] = None if how == "digest-removed" else 7
        if how == "digest-removed":
            del rows[0]["image_sha256"]
        (s / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif how == "one-image-replaced":
        first.write_bytes((s / rows[1]["file_name"]).read_bytes())
    else:
        arr = decode_image(first, where="t", error=ValueError).copy()
        arr[0, 0, 0] ^= 1
        first.write_bytes(png_bytes(arr))
    r = run_cli(["audit", sw, "--n", "100"])
    clean_exit_2(r, "image_sha256" if how.startswith("digest") else "not the image this row scored", collapse_space=True)
    assert not (sw / "audit" / "audit.html").exists()


def test_an_audit_of_the_same_pixels_in_other_png_bytes_is_no_false_alarm(swept, tmp_path):
    """The digest is of the pixels: an image re-encoded (another compressor, same pixels) is the image scored."""
    from PIL import Image

    sw = sweep_copy(swept, tmp_path)
    s = scored_folder(trial_dirs(sw)[0])
    p = s / _rows(s)[0]["file_name"]
    before = p.read_bytes()
    Image.open(p).convert("RGB").save(p, format="PNG", compress_level=9)
    assert p.read_bytes() != before
    ok_cli(["audit", sw, "--n", "100"])


# ------------------------------------------------------------------------------------------------
# a run's record derived again (mosaic.lab.run_record)
# ------------------------------------------------------------------------------------------------

_RECORD_EDITS = {
    "params+1": lambda m: m.__setitem__("params", m["params"] + 1),
    "train.params": lambda m: m["train"].__setitem__("params", 3),
    "best.step": lambda m: m["train"]["best"].__setitem__("step", 99),
    "best.metric": lambda m: m["train"]["best"].__setitem__("metric", "val/other"),
    "global_batch": lambda m: m["train"].__setitem__("global_batch", 4096),
    "processes-true": lambda m: m["train"].__setitem__("processes", True),
    "dataset.fingerprint": lambda m: m["dataset"].__setitem__("fingerprint", "0" * 16),
    "dataset.name": lambda m: m["dataset"].__setitem__("name", "other"),
    "dataset.manifest_sha256": lambda m: m["dataset"].__setitem__("manifest_sha256", "f" * 64),
    "dataset.splits.val": lambda m: m["dataset"]["splits"].__setitem__("val", 1),
}


@pytest.mark.parametrize("edit", sorted(_RECORD_EDITS))
def test_a_run_record_edited_alone_is_refused_by_the_report(swept, tmp_path, edit):
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    _edit_json(t / "run" / "metrics.json", _RECORD_EDITS[edit])
    csv = (sw / "results.csv").read_bytes() if (sw / "results.csv").exists() else None
    clean_exit_2(run_cli(["report", sw]), "metrics.json")
    assert ((sw / "results.csv").read_bytes() if (sw / "results.csv").exists() else None) == csv


def test_a_run_whose_weights_and_checkpoints_are_gone_still_reports(swept, tmp_path):
    """Sources removed to save space leave their fields unchecked, never refused (the scores are still checked)."""
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    shutil.rmtree(t / "run" / "checkpoints")
    ok_cli(["report", sw])


def test_a_checkpoint_records_the_device_it_was_written_on(swept):
    (ck,) = sorted((trial_dirs(swept[1])[0] / "run" / "checkpoints").iterdir())[-1:]
    assert json.loads((ck / "checkpoint.json").read_text())["device"] == "cpu"


def test_the_record_of_untouched_transformer_runs_is_what_their_files_give(tmp_path):
    """No false alarm on the other family: a classifier and a binding run's params, best, val and processes."""
    from mosaic.lab.run_record import record_problem
    from tests.test_transformer import BINDING_SPEC, SPECS

    d = tmp_path / "specs"
    d.mkdir()
    cov = yaml.safe_load((SPECS / "coverage.yaml").read_text())
    cov["image"]["size"] = 16
    cov["splits"] = {"train": 2, "val": 1, "test_id": 1, "test_ood": 1, "per": "combination"}
    (d / "coverage.yaml").write_text(yaml.safe_dump(cov))
    (d / "binding.yaml").write_text(yaml.safe_dump(BINDING_SPEC))
    for obj, spec in (("classifier", "coverage.yaml"), ("binding", "binding.yaml")):
        cfg = {"name": obj, "out": str(tmp_path / obj), "objective": obj, "input": {"kind": "tokens"},
               "dataset": {"spec": str(d / spec), "root": str(tmp_path / "data"), "workers": 1},
               "model": {"width": 16, "depth": 1, "heads": 2, "embed_dim": 8, "patch": 4},
               "training": {"steps": 2, "batch_size": 8, "lr": 1e-3, "log_every": 1, "checkpoint_every": 1, "threads": 1}}
        (tmp_path / f"{obj}.yaml").write_text(yaml.safe_dump(cfg))
        ok_cli(["train", "transformer", tmp_path / f"{obj}.yaml"])
        run = tmp_path / obj
        m = json.loads((run / "metrics.json").read_text())
        assert record_problem(run, m, yaml.safe_load((run / "config.yaml").read_text())) is None
        m["train"]["best"]["value"] = 1.0 if m["train"]["best"]["value"] != 1.0 else 0.5
        assert record_problem(run, m, None) is not None
        r = run_cli(["train", "transformer", tmp_path / f"{obj}.yaml"])  # a rerun of the untouched run: already done
        assert r.exit_code == 0 and "already done" in r.output, r.output


# ------------------------------------------------------------------------------------------------
# a trial's config against the sweep's expansion; trial.json values as JSON; the results pair
# ------------------------------------------------------------------------------------------------

def _own_base(sw: Path, tmp_path: Path) -> Path:
    """The sweep folder's sweep.yaml pointed at a private copy of its training config (tests edit it)."""
    d = yaml.safe_load((sw / "sweep.yaml").read_text())
    base = tmp_path / "train.yaml"
    shutil.copy(d["config"], base)
    d["config"] = str(base)
    (sw / "sweep.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    return base


def test_report_refuses_a_trial_config_edited_in_a_field_no_record_checks(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    _own_base(sw, tmp_path)
    ok_cli(["report", sw])
    t = trial_dirs(sw)[0]
    for p in (t / "config.yaml", t / "run" / "config.yaml"):
        d = yaml.safe_load(p.read_text())
        d["training"]["weight_decay"] = 0.5
        p.write_text(yaml.safe_dump(d))
    clean_exit_2(run_cli(["report", sw]), "weight_decay", collapse_space=True)


def test_a_sweep_config_edited_since_the_sweep_ran_is_no_false_alarm(swept, tmp_path):
    """The trials are compared with the sweep folder's own copy of the config they were made from, never with the file
    the sweep names as it reads now (edited since, or a relative name read from another folder: attack round 29)."""
    sw = sweep_copy(swept, tmp_path)
    base = _own_base(sw, tmp_path)
    d = yaml.safe_load(base.read_text())
    d["evaluation"]["check_n"] = 4
    base.write_text(yaml.safe_dump(d))
    ok_cli(["report", sw])


def test_the_sweep_folders_copy_of_its_config_is_what_the_trials_are_compared_with(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    p = sw / "sweep_config.yaml"
    d = yaml.safe_load(p.read_text())
    d["evaluation"]["check_n"] = 4
    p.write_text(yaml.safe_dump(d))
    clean_exit_2(run_cli(["report", sw]), "evaluation.check_n", collapse_space=True)


@pytest.mark.parametrize("text", [b"\xff\xfe not utf-8", b"- a list\n", b"a: &a [*a]\n"], ids=["not-utf8", "a-list", "recursive"])
def test_a_damaged_copy_of_the_sweeps_config_is_named(swept, tmp_path, text):
    sw = sweep_copy(swept, tmp_path)
    (sw / "sweep_config.yaml").write_bytes(text)
    clean_exit_2(run_cli(["report", sw]), "sweep_config.yaml")


def test_a_sweep_folder_without_the_copy_of_its_config_still_reports(swept, tmp_path):
    """A sweep folder of a mosaic before 2026-12-06 has no copy: its trials are not compared with a config."""
    sw = sweep_copy(swept, tmp_path)
    (sw / "sweep_config.yaml").unlink()
    for t in trial_dirs(sw):  # an older mosaic's trials record no copy either
        _edit_json(t / "trial.json", lambda d: d.pop("sweep_config", None))
    ok_cli(["report", sw])


@pytest.mark.parametrize("key,value", [("seed", False), ("seed", 0.0), ("training.lr", True), ("training.lr", "0.001")])
def test_report_compares_trial_json_values_as_json(swept, tmp_path, key, value):
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    _edit_json(t / "trial.json", lambda d: d["values"].__setitem__(key, value))
    clean_exit_2(run_cli(["report", sw]), "trial.json")


def test_a_results_pair_that_cannot_be_written_as_parquet_keeps_both_old_files(swept, tmp_path, monkeypatch):
    import pandas as pd

    sw = sweep_copy(swept, tmp_path)
    ok_cli(["report", sw])
    before = {n: (sw / n).read_bytes() for n in ("results.csv", "results.parquet")}

    def boom(self, *a, **k):
        raise ValueError("Could not convert 0 with type int: tried to convert to boolean")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", boom)
    clean_exit_2(run_cli(["report", sw]), "results.parquet")
    assert {n: (sw / n).read_bytes() for n in before} == before


def test_a_results_column_of_mixed_kinds_goes_to_parquet_as_json_text():
    import pandas as pd

    from mosaic.trials import _mixed_column

    assert _mixed_column(pd.Series([1, "a"])) and _mixed_column(pd.Series([True, 0])) and _mixed_column(pd.Series([{"a": 1}, None]))
    assert not _mixed_column(pd.Series([1, 2.5, None])) and not _mixed_column(pd.Series(["a", float("nan")]))


def test_quality_figures_beside_rows_without_raw_reads_are_refused_even_when_honest(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    s = scored_folder(trial_dirs(sw)[0])
    rows = _rows(s)
    for r in rows:
        r.pop("raw")
    (s / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    clean_exit_2(run_cli(["report", sw]), "raw reads", collapse_space=True)
