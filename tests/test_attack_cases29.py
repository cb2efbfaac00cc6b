"""Attack round 29: the re-derivations of the last two commits under hostile and honest folders. A finished run's
record derived again from its weights, val.jsonl, last checkpoint and manifest copy (mosaic.lab.run_record) under a
rerun of `mosaic train` and `mosaic report`: other model families (MMDiT), a run finished on another device, a
resumed and a pruned run, hostile checkpoint names and checkpoint.json files, hostile safetensors headers, numbers
too large for a float, forged fields whose source is dodged (a planted checkpoint, a best record without its
metric, a val record of another type, a FIFO at val.jsonl, damaged weights); a trial's config compared with the
sweep's expansion (a sweep config named by a relative path and a report run from another folder, hostile trial
and sweep configs); the results pair on a full disk; prediction rows' image_sha256 under `mosaic audit` (images of
every foreign mode and format scored and audited, hostile digests, verdicts forged or rows dropped and
duplicated beside the right images); `mosaic reproduce` run from another or a deleted folder.

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack29: ...")``.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml

from tests.conftest import clean_exit_2, ok_cli as _ok, run_cli as _run, sweep_copy, trial_dirs, two_trial_sweep

ROOT = Path(__file__).resolve().parents[1]
MOSAIC = str(Path(sys.executable).parent / "mosaic")
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)
HUGE = 10 ** 400  # parses as a JSON integer, but no float holds it


def _no_traceback(r):
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def _rows(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def _write_rows(p: Path, rows) -> None:
    p.write_text("".join(json.dumps(x) + "\n" for x in rows))


def _edit_json(p: Path, edit) -> None:
    d = json.loads(p.read_text())
    edit(d)
    p.write_text(json.dumps(d, indent=2))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished two-trial sweep (2 training steps each): ``(sweep file, folder)``."""
    return two_trial_sweep(tmp_path_factory, "a29sweep")


def _run_copy(drun, tmp_path: Path) -> Path:
    r = tmp_path / "run"
    shutil.copytree(drun[0], r, symlinks=True)
    return r


def _rerun_train(r: Path):
    return _run(["train", "diffusion", r / "config.yaml", "--out", r])


def _last_ck(r: Path) -> Path:
    return sorted((r / "checkpoints").iterdir())[-1]


# ------------------------------------------------------------------------------------------------
# 4/7. a finished run's record derived again: honest folders of other kinds (false alarms)
# ------------------------------------------------------------------------------------------------

# fixed (was recorded): attack29: an untouched MMDiT run is refused by a rerun (and by mosaic report): its exported weights hold the positional-embedding buffer, which metrics.json's params (parameters only) never counted
def test_an_untouched_mmdit_run_reruns_as_done(drun, tmp_path):
    from mosaic.lab.diffusion import run_diffusion
    from tests.test_diffusion import config
    from tests.test_latent import TINY_MMDIT

    run = tmp_path / "mmdit"
    run_diffusion(config(run, drun[1], TINY_MMDIT, steps=2), say=lambda s: None)
    r = _rerun_train(run)
    assert r.exit_code == 0 and "already done" in r.output, r.output


# fixed (was recorded): attack29: a run trained on one device (device: auto) and finished on another after 'delete DONE and rerun' (the fix mosaic itself names) is refused by the next rerun: train.device is compared with a checkpoint written before the move
def test_a_run_finished_on_another_device_reruns_as_done(drun, tmp_path):
    from mosaic.lab.diffusion import run_diffusion
    from tests.test_diffusion import config

    run = tmp_path / "auto"
    run_diffusion(config(run, drun[1], steps=2, checkpoint_every=1, device="auto"), say=lambda s: None)
    # the GPU session: its last checkpoint records the GPU (written as save_checkpoint writes str(accelerator.device));
    # then the run's sampling was interrupted there, and it was finished on this CPU machine as mosaic advises
    _edit_json(_last_ck(run) / "checkpoint.json", lambda d: d.__setitem__("device", "cuda:0"))
    (run / "DONE").unlink()
    _ok(["train", "diffusion", run / "config.yaml", "--out", run])
    r = _rerun_train(run)
    assert r.exit_code == 0 and "already done" in r.output, r.output


def test_a_run_resumed_from_an_earlier_checkpoint_reruns_as_done(drun, tmp_path):
    r = _run_copy(drun, tmp_path)
    shutil.rmtree(r / "checkpoints" / "checkpoint-0000002")
    (r / "DONE").unlink()
    _ok(["train", "diffusion", r / "config.yaml", "--out", r])
    res = _ok(["train", "diffusion", r / "config.yaml", "--out", r])
    assert "already done" in res.output


def test_a_run_whose_checkpoints_were_pruned_to_one_has_its_own_record(drun, tmp_path):
    from mosaic.lab.diffusion import run_diffusion
    from mosaic.lab.run_record import record_problem
    from tests.test_diffusion import config

    run = tmp_path / "pruned"
    run_diffusion(config(run, drun[1], steps=3, checkpoint_every=1, keep_checkpoints=1, val_every=1), say=lambda s: None)
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["checkpoint-0000003"]
    m = json.loads((run / "metrics.json").read_text())
    assert record_problem(run, m, yaml.safe_load((run / "config.yaml").read_text())) is None
    assert "already done" in _ok(["train", "diffusion", run / "config.yaml", "--out", run]).output


# ------------------------------------------------------------------------------------------------
# 7. hostile values in the record's sources: named, never a traceback
# ------------------------------------------------------------------------------------------------

# fixed (was recorded): attack29: a folder checkpoints/checkpoint-² (str.isdigit() is true, int() fails) is a ValueError traceback in RunFolder.checkpoint_list under a rerun of mosaic train
def test_a_checkpoint_folder_named_with_a_superscript_digit_is_no_traceback(drun, tmp_path):
    r = _run_copy(drun, tmp_path)
    shutil.copytree(r / "checkpoints" / "checkpoint-0000002", r / "checkpoints" / "checkpoint-\u00b2")
    res = _rerun_train(r)
    _no_traceback(res)
    assert res.exit_code in (0, 2), res.output


_HUGE_EDITS = {
    "params": lambda m: m.__setitem__("params", HUGE),
    "train.processes": lambda m: m["train"].__setitem__("processes", HUGE),
    "train.global_batch": lambda m: m["train"].__setitem__("global_batch", HUGE),
    "train.best.value": lambda m: m["train"]["best"].__setitem__("value", HUGE),
    "train.steps": lambda m: m["train"].__setitem__("steps", HUGE),
    "train.final_loss": lambda m: m["train"].__setitem__("final_loss", HUGE),
    "time_s": lambda m: m.__setitem__("time_s", HUGE),
}


# fixed (was recorded): attack29: a 400-digit integer in a finished run's metrics.json is an OverflowError traceback (math.isclose / float in run_record._close, trial_scores._same, seconds_ok)
@pytest.mark.parametrize("field", sorted(_HUGE_EDITS))
def test_a_rerun_names_a_record_number_no_float_holds(drun, tmp_path, field):
    r = _run_copy(drun, tmp_path)
    _edit_json(r / "metrics.json", _HUGE_EDITS[field])
    _clean_exit_2(_rerun_train(r), "metrics.json")


# fixed (was recorded): attack29: a val.jsonl row whose step is a 400-digit integer is an OverflowError traceback under mosaic report (run_record._close)
def test_report_names_a_val_row_number_no_float_holds(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    p = t / "run" / "val.jsonl"
    rows = _rows(p)
    rows[-1]["step"] = HUGE
    _write_rows(p, rows)
    _clean_exit_2(_run(["report", sw]), "val.jsonl")


@pytest.mark.parametrize("how", ["device-a-mapping", "processes-a-list", "not-json", "a-list", "a-fifo"])
def test_a_hostile_last_checkpoint_record_is_named_or_left_unchecked(drun, tmp_path, how):
    r = _run_copy(drun, tmp_path)
    p = _last_ck(r) / "checkpoint.json"
    if how == "device-a-mapping":
        _edit_json(p, lambda d: d.__setitem__("device", {"type": "cpu"}))
    elif how == "processes-a-list":
        _edit_json(p, lambda d: d.__setitem__("processes", [1]))
    elif how == "not-json":
        p.write_bytes(b"\xff not json")
    elif how == "a-list":
        p.write_text("[1]")
    else:
        p.unlink()
        os.mkfifo(p)
    res = _rerun_train(r)  # a FIFO is never waited on
    _no_traceback(res)
    _clean_exit_2(res, "checkpoint")  # a last checkpoint that is there and not whole is named, never believed nor skipped


@pytest.mark.parametrize("header", ["length-2**40", "dims-overflow"])
def test_a_hostile_safetensors_header_in_final_is_no_traceback(drun, tmp_path, header):
    r = _run_copy(drun, tmp_path)
    p = r / "final" / "conditioner.safetensors"
    if header == "length-2**40":
        p.write_bytes(struct.pack("<Q", 2 ** 40) + b"{}")
    else:
        h = json.dumps({"x": {"dtype": "F32", "shape": [2 ** 31, 2 ** 31, 2 ** 31], "data_offsets": [0, 0]}}).encode()
        p.write_bytes(struct.pack("<Q", len(h)) + h)
    res = _rerun_train(r)
    _no_traceback(res)
    assert res.exit_code in (0, 2), res.output


@pytest.mark.parametrize("text", [b"\xff\xfe\n", b"[1, 2]\n", b"[" * 100_000 + b"]" * 100_000 + b"\n",
                                  b'{"step": 2, "step": 3}\n'], ids=["not-utf8", "a-list-row", "deep", "key-twice"])
def test_report_refuses_a_damaged_val_jsonl(swept, tmp_path, text):
    sw = sweep_copy(swept, tmp_path)
    (trial_dirs(sw)[0] / "run" / "val.jsonl").write_bytes(text)
    _clean_exit_2(_run(["report", sw]), "val.jsonl")


# ------------------------------------------------------------------------------------------------
# 4. forged record values whose source is dodged (bypasses)
# ------------------------------------------------------------------------------------------------

def _report_refuses_edit(swept, tmp_path, edit, prepare=None):
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    if prepare is not None:
        prepare(t / "run")
    _edit_json(t / "run" / "metrics.json", edit)
    _clean_exit_2(_run(["report", sw]), "metrics.json")


# fixed (was recorded): attack29: a planted checkpoints/checkpoint-0000009 (two small JSON files, a step past the run's 2) is believed as the run's last checkpoint: forged processes 8 / global_batch 32 reach results.csv, exit 0
def test_report_never_believes_a_planted_checkpoint_record(swept, tmp_path):
    def plant(run: Path):
        ck = run / "checkpoints" / "checkpoint-0000009"
        ck.mkdir()
        (ck / "trainer_state.json").write_text('{"step": 9}')
        (ck / "checkpoint.json").write_text(json.dumps({"processes": 8, "device": "cuda:7"}))

    _report_refuses_edit(swept, tmp_path, lambda m: m["train"].update(processes=8, device="cuda:7", global_batch=32), plant)


# fixed (was recorded): attack29: train.best with its metric set to null carries a forged best value (0.0001) into results.csv although val.jsonl gives the best; exit 0
def test_report_refuses_a_best_record_whose_metric_was_removed(swept, tmp_path):
    _report_refuses_edit(swept, tmp_path, lambda m: m["train"].__setitem__("best", {"metric": None, "step": 2, "value": 0.0001}))


# fixed (was recorded): attack29: train.val replaced by a number (0.0001) is never compared with val.jsonl and goes into results.csv as metrics.train.val; exit 0
def test_report_refuses_a_val_record_of_another_type(swept, tmp_path):
    _report_refuses_edit(swept, tmp_path, lambda m: m["train"].__setitem__("val", 0.0001))


# fixed (was recorded): attack29: train.images_per_s forged to 99999 (it is global_batch x steps / train_time_s) goes into results.csv; exit 0
def test_report_refuses_an_images_per_second_its_own_figures_contradict(swept, tmp_path):
    _report_refuses_edit(swept, tmp_path, lambda m: m["train"].__setitem__("images_per_s", 99999.0))


# fixed (was recorded): attack29: train.resumed_at forged to 999 in a 2-step run goes into results.csv; exit 0
def test_report_refuses_a_resume_step_past_the_runs_end(swept, tmp_path):
    _report_refuses_edit(swept, tmp_path, lambda m: m["train"].__setitem__("resumed_at", 999))


# fixed (was recorded): attack29: a FIFO standing at val.jsonl is read as 'source gone': a forged train.best value passes into results.csv, exit 0 (a foreign file is never named)
def test_report_refuses_a_forged_best_beside_a_fifo_at_val_jsonl(swept, tmp_path):
    def fifo(run: Path):
        (run / "val.jsonl").unlink()
        os.mkfifo(run / "val.jsonl")

    _report_refuses_edit(swept, tmp_path, lambda m: m["train"]["best"].__setitem__("value", 0.0001), fifo)


# fixed (was recorded): attack29: with the headers of final/ and best/ damaged (weights_params returns None), a forged params passes into results.csv; the damaged weights are never named; exit 0
def test_report_refuses_a_forged_params_beside_damaged_weights(swept, tmp_path):
    def damage(run: Path):
        for w in ("final", "best"):
            (run / w / "conditioner.safetensors").write_bytes(struct.pack("<Q", 2 ** 40) + b"{}")

    _report_refuses_edit(swept, tmp_path, lambda m: (m.__setitem__("params", 7), m["train"].__setitem__("params", 7)), damage)


# ------------------------------------------------------------------------------------------------
# 4/7. a trial's config against the sweep's expansion; the results pair
# ------------------------------------------------------------------------------------------------

def _relative_config(sw: Path, places: dict) -> None:
    """The sweep folder's sweep.yaml naming its training config as ``train.yaml`` (relative, as a sweep run from its
    project folder names it), with a ``train.yaml`` in each folder of ``places``: the sweep's own config (value None),
    or another project's of the same name (value: its training.weight_decay)."""
    d = yaml.safe_load((sw / "sweep.yaml").read_text())
    for here, weight_decay in places.items():
        cfg = yaml.safe_load(Path(d["config"]).read_text())
        if weight_decay is not None:
            cfg["training"]["weight_decay"] = weight_decay
        here.mkdir(parents=True, exist_ok=True)
        (here / "train.yaml").write_text(yaml.safe_dump(cfg))
    d["config"] = "train.yaml"
    (sw / "sweep.yaml").write_text(yaml.safe_dump(d, sort_keys=False))


def test_report_of_a_sweep_with_a_relative_config_from_its_own_folder(swept, tmp_path, monkeypatch):
    sw = sweep_copy(swept, tmp_path)
    _relative_config(sw, {tmp_path / "project": None})
    monkeypatch.chdir(tmp_path / "project")
    _ok(["report", sw])


def test_report_of_a_sweep_with_a_relative_config_from_a_folder_without_it(swept, tmp_path, monkeypatch):
    sw = sweep_copy(swept, tmp_path)
    _relative_config(sw, {tmp_path / "project": None})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    _ok(["report", sw])


# fixed (was recorded): attack29: a sweep whose config is named relatively (train.yaml), reported from another folder holding another train.yaml, is refused: 'its config.yaml is not the config the sweep gives this trial' for untouched trials (sweep_base_config reads the name from the cwd)
def test_report_of_a_sweep_with_a_relative_config_from_another_project(swept, tmp_path, monkeypatch):
    sw = sweep_copy(swept, tmp_path)
    # the sweep's own project, and another project whose train.yaml (same relative name) differs
    _relative_config(sw, {tmp_path / "project": None, tmp_path / "other": 0.5})
    monkeypatch.chdir(tmp_path / "other")
    _ok(["report", sw])


def _failing_writer(real, suffix):
    """``mosaic.trials.atomic_writer`` whose file named ``suffix`` meets a full disk when it is flushed."""
    from contextlib import contextmanager

    @contextmanager
    def writer(path):
        with real(path) as f:
            if str(path).endswith(suffix):
                def full(*a, **k):
                    raise OSError(errno.ENOSPC, "No space left on device")
                f.flush = full
            yield f

    return writer


# fixed (was recorded): attack29: a full disk at results.parquet (the second of two atomic writes) leaves the new results.csv beside the old results.parquet (1 row vs 2), while the error says nothing half-written is kept
@pytest.mark.parametrize("which", ["results.csv", "results.parquet"])
def test_a_full_disk_under_the_results_pair_keeps_one_pair(swept, tmp_path, monkeypatch, which):
    import mosaic.trials as trials

    sw = sweep_copy(swept, tmp_path)
    _ok(["report", sw])
    before = {n: (sw / n).read_bytes() for n in ("results.csv", "results.parquet")}
    shutil.rmtree(trial_dirs(sw)[1])  # an honest change: the results are made again with one trial
    monkeypatch.setattr(trials, "atomic_writer", _failing_writer(trials.atomic_writer, which))
    _clean_exit_2(_run(["report", sw]), "space")
    assert {n: (sw / n).read_bytes() for n in before} == before
    assert not [p for p in sw.iterdir() if ".tmp" in p.name]  # no temporary file left


def test_report_never_writes_through_a_link_at_results_parquet(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"someone else's file")
    (sw / "results.parquet").unlink(missing_ok=True)
    (sw / "results.parquet").symlink_to(outside)
    r = _run(["report", sw])
    _no_traceback(r)
    assert outside.read_bytes() == b"someone else's file"


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "!!python/object/apply:os.system ['touch {pwn}']\n", "- 1\n", b"\xff\xfe name: x"],
                         ids=["recursive-alias", "python-tag", "a-list", "not-utf8"])
def test_report_refuses_a_hostile_trial_config_without_running_it(swept, tmp_path, text):
    sw = sweep_copy(swept, tmp_path)
    pwn = tmp_path / "PWNED"
    p = trial_dirs(sw)[0] / "config.yaml"
    p.write_bytes(text) if isinstance(text, bytes) else p.write_text(text.format(pwn=pwn))
    _clean_exit_2(_run(["report", sw]), "config")
    assert not pwn.exists()


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "!!python/object/apply:os.system ['touch {pwn}']\n"], ids=["recursive-alias", "python-tag"])
def test_a_hostile_sweep_config_is_never_run_by_the_report(swept, tmp_path, text):
    sw = sweep_copy(swept, tmp_path)
    pwn = tmp_path / "PWNED"
    d = yaml.safe_load((sw / "sweep.yaml").read_text())
    base = tmp_path / "train.yaml"
    base.write_text(text.format(pwn=pwn))
    d["config"] = str(base)
    (sw / "sweep.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
    r = _run(["report", sw])
    _no_traceback(r)
    assert r.exit_code in (0, 2), r.output
    assert not pwn.exists()


# ------------------------------------------------------------------------------------------------
# 4. mosaic audit: each verdict beside its own image
# ------------------------------------------------------------------------------------------------

def _eval_folder(made, tmp_path: Path, convert=None, ext: str = "png", n: int = 3) -> Path:
    """A plain folder of the first ``n`` test_ood images (each ``convert``ed and saved as ``ext`` when given)."""
    from PIL import Image

    src = made[1] / "test_ood"
    f = tmp_path / "imgs"
    (f / "images").mkdir(parents=True)
    out = []
    for line in (src / "metadata.jsonl").read_text().splitlines()[:n]:
        r = json.loads(line)
        name = r["file_name"]
        if convert is not None:
            name = name.rsplit(".", 1)[0] + "." + ext
            convert(Image.open(src / r["file_name"])).save(f / name)
        else:
            shutil.copy(src / name, f / name)
        out.append({"file_name": name, "concepts": r["concepts"]})
    _write_rows(f / "metadata.jsonl", out)
    return f


def _scored(made, tmp_path: Path, **kw) -> Path:
    f = _eval_folder(made, tmp_path, **kw)
    _ok(["evaluate", f, "--spec", made[0], "--out", f])
    return f


_FORMATS = {"rgba": (lambda im: im.convert("RGBA"), "png"), "grey": (lambda im: im.convert("L"), "png"),
            "palette": (lambda im: im.convert("P"), "png"), "jpeg": (lambda im: im.convert("RGB"), "jpg"),
            "cmyk-jpeg": (lambda im: im.convert("CMYK"), "jpg"), "gif": (lambda im: im.convert("RGB"), "gif")}


@pytest.mark.parametrize("kind", sorted(_FORMATS))
def test_an_honest_folder_of_a_foreign_image_format_is_scored_and_audited(made, tmp_path, kind):
    convert, ext = _FORMATS[kind]
    f = _scored(made, tmp_path, convert=convert, ext=ext)
    _ok(["audit", f, "--n", "10"])
    assert (f / "audit" / "audit.html").is_file()


_DIGESTS = {"a-list": lambda rows: [rows[0]["image_sha256"]], "a-megabyte": lambda rows: "a" * 1_000_000,
            "upper-case": lambda rows: rows[0]["image_sha256"].upper(), "another-rows": lambda rows: rows[1]["image_sha256"],
            "null": lambda rows: None, "a-mapping": lambda rows: {"sha": rows[0]["image_sha256"]}, "400-digits": lambda rows: HUGE}


@pytest.mark.parametrize("value", sorted(_DIGESTS))
def test_an_audit_refuses_a_hostile_image_digest(made, tmp_path, value):
    f = _scored(made, tmp_path)
    rows = _rows(f / "predictions.jsonl")
    rows[0]["image_sha256"] = _DIGESTS[value](rows)
    _write_rows(f / "predictions.jsonl", rows)
    _clean_exit_2(_run(["audit", f, "--n", "10"]), "image_sha256")
    assert not (f / "audit" / "audit.html").exists()


def _forge_verdict(rows):
    r = dict(rows[0], read=dict(rows[0]["read"]))
    r["read"]["count"] = r["intended"]["count"] % 3 + 1  # another count, read "wrong" beside the very image scored
    r.update(correct=False, reasons=["count: forged"])
    return [r] + rows[1:]


# fixed (was recorded): attack29: mosaic audit shows prediction rows it never checks against the evaluation (metrics.json, metadata.jsonl): a verdict edited beside its own image, a row given twice, or rows dropped are audited, exit 0
@pytest.mark.parametrize("how", ["verdict-forged", "row-twice", "rows-dropped"])
def test_an_audit_refuses_rows_that_are_not_the_evaluations(made, tmp_path, how):
    f = _scored(made, tmp_path)
    rows = _rows(f / "predictions.jsonl")
    rows = {"verdict-forged": _forge_verdict, "row-twice": lambda rs: rs + rs[:1], "rows-dropped": lambda rs: rs[:1]}[how](rows)
    _write_rows(f / "predictions.jsonl", rows)
    _clean_exit_2(_run(["audit", f, "--n", "10"]), "predictions.jsonl")


def test_an_audit_of_an_out_folder_without_its_images_is_named(made, tmp_path):
    f = _eval_folder(made, tmp_path)
    _ok(["evaluate", f, "--spec", made[0], "--out", tmp_path / "scores"])
    _clean_exit_2(_run(["audit", tmp_path / "scores"]), "no scored samples")


# ------------------------------------------------------------------------------------------------
# 7. mosaic reproduce from another folder
# ------------------------------------------------------------------------------------------------

def test_reproduce_from_another_folder_refuses_a_bad_scale_and_keeps_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _clean_exit_2(_run(["reproduce", "mosaic", "--scale", "bogus"]), "--scale")
    assert Path.cwd() == tmp_path
    assert list(tmp_path.iterdir()) == []


# fixed (was recorded): attack29: mosaic reproduce run from a folder deleted meanwhile is a FileNotFoundError traceback (Path.cwd() in the new chdir code), exit 1
def test_reproduce_from_a_deleted_folder_is_named(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    p = subprocess.run(["bash", "-c", f"cd '{gone}' && rmdir '{gone}' && exec '{MOSAIC}' reproduce mosaic --scale bogus"],
                       capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
