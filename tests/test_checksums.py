"""checksums.sha256 written and read in memory independent of the dataset's size (issue 15, item 4)."""

import hashlib
import json
import os
import tracemalloc
from pathlib import Path

import pytest

from mosaic.checksums import CHECKSUMS, RecordedDigests, scan_metadata, write_checksums
from mosaic.spec import parse_spec
from tests.conftest import SPECS, tiny


def fake_dataset(root: Path, n: int, masks: bool = False, splits=("train", "val")) -> dict:
    """A folder laid out as an imagefolder dataset (small files of distinct bytes, no PNG needed)."""
    records = {}
    for split in splits:
        (root / split / "images").mkdir(parents=True)
        if masks:
            (root / split / "masks").mkdir(parents=True)
        recs = []
        with (root / split / "metadata.jsonl").open("w") as f:
            for i in range(n):
                r = {"file_name": f"images/{i:06d}.png", "index": i}
                (root / split / r["file_name"]).write_bytes(f"{split}-{i}".encode() * (1 + i % 7))
                if masks:
                    r["mask_file_name"] = f"masks/{i:06d}.png"
                    (root / split / r["mask_file_name"]).write_bytes(f"m{i}".encode())
                f.write(json.dumps(r, sort_keys=True) + "\n")
                recs.append(r)
        records[split] = recs
    return records


def old_checksums(root: Path, records: dict) -> tuple[bytes, dict]:
    """The format as it was written before streaming (every line held, joined at the end)."""
    lines, per_split = [], {}
    for split, recs in records.items():
        total = 0
        rels = [f"{split}/metadata.jsonl"]
        for r in recs:
            rels.append(f"{split}/{r['file_name']}")
            if r.get("mask_file_name"):
                rels.append(f"{split}/{r['mask_file_name']}")
        for rel in rels:
            data = (root / rel).read_bytes()
            if not rel.endswith("metadata.jsonl"):
                total += len(data)
            lines.append(f"{hashlib.sha256(data).hexdigest()}  {rel}")
        per_split[split] = total
    text = ("\n".join(lines) + "\n").encode()
    return text, {"file": CHECKSUMS, "sha256": hashlib.sha256(text).hexdigest(), "files": len(lines), "bytes": per_split}


@pytest.mark.parametrize("masks", [False, True])
def test_streamed_checksums_are_byte_identical_to_the_format(tmp_path, masks):
    records = fake_dataset(tmp_path, 30, masks)
    want_text, want_entry = old_checksums(tmp_path, records)
    entry = write_checksums(tmp_path, {s: iter(r) for s, r in records.items()})  # any iterable, read once
    assert (tmp_path / CHECKSUMS).read_bytes() == want_text
    assert entry == want_entry
    assert entry["files"] == 2 * (1 + 30 * (2 if masks else 1))
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_no_files_writes_the_empty_list(tmp_path):
    entry = write_checksums(tmp_path, {})
    assert (tmp_path / CHECKSUMS).read_bytes() == b"\n" and entry["files"] == 0


def test_a_missing_file_leaves_no_checksums_file(tmp_path):
    records = fake_dataset(tmp_path, 5)
    (tmp_path / "val" / "images" / "000003.png").unlink()
    with pytest.raises(FileNotFoundError, match="000003.png"):
        write_checksums(tmp_path, records)
    assert sorted(os.listdir(tmp_path)) == ["train", "val"]  # neither checksums.sha256 nor its temporary file


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _names(split: str, n: int):
    return ({"file_name": f"images/{i:06d}.png"} for i in range(n))  # made on the fly, as finalize does


def test_write_checksums_peak_memory_does_not_grow_with_the_number_of_files(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    fake_dataset(small, 200, splits=("train",))
    fake_dataset(large, 2000, splits=("train",))
    write_checksums(small, {"train": _names("train", 200)})  # warm up (imports, caches)
    p_small = _peak(lambda: write_checksums(small, {"train": _names("train", 200)}))
    p_large = _peak(lambda: write_checksums(large, {"train": _names("train", 2000)}))
    # holding the lines would add ~150 bytes per file (~270 KB here); streaming holds one line
    assert p_large - p_small < 32 * 1024, (p_small, p_large)


def test_recorded_digests_in_order_out_of_order_and_missing(tmp_path):
    records = fake_dataset(tmp_path, 20, masks=True)
    write_checksums(tmp_path, records)
    want = dict(reversed(line.split("  ")) for line in (tmp_path / CHECKSUMS).read_text().splitlines())
    with RecordedDigests(tmp_path / CHECKSUMS) as d:
        for rel in want:  # file order
            assert d.get(rel) == want[rel]
        assert d.get("train/images/000003.png") == want["train/images/000003.png"]  # behind: rescans
        assert d.get("val/masks/000019.png") == want["val/masks/000019.png"]
        assert d.get("nope/x.png") is None and d.get("nope/x.png", "-") == "-"
        assert d.get("train/metadata.jsonl") == want["train/metadata.jsonl"]  # after a miss


def test_recorded_digests_lookups_peak_memory_does_not_grow(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    for root, n in ((small, 200), (large, 2000)):
        fake_dataset(root, n, splits=("train",))
        write_checksums(root, {"train": _names("train", n)})

    def lookups(root, n):
        with RecordedDigests(root / CHECKSUMS) as d:
            assert d.get("train/metadata.jsonl")
            for i in range(n):
                assert d.get(f"train/images/{i:06d}.png")

    lookups(small, 200)
    p_small = _peak(lambda: lookups(small, 200))
    p_large = _peak(lambda: lookups(large, 2000))
    assert p_large - p_small < 32 * 1024, (p_small, p_large)


def test_scan_metadata_finds_bad_lines_and_foreign_names(tmp_path):
    fake_dataset(tmp_path, 6, splits=("train",))
    meta = tmp_path / "train" / "metadata.jsonl"
    lines = meta.read_bytes().split(b"\n")[:-1]
    lines[2] = b"{not json"
    lines[3] = json.dumps({"file_name": "images/000003.png", "index": 7}).encode()  # another index
    lines[4] = json.dumps({"file_name": "elsewhere/4.png", "index": 4}).encode()
    data = b"\n".join(lines) + b"\n\n"  # and an empty last line
    meta.write_bytes(data)
    scan = scan_metadata(meta, masks=False)
    assert scan.lines == 7 and scan.sha256 == hashlib.sha256(data).hexdigest()
    assert scan.bad_lines == [2, 3, 4, 6]  # line 4 names a file that is not sample 4's own
    assert "'elsewhere/4.png', not 'images/000004.png'" in scan.why[4]
    assert scan.valid(0) and scan.valid(5) and not scan.valid(2) and not scan.valid(4) and not scan.valid(7)


def test_finalize_and_verify_peak_memory_does_not_grow_with_the_dataset(tmp_path):
    """finalize (merge the part files, leak check, manifest, checksums, card) and the quick and deep
    checks of a finished dataset (what a rerun of generate and `mosaic verify` do) peak no higher at
    2,000 samples than at 200: nothing they hold grows with the number of samples."""
    from mosaic.dataset import finalize, generate
    from mosaic.verify import verify

    peaks, checks = {}, {}
    for n in (200, 2000):
        spec = parse_spec(tiny(SPECS / "count.yaml", size=32, train=n, val=0, test=0))
        out = tmp_path / f"d{n}"
        generate(spec, out, shard_size=64)
        before = (out / CHECKSUMS).read_bytes(), (out / "train" / "metadata.jsonl").read_bytes()
        finalize(spec, out, False)  # warm up, then measure a second, identical finalize
        peaks[n] = _peak(lambda: finalize(spec, out, False))
        assert ((out / CHECKSUMS).read_bytes(), (out / "train" / "metadata.jsonl").read_bytes()) == before
        for deep in (False, True):
            assert verify(out, deep=deep).ok
            checks[n, deep] = _peak(lambda: verify(out, deep=deep))
    assert peaks[2000] - peaks[200] < 64 * 1024, peaks
    for deep in (False, True):  # holding the records and the digests would add several KB per sample
        assert checks[2000, deep] - checks[200, deep] < 64 * 1024, checks


def test_split_plans_hold_one_byte_per_sample():
    """The plans of which combination and value each index shows (mosaic.splits) are the one state
    that grows with a split: one byte per sample for up to 256 cells or values (eight before)."""
    from mosaic import splits
    from mosaic.records import sample_record

    n = 20_000
    spec = parse_spec(tiny(SPECS / "count_composition.yaml", train=n, test_id=10, test_ood=10))
    sample_record(spec, "train", n - 1)
    cells, plan = splits._PLANS[(spec.fingerprint(), "train")]
    assert len(plan) == n and plan.nbytes == n, plan.dtype
    values = [v for k, v in splits._VALUE_PLANS.items() if k[:2] == (spec.fingerprint(), "train")]
    assert all(v.nbytes == n for v in values), [v.dtype for v in values]
