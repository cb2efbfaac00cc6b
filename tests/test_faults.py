"""Fault injection (issue 13): truncate, delete, corrupt, lock and kill, on datasets and run folders.
Each fault must be detected and named by path, and repaired or recovered from where the issue says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import DatasetError, TrainingError
from mosaic.lab.config import RunConfig
from mosaic.lab.loop import Task
from mosaic.lab.run import Family, run
from tests.conftest import hold_lock

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]

SPEC = {
    "name": "faults", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "blue"]}},
    "objects": [{"name": "obj", "shape": "circle", "color": {"concept": "color"}, "size": 0.5}],
    "splits": {"train": 8, "val": 2, "test": 2},
}



@pytest.fixture(autouse=True)
def _time_limit():
    """A case that is not refused may run on (e.g. training for 10**30 steps): fail it after 300 s."""
    import signal as _signal

    def boom(*_):
        raise TimeoutError("ran past 300 s: the input was not refused and the command ran on")

    old = _signal.signal(_signal.SIGALRM, boom)
    _signal.alarm(300)
    yield
    _signal.alarm(0)
    _signal.signal(_signal.SIGALRM, old)

# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

class _Task(Task):
    def __init__(self, root):
        from mosaic.torch_data import MosaicDataset

        self.model = torch.nn.Linear(3 * 16 * 16, 1)
        self.train_data = {"x": MosaicDataset(root, "train").images}

    def loss(self, model, batch, generator):
        return model(batch["x"].float().flatten(1) / 255).pow(2).mean()


class _Family(Family):
    def build_task(self, cfg, root, run_folder):
        return _Task(root)

    def results(self, cfg, task, ctx):
        return {"table": {"test": {"joint": 1.0, "n": 2}}}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    root = tmp_path_factory.mktemp("faults") / "data"
    generate(parse_spec(SPEC), root)
    return root


def _cfg(out, dataset, steps=2):
    return RunConfig.model_validate({
        "name": "faults", "out": str(out), "dataset": {"path": str(dataset)},
        "training": {"steps": steps, "batch_size": 4, "device": "cpu", "threads": 1, "log_every": 1, "checkpoint_every": 1,
                     "keep_checkpoints": 3, "ema": {"enabled": False}}})


def _interrupted(run_dir: Path):
    """Make a finished run look interrupted after its last checkpoint."""
    for name in ("DONE", "metrics.json"):
        (run_dir / name).unlink()


# ------------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------------

def test_a_run_folder_is_locked_while_a_process_trains_in_it(tmp_path, dataset):
    out = tmp_path / "run"
    holder = hold_lock(out)
    try:
        with pytest.raises(TrainingError, match=rf"pid {holder.pid}.*run folder"):
            run(_cfg(out, dataset), _Family(), say=lambda s: None)
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up (kill -9): its lock is stale and taken over
    m = run(_cfg(out, dataset), _Family(), say=lambda s: None)
    assert m["train"]["steps"] == 2 and (out / "DONE").is_file()


def test_a_stale_lock_file_of_a_dead_process_is_taken_over(tmp_path, dataset):
    from mosaic.locks import lock_path

    out = tmp_path / "run"
    lock_path(out).write_text(json.dumps({"pid": 999999, "host": "gone", "since": 0}))
    m = run(_cfg(out, dataset), _Family(), say=lambda s: None)
    assert m["train"]["steps"] == 2


@pytest.mark.parametrize("damage", ["truncate_weights", "corrupt_state", "delete_optimizer"])
def test_a_damaged_latest_checkpoint_is_named_and_the_previous_one_used(tmp_path, dataset, damage):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    latest = out / "checkpoints" / "checkpoint-0000002"
    if damage == "truncate_weights":
        f = latest / "model.safetensors"
        f.write_bytes(f.read_bytes()[:40])
    elif damage == "corrupt_state":
        (latest / "trainer_state.json").write_text('{"step": 2, "best"')
    else:
        (latest / "state.safetensors").unlink()
    said = []
    m = run(_cfg(out, dataset), _Family(), say=said.append)
    assert any("checkpoint-0000002 is damaged" in s for s in said), said
    assert any("resum" in s and "checkpoint-0000001" in s for s in said), said
    assert m["train"]["resumed_at"] == 1 and (out / "DONE").is_file()
    assert (out / "checkpoints" / "checkpoint-0000002.damaged").is_dir()


def test_a_damaged_checkpoint_that_cannot_be_renamed_is_said_and_skipped(tmp_path, dataset, monkeypatch):
    """A damaged checkpoint whose rename to .damaged fails (a read-only folder, say) is not passed
    over in silence: the run says it stays in place, resumes from the previous one, and leaves it."""
    import os as _os

    import mosaic.lab.loop as loop

    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    latest = out / "checkpoints" / "checkpoint-0000002"
    (latest / "state.safetensors").unlink()
    real = _os.replace

    def refuse(src, dst, *a, **k):
        if str(dst).endswith(".damaged"):
            raise PermissionError(13, "Permission denied")
        return real(src, dst, *a, **k)

    monkeypatch.setattr(loop.os, "replace", refuse)
    said = []
    m = run(_cfg(out, dataset), _Family(), say=said.append)
    assert any("could not rename" in s and "checkpoint-0000002" in s and "Permission denied" in s for s in said), said
    assert m["train"]["resumed_at"] == 1 and (out / "DONE").is_file()


def test_every_checkpoint_damaged_is_an_error_naming_each(tmp_path, dataset):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    for ck in (out / "checkpoints").iterdir():
        (ck / "trainer_state.json").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(TrainingError) as e:
        run(_cfg(out, dataset), _Family(), say=lambda s: None)
    msg = str(e.value)
    assert "checkpoint-0000001" in msg and "checkpoint-0000002" in msg and "delete the run folder" in msg


@pytest.mark.parametrize("name", ["config.yaml", "dataset.json"])
def test_a_damaged_run_file_is_named_with_the_fix(tmp_path, dataset, name):
    out = tmp_path / "run"
    run(_cfg(out, dataset), _Family(), say=lambda s: None)
    _interrupted(out)
    (out / name).write_bytes(b"\x00\x01{{{ not: [yaml")
    with pytest.raises(TrainingError, match=rf"{name} is damaged.*(restore|delete)"):
        run(_cfg(out, dataset), _Family(), say=lambda s: None)


# ------------------------------------------------------------------------------------------------
# mosaic sample never silently replaces earlier samples
# ------------------------------------------------------------------------------------------------

def test_sample_folders_carry_every_setting_or_refuse(tmp_path):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    spec = {**SPEC, "splits": {"train": 8, "val": 2, "test": 3}}
    ds = tmp_path / "data"
    generate(parse_spec(spec), ds)
    cfg = {"name": "s", "out": str(tmp_path / "run"), "dataset": {"path": str(ds)},
           "model": {"backbone": "unet", "cond_dim": 16, "unet": {"block_out_channels": [8, 16], "cross_attention": [False, True],
                                                                  "heads": 2, "norm_num_groups": 4}},
           "training": {"steps": 1, "batch_size": 4, "device": "cpu", "threads": 1, "val_every": 0, "ema": {"enabled": False}},
           "sampling": {"steps": 1, "n_per_combination": 1, "batch_size": 8}, "evaluation": {"enabled": False, "select": "loss"}}
    import yaml

    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(cfg))
    assert runner.invoke(app, ["train", "diffusion", str(cp)]).exit_code == 0
    base = ["sample", str(tmp_path / "run"), "--checkpoint", "final", "--no-score", "--steps", "1"]
    for extra in (["-k", "1"], ["-k", "2"], ["-k", "1", "--guidance", "3"], ["-k", "1", "--sampler", "dpm"]):
        r = runner.invoke(app, base + extra)
        assert r.exit_code == 0, r.output
    folders = sorted(p.name for p in (tmp_path / "run" / "samples").iterdir())
    assert len(folders) == 4 + 1, folders  # the run's own samples + four distinct ones
    assert "test_final_g2_ddim1_k1_s0" in folders and "test_final_g2_ddim1_k2_s0" in folders
    # an explicit --out that holds samples of other settings is refused, and kept
    out = tmp_path / "mine"
    assert runner.invoke(app, base + ["-k", "1", "--out", str(out)]).exit_code == 0
    before = (out / "metadata.jsonl").read_bytes()
    r = runner.invoke(app, base + ["-k", "2", "--out", str(out)])
    assert r.exit_code == 2 and "other settings" in r.output and "n_per_combination 1 -> 2" in r.output
    assert (out / "metadata.jsonl").read_bytes() == before
    # the very same settings again: allowed (same images)
    assert runner.invoke(app, base + ["-k", "1", "--out", str(out)]).exit_code == 0


# ------------------------------------------------------------------------------------------------
# datasets: verify, quick check and byte-identical repair, locks, kill, unwritable --out
# ------------------------------------------------------------------------------------------------

DS_SPEC = {
    "name": "faultds", "image": {"size": 16},
    "concepts": {"color": {"values": ["red", "green", "blue"]}, "shape": {"values": ["circle", "square"]}},
    "objects": [{"name": "o", "shape": {"concept": "shape"}, "color": {"concept": "color"}, "size": 0.5}],
    "splits": {"train": 10, "val": 3, "test": 3},
}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and ".mosaic" not in p.parts}


@pytest.fixture
def ds(tmp_path):
    import yaml

    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(DS_SPEC))
    out = tmp_path / "ds"
    r = runner.invoke(app, ["generate", str(sp), "--out", str(out)])
    assert r.exit_code == 0, r.output
    return sp, out


def _damage_all(out: Path):
    f = out / "train" / "images" / "000001.png"
    f.write_bytes(f.read_bytes()[:-30])                                    # truncated
    (out / "train" / "images" / "000002.png").unlink()                     # missing
    (out / "test" / "images" / "000000.png").write_bytes(b"GIF89a not a png at all, no")  # undecodable
    lines = (out / "train" / "metadata.jsonl").read_text().splitlines()
    rec = json.loads(lines[3])
    rec["caption"] = "a forged caption"
    lines[3] = json.dumps(rec, sort_keys=True)
    (out / "train" / "metadata.jsonl").write_text("\n".join(lines) + "\n")  # a metadata line that does not match


def test_the_manifest_records_a_digest_per_file(ds):
    _, out = ds
    man = json.loads((out / "manifest.json").read_text())
    sums = (out / man["checksums"]["file"]).read_text().splitlines()
    assert man["checksums"]["files"] == len(sums) == 10 + 3 + 3 + 3  # every image and each split's metadata.jsonl
    import hashlib

    digest, _, rel = sums[1].partition("  ")
    assert hashlib.sha256((out / rel).read_bytes()).hexdigest() == digest


def test_verify_reports_each_fault_and_generate_repairs_them_byte_identically(ds):
    sp, out = ds
    pristine = _snapshot(out)
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 0 and "OK" in r.output
    _damage_all(out)
    a, b = out / "val" / "images" / "000001.png", out / "val" / "images" / "000002.png"  # swapped: whole PNGs, same
    a_bytes, b_bytes = a.read_bytes(), b.read_bytes()                                     # bytes in all: only digests see it
    assert a_bytes != b_bytes
    a.write_bytes(b_bytes)
    b.write_bytes(a_bytes)
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 1, r.output
    for needle in ("train/images/000001.png: truncated", "train/images/000002.png: missing", "test/images/000000.png: undecodable",
                   "train/metadata.jsonl:4: metadata", "val/images/000001.png: altered"):
        assert needle in r.output, (needle, r.output)
    # a rerun of generate: the quick check finds and regenerates all but the swap
    r = runner.invoke(app, ["generate", str(sp), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "repaired" in r.output
    now = _snapshot(out)
    assert [k for k in pristine if now.get(k) != pristine[k]] == ["val/images/000001.png", "val/images/000002.png"]
    # --verify: the full digest check finds the rest
    r = runner.invoke(app, ["generate", str(sp), "--out", str(out), "--verify"])
    assert r.exit_code == 0, r.output
    assert _snapshot(out) == pristine


def test_verify_repair_flag(ds):
    _, out = ds
    pristine = _snapshot(out)
    _damage_all(out)
    r = runner.invoke(app, ["verify", str(out), "--repair"])
    assert r.exit_code == 0 and "repaired" in r.output, r.output
    assert _snapshot(out) == pristine


@pytest.mark.parametrize("content", [b"{\"format\": \"mosaic-dat", b"\xff\xfe\x00garbage", b"[1, 2]"], ids=["truncated", "binary", "not-a-mapping"])
def test_a_damaged_manifest_is_named_with_what_to_do(ds, content):
    sp, out = ds
    (out / "manifest.json").write_bytes(content)
    for args in (["verify", str(out)], ["generate", str(sp), "--out", str(out)], ["validate", str(out)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, (args, r.output, r.exception)
        assert "manifest.json" in r.output and ("--overwrite" in r.output or "restore" in r.output), r.output
        assert "Traceback" not in r.output


def test_parquet_shards_are_verified_and_repaired(tmp_path):
    from mosaic.parquet import generate_parquet
    from mosaic.spec import parse_spec

    out = tmp_path / "pq"
    generate_parquet(parse_spec(DS_SPEC), out)
    pristine = _snapshot(out)
    shard = next((out / "data").glob("train-*.parquet"))
    shard.write_bytes(shard.read_bytes()[:100])
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 1 and f"data/{shard.name}" in r.output, r.output
    generate_parquet(parse_spec(DS_SPEC), out)  # a rerun on a finished dataset: quick check, then the shard is rewritten
    assert _snapshot(out) == pristine
    (out / "data" / shard.name).unlink()
    r = runner.invoke(app, ["verify", str(out), "--repair"])
    assert r.exit_code == 0 and "repaired" in r.output, r.output
    assert _snapshot(out) == pristine


def test_overwrite_never_deletes_a_folder_another_process_writes(ds):
    sp, out = ds
    holder = hold_lock(out)
    try:
        r = runner.invoke(app, ["generate", str(sp), "--out", str(out), "--overwrite"])
        assert r.exit_code == 2 and f"pid {holder.pid}" in r.output, r.output
        assert (out / "manifest.json").is_file()
    finally:
        holder.kill()
        holder.wait()
    # the holder died (kill -9 leaves its lock file): the stale lock is taken over
    r = runner.invoke(app, ["generate", str(sp), "--out", str(out), "--overwrite"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("where", ["file-parent", "proc"])
def test_an_unwritable_out_is_a_clean_error(tmp_path, where):
    import yaml

    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump(DS_SPEC))
    if where == "file-parent":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "ds"
    else:
        out = Path("/proc/mosaic-cannot-write/ds")
    r = runner.invoke(app, ["generate", str(sp), "--out", str(out)])
    assert r.exit_code == 2, (r.output, r.exception)
    assert "Traceback" not in r.output and str(out.parent) in r.output


def _children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_killing_generate_leaves_no_worker_behind(tmp_path):
    import yaml

    sp = tmp_path / "spec.yaml"
    sp.write_text(yaml.safe_dump({**DS_SPEC, "image": {"size": 64}, "splits": {"train": 20000, "val": 3, "test": 3}}))
    p = subprocess.Popen([sys.executable, "-m", "mosaic.cli", "generate", str(sp), "--out", str(tmp_path / "ds"), "--workers", "2"],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    kids: set[int] = set()
    t0 = time.time()
    while time.time() - t0 < 120 and not any((tmp_path / "ds" / ".mosaic" / "parts").glob("*.jsonl")):
        kids |= _children(p.pid)
        time.sleep(0.2)
    kids |= _children(p.pid)
    assert len(kids) >= 2, "workers never started"
    p.send_signal(signal.SIGKILL)
    p.wait()
    t0 = time.time()
    while time.time() - t0 < 15 and any(_alive(k) for k in kids):
        time.sleep(0.2)
    left = [k for k in kids if _alive(k)]
    for k in left:  # do not leave them to the next test
        os.kill(k, signal.SIGKILL)
    assert not left, f"worker processes {left} outlived the killed main process"


def test_deleted_checksums_are_reported_and_repair_refuses_to_guess(ds):
    _, out = ds
    (out / "checksums.sha256").unlink()
    (out / "train" / "images" / "000003.png").unlink()
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 1 and "checksums.sha256: missing" in r.output and "train/images/000003.png: missing" in r.output
    r = runner.invoke(app, ["verify", str(out), "--repair"])
    assert r.exit_code == 2 and "checksums.sha256" in r.output and "--overwrite" in r.output


def test_training_on_a_dataset_with_a_damaged_manifest_is_a_clean_error(ds, tmp_path):
    import yaml

    _, out = ds
    (out / "manifest.json").write_text('{"status": "compl')
    cfg = {"name": "m", "out": str(tmp_path / "run"), "dataset": {"path": str(out)},
           "training": {"steps": 1, "batch_size": 2, "device": "cpu"}, "evaluation": {"enabled": False, "select": "loss"}}
    cp = tmp_path / "cfg.yaml"
    cp.write_text(yaml.safe_dump(cfg))
    r = runner.invoke(app, ["train", "diffusion", str(cp)])
    assert r.exit_code == 2 and "manifest.json is damaged" in r.output, (r.output, r.exception)
    assert not (tmp_path / "run").exists()


def test_a_second_generation_of_the_same_spec_waits_for_the_first(ds):
    import threading

    sp, out = ds
    holder = hold_lock(out)
    threading.Timer(2.0, holder.kill).start()  # the first "generation" ends (here: dies) after 2 s
    t0 = time.time()
    try:
        r = runner.invoke(app, ["generate", str(sp), "--out", str(out)])
    finally:
        holder.wait()
    assert r.exit_code == 0, r.output
    assert time.time() - t0 >= 1.5  # it waited instead of failing or writing alongside


# ------------------------------------------------------------------------------------------------
# file <-> folder swaps, an edited manifest spec, hints that say what works (issue 13, hostile run 2)
# ------------------------------------------------------------------------------------------------

def _no_temp_files(out: Path) -> list[str]:
    return [str(p.relative_to(out)) for p in out.rglob("*") if ".tmp" in p.name]


def _swap(out: Path, rel: str, to: str) -> None:
    import shutil

    p = out / rel
    shutil.rmtree(p) if p.is_dir() else p.unlink()
    if to == "folder":
        p.mkdir()
    else:
        p.write_bytes(b"a file where a folder was")


@pytest.mark.parametrize("rel, to, shown", [
    ("train/images/000001.png", "folder", "train/images/000001.png: missing: a folder stands where this file belongs"),
    ("train/metadata.jsonl", "folder", "train/metadata.jsonl: missing"),
    ("train/images", "file", "train/images/000000.png: missing"),
    ("val/images", "folder", "val/images/000000.png: missing"),
], ids=["png->folder", "metadata->folder", "images-folder->file", "images-folder-emptied"])
@pytest.mark.parametrize("how", ["generate", "verify --repair"])
def test_a_file_swapped_with_a_folder_is_reported_and_repaired_byte_identically(ds, rel, to, shown, how):
    sp, out = ds
    pristine = _snapshot(out)
    _swap(out, rel, to)
    r = runner.invoke(app, ["verify", str(out)])
    assert r.exit_code == 1 and shown in " ".join(r.output.split()), r.output
    args = ["generate", str(sp), "--out", str(out)] if how == "generate" else ["verify", str(out), "--repair"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "repaired" in r.output, (r.output, r.exception)
    assert _snapshot(out) == pristine
    assert _no_temp_files(out) == []


def test_a_folder_with_content_where_a_file_belongs_is_never_deleted(ds):
    sp, out = ds
    p = out / "train" / "images" / "000001.png"
    p.unlink()
    (p / "sub").mkdir(parents=True)
    (p / "sub" / "keep.txt").write_text("user data")
    for args in (["verify", str(out), "--repair"], ["generate", str(sp), "--out", str(out)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
        assert "train/images/000001.png" in r.output and "move" in r.output, r.output
    assert (p / "sub" / "keep.txt").read_text() == "user data"
    assert _no_temp_files(out) == []


def test_a_fifo_where_a_sample_belongs_is_reported_without_blocking(ds):
    _, out = ds
    p = out / "train" / "images" / "000002.png"
    p.unlink()
    os.mkfifo(p)
    r = runner.invoke(app, ["verify", str(out)])  # opening a FIFO would block forever: the 300 s alarm fails the test
    assert r.exit_code == 1 and "train/images/000002.png: undecodable" in r.output, r.output
    r = runner.invoke(app, ["verify", str(out), "--repair"])
    assert r.exit_code == 0, r.output
    assert p.is_file()


def test_a_folder_where_the_manifest_belongs_is_named_and_overwrite_replaces_it(ds):
    sp, out = ds
    (out / "manifest.json").unlink()
    (out / "manifest.json").mkdir()
    for args in (["verify", str(out)], ["generate", str(sp), "--out", str(out)], ["validate", str(out)]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "manifest.json is damaged" in r.output and "Traceback" not in r.output, (args, r.output)
    r = runner.invoke(app, ["generate", str(sp), "--out", str(out), "--overwrite"])
    assert r.exit_code == 0, r.output
    assert (out / "manifest.json").is_file()


def test_atomic_write_leaves_no_temporary_file_when_it_fails(tmp_path):
    from mosaic.io import FolderInTheWayError, atomic_write

    target = tmp_path / "x.png"
    target.mkdir()
    with pytest.raises(FolderInTheWayError):  # a named error since attack 13 (case 30), no longer IsADirectoryError
        atomic_write(target, b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.png"]


@pytest.mark.parametrize("edit", ["spec", "fingerprint"])
def test_an_edited_manifest_spec_is_damage_and_repair_says_what_to_do(ds, edit):
    sp, out = ds
    p = out / "manifest.json"
    man = json.loads(p.read_text())
    if edit == "spec":
        man["spec"]["objects"][0]["size"] = 0.3  # another size: no file of the dataset matches this spec
    else:
        man["fingerprint"] = "0123456789abcdef"
    p.write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")
    for extra in ([], ["--quick"]):
        r = runner.invoke(app, ["verify", str(out), *extra])
        text = " ".join(r.output.split())
        assert r.exit_code == 1 and "manifest.json: manifest" in text and "fingerprint" in text, r.output
        fix = text[text.index("fix:"):]
        assert "--repair" not in fix.replace("--repair cannot", "") and "--overwrite" in fix and "restore" in fix, fix
    r = runner.invoke(app, ["verify", str(out), "--repair"])
    assert r.exit_code == 2 and "manifest" in r.output and "Traceback" not in r.output, r.output


def test_verify_does_not_suggest_repair_for_damaged_checksums(ds):
    _, out = ds
    (out / "checksums.sha256").write_text("0" * 64 + "  train/metadata.jsonl\n")
    r = runner.invoke(app, ["verify", str(out)])
    text = " ".join(r.output.split())
    assert r.exit_code == 1 and "checksums.sha256: altered" in text, r.output
    fix = text[text.index("fix:"):]
    assert f"verify {out} --repair" not in fix and "rerun the same `mosaic generate`" not in fix, fix
    assert "--overwrite" in fix and "restore" in fix, fix


def test_the_other_storage_form_hint_converts_into_the_requested_form(ds, tmp_path):
    sp, out = ds
    r = runner.invoke(app, ["generate", str(sp), "--out", str(out), "--format", "parquet"])
    text = " ".join(r.output.split())
    assert r.exit_code == 2 and f"mosaic export {out} --format parquet" in text, r.output
