"""Sharded Parquet: determinism across workers, resume after a kill, damaged shards, loading with
datasets and pyarrow, and export between imagefolder and Parquet with identical images and labels."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import mosaic.export
import mosaic.parquet as mp
from mosaic.dataset import generate, read_manifest, read_metadata
from mosaic.errors import DatasetError
from mosaic.hf import hf_record
from mosaic.export import export
from mosaic.parquet import generate_parquet, iter_records, verify_parquet
from mosaic.spec import parse_spec
from tests.conftest import SPECS, tiny


def pixels(png: bytes) -> np.ndarray:
    import io

    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cc_spec():
    return parse_spec(tiny(SPECS / "count_composition.yaml", train=100, val=6, test_id=8, test_ood=8))


@pytest.fixture
def small_groups(monkeypatch):
    monkeypatch.setattr(mp, "ROW_GROUP_ROWS", 7)


def test_one_and_two_workers_give_identical_shards(tmp_path, cc_spec, small_groups):
    a = generate_parquet(cc_spec, tmp_path / "w1", workers=1, shard_bytes=13_000, masks=True)
    b = generate_parquet(cc_spec, tmp_path / "w2", workers=2, shard_bytes=13_000, masks=True)
    assert a == b and len(a["shards"]["train"]) > 2
    ta, tb = tree(tmp_path / "w1"), tree(tmp_path / "w2")
    assert ta == tb
    f = pq.ParquetFile(tmp_path / "w1" / "data" / a["shards"]["train"][0]["name"])
    assert f.metadata.num_row_groups > 1 and f.metadata.num_rows == a["shards"]["train"][0]["rows"]
    assert sum(s["rows"] for s in a["shards"]["train"]) == 100
    assert a["leak_check"]["passed"] and a["status"] == "complete" and a["storage"] == "parquet"


def test_killed_run_resumes_to_the_same_bytes(tmp_path, cc_spec, small_groups):
    ref = tmp_path / "ref"
    generate_parquet(cc_spec, ref, shard_bytes=13_000)
    out = tmp_path / "out"
    calls = []

    def kill(done, total):
        calls.append(done)
        if len(calls) == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate_parquet(cc_spec, out, shard_bytes=13_000, on_progress=kill)
    assert read_manifest(out)["status"] == "incomplete"
    finished = sorted(p.name for p in (out / ".mosaic" / "shards").glob("*.json"))
    assert finished and len(finished) < len(read_manifest(ref)["shards"]["train"])
    assert not (out / "README.md").exists()
    # a finished shard damaged on disk is redone, not trusted
    victim = out / "data" / json.loads((out / ".mosaic" / "shards" / finished[0]).read_text())["name"]
    victim.write_bytes(victim.read_bytes()[:100])
    generate_parquet(cc_spec, out, shard_bytes=13_000)
    assert tree(ref) == tree(out)


def test_loads_with_datasets_and_pyarrow(tmp_path, cc_spec):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "pq"
    man = generate_parquet(cc_spec, out, masks=True)
    hf = datasets.load_dataset(str(out), cache_dir=str(out) + "-hf-cache")
    assert set(hf) == {"train", "validation", "test_id", "test_ood"}
    feats = hf["train"].features
    assert feats["labels"]["color"].names == cc_spec.domain("color")
    assert feats["labels"]["count"].names == [str(v) for v in cc_spec.domain("count")]
    assert all(hf["test_ood"]["held_out"]) and not any(hf["validation"]["held_out"])
    row = hf["test_ood"][2]
    assert {c: cc_spec.domain(c)[k] for c, k in row["labels"].items()} == row["concepts"]
    assert row["image"].size == (32, 32) and row["mask"].mode == "L"
    t = pq.read_table(out / "data" / man["shards"]["test_ood"][0]["name"])
    assert t.num_rows == 8 and t.column("held_out").to_pylist() == [True] * 8
    assert b"huggingface" in t.schema.metadata


def test_imagefolder_and_parquet_hold_identical_images_and_labels(tmp_path, cc_spec):
    img = tmp_path / "img"
    generate(cc_spec, img, masks=True)
    pqd = tmp_path / "pq"
    generate_parquet(cc_spec, pqd, masks=True, shard_bytes=10_000)
    for split in ("train", "val", "test_id", "test_ood"):
        recs = read_metadata(img, split)
        rows = list(iter_records(pqd, split))
        assert len(rows) == len(recs)
        for rec, row in zip(recs, rows):
            for col, key in (("image", "file_name"), ("mask", "mask_file_name")):
                assert np.array_equal(pixels(row.pop(col)["bytes"]), pixels((img / split / rec[key]).read_bytes()))
            want = hf_record(cc_spec, rec)
            want.pop("file_name"), want.pop("mask_file_name")
            assert row == want
    # the manifests agree on everything but the storage form
    a, b = read_manifest(img), read_manifest(pqd)
    assert a["leak_check"] == b["leak_check"] and a["splits"] == b["splits"]


def test_export_round_trip(tmp_path, cc_spec):
    img = tmp_path / "img"
    generate(cc_spec, img)
    pqd = tmp_path / "pq"
    generate_parquet(cc_spec, pqd, shard_bytes=10_000)
    back = export(pqd, "imagefolder", tmp_path / "back")
    assert back["status"] == "complete" and back["storage"] == "imagefolder"
    exp = export(tmp_path / "back", "parquet", tmp_path / "exp", shard_bytes=10_000)
    assert tree(tmp_path / "exp") == tree(pqd)  # parquet -> imagefolder -> parquet: the same shards, card, manifest
    for split in ("train", "test_ood"):
        a, b = read_metadata(img, split), read_metadata(tmp_path / "back", split)
        assert [hf_record(cc_spec, r) for r in a] == b
        for r in a:
            assert np.array_equal(pixels((img / split / r["file_name"]).read_bytes()),
                                  pixels((tmp_path / "back" / split / r["file_name"]).read_bytes()))
    datasets = pytest.importorskip("datasets")
    hf = datasets.load_dataset(str(tmp_path / "back"), cache_dir=str(tmp_path / "back") + "-hf-cache")
    assert set(hf) == {"train", "validation", "test_id", "test_ood"}
    assert hf["train"].features["labels"]["count"].names == [str(v) for v in cc_spec.domain("count")]
    assert hf["test_ood"]["labels"] == [r["labels"] for r in read_metadata(tmp_path / "back", "test_ood")]
    assert exp["leak_check"] == back["leak_check"] == read_manifest(img)["leak_check"]
    # the exported imagefolder is checksummed like a generated one: mosaic verify reads every file against it
    from mosaic.verify import verify

    assert verify(tmp_path / "back", deep=True).ok
    assert back["checksums"]["files"] == read_manifest(img)["checksums"]["files"]
    pngs = [ln for ln in (img / "checksums.sha256").read_text().splitlines() if ".png" in ln]
    assert pngs and (img / "checksums.sha256").read_bytes() == (tmp_path / "back" / "checksums.sha256").read_bytes()
    (tmp_path / "back" / "train" / "images" / "000003.png").write_bytes(b"\x89PNG damaged")
    assert not verify(tmp_path / "back", deep=True).ok


def test_bad_input(tmp_path, cc_spec):
    with pytest.raises(DatasetError, match="unknown format 'zip'"):
        export(tmp_path, "zip")
    pqd = tmp_path / "pq"
    man = generate_parquet(cc_spec, pqd, shard_bytes=10_000)
    with pytest.raises(DatasetError, match="already parquet"):
        export(pqd, "parquet")
    names = [s["name"] for s in man["shards"]["train"]]
    (pqd / "data" / names[1]).unlink()
    p = pqd / "data" / names[2]
    p.write_bytes(p.read_bytes()[:-10] + b"0123456789")
    with pytest.raises(DatasetError) as e:
        verify_parquet(pqd)
    msg = str(e.value)
    assert f"data/{names[1]}: shard is missing" in msg and f"data/{names[2]}" in msg and names[0] not in msg
    with pytest.raises(DatasetError, match=names[1]):
        list(iter_records(pqd, "train"))
    with pytest.raises(DatasetError, match="imagefolder"):
        generate_parquet(cc_spec, _imagefolder(tmp_path, cc_spec))


def _imagefolder(tmp_path, spec):
    out = tmp_path / "img"
    generate(spec, out)
    return out


def test_ray_backend_gives_the_same_bytes(tmp_path, cc_spec, small_groups):
    pytest.importorskip("ray")
    a = generate_parquet(cc_spec, tmp_path / "local", shard_bytes=13_000)
    b = generate_parquet(cc_spec, tmp_path / "ray", shard_bytes=13_000, backend="ray", workers=2)
    assert a == b and tree(tmp_path / "local") == tree(tmp_path / "ray")


def test_unknown_backend_and_changed_shard_size_write_nothing(tmp_path, cc_spec):
    with pytest.raises(DatasetError, match="unknown backend 'dask'"):
        generate_parquet(cc_spec, tmp_path / "x", backend="dask")
    with pytest.raises(DatasetError, match="--backend ray only"):
        generate_parquet(cc_spec, tmp_path / "x", address="auto")
    assert not (tmp_path / "x").exists()
    out = tmp_path / "pq"
    with pytest.raises(KeyboardInterrupt):
        generate_parquet(cc_spec, out, shard_bytes=10_000, on_progress=lambda d, t: (_ for _ in ()).throw(KeyboardInterrupt) if d else None)
    with pytest.raises(DatasetError, match=r"rerun with --shard-mb 0.009537 to resume"):
        generate_parquet(cc_spec, out, shard_bytes=16_000)


def test_export_never_deletes_the_source_or_a_foreign_folder_and_refuses_a_damaged_source(tmp_path, cc_spec):
    src = tmp_path / "img"
    generate(cc_spec, src)
    before = tree(src)
    for out in (src, src / "inside", tmp_path):  # the source, a folder inside it, a folder holding it
        with pytest.raises(DatasetError, match="--out"):
            export(src, "parquet", out, overwrite=True)
    assert tree(src) == before
    user = tmp_path / "userproj"
    (user / "src").mkdir(parents=True)
    (user / "manifest.json").write_text('{"name": "my-web-extension"}')
    (user / "src" / "code.js").write_text("precious")
    with pytest.raises(DatasetError, match="not a mosaic dataset manifest"):
        export(src, "parquet", user, overwrite=True)
    with pytest.raises(DatasetError, match="not a mosaic dataset manifest"):
        generate(cc_spec, user, overwrite=True)
    assert (user / "src" / "code.js").read_text() == "precious"
    png = src / "train" / "images" / "000004.png"
    data = bytearray(png.read_bytes())
    data[60] ^= 0xFF                                    # same size, damaged pixels: only the digest shows it
    png.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=r"(?s)damaged.*train/images/000004.png: altered.*--repair`, then export"):
        export(src, "parquet", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # a mosaic dataset is still replaced by --overwrite, also when its manifest is damaged
    pqd = tmp_path / "pq"
    generate_parquet(cc_spec, pqd, shard_bytes=10_000)
    (pqd / "manifest.json").write_text("{trunc")
    generate_parquet(cc_spec, pqd, shard_bytes=10_000, overwrite=True)
    assert verify_parquet(pqd) is None


@pytest.mark.parametrize("to", ["parquet", "imagefolder"])
def test_an_interrupted_export_is_named_as_an_export_by_verify(tmp_path, cc_spec, monkeypatch, to):
    """A killed export leaves status 'incomplete'; verify must say to rerun the export (with its
    source), not `mosaic generate`, which never made this folder."""
    from mosaic.verify import verify

    src = tmp_path / "src"
    (generate_parquet(cc_spec, src, shard_bytes=10_000) if to == "imagefolder" else generate(cc_spec, src))

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(mosaic.export, "write_shards" if to == "parquet" else "iter_records", killed)
    with pytest.raises(KeyboardInterrupt):
        export(src, to, tmp_path / "out", shard_bytes=10_000)
    monkeypatch.undo()
    report = verify(tmp_path / "out")
    text = " ".join(d.detail for d in report.damage)
    assert f"mosaic export {src} --format {to} --out {tmp_path / 'out'} --overwrite" in text
    assert "mosaic generate" not in text
    # every command that meets the half-written folder gives the same advice (no loop back to generate)
    from typer.testing import CliRunner

    from mosaic.cli import app

    out = tmp_path / "out"
    for args in (["verify", out], ["export", out, "--format", "imagefolder" if to == "parquet" else "parquet", "--out", tmp_path / "x"],
                 ["generate", tmp_path / "spec.yaml", "--out", out, "--format", to], ["generate", tmp_path / "spec.yaml", "--out", out]):
        (tmp_path / "spec.yaml").write_text(__import__("yaml").safe_dump(cc_spec.to_dict()))
        r = CliRunner().invoke(app, [str(a) for a in args])
        said = " ".join(r.output.split())
        assert r.exit_code in (1, 2) and f"mosaic export {src} --format {to}" in said, (args, r.output)
        assert "mosaic generate` command" not in said and "finish it with `mosaic generate`" not in said, (args, r.output)
    # a damaged export_source is named, never printed (escapes, newlines, shell metacharacters)
    man = json.loads((out / "manifest.json").read_text())
    for bad in ["/tmp/x\x1b[31mRED\nfix: all good", 123, ["a"], "x" * 5000]:
        (out / "manifest.json").write_text(json.dumps({**man, "export_source": bad}))
        r = CliRunner().invoke(app, ["verify", str(out)])
        assert r.exit_code == 1 and "no readable export_source" in " ".join(r.output.split()) and "\x1b" not in r.output, r.output
    (out / "manifest.json").write_text(json.dumps({**man, "export_source": "/tmp/my data; rm -rf ~"}))
    r = CliRunner().invoke(app, ["verify", str(out)])
    assert "mosaic export '/tmp/my data; rm -rf ~'" in " ".join(r.output.split()), r.output
    done = export(src, to, tmp_path / "out", shard_bytes=10_000, overwrite=True)
    assert done["status"] == "complete" and "export_source" not in done
