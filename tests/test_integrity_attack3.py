"""Hostile cases of a third independent attack on the data path (issue 23), each at its mechanism:

- fixed temporary names (``train/.metadata.jsonl.tmp``, ``<samples>.tmp``, ``final.tmp``,
  ``checkpoint-N.tmp``) with ``rmtree(ignore_errors=True)`` wrote through a planted link, or
  blocked every rerun: one mechanism now (``mosaic.io.new_temp_dir`` / ``atomic_dir`` /
  ``remove_path`` / ``clear_temps``), tested on the helpers and on each writer;
- ``mosaic audit`` embedded any file a ``predictions.jsonl`` named, and crashed on a damaged one;
- ``audit --import`` believed the verdict a mark states;
- ``mosaic evaluate`` scored one image file for two records;
- ``--out`` inside a mosaic dataset wrote into it;
- HF loading of a folder whose path holds glob characters read another folder's rows.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import DatasetError, MosaicError
from mosaic.io import atomic_dir, clear_temps, dataset_around, new_temp_dir, output_dir_problem, remove_path

ROOT = Path(__file__).resolve().parents[1]

SPEC = {
    "name": "atk", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square", "triangle"]}},
    "objects": [{"name": "obj", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.5, "rotation": 0}],
    "holdout": {"concepts": ["color", "shape"], "rule": {"kind": "coverage", "k": 2}},
    "splits": {"train": 2, "val": 1, "test_id": 1, "test_ood": 1, "per": "combination"},
}


def _gen(out: Path, **over) -> Path:
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    generate(parse_spec({**SPEC, **over}), out)
    return out


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious data")
    return v


@pytest.fixture
def victim_dir(tmp_path):
    d = tmp_path / "outside"
    d.mkdir()
    (d / "keep").write_text("precious")
    (d / "metadata.jsonl").write_text("precious")
    return d


def _untouched(d: Path) -> bool:
    return sorted(p.name for p in d.iterdir()) == ["keep", "metadata.jsonl"] and (d / "metadata.jsonl").read_text() == "precious"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return _gen(tmp_path_factory.mktemp("atk") / "ds")


# ------------------------------------------------------------------------------------------------
# the mechanism: unique temporary folders, removal that never follows a link
# ------------------------------------------------------------------------------------------------

def test_remove_path_removes_a_link_never_its_target(tmp_path, victim_dir, victim):
    for target in (victim_dir, victim):
        link = tmp_path / "link"
        os.symlink(target, link)
        remove_path(link)
        assert not os.path.lexists(link)
    assert _untouched(victim_dir) and victim.read_text() == "precious data"
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    os.symlink(victim_dir, real / "sub" / "inner")  # a link inside a real folder: removed, not followed
    remove_path(real)
    assert not real.exists() and _untouched(victim_dir)
    remove_path(tmp_path / "missing")  # nothing there: no error


def test_atomic_dir_replaces_a_link_at_its_target_and_leaves_nothing_on_error(tmp_path, victim_dir):
    dest = tmp_path / "final"
    os.symlink(victim_dir, dest)
    with atomic_dir(dest) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".final.tmp") and not tmp.is_symlink()
        (tmp / "model.safetensors").write_bytes(b"w")
    assert dest.is_dir() and not dest.is_symlink() and (dest / "model.safetensors").read_bytes() == b"w"
    assert _untouched(victim_dir)
    with pytest.raises(OSError):
        with atomic_dir(dest) as tmp:
            (tmp / "half").write_bytes(b"x")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final", "outside"]  # no temporary folder left
    assert (dest / "model.safetensors").read_bytes() == b"w"  # the old folder untouched


def test_temporary_folders_are_unique_and_clear_temps_removes_only_its_own_names(tmp_path, victim_dir, victim):
    dest = tmp_path / "checkpoint-0000006"
    a, b = new_temp_dir(dest), new_temp_dir(dest)
    assert a != b and a.is_dir() and b.is_dir()
    os.symlink(victim_dir, tmp_path / "checkpoint-0000006.tmp")  # the fixed name older versions used
    os.link(victim, tmp_path / ".checkpoint-0000006.tmp")
    other = new_temp_dir(tmp_path / "checkpoint-0000007")
    removed = clear_temps(dest)
    assert {p.name for p in removed} == {a.name, b.name, "checkpoint-0000006.tmp", ".checkpoint-0000006.tmp"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([other.name, "outside", "victim.txt"])
    assert _untouched(victim_dir) and victim.read_text() == "precious data"


# ------------------------------------------------------------------------------------------------
# generate's finalize
# ------------------------------------------------------------------------------------------------

def _unfinished_copy(dataset: Path, to: Path) -> Path:
    shutil.copytree(dataset, to, symlinks=True)
    man = json.loads((to / "manifest.json").read_text())
    man["status"] = "incomplete"  # the state after an interruption between the last shard and the manifest
    (to / "manifest.json").write_text(json.dumps(man))
    return to


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_link_at_finalize_temporary_name_is_removed_never_written_through(tmp_path, dataset, victim, kind):
    from mosaic.verify import verify as verify_dataset

    ds = _unfinished_copy(dataset, tmp_path / "ds")
    tmp = ds / "train" / ".metadata.jsonl.tmp"
    (os.symlink if kind == "symlink" else os.link)(victim, tmp)
    before = (dataset / "train" / "metadata.jsonl").read_bytes()
    _gen(ds)
    assert victim.read_text() == "precious data"
    meta = ds / "train" / "metadata.jsonl"
    assert not meta.is_symlink() and os.stat(meta).st_nlink == 1 and os.stat(meta).st_ino != os.stat(victim).st_ino
    assert meta.read_bytes() == before  # the same bytes as a clean generation
    assert not os.path.lexists(tmp) and not [p for p in (ds / "train").iterdir() if ".tmp" in p.name]
    assert verify_dataset(ds, deep=True).ok


def test_a_full_disk_in_finalize_leaves_no_temporary_file(tmp_path, dataset, monkeypatch):
    import mosaic.dataset as D

    ds = _unfinished_copy(dataset, tmp_path / "ds")
    real = D._part_files

    def full(parts, split):
        yield from real(parts, split)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(D, "_part_files", full)
    with pytest.raises((OSError, MosaicError)):
        _gen(ds)
    assert not [p for p in ds.rglob("*") if ".tmp" in p.name], "a temporary file outlived the failure"
    assert (ds / "train" / "metadata.jsonl").read_bytes() == (dataset / "train" / "metadata.jsonl").read_bytes()
    monkeypatch.setattr(D, "_part_files", real)
    _gen(ds)  # the rerun finishes
    assert json.loads((ds / "manifest.json").read_text())["status"] == "complete"


# ------------------------------------------------------------------------------------------------
# train (checkpoints, best/final) and sample
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ck_dataset(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_integrity_checkpoints import SPEC as CK_SPEC

    root = tmp_path_factory.mktemp("ck") / "data"
    generate(parse_spec(CK_SPEC), root)
    return root


def test_a_link_at_a_checkpoint_temporary_name_never_blocks_the_run(tmp_path, ck_dataset, victim_dir):
    from mosaic.lab.run import run
    from tests.test_integrity_checkpoints import _cfg, _Family

    out = tmp_path / "run"
    run(_cfg(out, ck_dataset, steps=2), _Family(), say=lambda s: None)
    for name in ("DONE", "metrics.json"):
        (out / name).unlink()
    shutil.rmtree(out / "checkpoints" / "checkpoint-0000002")  # interrupted before its last checkpoint
    os.symlink(victim_dir, out / "checkpoints" / "checkpoint-0000002.tmp")  # the old fixed temporary name
    os.symlink(victim_dir, out / "checkpoints" / "checkpoint-0000002")  # and the final name
    m = run(_cfg(out, ck_dataset, steps=2), _Family(), say=lambda s: None)  # used to stop with "File exists" on every rerun
    assert m["train"]["resumed_at"] == 1 and (out / "DONE").is_file()
    ck = out / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["checkpoint-0000001", "checkpoint-0000002"]
    assert not (ck / "checkpoint-0000002").is_symlink() and (ck / "checkpoint-0000002" / "checkpoint.json").is_file()
    assert _untouched(victim_dir)


@pytest.fixture(scope="module")
def diffusion_run(drun):
    """The module's finished 2-step diffusion run and its dataset (tests/conftest.py ``drun``)."""
    return drun


def test_a_link_at_the_final_weights_temporary_name_is_never_written_through(tmp_path, diffusion_run, victim_dir):
    from tests.test_diffusion import config
    from mosaic.lab.diffusion import run_diffusion

    src, data = diffusion_run
    out = tmp_path / "run"
    shutil.copytree(src, out, symlinks=True)
    for name in ("DONE", "metrics.json"):
        (out / name).unlink(missing_ok=True)
    shutil.rmtree(out / "final")
    shutil.rmtree(out / "checkpoints" / "checkpoint-0000002")
    os.symlink(victim_dir, out / "final.tmp")
    run_diffusion(config(out, data, steps=2, checkpoint_every=1), say=lambda s: None)
    assert _untouched(victim_dir)
    assert (out / "final").is_dir() and not (out / "final").is_symlink() and any((out / "final").iterdir())
    assert not os.path.lexists(out / "final.tmp")


def test_sample_never_writes_through_a_link_at_its_temporary_name(tmp_path, diffusion_run, victim_dir):
    src, _ = diffusion_run
    out = tmp_path / "run"
    shutil.copytree(src, out, symlinks=True)
    s = out / "samples" / "s"
    s.parent.mkdir(exist_ok=True)
    os.symlink(victim_dir, s.parent / "s.tmp")  # the fixed temporary name older versions used
    r = CliRunner().invoke(app, ["sample", str(out), "--split", "test_ood", "--n-per-combination", "1", "--guidance", "1",
                                 "--checkpoint", "final", "--no-score", "--out", str(s)])
    assert r.exit_code == 0, r.output
    assert _untouched(victim_dir)
    assert s.is_dir() and not s.is_symlink() and (s / "metadata.jsonl").is_file()
    assert not [p.name for p in s.parent.iterdir() if ".tmp" in p.name]  # the planted link removed, no temporary folder left


# ------------------------------------------------------------------------------------------------
# audit: only the samples folder's own images; damaged predictions; verdicts are the audit's own
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def audit_src(tmp_path_factory):
    from tests.test_audit import scored_folder

    root = tmp_path_factory.mktemp("audit") / "run"
    scored_folder(root / "samples" / "a", n=6)
    (root / "config.yaml").write_text("name: r\n")
    return root


def _edit_predictions(root: Path, edit) -> Path:
    p = root / "samples" / "a" / "predictions.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    edit(rows)
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


@pytest.mark.parametrize("how", ["absolute", "dotdot", "symlink", "symlinked_folder", "hardlink", "not_an_image", "bomb", "fifo"])
def test_audit_embeds_only_the_samples_folders_own_images(tmp_path, audit_src, victim, how):
    root = tmp_path / "run"
    shutil.copytree(audit_src, root)
    images = root / "samples" / "a" / "images"
    first = images / "000000.png"
    if how == "absolute":
        _edit_predictions(root, lambda rows: rows[0].update(file_name=str(victim)))
    elif how == "dotdot":
        _edit_predictions(root, lambda rows: rows[0].update(file_name="../../../victim.txt"))
    elif how == "symlink":
        first.unlink()
        os.symlink(victim, first)
    elif how == "symlinked_folder":
        (tmp_path / "elsewhere").mkdir()
        shutil.copy(victim, tmp_path / "elsewhere" / "000000.png")
        os.symlink(tmp_path / "elsewhere", root / "samples" / "a" / "img2")
        _edit_predictions(root, lambda rows: rows[0].update(file_name="img2/000000.png"))
    elif how == "hardlink":
        first.unlink()
        os.link(victim, first)
    elif how == "not_an_image":
        first.write_text("root:x:0:0:root:/root:/bin/bash\n")
    elif how == "bomb":
        from PIL import Image

        Image.new("1", (5000, 5000)).save(first)  # a few KB that decode to 25 M pixels
    else:
        first.unlink()
        os.mkfifo(first)
    from mosaic.audit import make_audit

    with pytest.raises(MosaicError) as e:
        make_audit(root, n=6)
    assert "predictions.jsonl line 1" in str(e.value)
    r = CliRunner().invoke(app, ["audit", str(root), "--n", "6"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    page = root / "audit" / "audit.html"
    assert not page.exists() or "precious" not in "".join(
        base64.b64decode(b).decode("latin-1") for b in re.findall(r"base64,([A-Za-z0-9+/=]+)", page.read_text()))


def test_audit_of_clean_samples_still_works(tmp_path, audit_src):
    root = tmp_path / "run"
    shutil.copytree(audit_src, root)
    r = CliRunner().invoke(app, ["audit", str(root), "--n", "6"])
    assert r.exit_code == 0, r.output
    assert (root / "audit" / "audit.html").read_text().count("data:image/png;base64,") == 6


@pytest.mark.parametrize("line", [b"\xff\xfe not utf-8\n", b'{"file_name": "images/000000.png", "reasons": 5, "intended": [1], "read": "x"}\n',
                                  b'{"file_name": \n', b"[1, 2]\n", b'{"file_name": 7}\n', b'{"file_name": "images/000000.png", "read": "x"}\n'])
def test_a_damaged_predictions_file_is_named_with_its_line(tmp_path, audit_src, line):
    root = tmp_path / "run"
    shutil.copytree(audit_src, root)
    p = root / "samples" / "a" / "predictions.jsonl"
    n = len(p.read_bytes().splitlines())
    with open(p, "ab") as f:
        f.write(line)
    r = CliRunner().invoke(app, ["audit", str(root), "--n", "100"])
    assert r.exit_code == 2, r.output
    assert "predictions.jsonl" in r.output and f"line {n + 1}" in r.output and "Traceback" not in r.output


def test_an_imported_mark_must_state_the_audits_own_verdict(tmp_path, audit_src):
    from mosaic.audit import audit_summary, import_audit, make_audit

    root = tmp_path / "run"
    shutil.copytree(audit_src, root)
    make_audit(root, n=6)
    items = json.loads((root / "audit" / "items.json").read_text())
    other = {"right": "wrong", "wrong": "right", "unreadable": "right"}
    marks = [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "verdict": other[it["verdict"]], "mark": "correct"}
             for it in items["items"]]
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({"version": 1, "audit_id": items["meta"]["audit_id"], "marks": marks}))
    with pytest.raises(MosaicError, match="states the verdict"):
        import_audit(root, forged)
    assert not (root / "audit" / "audit.json").exists()
    r = CliRunner().invoke(app, ["audit", str(root), "--import", str(forged)])
    assert r.exit_code == 2 and "states the verdict" in r.output
    # the summary counts the audit's verdicts, even where a stored file's marks state none
    for m, it in zip(marks, items["items"]):
        m.pop("verdict")
    forged.write_text(json.dumps({"version": 1, "audit_id": items["meta"]["audit_id"], "marks": marks}))
    s = audit_summary(import_audit(root, forged))
    want: dict = {}
    for it in items["items"]:
        want[it["verdict"]] = want.get(it["verdict"], 0) + 1
    assert {k: v["marked"] for k, v in s["by_verdict"].items()} == want


# ------------------------------------------------------------------------------------------------
# evaluate: one image per record; --out never inside a dataset
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["same", "dot_slash", "double_slash", "hardlink"])
def test_evaluate_refuses_two_records_naming_one_image(tmp_path, dataset, how):
    ev = tmp_path / "ev"
    shutil.copytree(dataset / "test_ood", ev)
    p = ev / "metadata.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()]
    assert len(rows) >= 2
    first = rows[0]["file_name"]
    if how == "hardlink":
        (ev / rows[1]["file_name"]).unlink()
        os.link(ev / first, ev / rows[1]["file_name"])
    else:
        rows[1]["file_name"] = {"same": first, "dot_slash": "./" + first, "double_slash": first.replace("/", "//")}[how]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    r = CliRunner().invoke(app, ["evaluate", str(ev), "--spec", str(spec), "--check-n", "0"])
    assert r.exit_code == 2, r.output
    assert "one image" in r.output or "same image" in r.output
    if how != "hardlink":
        assert "line 2" in r.output and "line 1" in r.output


@pytest.mark.parametrize("where", ["split", "root", "below_split"])
def test_evaluate_out_inside_a_dataset_is_refused(tmp_path, dataset, where):
    from mosaic.verify import verify as verify_dataset

    ds = tmp_path / "ds"
    shutil.copytree(dataset, ds)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    out = {"split": ds / "test_ood", "root": ds, "below_split": ds / "test_ood" / "scores"}[where]
    r = CliRunner().invoke(app, ["evaluate", str(ds / "test_ood"), "--spec", str(spec), "--check-n", "0", "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert "mosaic dataset" in r.output and str(ds) in r.output.replace("\n", "")
    assert verify_dataset(ds, deep=True).ok
    r = CliRunner().invoke(app, ["evaluate", str(ds / "test_ood"), "--spec", str(spec), "--check-n", "0", "-o", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output  # another folder is fine


def test_every_output_check_refuses_a_dataset_but_generate_may_rerun_it(tmp_path, dataset, victim):
    ds = tmp_path / "ds"
    shutil.copytree(dataset, ds)
    assert dataset_around(ds / "train" / "images") == ds.resolve() and dataset_around(tmp_path) is None
    assert output_dir_problem(ds / "train") and output_dir_problem(ds / "new" / "deeper")
    assert output_dir_problem(ds, dataset=True) is None  # generate / export of the dataset itself
    assert output_dir_problem(ds / "train", dataset=True)  # but not a dataset inside another
    assert output_dir_problem(tmp_path / "elsewhere") is None
    os.symlink(ds / "train", tmp_path / "alias")  # a link into the dataset is seen through
    assert output_dir_problem(tmp_path / "alias")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    r = CliRunner().invoke(app, ["generate", str(spec), "-o", str(ds / "train" / "nested")])
    assert r.exit_code == 2 and "inside the mosaic dataset" in r.output
    r = CliRunner().invoke(app, ["generate", str(spec), "-o", str(ds)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["preview", str(spec), "--out", str(ds / "preview.png")])  # a file output counts the same
    assert r.exit_code == 2 and "mosaic dataset" in r.output
    assert not (ds / "preview.png").exists()


# ------------------------------------------------------------------------------------------------
# HF: a path HF would read as a glob
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["br[x]", "st*r", "q?"])
def test_hf_load_refuses_a_path_with_glob_characters(tmp_path, dataset, name):
    pytest.importorskip("datasets")
    from mosaic.hf_load import load_dataset

    ds = tmp_path / name
    shutil.copytree(dataset, ds)
    _gen(tmp_path / "brx", seed=7)  # a sibling the pattern would match
    with pytest.raises(DatasetError) as e:
        load_dataset(ds, cache_dir=str(tmp_path / "hf"))
    msg = str(e.value)
    assert "glob" in msg and "rename the folder" in msg and any(repr(c) in msg for c in "[]*?")
    nested = tmp_path / "p[1]" / "ds"  # a parent folder's name counts the same
    shutil.copytree(dataset, nested)
    with pytest.raises(DatasetError, match="glob"):
        load_dataset(nested, cache_dir=str(tmp_path / "hf"))


def test_a_symlinked_checkpoint_folder_is_never_resumed_from(tmp_path):
    """A checkpoint name that is a link to a folder elsewhere (a copy of a finished checkpoint, say)
    is not one of the run's checkpoints: resuming reads only the run's own folders."""
    from mosaic.lab.run_folder import RunFolder

    run = RunFolder(tmp_path / "run")
    run.checkpoints.mkdir(parents=True)
    own = run.checkpoints / "checkpoint-0000010"
    own.mkdir()
    (own / "trainer_state.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere" / "checkpoint-0000020"
    elsewhere.mkdir(parents=True)
    (elsewhere / "trainer_state.json").write_text("{}")
    (run.checkpoints / "checkpoint-0000020").symlink_to(elsewhere, target_is_directory=True)
    assert run.checkpoint_list() == [(10, own)]
    assert run.latest_checkpoint() == own


# ------------------------------------------------------------------------------------------------
# the Python API: the same output check as the CLI (mosaic.io.check_output_dir / make_output_dir)
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("writer", ["evaluate_folder", "write_metrics", "write_claims", "prepare_sweep"])
def test_the_python_api_refuses_an_output_folder_inside_a_dataset_before_writing(tmp_path, dataset, writer):
    from mosaic.evaluation.folder import evaluate_folder
    from mosaic.evaluation.metrics import write_metrics
    from mosaic.evaluation.parser import SceneParser
    from mosaic.spec import parse_spec
    from mosaic.sweep import load_sweep
    from mosaic.trials import prepare
    from mosaic.verdicts import write_claims
    from mosaic.verify import verify as verify_dataset

    ds = tmp_path / "ds"
    shutil.copytree(dataset, ds)
    before = sorted(p.relative_to(ds).as_posix() for p in ds.rglob("*"))
    spec = parse_spec(SPEC)
    out = ds / "test_ood" / "scores"
    calls = {
        "evaluate_folder": lambda: evaluate_folder(ds / "test_ood", spec, SceneParser(spec), out=out, check_n=0),
        "write_metrics": lambda: write_metrics({}, out, spec),
        "write_claims": lambda: write_claims([], out),
        "prepare_sweep": lambda: prepare(load_sweep(ROOT / "experiments/sweeps/composition_count_cpu.yaml"), out),
    }
    with pytest.raises(MosaicError) as e:
        calls[writer]()
    assert "out" in str(e.value) and "inside the mosaic dataset" in str(e.value) and str(out) in str(e.value)
    assert sorted(p.relative_to(ds).as_posix() for p in ds.rglob("*")) == before  # nothing written
    assert verify_dataset(ds, deep=True).ok
    fine = tmp_path / "elsewhere"
    if writer == "evaluate_folder":  # the same call with a folder outside the dataset works
        assert evaluate_folder(ds / "test_ood", spec, SceneParser(spec), out=fine, check_n=0)["n"] > 0
        assert (fine / "metrics.json").is_file() and (fine / "predictions.jsonl").is_file()


def test_the_python_api_refuses_a_file_or_device_as_output_folder(tmp_path, victim):
    from mosaic.evaluation.metrics import write_metrics
    from mosaic.spec import parse_spec

    for bad in (victim, Path("/dev/null"), victim / "below"):
        with pytest.raises(MosaicError) as e:
            write_metrics({}, bad, parse_spec(SPEC))
        assert str(bad) in str(e.value)
    assert victim.read_text() == "precious data"



def test_no_writer_but_the_run_writes_into_a_run_folder_or_its_weights(tmp_path, diffusion_run):
    """evaluate / sample / audit --out at a run's own folder (its metrics.json) or inside its
    checkpoints, best or final weights is refused before anything is read or written (attack case 08);
    the run itself may resume into its folder, and RUN/samples/NAME stays a fine output."""
    src, data = diffusion_run
    run = tmp_path / "run"
    shutil.copytree(src, run, symlinks=True)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.is_symlink()}
    samples = next(d for d in sorted(data.iterdir()) if (d / "metadata.jsonl").is_file())  # any folder of images + records
    for out in (run, run / "checkpoints" / "checkpoint-0000002", run / "best" / "x", run / "final"):
        assert output_dir_problem(out) is not None
        with pytest.raises(MosaicError, match="training run"):
            from mosaic.io import check_output_dir

            check_output_dir(out, "--out")
        res = CliRunner().invoke(app, ["evaluate", str(samples), "--spec", str(data), "--out", str(out), "--check-n", "0"])
        assert res.exit_code == 2 and "Traceback" not in res.output and "training run" in res.output, res.output
    assert output_dir_problem(run, run=True) is None  # the run's own resume
    assert output_dir_problem(run / "samples" / "mine") is None and output_dir_problem(run / "audit") is None
    assert output_dir_problem(run / "checkpoints" / "checkpoint-0000002", run=True) is not None
    link = tmp_path / "alias"
    os.symlink(run, link)
    assert "symbolic link" in output_dir_problem(link)  # a link at the output's own name: refused outright (attack round 23)
    assert "training run" in output_dir_problem(link / "best" / "x")  # through a link above it too
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and not p.is_symlink()}
    assert after == before


def test_truncated_exported_weights_are_a_named_error_not_a_traceback(tmp_path, diffusion_run):
    """mosaic sample on a run whose best/ weights file was cut short: exit 2, the file named (attack case 06)."""
    src, _ = diffusion_run
    run = tmp_path / "run"
    shutil.copytree(src, run, symlinks=True)
    for part in ("best", "final"):
        f = run / part / "backbone" / "diffusion_pytorch_model.safetensors"
        if f.is_file():
            f.write_bytes(f.read_bytes()[:1000])
    res = CliRunner().invoke(app, ["sample", str(run), "--out", str(tmp_path / "s"), "--no-score"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "damaged" in res.output and "diffusion_pytorch_model.safetensors" in res.output


@pytest.mark.parametrize("saved", [b"[1, 2]", b"\xff\xfe not utf-8", b'{"audit_id": "X", "marks": ["x", 3]}', b"[" * 100000])
def test_remaking_an_audit_over_a_damaged_audit_json_keeps_no_marks_and_never_crashes(tmp_path, audit_src, saved):
    """mosaic audit again after audit.json was damaged (any JSON shape, non-UTF-8, 100k-deep): exit 0, the
    page re-made, the damaged file left in place (attack case 11)."""
    root = tmp_path / "run"
    shutil.copytree(audit_src, root)
    assert CliRunner().invoke(app, ["audit", str(root), "--n", "4"]).exit_code == 0
    (root / "audit" / "audit.json").write_bytes(saved)
    res = CliRunner().invoke(app, ["audit", str(root), "--n", "4"])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    assert (root / "audit" / "audit.json").read_bytes() == saved


@pytest.mark.parametrize("bad_id", [[1], "0", 1.5, None, True])
def test_an_items_json_with_an_id_that_is_no_integer_is_named(tmp_path, audit_src, bad_id):
    """--import and --summary over an items.json whose item id is a list, string, float, null or bool:
    exit 2 naming items.json (attack case 12)."""
    root = tmp_path / "run"
    shutil.copytree(audit_src, root)
    assert CliRunner().invoke(app, ["audit", str(root), "--n", "4"]).exit_code == 0
    items = root / "audit" / "items.json"
    data = json.loads(items.read_text())
    marks = {"version": 1, "audit_id": data["meta"]["audit_id"], "run": str(root), "seed": 0, "saved": "x",
             "marks": [{"id": it["id"], "source": it["source"], "file_name": it["file_name"], "verdict": it["verdict"],
                        "mark": "correct", "note": ""} for it in data["items"]]}
    f = tmp_path / "a.json"
    f.write_text(json.dumps(marks))
    assert CliRunner().invoke(app, ["audit", str(root), "--import", str(f)]).exit_code == 0
    data["items"][0]["id"] = bad_id
    items.write_text(json.dumps(data))
    for args in (["--import", str(f)], ["--summary"]):
        res = CliRunner().invoke(app, ["audit", str(root), *args])
        assert res.exit_code == 2 and "Traceback" not in res.output and "items.json" in res.output, (args, res.output)


@pytest.mark.parametrize("edit", ["checksums_list", "checksums_path", "split_dotdot", "split_hidden"])
def test_a_manifest_with_fields_of_the_wrong_shape_is_named_by_every_reader(tmp_path, dataset, edit):
    """verify, verify --repair and MosaicDataset on a manifest whose checksums record is not a mapping or
    points elsewhere, or that lists a split named like a path: exit 2 / DatasetError naming manifest.json,
    never an AttributeError or KeyError (attack cases 20, 21)."""
    from mosaic.torch_data import MosaicDataset

    ds = tmp_path / "ds"
    shutil.copytree(dataset, ds)
    man = json.loads((ds / "manifest.json").read_text())
    if edit == "checksums_list":
        man["checksums"] = [1]
    elif edit == "checksums_path":
        man["checksums"]["file"] = "../other/checksums.sha256"
    else:
        man["splits"]["../x" if edit == "split_dotdot" else ".hidden"] = {"count": 1}
    (ds / "manifest.json").write_text(json.dumps(man))
    for args in (["verify", str(ds)], ["verify", str(ds), "--repair"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2 and "Traceback" not in res.output and "manifest.json" in res.output, (args, res.output)
    with pytest.raises(DatasetError, match="manifest.json is damaged"):
        MosaicDataset(ds, "train")
