"""Variants of the faults attack round 23 found (issue 23), written after their fixes: the same classes
reached by other values, so each fix holds at its mechanism, and the honest cases beside them pass.

- the leak check counted again (``mosaic.tally.leak_check_damage``): counts moved between two seen cells
  (sums and kinds unchanged) in an imagefolder; ``coverage`` or ``passed`` edited in a Parquet dataset; an
  exported dataset and a spec without a holdout verify clean;
- a run's figures derived again (``mosaic.evaluation.trial_scores``): one ``n`` edited; a verdict edited in
  ``predictions.jsonl`` under an unchanged ``metrics.json``; a samples folder gone;
- the latent cache spot check: every latent nudged by 1e-2 is encoded again, an untouched cache is used;
- what counts as an empty folder (``mosaic.dataset_folder.holds_files``);
- a linked ``--out`` of ``sample``; lock files a killed process left (empty, or a dead owner's record) are
  taken over, never refused;
- pixels every reader agrees on: a palette PNG with a transparent colour and an ``LA`` image are refused, an
  EXIF orientation of 1 is read.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import ok_cli as _ok, QUICK_SAMPLE, clean_exit_2, copy_dataset, edit_manifest

runner = CliRunner()
_clean_exit_2 = partial(clean_exit_2, collapse_space=True)


# ------------------------------------------------------------------------------------------------
# the leak check, counted again
# ------------------------------------------------------------------------------------------------

def _move_a_count(m):
    """One train sample moved from one seen cell's count to another's: sums and cell kinds unchanged."""
    train = m["leak_check"]["counts"]["train"]
    a = next(k for k, n in train.items() if n >= 1)
    b = next(k for k in train if k != a)
    train[a] -= 1
    train[b] += 1


def test_counts_moved_between_seen_cells_are_found_in_an_imagefolder(made, tmp_path):
    ds = copy_dataset(made, tmp_path)
    edit_manifest(ds, _move_a_count)
    r = runner.invoke(app, ["verify", str(ds)])
    assert r.exit_code in (1, 2) and "Traceback" not in r.output, r.output
    assert "leak_check.counts is not the tally" in " ".join(r.output.split()), r.output
    r = runner.invoke(app, ["verify", str(ds), "--repair"])
    assert r.exit_code != 0 and "leak_check" in r.output  # never written into the card as if measured


@pytest.mark.parametrize("edit", [lambda lc: lc.__setitem__("coverage", 0.5), lambda lc: lc.__setitem__("passed", False),
                                  lambda lc: lc["counts"]["val"].update({k: v + 1 for k, v in lc["counts"]["val"].items()})],
                         ids=["coverage", "passed", "val-count-sum"])
def test_a_parquet_datasets_leak_check_is_checked_against_its_spec(made, tmp_path, edit):
    pq = tmp_path / "pq"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    edit_manifest(pq, lambda m: edit(m["leak_check"]))
    r = runner.invoke(app, ["verify", str(pq)])
    assert r.exit_code in (1, 2) and "leak_check" in r.output, r.output


def test_exported_and_holdout_free_datasets_verify_clean(made, tmp_path):
    pq, back = tmp_path / "pq", tmp_path / "back"
    _ok(["export", made[1], "-f", "parquet", "-o", pq])
    _ok(["export", pq, "-f", "imagefolder", "-o", back])
    for ds in (pq, back):
        _ok(["verify", ds])
    spec = tmp_path / "free.yaml"
    spec.write_text("name: free\nimage: {size: 16}\nconcepts:\n  color: {values: [red, green]}\nobjects:\n"
                    "  - {name: o, shape: circle, color: {concept: color}, size: 0.5}\nsplits: {train: 6, val: 2, test: 2}\n")
    _ok(["generate", spec, "--out", tmp_path / "free"])
    _ok(["verify", tmp_path / "free"])


# ------------------------------------------------------------------------------------------------
# a run's figures, derived again under `mosaic report`
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    from tests.conftest import two_trial_sweep

    return two_trial_sweep(tmp_path_factory, "v23sw")


def _trial(swept, tmp_path):
    sw = tmp_path / "sw"
    shutil.copytree(swept[1], sw, symlinks=True)
    t = sorted((sw / "trials").iterdir())[0]
    (samples,) = [p for p in (t / "run" / "samples").iterdir() if (p / "metrics.json").is_file()]
    return sw, t, samples


def test_report_refuses_a_scores_n_edited_alone(swept, tmp_path):
    sw, t, _ = _trial(swept, tmp_path)
    p = t / "run" / "metrics.json"
    m = json.loads(p.read_text())
    m["scores"]["seen"]["n"] += 1
    m["table"]["seen"]["n"] += 1
    p.write_text(json.dumps(m))
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "metrics.json")


def test_report_refuses_a_verdict_edited_in_predictions(swept, tmp_path):
    sw, t, samples = _trial(swept, tmp_path)
    p = samples / "predictions.jsonl"
    rows = [json.loads(ln) for ln in p.read_text().splitlines()]
    rows[0]["read"] = dict(rows[0]["intended"]) if not rows[0]["correct"] else {c: None for c in rows[0]["intended"]}
    rows[0]["correct"] = not rows[0]["correct"]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "predictions.jsonl")


def test_report_refuses_figures_whose_samples_folder_is_gone(swept, tmp_path):
    sw, _, samples = _trial(swept, tmp_path)
    shutil.rmtree(samples)
    _clean_exit_2(runner.invoke(app, ["report", str(sw)]), "metrics.json")


def test_report_of_a_moved_sweep_checks_each_trials_own_samples(swept, tmp_path):
    """No false alarm: ``samples.out`` names the original place; the copy's own folder is read."""
    sw, _, _ = _trial(swept, tmp_path)
    moved = tmp_path / "moved"
    sw.rename(moved)
    _ok(["report", moved])


# ------------------------------------------------------------------------------------------------
# the latent cache's spot check
# ------------------------------------------------------------------------------------------------

def test_nudged_latents_are_encoded_again_and_an_untouched_cache_is_used(tmp_path_factory, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    from mosaic.dataset import generate
    from mosaic.lab.autoencoder import load_space
    from mosaic.lab.diffusion.latent import cached_latents
    from mosaic.torch_data import MosaicDataset
    from tests.conftest import tiny_autoencoder

    folder, _, spec, _ = tiny_autoencoder(tmp_path_factory, "v23ae", steps=2)
    ds = tmp_path / "ds"
    generate(spec, ds)
    space = load_space(folder)
    imgs = MosaicDataset(ds, "train").images[:6]
    said = []
    z = cached_latents(space, ds, "train", imgs, say=said.append)
    assert len(said) == 1
    assert torch.equal(cached_latents(space, ds, "train", imgs, say=said.append), z) and len(said) == 1  # a hit
    (cache,) = list((folder / "latents").iterdir())
    f = cache / "train.safetensors"
    save_file({"latents": load_file(str(f))["latents"] + 1e-2}, str(f))
    rec = json.loads((cache / "train.json").read_text())
    import hashlib

    rec["sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    (cache / "train.json").write_text(json.dumps(rec))
    assert torch.allclose(cached_latents(space, ds, "train", imgs, say=said.append), z) and len(said) == 2  # encoded again


# ------------------------------------------------------------------------------------------------
# empty folders, linked outputs, lock files
# ------------------------------------------------------------------------------------------------

def test_holds_files_sees_anything_but_empty_folders(tmp_path):
    from mosaic.dataset_folder import holds_files

    d = tmp_path / "d"
    (d / "a" / "b").mkdir(parents=True)
    (d / "c").mkdir()
    assert not holds_files(d)
    (d / "a" / "b" / "link").symlink_to(tmp_path)
    assert holds_files(d)
    (d / "a" / "b" / "link").unlink()
    os.mkfifo(d / "c" / "pipe")
    assert holds_files(d)


def test_sample_refuses_an_out_that_is_a_link(drun, tmp_path):
    target = tmp_path / "theirs"
    target.mkdir()
    (tmp_path / "link").symlink_to(target, target_is_directory=True)
    r = runner.invoke(app, ["sample", str(drun[0]), *QUICK_SAMPLE, "--out", str(tmp_path / "link")])
    _clean_exit_2(r, "symbolic link")
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("content", [b"", b'{"pid": 999999999, "host": "elsewhere", "since": 0}'], ids=["empty", "dead-owner"])
def test_a_lock_file_a_killed_process_left_is_taken_over(made, tmp_path, content):
    (tmp_path / ".ds.lock").write_bytes(content)
    _ok(["generate", made[0], "--out", tmp_path / "ds"])
    _ok(["verify", tmp_path / "ds"])


# ------------------------------------------------------------------------------------------------
# pixels every reader agrees on
# ------------------------------------------------------------------------------------------------

def _folder_with_first(made, tmp_path, write) -> Path:
    from PIL import Image

    src = made[1] / "test_ood"
    f = tmp_path / "f"
    (f / "images").mkdir(parents=True)
    recs = []
    for k, line in enumerate((src / "metadata.jsonl").read_text().splitlines()):
        r = json.loads(line)
        if k == 0:
            write(Image.open(src / r["file_name"]).convert("RGB"), f / r["file_name"])
        else:
            shutil.copy(src / r["file_name"], f / r["file_name"])
        recs.append({"file_name": r["file_name"], "concepts": r["concepts"]})
    (f / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return f


def _palette_transparent(im, path):
    p = im.convert("P")
    p.info["transparency"] = p.getpixel((0, 0))
    p.save(path, transparency=p.getpixel((0, 0)))


def _la_half(im, path):
    la = im.convert("LA")
    la.putalpha(128)
    la.save(path)


def _exif_one(im, path):
    from PIL import Image

    ex = Image.Exif()
    ex[0x0112] = 1
    im.save(path, exif=ex.tobytes())


@pytest.mark.parametrize("write,ok", [(_palette_transparent, False), (_la_half, False), (_exif_one, True)],
                         ids=["palette-transparent", "la-half-alpha", "exif-orientation-1"])
def test_images_whose_pixels_readers_agree_on_are_read_and_the_others_refused(made, tmp_path, write, ok):
    f = _folder_with_first(made, tmp_path, write)
    r = runner.invoke(app, ["evaluate", str(f), "--spec", str(made[1]), "--check-n", "0"])
    if ok:
        assert r.exit_code == 0, r.output
    else:
        _clean_exit_2(r, "transparent")
