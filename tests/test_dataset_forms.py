"""Both storage forms through the public entry points: generate(format=...), MosaicDataset,
datasets.load_dataset(OUT), the CLI's --format / --backend / export, Ray equal to local."""

import io
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.dataset import generate, read_manifest, read_metadata
from mosaic.errors import DatasetError
from mosaic.parquet import iter_records
from mosaic.spec import parse_spec
from mosaic.torch_data import MosaicDataset
from tests.conftest import SPECS, tiny


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def cc_spec():
    return parse_spec(tiny(SPECS / "count_composition.yaml", train=100, val=6, test_id=8, test_ood=8))


@pytest.fixture(scope="module")
def both(tmp_path_factory, cc_spec):
    root = tmp_path_factory.mktemp("forms")
    generate(cc_spec, root / "img", masks=True)
    generate(cc_spec, root / "pq", masks=True, format="parquet", shard_bytes=10_000)
    return root / "img", root / "pq"


def test_both_forms_hold_the_same_bytes_and_records(both):
    img, pq = both
    for split in ("train", "val", "test_id", "test_ood"):
        recs = read_metadata(img, split)
        assert read_metadata(pq, split) == recs  # the same records, file names included
        for rec, row in zip(recs, iter_records(pq, split, columns=["image", "mask"])):
            assert row["image"]["bytes"] == (img / split / rec["file_name"]).read_bytes()
            assert row["mask"]["bytes"] == (img / split / rec["mask_file_name"]).read_bytes()
    a, b = read_manifest(img), read_manifest(pq)
    assert a["format"] == b["format"] == "mosaic-dataset/2" and (a["storage"], b["storage"]) == ("imagefolder", "parquet")
    assert a["leak_check"] == b["leak_check"] and a["leak_check"]["passed"]


def test_mosaic_dataset_reads_both_forms(both, cc_spec):
    img, pq = both
    a, b = MosaicDataset(img, "validation", load_masks=True), MosaicDataset(pq, "val", load_masks=True)
    assert a.split == b.split == "val" and len(a) == len(b) == 6
    assert a.records == b.records
    for k in ("images", "targets", "held_out", "masks"):
        assert getattr(a, k).equal(getattr(b, k))
    ood = MosaicDataset(pq, "test_ood")
    assert ood.held_out.all() and not a.held_out.any()
    item = ood[3]
    assert item["held_out"].item() is True and ood.decode(item["targets"]) == ood.records[3]["concepts"]
    assert [ood.decode(t) for t in ood.targets] == [r["concepts"] for r in ood.records]
    with pytest.raises(DatasetError) as e:
        MosaicDataset(img, "test")
    assert "no split 'test'" in str(e.value) and "train (100), val (6), test_id (8), test_ood (8)" in str(e.value)


def test_load_dataset_gives_classlabels_for_both_forms(both, cc_spec):
    datasets = pytest.importorskip("datasets")
    for root in both:
        hf = datasets.load_dataset(str(root), cache_dir=str(root) + "-hf-cache")
        assert set(hf) == {"train", "validation", "test_id", "test_ood"}
        labels = hf["train"].features["labels"]
        assert labels["color"].names == cc_spec.domain("color") and labels["count"].names == [str(v) for v in cc_spec.domain("count")]
        assert all(hf["test_ood"]["held_out"]) and not any(hf["test_id"]["held_out"])
        recs = read_metadata(root, "test_ood")
        assert hf["test_ood"]["labels"] == [r["labels"] for r in recs]
        assert np.array_equal(np.asarray(hf["test_ood"][0]["image"]), MosaicDataset(root, "test_ood").images[0].permute(1, 2, 0).numpy())


def test_cli_format_backend_and_export(tmp_path, write_spec):
    from mosaic.cli import app

    spec = write_spec(tiny(SPECS / "count.yaml", train=12, val=4, test=4))
    r = CliRunner().invoke(app, ["generate", str(spec), "--out", str(tmp_path / "x"), "--format", "zip"])
    assert r.exit_code == 2 and "unknown format 'zip'" in r.output and not (tmp_path / "x").exists()
    r = CliRunner().invoke(app, ["generate", str(spec), "--out", str(tmp_path / "x"), "--backend", "dask"])
    assert r.exit_code == 2 and "unknown backend 'dask'" in r.output and not (tmp_path / "x").exists()
    r = CliRunner().invoke(app, ["generate", str(spec), "--out", str(tmp_path / "pq"), "--format", "parquet", "--shard-mb", "0.01"])
    assert r.exit_code == 0, r.output
    man = read_manifest(tmp_path / "pq")
    assert man["storage"] == "parquet" and len(man["shards"]["train"]) > 1 and (tmp_path / "pq" / "README.md").is_file()
    r = CliRunner().invoke(app, ["export", str(tmp_path / "pq"), "--format", "imagefolder"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "pq-imagefolder"
    assert read_metadata(out, "train") == read_metadata(tmp_path / "pq", "train")
    r = CliRunner().invoke(app, ["export", str(tmp_path / "pq"), "--format", "imagefolder"])
    assert r.exit_code == 2 and "not empty" in r.output
    # a damaged shard is named when the dataset is read
    victim = tmp_path / "pq" / "data" / man["shards"]["train"][1]["name"]
    victim.write_bytes(b"PAR1 broken")
    r = CliRunner().invoke(app, ["export", str(tmp_path / "pq"), "--format", "imagefolder", "--out", str(tmp_path / "y")])
    assert r.exit_code == 2 and f"data/{victim.name}" in r.output and "damaged" in r.output


def test_ray_generation_equals_local(tmp_path, cc_spec):
    pytest.importorskip("ray")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for fmt in ("imagefolder", "parquet"):
            a = generate(cc_spec, tmp_path / f"local-{fmt}", format=fmt, shard_size=16, shard_bytes=10_000)
            b = generate(cc_spec, tmp_path / f"ray-{fmt}", format=fmt, shard_size=16, shard_bytes=10_000, backend="ray", workers=2)
            assert a == b and tree(tmp_path / f"local-{fmt}") == tree(tmp_path / f"ray-{fmt}")
    finally:
        ray.shutdown()
