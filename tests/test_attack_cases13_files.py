"""Hostile cases of a thirteenth attack on the files mosaic writes and reads (folders, links and
temporary files where mosaic expects its own file), each closed at its mechanism.

- **Case 30, 31, 33: a folder standing where mosaic writes a file** (a dataset's ``README.md``, a run's
  ``log.jsonl`` / ``log.csv`` / ``val.jsonl``, a sweep's ``results.csv`` / ``results.parquet`` /
  ``sweep.yaml``, a trial's ``trial.json``): :func:`mosaic.io.atomic_writer` renamed its temporary file
  over the folder and :func:`os.replace` raised IsADirectoryError, a traceback (rc 1). The writer now
  refuses a real folder at the target by name (:class:`mosaic.io.FolderInTheWayError`, a MosaicError:
  exit 2, the file named, the fix "move it away"), before a byte is written and again at the rename,
  and never deletes the folder. The dataset card is the dataset's own file and ``--repair`` its
  documented fix: :func:`mosaic.repair.rewrite_card` treats a folder at ``README.md`` as one at a
  sample's file (:func:`mosaic.repair.make_room`: an empty folder is removed, one holding files is
  refused by name). A run's resume checks the run's own files first
  (:meth:`mosaic.lab.run_folder.RunFolder._check_own_files`): a folder or FIFO at one is refused before
  any training, not after it.
- **Case 32: a run's ``dataset.json`` a folder (or missing)**: the resume read it only when it was a
  regular file, trained on, wrote DONE, and ``mosaic analyze`` then refused the run. The resume now
  reads whatever stands there (a damaged record is refused as analyze refuses it); a missing one is
  written again when it can be exactly (the run's ``dataset_manifest.json`` is byte for byte the
  dataset's manifest), else refused.
- **Case 15: ``mosaic preview --out`` wrote through a link**: :func:`mosaic.preview.contact_sheet` ended
  with ``sheet.save(out)``, which opens the name and so rewrote the file a symlink or hard link at it
  pointed to. It writes through :func:`mosaic.io.atomic_writer`: the link is replaced.
- **Case 05: a killed finalize's temporary files stayed in the dataset root**
  (``.checksums.sha256.tmpPID.HEX``, ``.manifest.json.tmpPID.HEX``): only each split's
  ``metadata.jsonl`` had its temporaries cleared. Generate (both storage forms, unfinished or complete)
  and ``--repair`` clear those of the root files too (:func:`mosaic.checksums.clear_root_temps`,
  mosaic's own names only, under the dataset's lock).
- **Case 18: a reader racing ``generate --overwrite``**: ``checksums.sha256`` was opened lazily after it
  was checked and raised FileNotFoundError (a traceback, rc 1: "damaged"). The file is opened once
  (:class:`mosaic.checksums.RecordedDigests`; a rescan seeks back), a file gone mid-read is a named
  DatasetError (:func:`mosaic.checksums.vanished`), and :func:`mosaic.verify.verify` whose manifest was
  replaced or removed while it checked says so (exit 2) instead of listing the rewrite as damage.
"""

from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import MosaicError, TrainingError
from tests.conftest import clean_exit_2, SPECS, tiny

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


@pytest.fixture(scope="module")
def count_data(tmp_path_factory) -> Path:
    """A finished 32 px imagefolder dataset of the count spec (20 samples)."""
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("c13") / "data"
    generate(parse_spec(tiny(SPECS / "count.yaml")), root)
    return root


def _copy(src: Path, tmp_path: Path, name: str = "data") -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst, symlinks=True)
    return dst


# ------------------------------------------------------------------------------------------------
# cases 30, 31, 33: a folder standing where the atomic writer puts a file
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["README.md", "log.jsonl", "results.csv", "results.parquet", "sweep.yaml", "trial.json"])
def test_30_31_33_a_folder_at_a_written_file_is_named_and_kept(tmp_path, name):
    from mosaic.io import FolderInTheWayError, atomic_text_writer, atomic_write

    target = tmp_path / name
    target.mkdir()
    (target / "x").write_text("someone's")
    for write in (lambda: atomic_write(target, "new"), lambda: atomic_text_writer(target).__enter__()):
        with pytest.raises(FolderInTheWayError) as e:
            write()
        assert isinstance(e.value, MosaicError)
        assert name in str(e.value) and "a folder stands where" in str(e.value) and "move the folder away" in str(e.value)
    assert (target / "x").read_text() == "someone's"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left


def test_30_a_folder_made_while_the_file_is_written_is_named(tmp_path):
    from mosaic.io import FolderInTheWayError, atomic_writer

    target = tmp_path / "results.csv"
    with pytest.raises(FolderInTheWayError, match="results.csv"):
        with atomic_writer(target) as f:
            f.write(b"a,b\n")
            target.mkdir()
    assert target.is_dir() and sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_30_a_link_at_a_written_file_is_still_replaced(tmp_path):
    from mosaic.io import atomic_write

    (tmp_path / "d").mkdir()
    (tmp_path / "x").symlink_to(tmp_path / "d", target_is_directory=True)
    atomic_write(tmp_path / "x", "new")
    assert not (tmp_path / "x").is_symlink() and (tmp_path / "x").read_text() == "new" and (tmp_path / "d").is_dir()


def test_30_verify_repair_and_a_rerun_write_the_card_over_an_empty_folder(tmp_path, count_data):
    root = _copy(count_data, tmp_path)
    card = (root / "README.md").read_bytes()
    (root / "README.md").unlink()
    (root / "README.md").mkdir()
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 1
    res = runner.invoke(app, ["verify", "--repair", str(root)])
    assert res.exit_code == 0, res.output
    assert (root / "README.md").read_bytes() == card
    (root / "README.md").unlink()
    (root / "README.md").mkdir()
    res = runner.invoke(app, ["generate", str(SPECS / "count.yaml"), "--set", "image.size=32", "--set", "splits.train=12",
                              "--set", "splits.val=4", "--set", "splits.test=4", "--out", str(root)])
    assert res.exit_code == 0, res.output
    assert (root / "README.md").read_bytes() == card
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 0


def test_30_verify_repair_refuses_a_card_folder_holding_files_by_name(tmp_path, count_data):
    root = _copy(count_data, tmp_path)
    (root / "README.md").unlink()
    (root / "README.md").mkdir()
    (root / "README.md" / "notes.txt").write_text("mine")
    res = runner.invoke(app, ["verify", str(root)])  # what verify says is what repair will do: move it first
    text = " ".join(res.output.split())
    assert res.exit_code == 1 and "a folder that holds files stands where the dataset's card belongs" in text
    assert "never deletes a folder with content" in text and "--repair writes it again" not in text
    res = runner.invoke(app, ["verify", "--repair", str(root)])
    _clean_exit_2(res, "README.md", "move")
    assert (root / "README.md" / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------------------------------------
# cases 31, 32: a run's own files damaged are refused when the run resumes, before any training
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    from tests.test_faults import SPEC, _cfg, _Family, run

    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    base = tmp_path_factory.mktemp("c13run")
    generate(parse_spec(SPEC), base / "data")
    run(_cfg(base / "run", base / "data"), _Family(), say=lambda s: None)
    return base / "run", base / "data"


def _resume(run_dir: Path, data: Path):
    from tests.test_faults import _cfg, _Family, run

    return run(_cfg(run_dir, data), _Family(), say=lambda s: None)


def _interrupted_copy(finished_run, tmp_path) -> Path:
    run_dir = _copy(finished_run[0], tmp_path, "run")
    for name in ("DONE", "metrics.json"):
        (run_dir / name).unlink()
    return run_dir


@pytest.mark.parametrize("name", ["log.jsonl", "log.csv", "val.jsonl", "dataset.json", "DONE", "metrics.json"])
def test_31_32_a_folder_at_a_run_file_is_refused_before_training(tmp_path, finished_run, name):
    run_dir = _interrupted_copy(finished_run, tmp_path)
    if (run_dir / name).exists():
        (run_dir / name).unlink()
    (run_dir / name).mkdir()
    with pytest.raises(TrainingError, match=rf"{name}.*a folder stands where run") as e:
        _resume(run_dir, finished_run[1])
    assert "move it away" in str(e.value)
    assert (run_dir / name).is_dir() and not (run_dir / "DONE").is_file() and not (run_dir / "metrics.json").is_file()


def test_32_a_missing_dataset_record_is_written_again_exactly(tmp_path, finished_run):
    run_dir = _interrupted_copy(finished_run, tmp_path)
    before = (run_dir / "dataset.json").read_bytes()
    (run_dir / "dataset.json").unlink()
    _resume(run_dir, finished_run[1])
    assert (run_dir / "DONE").is_file()
    import json

    assert json.loads((run_dir / "dataset.json").read_bytes()) == json.loads(before)


def test_32_a_missing_dataset_record_that_cannot_be_rewritten_is_refused(tmp_path, finished_run):
    run_dir = _interrupted_copy(finished_run, tmp_path)
    (run_dir / "dataset.json").unlink()
    (run_dir / "dataset_manifest.json").write_text("{}\n")
    with pytest.raises(TrainingError, match=r"dataset.json.*is missing.*restore dataset.json"):
        _resume(run_dir, finished_run[1])
    assert not (run_dir / "dataset.json").exists() and not (run_dir / "DONE").exists()


def test_31_a_fifo_at_a_log_is_refused(tmp_path, finished_run):
    run_dir = _interrupted_copy(finished_run, tmp_path)
    (run_dir / "log.jsonl").unlink()
    os.mkfifo(run_dir / "log.jsonl")
    with pytest.raises(TrainingError, match=r"log.jsonl.*FIFO"):
        _resume(run_dir, finished_run[1])


# ------------------------------------------------------------------------------------------------
# case 15: mosaic preview --out replaces a link standing at the name, never writes through it
# ------------------------------------------------------------------------------------------------

_PREVIEW = [str(SPECS / "count.yaml"), "--set", "image.size=32", "--set", "splits.train=12", "--set", "splits.val=4",
            "--set", "splits.test=4", "--n", "2"]


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_15_preview_replaces_a_link_at_its_output(tmp_path, link):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim\n")
    out = tmp_path / "sheet.png"
    if link == "symlink":
        out.symlink_to(victim)
    else:
        os.link(victim, out)
    res = runner.invoke(app, ["preview", *_PREVIEW, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "victim\n"
    assert not out.is_symlink() and os.stat(out).st_nlink == 1 and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sheet.png", "victim.txt"]


def test_15_the_contact_sheet_writer_replaces_a_link(tmp_path):
    import numpy as np

    from mosaic.preview import contact_sheet

    victim = tmp_path / "victim.png"
    victim.write_bytes(b"keep")
    out = tmp_path / "grid.png"
    out.symlink_to(victim)
    contact_sheet(np.zeros((2, 8, 8, 3), np.uint8), ["a", "b"], out, tile=16)
    assert victim.read_bytes() == b"keep" and not out.is_symlink() and out.read_bytes()[:4] == b"\x89PNG"


# ------------------------------------------------------------------------------------------------
# case 05: a killed finalize's temporary files in the dataset root are cleared by the resume
# ------------------------------------------------------------------------------------------------

_LEFTOVERS = (".checksums.sha256.tmp31523.440e8a72", ".manifest.json.tmp31523.440e8a72", ".README.md.tmp7.0123abcd")


def _plant(root: Path) -> None:
    for name in _LEFTOVERS:
        (root / name).write_text("partial")
    (root / ".notes.tmp").write_text("not mosaic's pattern")  # another name: left alone


def _unfinish(root: Path) -> None:
    import json

    man = json.loads((root / "manifest.json").read_text())
    man["status"] = "incomplete"
    (root / "manifest.json").write_text(json.dumps(man))


@pytest.mark.parametrize("storage", ["imagefolder", "parquet"])
@pytest.mark.parametrize("state", ["unfinished", "complete"])
def test_05_a_resumed_generate_clears_the_root_temporary_files(tmp_path, count_data, storage, state):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    spec = parse_spec(tiny(SPECS / "count.yaml"))
    if storage == "imagefolder":
        root = _copy(count_data, tmp_path)
    else:
        root = tmp_path / "pq"
        generate(spec, root, format="parquet")
    _plant(root)
    if state == "unfinished":
        _unfinish(root)
    generate(spec, root, format=storage)
    names = {p.name for p in root.iterdir()}
    assert not names & set(_LEFTOVERS), names
    assert ".notes.tmp" in names
    (root / ".notes.tmp").unlink()
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 0


def test_05_verify_repair_clears_the_root_temporary_files(tmp_path, count_data):
    root = _copy(count_data, tmp_path)
    _plant(root)
    (root / "README.md").write_text("edited")
    res = runner.invoke(app, ["verify", "--repair", str(root)])
    assert res.exit_code == 0, res.output
    assert not {p.name for p in root.iterdir()} & set(_LEFTOVERS)


# ------------------------------------------------------------------------------------------------
# case 18: a dataset file removed by a writer racing the reader is a named DatasetError (exit 2)
# ------------------------------------------------------------------------------------------------

def _vanish_after_check(monkeypatch, name: str):
    """Remove ``name`` right after verify's check of checksums.sha256 (what a racing `generate --overwrite` does)."""
    import mosaic.verify

    real = mosaic.verify.lines_problem

    def then_gone(p, *a, **k):
        out = real(p, *a, **k)
        (Path(p).parent / name).unlink()
        return out

    monkeypatch.setattr(mosaic.verify, "lines_problem", then_gone)


def _vanish_metadata_after_check(monkeypatch, name: str):
    """Remove ``name`` (a split's metadata.jsonl) after verify found it a file, before it is opened."""
    import mosaic.verify

    real = mosaic.verify.record_claims

    def then_gone(spec, split):
        if name.startswith(split + "/"):
            (_vanish_metadata_after_check.root / name).unlink(missing_ok=True)
        return real(spec, split)

    monkeypatch.setattr(mosaic.verify, "record_claims", then_gone)


@pytest.mark.parametrize("name", ["checksums.sha256", "train/metadata.jsonl"])
def test_18_verify_names_a_file_removed_while_it_reads(tmp_path, count_data, monkeypatch, name):
    from mosaic.errors import DatasetError
    from mosaic.verify import verify

    root = _copy(count_data, tmp_path)
    if name == "checksums.sha256":
        _vanish_after_check(monkeypatch, name)
    else:
        _vanish_metadata_after_check.root = root
        _vanish_metadata_after_check(monkeypatch, name)
    with pytest.raises(DatasetError, match=r"vanished while the dataset was read.*rerun when that writer is done"):
        verify(root, deep=True)
    (root / name).write_bytes((count_data / name).read_bytes())
    res = runner.invoke(app, ["verify", str(root)])
    _clean_exit_2(res, name, "vanished while the dataset was read")


def test_18_a_dataset_reader_names_checksums_removed_while_it_reads(tmp_path, count_data, monkeypatch):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    root = _copy(count_data, tmp_path)
    _vanish_after_check(monkeypatch, "checksums.sha256")
    with pytest.raises(DatasetError, match="checksums.sha256.*vanished"):
        MosaicDataset(root, "train")


def test_18_digests_are_read_from_the_file_opened_even_when_it_is_removed(tmp_path, count_data):
    from mosaic.checksums import RecordedDigests

    root = _copy(count_data, tmp_path)
    d = RecordedDigests(root / "checksums.sha256")
    first = d.get("train/metadata.jsonl")
    (root / "checksums.sha256").unlink()
    assert d.get("test/metadata.jsonl") and d.get("train/metadata.jsonl") == first  # a rescan seeks back, never reopens
    d.close()


def test_33_the_report_names_a_folder_at_results_csv(tmp_path):
    from mosaic.report import write_report

    (tmp_path / "results.csv").mkdir()
    with pytest.raises(MosaicError, match=r"results.csv is damaged \(not a regular file.*move it away"):
        write_report(tmp_path)


def test_18_a_dataset_rewritten_while_verify_reads_it_is_never_called_damaged(tmp_path, count_data, monkeypatch):
    import mosaic.verify
    from mosaic.errors import DatasetError
    from mosaic.io import atomic_write

    root = _copy(count_data, tmp_path)
    real = mosaic.verify.lines_problem

    def overwritten(p, *a, **k):  # what `generate --overwrite` does beside the reader: files gone, a new manifest
        out = real(p, *a, **k)
        (root / "train" / "images" / "000001.png").unlink(missing_ok=True)
        atomic_write(root / "manifest.json", (root / "manifest.json").read_bytes())
        return out

    monkeypatch.setattr(mosaic.verify, "lines_problem", overwritten)
    res = runner.invoke(app, ["verify", str(root)])
    _clean_exit_2(res, "manifest.json", "while the dataset was checked", "rerun when that writer is done")
    monkeypatch.undo()
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 1  # unchanged since: the missing image is damage
    with pytest.raises(DatasetError, match="while the dataset was checked"):
        monkeypatch.setattr(mosaic.verify, "lines_problem", overwritten)
        mosaic.verify.verify(root, deep=True)
