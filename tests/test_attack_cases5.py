"""Hostile cases of a fifth attack on the data path (issue 23), each closed at its mechanism:

- the autoencoder folder's records (``autoencoder.json``, ``check-<key>.json``, a partial
  checkpoint's ``state.json``) were read with bare ``json.loads`` (tracebacks), its quality check was
  believed for whatever weights stood in ``vae/``, and ``vae/`` was loaded by diffusers whatever it
  held (a pickle ``.bin`` was tried; a damaged config or weights was a traceback);
- ``mosaic report``'s per-trial contact sheet opened whatever a trial's ``samples/*/metadata.jsonl``
  named (an image outside the run was pulled into the report; an EPS went to Ghostscript; a bomb
  was decoded; damaged JSON was a traceback);
- ``mosaic report`` wrote through a symbolic link at ``SWEEP/report`` (another folder's
  ``index.html`` replaced), without a lock, and printed a ``claims.json`` an earlier report (or
  anyone) left there as this report's claims (a damaged one was a traceback);
- a ``checksums.sha256`` whose sha256 the manifest records was believed line by line: a line
  naming ``../../etc/hostname`` passed ``verify`` (and ``sha256sum -c`` would read it);
- a trial's ``metrics.json`` with ``Infinity`` or ``1.5`` as an accuracy was reported as it was (a
  string accuracy was silently left out of the results);
- a stray file name holding a terminal escape sequence (``x\\x1b]0;pwned\\x07y``) was printed raw by
  ``verify`` and every error, so a dataset could retitle, restyle or erase what the terminal shows;
- an interrupted ``generate`` whose part file (``.mosaic/parts/<split>-NNNNNN.jsonl``) had a damaged
  first line made every rerun a RecursionError / UnicodeDecodeError / AttributeError traceback;
- a part file's records were merged into ``metadata.jsonl`` as they stood and then digested: a
  record edited to a held-out combination's labels on a training image passed ``verify``;
- an unfinished dataset's images were digested at finalize as they stood: a held-out image copied
  over a training image before the rerun became part of a dataset ``verify`` called OK;
- latent diffusion's latent cache (``<ae>/latents/<manifest>/<split>.safetensors``) was read when its
  record claimed enough latents: another split's file copied over it (held-out latents in training),
  latents of other autoencoder weights, or a damaged file were used as the split's (or a traceback);
- an ``audit/audit.json`` with no ``items.json`` beside it was summarised unchecked: 1,000 invented
  marks in a trial's run folder showed as 100 % human agreement on ``mosaic report``'s page;
- a checkpoint's ``trainer_state.json`` step was believed (its sha256 updated in ``checkpoint.json``):
  ``checkpoint-0000001`` claiming step 10**12 (or ``true``) "finished" a run with step-1 weights;
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from mosaic.errors import MosaicError, TrainingError
from tests.conftest import clean_exit_2 as _clean_exit_2

runner = CliRunner()


# ------------------------------------------------------------------------------------------------
# cases 04-06: an autoencoder folder is read as claims
# ------------------------------------------------------------------------------------------------

class _Planted:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


@pytest.fixture(scope="module")
def ae_folder(tmp_path_factory):
    from mosaic.lab.autoencoder import AutoencoderSection, checked, train_autoencoder
    from mosaic.spec import parse_spec
    from tests.test_latent import SPEC, tiny_ae

    base = tmp_path_factory.mktemp("ae5")
    spec = parse_spec(SPEC)
    sec = AutoencoderSection(**tiny_ae(base)["autoencoder"])
    folder = base / "ae"
    train_autoencoder(sec, spec, folder, say=lambda s: None, progress=False)
    checked(folder, sec, spec, say=lambda s: None)
    return folder, sec, spec


def _copy(ae_folder, tmp_path) -> Path:
    folder = tmp_path / "ae"
    shutil.copytree(ae_folder[0], folder)
    return folder


@pytest.mark.parametrize("damage", ["not_utf8", "deep", "list"])
def test_a_damaged_autoencoder_record_is_a_named_error(tmp_path, ae_folder, damage):
    from mosaic.lab.autoencoder import train_autoencoder

    folder = _copy(ae_folder, tmp_path)
    rec = folder / "autoencoder.json"
    rec.write_bytes({"not_utf8": b"\xff\xfe{", "deep": b"[" * 100_000, "list": b"[1, 2]"}[damage])
    with pytest.raises(TrainingError, match="autoencoder.json .*is damaged") as e:
        train_autoencoder(ae_folder[1], ae_folder[2], folder, say=lambda s: None, progress=False)
    assert "to train it again" in str(e.value)


def test_a_quality_check_is_believed_only_for_the_weights_it_was_measured_on(tmp_path, ae_folder, monkeypatch):
    import mosaic.lab.autoencoder as ae

    folder, sec, spec = _copy(ae_folder, tmp_path), ae_folder[1], ae_folder[2]
    (check,) = folder.glob("check-*.json")
    rec = json.loads(check.read_text())
    assert rec["vae_sha256"] == json.loads((folder / "autoencoder.json").read_text())["vae_sha256"]
    measured = []
    real = ae.check_autoencoder
    monkeypatch.setattr(ae, "check_autoencoder", lambda *a, **k: measured.append(1) or real(*a, **k))
    assert ae.checked(folder, sec, spec, say=lambda s: None)["passed"] is rec["passed"]
    assert measured == []  # its own weights: the saved check is used
    check.write_text(json.dumps({**rec, "passed": True, "vae_sha256": "0" * 64}))  # a check of other weights
    ae.checked(folder, sec, spec, say=lambda s: None)
    assert measured == [1] and json.loads(check.read_text())["vae_sha256"] == rec["vae_sha256"]
    check.write_bytes(b"[" * 100_000)  # damaged: measured again, never a traceback
    ae.checked(folder, sec, spec, say=lambda s: None)
    assert measured == [1, 1]


def test_a_vae_folder_that_is_not_mosaics_own_is_refused(tmp_path, ae_folder, monkeypatch):
    from mosaic.lab.autoencoder import load_space

    monkeypatch.chdir(tmp_path)
    folder = _copy(ae_folder, tmp_path)
    vae = folder / "vae"
    weights = vae / "diffusion_pytorch_model.safetensors"
    good = weights.read_bytes()
    load_space(folder)
    # weights of another autoencoder (or altered), same size
    weights.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(TrainingError, match="is not the file .*autoencoder.json records"):
        load_space(folder)
    weights.write_bytes(good[:100])
    rec = json.loads((folder / "autoencoder.json").read_text())
    (folder / "autoencoder.json").write_text(json.dumps({k: v for k, v in rec.items() if k != "vae_sha256"}))
    with pytest.raises(TrainingError, match="does not load"):  # truncated: named, not diffusers' OSError
        load_space(folder)
    weights.unlink()
    with (vae / "diffusion_pytorch_model.bin").open("wb") as f:
        pickle.dump(_Planted(), f)
    with pytest.raises(TrainingError, match="pickle file, not loaded"):
        load_space(folder)
    assert not (tmp_path / "PWNED").exists()
    (vae / "diffusion_pytorch_model.bin").unlink()
    weights.write_bytes(good)
    (vae / "config.json").write_text('{"_class_name": "AutoencoderKL", "in_channels": ')
    res = runner.invoke(app, ["autoencoder", "check", str(folder), str(tmp_path / "nospec.yaml")])
    assert res.exit_code == 2 and "Traceback" not in res.output
    with pytest.raises(MosaicError, match="vae/config.json.*is damaged"):
        load_space(folder)


# ------------------------------------------------------------------------------------------------
# case 07: mosaic report's contact sheets show only a samples folder's own images
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["outside", "link_out", "eps", "bomb", "deep_json", "not_utf8"])
def test_report_sheets_read_only_the_samples_folders_own_images(tmp_path, how):
    import yaml
    from PIL import Image

    from tests.test_sweep import fake_trial

    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "mine", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"training.lr": [0.001]}, "seeds": [0]}))
    trial = fake_trial(out, {"training.lr": 0.001, "seed": 0}, "done", 0.5, 0.9)
    s = trial / "run" / "samples" / "x"
    (s / "images").mkdir(parents=True)
    secret = tmp_path / "secret.png"
    Image.new("RGB", (16, 16), (255, 0, 0)).save(secret)
    Image.new("RGB", (16, 16)).save(s / "images" / "a.png")
    rec = {"file_name": "images/a.png", "concepts": {"color": "red"}, "held_out": False}
    meta = s / "metadata.jsonl"
    meta.write_text(json.dumps(rec) + "\n")
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert list((out / "report").glob("*samples.png"))
    shutil.rmtree(out / "report")
    if how == "outside":
        meta.write_text(json.dumps({**rec, "file_name": os.path.relpath(secret, s)}) + "\n")
    elif how == "link_out":
        (s / "images" / "a.png").unlink()
        os.symlink(secret, s / "images" / "a.png")
    elif how == "eps":
        (s / "images" / "a.png").write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n")
    elif how == "bomb":
        Image.new("1", (8000, 8000)).save(s / "images" / "a.png")
    elif how == "deep_json":
        meta.write_text("[" * 100_000 + "\n")
    else:
        meta.write_bytes(b"\xff\n")
    res = runner.invoke(app, ["report", str(out)])
    _clean_exit_2(res, "metadata.jsonl")
    assert not list(out.rglob("*samples.png"))


# ------------------------------------------------------------------------------------------------
# cases 08, 09: mosaic report writes only its own folder, and prints only its own claims
# ------------------------------------------------------------------------------------------------

def _sweep(tmp_path) -> Path:
    import yaml

    from tests.test_sweep import fake_trial

    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "mine", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"training.lr": [0.001]}, "seeds": [0]}))
    fake_trial(out, {"training.lr": 0.001, "seed": 0}, "done", 0.5, 0.9)
    return out


def test_report_never_writes_through_a_link_at_its_folder(tmp_path):
    from mosaic.locks import FolderLock

    out = _sweep(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "index.html").write_text("precious")
    os.symlink(victim, out / "report")
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in victim.iterdir()) == ["index.html"] and (victim / "index.html").read_text() == "precious"
    assert not (out / "report").is_symlink() and (out / "report" / "index.html").is_file()
    import multiprocessing as mp  # another process writing the report: refused, named

    ctx = mp.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()

    def hold():
        with FolderLock(out / "report", MosaicError, "report folder"):
            ready.set()
            done.wait(30)

    p = ctx.Process(target=hold)
    p.start()
    try:
        assert ready.wait(30)
        res = runner.invoke(app, ["report", str(out)])
        _clean_exit_2(res, "report folder")
    finally:
        done.set()
        p.join(30)


@pytest.mark.parametrize("left", ["stale", "deep"])
def test_report_prints_only_the_claims_it_checked(tmp_path, left):
    out = _sweep(tmp_path)
    (out / "report").mkdir()
    stale = {"claims": [{"name": "held-out beats seen", "verdict": "holds", "effect": 0.5, "ci": [0.4, 0.6], "seeds": 3}]}
    (out / "report" / "claims.json").write_text(json.dumps(stale) if left == "stale" else "[" * 100_000)
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0 and "Traceback" not in res.output, res.output
    assert "held-out beats seen" not in res.output and not (out / "report" / "claims.json").exists()


# ------------------------------------------------------------------------------------------------
# case 14: checksums.sha256 lists only the dataset's own files
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line", ["{d}  ../../../../etc/hostname", "{d}  /etc/hostname", "{d}  elsewhere/x.png", "nothex  train/x.png"],
                         ids=["dotdot", "absolute", "not_a_split", "not_a_digest"])
def test_a_checksums_file_naming_files_outside_the_dataset_is_refused(tmp_path, line):
    import hashlib

    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from mosaic.torch_data import MosaicDataset
    from tests.test_diffusion import SPEC

    ds = tmp_path / "ds"
    generate(parse_spec(SPEC), ds)
    c = ds / "checksums.sha256"
    text = c.read_text() + line.format(d="0" * 64) + "\n"
    c.write_text(text)
    man = json.loads((ds / "manifest.json").read_text())
    man["checksums"].update(sha256=hashlib.sha256(text.encode()).hexdigest(), files=man["checksums"]["files"] + 1)
    (ds / "manifest.json").write_text(json.dumps(man, indent=2))  # both edited to agree
    res = runner.invoke(app, ["verify", str(ds)])
    assert res.exit_code == 1 and "checksums.sha256: foreign" in res.output, res.output
    with pytest.raises(MosaicError, match="checksums.sha256"):
        MosaicDataset(ds, "train")


# ------------------------------------------------------------------------------------------------
# case 24: a trial's accuracies are fractions
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [float("inf"), 1.5, -0.1, "0.9", True], ids=["inf", "above_one", "negative", "string", "bool"])
def test_report_refuses_a_metrics_table_that_is_not_fractions(tmp_path, value):
    import yaml

    from mosaic.sweep import SweepError
    from mosaic.trials import collect
    from tests.test_sweep import fake_trial

    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "mine", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"training.lr": [0.001]}, "seeds": [0]}))
    t = fake_trial(out, {"training.lr": 0.001, "seed": 0}, "done", 0.5, 0.9)
    m = json.loads((t / "run" / "metrics.json").read_text())
    m["table"]["held_out"]["nan_is_fine"] = float("nan")
    (t / "run" / "metrics.json").write_text(json.dumps(m))
    assert len(collect(out)) == 1
    m["table"]["held_out"]["joint"] = value
    (t / "run" / "metrics.json").write_text(json.dumps(m))
    with pytest.raises(SweepError, match="table.held_out.joint"):
        collect(out)
    res = runner.invoke(app, ["report", str(out)])
    _clean_exit_2(res, "metrics.json", "table.held_out.joint")


# ------------------------------------------------------------------------------------------------
# case 03: names from files are printed literally, control characters escaped
# ------------------------------------------------------------------------------------------------

def test_control_characters_in_a_stray_name_are_printed_escaped(tmp_path):
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC

    ds = tmp_path / "ds"
    generate(parse_spec(SPEC), ds)
    (ds / "train" / "x\x1b]0;pwned\x07y\x1b[2K").write_bytes(b"")
    res = runner.invoke(app, ["verify", str(ds)])
    assert res.exit_code == 1, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output, repr(res.output)
    assert "x\\x1b]0;pwned\\x07y\\x1b[2K: stray" in res.output
    res = runner.invoke(app, ["evaluate", str(ds / "test_id"), "--spec", str(ds), "--check-n", "0"])
    _clean_exit_2(res, "\\x1b]0;pwned")
    assert "\x1b" not in res.output


# ------------------------------------------------------------------------------------------------
# case 38: a damaged part file of an unfinished dataset is named, and a rerun finishes
# ------------------------------------------------------------------------------------------------

def interrupted_generation(tmp_path):
    """``(spec, dataset folder, its train part file)``: a small dataset generated, then its manifest
    set back to ``generating``, as if interrupted before finalize (its part files still stand)."""
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC

    spec = parse_spec(SPEC)
    ds = tmp_path / "ds"
    generate(spec, ds)
    man = json.loads((ds / "manifest.json").read_text())
    (ds / "manifest.json").write_text(json.dumps({**man, "status": "generating"}))
    return spec, ds, ds / ".mosaic" / "parts" / "train-000000.jsonl"


@pytest.mark.parametrize("head", [b"[" * 100_000, b"\xff\xfe", b"[1, 2]", b'{"start": 0, "stop": "x", "concepts": []}'],
                         ids=["deep", "not_utf8", "not_a_mapping", "wrong_types"])
def test_a_damaged_part_file_is_named_and_a_rerun_after_deleting_it_finishes(tmp_path, head):
    from mosaic.dataset import generate
    from mosaic.errors import DatasetError
    from mosaic.verify import verify

    spec, ds, part = interrupted_generation(tmp_path)
    body = part.read_bytes().split(b"\n", 1)[1]
    part.write_bytes(head + b"\n" + body)
    with pytest.raises(DatasetError, match="part file .*train-000000.jsonl is damaged"):
        generate(spec, ds)
    part.unlink()
    generate(spec, ds)
    assert verify(ds, deep=True).ok


# ------------------------------------------------------------------------------------------------
# case 39: a part file's records are the ones its header (and the leak check) counts
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit", ["labels", "held_out", "index"])
def test_an_edited_part_record_is_never_merged(tmp_path, edit):
    from mosaic.dataset import generate
    from mosaic.errors import DatasetError
    from mosaic.spec import parse_spec
    from mosaic.verify import verify
    from tests.test_diffusion import SPEC

    spec = parse_spec(SPEC)
    ds = tmp_path / "ds"
    generate(spec, ds)
    man = json.loads((ds / "manifest.json").read_text())
    (ds / "manifest.json").write_text(json.dumps({**man, "status": "generating"}))
    part = ds / ".mosaic" / "parts" / "train-000000.jsonl"
    lines = part.read_text().split("\n")
    rec = json.loads(lines[1])
    if edit == "labels":  # the held-out combination's labels on a training image
        rec["concepts"] = {"color": "blue", "shape": "square"}
    elif edit == "held_out":
        rec["held_out"] = True
    else:
        rec["index"] = 5
    lines[1] = json.dumps(rec, sort_keys=True)
    part.write_text("\n".join(lines))
    with pytest.raises(DatasetError, match="train-000000.jsonl is damaged .record 0"):
        generate(spec, ds)
    assert not verify(ds).ok  # still unfinished, never complete with the edited record
    part.unlink()
    generate(spec, ds)
    assert verify(ds, deep=True).ok
    assert json.loads((ds / "train" / "metadata.jsonl").read_text().splitlines()[0])["concepts"] != {"color": "blue", "shape": "square"}


# ------------------------------------------------------------------------------------------------
# case 40: finalize digests only the images as rendered
# ------------------------------------------------------------------------------------------------

def test_an_image_replaced_in_an_unfinished_dataset_is_never_digested(tmp_path):
    from mosaic.dataset import generate
    from mosaic.errors import DatasetError
    from mosaic.spec import parse_spec
    from mosaic.verify import verify
    from tests.test_diffusion import SPEC

    spec = parse_spec(SPEC)
    ds = tmp_path / "ds"
    generate(spec, ds)
    own = (ds / "train" / "images" / "000003.png").read_bytes()
    man = json.loads((ds / "manifest.json").read_text())
    (ds / "manifest.json").write_text(json.dumps({**man, "status": "generating"}))  # interrupted before finalize
    shutil.copyfile(ds / "test_ood" / "images" / "000000.png", ds / "train" / "images" / "000003.png")  # a held-out image
    with pytest.raises(DatasetError, match="000003.png is not the file mosaic rendered"):
        generate(spec, ds)
    assert not verify(ds).ok
    (ds / ".mosaic" / "parts" / "train-000000.jsonl").unlink()
    generate(spec, ds)
    assert verify(ds, deep=True).ok and (ds / "train" / "images" / "000003.png").read_bytes() == own


# ------------------------------------------------------------------------------------------------
# case 62: the latent cache is a split's own, of these weights
# ------------------------------------------------------------------------------------------------

def test_the_latent_cache_is_used_only_for_its_own_split_and_weights(tmp_path, ae_folder):
    import torch

    from mosaic.dataset import generate
    from mosaic.lab.autoencoder import load_space
    from mosaic.lab.diffusion.latent import cached_latents
    from mosaic.torch_data import MosaicDataset

    folder, _, spec = ae_folder
    folder = _copy(ae_folder, tmp_path)
    ds = tmp_path / "ds"
    generate(spec, ds)
    space = load_space(folder)
    train = MosaicDataset(ds, "train").images[:4]
    ood = MosaicDataset(ds, "test_ood").images[:4]
    z_train = cached_latents(space, ds, "train", train, say=lambda s: None)
    z_ood = cached_latents(space, ds, "test_ood", ood, say=lambda s: None)
    assert not torch.equal(z_train, z_ood)
    (cache,) = [p for p in (folder / "latents").iterdir()]
    encoded = []
    quiet = encoded.append
    assert torch.equal(cached_latents(space, ds, "train", train, say=quiet), z_train) and encoded == []  # its own: read
    shutil.copyfile(cache / "test_ood.safetensors", cache / "train.safetensors")  # held-out latents as the training split's
    assert torch.equal(cached_latents(space, ds, "train", train, say=quiet), z_train) and len(encoded) == 1
    (cache / "train.safetensors").write_bytes(b"\x00" * 10)  # damaged: encoded again, no traceback
    assert torch.equal(cached_latents(space, ds, "train", train, say=quiet), z_train) and len(encoded) == 2
    rec = json.loads((cache / "train.json").read_text())
    (cache / "train.json").write_text(json.dumps({**rec, "vae_sha256": "0" * 64}))  # latents of other weights
    cached_latents(space, ds, "train", train, say=quiet)
    assert len(encoded) == 3


# ------------------------------------------------------------------------------------------------
# case 66: an audit's marks count only against its own items
# ------------------------------------------------------------------------------------------------

def test_an_audit_file_without_its_items_is_never_counted(tmp_path):
    import yaml

    from mosaic.audit import audit_summary
    from tests.test_sweep import fake_trial

    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.yaml").write_text(yaml.safe_dump({"name": "mine", "kind": "diffusion", "config": "x.yaml",
                                                    "grid": {"training.lr": [0.001]}, "seeds": [0]}))
    t = fake_trial(out, {"training.lr": 0.001, "seed": 0}, "done", 0.5, 0.9)
    a = t / "run" / "audit"
    a.mkdir()
    marks = [{"id": i, "source": ".", "file_name": f"images/{i}.png", "mark": "correct"} for i in range(1000)]
    (a / "audit.json").write_text(json.dumps({"version": 1, "audit_id": "x", "marks": marks}))
    with pytest.raises(MosaicError, match="no items.json beside it"):
        audit_summary(a / "audit.json")
    res = runner.invoke(app, ["report", str(out)])
    assert res.exit_code == 0, res.output
    page = (out / "report" / "index.html").read_text()
    assert "Human audit" not in page and "1000 of 1000" not in page


# ------------------------------------------------------------------------------------------------
# case 80: a checkpoint's step is its own
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("step", [10**12, -1, True, 2], ids=["huge", "negative", "bool", "another"])
def test_a_checkpoint_claiming_another_step_is_damaged(tmp_path, step):
    import hashlib

    from mosaic.lab.diffusion import run_diffusion
    from tests.test_diffusion import SPEC as D_SPEC, config
    from mosaic.dataset import generate
    from mosaic.spec import parse_spec

    data = tmp_path / "data"
    generate(parse_spec(D_SPEC), data)
    run = tmp_path / "run"
    run_diffusion(config(run, data, steps=2, checkpoint_every=1), say=lambda s: None)
    shutil.rmtree(run / "checkpoints" / "checkpoint-0000002")
    shutil.rmtree(run / "final")
    for name in ("DONE", "metrics.json"):
        (run / name).unlink(missing_ok=True)
    ck = run / "checkpoints" / "checkpoint-0000001"
    ts = json.loads((ck / "trainer_state.json").read_text())
    body = json.dumps({**ts, "step": step}).encode()
    (ck / "trainer_state.json").write_bytes(body)
    rec = json.loads((ck / "checkpoint.json").read_text())
    rec["files"]["trainer_state.json"] = {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    (ck / "checkpoint.json").write_text(json.dumps(rec))  # the record agrees with the edited file
    with pytest.raises(TrainingError, match="trainer_state.json is damaged"):
        run_diffusion(config(run, data, steps=2, checkpoint_every=1), say=lambda s: None)
