"""Hostile cases of an independent attack on the data path (issue 23), each at its mechanism:
links planted at a lock file, at a writer's target, at a copied source or an appended log are
never written through or read through; a damaged run log is a named error; a file named .png in
another format never reaches a decoder that hands it to an outside program."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

from mosaic.errors import MosaicError, TrainingError
from mosaic.io import atomic_copy, open_append, read_own_file
from mosaic.locks import FolderLock, lock_path
from mosaic.png import FOREIGN_FORMATS, decode_image


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text("precious data")
    return v


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_link_at_the_lock_file_is_replaced_not_written_through(tmp_path, victim, kind):
    out = tmp_path / "out"
    lp = lock_path(out)
    (os.symlink if kind == "symlink" else os.link)(victim, lp)
    with FolderLock(out, what="dataset"):
        assert lp.is_file() and not lp.is_symlink() and os.stat(lp).st_nlink == 1
        assert os.stat(lp).st_ino != os.stat(victim).st_ino
    assert victim.read_text() == "precious data"


def test_a_regular_lock_file_left_by_an_earlier_owner_is_reused(tmp_path):
    out = tmp_path / "out"
    with FolderLock(out):
        ino = os.stat(lock_path(out)).st_ino
    with FolderLock(out):
        assert os.stat(lock_path(out)).st_ino == ino  # the same file: two processes still lock one inode


def test_prediction_rows_replace_a_link_at_their_name(tmp_path, victim):
    from mosaic.evaluation.folder import write_prediction_rows

    target = tmp_path / "predictions.jsonl"
    os.symlink(victim, target)
    write_prediction_rows([{"file_name": "images/0.png", "correct": True}], target)
    assert victim.read_text() == "precious data"
    assert not target.is_symlink() and "images/0.png" in target.read_text()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_copy_never_pulls_a_linked_file_in(tmp_path, victim, kind):
    src = tmp_path / "heatmap.png"
    (os.symlink if kind == "symlink" else os.link)(victim, src)
    with pytest.raises(OSError):
        read_own_file(src)
    with pytest.raises(OSError):
        atomic_copy(src, tmp_path / "copy.png")
    assert not (tmp_path / "copy.png").exists()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_an_appended_log_never_grows_a_linked_file(tmp_path, victim, kind):
    log = tmp_path / "log.txt"
    (os.symlink if kind == "symlink" else os.link)(victim, log)
    with open_append(log) as f:
        f.write(b"trial output\n")
    assert victim.read_text() == "precious data"
    assert log.read_bytes() == b"trial output\n" and not log.is_symlink()
    with open_append(log) as f:  # a regular log of its own is appended to
        f.write(b"more\n")
    assert log.read_bytes() == b"trial output\nmore\n"


def test_a_damaged_run_log_is_a_named_error(tmp_path):
    from mosaic.lab.run_folder import _read_jsonl_rows

    p = tmp_path / "log.jsonl"
    p.write_text('{"step": 1, "loss": 0.5}\nnot json\n')
    with pytest.raises(TrainingError, match=r"log.jsonl line 2 .*delete"):
        _read_jsonl_rows(p)
    p.write_text('{"step": "1"}\n')
    with pytest.raises(TrainingError, match="integer step"):
        _read_jsonl_rows(p)
    p.write_bytes(b'{"step": 1}\n\xff\xfe\n')
    with pytest.raises(TrainingError, match="cannot be read"):
        _read_jsonl_rows(p)
    p.write_text('{"step": 1, "loss": 0.5}\n\n{"step": 2, "loss": 0.4}\n')
    assert [r["step"] for r in _read_jsonl_rows(p)] == [1, 2]


def _encoded(fmt: str) -> bytes:
    b = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(b, format=fmt)
    return b.getvalue()


def test_only_png_is_decoded_for_a_dataset_and_only_plain_rasters_for_scoring(tmp_path):
    jpeg = _encoded("JPEG")
    with pytest.raises(MosaicError, match="not a PNG"):  # mosaic writes PNG only: its form is checked before any decoder runs
        decode_image(jpeg, where="train/images/000000.png", error=MosaicError, exact_size=8)
    assert decode_image(jpeg, where="x.png", error=MosaicError, formats=FOREIGN_FORMATS).shape == (8, 8, 3)
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n"  # Pillow's EPS plugin runs Ghostscript
    for formats in (("PNG",), FOREIGN_FORMATS):
        with pytest.raises(MosaicError, match="not a readable image"):
            decode_image(eps, where="x.png", error=MosaicError, formats=formats)
    assert "EPS" not in FOREIGN_FORMATS and "PDF" not in FOREIGN_FORMATS
