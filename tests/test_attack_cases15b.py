"""Hostile cases of a fifteenth attack (issue 23), second part: claims in rows, new-user stumbles, runs.

What broke, and the mechanism that closes it:

- **A prediction row whose verdict contradicts itself** (``correct: true`` with a concept read
  otherwise) was shown on the audit page as the evaluator's verdict "right", and the person's marks
  counted against it: :func:`mosaic.audit.read_rows` refuses it, naming the line.
- **The wrong kind of folder** (a run given to ``verify`` / ``export`` / ``evaluate`` / ``report``, a
  dataset to ``evaluate`` or ``report``) was answered with a fix that writes into it (``mosaic
  generate SPEC --out RUN``, ``mosaic sweep ... --out DS``): :func:`mosaic.folder_kinds.kind_hint`
  names what the folder is and where the expected input lies.
- **``mosaic train CONFIG``** without the family said "No such command": the train group names the
  two commands.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


@pytest.fixture(scope="module")
def scored_run(tmp_path_factory):
    from tests.test_audit import scored_folder

    root = tmp_path_factory.mktemp("a15b")
    scored_folder(root / "samples" / "test_ood_best")
    return root


def _edit_rows(folder: Path, edit) -> int:
    p = folder / "samples" / "test_ood_best" / "predictions.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    k = edit(rows)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return k


# ------------------------------------------------------------------------------------------------
# (d) a prediction row's verdict is a function of the row
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flip", [True, False])
def test_a_prediction_row_whose_verdict_contradicts_its_reads_is_refused(scored_run, tmp_path, flip):
    """(d) `correct` flipped against the row's own read and intended values: audit refuses it, naming the line; no page."""
    run = tmp_path / "run"
    shutil.copytree(scored_run, run)

    def edit(rows):
        k = next(i for i, r in enumerate(rows) if r["correct"] is not flip)
        rows[k]["correct"] = flip
        return k

    k = edit_line = _edit_rows(run, edit)
    r = runner.invoke(app, ["audit", str(run), "--out", str(tmp_path / "aud")])
    _clean_exit_2(r, f"predictions.jsonl line {edit_line + 1}", f"correct = {str(flip).lower()} contradicts")
    assert not (tmp_path / "aud" / "audit.html").exists() and k >= 0


def test_every_row_the_scorer_writes_passes_the_verdict_check(scored_run, tmp_path):
    """(d) No false alarm: right, wrong and abstained rows as `prediction_rows` writes them make the page."""
    rows = [json.loads(x) for x in (scored_run / "samples" / "test_ood_best" / "predictions.jsonl").read_text().splitlines()]
    assert {r["correct"] for r in rows} == {True, False}
    r = runner.invoke(app, ["audit", str(scored_run), "--out", str(tmp_path / "aud")])
    assert r.exit_code == 0, r.output


# ------------------------------------------------------------------------------------------------
# (h) the wrong kind of folder is named for what it is
# ------------------------------------------------------------------------------------------------

@pytest.fixture
def kinds(tmp_path):
    """A run folder, a dataset and a samples folder, as far as their marker files go."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"id": "x"}')
    (run / "config.yaml").write_text("name: t\n")
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "manifest.json").write_text("{}")
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "sampling.json").write_text("{}")
    return run, ds, samples


def test_a_run_folder_given_as_a_dataset_is_named_a_run(kinds):
    """(h) verify / export / MosaicDataset of a run folder: "a training run folder", never "mosaic generate SPEC --out RUN"."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    run, _, samples = kinds
    for args in (["verify", str(run)], ["export", str(run), "-f", "parquet", "--out", str(run.parent / "pq")]):
        r = runner.invoke(app, args)
        _clean_exit_2(r, "is a training run folder", "dataset.json")
        assert "mosaic generate" not in r.output
    _clean_exit_2(runner.invoke(app, ["verify", str(samples)]), "is a samples folder")
    with pytest.raises(DatasetError, match="training run folder"):
        MosaicDataset(run, "train")


def test_a_run_or_dataset_given_to_evaluate_names_where_its_images_lie(kinds):
    """(h) evaluate RUN points at RUN/samples/NAME, evaluate DS at DS/test_ood (it said only that metadata.jsonl is missing)."""
    from tests.conftest import TINY_COUNT_SPEC as SPEC

    run, ds, _ = kinds
    spec = run.parent / "spec.yaml"
    spec.write_text(SPEC)
    _clean_exit_2(runner.invoke(app, ["evaluate", str(run), "--spec", str(spec)]), "training run folder", "samples/NAME",
                  f"mosaic sample {run}")
    _clean_exit_2(runner.invoke(app, ["evaluate", str(ds), "--spec", str(spec)]), "is a mosaic dataset", f"{ds}/test_ood")


def test_a_run_samples_or_dataset_given_to_report_is_never_told_to_sweep_into_it(kinds):
    """(h) report of a run, a samples folder or a dataset: named for what it is; no `mosaic sweep --out` into it is suggested."""
    for folder, said in zip(kinds, ("training run folder", "mosaic dataset", "samples folder")):
        r = runner.invoke(app, ["report", str(folder)])
        _clean_exit_2(r, said, "not a sweep folder")
        assert "--out" not in r.output and not (folder / "report").exists()


def test_a_folder_of_no_kind_keeps_its_first_message(tmp_path):
    """(h) No false hint: an empty folder is still "not a mosaic dataset" / "has no results.csv"."""
    (tmp_path / "e").mkdir()
    _clean_exit_2(runner.invoke(app, ["verify", str(tmp_path / "e")]), "is not a mosaic dataset")
    _clean_exit_2(runner.invoke(app, ["report", str(tmp_path / "e")]), "has no results.csv")


def test_train_given_a_config_without_the_family_names_the_commands(tmp_path, monkeypatch):
    """(h) `mosaic train CONFIG` said "No such command 'CONFIG'": it names `train diffusion` and `train transformer`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.yaml").write_text("name: t\n")
    _clean_exit_2(runner.invoke(app, ["train", "my.yaml"]), "is a config, not a trainer", "train transformer my.yaml")
    r = runner.invoke(app, ["train", "nothing"])
    assert r.exit_code == 2 and "No such command" in r.output


# ------------------------------------------------------------------------------------------------
# (b) / (d) a run's exported weights and record
# ------------------------------------------------------------------------------------------------


def _run_copy(drun, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    return run


class _Planted:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ.get('A15_MARK', '/nonexistent/x')}",))


def _sample(run: Path, out: Path):
    return runner.invoke(app, ["sample", str(run), "--out", str(out), "--steps", "1", "-k", "1", "--device", "cpu", "--no-score"])


def test_a_pickle_planted_beside_a_runs_weights_is_never_loaded(drun, tmp_path, monkeypatch):
    """(b) `.bin` pickles planted in best/ beside the safetensors, then in place of them: never unpickled (no mark file)."""
    mark = tmp_path / "PWNED"
    monkeypatch.setenv("A15_MARK", str(mark))
    run = _run_copy(drun, tmp_path)
    for name in ("best/backbone/diffusion_pytorch_model.bin", "best/conditioner.bin", "best/pytorch_model.bin"):
        (run / name).write_bytes(pickle.dumps(_Planted()))
    r = _sample(run, tmp_path / "s1")
    assert r.exit_code == 0, r.output
    (run / "best" / "backbone" / "diffusion_pytorch_model.safetensors").unlink()
    _clean_exit_2(_sample(run, tmp_path / "s2"), "best")
    assert not mark.exists()


@pytest.mark.parametrize("text, said", [('{"id": ["x"]}', "no run id"), ('{"id": 5}', "no run id"), ("[]", "not a mapping")])
def test_a_run_record_of_another_shape_is_damage_for_sample(drun, tmp_path, text, said):
    """(d) run.json whose id is a list, a number, or which is a list: named, exit 2, no samples."""
    run = _run_copy(drun, tmp_path)
    (run / "run.json").write_text(text)
    _clean_exit_2(_sample(run, tmp_path / "s"), "run.json is damaged", said)
    assert not (tmp_path / "s").exists()


def test_a_weights_record_claiming_another_size_or_no_files_is_refused(drun, tmp_path):
    """(d) weights.json whose conditioner size is 10^30, or whose files are a string: refused by name, exit 2."""
    run = _run_copy(drun, tmp_path)
    p = run / "best" / "weights.json"
    rec = json.loads(p.read_text())
    rec["files"]["conditioner.safetensors"]["bytes"] = 10**30
    p.write_text(json.dumps(rec))
    _clean_exit_2(_sample(run, tmp_path / "s1"), "conditioner.safetensors is damaged or replaced")
    rec["files"] = "x"
    p.write_text(json.dumps(rec))
    _clean_exit_2(_sample(run, tmp_path / "s2"), "weights.json is damaged")


def test_sample_never_writes_inside_the_dataset_or_the_runs_weights(drun, tmp_path):
    """(c) sample --out inside the run's dataset or its best/: refused before anything is written."""
    run, data = drun
    _clean_exit_2(_sample(run, data / "train" / "x"), "lies inside the mosaic dataset")
    _clean_exit_2(_sample(run, run / "best" / "x"), "the weights of the training run")
    assert not (data / "train" / "x").exists() and not (run / "best" / "x").exists()


def test_sample_into_a_folder_holding_a_persons_files_keeps_them(drun, tmp_path):
    """(c) sample --out a person's folder (or a link to one): refused, the files kept."""
    run, _ = drun
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    os.symlink(mine, tmp_path / "lnk")
    _clean_exit_2(_sample(run, mine), "sampling.json")
    _clean_exit_2(_sample(run, tmp_path / "lnk"), "symbolic link")  # a link at --out: refused outright (attack round 23)
    assert os.listdir(mine) == ["notes.txt"]


def test_sample_into_a_folder_whose_name_holds_a_newline_finishes(drun, tmp_path):
    """(g) An output name with a newline and non-ASCII letters: written, exit 0 (no traceback in the printed path)."""
    out = tmp_path / "nl\nname-é"
    r = _sample(drun[0], out)
    assert r.exit_code == 0, r.output
    assert (out / "metadata.jsonl").is_file()


# ------------------------------------------------------------------------------------------------
# (a) / (c) mosaic.hf_load: the rows returned are the files the quick check read
# ------------------------------------------------------------------------------------------------

def test_hf_load_rows_keep_their_images_after_the_folder_is_regenerated(tmp_path):
    """(a/c) HF's imagefolder rows held each image's path, decoded on access: after `generate --overwrite` (another seed)
    the loaded rows gave the old captions with the new images. The images are embedded under the lock."""
    pytest.importorskip("datasets")
    import numpy as np

    from mosaic.hf_load import load_dataset
    from tests.conftest import TINY_COUNT_SPEC as SPEC

    (tmp_path / "a.yaml").write_text(SPEC)
    (tmp_path / "b.yaml").write_text(SPEC.replace("name: t\n", "name: t\nseed: 9\n"))
    ds = tmp_path / "ds"
    assert runner.invoke(app, ["generate", str(tmp_path / "a.yaml"), "--out", str(ds)]).exit_code == 0
    rows = load_dataset(ds, split="train", cache_dir=str(tmp_path / "hf"))
    before = [np.asarray(rows[i]["image"]) for i in range(len(rows))]
    r = runner.invoke(app, ["generate", str(tmp_path / "b.yaml"), "--out", str(ds), "--overwrite"])
    assert r.exit_code == 0, r.output
    from PIL import Image

    assert not np.array_equal(np.asarray(Image.open(ds / "train" / "images" / "000000.png").convert("RGB")), before[0])
    assert all(np.array_equal(np.asarray(rows[i]["image"]), before[i]) for i in range(len(rows)))
    shutil.rmtree(ds)  # a moved or deleted folder: the rows still hold their images
    assert np.array_equal(np.asarray(rows[0]["image"]), before[0])


def test_hf_load_refuses_streaming(tmp_path):
    """(a/c) streaming=True would read the files while iterated, after the check and without the lock: refused by name."""
    pytest.importorskip("datasets")
    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset

    with pytest.raises(DatasetError, match="streaming=True is refused"):
        load_dataset(tmp_path, streaming=True)


# ------------------------------------------------------------------------------------------------
# (g) a full disk under audit and evaluate --out: named, and the rerun finishes
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nth", [1, 2])
def test_a_full_disk_under_audit_and_evaluate_is_named_and_the_rerun_finishes(scored_run, tmp_path, monkeypatch, nth):
    """(g) ENOSPC at the nth file the atomic writer opens: exit 2 naming the full disk, no temporary file; the rerun exits 0."""
    import errno

    import mosaic.io
    from tests.conftest import TINY_COUNT_SPEC as SPEC

    real = os.fdopen
    seen = {"k": 0}

    def fdopen(fd, mode="r", *a, **k):
        if "w" in mode:
            seen["k"] += 1
            if seen["k"] == nth:
                os.close(fd)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, mode, *a, **k)

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    assert runner.invoke(app, ["generate", str(spec), "--out", str(tmp_path / "ds")]).exit_code == 0
    for args, out in ((["audit", str(scored_run), "--out", str(tmp_path / "aud")], tmp_path / "aud"),
                      (["evaluate", str(tmp_path / "ds" / "test_ood"), "--spec", str(tmp_path / "ds"), "--check-n", "0",
                        "-o", str(tmp_path / "ev")], tmp_path / "ev")):
        seen["k"] = 0
        monkeypatch.setattr(mosaic.io.os, "fdopen", fdopen)
        r = runner.invoke(app, args)
        monkeypatch.setattr(mosaic.io.os, "fdopen", real)
        _clean_exit_2(r, "the disk is full")
        assert not [p.name for p in out.rglob("*") if ".tmp" in p.name] if out.exists() else True
        r = runner.invoke(app, args)
        assert r.exit_code == 0, r.output


# ------------------------------------------------------------------------------------------------
# (d) an audit or scored samples reached through a link are another folder's
# ------------------------------------------------------------------------------------------------

def _sweep_with_audit(tmp_path: Path, scored_run: Path, link: bool) -> Path:
    import yaml

    aud = tmp_path / "elsewhere" / "audit"
    r = runner.invoke(app, ["audit", str(scored_run), "--out", str(aud)])
    assert r.exit_code == 0, r.output
    items = json.loads((aud / "items.json").read_text())
    (aud / "audit.json").write_text(json.dumps({"version": 1, "audit_id": items["meta"]["audit_id"], "marks": []}))
    sw = tmp_path / "sw"
    (sw / "trials" / "t1" / "run").mkdir(parents=True)
    (sw / "sweep.yaml").write_text(yaml.safe_dump({"name": "fs", "kind": "diffusion", "config": "x.yaml"}))
    (sw / "results.csv").write_text("trial,status,seed,held_out.joint,seen.joint\nt1,done,0,0.5,0.9\n")
    if link:
        os.symlink(aud, sw / "trials" / "t1" / "run" / "audit")
    else:
        shutil.copytree(aud, sw / "trials" / "t1" / "run" / "audit")
    return sw


@pytest.mark.parametrize("link", [True, False])
def test_a_sweep_report_counts_only_its_own_audits_never_one_reached_through_a_link(scored_run, tmp_path, link):
    """(d) RUN/audit as a link to another folder's audit: its agreement was shown as this sweep's; now left out (a copy counts)."""
    from mosaic.audit import find_audit_files
    from mosaic.report import make_report

    sw = _sweep_with_audit(tmp_path, scored_run, link)
    assert (find_audit_files(sw) == []) is link
    page = make_report(sw, warn=lambda m: None).read_text()
    assert ("Human audit of the evaluator" in page) is not link


def test_an_audit_never_takes_prediction_rows_through_a_link(scored_run, tmp_path):
    """(d) A predictions.jsonl (or metadata.jsonl) that is a link to another samples folder's rows: not this run's scored samples."""
    run = tmp_path / "run"
    s = run / "samples" / "mine"
    s.mkdir(parents=True)
    src = scored_run / "samples" / "test_ood_best"
    shutil.copytree(src / "images", s / "images")
    (s / "metadata.jsonl").write_bytes((src / "metadata.jsonl").read_bytes())
    os.symlink(src / "predictions.jsonl", s / "predictions.jsonl")
    _clean_exit_2(runner.invoke(app, ["audit", str(run), "--out", str(tmp_path / "aud")]), "holds no scored samples")
    (s / "predictions.jsonl").unlink()
    (s / "predictions.jsonl").write_bytes((src / "predictions.jsonl").read_bytes())
    (s / "metrics.json").write_bytes((src / "metrics.json").read_bytes())  # the whole evaluation copied: audited
    assert runner.invoke(app, ["audit", str(run), "--out", str(tmp_path / "aud")]).exit_code == 0


# ------------------------------------------------------------------------------------------------
# (c) evaluator train --out never replaces a person's files
# ------------------------------------------------------------------------------------------------

def test_evaluator_train_never_replaces_a_persons_config_or_weights(tmp_path):
    """(c) --out holding a config.json (or model.safetensors) it did not write: refused, kept; its own folder is retrained."""
    from tests.conftest import TINY_COUNT_SPEC as SPEC

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "project"}')
    (mine / "model.safetensors").write_bytes(b"mine")
    args = ["--steps", "1", "--n-train", "4", "--check-n", "0"]
    _clean_exit_2(runner.invoke(app, ["evaluator", "train", str(spec), "--out", str(mine), *args]), "did not write", "config.json")
    assert (mine / "config.json").read_text() == '{"my": "project"}' and (mine / "model.safetensors").read_bytes() == b"mine"
    own = tmp_path / "own"
    for _ in range(2):  # a new folder, then a retrain of its own
        r = runner.invoke(app, ["evaluator", "train", str(spec), "--out", str(own), *args])
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize("where", ["split", "run"])
def test_a_training_config_whose_dataset_path_is_a_split_or_a_run_names_it(drun, tmp_path, where):
    """(h) dataset.path at DS/train or at a run folder said to generate a dataset there: it names the dataset / the run."""
    import yaml

    run, data = drun
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["dataset"] = {"path": str(data / "train" if where == "split" else run)}
    cfg["out"] = str(tmp_path / "new")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    r = runner.invoke(app, ["train", "diffusion", str(p), "--dry-run"])
    _clean_exit_2(r, "dataset.path", "a folder inside one" if where == "split" else "a training run folder")
    assert "mosaic generate" not in r.output and not (tmp_path / "new").exists()


def test_evaluate_copies_of_a_runs_samples_must_be_the_dataset_the_run_trained_on(drun, tmp_path):
    """(a) --copies given a dataset of the same spec and another seed measured near-copies of images the run never saw,
    exit 0: samples under RUN/samples/ are checked against RUN/dataset.json (a byte copy of the run's dataset passes)."""
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC as D_SPEC

    run, data = drun
    samples = next(p for p in (run / "samples").iterdir() if (p / "metadata.jsonl").is_file())
    other = tmp_path / "seed7"
    generate(parse_spec({**D_SPEC, "seed": 7}), other)
    args = ["evaluate", str(samples), "--spec", str(data), "--check-n", "0", "--copies"]
    _clean_exit_2(runner.invoke(app, args + [str(other), "-o", str(tmp_path / "e1")]), "is not the dataset the run",
                  f"give the run's own dataset ({data.resolve()})")
    assert not (tmp_path / "e1" / "metrics.json").exists()
    shutil.copytree(data, tmp_path / "copy")
    r = runner.invoke(app, args + [str(tmp_path / "copy"), "-o", str(tmp_path / "e2")])
    assert r.exit_code == 0, r.output


def test_evaluate_copies_reads_a_parquet_training_set_as_its_imagefolder_twin(tmp_path):
    """(h/a) --copies of a Parquet dataset (a run trains on either form) said it had "no test_id, test or val split":
    its rows' PNG bytes are read, page bounds first, and give the numbers of the imagefolder form."""
    from tests.conftest import TINY_COUNT_SPEC as SPEC

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    ds, pq = tmp_path / "ds", tmp_path / "pq"
    assert runner.invoke(app, ["generate", str(spec), "--out", str(ds)]).exit_code == 0
    assert runner.invoke(app, ["export", str(ds), "-f", "parquet", "--out", str(pq)]).exit_code == 0
    got = {}
    for src in (ds, pq):
        out = tmp_path / f"ev-{src.name}"
        r = runner.invoke(app, ["evaluate", str(ds / "test_id"), "--spec", str(ds), "--check-n", "0", "--copies", str(src), "-o", str(out)])
        assert r.exit_code == 0, r.output
        got[src.name] = {k: v for k, v in json.loads((out / "metrics.json").read_text())["copies"].items() if k != "dataset"}
    assert got["ds"] == got["pq"] and got["pq"]["train"]["n"] == 8


@pytest.mark.parametrize("device, said", [("cuda:99", "this machine has no such device"), ("bogus", "is not a device")])
def test_sample_and_analyze_on_a_device_the_machine_lacks_are_named(drun, tmp_path, device, said):
    """(g) `sample --device cuda:99` / `bogus` (and analyze) were torch AssertionError / RuntimeError tracebacks: named, exit 2."""
    run, _ = drun
    r = runner.invoke(app, ["sample", str(run), "--device", device, "--steps", "1", "-k", "1", "--no-score", "--out", str(tmp_path / "s")])
    _clean_exit_2(r, "--device", said)
    assert not (tmp_path / "s").exists()
    _clean_exit_2(runner.invoke(app, ["analyze", str(run), "--device", device, "--no-write"]), "--device", said)


@pytest.mark.parametrize("where", ["dataset", "run", "missing", "file"])
def test_a_latent_path_that_is_no_autoencoder_is_named_before_training(drun, tmp_path, where):
    """(b/g) model.latent.path at a dataset, a run, nothing or a file: named (no vae/), nothing loaded, no run folder made."""
    import yaml

    run, data = drun
    target = {"dataset": data, "run": run, "missing": tmp_path / "nope", "file": run / "config.yaml"}[where]
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    cfg["model"] = {**cfg["model"], "latent": {"path": str(target)}}
    cfg["out"] = str(tmp_path / "new")
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(cfg))
    r = runner.invoke(app, ["train", "diffusion", str(p), "--set", "model.unet.block_out_channels=[8]",
                            "--set", "model.unet.cross_attention=[true]"])
    _clean_exit_2(r, "model.latent.path", "holds no trained autoencoder")
    assert not (tmp_path / "new").exists()


def test_a_file_standing_at_a_runs_samples_folder_is_kept(drun, tmp_path):
    """(c) A file at RUN/samples was deleted to make the samples folder: refused by name, kept."""
    run = _run_copy(drun, tmp_path)
    shutil.rmtree(run / "samples")
    (run / "samples").write_text("mine")
    r = runner.invoke(app, ["sample", str(run), "--steps", "1", "-k", "1", "--device", "cpu", "--no-score"])
    _clean_exit_2(r, "is a file where mosaic makes its folder samples/")
    assert (run / "samples").read_text() == "mine"
