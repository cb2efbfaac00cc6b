"""Hostile cases of a sixth attack on the data path (issue 23), each closed at its mechanism:

- a run folder whose ``run.json`` was removed (or replaced by a FIFO, folder or link) had no id, so
  ``best/`` weights of another run (their ``weights.json`` naming that run) were sampled as its own;
- a samples folder's ``sampling.json`` that is JSON but not a mapping was an AttributeError traceback;
- a checkpoint's non-tensor state (``checkpoint.json``, the record, not digested itself) was loaded as
  it stood: ``"lr": 1e9`` trained on to NaN losses with exit 0, ``"lr": "x"`` was a TypeError
  traceback in ``optimizer.step``; ``trainer_state.json``'s ``best: "x"`` likewise;
- a dataset's records rewritten together with their digests and card were read as they stood: the
  held-out combination in ``train`` (with either ``held_out`` flag), or a training record's ``labels``
  moved to the held-out cell (what the transformer trains on), passed ``verify`` and every reader;
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2 as _clean_exit_2

runner = CliRunner()


def _copy_run(drun, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    return run


def _samples(run: Path) -> Path:
    return next(p for p in (run / "samples").iterdir() if p.is_dir())


# ------------------------------------------------------------------------------------------------
# case 09: weights that name a run are never loaded in a run folder without its own id
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gone", ["removed", "fifo", "folder"])
def test_weights_of_another_run_are_refused_when_run_json_is_gone(tmp_path, drun, gone):
    run = _copy_run(drun, tmp_path)
    for w in ("best", "final"):
        rec = json.loads((run / w / "weights.json").read_text())
        rec["run_id"] = "0123456789abcdef0123456789abcdef"  # another run's weights, copied in with their record
        (run / w / "weights.json").write_text(json.dumps(rec))
    (run / "run.json").unlink()
    if gone == "fifo":
        os.mkfifo(run / "run.json")
    elif gone == "folder":
        (run / "run.json").mkdir()
    res = runner.invoke(app, ["sample", str(run), "--guidance", "3"])
    _clean_exit_2(res, "run.json")
    assert not any("g3" in p.name for p in (run / "samples").iterdir())


# ------------------------------------------------------------------------------------------------
# case 22: a samples folder's sampling.json that is not a mapping
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["[1, 2]", "3", "\"best\""])
def test_a_sampling_record_that_is_not_a_mapping_is_named(tmp_path, drun, text):
    run = _copy_run(drun, tmp_path)
    (_samples(run) / "sampling.json").write_text(text)
    res = runner.invoke(app, ["sample", str(run)])
    _clean_exit_2(res, "sampling.json", "not a mapping")


# ------------------------------------------------------------------------------------------------
# case 10: a checkpoint's non-tensor state must be one this run's config can be in
# ------------------------------------------------------------------------------------------------

def _edit_groups(rec, key, value):
    for k, groups in rec["objects"]["optimizer"]["__dict__"]:
        if k == "param_groups":
            for g in groups:
                for kv in g["__dict__"]:
                    if kv[0] == key:
                        kv[1] = value


def _edit_entry(rec, obj, key, value):
    for kv in rec["objects"][obj]["__dict__"]:
        if kv[0] == key:
            kv[1] = value


EDITS = {
    "lr_string": lambda r: _edit_groups(r, "lr", "x"),
    "lr_huge": lambda r: _edit_groups(r, "lr", 1e9),
    "betas": lambda r: _edit_groups(r, "betas", {"__tuple__": [0.0, 0.0]}),
    "weight_decay_bool": lambda r: _edit_groups(r, "weight_decay", True),
    "base_lrs": lambda r: _edit_entry(r, "scheduler", "base_lrs", [1e9]),
    "last_epoch": lambda r: _edit_entry(r, "scheduler", "last_epoch", "1"),
    "ema_decay": lambda r: _edit_entry(r, "ema", "decay", 0.5),
    "ema_step": lambda r: _edit_entry(r, "ema", "optimization_step", 1.5),
}


def _resume(run: Path, data: Path):
    return runner.invoke(app, ["train", "diffusion", str(run / "config.yaml"), "--out", str(run), "--set", f"dataset.path={data}"])


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_checkpoint_record_with_state_the_config_cannot_give_is_damaged(tmp_path, drun, edit):
    run = _copy_run(drun, tmp_path)
    (run / "DONE").unlink()
    shutil.rmtree(run / "checkpoints" / "checkpoint-0000002")
    ck = run / "checkpoints" / "checkpoint-0000001"
    rec = json.loads((ck / "checkpoint.json").read_text())
    EDITS[edit](rec)
    (ck / "checkpoint.json").write_text(json.dumps(rec))
    res = _resume(run, drun[1])
    _clean_exit_2(res, "checkpoint.json is damaged")
    assert (run / "checkpoints" / "checkpoint-0000001.damaged").is_dir() and not (run / "DONE").exists()


@pytest.mark.parametrize("field,value", [("best", "x"), ("best_step", 99), ("train_time_s", -1), ("val", [])])
def test_a_trainer_state_the_loop_cannot_have_written_is_damaged(tmp_path, drun, field, value):
    import hashlib

    run = _copy_run(drun, tmp_path)
    (run / "DONE").unlink()
    shutil.rmtree(run / "checkpoints" / "checkpoint-0000002")
    ck = run / "checkpoints" / "checkpoint-0000001"
    st = json.loads((ck / "trainer_state.json").read_text())
    st[field] = value
    body = json.dumps(st).encode()
    (ck / "trainer_state.json").write_bytes(body)
    rec = json.loads((ck / "checkpoint.json").read_text())  # the digest updated with it: only the values can tell
    rec["files"]["trainer_state.json"] = {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    (ck / "checkpoint.json").write_text(json.dumps(rec))
    res = _resume(run, drun[1])
    _clean_exit_2(res, "trainer_state.json is damaged", field)


def test_a_checkpoint_with_its_own_state_still_resumes(tmp_path, drun):
    run = _copy_run(drun, tmp_path)
    (run / "DONE").unlink()
    shutil.rmtree(run / "checkpoints" / "checkpoint-0000002")
    res = _resume(run, drun[1])
    assert res.exit_code == 0, res.output
    assert "resumed from" in res.output and (run / "DONE").is_file()


# ------------------------------------------------------------------------------------------------
# cases 12, 13: a record's claims are checked against its concepts and its spec on every read
# ------------------------------------------------------------------------------------------------

def _reseal(root: Path) -> None:
    from mosaic.checksums import write_checksums
    from mosaic.hf import write_card
    from mosaic.spec import parse_spec

    man = json.loads((root / "manifest.json").read_text())
    recs = {s: [json.loads(x) for x in (root / s / "metadata.jsonl").read_text().splitlines()] for s in man["splits"]}
    man["checksums"] = write_checksums(root, recs)
    (root / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    write_card(root, parse_spec(man["spec"]), man)


@pytest.mark.parametrize("edit", ["held_out_true", "held_out_false", "labels"])
def test_a_record_contradicting_its_spec_is_refused_even_with_its_digests_rewritten(tmp_path, drun, edit):
    from mosaic.dataset import read_metadata
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    data = tmp_path / "data"
    shutil.copytree(drun[1], data)
    meta = data / "train" / "metadata.jsonl"
    rows = [json.loads(x) for x in meta.read_text().splitlines()]
    r = next(x for x in rows if x["concepts"]["color"] == "blue")
    if edit == "labels":  # concepts left seen, labels moved to the held-out cell blue|square
        r["labels"] = {"color": 2, "shape": 1}
    else:
        r.update(concepts={"color": "blue", "shape": "square"}, labels={"color": 2, "shape": 1},
                 combination=["blue", "square"], held_out=edit == "held_out_true")
    meta.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in rows))
    _reseal(data)
    res = runner.invoke(app, ["verify", str(data)])
    assert res.exit_code == 1 and "contradicts its spec" in res.output and "--overwrite" in res.output, res.output
    with pytest.raises(DatasetError, match="contradicts"):
        MosaicDataset(data, "train")
    with pytest.raises(DatasetError, match="contradicts"):
        read_metadata(data, "train")


# ------------------------------------------------------------------------------------------------
# case 14: an image of another size (a decompression bomb) written together with its digests is
# refused by verify, export and every reader from its PNG header, before a decoder runs
# ------------------------------------------------------------------------------------------------

def _bomb_png(side: int = 6000) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (side, side)).save(buf, format="PNG")  # ~100 KB on disk, 108 MB decoded
    return buf.getvalue()


def test_an_image_of_another_size_resealed_with_its_digests_is_refused_everywhere(tmp_path, drun):
    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset
    from mosaic.torch_data import MosaicDataset

    data = tmp_path / "data"
    shutil.copytree(drun[1], data)
    img = data / "train" / "images" / "000003.png"
    img.write_bytes(_bomb_png())
    _reseal(data)
    res = runner.invoke(app, ["verify", str(data)])
    assert res.exit_code == 1 and "train/images/000003.png" in res.output and "6000x6000 px" in res.output, res.output
    res = runner.invoke(app, ["verify", str(data), "--quick"])
    assert res.exit_code == 1 and "6000x6000 px" in res.output, res.output
    _clean_exit_2(runner.invoke(app, ["export", str(data), "--format", "parquet", "-o", str(tmp_path / "pq")]), "6000x6000 px")
    assert not (tmp_path / "pq" / "manifest.json").exists()
    for read in (lambda: MosaicDataset(data, "train"), lambda: load_dataset(data)):
        with pytest.raises(DatasetError, match="6000x6000 px"):
            read()
    # --repair cannot trust digests rewritten with the file: it says so (not "another mosaic made it") and leaves the file
    bomb = img.read_bytes()
    _clean_exit_2(runner.invoke(app, ["verify", str(data), "--repair"]), "rewritten", "--overwrite")
    assert img.read_bytes() == bomb


def test_a_parquet_row_of_another_size_resealed_with_its_shard_digest_is_refused(tmp_path, drun):
    import hashlib

    import pyarrow.parquet as pq

    from mosaic.errors import DatasetError
    from mosaic.hf import write_card
    from mosaic.hf_load import load_dataset
    from mosaic.spec import parse_spec
    from mosaic.torch_data import MosaicDataset

    res = runner.invoke(app, ["export", str(drun[1]), "--format", "parquet", "-o", str(tmp_path / "pq")])
    assert res.exit_code == 0, res.output
    root = tmp_path / "pq"
    man = json.loads((root / "manifest.json").read_text())
    shard = man["shards"]["train"][0]
    p = root / "data" / shard["name"]
    f = pq.ParquetFile(p)
    table = f.read()
    rows = table.to_pylist()
    rows[1]["image"]["bytes"] = _bomb_png()
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), p)
    shard.update(bytes=p.stat().st_size, sha256=hashlib.sha256(p.read_bytes()).hexdigest())
    (root / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True))
    write_card(root, parse_spec(man["spec"]), man, "parquet")  # the card names the shards' digests too
    res = runner.invoke(app, ["verify", str(root)])
    assert res.exit_code == 1 and "6000x6000 px" in res.output and f"data/{shard['name']}" in res.output, res.output
    for read in (lambda: MosaicDataset(root, "train"), lambda: load_dataset(root)):
        with pytest.raises(DatasetError, match="6000x6000 px"):
            read()
