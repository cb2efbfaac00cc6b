"""Attack round 27: the read paths the earlier rounds covered least — `mosaic export` and Parquet
datasets, `verify --repair` meeting folders, FIFOs and links at a sample's name, `mosaic preview`,
`evaluate` on hand-made folders (odd records, odd files), `audit --import` files of odd shapes,
`evaluator check`, `reproduce --dry-run`, streaming, odd `--set` values and YAML tags, a full disk
in the less-used writers, a killed writer rerun, and a finished run's `metrics.json` edited in the
fields a rerun prints.

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack27: ...")``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from tests.conftest import (TINY_COUNT_SPEC, clean_exit_2, copy_dataset, edit_manifest, enospc as _enospc, run_cli as _run,
                            ok_cli as _ok)

ROOT = Path(__file__).resolve().parents[1]
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _no_traceback(r):
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def _refused(r, *needles):
    """A verify-like result that names damage: exit 1 or 2, no traceback, every needle in the output."""
    _no_traceback(r)
    assert r.exit_code in (1, 2), r.output
    text = " ".join(r.output.split())
    for n in needles:
        assert n in text, r.output


def _tree(p: Path) -> dict:
    """Every file under ``p`` with its bytes (links as their targets)."""
    out = {}
    for q in sorted(p.rglob("*")):
        if q.is_symlink():
            out[str(q.relative_to(p))] = ("link", os.readlink(q))
        elif q.is_file():
            out[str(q.relative_to(p))] = q.read_bytes()
    return out


@pytest.fixture(scope="module")
def pq(made, tmp_path_factory):
    """The ``made`` dataset exported to Parquet once per module."""
    out = tmp_path_factory.mktemp("a27pq") / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", out])
    return out


def _pq_copy(pq, tmp_path: Path, name: str = "pq") -> Path:
    d = tmp_path / name
    shutil.copytree(pq, d)
    return d


# ------------------------------------------------------------------------------------------------
# verify --repair meeting what stands at a sample's name
# ------------------------------------------------------------------------------------------------

def test_repair_keeps_a_persons_folder_standing_at_an_image(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    img = ds / "train" / "images" / "000001.png"
    img.unlink()
    img.mkdir()
    (img / "notes.txt").write_text("mine")
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    # the person's file is never deleted: either kept in place (and the repair refused by name) or the repair
    # refuses without touching it
    assert (img / "notes.txt").read_text() == "mine", r.output
    assert r.exit_code == 2, r.output


def test_repair_replaces_a_fifo_at_an_image_without_waiting(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    img = ds / "train" / "images" / "000002.png"
    good = img.read_bytes()
    img.unlink()
    os.mkfifo(img)
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    assert img.is_file() and img.read_bytes() == good
    _ok(["verify", ds])


def test_repair_replaces_a_symlink_at_an_image_and_keeps_its_target(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    outside = tmp_path / "outside.png"
    outside.write_bytes(b"precious")
    img = ds / "train" / "images" / "000003.png"
    good = img.read_bytes()
    img.unlink()
    img.symlink_to(outside)
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    assert outside.read_bytes() == b"precious"
    assert r.exit_code == 0, r.output
    assert not img.is_symlink() and img.read_bytes() == good


def test_repair_never_writes_a_split_through_a_linked_images_folder(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(ds / "val" / "images", elsewhere)
    (elsewhere / "000000.png").write_bytes(b"broken")
    before = _tree(elsewhere)
    shutil.rmtree(ds / "val" / "images")
    (ds / "val" / "images").symlink_to(elsewhere)
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    assert _tree(elsewhere) == before, r.output


def test_repair_of_a_dataset_without_its_checksums_file_is_named(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    (ds / "checksums.sha256").unlink()
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    if r.exit_code == 0:
        _ok(["verify", ds])
    else:
        assert r.exit_code in (1, 2), r.output
        assert "checksums" in r.output


def test_repair_with_an_image_rewritten_as_another_samples_is_fixed(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    a, b = ds / "train" / "images" / "000000.png", ds / "train" / "images" / "000001.png"
    good = a.read_bytes()
    a.write_bytes(b.read_bytes())
    r = _run(["verify", ds, "--repair"])
    assert r.exit_code == 0, r.output
    assert a.read_bytes() == good
    _ok(["verify", ds, "--against-spec"])


def test_repair_after_a_full_disk_never_leaves_a_dataset_called_whole(made, tmp_path, monkeypatch):
    import mosaic.io as mio

    ds = copy_dataset(made, tmp_path)
    (ds / "train" / "images" / "000004.png").write_bytes(b"\x89PNG broken")
    real = mio.atomic_write

    def write(path, data, *a, **k):
        if str(path).endswith(".png") or str(path).endswith("checksums.sha256") or str(path).endswith("manifest.json"):
            _enospc()
        return real(path, data, *a, **k)

    monkeypatch.setattr(mio, "atomic_write", write)
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    monkeypatch.setattr(mio, "atomic_write", real)
    # whatever the repair did, the dataset is either fixed or still refused: never damaged and called whole
    v = _run(["verify", ds])
    if v.exit_code == 0:
        assert (ds / "train" / "images" / "000004.png").read_bytes().startswith(b"\x89PNG\r\n")
    _ok(["verify", ds, "--repair"])
    _ok(["verify", ds])
    assert not [p for p in ds.rglob("*") if ".tmp" in p.name]


def test_against_spec_names_a_card_prose_edit_as_harmless(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    card = ds / "README.md"
    card.write_text(card.read_text() + "\nA note from a colleague.\n")
    _ok(["verify", ds, "--against-spec"])


# ------------------------------------------------------------------------------------------------
# Parquet datasets and export
# ------------------------------------------------------------------------------------------------

def test_a_parquet_shard_standing_as_a_link_to_its_own_bytes_is_refused(pq, tmp_path):
    d = _pq_copy(pq, tmp_path)
    sh = d / "data" / "train-00000-of-00001.parquet"
    keep = tmp_path / "keep.parquet"
    shutil.move(sh, keep)
    sh.symlink_to(keep)
    _refused(_run(["verify", d]))
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises((DatasetError, ValueError)):
        MosaicDataset(d, "train")


def test_a_parquet_repair_never_writes_through_a_linked_data_folder(pq, tmp_path):
    d = _pq_copy(pq, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(d / "data", elsewhere)
    (elsewhere / "val-00000-of-00001.parquet").write_bytes(b"PAR1 broken")
    before = _tree(elsewhere)
    shutil.rmtree(d / "data")
    (d / "data").symlink_to(elsewhere)
    r = _run(["verify", d, "--repair"])
    _no_traceback(r)
    assert _tree(elsewhere) == before, r.output


def test_a_parquet_repair_keeps_a_persons_folder_at_a_shard(pq, tmp_path):
    d = _pq_copy(pq, tmp_path)
    sh = d / "data" / "val-00000-of-00001.parquet"
    sh.unlink()
    sh.mkdir()
    (sh / "notes.txt").write_text("mine")
    r = _run(["verify", d, "--repair"])
    _no_traceback(r)
    assert (sh / "notes.txt").read_text() == "mine", r.output
    assert r.exit_code == 2, r.output


def test_a_parquet_repair_replaces_a_fifo_at_a_shard(pq, tmp_path):
    d = _pq_copy(pq, tmp_path)
    sh = d / "data" / "val-00000-of-00001.parquet"
    sh.unlink()
    os.mkfifo(sh)
    r = _run(["verify", d, "--repair"])
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    _ok(["verify", d])


def test_export_back_from_a_parquet_copy_is_byte_identical_to_the_source(made, pq, tmp_path):
    out = tmp_path / "back"
    _ok(["export", pq, "-f", "imagefolder", "-o", out])
    for split in ("train", "val", "test_id", "test_ood"):
        assert (out / split / "metadata.jsonl").read_bytes() == (made[1] / split / "metadata.jsonl").read_bytes()
        for img in (made[1] / split / "images").iterdir():
            assert (out / split / "images" / img.name).read_bytes() == img.read_bytes()


def test_export_of_a_parquet_dataset_with_a_shard_swapped_between_splits_is_refused(pq, tmp_path):
    d = _pq_copy(pq, tmp_path)
    a, b = d / "data" / "test_id-00000-of-00001.parquet", d / "data" / "test_ood-00000-of-00001.parquet"
    ta, tb = a.read_bytes(), b.read_bytes()
    a.write_bytes(tb)
    b.write_bytes(ta)
    _clean_exit_2(_run(["export", d, "-f", "imagefolder", "-o", tmp_path / "out"]))
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_export_into_a_folder_inside_a_run_is_refused(drun, made, tmp_path):
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    before = set(p.name for p in (r / "checkpoints").iterdir()) if (r / "checkpoints").exists() else set()
    _clean_exit_2(_run(["export", made[1], "-f", "parquet", "-o", r / "checkpoints" / "x"]))
    after = set(p.name for p in (r / "checkpoints").iterdir()) if (r / "checkpoints").exists() else set()
    assert before == after


def test_export_into_a_run_folder_itself_is_refused(drun, made, tmp_path):
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    before = _tree(r)
    res = _run(["export", made[1], "-f", "parquet", "-o", r, "--overwrite"])
    _clean_exit_2(res)
    assert _tree(r) == before


def test_export_to_a_folder_holding_the_source_is_refused(made, tmp_path):
    box = tmp_path / "box"
    box.mkdir()
    ds = copy_dataset(made, box)
    before = _tree(ds)
    r = _run(["export", ds, "-f", "parquet", "-o", box, "--overwrite"])
    _clean_exit_2(r)
    assert _tree(ds) == before


def test_two_exports_into_one_folder_at_once_leave_one_whole_dataset(made, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mosaic.cli", "export", str(made[1]), "-f", "parquet", "-o", str(out)]
    ps = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in ps]
    codes = sorted(p.returncode for p in ps)
    for o, _ in outs:
        assert "Traceback" not in o, o
    assert codes[0] == 0 and codes[1] in (0, 2), outs
    _ok(["verify", out])


@pytest.mark.parametrize("where", ["finalize_parquet", "write_shards"])
def test_a_killed_export_is_finished_by_a_rerun(made, tmp_path, where):
    out = tmp_path / "out"
    code = ("import sys, os, signal\n"
            "import mosaic.export as E\n"
            "from mosaic.cli import app\n"
            f"real = E.{where}\n"
            "def k(*a, **kw):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            f"E.{where} = k\n"
            "sys.argv = ['mosaic', 'export', sys.argv[1], '-f', 'parquet', '-o', sys.argv[2]]\n"
            "app()\n")
    p = subprocess.run([sys.executable, "-c", code, str(made[1]), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stdout + p.stderr
    _refused(_run(["verify", out]))
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises((DatasetError, ValueError)):
        MosaicDataset(out, "train")
    _ok(["export", made[1], "-f", "parquet", "-o", out])
    _ok(["verify", out])


# ------------------------------------------------------------------------------------------------
# mosaic preview
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sheet.jpg", "sheet", "sheet.PNG.txt"])
def test_preview_out_of_another_format_is_named_before_writing(made, tmp_path, name):
    out = tmp_path / name
    r = _run(["preview", made[0], "--out", out, "--n", "2"])
    _no_traceback(r)
    if r.exit_code == 0:
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert r.exit_code == 2


def test_preview_out_at_an_existing_folder_keeps_it(made, tmp_path):
    out = tmp_path / "sheet.png"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = _run(["preview", made[0], "--out", out, "--n", "2"])
    _clean_exit_2(r)
    assert (out / "notes.txt").read_text() == "mine"


def test_preview_out_inside_a_dataset_is_refused(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    _clean_exit_2(_run(["preview", made[0], "--out", ds / "train" / "sheet.png", "--n", "2"]))
    _ok(["verify", ds])


def test_preview_of_a_split_the_spec_lacks_is_named(made, tmp_path):
    _clean_exit_2(_run(["preview", made[0], "--split", "test", "--out", tmp_path / "a.png", "--n", "2"]))


def test_preview_on_a_full_disk_leaves_no_temp(made, tmp_path, monkeypatch):
    from PIL import Image

    monkeypatch.setattr(Image.Image, "save", lambda *a, **k: _enospc())
    r = _run(["preview", made[0], "--out", tmp_path / "a.png", "--n", "2"])
    monkeypatch.undo()
    _clean_exit_2(r, "disk is full")
    assert not list(tmp_path.iterdir())


def test_preview_of_a_dataset_folder_instead_of_a_spec_is_named(made, tmp_path):
    r = _run(["preview", made[1], "--out", tmp_path / "a.png", "--n", "2"])
    _no_traceback(r)
    assert r.exit_code in (0, 2), r.output


# ------------------------------------------------------------------------------------------------
# YAML tags and --set values
# ------------------------------------------------------------------------------------------------

def _spec(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    return p


def test_a_binary_tag_that_is_no_text_is_named(tmp_path):
    p = _spec(tmp_path, TINY_COUNT_SPEC.replace("name: t", "name: !!binary /w=="))
    _clean_exit_2(_run(["validate", p]))


@pytest.mark.parametrize("value", ["!!python/name:os.system", "!!python/object/apply:os.system ['true']", "!!set {16}",
                                   "!!omap [{a: 1}]", "!!pairs [[a, 1]]", "!!timestamp 2001-01-01", "*undefined",
                                   "&a [*a]", "{a: 1, a: 2}", "1e400", "0o20", "16.5", "'16'"])
def test_odd_set_values_for_the_image_size_are_named_or_exact(made, value):
    r = _run(["validate", made[0], "--set", f"image.size={value}"])
    _no_traceback(r)
    if value == "'16'" and r.exit_code == 0:  # the text of the very number: the same spec
        from mosaic.spec import load_spec

        assert load_spec(made[0], overrides=[f"image.size={value}"]).fingerprint() == load_spec(made[0]).fingerprint()
        return
    assert r.exit_code == 2, r.output


@pytest.mark.parametrize("key", ["image..size", ".image.size", "image.size.", "image.size[0]", "concepts.color.values.-1",
                                 "concepts.color.values.99", "objects.0.__class__", "splits.train.x"])
def test_odd_set_keys_are_named(made, key):
    r = _run(["validate", made[0], "--set", f"{key}=3"])
    _clean_exit_2(r)


def test_a_set_value_with_a_python_tag_in_generate_writes_nothing(made, tmp_path):
    out = tmp_path / "ds"
    r = _run(["generate", made[0], "--out", out, "--set", "name=!!python/object/apply:os.system ['touch /tmp/attack27_pwn']"])
    _clean_exit_2(r)
    assert not Path("/tmp/attack27_pwn").exists()
    assert not out.exists() or not any(out.iterdir())


def test_a_spec_with_a_merge_key_means_the_merged_mapping(tmp_path):
    base = TINY_COUNT_SPEC.replace("image: {size: 16}", "image: {<<: {size: 16}}")
    a = _spec(tmp_path, base)
    r = _run(["validate", a])
    _no_traceback(r)
    b = tmp_path / "plain.yaml"
    b.write_text(TINY_COUNT_SPEC)
    if r.exit_code == 0:
        from mosaic.spec import load_spec

        assert load_spec(a).fingerprint() == load_spec(b).fingerprint()


# ------------------------------------------------------------------------------------------------
# evaluate on hand-made folders
# ------------------------------------------------------------------------------------------------

def _eval_folder(made, tmp_path: Path, n: int = 3) -> Path:
    """A plain folder to evaluate: the first ``n`` test_ood images and records of the dataset (no manifest)."""
    src = made[1] / "test_ood"
    f = tmp_path / "imgs"
    (f / "images").mkdir(parents=True)
    rows = [json.loads(x) for x in (src / "metadata.jsonl").read_text().splitlines()][:n]
    out = []
    for r in rows:
        shutil.copy(src / r["file_name"], f / r["file_name"])
        out.append({"file_name": r["file_name"], "concepts": r["concepts"]})
    (f / "metadata.jsonl").write_text("".join(json.dumps(x) + "\n" for x in out))
    return f


def _rows(f: Path) -> list[dict]:
    return [json.loads(x) for x in (f / "metadata.jsonl").read_text().splitlines()]


def _write_rows(f: Path, rows) -> None:
    (f / "metadata.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


def test_evaluate_a_plain_folder_is_fine(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    _ok(["evaluate", f, "--spec", made[0]])


def test_evaluate_reads_a_count_written_as_a_float_as_the_integer_or_refuses_it(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    _ok(["evaluate", f, "--spec", made[0], "-o", tmp_path / "a"])
    rows = _rows(f)
    rows[0]["concepts"]["count"] = float(rows[0]["concepts"]["count"])
    _write_rows(f, rows)
    r = _run(["evaluate", f, "--spec", made[0], "-o", tmp_path / "b"])
    _no_traceback(r)
    if r.exit_code == 0:
        ma = json.loads((tmp_path / "a" / "metrics.json").read_text())
        mb = json.loads((tmp_path / "b" / "metrics.json").read_text())
        assert ma.get("table") == mb.get("table")
    else:
        assert r.exit_code == 2, r.output


@pytest.mark.parametrize("value", [True, "1", -1, 10 ** 30, None, [1]])
def test_evaluate_refuses_a_count_of_another_type_or_out_of_range(made, tmp_path, value):
    f = _eval_folder(made, tmp_path)
    rows = _rows(f)
    rows[0]["concepts"]["count"] = value
    _write_rows(f, rows)
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_refuses_a_colour_outside_the_spec(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    rows = _rows(f)
    rows[0]["concepts"]["color"] = "purple"
    _write_rows(f, rows)
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_refuses_a_record_missing_a_concept(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    rows = _rows(f)
    del rows[0]["concepts"]["count"]
    _write_rows(f, rows)
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_names_a_folder_standing_for_an_image(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    p = f / _rows(f)[0]["file_name"]
    p.unlink()
    p.mkdir()
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_names_a_fifo_standing_for_an_image_without_waiting(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    p = f / _rows(f)[0]["file_name"]
    p.unlink()
    os.mkfifo(p)
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_names_a_fifo_standing_for_the_metadata(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    (f / "metadata.jsonl").unlink()
    os.mkfifo(f / "metadata.jsonl")
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_names_an_empty_metadata_file(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    (f / "metadata.jsonl").write_text("")
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_names_metadata_with_crlf_or_reads_it_alike(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    a = _ok(["evaluate", f, "--spec", made[0], "-o", tmp_path / "a"])
    (f / "metadata.jsonl").write_bytes((f / "metadata.jsonl").read_bytes().replace(b"\n", b"\r\n"))
    r = _run(["evaluate", f, "--spec", made[0], "-o", tmp_path / "b"])
    _no_traceback(r)
    if r.exit_code == 0:
        ma = json.loads((tmp_path / "a" / "metrics.json").read_text())
        mb = json.loads((tmp_path / "b" / "metrics.json").read_text())
        assert ma.get("table") == mb.get("table")
    else:
        assert r.exit_code == 2


def test_evaluate_refuses_an_image_name_with_a_trailing_slash_or_backslash(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    rows = _rows(f)
    rows[0]["file_name"] = rows[0]["file_name"].replace("/", "\\")
    _write_rows(f, rows)
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_out_into_the_folder_it_scores_keeps_its_images(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    before = _tree(f)
    r = _run(["evaluate", f, "--spec", made[0], "-o", f])
    _no_traceback(r)
    after = _tree(f)
    for k, v in before.items():
        assert after.get(k) == v, k


def test_evaluate_of_a_png_truncated_after_its_header_is_named(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    p = f / _rows(f)[0]["file_name"]
    p.write_bytes(p.read_bytes()[:40])
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


# ------------------------------------------------------------------------------------------------
# streaming and the readers
# ------------------------------------------------------------------------------------------------

def test_streaming_a_spec_file_with_a_python_tag_never_constructs_it(tmp_path):
    from mosaic.errors import MosaicError
    from mosaic.stream import StreamingDataset

    p = _spec(tmp_path, TINY_COUNT_SPEC.replace("name: t", "name: !!python/object/apply:os.getcwd []"))
    with pytest.raises((MosaicError, ValueError)):
        StreamingDataset(p, "train")


def test_streaming_a_fifo_spec_is_named_without_waiting(tmp_path):
    from mosaic.errors import MosaicError
    from mosaic.stream import StreamingDataset

    p = tmp_path / "spec.yaml"
    os.mkfifo(p)
    with pytest.raises((MosaicError, ValueError, OSError)):
        StreamingDataset(p, "train")


def test_streaming_a_parquet_dataset_gives_its_own_records(made, pq):
    from mosaic.stream import StreamingDataset

    a = [x["metadata"]["caption"] if "metadata" in x else x.get("caption") for x in StreamingDataset(pq, "test_ood")]
    rows = [json.loads(x)["caption"] for x in (made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()]
    assert a == rows


def test_mosaic_dataset_of_a_parquet_copy_with_a_shard_truncated_is_refused(pq, tmp_path):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    d = _pq_copy(pq, tmp_path)
    sh = d / "data" / "train-00000-of-00001.parquet"
    sh.write_bytes(sh.read_bytes()[:-100])
    with pytest.raises((DatasetError, ValueError)):
        MosaicDataset(d, "train")


def test_hf_load_of_a_parquet_copy_with_a_stray_shard_is_refused(pq, tmp_path):
    from mosaic.errors import MosaicError
    from mosaic.hf_load import load_dataset

    d = _pq_copy(pq, tmp_path)
    shutil.copy(d / "data" / "train-00000-of-00001.parquet", d / "data" / "train-extra.parquet")
    with pytest.raises((MosaicError, ValueError)):
        load_dataset(d, cache_dir=str(tmp_path / "cache"))


# ------------------------------------------------------------------------------------------------
# audit --import of odd files
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def scored(drun, tmp_path_factory):
    """A copy of the ``drun`` run whose samples folder was scored (``evaluate -o`` itself)."""
    base = tmp_path_factory.mktemp("a27scored")
    r = base / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    (s,) = [p for p in (r / "samples").iterdir() if p.is_dir()]
    _ok(["evaluate", s, "--spec", r / "dataset", "--check-n", "10", "-o", s])
    _ok(["audit", s])
    return s


def _samples_copy(scored, tmp_path: Path) -> Path:
    r = tmp_path / "run"
    shutil.copytree(scored.parent.parent, r, symlinks=True)
    return r / "samples" / scored.name


def _audit_file(s: Path, marks) -> dict:
    items = json.loads((s / "audit" / "items.json").read_text())
    return {"audit_id": items["meta"]["audit_id"], "marks": marks(items["items"])}


def test_an_honest_audit_import_is_counted(scored, tmp_path):
    s = _samples_copy(scored, tmp_path)
    a = _audit_file(s, lambda its: [{"id": it["id"], "source": it.get("source"), "file_name": it["file_name"], "mark": "correct"}
                                    for it in its])
    f = tmp_path / "audit.json"
    f.write_text(json.dumps(a))
    _ok(["audit", s, "--import", f])
    _ok(["audit", s, "--summary"])


@pytest.mark.parametrize("doc", ["[]", "null", "\"x\"", "{\"audit_id\": 5, \"marks\": []}", "{\"audit_id\": null, \"marks\": {}}",
                                 "\xff\xfe", "{\"audit_id\": \"x\", \"marks\": [1, 2]}"])
def test_an_audit_import_of_another_shape_is_named(scored, tmp_path, doc):
    s = _samples_copy(scored, tmp_path)
    f = tmp_path / "audit.json"
    f.write_bytes(doc.encode("latin-1"))
    _clean_exit_2(_run(["audit", s, "--import", f]))


@pytest.mark.parametrize("field,value", [("id", True), ("id", 0.0), ("id", "0"), ("mark", ["correct"]), ("mark", "CORRECT"),
                                         ("file_name", None)])
def test_an_audit_mark_of_odd_json_is_refused(scored, tmp_path, field, value):
    s = _samples_copy(scored, tmp_path)

    def marks(its):
        m = [{"id": it["id"], "source": it.get("source"), "file_name": it["file_name"], "mark": "correct"} for it in its]
        m[0][field] = value
        return m

    f = tmp_path / "audit.json"
    f.write_text(json.dumps(_audit_file(s, marks)))
    _clean_exit_2(_run(["audit", s, "--import", f]))
    assert not (s / "audit" / "audit.json").exists()


def test_an_audit_import_of_a_fifo_is_named_without_waiting(scored, tmp_path):
    s = _samples_copy(scored, tmp_path)
    f = tmp_path / "audit.json"
    os.mkfifo(f)
    _clean_exit_2(_run(["audit", s, "--import", f]))


def test_an_audit_import_whose_mark_is_null_counts_nothing(scored, tmp_path):
    s = _samples_copy(scored, tmp_path)
    a = _audit_file(s, lambda its: [{"id": it["id"], "source": it.get("source"), "file_name": it["file_name"], "mark": None}
                                    for it in its])
    f = tmp_path / "audit.json"
    f.write_text(json.dumps(a))
    r = _run(["audit", s, "--import", f])
    _no_traceback(r)
    if r.exit_code == 0:
        summ = _run(["audit", s, "--summary"])
        _no_traceback(summ)
        assert "100" not in summ.output or "0 marked" in summ.output or summ.exit_code == 2, summ.output


def test_an_audit_import_with_a_key_given_twice_is_refused(scored, tmp_path):
    s = _samples_copy(scored, tmp_path)
    items = json.loads((s / "audit" / "items.json").read_text())
    it = items["items"][0]
    mark = (f'{{"id": {it["id"]}, "source": {json.dumps(it.get("source"))}, "file_name": {json.dumps(it["file_name"])}, '
            f'"mark": "incorrect", "mark": "correct"}}')
    f = tmp_path / "audit.json"
    f.write_text(f'{{"audit_id": {json.dumps(items["meta"]["audit_id"])}, "marks": [{mark}]}}')
    _clean_exit_2(_run(["audit", s, "--import", f]))


# ------------------------------------------------------------------------------------------------
# evaluator check, reproduce --dry-run, analyze options
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--n", "0"], ["--n", "-5"], ["--degrade", "bogus"], ["--position-bins", "bogus"],
                                  ["-e", "nonexistent_folder"], ["--workers", "0"]])
def test_evaluator_check_odd_options_are_named(made, args):
    _clean_exit_2(_run(["evaluator", "check", made[0], *args]))


def test_evaluator_check_json_into_a_dataset_is_refused(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    _clean_exit_2(_run(["evaluator", "check", made[0], "--n", "4", "--json", ds / "train" / "r.json"]))
    _ok(["verify", ds])


def test_evaluator_check_json_at_a_link_never_writes_its_target(made, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    link = tmp_path / "r.json"
    link.symlink_to(outside)
    r = _run(["evaluator", "check", made[0], "--n", "4", "--json", link])
    _no_traceback(r)
    assert outside.read_text() == "precious"


def test_evaluator_check_of_a_folder_of_another_kind_is_named(made, drun):
    _clean_exit_2(_run(["evaluator", "check", made[0], "-e", drun[0]]))


@pytest.mark.parametrize("args", [["bogus"], ["mosaic", "--scale", "bogus"], ["mosaic", "--backend", "bogus"],
                                  ["mosaic", "--workers", "0"]])
def test_reproduce_dry_run_with_odd_options_is_named(args, tmp_path):
    _clean_exit_2(_run(["reproduce", *args, "--dry-run", "-o", tmp_path / "r"]))
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_reproduce_dry_run_writes_nothing(tmp_path):
    r = _run(["reproduce", "coverage", "--dry-run", "-o", tmp_path / "r"])
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_reproduce_dry_run_out_at_a_file_is_named(tmp_path):
    f = tmp_path / "r"
    f.write_text("mine")
    r = _run(["reproduce", "coverage", "--dry-run", "-o", f])
    _no_traceback(r)
    assert f.read_text() == "mine"


@pytest.mark.parametrize("what", ["bogus", "probes,probes", "", ","])
def test_analyze_odd_what_is_named(drun, tmp_path, what):
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    m = (r / "metrics.json").read_bytes()
    res = _run(["analyze", r, "--what", what, "--device", "cpu"])
    _no_traceback(res)
    if what in ("bogus", "", ","):
        assert res.exit_code == 2, res.output
    assert (r / "metrics.json").read_bytes() == m or res.exit_code == 0


@pytest.mark.parametrize("setting", ["probes.steps=1e400", "bogus=1", "seed=yes", "probes=!!set {a}"])
def test_analyze_odd_set_is_named(drun, tmp_path, setting):
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    m = (r / "metrics.json").read_bytes()
    res = _run(["analyze", r, "--set", setting, "--device", "cpu", "--no-write"])
    _clean_exit_2(res)
    assert (r / "metrics.json").read_bytes() == m


def test_analyze_checkpoint_bogus_is_named(drun, tmp_path):
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    _clean_exit_2(_run(["analyze", r, "--checkpoint", "../final", "--device", "cpu", "--no-write"]))


# ------------------------------------------------------------------------------------------------
# a finished run's metrics.json under a rerun of mosaic train
# ------------------------------------------------------------------------------------------------

def _rerun_train(r: Path):
    return _run(["train", "diffusion", r / "config.yaml", "--out", r])


def _edited_metrics(drun, tmp_path: Path, edit) -> Path:
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    p = r / "metrics.json"
    m = json.loads(p.read_text())
    edit(m)
    p.write_text(json.dumps(m, indent=2))
    return r


def test_a_rerun_of_an_untouched_finished_run_prints_its_result(drun, tmp_path):
    r = _edited_metrics(drun, tmp_path, lambda m: None)
    res = _rerun_train(r)
    assert res.exit_code == 0, res.output
    assert "already done" in res.output


# fixed (was recorded): attack27: W: a finished run's time_s edited to -5 or NaN is printed as the run's ('done ... in -5 s')
@pytest.mark.parametrize("value", [-5.0, float("nan")])
def test_a_rerun_never_prints_an_impossible_run_time(drun, tmp_path, value):
    r = _edited_metrics(drun, tmp_path, lambda m: m.__setitem__("time_s", value))
    _clean_exit_2(_rerun_train(r), "metrics.json")


# fixed (was recorded): attack27: W: a finished run's metrics.json train record edited (steps 999999, final loss, device, processes, negative images/s) is printed by a rerun of `mosaic train` as the run's, exit 0
@pytest.mark.parametrize("field,value", [("steps", 999999), ("final_loss", 0.0001),
                                         ("device", "cuda:7"),  # fixed (was recorded): train.device is recorded, not derived again
                                         ("processes", 64),  # fixed (was recorded): train.processes is recorded, not derived again
                                         ("images_per_s", -3.0)])
def test_a_rerun_never_prints_an_edited_training_record(drun, tmp_path, field, value):
    r = _edited_metrics(drun, tmp_path, lambda m: m["train"].__setitem__(field, value))
    res = _rerun_train(r)
    _clean_exit_2(res, "metrics.json")


# fixed (was recorded): attack27: W: a finished run's metrics.json samples.out edited to an empty folder outside the run is printed by a rerun of `mosaic train` as where its samples lie, exit 0
def test_a_rerun_never_prints_samples_of_a_folder_outside_the_run(drun, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    r = _edited_metrics(drun, tmp_path, lambda m: m["samples"].__setitem__("out", str(other)))
    _clean_exit_2(_rerun_train(r))


# ------------------------------------------------------------------------------------------------
# mosaic autoencoder given folders and values of another kind
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["dataset", "run", "empty", "file", "missing"])
def test_autoencoder_check_of_a_folder_of_another_kind_is_named(made, drun, tmp_path, kind):
    folder = {"dataset": made[1], "run": drun[0], "empty": tmp_path / "e", "file": tmp_path / "f", "missing": tmp_path / "m"}[kind]
    if kind == "empty":
        folder.mkdir()
    if kind == "file":
        folder.write_text("x")
    before = _tree(folder) if folder.is_dir() else None
    r = _run(["autoencoder", "check", folder, made[0], "--n", "2"])
    _clean_exit_2(r)
    if before is not None:
        assert _tree(folder) == before


@pytest.mark.parametrize("ae", ["factor=!!set {4}", "factor=yes", "bogus=1", "steps=1e400", "factor=4.5", "block_out_channels=[8, 16, 99999999]"])
def test_autoencoder_train_odd_ae_values_are_named_before_training(made, tmp_path, ae):
    r = _run(["autoencoder", "train", made[0], "--ae", ae, "--out", tmp_path / "ae"])
    _clean_exit_2(r)
    assert not (tmp_path / "ae" / "vae").exists()


@pytest.fixture(scope="module")
def tiny_ae(tmp_path_factory):
    from tests.conftest import tiny_autoencoder

    return tiny_autoencoder(tmp_path_factory, "a27ae", 2)


def _ae_copy(tiny_ae, tmp_path: Path) -> Path:
    d = tmp_path / "ae"
    shutil.copytree(tiny_ae[0], d, symlinks=True)
    return d


def _ae_check(d: Path, tiny_ae):
    from mosaic.errors import MosaicError
    from mosaic.lab.autoencoder import checked

    return checked(d, tiny_ae[1], tiny_ae[2], say=lambda m: None)


@pytest.mark.parametrize("where", ["vae/config.json", "vae/diffusion_pytorch_model.safetensors"])
def test_a_fifo_in_an_autoencoder_folder_is_named_without_waiting(tiny_ae, tmp_path, where):
    from mosaic.errors import MosaicError

    d = _ae_copy(tiny_ae, tmp_path)
    (d / where).unlink()
    os.mkfifo(d / where)
    with pytest.raises((MosaicError, ValueError)):
        _ae_check(d, tiny_ae)


def test_an_autoencoder_config_with_a_nan_scaling_factor_is_never_used(tiny_ae, tmp_path):
    from mosaic.errors import MosaicError

    d = _ae_copy(tiny_ae, tmp_path)
    p = d / "vae" / "config.json"
    cfg = json.loads(p.read_text())
    text = json.dumps(cfg)
    if "scaling_factor" not in cfg:
        pytest.skip("no scaling_factor")
    cfg["scaling_factor"] = float("nan")
    p.write_text(json.dumps(cfg))
    with pytest.raises((MosaicError, ValueError)):
        _ae_check(d, tiny_ae)


def test_a_fifo_at_an_autoencoder_check_record_is_measured_again(tiny_ae, tmp_path):
    d = _ae_copy(tiny_ae, tmp_path)
    checks = [p for p in d.iterdir() if p.name.startswith("check-") and p.suffix == ".json"]
    if not checks:
        pytest.skip("no check record")
    checks[0].unlink()
    os.mkfifo(checks[0])
    from mosaic.errors import MosaicError

    try:
        res = _ae_check(d, tiny_ae)
    except (MosaicError, ValueError):
        return
    assert res is not None


# ------------------------------------------------------------------------------------------------
# a finished sweep: hostile predictions rows (raw/below/quality) and trial configs at their defaults
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "a27sweep")


def _sw(swept, tmp_path):
    from tests.conftest import sweep_copy

    return sweep_copy(swept, tmp_path)


def test_an_untouched_sweep_copy_reports(swept, tmp_path):
    sw = _sw(swept, tmp_path)
    _ok(["report", sw])


def _edit_pred(sw: Path, edit) -> None:
    from tests.conftest import scored_folder, trial_dirs

    t = trial_dirs(sw)[0]
    p = scored_folder(t) / "predictions.jsonl"
    lines = p.read_text().splitlines()
    lines[0] = edit(lines[0])
    p.write_text("".join(x + "\n" for x in lines))


@pytest.mark.parametrize("edit", ["below_string", "quality_nan", "quality_huge", "raw_extra", "raw_null", "below_missing"])
def test_report_refuses_a_predictions_row_of_odd_json(swept, tmp_path, edit):
    sw = _sw(swept, tmp_path)

    def ed(line):
        row = json.loads(line)
        if edit == "below_string":
            row["below"] = "false" if not row.get("below") else "true"
        elif edit == "quality_nan":
            q = row.get("quality")
            return json.dumps(row).replace(json.dumps(q), "NaN", 1) if isinstance(q, (int, float)) else json.dumps({**row, "quality": float("nan")})
        elif edit == "quality_huge":
            row["quality"] = 1e300 if not isinstance(row.get("quality"), dict) else {k: 1e300 for k in row["quality"]}
        elif edit == "raw_extra":
            row["raw"] = {**(row.get("raw") or {}), "zzz": "x"}
        elif edit == "raw_null":
            row["raw"] = None
        else:
            row.pop("below", None)
        return json.dumps(row)

    _edit_pred(sw, ed)
    _clean_exit_2(_run(["report", sw]))


def test_a_trial_config_stating_a_default_explicitly_is_still_its_trials_run(swept, tmp_path):
    import yaml

    from tests.conftest import trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    run_cfg = yaml.safe_load((t / "run" / "config.yaml").read_text())
    cfg = yaml.safe_load((t / "config.yaml").read_text())
    # a field the trial leaves to its default, written out with the very value the run config holds
    added = None
    for sec in ("training", "sampling", "evaluation"):
        for k, v in (run_cfg.get(sec) or {}).items():
            if k not in (cfg.get(sec) or {}) and isinstance(v, (int, float, str)) and not isinstance(v, bool):
                cfg.setdefault(sec, {})[k] = v
                added = (sec, k)
                break
        if added:
            break
    assert added
    (t / "config.yaml").write_text(yaml.safe_dump(cfg))
    _ok(["report", sw])


def test_a_run_config_whose_yaml_text_differs_but_means_the_same_is_still_its_trials_run(swept, tmp_path):
    import yaml

    from tests.conftest import trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    p = t / "run" / "config.yaml"
    data = yaml.safe_load(p.read_text())
    p.write_text(json.dumps(data, indent=1))  # JSON is YAML: the same values in flow style
    r = _run(["report", sw])
    _no_traceback(r)
    assert r.exit_code in (0, 2), r.output


# ------------------------------------------------------------------------------------------------
# a dataset's .mosaic work folder: links and a person's files there
# ------------------------------------------------------------------------------------------------

def test_repair_never_writes_through_a_linked_work_folder(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(ds / ".mosaic", elsewhere)
    (elsewhere / "notes.txt").write_text("mine")
    (ds / ".mosaic").symlink_to(elsewhere)
    before = _tree(elsewhere)
    (ds / "train" / "images" / "000005.png").write_bytes(b"broken")
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    assert _tree(elsewhere) == before, r.output


@pytest.mark.parametrize("form", ["imagefolder", "parquet"])
def test_repair_keeps_a_persons_file_in_the_work_folder(made, pq, tmp_path, form):
    d = copy_dataset(made, tmp_path) if form == "imagefolder" else _pq_copy(pq, tmp_path)
    (d / ".mosaic").mkdir(exist_ok=True)
    (d / ".mosaic" / "notes.txt").write_text("mine")
    if form == "imagefolder":
        (d / "train" / "images" / "000005.png").write_bytes(b"broken")
    else:
        (d / "data" / "val-00000-of-00001.parquet").write_bytes(b"broken")
    r = _run(["verify", d, "--repair"])
    _no_traceback(r)
    assert (d / ".mosaic" / "notes.txt").read_text() == "mine", r.output


def test_a_resumed_generate_of_a_complete_dataset_never_reads_a_linked_parts_folder(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(ds / ".mosaic" / "parts", elsewhere)
    before = _tree(elsewhere)
    (ds / ".mosaic" / "parts").symlink_to(elsewhere)
    r = _run(["generate", made[0], "--out", ds])
    _no_traceback(r)
    assert _tree(elsewhere) == before
    _ok(["verify", ds])


# ------------------------------------------------------------------------------------------------
# evaluate: links at its records and outputs; an audit of an unfinished evaluation
# ------------------------------------------------------------------------------------------------

def test_evaluate_refuses_a_metadata_file_that_is_a_link(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    other = tmp_path / "other.jsonl"
    shutil.move(f / "metadata.jsonl", other)
    (f / "metadata.jsonl").symlink_to(other)
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]))


def test_evaluate_out_never_writes_through_a_link_at_its_metrics(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    _ok(["evaluate", f, "--spec", made[0], "-o", out])
    outside = tmp_path / "outside.json"
    outside.write_text("precious")
    (out / "metrics.json").unlink()
    (out / "metrics.json").symlink_to(outside)
    r = _run(["evaluate", f, "--spec", made[0], "-o", out])
    _no_traceback(r)
    assert outside.read_text() == "precious"


def test_an_audit_of_an_evaluation_that_never_finished_is_refused(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    _ok(["evaluate", f, "--spec", made[0], "-o", f])
    from mosaic.evaluation.folder import INCOMPLETE

    (f / "metrics.json").write_text(json.dumps(INCOMPLETE) + "\n")
    r = _run(["audit", f])
    _clean_exit_2(r)
    assert not (f / "audit" / "audit.html").exists()


# fixed (was recorded): attack27: O: `mosaic audit` makes a page from a predictions.jsonl whose metrics.json is gone (it refuses one whose metrics.json says incomplete): nothing says the rows are one whole evaluation
def test_an_audit_of_predictions_without_their_metrics_is_refused(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    _ok(["evaluate", f, "--spec", made[0], "-o", f])
    (f / "metrics.json").unlink()
    r = _run(["audit", f])
    _clean_exit_2(r)


# fixed (was recorded): attack27: W: after two scored images are swapped, `mosaic audit` shows each image with the other's evaluator verdict for a person to mark, exit 0 (no digest in predictions rows, no re-read)
def test_an_audit_of_predictions_whose_images_were_replaced_is_refused(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    _ok(["evaluate", f, "--spec", made[0], "-o", f])
    rows = _rows(f)
    a, b = f / rows[0]["file_name"], f / rows[1]["file_name"]
    ta, tb = a.read_bytes(), b.read_bytes()
    a.write_bytes(tb)
    b.write_bytes(ta)
    r = _run(["audit", f])
    _no_traceback(r)
    assert r.exit_code == 2, r.output


# fixed (was recorded): attack27: O: `evaluate PARQUET_DATASET` advises `give one of its splits, e.g. PQ/test_ood`, a folder a Parquet dataset does not have (then refused as missing); it should say to export it to imagefolder
def test_evaluate_of_a_parquet_dataset_never_advises_a_folder_it_lacks(pq):
    r = _run(["evaluate", pq])
    _clean_exit_2(r, "export")
    text = " ".join(r.output.split())
    assert f"{pq}/test_ood" not in text or (pq / "test_ood").exists(), r.output


def test_evaluate_of_a_parquet_split_name_is_named(pq):
    r = _run(["evaluate", pq / "test_ood", "--spec", pq])
    _clean_exit_2(r)


# ------------------------------------------------------------------------------------------------
# full disks in the less-used writers; two writers at once; a killed generate
# ------------------------------------------------------------------------------------------------

def test_evaluator_check_json_on_a_full_disk_is_named_and_leaves_no_temp(made, tmp_path, monkeypatch):
    import mosaic.io as mio

    real = mio.os.write if hasattr(mio, "os") else None
    from mosaic import io as _io

    calls = {"n": 0}
    orig = os.replace

    def replace(a, b, *x, **k):
        if str(b).endswith("r.json"):
            _enospc()
        return orig(a, b, *x, **k)

    monkeypatch.setattr(os, "replace", replace)
    r = _run(["evaluator", "check", made[0], "--n", "4", "--json", tmp_path / "r.json"])
    monkeypatch.undo()
    _no_traceback(r)
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "r.json").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_splits_out_on_a_full_disk_is_named_and_leaves_no_temp(made, tmp_path, monkeypatch):
    orig = os.replace

    def replace(a, b, *x, **k):
        if str(b).endswith("grid.png"):
            _enospc()
        return orig(a, b, *x, **k)

    monkeypatch.setattr(os, "replace", replace)
    r = _run(["splits", made[0], "--out", tmp_path / "grid.png"])
    monkeypatch.undo()
    _clean_exit_2(r, "disk is full")
    assert not list(tmp_path.iterdir())


def test_two_repairs_at_once_leave_one_whole_dataset(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    (ds / "train" / "images" / "000006.png").write_bytes(b"broken")
    cmd = [sys.executable, "-m", "mosaic.cli", "verify", str(ds), "--repair"]
    ps = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in ps]
    for o in outs:
        assert "Traceback" not in o, o
    assert sorted(p.returncode for p in ps)[0] == 0, outs
    _ok(["verify", ds])


def test_a_generate_killed_midway_is_refused_by_readers_and_finished_by_a_rerun(made, tmp_path):
    out = tmp_path / "ds"
    code = ("import sys, os, signal\n"
            "import mosaic.dataset as D\n"
            "from mosaic.cli import app\n"
            "import mosaic.hf as H\n"
            "def k(*a, **kw):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "D.write_card = k\n"
            "H.write_card = k\n"
            "sys.argv = ['mosaic', 'generate', sys.argv[1], '--out', sys.argv[2]]\n"
            "app()\n")
    p = subprocess.run([sys.executable, "-c", code, str(made[0]), str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stdout + p.stderr
    _refused(_run(["verify", out]))
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises((DatasetError, ValueError)):
        MosaicDataset(out, "train")
    _ok(["generate", made[0], "--out", out])
    _ok(["verify", out])
    for split in ("train", "test_ood"):
        assert (out / split / "metadata.jsonl").read_bytes() == (made[1] / split / "metadata.jsonl").read_bytes()


# ------------------------------------------------------------------------------------------------
# HF loading and streaming of Parquet datasets
# ------------------------------------------------------------------------------------------------

def test_hf_load_of_a_parquet_dataset_gives_its_own_rows(made, pq, tmp_path):
    from mosaic.hf_load import load_dataset

    d = load_dataset(pq, cache_dir=str(tmp_path / "cache"))
    caps = [json.loads(x)["caption"] for x in (made[1] / "test_ood" / "metadata.jsonl").read_text().splitlines()]
    assert list(d["test_ood"]["caption"]) == caps


def test_hf_load_of_a_parquet_copy_whose_card_names_another_shard_is_refused(pq, tmp_path):
    from mosaic.errors import MosaicError
    from mosaic.hf_load import load_dataset

    d = _pq_copy(pq, tmp_path)
    card = d / "README.md"
    card.write_text(card.read_text().replace("test_id-00000-of-00001.parquet", "test_ood-00000-of-00001.parquet", 1))
    with pytest.raises((MosaicError, ValueError)):
        load_dataset(d, cache_dir=str(tmp_path / "cache"))


def test_mosaic_dataset_of_a_parquet_dataset_with_masks_asked_for_is_named(pq):
    from mosaic.errors import MosaicError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises((MosaicError, ValueError)):
        MosaicDataset(pq, "train", load_masks=True)


# ------------------------------------------------------------------------------------------------
# a sweep trial's run: its metrics.json evaluator check dropped; its other records edited
# ------------------------------------------------------------------------------------------------

def _trial_metrics(sw: Path, edit) -> Path:
    from tests.conftest import trial_dirs

    t = trial_dirs(sw)[0]
    p = t / "run" / "metrics.json"
    m = json.loads(p.read_text())
    edit(m)
    p.write_text(json.dumps(m, indent=2))
    return t


# fixed (was recorded): attack27: W: a trial run's metrics.json with evaluator_check set to null or removed (its samples folder holds evaluator_check.json) is reported by `mosaic report`, exit 0: a failed check can be hidden
@pytest.mark.parametrize("how", ["null", "removed"])
def test_report_refuses_a_run_whose_evaluator_check_was_dropped(swept, tmp_path, how):
    sw = _sw(swept, tmp_path)
    _trial_metrics(sw, lambda m: m.__setitem__("evaluator_check", None) if how == "null" else m.pop("evaluator_check"))
    _clean_exit_2(_run(["report", sw]), "evaluator_check")


# fixed (was recorded): attack27: W: a rerun of `mosaic train` on a finished run whose metrics.json evaluator_check was set to null or removed prints the table without the evaluator check, exit 0
@pytest.mark.parametrize("how", ["null", "removed"])
def test_a_rerun_never_prints_a_table_whose_evaluator_check_was_dropped(swept, tmp_path, how):
    sw = _sw(swept, tmp_path)
    t = _trial_metrics(sw, lambda m: m.__setitem__("evaluator_check", None) if how == "null" else m.pop("evaluator_check"))
    r = t / "run"
    _clean_exit_2(_run(["train", "diffusion", r / "config.yaml", "--out", r]), "evaluator_check")


def test_a_rerun_of_a_trials_finished_run_prints_its_table(swept, tmp_path):
    from tests.conftest import trial_dirs

    sw = _sw(swept, tmp_path)
    r = trial_dirs(sw)[0] / "run"
    res = _ok(["train", "diffusion", r / "config.yaml", "--out", r])
    assert "evaluator parser on" in res.output and "already done" in res.output


@pytest.mark.parametrize("field", ["images", "seconds"])
def test_a_rerun_never_prints_a_samples_record_edited(swept, tmp_path, field):
    sw = _sw(swept, tmp_path)
    val = {"checkpoint": "final", "images": 999, "seconds": -1.0}[field]
    t = _trial_metrics(sw, lambda m: m["samples"].__setitem__(field, val))
    r = t / "run"
    res = _run(["train", "diffusion", r / "config.yaml", "--out", r])
    _no_traceback(res)
    if res.exit_code == 0:
        assert str(val) not in res.output.replace(str(r), ""), res.output
    else:
        assert res.exit_code == 2


# ------------------------------------------------------------------------------------------------
# links standing for a dataset's root files and split folders
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["manifest.json", "checksums.sha256", "README.md", "val", "val/metadata.jsonl"])
def test_a_link_standing_for_a_datasets_own_file_to_identical_bytes_is_refused(made, tmp_path, name):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    twin = copy_dataset(made, tmp_path, "twin")
    p = ds / name
    shutil.rmtree(p) if p.is_dir() else p.unlink()
    p.symlink_to(twin / name)
    _refused(_run(["verify", ds]))
    with pytest.raises((DatasetError, ValueError)):
        MosaicDataset(ds, "val")


# ------------------------------------------------------------------------------------------------
# images of odd modes and shapes in a folder to evaluate
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["L", "1", "P", "LA", "CMYK_jpeg", "tall_1x256", "wide_256x1", "I;16", "F_tiff", "RGBA_half"])
def test_an_image_of_an_odd_mode_or_shape_is_read_or_named(made, tmp_path, kind):
    from PIL import Image

    f = _eval_folder(made, tmp_path)
    p = f / _rows(f)[0]["file_name"]
    im = Image.open(p).convert("RGB")
    if kind == "CMYK_jpeg":
        im.convert("CMYK").save(p, format="JPEG")
    elif kind == "tall_1x256":
        im.resize((1, 256)).save(p, format="PNG")
    elif kind == "wide_256x1":
        im.resize((256, 1)).save(p, format="PNG")
    elif kind == "F_tiff":
        im.convert("F").save(p, format="TIFF")
    elif kind == "RGBA_half":
        a = im.convert("RGBA")
        a.putalpha(128)
        a.save(p, format="PNG")
    elif kind == "PA":
        im.convert("P").convert("PA").save(p, format="PNG")
    else:
        im.convert(kind).save(p, format="PNG")
    r = _run(["evaluate", f, "--spec", made[0], "--check-n", "0"])
    _no_traceback(r)
    assert r.exit_code in (0, 2), r.output
    if kind in ("I;16", "F_tiff", "RGBA_half"):
        assert r.exit_code == 2, r.output


_RESULT_EDITS = {
    "train.steps": (lambda m: m["train"].__setitem__("steps", 999), "metrics.train.steps", 999),
    "train.final_loss": (lambda m: m["train"].__setitem__("final_loss", 0.0001), "metrics.train.final_loss", 0.0001),
    "params": (lambda m: m.__setitem__("params", 7), "metrics.params", 7),
    "dataset.splits.train": (lambda m: m["dataset"]["splits"].__setitem__("train", 5000), "metrics.dataset.splits.train", 5000),
    "train.best.value": (lambda m: m["train"]["best"].__setitem__("value", 0.0001), "metrics.train.best.value", 0.0001),
    "samples.images": (lambda m: m["samples"].__setitem__("images", 999), "metrics.samples.images", 999),
    "generate_s": (lambda m: m.__setitem__("generate_s", -4.0), "metrics.generate_s", -4.0),
}


# fixed (was recorded): attack27: W: a trial run's metrics.json edited outside its scores (train.steps 999, final_loss, params, dataset.splits.train, train.best.value, samples.images 999 of a folder of 6 images, generate_s -4) lands in the sweep's results.csv by `mosaic report`, exit 0
# fixed (was recorded): attack27: W: params, dataset.splits.train, train.best.value are recorded, not derived again
@pytest.mark.parametrize("edit", sorted(_RESULT_EDITS))
def test_report_never_puts_an_edited_run_record_into_the_results(swept, tmp_path, edit):
    from tests.conftest import results_row

    sw = _sw(swept, tmp_path)
    fn, col, forged = _RESULT_EDITS[edit]
    t = _trial_metrics(sw, fn)
    r = _run(["report", sw])
    _no_traceback(r)
    if r.exit_code == 0:
        assert results_row(sw, t)[col] != forged, r.output
    else:
        assert r.exit_code == 2, r.output


def test_report_results_of_an_untouched_sweep_keep_the_runs_records(swept, tmp_path):
    from tests.conftest import results_row, trial_dirs

    sw = _sw(swept, tmp_path)
    _ok(["report", sw])
    t = trial_dirs(sw)[0]
    m = json.loads((t / "run" / "metrics.json").read_text())
    assert results_row(sw, t)["metrics.train.steps"] == m["train"]["steps"]


def test_an_audit_import_of_its_own_stored_file_keeps_the_marks(scored, tmp_path):
    s = _samples_copy(scored, tmp_path)
    a = _audit_file(s, lambda its: [{"id": it["id"], "source": it.get("source"), "file_name": it["file_name"], "mark": "correct"}
                                    for it in its])
    f = tmp_path / "audit.json"
    f.write_text(json.dumps(a))
    _ok(["audit", s, "--import", f])
    stored = (s / "audit" / "audit.json").read_bytes()
    r = _run(["audit", s, "--import", s / "audit" / "audit.json"])
    _no_traceback(r)
    assert (s / "audit" / "audit.json").read_bytes() == stored, r.output


@pytest.mark.parametrize("name", ["items.json", "audit.html"])
def test_an_audit_import_of_the_audits_other_files_is_refused_and_keeps_them(scored, tmp_path, name):
    s = _samples_copy(scored, tmp_path)
    before = _tree(s / "audit")
    _clean_exit_2(_run(["audit", s, "--import", s / "audit" / name]))
    assert _tree(s / "audit") == before


# ------------------------------------------------------------------------------------------------
# evaluator train given odd options and folders
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [["--steps", "0"], ["--input-size", "4"], ["--width", "2"], ["--set", "image.size=yes"],
                                  ["--set", "concepts=!!omap [{a: 1}]"], ["--check-n", "-1"], ["--threads", "0"]])
def test_evaluator_train_odd_options_are_named_before_training(made, tmp_path, args):
    out = tmp_path / "ev"
    _clean_exit_2(_run(["evaluator", "train", made[0], "--out", out, *args]))
    assert not (out / "model.safetensors").exists()


@pytest.mark.parametrize("where", ["dataset", "split", "run", "run_best"])
def test_evaluator_train_out_into_a_dataset_or_run_is_refused(made, drun, tmp_path, where):
    ds = copy_dataset(made, tmp_path)
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    out = {"dataset": ds, "split": ds / "train", "run": r, "run_best": r / "best" / "ev"}[where]
    before = (_tree(ds), _tree(r))
    _clean_exit_2(_run(["evaluator", "train", made[0], "--out", out, "--steps", "1", "--n-train", "4", "--check-n", "4"]))
    assert (_tree(ds), _tree(r)) == before


# fixed (was recorded): attack27: F: a trial's config.yaml and its run's config.yaml both edited to evaluation.check_n 1 (not the sweep's 8), with evaluator_check n=1 written into the samples folder and metrics: `mosaic report` re-measures on 1 render and reports, exit 0; the trial config is never compared with the sweep's expansion
def test_report_refuses_a_trial_config_shrunk_away_from_the_sweeps(swept, tmp_path):
    import yaml

    from tests.conftest import scored_folder, trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    for p in (t / "config.yaml", t / "run" / "config.yaml"):
        d = yaml.safe_load(p.read_text())
        d.setdefault("evaluation", {})["check_n"] = 1
        p.write_text(yaml.safe_dump(d))
    s = scored_folder(t)

    def fix(ec):
        ec["n"] = 1
        ec["seen"]["n"] = 1

    for p in (s / "evaluator_check.json", t / "run" / "metrics.json", s / "metrics.json"):
        m = json.loads(p.read_text())
        if p.name == "evaluator_check.json":
            fix(m)
        elif isinstance(m.get("evaluator_check"), dict):
            fix(m["evaluator_check"])
        p.write_text(json.dumps(m, indent=2))
    _clean_exit_2(_run(["report", sw]), "check_n")


@pytest.mark.parametrize("edit", ["steps_float", "lr_float"])
def test_a_trial_config_holding_the_same_numbers_in_another_form_is_still_its_trials(swept, tmp_path, edit):
    import yaml

    from tests.conftest import trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    p = t / "config.yaml"
    d = yaml.safe_load(p.read_text())
    if edit == "steps_float":
        d["training"]["steps"] = float(d["training"]["steps"])
    else:
        d["training"]["lr"] = float(d["training"]["lr"])
    p.write_text(yaml.safe_dump(d))
    _ok(["report", sw])


# fixed (was recorded): attack27: O: a trial's config.yaml edited to `training.threads: true` (a YAML boolean, which every config validation refuses for a number) is taken as the run's `threads: 1` by `mosaic report`, exit 0
def test_a_trial_config_with_a_boolean_for_a_number_is_named(swept, tmp_path):
    import yaml

    from tests.conftest import trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    p = t / "config.yaml"
    d = yaml.safe_load(p.read_text())
    assert d["training"]["threads"] == 1
    d["training"]["threads"] = True
    p.write_text(yaml.safe_dump(d))
    _clean_exit_2(_run(["report", sw]), "threads")


# ------------------------------------------------------------------------------------------------
# file outputs (schema -o, evaluator check --json, preview -o) aimed at files other commands wrote
# ------------------------------------------------------------------------------------------------

def test_schema_out_at_a_runs_metrics_is_refused(swept, tmp_path):
    from tests.conftest import trial_dirs

    sw = _sw(swept, tmp_path)
    p = trial_dirs(sw)[0] / "run" / "metrics.json"
    before = p.read_bytes()
    _clean_exit_2(_run(["schema", "spec", "-o", p]))
    assert p.read_bytes() == before


# fixed (was recorded): attack27: L: `mosaic schema -o` / `evaluator check --json` replace a scored samples folder's  metrics.json, predictions.jsonl or evaluator_check.json (inside a run) and a sweep's sweep.yaml, results.csv or  trial.json, exit 0; a run folder's own metrics.json is refused
@pytest.mark.parametrize("target", ["samples/metrics.json", "samples/predictions.jsonl", "samples/evaluator_check.json",
                                    "sweep.yaml", "results.csv", "trial.json"])
def test_a_file_output_never_replaces_another_commands_record(swept, made, tmp_path, target):
    from tests.conftest import scored_folder, trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    p = {"samples/metrics.json": scored_folder(t) / "metrics.json", "samples/predictions.jsonl": scored_folder(t) / "predictions.jsonl",
         "samples/evaluator_check.json": scored_folder(t) / "evaluator_check.json", "sweep.yaml": sw / "sweep.yaml",
         "results.csv": sw / "results.csv", "trial.json": t / "trial.json"}[target]
    before = p.read_bytes()
    if target == "samples/evaluator_check.json":
        r = _run(["evaluator", "check", made[0], "--n", "2", "--json", p])
    else:
        r = _run(["schema", "spec", "-o", p])
    _no_traceback(r)
    assert p.read_bytes() == before, r.output
    assert r.exit_code == 2, r.output


# fixed (was recorded): attack27: W: a scored samples folder's heatmap.png replaced by another picture (here `mosaic preview -o S/heatmap.png`) is copied onto the sweep report as the trial's heatmap, exit 0 (never drawn again from the checked metrics)
def test_report_never_shows_a_heatmap_that_is_not_the_trials_scores(swept, made, tmp_path):
    from tests.conftest import scored_folder, trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    h = scored_folder(t) / "heatmap.png"
    r = _run(["preview", made[0], "--n", "2", "-o", tmp_path / "other.png"])  # `-o h` itself is refused since round 27
    _no_traceback(r)
    h.write_bytes((tmp_path / "other.png").read_bytes())
    fake = h.read_bytes()
    res = _run(["report", sw])
    _no_traceback(res)
    shown = [p.read_bytes() for p in (sw / "report").glob(f"{t.name}-heatmap*.png")] if (sw / "report").is_dir() else []
    assert res.exit_code == 2 or fake not in shown, res.output


@pytest.mark.parametrize("edit", ["thresholds", "verdicts_changed_by_concept"])
def test_report_refuses_quality_settings_edited_in_both_layers(swept, tmp_path, edit):
    from tests.conftest import scored_folder, trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    for p in (t / "run" / "metrics.json", scored_folder(t) / "metrics.json"):
        m = json.loads(p.read_text())
        q = m["scores"]["quality"] if "scores" in m else m["quality"]
        if edit == "thresholds":
            q["thresholds"]["iou"] = 0.1
        else:
            q["verdicts_changed_by_concept"] = {k: 0 for k in q["verdicts_changed_by_concept"]}
        p.write_text(json.dumps(m, indent=2))
    _clean_exit_2(_run(["report", sw]))


# ------------------------------------------------------------------------------------------------
# FIFOs and folders at a dataset's root files under verify, --repair and the HF loader
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["README.md", "checksums.sha256", "manifest.json", "train/metadata.jsonl"])
@pytest.mark.parametrize("what", ["fifo", "folder_with_a_file"])
def test_a_fifo_or_folder_at_a_root_file_is_named_by_repair_and_kept(made, tmp_path, name, what):
    ds = copy_dataset(made, tmp_path)
    p = ds / name
    p.unlink()
    if what == "fifo":
        os.mkfifo(p)
    else:
        p.mkdir()
        (p / "notes.txt").write_text("mine")
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    if what == "folder_with_a_file":
        assert (p / "notes.txt").read_text() == "mine", r.output
        assert r.exit_code in (1, 2), r.output
    elif r.exit_code == 0:
        _ok(["verify", ds])


def test_hf_load_of_a_dataset_whose_card_is_a_fifo_is_named_without_waiting(made, tmp_path):
    from mosaic.errors import MosaicError
    from mosaic.hf_load import load_dataset

    ds = copy_dataset(made, tmp_path)
    (ds / "README.md").unlink()
    os.mkfifo(ds / "README.md")
    with pytest.raises((MosaicError, ValueError)):
        load_dataset(ds, cache_dir=str(tmp_path / "cache"))


# fixed (was recorded): attack27: W: a done trial's trial.json edited to time_s -77.5 (or an error text on a done trial) lands in the sweep's results.csv by `mosaic report`, exit 0
@pytest.mark.parametrize("field,value", [("time_s", -77.5), ("error", "CUDA out of memory")])
def test_report_never_puts_an_impossible_trial_record_into_the_results(swept, tmp_path, field, value):
    from tests.conftest import results_row, trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    p = t / "trial.json"
    m = json.loads(p.read_text())
    m[field] = value
    p.write_text(json.dumps(m, indent=2))
    r = _run(["report", sw])
    _no_traceback(r)
    if r.exit_code == 0:
        assert results_row(sw, t)[field] != value, r.output
    else:
        assert r.exit_code == 2, r.output


def test_report_page_escapes_a_trial_records_text(swept, tmp_path):
    from tests.conftest import trial_dirs

    sw = _sw(swept, tmp_path)
    t = trial_dirs(sw)[0]
    p = t / "trial.json"
    m = json.loads(p.read_text())
    m["error"] = "<script>alert(1)</script>"
    m["host"] = "<img src=x onerror=alert(2)>"
    p.write_text(json.dumps(m, indent=2))
    r = _run(["report", sw])
    _no_traceback(r)
    if (sw / "report" / "index.html").exists():
        page = (sw / "report" / "index.html").read_text()
        assert "<script>alert(1)" not in page and "<img src=x" not in page


# ------------------------------------------------------------------------------------------------
# manifest fields that contradict the manifest's own spec
# ------------------------------------------------------------------------------------------------

# fixed (was recorded): attack27: W: a manifest whose top-level name is edited away from its spec's name passes `mosaic verify` (full check), and that name is what a run records as its dataset (mosaic.lab.data.manifest_fingerprint)
def test_a_manifest_name_that_is_not_its_specs_is_refused(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    edit_manifest(ds, lambda m: m.__setitem__("name", "other"))
    _refused(_run(["verify", ds]), "name")


# fixed (was recorded): attack27: O: a manifest whose renderer record says supersample 2 while its spec says 4 passes `mosaic verify`: the record --repair renders with contradicts the spec without a word
def test_a_renderer_record_contradicting_the_spec_is_named(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    edit_manifest(ds, lambda m: m["renderer"].__setitem__("supersample", 2))
    _refused(_run(["verify", ds]), "supersample")


def test_a_renderer_record_of_the_right_values_verifies(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    edit_manifest(ds, lambda m: None)
    _ok(["verify", ds])


# ------------------------------------------------------------------------------------------------
# dry runs write nothing; two previews at once
# ------------------------------------------------------------------------------------------------

def test_train_and_sweep_dry_runs_write_nothing(tmp_path):
    from tests.test_sweep_e2e import make_sweep

    p = make_sweep(tmp_path)
    before = sorted(x.name for x in tmp_path.iterdir())
    r = _run(["train", "diffusion", tmp_path / "train.yaml", "--dry-run", "--out", tmp_path / "run"])
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    r = _run(["sweep", p, "--dry-run", "--out", tmp_path / "sw"])
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    assert sorted(x.name for x in tmp_path.iterdir()) == before


def test_two_previews_into_one_file_at_once_leave_a_whole_png(made, tmp_path):
    out = tmp_path / "a.png"
    cmd = [sys.executable, "-m", "mosaic.cli", "preview", str(made[0]), "--n", "4", "--out", str(out)]
    ps = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in ps]
    for o in outs:
        assert "Traceback" not in o, o
    assert all(p.returncode in (0, 2) for p in ps) and any(p.returncode == 0 for p in ps), outs
    from PIL import Image

    with Image.open(out) as im:
        im.load()
    assert [p.name for p in tmp_path.iterdir()] == ["a.png"]


@pytest.mark.parametrize("kind", ["dangling", "loop", "to_a_folder"])
def test_repair_replaces_an_odd_link_at_an_image(made, tmp_path, kind):
    ds = copy_dataset(made, tmp_path)
    img = ds / "val" / "images" / "000001.png"
    good = img.read_bytes()
    img.unlink()
    target = {"dangling": tmp_path / "nowhere.png", "loop": img, "to_a_folder": tmp_path}[kind]
    img.symlink_to(target)
    before = _tree(tmp_path / "made_elsewhere") if (tmp_path / "made_elsewhere").exists() else None
    _refused(_run(["verify", ds]))
    r = _run(["verify", ds, "--repair"])
    _no_traceback(r)
    assert r.exit_code == 0, r.output
    assert not img.is_symlink() and img.read_bytes() == good
    assert not (tmp_path / "nowhere.png").exists()
    _ok(["verify", ds])
