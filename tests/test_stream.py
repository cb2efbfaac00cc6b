"""StreamingDataset: the generated dataset without the disk; deterministic, sharded, no leaks."""

import numpy as np
import pytest
import torch

from mosaic.dataset import generate, read_metadata
from mosaic.errors import DatasetError
from mosaic.spec import parse_spec
from mosaic.stream import StreamingDataset
from tests.conftest import SPECS, tiny


@pytest.fixture(scope="module")
def cc_spec():
    return parse_spec(tiny(SPECS / "count_composition.yaml", train=100, val=6, test_id=8, test_ood=8))


def test_stream_equals_the_generated_dataset(tmp_path, cc_spec):
    from PIL import Image

    out = tmp_path / "ds"
    generate(cc_spec, out)
    for split in ("train", "test_ood"):
        ds = StreamingDataset(cc_spec, split)
        recs = read_metadata(out, split)
        items = list(ds)
        assert [it["index"] for it in items] == list(range(len(recs)))
        for it, r in zip(items, recs):
            img = np.asarray(Image.open(out / split / r["file_name"]).convert("RGB"))
            assert np.array_equal(it["image"].permute(1, 2, 0).numpy(), img)
            assert ds.decode(it["targets"]) == r["concepts"] and it["caption"] == r["caption"]
            assert it["held_out"] == r["held_out"] == (split == "test_ood")


def test_workers_and_ranks_partition_the_split(cc_spec):
    seen = []
    for rank in range(2):
        ds = StreamingDataset(cc_spec, "train", rank=rank, world_size=2, shuffle=True)
        ds.set_epoch(3)
        dl = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2)
        got = [int(i) for b in dl for i in b["index"]]
        assert len(got) == len(ds) == 50
        seen += got
        assert not any(b["held_out"].any() for b in dl)
    assert sorted(seen) == list(range(100))
    a = StreamingDataset(cc_spec, "train", shuffle=True)
    a.set_epoch(3)
    b = StreamingDataset(cc_spec, "train", shuffle=True)
    b.set_epoch(4)
    assert sorted(a.order()) == sorted(b.order()) and list(a.order()) != list(b.order())
    # deterministic per (seed, split, index): the same index gives the same image in any shard
    x = StreamingDataset(cc_spec, "train", rank=1, world_size=2)[17]
    assert torch.equal(x["image"], StreamingDataset(cc_spec, "train")[17]["image"])


def test_split_names(cc_spec):
    assert StreamingDataset(cc_spec, "validation").split == "val"
    with pytest.raises(DatasetError) as e:
        StreamingDataset(cc_spec, "test")
    assert "no split 'test'" in str(e.value) and "train (100), val (6), test_id (8), test_ood (8)" in str(e.value)


def _targets(records):
    return {"y": torch.tensor([list(r["labels"].values()) for r in records])}


def test_stream_source_gives_the_batches_of_the_dataset_on_disk(tmp_path, cc_spec):
    from mosaic.lab.data import BatchPlan
    from mosaic.stream import StreamSource
    from mosaic.torch_data import MosaicDataset

    generate(cc_spec, tmp_path / "ds")
    disk = MosaicDataset(tmp_path / "ds", "train")
    plan = BatchPlan(len(disk), 8, 1, 0, 5)
    src = StreamSource(cc_spec, "train", _targets, workers=2)
    assert len(src) == len(disk) == 100
    got = list(src.batches(plan, 11, 19))  # resuming at micro-step 11 (over an epoch boundary: 12 per epoch)
    assert len(got) == 8
    for m, b in zip(range(11, 19), got):
        idx = plan.indices(m)
        assert torch.equal(b["image"], disk.images[idx]) and torch.equal(b["y"], disk.targets[idx])
