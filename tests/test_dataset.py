import json
from pathlib import Path

import numpy as np
import pytest

from mosaic.dataset import MANIFEST, generate, read_manifest, read_metadata
from mosaic.errors import DatasetError
from mosaic.spec import parse_spec
from tests.conftest import SPECS, tiny


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def count_spec():
    return parse_spec(tiny(SPECS / "count.yaml", train=40, val=6, test=6))


def test_one_and_two_workers_give_identical_files(tmp_path, count_spec):
    generate(count_spec, tmp_path / "w1", workers=1, shard_size=8, masks=True)
    generate(count_spec, tmp_path / "w2", workers=2, shard_size=8, masks=True)
    a, b = tree(tmp_path / "w1"), tree(tmp_path / "w2")
    assert a.keys() == b.keys() and a == b
    assert len([k for k in a if k.startswith("train/images/")]) == 40


def test_interrupted_generation_resumes_to_the_same_bytes(tmp_path, count_spec):
    ref = tmp_path / "ref"
    generate(count_spec, ref, shard_size=8)
    out = tmp_path / "out"
    calls = []

    def stop_after_two_shards(done, total):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate(count_spec, out, shard_size=8, on_progress=stop_after_two_shards)
    assert read_manifest(out)["status"] == "incomplete"
    assert not (out / "train" / "metadata.jsonl").exists()
    # a half-written image from the killed shard must be redone, not trusted
    victim = out / "train" / "images" / "000017.png"
    victim.write_bytes(b"garbage")
    generate(count_spec, out, shard_size=8)
    assert read_manifest(out)["status"] == "complete"
    assert tree(ref) == tree(out)


def test_refuses_another_specs_directory_and_overwrites_on_request(tmp_path, count_spec):
    out = tmp_path / "ds"
    generate(count_spec, out)
    other = parse_spec({**count_spec.to_dict(), "seed": 1})
    with pytest.raises(DatasetError) as e:
        generate(other, out)
    assert "fingerprint" in str(e.value) and "--overwrite" in str(e.value)
    generate(other, out, overwrite=True)
    assert read_manifest(out)["fingerprint"] == other.fingerprint()


def test_refuses_foreign_directories(tmp_path, count_spec):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    for ow in (False, True):
        with pytest.raises(DatasetError):
            generate(count_spec, foreign, overwrite=ow)
    assert (foreign / "notes.txt").read_text() == "keep me"


def test_manifest_and_metadata(tmp_path, count_spec):
    out = tmp_path / "ds"
    man = generate(count_spec, out)
    assert man["status"] == "complete" and man["fingerprint"] == count_spec.fingerprint()
    assert man["splits"] == {"train": {"count": 40}, "val": {"count": 6}, "test": {"count": 6}}
    assert set(man["versions"]) >= {"numpy", "pillow", "python", "mosaic"}
    recs = read_metadata(out, "train")
    assert [r["index"] for r in recs] == list(range(40))
    r = recs[0]
    assert (out / "train" / r["file_name"]).is_file()
    assert r["concepts"]["count"] == len(r["scene"]["objects"]) == r["num_objects"]
    assert r["caption"].split()[-2] == r["concepts"]["color"]


def test_loads_with_torch_and_huggingface(tmp_path, count_spec):
    import torch
    from mosaic.torch_data import MosaicDataset

    out = tmp_path / "ds"
    generate(count_spec, out, masks=True)
    ds = MosaicDataset(out, "train", load_masks=True)
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=8)))
    assert batch["image"].shape == (8, 3, 32, 32) and batch["image"].dtype == torch.uint8
    assert batch["targets"].shape == (8, 2)
    recs = read_metadata(out, "train")
    dom = count_spec.domain("count")
    assert [dom[int(t)] for t in batch["targets"][:, ds.concepts.index("count")]] == [r["concepts"]["count"] for r in recs[:8]]
    assert batch["mask"].shape == (8, 32, 32)
    assert int(batch["mask"][0].max()) == recs[0]["num_objects"]

    datasets = pytest.importorskip("datasets")
    hf = datasets.load_dataset("imagefolder", data_dir=str(out))
    assert hf["train"].num_rows == 40 and hf["validation"].num_rows == 6
    row = hf["train"][3]
    assert row["concepts"] == recs[3]["concepts"]
    assert np.array_equal(np.asarray(row["image"].convert("RGB")), batch["image"][3].permute(1, 2, 0).numpy())


def test_incomplete_dataset_is_not_loaded(tmp_path, count_spec):
    from mosaic.torch_data import MosaicDataset

    out = tmp_path / "ds"
    generate(count_spec, out)
    man = json.loads((out / MANIFEST).read_text())
    man["status"] = "incomplete"
    (out / MANIFEST).write_text(json.dumps(man))
    with pytest.raises(DatasetError, match="incomplete"):
        MosaicDataset(out, "train")
