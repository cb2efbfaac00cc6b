"""Attack round 31: the measurement of issue 23's "done when", new cases spread over every class of the issue.
Identity on read (a run's dataset moved, its record pointed at a byte-identical copy, odd split and path
arguments to the readers); writes through links (a report page linked out, a dataset's ``.mosaic`` folder
linked out under ``verify --repair`` and ``generate --overwrite``, a trial record linked out on a sweep
rerun); code from files (Python YAML tags in the sweep folder's config copy, ``sweep.yaml``, a run's config
under ``sample`` and a trial run's config under ``report`` and a sweep rerun); claims (honest diffusion runs
of options round 30 did not try: validation and checkpoints past the last step, bf16 on the CPU, a cosine
schedule with warmup, caption and combination conditioning, no grad clip, EMA after a step, a streamed and
an on-demand dataset, a run analyzed then sampled, a moved run; single-file edits of a run's ``final_loss``,
``steps``, ``samples.images``, ``train_time_s``, ``time_s`` and a trial's ``time_s``/``error``); bounds
before decode (strip images, a GIF frame larger than its screen, a BMP of negative height, PPM/TGA/SVG
named as images, a PNG whose stream holds 50 MB past its scanlines); HTML (the report page of hostile
sweep text and claims, the reproduction page, both parsed with html5lib); named errors (file names with
NUL, lone surrogates, a folder, a backslash, full-width letters or 300 bytes; YAML keys that are lists,
ints, nulls or dates; a full disk under report figures, analyze figures and sample); new-user stumbles.

Cases that hold assert the behaviour mosaic promises (docs/integrity.md, docs/faults.md); cases that
fail are written as they should behave and marked ``xfail(strict=True, reason="attack31: ...")``.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import zlib
from functools import partial
from pathlib import Path

import pytest
import yaml

from tests.conftest import clean_exit_2, enospc, ok_cli as _ok, run_cli as _run, sweep_copy, trial_dirs, two_trial_sweep

ROOT = Path(__file__).resolve().parents[1]
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


def _no_traceback(r):
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)


def _text(r) -> str:
    return " ".join(r.output.split())


def _edit_json(p: Path, edit) -> None:
    d = json.loads(p.read_text())
    edit(d)
    p.write_text(json.dumps(d, indent=2))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished two-trial sweep (2 training steps each): ``(sweep file, folder)``."""
    return two_trial_sweep(tmp_path_factory, "a31sweep")


def _run_copy(drun, tmp_path: Path, name: str = "run") -> Path:
    r = tmp_path / name
    shutil.copytree(drun[0], r, symlinks=True)
    return r


_QUICK = ["--split", "test_ood", "-k", "1", "--steps", "2", "--device", "cpu", "--no-score"]


# ------------------------------------------------------------------------------------------------
# 1. identity on every read
# ------------------------------------------------------------------------------------------------

def test_sample_of_a_run_whose_dataset_was_moved_is_named(drun, tmp_path):
    """A person moves the run's dataset folder (``data`` -> ``data2``): ``sample`` and ``analyze`` name the
    missing dataset, exit 2, and write no samples folder."""
    data = tmp_path / "data"
    shutil.copytree(drun[1], data)
    run = _run_copy(drun, tmp_path)
    _edit_json(run / "dataset.json", lambda d: d.update(path=str(data)))
    data.rename(tmp_path / "data2")
    _clean_exit_2(_run(["sample", run, *_QUICK, "--out", tmp_path / "s"]), "manifest.json")
    assert not (tmp_path / "s").exists()
    _clean_exit_2(_run(["analyze", run, "--device", "cpu"]), "manifest.json")


def test_a_run_record_pointed_at_a_byte_identical_copy_of_its_dataset_still_samples(drun, tmp_path):
    """No false alarm: the run's ``dataset.json`` ``path`` changed to a byte-identical copy of its dataset (a
    researcher moving data to scratch): fingerprint and manifest digest agree, sampling works."""
    data = tmp_path / "scratch" / "data"
    shutil.copytree(drun[1], data)
    run = _run_copy(drun, tmp_path)
    _edit_json(run / "dataset.json", lambda d: d.update(path=str(data)))
    _ok(["sample", run, *_QUICK, "--out", tmp_path / "s"])


@pytest.mark.parametrize("split", ["test", "ood", "TRAIN", "train "])
def test_mosaic_dataset_of_a_split_it_lacks_names_its_splits(made, split):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises(DatasetError, match="test_ood"):
        MosaicDataset(str(made[1]), split)


@pytest.mark.parametrize("rel", ["manifest.json", "README.md", "train/metadata.jsonl"])
def test_mosaic_dataset_of_a_file_of_the_dataset_is_named(made, rel):
    from mosaic.errors import DatasetError
    from mosaic.torch_data import MosaicDataset

    with pytest.raises(DatasetError):
        MosaicDataset(str(made[1] / rel), "train")


def test_a_stream_of_a_dataset_card_is_named(made):
    from mosaic.errors import MosaicError
    from mosaic.stream import StreamingDataset

    with pytest.raises((MosaicError, ValueError), match="README.md"):
        StreamingDataset(str(made[1] / "README.md"), "train")


# ------------------------------------------------------------------------------------------------
# 2. no write leaves its folder
# ------------------------------------------------------------------------------------------------

def test_report_replaces_a_link_at_its_page_and_keeps_the_target(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (sw / "report").mkdir()
    os.symlink(victim, sw / "report" / "index.html")
    _ok(["report", sw])
    assert victim.read_text() == "precious"
    assert not (sw / "report" / "index.html").is_symlink()


def _dataset_with_linked_parts(made, tmp_path: Path) -> tuple[Path, Path]:
    from tests.conftest import copy_dataset

    ds = copy_dataset(made, tmp_path)
    victim = tmp_path / "victim"
    shutil.move(str(ds / ".mosaic"), str(victim))
    (victim / "keep.txt").write_text("keep")
    os.symlink(victim, ds / ".mosaic")
    return ds, victim


def _tree(r: Path) -> dict:
    import hashlib

    return {p.relative_to(r).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(r.rglob("*")) if p.is_file()}


def test_a_repair_never_writes_into_a_linked_parts_folder_of_a_complete_dataset(made, tmp_path):
    ds, victim = _dataset_with_linked_parts(made, tmp_path)
    before = _tree(victim)
    with open(ds / "train" / "images" / "000001.png", "ab") as f:
        f.write(b"x")
    _ok(["verify", ds, "--repair"])
    assert _tree(victim) == before
    _ok(["verify", ds])


def test_generate_overwrite_of_a_dataset_whose_parts_folder_is_a_link_keeps_the_target(made, tmp_path):
    ds, victim = _dataset_with_linked_parts(made, tmp_path)
    before = _tree(victim)
    _ok(["generate", made[0], "--out", ds, "--overwrite"])
    assert _tree(victim) == before
    assert not (ds / ".mosaic").is_symlink()
    _ok(["verify", ds])


def test_a_sweep_rerun_never_writes_through_a_trial_record_linked_out(swept, tmp_path):
    """A trial's ``trial.json`` replaced by a link to a person's file: the sweep's rerun names it damaged,
    exit 2, and the person's file keeps its bytes."""
    sw = sweep_copy(swept, tmp_path)
    t = trial_dirs(sw)[0]
    victim = tmp_path / "notes.txt"
    victim.write_text("precious")
    (t / "trial.json").unlink()
    os.symlink(victim, t / "trial.json")
    _clean_exit_2(_run(["sweep", sw / "sweep.yaml", "--out", sw]), "trial.json")
    assert victim.read_text() == "precious"


# ------------------------------------------------------------------------------------------------
# 3. no code from files: Python YAML tags in every YAML file of a sweep or run folder
# ------------------------------------------------------------------------------------------------

def _tag(flag: Path, kind: str = "apply") -> str:
    if kind == "new":
        return f'\nx: !!python/object/new:subprocess.Popen [["touch", "{flag}"]]\n'
    if kind == "name":
        return "\nx: !!python/name:os.system\n"
    return f'\nx: !!python/object/apply:os.system ["touch {flag}"]\n'


@pytest.mark.parametrize("where", ["sweep_config.yaml", "sweep.yaml", "trial-run-config"])
def test_a_python_tag_in_a_sweep_folders_yaml_is_never_constructed_by_report(swept, tmp_path, where):
    sw = sweep_copy(swept, tmp_path)
    flag = tmp_path / "PWNED"
    p = trial_dirs(sw)[0] / "run" / "config.yaml" if where == "trial-run-config" else sw / where
    with open(p, "a") as f:
        f.write(_tag(flag, "new" if where == "sweep.yaml" else "apply"))
    r = _run(["report", sw])
    _clean_exit_2(r)
    assert not flag.exists()
    if where == "trial-run-config":
        _clean_exit_2(_run(["sweep", sw / "sweep.yaml", "--out", sw]), "config.yaml")
        assert not flag.exists()


def test_a_python_name_tag_in_a_runs_config_is_named_by_sample(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    with open(run / "config.yaml", "a") as f:
        f.write(_tag(tmp_path / "PWNED", "name"))
    _clean_exit_2(_run(["sample", run, *_QUICK, "--out", tmp_path / "s"]), "config.yaml")
    assert not (tmp_path / "s").exists()


# ------------------------------------------------------------------------------------------------
# 4. claims checked: honest runs of options not tried before (false alarms), single-file edits
# ------------------------------------------------------------------------------------------------

def _honest_options():
    from tests.test_diffusion import TINY_DIT, TINY_UNET

    return {
        "val-every-past-the-end": dict(steps=2, val_every=5),
        "checkpoint-every-past-the-end": dict(steps=2, checkpoint_every=10),
        "bf16-on-cpu": dict(steps=2, mixed_precision="bf16"),
        "cosine-with-warmup": dict(steps=3, lr_schedule="cosine", warmup_steps=2),
        "caption-conditioning": dict(steps=2, model={**TINY_UNET, "conditioning": "caption", "text": {"layers": 1, "heads": 2}}),
        "dit-combination": dict(steps=2, model={**TINY_DIT, "conditioning": "combination"}),
        "no-grad-clip": dict(steps=2, grad_clip=None),
        "ema-after-step-2": dict(steps=3, ema={"decay": 0.9, "update_after_step": 2}),
    }


@pytest.mark.slow
@pytest.mark.parametrize("option", sorted(_honest_options()))
def test_an_honest_run_of_another_option_reruns_as_done(drun, tmp_path, option):
    from mosaic.lab.diffusion import run_diffusion
    from tests.test_diffusion import TINY_UNET, config

    kw = dict(_honest_options()[option])
    model = kw.pop("model", TINY_UNET)
    run = tmp_path / option
    run_diffusion(config(run, drun[1], model, **kw), say=lambda s: None)
    r = _run(["train", "diffusion", run / "config.yaml", "--out", run])
    assert r.exit_code == 0 and "already done" in r.output, r.output


@pytest.mark.slow
@pytest.mark.parametrize("source", ["stream", "on-demand"])
def test_an_honest_run_of_a_streamed_or_on_demand_dataset_reruns_as_done(drun, tmp_path, source):
    from mosaic.lab.config import validate_config
    from mosaic.lab.diffusion import run_diffusion
    from mosaic.lab.diffusion.config import DiffusionConfig
    from tests.test_diffusion import SPEC, config

    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    run = tmp_path / "run"
    c = config(run, drun[1], steps=2).model_dump(mode="json")
    c["dataset"] = {"spec": str(tmp_path / "spec.yaml"), "root": str(tmp_path / "root"), "workers": 1}
    if source == "stream":
        c["dataset"]["stream"] = True
    else:
        c["dataset"]["overrides"] = {"seed": 3}
    run_diffusion(validate_config(DiffusionConfig, c), say=lambda s: None)
    r = _run(["train", "diffusion", run / "config.yaml", "--out", run])
    assert r.exit_code == 0 and "already done" in r.output, r.output


def test_a_run_analyzed_then_sampled_then_moved_reruns_as_done(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    _ok(["analyze", run, "--device", "cpu"])
    _ok(["sample", run, *_QUICK])
    r = _run(["train", "diffusion", run / "config.yaml", "--out", run])
    assert r.exit_code == 0 and "already done" in r.output, r.output
    moved = tmp_path / "deeper" / "moved"
    moved.parent.mkdir()
    run.rename(moved)
    r = _run(["train", "diffusion", moved / "config.yaml", "--out", moved])
    assert r.exit_code == 0 and "already done" in r.output, r.output


def _forge_metrics(swept, tmp_path, field: str, value):
    sw = sweep_copy(swept, tmp_path)
    p = trial_dirs(sw)[0] / "run" / "metrics.json"

    def edit(m):
        d = m
        *path, last = field.split(".")
        for k in path:
            d = d[k]
        d[last] = value

    _edit_json(p, edit)
    return sw


@pytest.mark.parametrize("field,value,needle", [
    ("train.final_loss", 0.0001, "final_loss"),
    ("train.steps", 2000, "step"),
    ("samples.images", 9999, "samples.images"),
    ("train.train_time_s", 0.0001, "train_time_s"),
])
def test_report_refuses_a_run_record_field_edited_alone(swept, tmp_path, field, value, needle):
    sw = _forge_metrics(swept, tmp_path, field, value)
    _clean_exit_2(_run(["report", sw]), "metrics.json", needle)


# fixed (was recorded): attack31: a run's metrics.json time_s edited alone to 99999 s (its trial took seconds) goes into results.csv as metrics.time_s; only a lower bound is checked
def test_report_refuses_a_run_time_longer_than_its_trial(swept, tmp_path):
    sw = _forge_metrics(swept, tmp_path, "time_s", 99999.0)
    _clean_exit_2(_run(["report", sw]), "metrics.json", "time_s")


# fixed (was recorded): attack31: trial.json time_s edited alone (0.001 s, its own started/finished say 5 s) is the trial's time_s in results.csv and on the report page
def test_report_refuses_a_trial_time_its_own_start_and_finish_contradict(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    _edit_json(trial_dirs(sw)[0] / "trial.json", lambda d: d.update(time_s=0.001))
    _clean_exit_2(_run(["report", sw]), "trial.json", "time_s")


def test_report_refuses_a_done_trial_with_an_error(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    _edit_json(trial_dirs(sw)[0] / "trial.json", lambda d: d.update(error="boom"))
    _clean_exit_2(_run(["report", sw]), "trial.json")


# ------------------------------------------------------------------------------------------------
# 5. bounds before decode: odd images to evaluate
# ------------------------------------------------------------------------------------------------

def _png(w: int, h: int) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (w, h), (30, 190, 40)).save(b, "PNG")
    return b.getvalue()


def _gif_frame_larger_than_its_screen() -> bytes:
    hdr = b"GIF89a" + struct.pack("<HHBBB", 16, 16, 0, 0, 0)
    desc = b"," + struct.pack("<HHHHB", 0, 0, 4000, 4000, 0x80) + b"\x00\x00\x00\xff\xff\xff"
    return hdr + desc + b"\x02\x02\x44\x01\x00;"


def _bmp_negative_height() -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (16, 16)).save(b, "BMP")
    bm = bytearray(b.getvalue())
    struct.pack_into("<ii", bm, 18, 40000, -40000)
    return bytes(bm)


def _other(fmt: str) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (16, 16), (30, 190, 40)).save(b, fmt)
    return b.getvalue()


def _png_with_50mb_past_its_scanlines() -> bytes:
    raw = b"".join(b"\x00" + b"\x1e\xbe\x28" * 16 for _ in range(16)) + b"\x00" * 50_000_000

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


_IMAGES = {
    "strip-16384x1": (lambda: _png(16384, 1), "16384 x 1"),
    "strip-1x16384": (lambda: _png(1, 16384), "1 x 16384"),
    "gif-frame-4000-on-a-16-screen": (_gif_frame_larger_than_its_screen, "refused before decoding"),
    "bmp-negative-height": (_bmp_negative_height, "refused before decoding"),
    "ppm": (lambda: _other("PPM"), "not a readable image"),
    "tga": (lambda: _other("TGA"), "not a readable image"),
    "svg": (lambda: b'<svg xmlns="http://www.w3.org/2000/svg" width="100000" height="100000"/>', "not a readable image"),
}


def _eval_folder(tmp_path: Path, data: bytes, name: str = "images/a.img") -> Path:
    f = tmp_path / "ev"
    (f / "images").mkdir(parents=True)
    (f / name).write_bytes(data)
    (f / "metadata.jsonl").write_text(json.dumps({"file_name": name, "concepts": {"color": "green", "count": 1}}) + "\n")
    return f


@pytest.mark.parametrize("kind", sorted(_IMAGES))
def test_an_odd_image_to_evaluate_is_named_before_it_is_decoded(made, tmp_path, kind):
    make, needle = _IMAGES[kind]
    f = _eval_folder(tmp_path, make())
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]), needle)
    assert not (f / "metrics.json").exists()


@pytest.mark.slow
def test_a_png_whose_stream_runs_50_mb_past_its_scanlines_is_scored_without_holding_them(made, tmp_path):
    f = _eval_folder(tmp_path, _png_with_50mb_past_its_scanlines())
    r = _run(["evaluate", f, "--spec", made[0]])
    _no_traceback(r)
    assert r.exit_code in (0, 2), r.output


def test_a_single_page_tiff_to_evaluate_is_read(made, tmp_path):
    f = _eval_folder(tmp_path, _other("TIFF"))
    r = _run(["evaluate", f, "--spec", made[0]])
    assert r.exit_code == 0, r.output


# fixed (was recorded): attack31: evaluate of 1 x 1 images advises `--set image.size=1`, which the spec refuses (image.size >= 8)
def test_evaluate_of_images_too_small_for_any_spec_advises_a_size_the_spec_takes(made, tmp_path):
    f = _eval_folder(tmp_path, _png(1, 1))
    r = _run(["evaluate", f, "--spec", made[0]])
    _clean_exit_2(r, "1 x 1")
    for size in re.findall(r"--set image\.size=(\d+)", _text(r)):
        assert int(size) >= 8, r.output


# ------------------------------------------------------------------------------------------------
# 6. every HTML page escaped (html5lib)
# ------------------------------------------------------------------------------------------------

_HOSTILE = "</p><!--<script>alert(1)</script>"


def _inert(page: Path) -> None:
    html5lib = pytest.importorskip("html5lib")
    text = page.read_text()
    doc = html5lib.parse(text, namespaceHTMLElements=False)
    assert not doc.findall(".//script"), "a script element"
    assert "<!--" not in text and "<script" not in text.lower()


def test_the_report_page_of_hostile_sweep_text_and_claims_is_inert(swept, tmp_path):
    sw = sweep_copy(swept, tmp_path)
    d = yaml.safe_load((sw / "sweep.yaml").read_text())
    d["description"] = _HOSTILE
    d["report"]["claims"] = [{"kind": "increases", "y": "seen.joint", "x": "training.lr", "name": "c" + _HOSTILE, "paper": "p" + _HOSTILE}]
    d["report"]["x_label"] = "lr <script>x</script> $\\frac{1}{0}$"
    (sw / "sweep.yaml").write_text(yaml.safe_dump(d))
    _ok(["report", sw])
    _inert(sw / "report" / "index.html")


def test_the_reproduction_page_of_hostile_text_is_inert(tmp_path):
    from mosaic.reproduce import write_reproduction_report

    out = tmp_path / "repro"
    (out / "sw" / "report").mkdir(parents=True)
    claim = {"name": "n" + _HOSTILE, "claim": "c" + _HOSTILE, "paper": "p" + _HOSTILE, "paper_key": "k" + _HOSTILE,
             "sweep": "s" + _HOSTILE, "verdict": "holds", "why": "w" + _HOSTILE, "effect": 0.1, "interval": [0.05, 0.15], "seeds": 3}
    res = {"paper": "P" + _HOSTILE, "scale": "tiny", "title": "T" + _HOSTILE, "source": "src" + _HOSTILE,
           "statements": {"k" + _HOSTILE: "stmt" + _HOSTILE}, "missing": ["m" + _HOSTILE],
           "sweeps": [{"name": "sw" + _HOSTILE, "report": str(out / "sw" / "report" / "index.html"), "done": 1, "trials": 1,
                       "failed": 0, "seconds": 1.0}],
           "claims": [claim], "seconds": 1.0}
    _inert(write_reproduction_report(res, out))


# ------------------------------------------------------------------------------------------------
# 7. named errors, exit 2, nothing half-written
# ------------------------------------------------------------------------------------------------

_FILE_NAMES = {
    "nul": ("images/a\u0000.png", "not a path"),
    "lone-surrogate": ("images/\udcff.png", "missing"),
    "a-folder": ("images/", "not a regular file"),
    "the-folder-itself": (".", "folder itself"),
    "backslash": ("images\\a.png", "missing"),
    "full-width": ("images/\uff41.png", "missing"),
    "300-bytes": ("images/" + "a" * 300 + ".png", "too long"),
}


@pytest.mark.parametrize("kind", sorted(_FILE_NAMES))
def test_an_odd_file_name_to_evaluate_is_named(made, tmp_path, kind):
    name, needle = _FILE_NAMES[kind]
    f = _eval_folder(tmp_path, _png(16, 16), "images/a.png")
    (f / "metadata.jsonl").write_text(json.dumps({"file_name": name, "concepts": {"color": "green", "count": 1}, "held_out": False}) + "\n")
    _clean_exit_2(_run(["evaluate", f, "--spec", made[0]]), needle)
    assert not (f / "metrics.json").exists()


_SPECS = {
    "list-key": ("name: t\nimage: {size: 16}\nconcepts:\n  ? [a, b]\n  : {values: [red]}\n", "unhashable key"),
    "int-key": ("name: t\nimage: {size: 16}\nconcepts:\n  1: {values: [red, green]}\n", "concepts"),
    "null-key": ("name: t\nimage: {size: 16}\nconcepts:\n  null: {values: [red, green]}\n", "concepts"),
    "date-key": ("name: t\nimage: {size: 16}\n2021-01-01: x\n", "2021"),
    "date-value": ("name: t\nimage: {size: 16}\nconcepts:\n  color: {values: [red, 2021-01-01]}\n", "values[1]"),
    "float-range": ("name: t\nimage: {size: 16}\nconcepts:\n  n: {range: [1, 2.5]}\n", "range[1]"),
    "two-documents": ("name: t\n...\n---\nname: u\n", "another document"),
}


@pytest.mark.parametrize("kind", sorted(_SPECS))
def test_a_spec_of_odd_yaml_keys_or_values_is_named(tmp_path, kind):
    text, needle = _SPECS[kind]
    p = tmp_path / "s.yaml"
    p.write_text(text)
    _clean_exit_2(_run(["validate", p]), needle)


def _temps(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*tmp*")]


def test_a_full_disk_under_the_reports_figures_is_named_and_the_rerun_finishes(swept, tmp_path, monkeypatch):
    import matplotlib.figure

    sw = sweep_copy(swept, tmp_path)
    with monkeypatch.context() as m:
        m.setattr(matplotlib.figure.Figure, "savefig", enospc)
        _clean_exit_2(_run(["report", sw]), "disk is full")
    assert not _temps(sw)
    _ok(["report", sw])


def test_a_full_disk_under_analyze_figures_is_named_and_the_run_still_reruns(drun, tmp_path, monkeypatch):
    import matplotlib.figure

    run = _run_copy(drun, tmp_path)
    with monkeypatch.context() as m:
        m.setattr(matplotlib.figure.Figure, "savefig", enospc)
        _clean_exit_2(_run(["analyze", run, "--device", "cpu"]), "disk is full")
    assert not _temps(run)
    _ok(["analyze", run, "--device", "cpu"])
    r = _run(["train", "diffusion", run / "config.yaml", "--out", run])
    assert r.exit_code == 0 and "already done" in r.output, r.output


def test_a_full_disk_as_sample_moves_its_folder_into_place_is_named_and_the_rerun_finishes(drun, tmp_path, monkeypatch):
    import mosaic.io as mio

    run = _run_copy(drun, tmp_path)
    real = os.replace
    with monkeypatch.context() as m:
        m.setattr(mio.os, "replace", lambda a, b: enospc() if "samples" in str(b) else real(a, b))
        _clean_exit_2(_run(["sample", run, *_QUICK]), "disk is full")
    assert not _temps(run / "samples")
    _ok(["sample", run, *_QUICK])


# ------------------------------------------------------------------------------------------------
# 8. new-user stumbles
# ------------------------------------------------------------------------------------------------

# fixed (was recorded): attack31: mosaic audit of an unscored samples folder (train's own, evaluation off) says it is 'not a run, samples, sweep or reproduction folder' and never says to score it
def test_audit_of_an_unscored_samples_folder_says_to_score_it(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    _ok(["sample", run, *_QUICK, "--out", run / "samples" / "unscored"])
    r = _run(["audit", run / "samples" / "unscored"])
    _clean_exit_2(r)
    text = _text(r)
    assert "not a run, samples" not in text and "score" in text, r.output


def test_audit_of_a_run_without_scored_samples_says_to_sample_it(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    _clean_exit_2(_run(["audit", run]), "mosaic sample")
