"""Issue 23, second pass: the HF view of a moved or regenerated folder, Parquet shard writers and
links, interrupted JSON/CSV/PNG writers in run, sweep and evaluation folders, and hostile files on
the read path (each case here failed, or would fail, without the mechanism it names)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from mosaic.errors import DatasetError
from tests.test_integrity_reads import _spec


def _hf_env(tmp_path, monkeypatch):
    """A fresh HF cache (HF_HOME and HF_DATASETS_CACHE), as a new user has it."""
    datasets = pytest.importorskip("datasets")
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(home / "datasets"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    return datasets


def _own(ds, root: Path, split: str) -> None:
    """``ds`` (one HF split) holds exactly the rows and image bytes of ``root``'s files."""
    import io

    import numpy as np
    from PIL import Image

    from mosaic.dataset import read_metadata

    recs = read_metadata(root, split)
    assert ds["caption"] == [r["caption"] for r in recs]
    assert ds["combination"] == [None if r["combination"] is None else [str(v) for v in r["combination"]] for r in recs]
    for i in (0, len(recs) - 1):
        want = np.asarray(Image.open(io.BytesIO((root / split / recs[i]["file_name"]).read_bytes())))
        assert np.array_equal(np.asarray(ds[i]["image"]), want), f"row {i} of {split} shows another folder's image"


OTHER_HOLDOUT = {"concepts": ["color", "shape"], "rule": {"kind": "diagonal", "n": 1, "offset": 1}}


# ------------------------------------------------------------------------------------------------
# the HF view: moved, regenerated, copied cards
# ------------------------------------------------------------------------------------------------

def test_moved_and_regenerated_folders_give_their_own_rows(tmp_path, monkeypatch):
    datasets = _hf_env(tmp_path, monkeypatch)
    from mosaic.dataset import generate
    from mosaic.hf_load import load_dataset

    a, b = tmp_path / "p1" / "count", tmp_path / "p2" / "count"
    generate(_spec(), a)
    _own(datasets.load_dataset(str(a))["test_ood"], a, "test_ood")  # the HF entry of the first place
    b.parent.mkdir()
    shutil.move(str(a), str(b))  # a plain mv
    generate(_spec(holdout=OTHER_HOLDOUT), a)  # the old place: another dataset of the same name
    # plain datasets.load_dataset of the regenerated folder: its own rows (the card's identity is in HF's key)
    _own(datasets.load_dataset(str(a))["test_ood"], a, "test_ood")
    # mosaic's loader (check first, cache keyed by location too): both folders give their own rows and images,
    # although HF's own key of the moved folder is the entry made at p1 (whose images now are another dataset's)
    for root in (b, a, b):
        got = load_dataset(root)
        for split in ("train", "test_ood"):
            _own(got[split], root, split)
    assert load_dataset(b, split="train").num_rows == 12


def test_a_card_copied_from_before_a_regeneration_is_refused_and_repaired(tmp_path):
    from mosaic.dataset import generate
    from mosaic.dataset import repair_dataset
    from mosaic.torch_data import MosaicDataset
    from mosaic.verify import check_before_read, verify

    a = tmp_path / "ds"
    generate(_spec(), a)
    old_card = (a / "README.md").read_bytes()
    generate(_spec(holdout=OTHER_HOLDOUT), a, overwrite=True)
    (a / "README.md").write_bytes(old_card)  # HF would key this folder as the old dataset and serve its cached rows
    with pytest.raises(DatasetError, match="README.md: card"):
        MosaicDataset(a, "train")
    report = verify(a)
    assert [d.path for d in report.damage] == ["README.md"]
    assert repair_dataset(a, report).ok and (a / "README.md").read_bytes() != old_card
    check_before_read(a)


@pytest.mark.parametrize("edit", ["class names", "extra key", "prose only"])
def test_the_cards_whole_yaml_header_is_checked_not_only_its_configs(tmp_path, edit):
    """HF decodes ClassLabel columns with ``dataset_info``'s features: names swapped there (the
    configs untouched) made `datasets.load_dataset` read label 0 of a red sample as 'blue' while
    verify said OK. The whole header must be mosaic's; the prose below it is not read by HF."""
    import yaml

    from mosaic.dataset import generate, repair_dataset
    from mosaic.torch_data import MosaicDataset
    from mosaic.verify import verify

    a = tmp_path / "ds"
    generate(_spec(), a)
    card = a / "README.md"
    text = card.read_text()
    end = text.index("\n---\n", 4)
    head, body = yaml.safe_load(text[4:end]), text[end + 5:]
    if edit == "class names":
        feats = json.loads(json.dumps(head["dataset_info"]["features"]))
        names = next(f for f in feats if f["name"] == "labels")["struct"][0]["dtype"]["class_label"]["names"]
        names["0"], names["1"] = names["1"], names["0"]
        head["dataset_info"] = {"features": feats}
    elif edit == "extra key":
        head["license"] = "mit"
    else:
        body += "\nA note a person added.\n"
    card.write_text("---\n" + yaml.safe_dump(head, sort_keys=False) + "---\n" + body)
    report = verify(a)
    if edit == "prose only":
        assert report.ok, report.problems()
        return
    assert [d.path for d in report.damage] == ["README.md"], report.problems()
    with pytest.raises(DatasetError, match="README.md: card"):
        MosaicDataset(a, "train")
    assert repair_dataset(a, report).ok


@pytest.mark.parametrize("damage", ["missing", "not utf-8", "no front matter", "yaml bomb", "a folder", "huge"])
def test_a_damaged_card_is_named_by_the_quick_check(tmp_path, damage):
    from mosaic.dataset import generate
    from mosaic.verify import verify

    a = tmp_path / "ds"
    generate(_spec(), a)
    card = a / "README.md"
    if damage == "missing":
        card.unlink()
    elif damage == "not utf-8":
        card.write_bytes(b"---\n\xff\xfe\n---\n")
    elif damage == "no front matter":
        card.write_text("# just prose\n")
    elif damage == "yaml bomb":
        card.write_text("---\na: &a [" + ",".join(["*a"] * 3) + "]\n" + "[" * 50_000 + "\n---\n")
    elif damage == "a folder":
        card.unlink()
        card.mkdir()
    else:
        with card.open("ab") as f:
            f.truncate(8 * 2**20)
    report = verify(a)
    assert any(d.path == "README.md" for d in report.damage), report.problems()
    from mosaic.dataset import repair_dataset

    if damage != "a folder":  # a folder in the card's place is named; --repair does not delete folders
        assert repair_dataset(a, report).ok


# ------------------------------------------------------------------------------------------------
# Parquet writers and links
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["data", ".mosaic/shards", ".mosaic", "shard", "shard record"])
def test_parquet_writers_replace_a_planted_link_never_write_through(tmp_path, where):
    from mosaic.parquet import generate_parquet
    from mosaic.verify import verify

    out = tmp_path / "pq"
    generate_parquet(_spec(), out, shard_bytes=4096)
    man = json.loads((out / "manifest.json").read_text())
    shard = man["shards"]["train"][0]["name"]
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("precious")
    victim_file = tmp_path / "victim.bin"
    victim_file.write_bytes(b"precious")
    before = {p.name: p.read_bytes() for p in victim.iterdir()}
    if where in ("data", ".mosaic/shards", ".mosaic"):
        shutil.rmtree(out / where)
        os.symlink(victim, out / where)
    elif where == "shard":
        (out / "data" / shard).unlink()
        os.symlink(victim_file, out / "data" / shard)
    else:
        rec = out / ".mosaic" / "shards" / "train-00000.json"
        shutil.copyfile(rec, victim_file)
        rec.unlink()
        os.symlink(victim_file, rec)
        (out / "data" / shard).unlink()  # the shard must be written again: its record is a link
        victim_bytes = victim_file.read_bytes()
    # a rerun of generate (which repairs what its quick check finds) and a resume write the shards again
    # (a link under .mosaic is no data, so a complete dataset is left alone: an interrupted one resumes through there)
    man_path = out / "manifest.json"
    if where.startswith(".mosaic") or where == "shard record":
        man_path.write_text(json.dumps({**man, "status": "incomplete"}))
    generate_parquet(_spec(), out, shard_bytes=4096)
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == before, "a write went through the link"
    if where == "shard record":
        assert victim_file.read_bytes() == victim_bytes
    else:
        assert victim_file.read_bytes() == b"precious"
    for rel in ("data", ".mosaic", ".mosaic/shards", f"data/{shard}"):
        assert not (out / rel).is_symlink(), rel
    assert verify(out, deep=True).ok
    assert not list((out / "data").glob(".*.tmp*"))


def test_an_interrupted_shard_leaves_no_temporary_file(tmp_path, monkeypatch):
    import mosaic.parquet as mp
    from mosaic.parquet import generate_parquet
    from mosaic.verify import verify

    out = tmp_path / "pq"
    real = mp.render_rows

    def failing(spec_data, split, start, stop, *a, **k):  # the plan's estimates render from index 0
        if split == "train" and start >= 4:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(spec_data, split, start, stop, *a, **k)

    monkeypatch.setattr(mp, "render_rows", failing)
    monkeypatch.setattr(mp, "ROW_GROUP_ROWS", 2)  # several row groups per shard: the failure comes mid-shard
    with pytest.raises(DatasetError, match="generation stopped"):
        generate_parquet(_spec(), out, shard_bytes=2**20)
    assert not [p for p in out.rglob("*") if ".tmp" in p.name], "an unfinished shard outlived its writer"
    monkeypatch.setattr(mp, "render_rows", real)
    generate_parquet(_spec(), out, shard_bytes=2**20)
    assert verify(out, deep=True).ok


def test_parquet_to_imagefolder_export_never_writes_out_of_the_split(tmp_path):
    import pyarrow.parquet as pq

    from mosaic.export import export
    from mosaic.verify import sha256_file

    src = tmp_path / "pq"
    from mosaic.parquet import generate_parquet

    generate_parquet(_spec(), src, shard_bytes=2**20)
    man = json.loads((src / "manifest.json").read_text())
    entry = man["shards"]["train"][0]
    shard = src / "data" / entry["name"]
    t = pq.read_table(shard)
    rows = t.to_pylist()
    rows[1]["image"]["path"] = "../../escaped.png"  # a hostile row; manifest digests made consistent with it
    pq.write_table(type(t).from_pylist(rows, schema=t.schema), shard)
    entry.update(bytes=shard.stat().st_size, sha256=sha256_file(shard))
    (src / "manifest.json").write_text(json.dumps(man))
    from mosaic.hf import write_card
    from mosaic.records import spec_from_data

    write_card(src, spec_from_data(man["spec"]), man, "parquet")
    with pytest.raises(DatasetError, match=r"its image path is '\.\./\.\./escaped\.png', not 'images/000001\.png'"):
        export(src, "imagefolder", tmp_path / "out")  # the source's own check names the row before anything is written
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "escaped.png").exists() and not (tmp_path.parent / "escaped.png").exists()


# ------------------------------------------------------------------------------------------------
# interrupted writers of run, sweep and evaluation folders
# ------------------------------------------------------------------------------------------------

def _full_disk_after(monkeypatch, nbytes: int):
    """Every file the atomic writers open takes ``nbytes`` bytes, then fails with ENOSPC."""
    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f, self.left = f, nbytes

        def write(self, data):
            if len(data) > self.left:
                self.f.write(bytes(data[: self.left]))
                self.left = 0
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.left -= len(data)
            return self.f.write(data)

        def __getattr__(self, k):
            return getattr(self.f, k)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    def fdopen(fd, *a, **k):
        return Full(real(fd, *a, **k))

    import mosaic.io

    monkeypatch.setattr(mosaic.io.os, "fdopen", fdopen)


def _no_temp(folder: Path) -> None:
    assert not [p.name for p in folder.rglob("*") if ".tmp" in p.name], "a temporary file outlived the failure"


def test_an_interrupted_metrics_write_keeps_the_old_files(tmp_path, monkeypatch):
    from mosaic.evaluation.metrics import score, write_metrics
    from mosaic.lab.run_folder import RunFolder

    spec = _spec()
    recs = [{"concepts": {"color": "red", "shape": "circle"}, "held_out": False},
            {"concepts": {"color": "blue", "shape": "square"}, "held_out": False}]
    m = score(recs, [r["concepts"] for r in recs], spec)
    out = tmp_path / "eval"
    paths = write_metrics(m, out, spec)
    old = {k: p.read_bytes() for k, p in paths.items()}
    m2 = score(recs, [{"color": "green", "shape": "circle"}] * 2, spec)
    with monkeypatch.context() as mp:
        _full_disk_after(mp, 40)
        with pytest.raises(OSError) as e:
            write_metrics(m2, out, spec)
        assert e.value.errno == errno.ENOSPC
    assert {k: p.read_bytes() for k, p in paths.items()} == old
    _no_temp(out)
    # a run folder's metrics.json and a sweep trial's trial.json
    run = RunFolder(tmp_path / "run")
    run.root.mkdir()
    run.write_metrics({"step": 1})
    from mosaic.trials import write_status

    write_status(run.root, {"status": "done"})
    before = (run.metrics.read_bytes(), (run.root / "trial.json").read_bytes())
    with monkeypatch.context() as mp:
        _full_disk_after(mp, 3)
        for fn in (lambda: run.write_metrics({"step": 2, "pad": "x" * 100}), lambda: write_status(run.root, {"status": "failed"})):
            with pytest.raises(OSError):
                fn()
    assert (run.metrics.read_bytes(), (run.root / "trial.json").read_bytes()) == before
    _no_temp(run.root)


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path):
    from mosaic.io import atomic_writer

    target = tmp_path / "metrics.json"
    with atomic_writer(target) as f1, atomic_writer(target) as f2:  # two writers at once (threads, processes)
        f1.write(b'{"a": 1}\n')
        f2.write(b'{"b": 2}\n')
    assert json.loads(target.read_text()) == {"a": 1}  # the last to finish wins, whole; never a mix
    _no_temp(tmp_path)


# ------------------------------------------------------------------------------------------------
# hostile files on the read path (attack of this pass: each is refused by name, never read, never a traceback)
# ------------------------------------------------------------------------------------------------

def _swap(a: Path, b: Path) -> None:
    t = a.with_name(".swap")
    a.rename(t)
    b.rename(a)
    t.rename(b)


def _link(target: Path, at: Path) -> None:
    if at.is_dir() and not at.is_symlink():
        shutil.rmtree(at)
    else:
        at.unlink()
    os.symlink(target, at)


def _rewrite(p: Path, fn) -> None:
    p.write_bytes(fn(p.read_bytes()))


IMAGEFOLDER_DAMAGE = {
    # swapped within a split: every name, size and the split's byte total stay (the quick check compares digests)
    "two images swapped": (lambda d, o: _swap(d / "train/images/000000.png", d / "train/images/000001.png"), "train/images/000000.png"),
    "an image of another split": (lambda d, o: shutil.copyfile(d / "val/images/000000.png", d / "train/images/000000.png"), "altered"),
    "an image of the same index of another dataset": (
        lambda d, o: shutil.copyfile(o / "train/images/000000.png", d / "train/images/000000.png"), "train/images/000000.png"),
    "two metadata lines swapped": (lambda d, o: _rewrite(d / "train/metadata.jsonl", lambda b: b"".join(
        (lambda L: [L[1], L[0]] + L[2:])(b.splitlines(True)))), "train/metadata.jsonl"),
    "metadata with CRLF line ends": (lambda d, o: _rewrite(d / "train/metadata.jsonl", lambda b: b.replace(b"\n", b"\r\n")),
                                     "train/metadata.jsonl"),
    "two splits' metadata swapped": (lambda d, o: _swap(d / "test_id/metadata.jsonl", d / "test_ood/metadata.jsonl"), "metadata.jsonl"),
    "a FIFO where an image belongs": (lambda d, o: ((d / "train/images/000003.png").unlink(), os.mkfifo(d / "train/images/000003.png")),
                                      "000003.png"),
    "a folder where an image belongs": (lambda d, o: ((d / "train/images/000003.png").unlink(), (d / "train/images/000003.png").mkdir()),
                                        "000003.png"),
    "a non-UTF-8 file name in images/": (lambda d, o: open(os.path.join(bytes(d / "train/images"), b"\xff\xfe.png"), "wb").close(),
                                         "stray"),
    "a planted pickle in a split": (lambda d, o: (d / "train/custom_checkpoint_0.pkl").write_bytes(b"\x80\x04K\x01."), "custom_checkpoint_0.pkl"),
    "manifest.json linked to another dataset's": (lambda d, o: _link(o / "manifest.json", d / "manifest.json"), "manifest.json"),
    "checksums.sha256 linked": (lambda d, o: _link(o / "checksums.sha256", d / "checksums.sha256"), "checksums.sha256"),
    "README.md linked": (lambda d, o: _link(o / "README.md", d / "README.md"), "README.md"),
    "a split's images/ linked to another dataset's": (lambda d, o: _link(o / "train/images", d / "train/images"), "train/images"),
    "checksums.sha256 truncated": (lambda d, o: _rewrite(d / "checksums.sha256", lambda b: b[:100]), "checksums.sha256"),
    "checksums.sha256 not UTF-8": (lambda d, o: _rewrite(d / "checksums.sha256", lambda b: b"\xff" + b), "checksums.sha256"),
    "manifest.json not UTF-8": (lambda d, o: _rewrite(d / "manifest.json", lambda b: b"\xff" + b), "manifest.json"),
    "manifest.json nested 100k deep": (lambda d, o: (d / "manifest.json").write_text("[" * 100_000 + "]" * 100_000), "manifest.json"),
    "manifest.json truncated": (lambda d, o: _rewrite(d / "manifest.json", lambda b: b[:50]), "manifest.json"),
    "manifest.json of 65 MiB": (lambda d, o: (d / "manifest.json").open("ab").truncate(65 * 2**20), "manifest.json"),
    "the card of a Parquet dataset": (lambda d, o: shutil.copyfile(o.parent / "pq" / "README.md", d / "README.md"), "README.md"),
}


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """An imagefolder dataset, another of the same shape (another seed), and a Parquet one."""
    from mosaic.dataset import generate
    from mosaic.parquet import generate_parquet

    root = tmp_path_factory.mktemp("hostile")
    generate(_spec(), root / "img")
    generate(_spec(seed=11), root / "other")
    generate_parquet(_spec(splits={"train": 40, "val": 3, "test_id": 3, "test_ood": 4}), root / "pq", shard_bytes=2048)
    return root


@pytest.mark.parametrize("case", sorted(IMAGEFOLDER_DAMAGE))
def test_hostile_imagefolder_damage_is_refused_by_every_reader(two, tmp_path, case):
    from mosaic.hf_load import load_dataset
    from mosaic.stream import StreamingDataset
    from mosaic.torch_data import MosaicDataset

    d = tmp_path / "ds"
    shutil.copytree(two / "img", d, symlinks=True)
    damage, needle = IMAGEFOLDER_DAMAGE[case]
    damage(d, two / "other")
    for read in (lambda: MosaicDataset(d, "train"), lambda: StreamingDataset(d, "train"), lambda: load_dataset(d)):
        with pytest.raises(DatasetError) as e:
            read()
        assert needle in str(e.value), str(e.value)


PARQUET_DAMAGE = {
    "two shards swapped": lambda d: _swap(*sorted((d / "data").glob("train-*.parquet"))[:2]),
    "a shard truncated": lambda d: _rewrite(sorted((d / "data").glob("train-*.parquet"))[0], lambda b: b[:-30]),
    "one byte flipped in a shard": lambda d: _rewrite(sorted((d / "data").glob("train-*.parquet"))[0],
                                                      lambda b: b[: len(b) // 2] + bytes([b[len(b) // 2] ^ 1]) + b[len(b) // 2 + 1:]),
    "data/ linked to another copy": lambda d: _link(d.parent / "pq-copy" / "data", d / "data"),
    "a stray shard": lambda d: shutil.copyfile(sorted((d / "data").glob("test_ood-*"))[0], d / "data" / "train-00099-of-00099.parquet"),
    "the card removed": lambda d: (d / "README.md").unlink(),
    "the card linked": lambda d: _link(d.parent / "pq-copy" / "README.md", d / "README.md"),
}


@pytest.mark.parametrize("case", sorted(PARQUET_DAMAGE))
def test_hostile_parquet_damage_is_refused(two, tmp_path, case):
    from mosaic.hf_load import load_dataset
    from mosaic.torch_data import MosaicDataset

    d = tmp_path / "pq"
    shutil.copytree(two / "pq", d, symlinks=True)
    shutil.copytree(two / "pq", tmp_path / "pq-copy", symlinks=True)
    PARQUET_DAMAGE[case](d)
    for read in (lambda: MosaicDataset(d, "train"), lambda: load_dataset(d)):
        with pytest.raises(DatasetError):
            read()


def test_a_forged_consistent_bomb_is_refused_before_decoding(two, tmp_path):
    # digests, byte totals and the card all made to match an 8000 x 8000 PNG: only the size bound stands
    import hashlib

    from mosaic.hf import write_card
    from mosaic.records import spec_from_data
    from mosaic.torch_data import MosaicDataset
    from tests.test_integrity_reads import _bomb_png

    d = tmp_path / "ds"
    shutil.copytree(two / "img", d)
    bomb = _bomb_png(8000)
    old = (d / "train/images/000000.png").stat().st_size
    (d / "train/images/000000.png").write_bytes(bomb)
    sums = d / "checksums.sha256"
    sums.write_text("".join(
        (f"{hashlib.sha256(bomb).hexdigest()}  {p}\n" if p == "train/images/000000.png" else f"{h}  {p}\n")
        for h, p in (ln.split("  ", 1) for ln in sums.read_text().splitlines())))
    man = json.loads((d / "manifest.json").read_text())
    man["checksums"]["sha256"] = hashlib.sha256(sums.read_bytes()).hexdigest()
    man["checksums"]["bytes"]["train"] += len(bomb) - old
    (d / "manifest.json").write_text(json.dumps(man))
    write_card(d, spec_from_data(man["spec"]), man, "imagefolder")
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DatasetError, match="8000x8000"):
        MosaicDataset(d, "train")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: 192 MB of pixels never made


@pytest.mark.parametrize("how", ["moved", "copied", "copied with links kept"])
def test_a_moved_or_copied_dataset_reads_as_itself(two, tmp_path, how):
    from mosaic.torch_data import MosaicDataset

    src = tmp_path / "a"
    shutil.copytree(two / "img", src)
    dst = tmp_path / "b" / "img"
    dst.parent.mkdir()
    if how == "moved":
        shutil.move(str(src), str(dst))
    else:
        shutil.copytree(src, dst, symlinks=how.endswith("kept"))
    a = MosaicDataset(dst, "train")
    b = MosaicDataset(two / "img", "train")
    assert len(a) == len(b) == 12
    import torch

    assert all(torch.equal(a[i]["image"], b[i]["image"]) for i in (0, 11))
