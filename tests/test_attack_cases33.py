"""Attack round 33: a final measurement of issue 23's "done when", new cases spread over every class.
Identity on read (a card converted to CRLF or with a second ``dataset_info`` key, every file's mtime reset, a
split copied in from another seed, a folder moved under a path with spaces and non-ASCII letters, the streamed
renders against the files on disk, ``evaluate --spec`` of a dataset whose manifest spec was edited); writes
(``splits``/``preview``/``export``/``evaluate`` outputs aimed into a dataset, through a link or a ``..`` path, an
export while another process holds the dataset's lock); code from files (``!!binary``, ``!!python/name`` and
``!!set`` tags in a spec); claims (a model's ``metadata.jsonl`` with a BOM, CRLF line ends, backslashes, a record
twice, a flipped held-out flag, a case-changed value, a count as ``2.0``); bounds (a 200,000-deep JSON line, a
60 MB line, a 100,000-deep manifest, an APNG claiming 2**31 frames); HTML (an audit page of a folder whose image
name and caption carry markup, parsed with html5lib); named errors (a spec that is a folder, an ``--out`` that is
a file); new-user stumbles (a whole dataset to ``evaluate``, a spec to ``verify``, a split to ``preview``, a
dataset as ``generate``'s spec, ``export`` without ``--out``, the README's ``splits`` command).

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack33: ...")``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
import zlib
from functools import partial
from pathlib import Path

import pytest

from tests.conftest import clean_exit_2, copy_dataset, hold_lock, ok_cli as _ok, run_cli as _run

ROOT = Path(__file__).resolve().parents[1]
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _no_traceback(r):
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    from tests.conftest import TINY_COUNT_SPEC

    d = tmp_path_factory.mktemp("a33made")
    spec = d / "spec.yaml"
    spec.write_text(TINY_COUNT_SPEC)
    _ok(["generate", spec, "--out", d / "ds"])
    return spec, d / "ds"


@pytest.fixture(scope="module")
def seed7(made, tmp_path_factory):
    """The same spec generated with seed 7: another dataset of the same name and shape."""
    d = tmp_path_factory.mktemp("a33seed7")
    spec = d / "spec.yaml"
    spec.write_text(made[0].read_text() + "seed: 7\n")
    _ok(["generate", spec, "--out", d / "ds"])
    return d / "ds"


def _records(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "metadata.jsonl").read_text().splitlines()]


def _write_records(folder: Path, recs: list[dict]) -> None:
    (folder / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def _to_score(made, tmp_path: Path, name: str = "imgs") -> Path:
    d = tmp_path / name
    shutil.copytree(made[1] / "test_ood", d)
    return d


def _evaluate(folder: Path, made, out: Path):
    return _run(["evaluate", folder, "--spec", made[0], "--check-n", "0", "--out", out])


# ------------------------------------------------------------------------------------------------
# 1. identity on every read
# ------------------------------------------------------------------------------------------------

def test_a_card_converted_to_crlf_is_no_false_alarm_and_gives_the_same_rows(made, tmp_path):
    """``git config core.autocrlf true`` on a checked-in dataset card: HF reads the same header."""
    pytest.importorskip("datasets")
    from mosaic.hf_load import load_dataset
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    card = ds / "README.md"
    card.write_bytes(card.read_bytes().replace(b"\n", b"\r\n"))
    a = load_dataset(ds, split="train", cache_dir=str(tmp_path / "hf"))
    assert list(a["caption"]) == [r["caption"] for r in _records(ds / "train")]
    assert len(MosaicDataset(str(ds), "train")) == 8


def test_a_card_with_a_second_dataset_info_key_after_the_first_is_refused(made, tmp_path):
    """YAML keeps the last of two equal keys: a second ``dataset_info`` (captions declared int64) pasted after
    mosaic's is what HF reads, and the card check reads it too."""
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    card = ds / "README.md"
    head, sep, rest = card.read_text().partition("\n---\n")
    card.write_text(head + "\ndataset_info:\n  features:\n  - name: caption\n    dtype: int64" + sep + rest)
    with pytest.raises(DatasetError, match="README.md"):
        MosaicDataset(str(ds), "train")


@pytest.mark.parametrize("key", ["drop_metadata", "drop_labels"])
def test_a_card_config_option_that_drops_columns_is_refused(made, tmp_path, key):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    card = ds / "README.md"
    card.write_text(card.read_text().replace("- config_name: default\n", f"- config_name: default\n  {key}: true\n", 1))
    with pytest.raises(DatasetError, match="card"):
        MosaicDataset(str(ds), "train")


def test_a_dataset_whose_every_mtime_was_reset_is_no_false_alarm(made, tmp_path):
    """A copy by a tool that drops times (``rsync`` without ``-t``, a zip): digests decide, not times."""
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    for p in ds.rglob("*"):
        os.utime(p, (1, 1))
    _ok(["verify", ds])
    assert len(MosaicDataset(str(ds), "train")) == 8


def test_a_train_split_copied_in_from_another_seed_is_refused_by_every_reader(made, seed7, tmp_path):
    from mosaic.errors import DatasetError
    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    shutil.rmtree(ds / "train")
    shutil.copytree(seed7 / "train", ds / "train")
    with pytest.raises(DatasetError, match="train/"):
        MosaicDataset(str(ds), "val")
    with pytest.raises(DatasetError):
        StreamingDataset(ds, "train")
    r = _run(["verify", ds])
    _no_traceback(r)
    assert r.exit_code == 1, r.output


def test_a_manifest_copied_from_another_seed_is_refused(made, seed7, tmp_path):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    shutil.copy(seed7 / "manifest.json", ds / "manifest.json")
    with pytest.raises(DatasetError):
        MosaicDataset(str(ds), "train")
    r = _run(["verify", ds])
    _no_traceback(r)
    assert r.exit_code in (1, 2), r.output


def test_a_dataset_moved_under_spaces_and_non_ascii_letters_is_no_false_alarm(made, tmp_path):
    pytest.importorskip("datasets")
    from mosaic.hf_load import load_dataset
    from mosaic.torch_data import MosaicDataset

    d = tmp_path / "mes données" / "jeu à tester"
    d.parent.mkdir()
    shutil.copytree(made[1], d)
    _ok(["verify", d])
    assert len(MosaicDataset(str(d), "val")) == 2
    assert load_dataset(d, split="validation", cache_dir=str(tmp_path / "hf")).num_rows == 2


def test_the_stream_of_a_dataset_renders_the_images_on_disk(made):
    """``StreamingDataset(DIR)`` stands for the dataset's spec: its renders are the files' pixels, labels alike."""
    import torch

    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    disk = MosaicDataset(str(made[1]), "test_ood")
    streamed = list(StreamingDataset(made[1], "test_ood"))
    assert len(streamed) == len(disk) == 3
    for i, s in enumerate(streamed):
        d = disk[s["index"]] if s["index"] < len(disk) else disk[i]
        assert torch.equal(s["image"], d["image"]) and torch.equal(s["targets"], d["targets"])
        assert bool(s["held_out"]) == bool(d["held_out"])


def test_evaluate_with_the_spec_of_a_dataset_whose_manifest_spec_was_edited_is_refused(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    p = ds / "manifest.json"
    m = json.loads(p.read_text())
    m["spec"]["holdout"]["rule"]["n"] = 2
    p.write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    for spec in (ds, ds / "manifest.json"):
        _clean_exit_2(_run(["evaluate", made[1] / "test_ood", "--spec", spec, "--check-n", "0", "--out", tmp_path / "ev"]),
                      "manifest.json")
    assert not (tmp_path / "ev").exists()


# ------------------------------------------------------------------------------------------------
# 2. no write leaves its folder
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cmd,where", [
    ("splits", "manifest.json"), ("splits", "train/grid.png"), ("preview", "train/images/zz.png"), ("preview", "README.md"),
])
def test_a_drawing_aimed_into_a_dataset_is_refused_and_the_dataset_stays_whole(made, tmp_path, cmd, where):
    ds = copy_dataset(made, tmp_path)
    before = (ds / "manifest.json").read_bytes(), (ds / "README.md").read_bytes()
    _clean_exit_2(_run([cmd, made[0], "--out", ds / where]), "inside the mosaic dataset" if "/" in where else "is the mosaic dataset")
    assert ((ds / "manifest.json").read_bytes(), (ds / "README.md").read_bytes()) == before
    _ok(["verify", ds])


def test_an_export_into_its_source_through_a_link_or_dotdot_is_refused(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    (tmp_path / "lnk").symlink_to(ds)
    _clean_exit_2(_run(["export", tmp_path / "lnk", "--format", "parquet", "--out", tmp_path / "lnk" / "pq"]), "inside the mosaic dataset")
    _clean_exit_2(_run(["export", ds, "--format", "parquet", "--out", f"{ds}/../{ds.name}/train/pq"]), "inside the mosaic dataset")
    _clean_exit_2(_run(["generate", made[0], "--out", tmp_path / "lnk", "--overwrite"]), "symbolic link")
    _ok(["verify", ds])


def test_an_evaluation_written_into_a_datasets_split_is_refused(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    r = _run(["evaluate", ds / "test_ood", "--spec", made[0], "--check-n", "0", "--out", ds / "test_ood"])
    _clean_exit_2(r)
    _ok(["verify", ds])


def test_an_export_while_another_process_writes_the_dataset_is_refused_and_writes_nothing(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    holder = hold_lock(ds.resolve())
    try:
        t0 = time.perf_counter()
        _clean_exit_2(_run(["export", ds, "--format", "parquet", "--out", tmp_path / "pq"]), "writing")
        assert time.perf_counter() - t0 < 20
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "pq" / "manifest.json").exists()


# ------------------------------------------------------------------------------------------------
# 3. no code from files
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    "!!binary aGVsbG8=", "!!python/name:os.system", "!!set {red: null, green: null}", "!!python/module:os",
])
def test_an_unsafe_or_foreign_yaml_tag_in_a_spec_is_named(made, tmp_path, value):
    spec = tmp_path / "spec.yaml"
    spec.write_text(made[0].read_text().replace("values: [red, green, blue]", f"values: {value}"))
    r = _run(["generate", spec, "--out", tmp_path / "ds"])
    _clean_exit_2(r, "spec.yaml")
    assert not (tmp_path / "ds").exists()


# ------------------------------------------------------------------------------------------------
# 4. claims in a model's folder checked, honest ones believed
# ------------------------------------------------------------------------------------------------

def test_a_models_metadata_with_crlf_line_ends_is_scored(made, tmp_path):
    d = _to_score(made, tmp_path)
    lines = (d / "metadata.jsonl").read_text().splitlines()
    (d / "metadata.jsonl").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    r = _evaluate(d, made, tmp_path / "ev")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ev" / "metrics.json").is_file()


def test_a_models_metadata_with_a_byte_order_mark_is_named(made, tmp_path):
    d = _to_score(made, tmp_path)
    (d / "metadata.jsonl").write_text("\ufeff" + (d / "metadata.jsonl").read_text())
    _clean_exit_2(_evaluate(d, made, tmp_path / "ev"), "metadata.jsonl line 1")
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("edit,needle", [
    (lambda recs: recs.append(dict(recs[0])), "names the same image"),
    (lambda recs: recs[0].update(held_out=not recs[0]["held_out"]), "contradict the spec"),
    (lambda recs: recs[0]["concepts"].update(color="Red"), "'Red'"),
    (lambda recs: recs[0]["concepts"].update(count="2"), "'2'"),
    (lambda recs: recs[0]["concepts"].update(count=True), "True"),
    (lambda recs: recs[0].update(file_name=recs[0]["file_name"].replace("/", "\\")), "missing"),
])
def test_a_models_metadata_claim_that_does_not_hold_is_named(made, tmp_path, edit, needle):
    d = _to_score(made, tmp_path)
    recs = _records(d)
    edit(recs)
    _write_records(d, recs)
    _clean_exit_2(_evaluate(d, made, tmp_path / "ev"), needle)
    assert not (tmp_path / "ev").exists()


def test_a_count_written_as_a_float_is_read_as_that_count(made, tmp_path):
    """``2.0`` for a count of 2 (a model that writes floats): read as the count, its held-out flag checked
    against that combination, never silently as another."""
    d = _to_score(made, tmp_path)
    recs = _records(d)
    c = recs[0]["concepts"]["count"]
    recs[0]["concepts"]["count"] = float(c)
    _write_records(d, recs)
    r = _evaluate(d, made, tmp_path / "ev")
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in (tmp_path / "ev" / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 3


# ------------------------------------------------------------------------------------------------
# 5. bounds before decode
# ------------------------------------------------------------------------------------------------

def test_a_200000_deep_json_line_in_a_models_metadata_is_named(made, tmp_path):
    d = _to_score(made, tmp_path)
    (d / "metadata.jsonl").write_text("[" * 200000 + "]" * 200000 + "\n")
    _clean_exit_2(_evaluate(d, made, tmp_path / "ev"), "nested too deep")


def test_a_60_mb_line_in_a_models_metadata_is_named_unread(made, tmp_path):
    d = _to_score(made, tmp_path)
    (d / "metadata.jsonl").write_text('{"caption": "' + "a" * (60 << 20) + '"}\n')
    t0 = time.perf_counter()
    _clean_exit_2(_evaluate(d, made, tmp_path / "ev"), "longer than")
    assert time.perf_counter() - t0 < 20


def test_a_100000_deep_manifest_is_named_by_verify(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    (ds / "manifest.json").write_text('{"a":' * 100000 + "1" + "}" * 100000)
    _clean_exit_2(_run(["verify", ds]), "manifest.json", "nested too deep")


def _chunk(t: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)


def test_an_apng_claiming_two_billion_frames_is_scored_or_named_quickly(made, tmp_path):
    d = _to_score(made, tmp_path)
    p = d / "images" / "000000.png"
    raw = p.read_bytes()
    p.write_bytes(raw[:33] + _chunk(b"acTL", struct.pack(">II", 2**31 - 1, 0)) + raw[33:])
    t0 = time.perf_counter()
    r = _evaluate(d, made, tmp_path / "ev")
    _no_traceback(r)
    assert r.exit_code in (0, 2), r.output
    assert time.perf_counter() - t0 < 30


# ------------------------------------------------------------------------------------------------
# 6. HTML escaping
# ------------------------------------------------------------------------------------------------

def test_an_audit_page_of_a_folder_whose_image_name_and_caption_carry_markup_is_escaped(made, tmp_path):
    html5lib = pytest.importorskip("html5lib")
    d = _to_score(made, tmp_path)
    recs = _records(d)
    recs[0]["caption"] = "</script><script>alert(1)</script><img src=x onerror=alert(2)>"
    new = 'images/"><b>x.png'
    os.rename(d / recs[1]["file_name"], d / new)
    recs[1]["file_name"] = new
    _write_records(d, recs)
    _ok(["evaluate", d, "--spec", made[0], "--check-n", "0", "--out", d])
    _ok(["audit", d, "--out", tmp_path / "au"])
    page = (tmp_path / "au" / "audit.html").read_text()
    doc = html5lib.parse(page, namespaceHTMLElements=False)
    assert len(doc.findall(".//script")) == 2
    assert not [i for i in doc.iter() if i.get("onerror")]
    assert not [s for s in doc.findall(".//script") if "alert(" in (s.text or "")]
    assert not [b for b in doc.findall(".//b") if (b.text or "").startswith("x.png")]


# ------------------------------------------------------------------------------------------------
# 7. named errors; 8. new-user stumbles
# ------------------------------------------------------------------------------------------------

def test_a_spec_that_is_a_folder_and_an_out_that_is_a_file_are_named(made, tmp_path):
    _clean_exit_2(_run(["validate", tmp_path]), "directory")
    _clean_exit_2(_run(["generate", made[0], "--out", made[0]]), "regular file")


@pytest.mark.parametrize("args,needle", [
    (lambda ds, spec, o: ["evaluate", ds, "--spec", spec, "--check-n", "0", "--out", o], "give one of its splits"),
    (lambda ds, spec, o: ["verify", spec], "not a directory"),
    (lambda ds, spec, o: ["preview", ds / "train", "--out", o / "p.png"], "without manifest.json"),
    (lambda ds, spec, o: ["evaluate", ds / "test_ood", "--spec", ds / "test_ood", "--check-n", "0", "--out", o], "without manifest.json"),
])
def test_a_new_users_wrong_folder_or_file_is_named(made, tmp_path, args, needle):
    _clean_exit_2(_run(args(made[1], made[0], tmp_path / "o")), needle)
    assert not (tmp_path / "o").exists()


def test_generate_from_a_dataset_folder_makes_the_same_dataset(made, tmp_path):
    _ok(["generate", made[1], "--out", tmp_path / "g"])
    a = json.loads((made[1] / "manifest.json").read_text())
    b = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert a["fingerprint"] == b["fingerprint"] and a["checksums"]["sha256"] == b["checksums"]["sha256"]


def test_export_without_out_writes_beside_the_source_and_both_verify(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    _ok(["export", ds, "--format", "parquet"])
    _ok(["verify", tmp_path / "ds-parquet"])
    _ok(["verify", ds])


def test_the_readmes_splits_command_runs(tmp_path):
    r = _run(["splits", ROOT / "experiments" / "specs" / "coverage.yaml", "--set", "holdout.rule.k=2"])
    assert r.exit_code == 0, r.output


def test_generate_overwrite_stopped_mid_render_is_never_read_as_whole_and_its_rerun_finishes(made, seed7, tmp_path, monkeypatch):
    """A ``generate --overwrite`` with another seed killed (KeyboardInterrupt) while it renders: the folder is
    neither the old dataset nor the new to any reader, and the same command run again finishes it."""
    import mosaic.dataset as D
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    ds = copy_dataset(made, tmp_path)
    spec7 = tmp_path / "spec7.yaml"
    spec7.write_text(made[0].read_text() + "seed: 7\n")
    real, calls = D._write_file, []

    def boom(path, data):
        calls.append(path)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(path, data)

    monkeypatch.setattr(D, "_write_file", boom)
    r = _run(["generate", spec7, "--out", ds, "--overwrite"])
    assert r.exit_code != 0
    monkeypatch.setattr(D, "_write_file", real)
    with pytest.raises(DatasetError):
        MosaicDataset(str(ds), "train")
    assert _run(["verify", ds]).exit_code != 0
    _ok(["generate", spec7, "--out", ds, "--overwrite"])
    _ok(["verify", ds])
    assert json.loads((ds / "manifest.json").read_text())["checksums"]["sha256"] == \
        json.loads((seed7 / "manifest.json").read_text())["checksums"]["sha256"]
