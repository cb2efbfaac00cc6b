"""Hostile cases of an eighth attack on the data path (issue 23), each closed at its mechanism.

A record that names another sample's file: metadata line 2 (sample 1) of an imagefolder dataset
rewritten to name ``images/000000.png`` (or its mask swapped with another sample's), the digests
written again. Every file then still had its recorded digest, so ``verify``, ``export`` and every
reader paired sample 1's labels with sample 0's image without a word. A record must now name its
own sample's files, ``images/NNNNNN.png`` (``masks/NNNNNN.png``) of its index
(:func:`mosaic.checksums.name_problem`), in ``verify`` and in every reader
(:func:`mosaic.dataset.iter_metadata`); a Parquet row's image path must be None or its own
(:func:`mosaic.shard_checks._row_cell_problem`). A boolean ``true`` no longer passes for index 1,
and a chunk type of control bytes is escaped in the message that names it.
"""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2 as _clean_exit_2
from tests.test_attack_cases6 import _reseal
from tests.test_attack_cases7 import _reseal_shard, _rows

runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A 16 px dataset with instance masks."""
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC

    root = tmp_path_factory.mktemp("names") / "data"
    generate(parse_spec(SPEC), root, masks=True)
    return root


@pytest.fixture(scope="module")
def pq_data(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("namespq") / "pq"
    res = runner.invoke(app, ["export", str(data), "--format", "parquet", "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _edit_line(root: Path, line: int, edit) -> None:
    """Replace metadata line ``line`` (1-based) of the train split by ``edit(record)`` and reseal."""
    p = root / "train" / "metadata.jsonl"
    lines = p.read_text().splitlines()
    old, rec = json.loads(lines[line - 1]), edit(json.loads(lines[line - 1]))
    for key in ("file_name", "mask_file_name"):  # a new name of a file no record names: the file moved there
        new = root / "train" / str(rec.get(key))
        if isinstance(rec.get(key), str) and not new.exists():
            (root / "train" / old[key]).rename(new)
    lines[line - 1] = json.dumps(rec)
    p.write_text("\n".join(lines) + "\n")
    _reseal(root)


def _refused_everywhere(tmp_path: Path, root: Path, said: str) -> None:
    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset
    from mosaic.torch_data import MosaicDataset

    for quick in ([], ["--quick"]):
        res = runner.invoke(app, ["verify", str(root), *quick])
        assert res.exit_code == 1 and "train/metadata.jsonl" in res.output, res.output
        assert said in " ".join(res.output.split()), res.output
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "parquet", "-o", str(tmp_path / "pq")]))
    assert not (tmp_path / "pq" / "manifest.json").exists()
    for read in (lambda: MosaicDataset(root, "train", load_masks=True),
                 lambda: MosaicDataset(root, "train", load_masks=True, verify=False),
                 lambda: load_dataset(root)):
        with pytest.raises(DatasetError, match="metadata.jsonl"):
            read()


@pytest.mark.parametrize("edit, said", [
    (lambda r: dict(r, file_name="images/000000.png"), "its file_name is 'images/000000.png', not 'images/000001.png'"),
    (lambda r: dict(r, mask_file_name="masks/000003.png"), "'masks/000003.png'"),
    (lambda r: dict(r, file_name="images/./000001.png"), "'images/./000001.png'"),
    (lambda r: dict(r, file_name="images/000001.PNG"), "'images/000001.PNG'"),
    (lambda r: dict(r, index=True), "line 2"),
])
def test_a_record_naming_another_samples_file_resealed_is_refused_everywhere(tmp_path, data, edit, said):
    root = tmp_path / "data"
    shutil.copytree(data, root)
    _edit_line(root, 2, edit)
    _refused_everywhere(tmp_path, root, said)


def test_two_records_whose_names_are_swapped_resealed_are_refused(tmp_path, data):
    """Lines 2 and 3 swapped whole: each names its own files, but not its line's sample."""
    root = tmp_path / "data"
    shutil.copytree(data, root)
    p = root / "train" / "metadata.jsonl"
    lines = p.read_text().splitlines()
    lines[1], lines[2] = lines[2], lines[1]
    p.write_text("\n".join(lines) + "\n")
    _reseal(root)
    _refused_everywhere(tmp_path, root, "line 2")


def test_a_blank_line_inside_a_mosaic_datasets_metadata_is_refused_by_the_reader(tmp_path, data):
    """A blank line shifts every later record by one: HF's reader skips it, mosaic's must not."""
    from mosaic.dataset import iter_metadata
    from mosaic.errors import DatasetError

    root = tmp_path / "data"
    shutil.copytree(data, root)
    p = root / "train" / "metadata.jsonl"
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
    with pytest.raises(DatasetError, match=r"metadata\.jsonl:3"):
        list(iter_metadata(root, "train"))


def _swap_cells(column):
    def order(rows):
        rows[0][column], rows[1][column] = rows[1][column], rows[0][column]
        return rows
    return _rows(order)


@pytest.mark.parametrize("column", ["image", "mask"])
def test_a_parquet_shard_with_two_rows_cells_swapped_resealed_is_refused(tmp_path, pq_data, column):
    """Rows 0 and 1 trade their image (mask) cells, bytes and path together: each cell is a whole PNG
    of mosaic's form, the shard's sha256 is written again; the path names the other sample."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    root = tmp_path / "pq"
    shutil.copytree(pq_data, root)
    where = _reseal_shard(root, _swap_cells(column))
    folder = "images" if column == "image" else "masks"
    said = f"its {column} path is '{folder}/000001.png', not '{folder}/000000.png'"
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and where in res.output and said in " ".join(res.output.split()), res.output
    _clean_exit_2(runner.invoke(app, ["export", str(root), "--format", "imagefolder", "-o", str(tmp_path / "img")]), where)
    assert not (tmp_path / "img").exists()
    with pytest.raises(DatasetError, match=where.replace(".", r"\.")):
        MosaicDataset(root, "train", load_masks=True)


def test_verify_quick_on_parquet_reads_no_rows_and_says_so(tmp_path, pq_data):
    """The quick check of a Parquet dataset reads shard sizes, footers, row counts and schemas, no row:
    a resealed row edit passes it, the full check and every reader (which check rows) refuse it; the
    help says what the quick check covers."""
    root = tmp_path / "pq"
    shutil.copytree(pq_data, root)
    _reseal_shard(root, _swap_cells("image"))
    assert runner.invoke(app, ["verify", str(root), "--quick"]).exit_code == 0
    assert runner.invoke(app, ["verify", str(root)]).exit_code == 1
    help_text = " ".join(runner.invoke(app, ["verify", "--help"]).output.split())
    assert "no row" in help_text, help_text


def test_a_chunk_type_of_control_bytes_is_escaped_in_the_message(tmp_path, data):
    """An ancillary chunk whose type is control bytes: the message shows it escaped, not raw."""
    from mosaic.png import png_structure_problem

    png = (data / "train" / "images" / "000000.png").read_bytes()
    kind = b"\x1b[2J"
    chunk = struct.pack(">I", 1) + kind + b"x" + struct.pack(">I", zlib.crc32(kind + b"x"))
    bad = png[:33] + chunk + png[33:]
    why = png_structure_problem(bad, 16, "image")
    assert why is not None and "\x1b" not in why and "\\x1b" in why, why
    f = tmp_path / "000000.png"
    f.write_bytes(bad)
    from mosaic.errors import DatasetError
    from mosaic.png import decode_image

    with pytest.raises(DatasetError) as e:
        decode_image(f, where=str(f), error=DatasetError, exact_size=16)
    assert "\x1b" not in str(e.value)
