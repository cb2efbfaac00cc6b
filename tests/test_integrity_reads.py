"""Issue 23, classes 1, 2, 5 and 7 on datasets: every reader checks what it reads, no write goes
through a link, a foreign image is bounded before decoding, and every damaged file is a named error."""

from __future__ import annotations

import json
import os
import shutil
import zlib

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import DatasetError, MosaicError
from mosaic.spec import parse_spec
from tests.conftest import hold_lock

runner = CliRunner()

SPEC = {
    "name": "integrity", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square"]}},
    "objects": [{"name": "obj", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.5}],
    "holdout": {"concepts": ["color", "shape"], "rule": {"kind": "diagonal", "n": 1}},
    "splits": {"train": 12, "val": 3, "test_id": 3, "test_ood": 4},
}


def _spec(**over):
    data = json.loads(json.dumps(SPEC))
    data.update(over)
    return parse_spec(data)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from mosaic.dataset import generate

    root = tmp_path_factory.mktemp("integrity")
    generate(_spec(), root / "img")
    generate(_spec(), root / "pq", format="parquet", shard_bytes=4096)
    return root


@pytest.fixture
def ds(base, tmp_path):
    out = tmp_path / "ds"
    shutil.copytree(base / "img", out, symlinks=True)
    return out


@pytest.fixture
def pq(base, tmp_path):
    out = tmp_path / "pq"
    shutil.copytree(base / "pq", out, symlinks=True)
    return out


def _refused(root, *needles):
    from mosaic.torch_data import MosaicDataset

    with pytest.raises(DatasetError) as e:
        MosaicDataset(root, "train")
    msg = str(e.value)
    for n in needles:
        assert n in msg, msg
    return msg


# ------------------------------------------------------------------------------------------------
# 1. identity on every read
# ------------------------------------------------------------------------------------------------

def test_hf_cache_never_confuses_two_datasets_of_one_folder_name(tmp_path):
    datasets = pytest.importorskip("datasets")
    from mosaic.dataset import generate

    cache = str(tmp_path / "hf-cache")
    a, b = tmp_path / "p1" / "data", tmp_path / "p2" / "data"
    generate(_spec(), a)
    generate(_spec(seed=7), b)  # the same folder name, another dataset
    ra = datasets.load_dataset(str(a), cache_dir=cache)["train"]["caption"]
    rb = datasets.load_dataset(str(b), cache_dir=cache)["train"]["caption"]
    from mosaic.dataset import read_metadata

    assert ra == [r["caption"] for r in read_metadata(a, "train")]
    assert rb == [r["caption"] for r in read_metadata(b, "train")] and ra != rb
    # regenerated in place with another holdout: the new labels, not the cached old ones
    generate(_spec(holdout={"concepts": ["color", "shape"], "rule": {"kind": "diagonal", "n": 1, "offset": 1}}), a, overwrite=True)
    got = datasets.load_dataset(str(a), cache_dir=cache)
    want = read_metadata(a, "test_ood")
    assert got["test_ood"]["combination"] == [r["combination"] for r in want]
    assert got["train"]["caption"] == [r["caption"] for r in read_metadata(a, "train")]
    # a moved imagefolder dataset: HF caches it by folder name + card, so it loads after a rebuild of its cache entry
    moved = tmp_path / "elsewhere" / "data"
    moved.parent.mkdir()
    shutil.move(str(b), str(moved))
    got = datasets.load_dataset(str(moved), cache_dir=cache, download_mode="force_redownload")["train"]
    assert got["caption"] == rb and got[0]["image"].size == (16, 16)


def test_card_patterns_take_only_what_mosaic_wrote(ds, pq, tmp_path):
    datasets = pytest.importorskip("datasets")
    # an old copy of the held-out split under train/old/ and a stray shard
    shutil.copytree(ds / "test_ood", ds / "train" / "old")
    stray = pq / "data" / "train-99999-of-99999.parquet"
    shutil.copyfile(next((pq / "data").glob("test_ood-*.parquet")), stray)
    hf = datasets.load_dataset(str(ds), cache_dir=str(tmp_path / "c1"))
    assert hf["train"].num_rows == 12 and not any(hf["train"]["held_out"])
    hf = datasets.load_dataset(str(pq), cache_dir=str(tmp_path / "c2"))
    assert hf["train"].num_rows == 12 and not any(hf["train"]["held_out"])
    # and every reader of mosaic names the stray files
    _refused(ds, "train/old", "stray", "move what mosaic did not write")
    _refused(pq, "data/train-99999-of-99999.parquet", "stray")


def test_a_swapped_parquet_shard_is_refused_by_every_reader(pq):
    data = pq / "data"
    train = sorted(data.glob("train-*.parquet"))[0]
    ood = sorted(data.glob("test_ood-*.parquet"))[0]
    tmp = data / "swap"
    os.replace(train, tmp)
    os.replace(ood, train)
    os.replace(tmp, ood)
    _refused(pq, "is damaged, so it is not read", f"data/{train.name}")


def test_an_edited_manifest_spec_is_refused_by_stream_evaluate_and_train(ds, tmp_path):
    from mosaic.lab.config import DatasetSection
    from mosaic.lab.data import resolve_dataset
    from mosaic.stream import StreamingDataset

    man = json.loads((ds / "manifest.json").read_text())
    man["spec"]["seed"] = man["spec"]["seed"] + 1  # the spec no longer matches its fingerprint
    (ds / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(DatasetError, match="fingerprint"):
        StreamingDataset(ds, "train")
    with pytest.raises(DatasetError, match="dataset.path.*\n.*fingerprint|fingerprint"):
        resolve_dataset(DatasetSection(path=str(ds)), generate=True)
    _refused(ds, "fingerprint", "restore it from a copy")
    r = runner.invoke(app, ["evaluate", str(ds / "test_ood"), "--spec", str(ds), "--check-n", "0"])
    assert r.exit_code == 2 and "fingerprint" in r.output and "Traceback" not in r.output, r.output


def test_train_on_a_damaged_dataset_path_names_the_file(ds):
    from mosaic.lab.config import DatasetSection
    from mosaic.lab.data import resolve_dataset

    (ds / "train" / "images" / "000003.png").write_bytes(b"")
    with pytest.raises(DatasetError) as e:
        resolve_dataset(DatasetSection(path=str(ds)), generate=True)
    assert "dataset.path" in str(e.value) and "train/images/000003.png" in str(e.value) and "--repair" in str(e.value)


# ------------------------------------------------------------------------------------------------
# 2. no write leaves the folder it owns
# ------------------------------------------------------------------------------------------------

def test_repair_and_rerun_never_write_through_a_linked_images_folder(ds, tmp_path):
    from mosaic.dataset import generate
    from mosaic.dataset import repair_dataset
    from mosaic.verify import verify

    victim = tmp_path / "victim"
    victim.mkdir()
    for i in range(12):
        (victim / f"{i:06d}.png").write_bytes(b"precious")
    shutil.rmtree(ds / "train" / "images")
    os.symlink(victim, ds / "train" / "images")
    report = verify(ds)
    assert any(d.problem == "link" and d.path == "train/images" for d in report.damage)
    _refused(ds, "symbolic link")
    after = repair_dataset(ds, report)
    assert after.ok and not (ds / "train" / "images").is_symlink()
    assert all((victim / f"{i:06d}.png").read_bytes() == b"precious" for i in range(12))
    # a rerun of generate on a folder whose images link elsewhere replaces the link too
    shutil.rmtree(ds / "val" / "images")
    os.symlink(victim, ds / "val" / "images")
    generate(_spec(), ds)
    assert not (ds / "val" / "images").is_symlink() and verify(ds, deep=True).ok
    assert all((victim / f"{i:06d}.png").read_bytes() == b"precious" for i in range(12))


def test_a_linked_image_file_is_replaced_not_written_through(ds, tmp_path):
    from mosaic.dataset import repair_dataset
    from mosaic.verify import verify

    victim = tmp_path / "victim.png"
    victim.write_bytes(b"precious")
    p = ds / "train" / "images" / "000002.png"
    p.unlink()
    os.symlink(victim, p)
    report = verify(ds)
    assert not report.ok
    assert repair_dataset(ds, report).ok and not p.is_symlink() and victim.read_bytes() == b"precious"


def test_atomic_writes_never_follow_a_planted_temp_link(tmp_path):
    from mosaic.io import atomic_write

    victim = tmp_path / "victim"
    victim.write_text("precious")
    for pid_guess in range(os.getpid() - 2, os.getpid() + 3):
        os.symlink(victim, tmp_path / f".out.txt.tmp{pid_guess}")
    atomic_write(tmp_path / "out.txt", "data")
    assert victim.read_text() == "precious" and (tmp_path / "out.txt").read_text() == "data"
    link = tmp_path / "target.txt"
    os.symlink(victim, link)
    atomic_write(link, "new")  # a link at the target is replaced by the file
    assert victim.read_text() == "precious" and not link.is_symlink() and link.read_text() == "new"


def test_export_locks_its_source(ds, tmp_path):
    from mosaic.export import export

    p = hold_lock(ds)
    try:
        with pytest.raises(DatasetError, match=f"pid {p.pid}.*export's source"):
            export(ds, "parquet", tmp_path / "out")
        assert not (tmp_path / "out").exists()
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------------------------------------
# 5. bounds before decode; 7. named errors for every damaged file
# ------------------------------------------------------------------------------------------------

def _bomb_png(side: int) -> bytes:
    import struct

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = zlib.compress(b"\x00" * ((side * 3 + 1) * side), 9)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def test_a_decompression_bomb_is_refused_before_decoding(ds, tmp_path):
    import resource

    from mosaic.png import decode_image

    bomb = _bomb_png(4000)  # 48 MB of pixels in ~50 KB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(MosaicError, match="refused before decoding"):
        decode_image(bomb, where="x.png", error=MosaicError, max_pixels=128 ** 2)
    with pytest.raises(DatasetError, match="4000x4000 px, but the dataset's images are 16x16"):
        decode_image(bomb, where="x.png", error=DatasetError, exact_size=16)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 40_000  # KiB: nothing was decompressed
    # in a folder to evaluate: bounded by the spec's image size (8 x 16 px per side)
    folder = tmp_path / "eval"
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "a.png").write_bytes(bomb)
    (folder / "metadata.jsonl").write_text(json.dumps({"file_name": "images/a.png", "concepts": {"color": "red", "shape": "circle"}}) + "\n")
    r = runner.invoke(app, ["evaluate", str(folder), "--spec", str(ds), "--check-n", "0"])
    assert r.exit_code == 2 and "refused before decoding" in r.output and "16,384" in r.output, r.output
    # in a dataset: named by the quick check (its bytes differ), and by the reader itself when unchecked
    (ds / "train" / "images" / "000001.png").write_bytes(bomb)
    _refused(ds, "train/images/000001.png")
    from mosaic.torch_data import MosaicDataset

    with pytest.raises(DatasetError, match="000001.png.*4000x4000"):
        MosaicDataset(ds, "train", verify=False)


@pytest.mark.parametrize("damage", ["zero", "truncated", "not_png"])
def test_damaged_pngs_are_named_by_every_reader(ds, tmp_path, damage):
    clean = tmp_path / "clean"
    shutil.copytree(ds, clean)
    p = ds / "train" / "images" / "000004.png"
    data = p.read_bytes()
    p.write_bytes({"zero": b"", "truncated": data[: len(data) // 2], "not_png": b"GIF89a" + data[6:]}[damage])
    _refused(ds, "train/images/000004.png", "--repair")
    folder = tmp_path / "eval"
    shutil.copytree(ds / "train", folder)
    ds = clean
    r = runner.invoke(app, ["evaluate", str(folder), "--spec", str(ds), "--check-n", "0"])
    assert r.exit_code == 2 and "000004.png" in r.output and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("line", [b"\xff\xfe not utf-8", b"[" * 100_000, b'{"file_name": 3, "concepts": {}}',
                                  b'{"file_name": null, "concepts": {}}', b'{"file_name": "../../../etc/passwd", "concepts": {}}',
                                  b'{"file_name": "/etc/passwd", "concepts": {}}'])
def test_hostile_metadata_lines_are_named(ds, tmp_path, line):
    clean = tmp_path / "clean"
    shutil.copytree(ds, clean)
    meta = ds / "train" / "metadata.jsonl"
    lines = meta.read_bytes().split(b"\n")
    lines[1] = line
    meta.write_bytes(b"\n".join(lines))
    _refused(ds, "train/metadata.jsonl:2")
    folder = tmp_path / "eval"
    shutil.copytree(ds / "train", folder)
    ds = clean
    r = runner.invoke(app, ["evaluate", str(folder), "--spec", str(ds), "--check-n", "0"])
    assert r.exit_code == 2 and "line 2" in r.output and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("value", ['"false"', "0", "1", '"yes"', "[]"])
def test_held_out_must_be_a_boolean(ds, tmp_path, value):
    folder = tmp_path / "eval"
    shutil.copytree(ds / "test_id", folder)
    meta = folder / "metadata.jsonl"
    recs = [json.loads(x) for x in meta.read_text().splitlines()]
    recs[0]["held_out"] = json.loads(value)
    meta.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = runner.invoke(app, ["evaluate", str(folder), "--spec", str(ds), "--check-n", "0"])
    assert r.exit_code == 2 and "JSON boolean" in r.output, r.output


def test_held_out_flags_that_contradict_the_spec_are_refused(ds, tmp_path):
    from mosaic.evaluation import evaluate_folder, load_evaluator
    from mosaic.spec import load_spec

    spec = load_spec(ds)
    for split, flip in (("test_ood", False), ("test_id", True)):
        folder = tmp_path / split
        shutil.copytree(ds / split, folder)
        meta = folder / "metadata.jsonl"
        recs = [json.loads(x) for x in meta.read_text().splitlines()]
        recs[0]["held_out"] = flip
        meta.write_text("".join(json.dumps(r) + "\n" for r in recs))
        with pytest.raises(MosaicError, match="contradict the spec"):
            evaluate_folder(folder, spec, load_evaluator(spec, "parser"), check_n=0)
    # as generated, the flags agree: scored
    m = evaluate_folder(ds / "test_ood", spec, load_evaluator(spec, "parser"), check_n=0)
    assert m["held_out"]["n"] == 4 and m["seen"]["n"] == 0


def test_a_held_out_string_false_is_not_counted_held_out_by_score(ds):
    from mosaic.evaluation.metrics import score
    from mosaic.spec import load_spec

    spec = load_spec(ds)
    recs = [{"concepts": {"color": "red", "shape": "square"}, "held_out": "false"}]
    assert score(recs, [{"color": "red", "shape": "square"}], spec)["held_out"]["n"] == 0


def test_nested_dataset_overrides_set_only_that_field(tmp_path):
    from mosaic.lab.config import DatasetSection
    from mosaic.lab.data import load_dataset_spec

    spec = tmp_path / "s.yaml"
    import yaml

    # a 3 x 3 grid, so that n = 2 diagonals still leave every value a training combination
    spec.write_text(yaml.safe_dump({**SPEC, "concepts": {"color": {"values": ["red", "green", "blue"]},
                                                         "shape": {"values": ["circle", "square", "triangle"]}}}))
    for over in ({"holdout.rule.n": 2}, {"holdout": {"rule": {"n": 2}}}):
        got = load_dataset_spec(DatasetSection(spec=str(spec), overrides=over)).to_dict()["holdout"]
        assert got["concepts"] == ["color", "shape"] and got["rule"]["kind"] == "diagonal" and got["rule"]["n"] == 2, over
    # a dotted key with a mapping replaces that field whole
    got = load_dataset_spec(DatasetSection(spec=str(spec), overrides={"holdout.rule": {"kind": "diagonal", "n": 2}})).to_dict()["holdout"]
    assert got["rule"]["n"] == 2 and got["concepts"] == ["color", "shape"]
    # a mapping that names another kind replaces the old rule whole (no stale field of the old kind)
    got = load_dataset_spec(DatasetSection(spec=str(spec), overrides={"holdout": {"rule": {"kind": "coverage", "k": 1}}})).to_dict()["holdout"]
    assert got["rule"]["kind"] == "coverage" and got["rule"]["k"] == 1 and "n" not in got["rule"] and got["concepts"] == ["color", "shape"]


def test_a_config_whose_dataset_spec_is_missing_names_the_file_and_field(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("name: x\nout: %s\ndataset: {spec: no/such/spec.yaml}\ntraining: {steps: 1}\n" % (tmp_path / "run"))
    r = runner.invoke(app, ["train", "diffusion", str(cfg)])
    assert r.exit_code == 2 and str(cfg) in r.output and "dataset.spec" in r.output and "no such spec file" in r.output, r.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("fmt", ["imagefolder", "parquet"])
def test_a_full_disk_while_finishing_a_dataset_is_named_and_a_rerun_finishes(tmp_path, monkeypatch, fmt):
    import errno
    import yaml

    import mosaic.dataset as dataset_mod
    import mosaic.parquet as parquet_mod

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    out = tmp_path / "ds"
    real = dataset_mod.write_card

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out / "README.md"))

    dataset_mod.write_card = parquet_mod.write_card = full
    try:
        r = runner.invoke(app, ["generate", str(spec), "--out", str(out), "--format", fmt])
    finally:
        dataset_mod.write_card = parquet_mod.write_card = real
    assert r.exit_code == 2 and "disk is full" in r.output and "rerun the same command" in r.output, (r.output, r.exception)
    assert not [p for p in out.rglob("*.tmp*")], "a temporary file outlived the failure"
    r = runner.invoke(app, ["generate", str(spec), "--out", str(out), "--format", fmt])
    assert r.exit_code == 0, r.output
    from mosaic.verify import verify

    assert verify(out, deep=True).ok and (out / "README.md").is_file()
