"""Hostile cases of a fourteenth attack on the data path (issue 23), each closed at its mechanism.

- **``--overwrite`` deleted what a person put into a dataset**: ``generate --overwrite`` and
  ``export --overwrite`` took any folder whose manifest says ``mosaic-dataset/N`` as wholly
  mosaic's and deleted it, notebooks under ``DS/analysis/`` and notes in ``DS/train/`` with it.
  :func:`mosaic.foreign_names.foreign_names` lists every name mosaic does not write there, and
  :func:`mosaic.records.replaceable_or_raise` refuses, naming them, before anything is deleted.
- **A folder named through a symbolic link took another lock**: the lock file was beside the path
  as given, so ``evaluate --out LINK`` wrote while another process held ``--out REAL``'s lock.
  :func:`mosaic.locks.lock_path` is beside the folder's real place (links resolved).
- **A reader paired old labels with new images**: ``MosaicDataset`` checked the dataset, read its
  records, then decoded the images; a ``generate --overwrite`` (another seed) finishing in between
  gave the old labels with the new images, exit 0. Every dataset reader (``MosaicDataset``,
  ``mosaic.hf_load``, ``evaluate`` on a split, ``--copies``) holds the dataset's shared lock
  (:func:`mosaic.locks.reading`) from its check to its last read; writers hold it exclusively.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.foreign_names import foreign_names
from mosaic.locks import FolderLock, lock_path
from tests.conftest import hold_lock, TINY_COUNT_SPEC

SPEC = TINY_COUNT_SPEC

runner = CliRunner()


def _copy(made, tmp_path, name="ds") -> Path:
    dst = tmp_path / name
    shutil.copytree(made[1], dst, symlinks=True)
    return dst


# ------------------------------------------------------------------------------------------------
# --overwrite never deletes what mosaic did not write
# ------------------------------------------------------------------------------------------------

def test_overwrite_never_deletes_a_persons_files_inside_a_dataset(made, tmp_path):
    spec, _ = made
    ds = _copy(made, tmp_path)
    (ds / "analysis").mkdir()
    (ds / "analysis" / "notes.ipynb").write_text("my work")
    (ds / "train" / "notes.txt").write_text("mine")
    (ds / "train" / "images" / "keep.png").write_bytes(b"x")
    assert foreign_names(ds) == ["analysis", "train/images/keep.png", "train/notes.txt"] or \
        sorted(foreign_names(ds)) == ["analysis", "train/images/keep.png", "train/notes.txt"]
    r = runner.invoke(app, ["generate", str(spec), "--out", str(ds), "--overwrite"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "analysis" in r.output and "train/notes.txt" in r.output
    assert (ds / "analysis" / "notes.ipynb").read_text() == "my work"
    assert (ds / "train" / "notes.txt").read_text() == "mine"
    # export --overwrite into it too
    r = runner.invoke(app, ["export", str(made[1]), "--out", str(ds), "--format", "parquet", "--overwrite"])
    assert r.exit_code == 2, r.output
    assert (ds / "analysis" / "notes.ipynb").read_text() == "my work"
    # moved out: the overwrite goes ahead; mosaic's own temporary names never block it
    shutil.rmtree(ds / "analysis")
    (ds / "train" / "notes.txt").unlink()
    (ds / "train" / "images" / "keep.png").unlink()
    (ds / ".train.metadata.jsonl.tmp123.abc_1234").write_text("")
    (ds / "train" / "images" / ".000001.png.tmp44.deadbeef").write_text("")
    (ds / ".manifest.json.tmp7.0123abcd").write_text("")
    assert foreign_names(ds) == []
    r = runner.invoke(app, ["generate", str(spec), "--out", str(ds), "--overwrite"])
    assert r.exit_code == 0, r.output


def test_foreign_names_of_a_parquet_dataset_and_a_users_tmp_file(made, tmp_path):
    ds = tmp_path / "p"
    r = runner.invoke(app, ["export", str(made[1]), "--out", str(ds), "--format", "parquet"])
    assert r.exit_code == 0, r.output
    assert foreign_names(ds) == []
    (ds / "data" / "mine.csv").write_text("a")
    (ds / "notes.tmp").write_text("a person's file ending in .tmp is not mosaic's")
    (ds / ".git").mkdir()
    assert sorted(foreign_names(ds)) == [".git", "data/mine.csv", "notes.tmp"]


# ------------------------------------------------------------------------------------------------
# a folder to evaluate: file names that name no file, keys given twice
# ------------------------------------------------------------------------------------------------

def _eval_folder(made, tmp_path, lines) -> Path:
    d = tmp_path / "ev"
    shutil.copytree(made[1] / "test_ood", d)
    (d / "metadata.jsonl").write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
    return d


@pytest.mark.parametrize("name, said", [("images/\\ud800.png", "lone surrogate"), (".", "folder itself"),
                                        ("./", "folder itself")])
def test_a_file_name_that_names_no_file_is_named_not_a_traceback(made, tmp_path, name, said):
    lines = (made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()
    lines[0] = lines[0].replace('"images/000000.png"', f'"{name}"')
    d = _eval_folder(made, tmp_path, lines)
    r = runner.invoke(app, ["evaluate", str(d), "--spec", str(made[0]), "--check-n", "0"])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and said in r.output and "line 1" in r.output


def test_a_key_given_twice_in_a_record_to_evaluate_is_refused(made, tmp_path):
    from mosaic.audit import read_rows

    lines = (made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()
    good = lines[0]
    lines[0] = good.replace('"color": "red"', '"color": "blue", "color": "red"', 1)
    assert lines[0] != good
    d = _eval_folder(made, tmp_path, lines)
    r = runner.invoke(app, ["evaluate", str(d), "--spec", str(made[0]), "--check-n", "0"])
    assert r.exit_code == 2, r.output
    assert "'color' given twice" in r.output and "line 1" in r.output
    # a samples folder's rows (audit, report sheets) are read the same way
    (d / "predictions.jsonl").write_text('{"file_name": "images/000000.png", "file_name": "images/000001.png"}\n')
    with pytest.raises(Exception, match="given twice"):
        read_rows(d / "predictions.jsonl")


def test_splits_out_of_another_format_is_named_before_anything_is_written(made, tmp_path):
    spec = tmp_path / "s.yaml"
    shutil.copy(made[0], spec)
    before = spec.read_bytes()
    for name in (spec, tmp_path / "grid.jpeg.yaml", tmp_path / "grid"):
        r = runner.invoke(app, ["splits", str(made[0]), "--out", str(name)])
        assert r.exit_code == 2, r.output
        assert "Traceback" not in r.output and "does not end in .png" in r.output
    assert spec.read_bytes() == before
    r = runner.invoke(app, ["splits", str(made[0]), "--out", str(tmp_path / "grid.png")])
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------------------------------------
# one folder, one lock, whatever path names it
# ------------------------------------------------------------------------------------------------

def test_a_folder_named_through_a_link_takes_the_folders_own_lock(made, tmp_path):
    real = tmp_path / "evout"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "alias").symlink_to(tmp_path)
    assert lock_path(tmp_path / "link") == lock_path(real) == lock_path(tmp_path / "alias" / "evout")
    d = tmp_path / "ev"
    shutil.copytree(made[1] / "test_ood", d)
    holder = hold_lock(real)
    try:
        r = runner.invoke(app, ["evaluate", str(d), "--spec", str(made[0]), "--check-n", "0", "--out", str(tmp_path / "link")])
        assert r.exit_code == 2, r.output  # a link at --out is refused outright (attack round 23), never written through
        assert "symbolic link" in r.output and not (real / "metrics.json").exists()
        r = runner.invoke(app, ["evaluate", str(d), "--spec", str(made[0]), "--check-n", "0", "--out", str(tmp_path / "alias" / "evout")])
        assert r.exit_code == 2 and "another process" in r.output, r.output  # a link above it: the real folder's lock
        with pytest.raises(Exception, match="another process"):
            FolderLock(tmp_path / "alias" / "evout").acquire()
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------------------
# HF reads 'data/x::y' as the folder data/x
# ------------------------------------------------------------------------------------------------

def test_hf_load_refuses_a_path_that_fsspec_reads_as_a_url_chain(made, tmp_path):
    pytest.importorskip("datasets")
    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset

    ds = _copy(made, tmp_path, "x::y")
    _copy(made, tmp_path, "x")  # the folder HF would read instead
    with pytest.raises(DatasetError, match="'::'"):
        load_dataset(ds, cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


# ------------------------------------------------------------------------------------------------
# a trial id is a file name: 255 bytes, not 80 letters
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["\U0001D400" * 100, "中" * 100, "x" * 100])
def test_a_trial_id_of_wide_letters_fits_a_file_name_with_the_reports_names(tmp_path, value):
    import os

    from mosaic.sweep import trial_id

    tid = trial_id({"label.condition": value, "seed": 3})
    assert "_seed=3-" in tid
    # the report's temporary heatmap name is the longest name made from a trial id
    longest = f".{tid}-heatmap0.png.tmp{4 * 10 ** 6}.deadbeef"
    assert len(longest.encode()) <= 255
    os.mkdir(tmp_path / tid)
    (tmp_path / longest).write_text("")
    assert trial_id({"a": "x" * 10, "seed": 0}).startswith("a=xxxxxxxxxx_seed=0-")  # short ASCII labels as before


@pytest.mark.parametrize("name", ["a" * 250, "a" * 260, "\U0001D400" * 70 + "/x"])
def test_an_output_name_longer_than_a_file_name_is_named_before_anything_is_written(made, tmp_path, name):
    r = runner.invoke(app, ["generate", str(made[0]), "--out", str(tmp_path / name)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and "255 bytes" in r.output
    r = runner.invoke(app, ["splits", str(made[0]), "--out", str(tmp_path / (name + ".png"))])
    assert r.exit_code == 2 and "255 bytes" in r.output, r.output
    assert list(tmp_path.iterdir()) == []


def test_a_spec_name_of_more_than_200_bytes_is_refused_by_name(made):
    from mosaic.errors import SpecError
    from mosaic.spec import load_spec

    with pytest.raises(SpecError, match="bytes in UTF-8"):
        load_spec(made[0], ["name=" + "\U0001D400" * 70])
    assert load_spec(made[0], ["name=" + "\U0001D400" * 50]).name.startswith("\U0001D400")


@pytest.mark.parametrize("cmd", [["validate"], ["verify"], ["preview"], ["splits"], ["report"], ["evaluate", "--spec", "SPEC"]])
def test_an_input_path_longer_than_a_file_name_is_named_not_a_traceback(made, cmd):
    long = "a" * 300
    args = [a if a != "SPEC" else str(made[0]) for a in cmd]
    r = runner.invoke(app, [args[0], long, *args[1:]])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "255 bytes" in r.output


# ------------------------------------------------------------------------------------------------
# YAML 1.1's octal and base-60 numbers are not what a person wrote
# ------------------------------------------------------------------------------------------------

def test_yaml_octal_and_base_60_scalars_stay_text(made):
    from mosaic.errors import SpecError
    from mosaic.overrides import safe_load
    from mosaic.spec import load_spec

    assert safe_load("a: [16:9, 010, 1:20:30.5, 12, 1_000, 0x10, 1.5, .5, 0, 1e-3]") == {
        "a": ["16:9", "010", "1:20:30.5", 12, 1000, 16, 1.5, 0.5, 0, "1e-3"]}
    assert load_spec(made[0], ["splits.train=010"]).split_sizes()["train"] == 10  # ten, as written (YAML 1.1: 8)
    with pytest.raises(SpecError, match="1:30"):
        load_spec(made[0], ["seed=1:30"])  # YAML 1.1: 90
    import yaml
    assert yaml.safe_load("a: 010")["a"] == 8  # PyYAML's own loader is left as it is


# ------------------------------------------------------------------------------------------------
# a reader holds the dataset from its check to its last image
# ------------------------------------------------------------------------------------------------

def test_a_regeneration_never_lands_between_a_readers_labels_and_its_images(made, tmp_path, monkeypatch):
    import subprocess
    import sys

    import mosaic.torch_data as td

    ds = _copy(made, tmp_path)
    other = tmp_path / "seed7.yaml"
    other.write_text("seed: 7\n" + made[0].read_text())
    orig, writer = td.decode_image, {}

    def decode_after_a_regeneration(*a, **k):
        if not writer:  # between the records and the first image: another process regenerates the folder
            writer["run"] = subprocess.run([sys.executable, "-m", "mosaic.cli", "generate", str(other), "--out", str(ds),
                                            "--overwrite"], capture_output=True, text=True)
        return orig(*a, **k)

    monkeypatch.setattr(td, "decode_image", decode_after_a_regeneration)
    d = td.MosaicDataset(ds, "test_ood")
    run = writer["run"]
    assert run.returncode == 2 and "is reading dataset" in run.stdout + run.stderr, run.stdout + run.stderr
    import numpy as np
    from PIL import Image

    for i, r in enumerate(d.records):  # labels and images of one generation: the files still on disk
        assert (d.images[i].permute(1, 2, 0).numpy() == np.asarray(Image.open(ds / "test_ood" / r["file_name"]))).all()
    assert not (tmp_path / ".ds.lock").exists()  # the last reader out removes the lock file


def test_readers_share_the_lock_and_a_writer_waits_for_them(tmp_path):
    from mosaic.errors import DatasetError
    from mosaic.locks import reading

    d = tmp_path / "ds"
    d.mkdir()
    with reading(d, DatasetError), reading(d, DatasetError):
        pass
    holder = hold_lock(d)  # a writer in another process
    try:
        with pytest.raises(DatasetError, match="is writing"):
            FolderLock(d, DatasetError, "dataset", wait=False, reader=True).acquire()
    finally:
        holder.kill()
        holder.wait()
    with reading(d, DatasetError):  # a writer that died: taken over
        pass


# ------------------------------------------------------------------------------------------------
# audit --out never overwrites a person's items.json or page
# ------------------------------------------------------------------------------------------------

def test_audit_out_never_overwrites_files_it_did_not_write(made, tmp_path):
    ev = tmp_path / "ev"
    shutil.copytree(made[1] / "test_ood", ev)
    r = runner.invoke(app, ["evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0", "--out", str(ev)])
    assert r.exit_code == 0, r.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "items.json").write_text('{"mine": 1}')
    (mine / "audit.html").write_text("<p>my page</p>")
    r = runner.invoke(app, ["audit", str(ev), "--out", str(mine)])
    assert r.exit_code == 2, r.output
    assert "did not write" in r.output and (mine / "items.json").read_text() == '{"mine": 1}'
    assert (mine / "audit.html").read_text() == "<p>my page</p>"
    own = tmp_path / "own"
    for _ in range(2):  # a new audit into its own folder replaces its own files
        r = runner.invoke(app, ["audit", str(ev), "--out", str(own)])
        assert r.exit_code == 0, r.output


# ------------------------------------------------------------------------------------------------
# an evaluation killed while it rewrites its folder never leaves two evaluations' files as one
# ------------------------------------------------------------------------------------------------

def test_an_interrupted_evaluation_leaves_metrics_saying_so_and_a_rerun_finishes(made, tmp_path, monkeypatch):
    import json

    import mosaic.evaluation.folder as F

    ev, out = tmp_path / "ev", tmp_path / "out"
    shutil.copytree(made[1] / "test_ood", ev)
    args = ["evaluate", str(ev), "--spec", str(made[0]), "--check-n", "0", "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    first = json.loads((out / "metrics.json").read_text())
    assert {"overall", "seen", "held_out"} <= set(first)

    def killed(*a, **k):
        raise KeyboardInterrupt  # a kill after predictions.jsonl, before the metrics
    monkeypatch.setattr(F, "write_metrics", killed)
    runner.invoke(app, args)
    assert json.loads((out / "metrics.json").read_text())["status"] == "incomplete"  # never the first run's metrics
    monkeypatch.undo()
    r = runner.invoke(app, args)  # the rerun is not refused as someone else's files
    assert r.exit_code == 0, r.output
    assert {"overall", "seen", "held_out"} <= set(json.loads((out / "metrics.json").read_text()))


def test_a_seed_listed_twice_in_a_sweep_is_refused(tmp_path):
    from mosaic.sweep import SweepSpec

    cfg = tmp_path / "train.yaml"
    cfg.write_text("name: t\n")
    base = {"name": "s", "kind": "diffusion", "config": str(cfg), "grid": {"training.lr": [0.001, 0.002]}}
    with pytest.raises(Exception, match="0 listed more than once"):
        SweepSpec.model_validate({**base, "seeds": [0, 1, 0]})
    assert len(SweepSpec.model_validate({**base, "seeds": [0, 1]}).seeds) == 2


def test_a_sweep_axis_value_in_exponent_form_is_compared_as_the_number_it_configures(tmp_path):
    from mosaic.overrides import safe_load
    from mosaic.sweep import SweepSpec

    cfg = tmp_path / "train.yaml"
    cfg.write_text("name: t\n")
    sw = safe_load(f"{{name: s, kind: diffusion, config: {cfg}, grid: {{training.lr: [0.001, 1e-3]}}}}")
    with pytest.raises(Exception, match="same value"):
        SweepSpec.model_validate(sw)


def test_hf_load_never_writes_its_cache_into_a_dataset(made, tmp_path):
    pytest.importorskip("datasets")
    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset

    ds = _copy(made, tmp_path)
    with pytest.raises(DatasetError, match="cache_dir"):
        load_dataset(ds, cache_dir=str(ds / "train" / "cache"))
    assert not (ds / "train" / "cache").exists()
    assert foreign_names(ds) == []


# ------------------------------------------------------------------------------------------------
# a dataset writer's API and a training config's dataset.root never write inside another dataset
# ------------------------------------------------------------------------------------------------

def test_no_dataset_is_generated_or_exported_inside_another(made, tmp_path):
    from mosaic.dataset import generate
    from mosaic.errors import DatasetError
    from mosaic.export import export
    from mosaic.lab.config import DatasetSection
    from mosaic.lab.data import resolve_dataset
    from mosaic.spec import load_spec

    ds = _copy(made, tmp_path)
    with pytest.raises(DatasetError, match="inside the mosaic dataset"):
        generate(load_spec(made[0]), ds / "inner")
    with pytest.raises(DatasetError, match="inside the mosaic dataset"):
        export(made[1], "parquet", ds / "train" / "p")
    section = DatasetSection.model_validate({"spec": str(made[0]), "root": str(ds)})
    with pytest.raises(DatasetError, match="dataset.root"):
        resolve_dataset(section, generate=False)  # a dry run names it too
    assert foreign_names(ds) == []


def test_a_samples_folder_made_again_never_deletes_an_audit_or_notes_put_into_it(tmp_path):
    import json

    from mosaic.errors import DatasetError
    from mosaic.lab.diffusion.scoring import refuse_other_samples

    out = tmp_path / "samples"
    (out / "images").mkdir(parents=True)
    key = {"splits": ["test_ood"], "n_per_combination": 1, "seed": 0}
    (out / "sampling.json").write_text(json.dumps(key))
    (out / "metrics.json").write_text("{}")
    refuse_other_samples(out, key)  # its own files only: made again
    (out / "audit").mkdir()
    (out / "audit" / "audit.json").write_text('{"marks": []}')  # `mosaic audit SAMPLES` writes its page and marks here
    with pytest.raises(DatasetError, match="audit"):
        refuse_other_samples(out, key)


# ------------------------------------------------------------------------------------------------
# 36: a check of a billion renders ran until killed; every check size is bounded (10**6, as `evaluator check --n`)
# ------------------------------------------------------------------------------------------------

def test_every_evaluator_check_size_is_bounded(tmp_path):
    from mosaic.errors import ConfigError
    from mosaic.evaluation.learned import LearnedConfig
    from mosaic.lab.config import load_config
    from mosaic.lab.diffusion import DiffusionConfig

    root = Path(__file__).resolve().parents[1]
    spec = str(root / "experiments" / "specs" / "count.yaml")
    res = runner.invoke(app, ["evaluate", str(tmp_path), "--spec", spec, "--check-n", "1000000000"])
    assert res.exit_code == 2 and "Traceback" not in res.output and "--check-n" in res.output
    res = runner.invoke(app, ["evaluator", "train", spec, "--out", str(tmp_path / "ev"), "--check-n", "1000000000"])
    assert res.exit_code == 2 and "--check-n" in res.output and not (tmp_path / "ev").exists()
    with pytest.raises(ConfigError, match=r"evaluation\.check_n"):
        load_config(DiffusionConfig, root / "experiments/train/quickstart_cpu.yaml", ["evaluation.check_n=1000000000"])
    with pytest.raises(Exception, match="check_n"):
        LearnedConfig(check_n=10**9)


def test_a_folder_or_pipe_at_metadata_jsonl_is_named_as_such_not_as_missing(tmp_path):
    import os

    from mosaic.errors import MosaicError
    from mosaic.evaluation.folder import read_folder

    for i, make in enumerate((lambda p: p.mkdir(), lambda p: os.mkfifo(p))):
        d = tmp_path / f"f{i}"
        d.mkdir()
        make(d / "metadata.jsonl")
        with pytest.raises(MosaicError, match="is not a regular file"):
            read_folder(d)
    (tmp_path / "f2").mkdir()
    with pytest.raises(MosaicError, match="metadata.jsonl is missing"):
        read_folder(tmp_path / "f2")


def test_a_path_name_over_255_bytes_is_named_by_every_reader_of_the_python_api(tmp_path):
    # round 14's leftover: the CLI named it, MosaicDataset / StreamingDataset / hf_load raised a bare OSError
    from mosaic import hf_load
    from mosaic.errors import MosaicError
    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    long = str(tmp_path / ("x" * 300))
    for read in (MosaicDataset, StreamingDataset, hf_load.load_dataset):
        with pytest.raises(MosaicError, match="File name too long.*255 bytes"):
            read(long)
