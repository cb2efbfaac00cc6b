"""Hostile cases of a twenty-third attack (part B): writes outside the owned folder, a person's files
deleted, interruptions and full disks that leave a folder no rerun finishes, two writers, moved folders.

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack23b: ...")``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from tests.conftest import run_cli as _run, ok_cli as _ok, enospc as _enospc, verify_ok as _verify_ok, QUICK_SAMPLE, clean_exit_2, copy_dataset, edit_manifest, unscored_samples

ROOT = Path(__file__).resolve().parents[1]
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _tree(p: Path) -> dict:
    """Every file under ``p`` (links not followed) and its bytes."""
    out = {}
    for dp, dn, fn in os.walk(p):
        for n in fn:
            f = Path(dp) / n
            out[str(f.relative_to(p))] = f.read_bytes() if not f.is_symlink() else ("link", os.readlink(f))
    return out


def _person(tmp_path: Path, name: str = "person") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    (d / "sub").mkdir()
    (d / "sub" / "a.txt").write_text("also mine")
    return d


# ------------------------------------------------------------------------------------------------
# a full disk or an interruption before the first manifest is written: a folder no rerun finishes
# ------------------------------------------------------------------------------------------------

def test_generate_full_disk_at_the_first_manifest_then_rerun_finishes(made, tmp_path, monkeypatch):
    import mosaic.dataset as D

    out = tmp_path / "ds"
    with monkeypatch.context() as m:
        m.setattr(D, "write_manifest", _enospc)
        r = _run(["generate", made[0], "--out", out])
    _clean_exit_2(r, "disk is full")
    r = _run(["generate", made[0], "--out", out])
    if r.exit_code != 0:
        r = _run(["generate", made[0], "--out", out, "--overwrite"])
    assert r.exit_code == 0, r.output
    _verify_ok(out)


def test_export_full_disk_at_the_first_manifest_then_rerun_finishes(made, tmp_path, monkeypatch):
    import mosaic.export as E

    pq = tmp_path / "pq"
    with monkeypatch.context() as m:
        m.setattr(E, "write_manifest", _enospc)
        r = _run(["export", made[1], "-f", "parquet", "-o", pq])
    _clean_exit_2(r, "disk is full")
    r = _run(["export", made[1], "-f", "parquet", "-o", pq])
    if r.exit_code != 0:
        r = _run(["export", made[1], "-f", "parquet", "-o", pq, "--overwrite"])
    assert r.exit_code == 0, r.output
    _verify_ok(pq)


def _interrupted_remove(real, after: int = 2):
    """``mosaic.io.remove_path`` as ``mosaic.dataset_folder.remove_dataset`` calls it, interrupted (Ctrl-C) after
    ``after`` entries of the dataset were removed."""
    calls = []

    def rm(path):
        calls.append(path)
        if len(calls) > after:
            raise KeyboardInterrupt
        return real(path)
    return rm


def test_generate_overwrite_interrupted_in_its_delete_then_rerun_finishes(made, tmp_path, monkeypatch):
    """The delete takes ``manifest.json`` last (``mosaic.dataset_folder.remove_dataset``): interrupted, the folder is
    still a (damaged) mosaic dataset, which the rerun's ``--overwrite`` replaces (attack round 23 left no manifest)."""
    import mosaic.dataset_folder as F

    ds = copy_dataset(made, tmp_path)
    with monkeypatch.context() as m:
        m.setattr(F, "remove_path", _interrupted_remove(F.remove_path))
        r = _run(["generate", made[0], "--out", ds, "--overwrite"])
    assert r.exit_code != 0 and (ds / "manifest.json").exists() and not (ds / ".mosaic").exists()
    r = _run(["generate", made[0], "--out", ds, "--overwrite"])
    assert r.exit_code == 0, r.output
    _verify_ok(ds)


def test_export_overwrite_interrupted_in_its_delete_then_rerun_finishes(made, tmp_path, monkeypatch):
    import mosaic.dataset_folder as F
    import mosaic.export as E

    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    with monkeypatch.context() as m:
        m.setattr(F, "remove_path", _interrupted_remove(F.remove_path, after=1))
        with pytest.raises(KeyboardInterrupt):
            E.export(made[1], "parquet", pq, overwrite=True)
    assert (pq / "manifest.json").exists()
    r = _run(["export", made[1], "-f", "parquet", "-o", pq, "--overwrite"])
    assert r.exit_code == 0, r.output
    _verify_ok(pq)


def test_a_dataset_whose_manifest_alone_was_deleted_is_never_replaced(made, tmp_path):
    """What is left when the manifest went first (by hand, or an older mosaic): nothing says it is a dataset, so
    --overwrite refuses it, naming the folder, and deletes nothing."""
    ds = copy_dataset(made, tmp_path)
    (ds / "manifest.json").unlink()
    _clean_exit_2(_run(["generate", made[0], "--out", ds, "--overwrite"]), "not a mosaic dataset")
    assert (ds / "train" / "images" / "000000.png").is_file()


# ------------------------------------------------------------------------------------------------
# the lock file beside the folder
# ------------------------------------------------------------------------------------------------

def test_a_persons_file_at_the_lock_name_is_kept(made, tmp_path):
    mine = tmp_path / ".ds.lock"
    mine.write_text("my own notes, not a lock\n" * 10)
    r = _run(["generate", made[0], "--out", tmp_path / "ds"])
    if r.exit_code != 0:
        _clean_exit_2(r, ".ds.lock")
    assert mine.read_text() == "my own notes, not a lock\n" * 10


def test_a_persons_fifo_at_the_lock_name_is_kept(made, tmp_path):
    os.mkfifo(tmp_path / ".ds.lock")
    r = _run(["generate", made[0], "--out", tmp_path / "ds"])
    if r.exit_code != 0:
        _clean_exit_2(r, ".ds.lock")
    assert (tmp_path / ".ds.lock").is_fifo()


def test_a_persons_folder_at_the_lock_name_is_refused_and_kept(made, tmp_path):
    (tmp_path / ".ds.lock").mkdir()
    (tmp_path / ".ds.lock" / "n.txt").write_text("mine")
    r = _run(["generate", made[0], "--out", tmp_path / "ds"])
    _clean_exit_2(r, ".ds.lock")
    assert (tmp_path / ".ds.lock" / "n.txt").read_text() == "mine"
    assert not (tmp_path / "ds").exists()


def test_a_link_at_the_lock_name_is_not_written_through(made, tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("kept")
    (tmp_path / ".ds.lock").symlink_to(target)
    _ok(["generate", made[0], "--out", tmp_path / "ds"])
    assert target.read_text() == "kept"
    _verify_ok(tmp_path / "ds")


# ------------------------------------------------------------------------------------------------
# file outputs (splits --out, preview --out): a link at the name is replaced, never written through
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["splits", "preview"])
def test_png_output_at_a_link_leaves_the_links_target(made, tmp_path, command):
    target = tmp_path / "photo.png"
    target.write_bytes(b"my photo")
    link = tmp_path / "out.png"
    link.symlink_to(target)
    r = _run([command, made[0], "--out", link])
    if r.exit_code != 0:
        _clean_exit_2(r, "out.png")
    assert target.read_bytes() == b"my photo"


@pytest.mark.parametrize("command", ["splits", "preview"])
def test_png_output_at_a_folder_is_refused_and_kept(made, tmp_path, command):
    d = tmp_path / "out.png"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    r = _run([command, made[0], "--out", d])
    _clean_exit_2(r, "out.png")
    assert (d / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command", ["splits", "preview"])
def test_png_output_full_disk_leaves_no_temp_and_keeps_the_old_file(made, tmp_path, command, monkeypatch):
    import mosaic.io as io

    out = tmp_path / "o.png"
    out.write_bytes(b"old")
    real_replace = os.replace
    with monkeypatch.context() as m:  # the rename of the finished temporary file fails: a full disk's last step
        m.setattr(io.os, "replace", lambda a, b: _enospc() if str(b).endswith("o.png") else real_replace(a, b))
        r = _run([command, made[0], "--out", out])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.png"]


# ------------------------------------------------------------------------------------------------
# two writers, moved and copied folders
# ------------------------------------------------------------------------------------------------

def _cli(*args):
    return subprocess.Popen([sys.executable, "-m", "mosaic.cli", *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_two_generations_of_one_spec_at_once_both_finish_one_dataset(made, tmp_path):
    out = tmp_path / "ds"
    ps = [_cli("generate", made[0], "--out", out) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in ps]
    assert [p.returncode for p in ps] == [0, 0], outs
    assert "Traceback" not in "".join(outs)
    _verify_ok(out)


def test_two_exports_into_one_folder_at_once_leave_one_whole_dataset(made, tmp_path):
    pq = tmp_path / "pq"
    ps = [_cli("export", made[1], "-f", "parquet", "-o", pq) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in ps]
    assert "Traceback" not in "".join(outs), outs
    assert sorted(p.returncode for p in ps) in ([0, 0], [0, 2]), outs
    _verify_ok(pq)


def test_a_moved_complete_dataset_reruns_as_already_complete(made, tmp_path):
    ds = copy_dataset(made, tmp_path, "moved")
    before = _tree(ds)
    r = _ok(["generate", made[0], "--out", ds])
    assert "already complete" in r.output
    assert _tree(ds) == before


def _mark_unfinished(ds: Path) -> None:
    edit_manifest(ds, lambda m: m.update(status="incomplete"))
    for split in ("train", "val", "test_id", "test_ood"):
        (ds / split / "metadata.jsonl").unlink()
    (ds / "checksums.sha256").unlink()


def test_a_moved_unfinished_dataset_resumes_where_it_is(made, tmp_path):
    ds = copy_dataset(made, tmp_path, "a")
    _mark_unfinished(ds)
    moved = tmp_path / "b"
    ds.rename(moved)
    _ok(["generate", made[0], "--out", moved])
    _verify_ok(moved)
    assert not ds.exists()


# ------------------------------------------------------------------------------------------------
# links inside a dataset: the work folder .mosaic/, split folders
# ------------------------------------------------------------------------------------------------

def test_overwrite_never_deletes_through_a_linked_work_folder(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    person = _person(tmp_path)
    shutil.rmtree(ds / ".mosaic")
    (ds / ".mosaic").symlink_to(person)
    before = _tree(person)
    r = _run(["generate", made[0], "--out", ds, "--overwrite"])
    if r.exit_code != 0:
        _clean_exit_2(r, ".mosaic")
    assert _tree(person) == before


@pytest.mark.parametrize("link", [".mosaic", ".mosaic/parts"])
def test_resume_never_writes_through_a_linked_work_folder(made, tmp_path, link):
    ds = copy_dataset(made, tmp_path)
    _mark_unfinished(ds)
    person = _person(tmp_path)
    shutil.rmtree(ds / link)
    (ds / link).symlink_to(person)
    before = _tree(person)
    r = _run(["generate", made[0], "--out", ds])
    if r.exit_code != 0:
        _clean_exit_2(r, ".mosaic")
    else:
        _verify_ok(ds)
    assert _tree(person) == before


@pytest.mark.parametrize("link", ["train/images", "train"])
def test_repair_never_writes_through_a_linked_split_folder(made, tmp_path, link):
    ds = copy_dataset(made, tmp_path)
    person = tmp_path / "person"
    shutil.copytree(ds / link, person)
    (person / ("images" if link == "train" else ".") / "000001.png").write_bytes(b"damaged")
    shutil.rmtree(ds / link)
    (ds / link).symlink_to(person)
    before = _tree(person)
    r = _run(["verify", ds, "--repair"])
    assert "Traceback" not in r.output
    assert _tree(person) == before
    if r.exit_code == 0:
        _verify_ok(ds)
        assert not (ds / link).is_symlink()


# ------------------------------------------------------------------------------------------------
# verify --repair and the finalize of generate, interrupted or on a full disk
# ------------------------------------------------------------------------------------------------

def _damaged(made, tmp_path) -> Path:
    ds = copy_dataset(made, tmp_path)
    (ds / "train" / "images" / "000001.png").unlink()
    (ds / "val" / "images" / "000000.png").write_bytes(b"x")
    lines = (ds / "train" / "metadata.jsonl").read_text().splitlines()
    (ds / "train" / "metadata.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    return ds


def _no_temps(ds: Path) -> None:
    left = [str(p.relative_to(ds)) for p in ds.rglob("*") if ".tmp" in p.name]
    assert not left, left


def test_repair_on_a_full_disk_exits_2_leaves_no_temp_and_a_rerun_finishes(made, tmp_path, monkeypatch):
    import mosaic.io as io
    import mosaic.repair as rp

    ds = _damaged(made, tmp_path)

    def half(path, data):  # half the bytes written to the temporary file, then the disk is full
        with io.atomic_writer(path) as f:
            f.write(data[: len(data) // 2])
            f.flush()
            _enospc()

    with monkeypatch.context() as m:
        m.setattr(rp, "atomic_write", half)
        r = _run(["verify", ds, "--repair"])
    _clean_exit_2(r, "disk is full")
    _no_temps(ds)
    _ok(["verify", ds, "--repair"])
    _verify_ok(ds)


def test_repair_interrupted_between_two_samples_then_rerun_finishes(made, tmp_path, monkeypatch):
    import mosaic.repair as rp

    ds = _damaged(made, tmp_path)
    real, n = rp.expected_sample, []

    def boom(*a, **k):
        n.append(1)
        if len(n) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(rp, "expected_sample", boom)
        r = _run(["verify", ds, "--repair"])
    assert r.exit_code != 0
    _no_temps(ds)
    assert _run(["verify", ds]).exit_code == 1  # still damaged, never reported whole
    _ok(["verify", ds, "--repair"])
    _verify_ok(ds)


@pytest.mark.parametrize("where", ["write_card", "write_checksums"])
@pytest.mark.parametrize("fault", ["enospc", "interrupt"])
def test_finalize_fault_leaves_an_unfinished_dataset_a_rerun_finishes(made, tmp_path, monkeypatch, where, fault):
    import mosaic.dataset as D

    out = tmp_path / "ds"

    def boom(*a, **k):
        if fault == "interrupt":
            raise KeyboardInterrupt
        _enospc()

    with monkeypatch.context() as m:
        m.setattr(D, where, boom)
        r = _run(["generate", made[0], "--out", out])
    assert r.exit_code != 0
    assert "Traceback" not in r.output
    assert json.loads((out / "manifest.json").read_text())["status"] != "complete"
    assert _run(["verify", out]).exit_code != 0
    _ok(["generate", made[0], "--out", out])
    _verify_ok(out)


# ------------------------------------------------------------------------------------------------
# runs: samples, evaluations
# ------------------------------------------------------------------------------------------------

def _run_copy(drun, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    return run


def test_sample_never_writes_through_a_linked_samples_folder(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    person = _person(tmp_path)
    shutil.rmtree(run / "samples")
    (run / "samples").symlink_to(person)
    before = _tree(person)
    r = _run(["sample", run, *QUICK_SAMPLE])
    if r.exit_code != 0:
        _clean_exit_2(r, "samples")
    assert _tree(person) == before


@pytest.mark.parametrize("command", ["sample", "evaluate"])
def test_outputs_through_the_runs_dataset_link_are_refused(drun, tmp_path, command):
    run = _run_copy(drun, tmp_path)
    assert (run / "dataset").is_symlink()
    before = _tree(drun[1])
    if command == "sample":
        r = _run(["sample", run, *QUICK_SAMPLE, "--out", run / "dataset" / "s"])
    else:
        s = unscored_samples(drun, tmp_path)
        r = _run(["evaluate", s, "--spec", drun[1], "--out", run / "dataset" / "test_ood" / "e"])
    _clean_exit_2(r, "dataset")
    assert _tree(drun[1]) == before


@pytest.mark.parametrize("fault", ["enospc", "interrupt"])
def test_sample_fault_mid_write_leaves_no_folder_and_a_rerun_finishes(drun, tmp_path, monkeypatch, fault):
    import mosaic.lab.diffusion.scoring as sc

    run = _run_copy(drun, tmp_path)
    out = tmp_path / "s"
    real, n = sc.png_bytes, []

    def boom(img):
        n.append(1)
        if len(n) == 2:
            if fault == "interrupt":
                raise KeyboardInterrupt
            _enospc()
        return real(img)

    args = ["sample", run, "--split", "test_id", "-k", "1", "--steps", "2", "--device", "cpu", "--no-score", "--out", out]
    with monkeypatch.context() as m:
        m.setattr(sc, "png_bytes", boom)
        r = _run(args)
    assert r.exit_code != 0
    assert "Traceback" not in r.output
    if fault == "enospc":
        _clean_exit_2(r, "disk is full")
    assert not out.exists()
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]
    _ok(args)
    assert len((out / "metadata.jsonl").read_text().splitlines()) == len(list((out / "images").iterdir()))


def test_two_samplings_into_one_folder_at_once_leave_one_whole_folder(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    out = tmp_path / "s"
    ps = [_cli("sample", run, *QUICK_SAMPLE, "--out", out) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in ps]
    assert "Traceback" not in "".join(outs), outs
    assert sorted(p.returncode for p in ps) in ([0, 0], [0, 2]), outs
    assert len((out / "metadata.jsonl").read_text().splitlines()) == len(list((out / "images").iterdir()))
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]


@pytest.mark.parametrize("name", ["extra.pt", "backbone/extra.bin", "optimizer.pkl"])
def test_a_pickle_planted_in_final_is_never_unpickled_by_sample(drun, tmp_path, name):
    run = _run_copy(drun, tmp_path)
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    (run / "final" / name).write_bytes(pickle.dumps(Evil()))
    r = _run(["sample", run, *QUICK_SAMPLE, "--checkpoint", "final", "--out", tmp_path / "s"])
    if r.exit_code != 0:
        _clean_exit_2(r, Path(name).name)
    assert not (tmp_path / "pwned").exists()


def test_evaluate_out_at_a_link_never_writes_through_it(drun, tmp_path):
    s = unscored_samples(drun, tmp_path)
    person = _person(tmp_path)
    link = tmp_path / "e"
    link.symlink_to(person)
    before = _tree(person)
    r = _run(["evaluate", s, "--spec", drun[1], "--out", link])
    if r.exit_code != 0:
        _clean_exit_2(r, "e")
    assert _tree(person) == before


def test_two_evaluations_into_one_folder_at_once(drun, tmp_path):
    s = unscored_samples(drun, tmp_path)
    out = tmp_path / "e"
    ps = [_cli("evaluate", s, "--spec", drun[1], "--out", out) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in ps]
    assert "Traceback" not in "".join(outs), outs
    assert sorted(p.returncode for p in ps) in ([0, 0], [0, 2]), outs
    m = json.loads((out / "metrics.json").read_text())
    assert isinstance(m, dict)
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]


def test_evaluate_in_a_moved_samples_folder(drun, tmp_path):
    s = unscored_samples(drun, tmp_path)
    moved = tmp_path / "moved"
    s.rename(moved)
    _ok(["evaluate", moved, "--spec", drun[1], "--out", tmp_path / "e"])
    assert (tmp_path / "e" / "predictions.jsonl").is_file()


@pytest.mark.parametrize("name", ["predictions.jsonl", "metrics.json", "heatmap.png"])
@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_evaluate_never_writes_through_a_link_at_its_file(drun, tmp_path, name, kind):
    s = unscored_samples(drun, tmp_path)
    out = tmp_path / "e"
    _ok(["evaluate", s, "--spec", drun[1], "--out", out])
    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    (out / name).unlink()
    if kind == "symlink":
        (out / name).symlink_to(mine)
    else:
        os.link(mine, out / name)
    r = _run(["evaluate", s, "--spec", drun[1], "--out", out])
    if r.exit_code != 0:
        _clean_exit_2(r, name)
    assert mine.read_text() == "mine"


# ------------------------------------------------------------------------------------------------
# links at a dataset's own files: replaced, the target kept
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["README.md", "checksums.sha256", "train/metadata.jsonl", "train/images/000001.png"])
@pytest.mark.parametrize("how", ["overwrite", "rerun", "repair"])
def test_a_link_at_a_dataset_file_is_never_written_through(made, tmp_path, name, how):
    ds = copy_dataset(made, tmp_path)
    mine = tmp_path / "mine.bin"
    mine.write_bytes((ds / name).read_bytes())
    (ds / name).unlink()
    (ds / name).symlink_to(mine)
    if how == "overwrite":
        r = _run(["generate", made[0], "--out", ds, "--overwrite"])
    elif how == "rerun":
        r = _run(["generate", made[0], "--out", ds, "--verify"])
    else:
        r = _run(["verify", ds, "--repair"])
    assert "Traceback" not in r.output
    assert mine.read_bytes() == (made[1] / name).read_bytes()
    if r.exit_code == 0:
        _verify_ok(ds)


def test_a_hard_link_at_metadata_is_replaced_not_rewritten_by_repair(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    mine = tmp_path / "mine.jsonl"
    mine.write_text("my own lines\n")
    (ds / "train" / "metadata.jsonl").unlink()
    os.link(mine, ds / "train" / "metadata.jsonl")
    r = _run(["verify", ds, "--repair"])
    assert "Traceback" not in r.output
    assert mine.read_text() == "my own lines\n"


def test_export_overwrite_never_deletes_through_a_linked_data_folder(made, tmp_path):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    person = _person(tmp_path)
    shutil.rmtree(pq / "data")
    (pq / "data").symlink_to(person)
    before = _tree(person)
    r = _run(["export", made[1], "-f", "parquet", "-o", pq, "--overwrite"])
    if r.exit_code != 0:
        _clean_exit_2(r, "data")
    assert _tree(person) == before


@pytest.mark.parametrize("command", ["splits", "preview"])
def test_png_output_inside_a_dataset_is_refused(made, tmp_path, command):
    ds = copy_dataset(made, tmp_path)
    before = _tree(ds)
    r = _run([command, made[0], "--out", ds / "train" / "grid.png"])
    _clean_exit_2(r, "dataset")
    assert _tree(ds) == before


# ------------------------------------------------------------------------------------------------
# an evaluation interrupted while it rewrites its folder
# ------------------------------------------------------------------------------------------------

def _interrupted_evaluation(drun, tmp_path, monkeypatch) -> Path:
    import mosaic.evaluation.folder as F

    s = unscored_samples(drun, tmp_path)
    _ok(["evaluate", s, "--spec", drun[1], "--out", s])
    with monkeypatch.context() as m:
        m.setattr(F, "write_metrics", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        r = _run(["evaluate", s, "--spec", drun[1], "--out", s])
    assert r.exit_code != 0
    assert json.loads((s / "metrics.json").read_text())["status"] == "incomplete"
    return s


def test_audit_refuses_a_folder_whose_evaluation_was_interrupted(drun, tmp_path, monkeypatch):
    s = _interrupted_evaluation(drun, tmp_path, monkeypatch)
    r = _run(["audit", s, "--out", tmp_path / "a"])
    _clean_exit_2(r, "metrics.json")
    assert not (tmp_path / "a" / "audit.html").exists()


def test_an_interrupted_evaluation_is_finished_by_its_rerun(drun, tmp_path, monkeypatch):
    s = _interrupted_evaluation(drun, tmp_path, monkeypatch)
    _ok(["evaluate", s, "--spec", drun[1], "--out", s])
    m = json.loads((s / "metrics.json").read_text())
    assert m.get("status") != "incomplete"
    assert not [p.name for p in s.iterdir() if ".tmp" in p.name]


# ------------------------------------------------------------------------------------------------
# audit: --import of what is not a file, links at its files
# ------------------------------------------------------------------------------------------------

def _audited(drun, tmp_path) -> tuple[Path, Path]:
    s = unscored_samples(drun, tmp_path)
    _ok(["evaluate", s, "--spec", drun[1], "--out", s])
    a = tmp_path / "a"
    _ok(["audit", s, "--out", a])
    return s, a


@pytest.mark.parametrize("what", ["folder", "fifo", "devzero", "items", "missing"])
def test_audit_import_of_what_is_not_a_saved_audit_is_refused(drun, tmp_path, what):
    s, a = _audited(drun, tmp_path)
    src = {"folder": tmp_path, "devzero": Path("/dev/zero"), "items": a / "items.json", "missing": tmp_path / "nope.json"}.get(what)
    if what == "fifo":
        src = tmp_path / "fifo"
        os.mkfifo(src)
    r = _run(["audit", s, "--out", a, "--import", src])
    _clean_exit_2(r)
    assert not (a / "audit.json").exists()


def test_audit_import_never_writes_through_a_link_at_audit_json(drun, tmp_path):
    s, a = _audited(drun, tmp_path)
    items = json.loads((a / "items.json").read_text())
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps({"audit_id": items["meta"]["audit_id"], "marks": []}))
    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    (a / "audit.json").symlink_to(mine)
    r = _run(["audit", s, "--out", a, "--import", saved])
    if r.exit_code != 0:
        _clean_exit_2(r, "audit.json")
    assert mine.read_text() == "mine"


@pytest.mark.parametrize("name", ["audit.html", "items.json"])
def test_audit_remake_never_writes_through_a_link_at_its_page(drun, tmp_path, name):
    s, a = _audited(drun, tmp_path)
    mine = tmp_path / "mine.txt"
    mine.write_text("mine")
    (a / name).unlink()
    (a / name).symlink_to(mine)
    r = _run(["audit", s, "--out", a])
    if r.exit_code != 0:
        _clean_exit_2(r, name)
    assert mine.read_text() == "mine"


def test_two_audits_into_one_folder_at_once(drun, tmp_path):
    s = unscored_samples(drun, tmp_path)
    _ok(["evaluate", s, "--spec", drun[1], "--out", s])
    a = tmp_path / "a"
    ps = [_cli("audit", s, "--out", a) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in ps]
    assert "Traceback" not in "".join(outs), outs
    assert sorted(p.returncode for p in ps) in ([0, 0], [0, 2]), outs
    assert (a / "audit.html").is_file() and json.loads((a / "items.json").read_text())["items"]


# ------------------------------------------------------------------------------------------------
# a moved run folder resumes where it is, never writing into the run it was copied from
# ------------------------------------------------------------------------------------------------

def test_a_moved_interrupted_run_resumes_in_its_new_place(drun, tmp_path):
    orig = drun[0]
    before = _tree(orig)
    data_before = _tree(drun[1])
    run = tmp_path / "moved"
    shutil.copytree(orig, run, symlinks=True)
    for n in ("DONE", "metrics.json"):
        (run / n).unlink()
    for n in ("final", "best", "samples"):
        shutil.rmtree(run / n)
    shutil.copy(run / "config.yaml", tmp_path / "config.yaml")
    _ok(["train", "diffusion", tmp_path / "config.yaml", "--out", run])
    assert (run / "DONE").is_file() and (run / "final" / "weights.json").is_file()
    assert _tree(orig) == before
    assert _tree(drun[1]) == data_before


# ------------------------------------------------------------------------------------------------
# an interrupted export, a Parquet dataset's folders linked
# ------------------------------------------------------------------------------------------------

def _interrupted_export(made, tmp_path, monkeypatch) -> Path:
    import mosaic.export as E

    pq = tmp_path / "pq"
    with monkeypatch.context() as m:
        m.setattr(E, "finalize_parquet", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        r = _run(["export", made[1], "-f", "parquet", "-o", pq])
    assert r.exit_code != 0
    assert json.loads((pq / "manifest.json").read_text())["status"] != "complete"
    return pq


def test_an_interrupted_export_is_finished_by_the_same_command(made, tmp_path, monkeypatch):
    pq = _interrupted_export(made, tmp_path, monkeypatch)
    assert _run(["verify", pq]).exit_code != 0
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    _verify_ok(pq)


@pytest.mark.parametrize("link", [".mosaic", "data"])
def test_rerun_of_an_interrupted_export_never_deletes_through_a_link(made, tmp_path, monkeypatch, link):
    pq = _interrupted_export(made, tmp_path, monkeypatch)
    person = _person(tmp_path)
    shutil.rmtree(pq / link)
    (pq / link).symlink_to(person)
    before = _tree(person)
    r = _run(["export", made[1], "-f", "parquet", "-o", pq])
    if r.exit_code != 0:
        _clean_exit_2(r, link)
    else:
        _verify_ok(pq)
    assert _tree(person) == before


def test_parquet_repair_never_writes_through_a_linked_data_folder(made, tmp_path):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    person = tmp_path / "person"
    shutil.copytree(pq / "data", person)
    first = sorted(person.iterdir())[0]
    first.write_bytes(first.read_bytes()[:100])
    shutil.rmtree(pq / "data")
    (pq / "data").symlink_to(person)
    before = _tree(person)
    r = _run(["verify", pq, "--repair"])
    assert "Traceback" not in r.output
    assert _tree(person) == before


def test_generate_interrupted_between_shards_then_rerun_finishes(made, tmp_path, monkeypatch):
    import mosaic.dataset as D

    out = tmp_path / "ds"
    real, n = D.render_shard, []

    def boom(*a, **k):
        n.append(1)
        if len(n) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    with monkeypatch.context() as m:
        m.setattr(D, "render_shard", boom)
        r = _run(["generate", made[0], "--out", out, "--shard-mb", "1"])
    assert r.exit_code != 0
    assert _run(["verify", out]).exit_code != 0
    _ok(["generate", made[0], "--out", out, "--shard-mb", "1"])
    _verify_ok(out)


@pytest.mark.parametrize("command", ["splits", "preview"])
def test_png_output_in_a_missing_folder(made, tmp_path, command):
    out = tmp_path / "new" / "deeper" / "o.png"
    r = _run([command, made[0], "--out", out])
    if r.exit_code != 0:
        _clean_exit_2(r, "new")
    else:
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------
# a person's folder given as --out of sample or evaluate
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("what", ["evaluation", "notes"])
def test_sample_out_at_a_folder_that_holds_no_samples_is_refused_and_kept(drun, tmp_path, what):
    out = tmp_path / "o"
    if what == "evaluation":
        _ok(["evaluate", unscored_samples(drun, tmp_path), "--spec", drun[1], "--out", out])
    else:
        _person(tmp_path, "o")
    before = _tree(out)
    r = _run(["sample", drun[0], *QUICK_SAMPLE, "--out", out])
    _clean_exit_2(r, "sampling.json")
    assert _tree(out) == before


@pytest.mark.parametrize("name", ["metrics.json", "predictions.jsonl", "metrics.csv", "heatmap.png"])
def test_evaluate_out_holding_a_persons_file_at_its_names_is_refused_and_kept(drun, tmp_path, name):
    out = tmp_path / "q"
    out.mkdir()
    (out / name).write_text('{"mine": 1}\n')
    r = _run(["evaluate", unscored_samples(drun, tmp_path), "--spec", drun[1], "--out", out])
    _clean_exit_2(r, name)
    assert (out / name).read_text() == '{"mine": 1}\n'
